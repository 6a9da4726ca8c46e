//! The guest's side of the device without a driver: finding QEMU's `ivshmem-doorbell` device
//! (vendor 0x1af4, device 0x1110) in `/sys/bus/pci/devices`, enabling its memory decoding and
//! mapping its BARs through sysfs (`resourceN`), as the QEMU smokes' guest programs do
//! (`ivshmem-guest`, `davinci-pcidev`'s `pcidev-guest`).
#![forbid(unsafe_code)]

use std::fs;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use davinci_shm::SharedMapping;

/// The device's PCI vendor id, as sysfs writes it.
pub const VENDOR: &str = "0x1af4";
/// The device's PCI device id, as sysfs writes it.
pub const DEVICE: &str = "0x1110";

/// The sysfs directory of the first `ivshmem-doorbell` device under `root`
/// (`/sys/bus/pci/devices` in a guest).
///
/// # Errors
/// `root` cannot be read, or holds no such device (the message says which).
pub fn find_device(root: &Path) -> Result<PathBuf, String> {
    let entries = fs::read_dir(root).map_err(|e| format!("{}: {e}", root.display()))?;
    for entry in entries.flatten() {
        let p = entry.path();
        let read = |f: &str| fs::read_to_string(p.join(f)).unwrap_or_default();
        if read("vendor").trim() == VENDOR && read("device").trim() == DEVICE {
            return Ok(p);
        }
    }
    Err(format!("no {VENDOR}:{DEVICE} device in {}", root.display()))
}

/// Turns the device's memory decoding on (no driver did it; writing 1 again is harmless).
///
/// # Errors
/// The `enable` file cannot be written.
pub fn enable(dev: &Path) -> Result<(), String> {
    fs::write(dev.join("enable"), "1").map_err(|e| format!("enable: {e}"))
}

/// BAR `n`'s size from the device's `resource` file (one `start end flags` line per BAR).
///
/// # Errors
/// No such line, a malformed one, or a BAR that is not assigned.
pub fn bar_size(dev: &Path, n: usize) -> Result<u64, String> {
    let text = fs::read_to_string(dev.join("resource")).map_err(|e| format!("resource: {e}"))?;
    let line = text
        .lines()
        .nth(n)
        .ok_or(format!("no line {n} in resource"))?;
    let mut f = line
        .split_whitespace()
        .map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16));
    let start = f.next().and_then(Result::ok).ok_or("bad resource line")?;
    let end = f.next().and_then(Result::ok).ok_or("bad resource line")?;
    if end <= start {
        return Err(format!("BAR{n} is not assigned ({line})"));
    }
    Ok(end - start + 1)
}

/// Maps `len` bytes of BAR `n` (its `resourceN` file), shared, read/write.
///
/// # Errors
/// The file cannot be opened or mapped (the message names it).
pub fn map_bar(dev: &Path, n: usize, len: usize) -> Result<SharedMapping, String> {
    let path = dev.join(format!("resource{n}"));
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    SharedMapping::map(file.as_fd(), 0, len).map_err(|e| format!("mmap {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake sysfs tree: one other device and one ivshmem-doorbell with two BARs listed,
    /// the second unassigned.
    #[test]
    fn finds_the_device_and_reads_its_bar_sizes() {
        let root = tempfile::tempdir().unwrap();
        let other = root.path().join("0000:00:01.0");
        let ivshmem = root.path().join("0000:00:04.0");
        for (d, vendor, device) in [(&other, "0x8086", "0x1237"), (&ivshmem, VENDOR, DEVICE)] {
            fs::create_dir(d).unwrap();
            fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
            fs::write(d.join("device"), format!("{device}\n")).unwrap();
        }
        fs::write(
            ivshmem.join("resource"),
            "0x00000000febf1000 0x00000000febf10ff 0x0000000000040200\n\
             0x0000000000000000 0x0000000000000000 0x0000000000000000\n",
        )
        .unwrap();
        assert_eq!(find_device(root.path()).unwrap(), ivshmem);
        assert_eq!(bar_size(&ivshmem, 0).unwrap(), 256);
        assert!(bar_size(&ivshmem, 1).unwrap_err().contains("not assigned"));
        assert!(bar_size(&ivshmem, 5).unwrap_err().contains("no line 5"));
        fs::remove_dir_all(&ivshmem).unwrap();
        assert!(find_device(root.path())
            .unwrap_err()
            .contains("no 0x1af4:0x1110"));
    }
}
