//! Memory shared between clients (issue 23, ABI 1.4 EXPORT_MEMORY / IMPORT_MEMORY), on every
//! backend: an export's token lets exactly the clients it names import the allocation, an
//! import reaches the same bytes at the same device address, and the exporter's free
//! revokes every import (the importer's tasks then fault, and nothing reaches the memory's
//! next owner). Two processes: `mockd_acceptance.rs` and `kernel.rs`.
#![forbid(unsafe_code)]

use std::time::Duration;

use davinci_shim::{task, DeviceMem, Errno, ExportTo, ExportToken, Features};
use davinci_tests::second_client;
use davinci_uapi::{HandleArgs, Wire, DRIVER_CMD_FREE_MEMORY};

use super::isolation::shared_pair;
use super::T;

#[test]
fn an_import_reaches_the_exporters_bytes_both_ways() {
    let (_shared, a, b) = shared_pair();
    assert!(a.features().contains(Features::SHARED_MEMORY));
    let theirs = a.alloc(8192).unwrap();
    theirs.write_slice(0, &[5u32; 2048]).unwrap();
    let token = theirs.export(ExportTo::SameUser).unwrap();
    assert_eq!(
        theirs.export(ExportTo::SameUser).unwrap(),
        token,
        "exporting again gives the same token"
    );
    let mine = b.import(token).unwrap();
    assert!(mine.is_imported());
    assert_eq!(
        (mine.dev_addr(), mine.len()),
        (theirs.dev_addr(), 8192),
        "the same device address and length"
    );
    assert_eq!(mine.read_vec::<u32>(0, 4).unwrap(), [5; 4], "the host view");
    // B's tasks read and write it; A sees B's writes.
    let out = b.alloc(8192).unwrap();
    let mut s = b.create_context().unwrap().create_stream().unwrap();
    s.submit(&task::copy(&out, &mine).unwrap()).unwrap();
    s.submit(&task::fill(&mine, 9).unwrap()).unwrap();
    s.synchronize(T).unwrap();
    assert_eq!(out.read_vec::<u32>(0, 4).unwrap(), [5; 4]);
    assert_eq!(theirs.read_vec::<u32>(8188 / 4 * 4, 1).unwrap(), [9]);
    // A client cannot import its own memory, nor import twice.
    assert!(a.import(token).unwrap_err().is(Errno::EINVAL));
    assert!(b.import(token).unwrap_err().is(Errno::EBUSY));
    // Dropping the import leaves the memory to its owner; B may import it again.
    drop(mine);
    assert_eq!(theirs.read_vec::<u32>(0, 1).unwrap(), [9]);
    let again = b.import(token).unwrap();
    assert_eq!(again.read_vec::<u32>(0, 1).unwrap(), [9]);
}

#[test]
fn only_the_clients_an_export_names_may_import_it() {
    let (_shared, a, b) = shared_pair();
    let buf = a.alloc(4096).unwrap();
    let c = second_client(&a).unwrap();
    // To one client: that one only.
    let client_id = b.client_id().expect("ABI 1.1 client ids");
    let token = buf
        .export(ExportTo::Client {
            uid: None,
            client_id,
        })
        .unwrap();
    let e = c.import(token).unwrap_err();
    assert!(e.is(Errno::ENOENT), "another client imported: {e}");
    b.import(token).unwrap();
    // Another grant of the same allocation (ABI 1.5): another export, which c imports; the
    // first still names b alone.
    let to_all = buf.export(ExportTo::SameUser).unwrap();
    assert_ne!(to_all, token);
    c.import(to_all).unwrap();
    assert!(c.import(token).unwrap_err().is(Errno::ENOENT));
    // To another user: not this one's clients (the same answer as no such token).
    let other = a.alloc(4096).unwrap();
    let foreign = other.export(ExportTo::User(4242)).unwrap();
    let e = b.import(foreign).unwrap_err();
    assert!(e.is(Errno::ENOENT), "{e}");
    // Tokens are not guessable from neighbours: the one next to a real one names nothing.
    for t in [
        ExportToken(token.0 ^ 1 << 32),
        ExportToken(0),
        ExportToken(u64::MAX),
    ] {
        assert!(b.import(t).unwrap_err().is(Errno::ENOENT), "{t}");
    }
    assert!("not hex"
        .parse::<ExportToken>()
        .unwrap_err()
        .is(Errno::EINVAL));
}

#[test]
fn the_exporters_free_revokes_every_import() {
    let (_shared, a, b) = shared_pair();
    let base = a.memory_used().unwrap();
    let buf = a.alloc(64 << 10).unwrap();
    let token = buf.export(ExportTo::SameUser).unwrap();
    let mine = b.import(token).unwrap();
    let addr = mine.dev_addr();
    assert!(!mine.is_revoked().unwrap(), "the import stands");
    assert!(
        !buf.is_revoked().unwrap(),
        "an own allocation is never revoked"
    );
    drop(buf);
    assert!(
        mine.is_revoked().unwrap(),
        "the exporter's free revoked the import"
    );
    assert_eq!(
        a.memory_used().unwrap(),
        base,
        "the memory went back with the exporter's free"
    );
    // The token names nothing any more; B's tasks on the old address fault, and the next
    // allocation there (same memory, another address) is untouched.
    assert!(b.import(token).unwrap_err().is(Errno::ENOENT));
    let next = a.alloc(64 << 10).unwrap();
    next.write_slice(0, &[7u32; 16]).unwrap();
    let mut s = b.create_context().unwrap().create_stream().unwrap();
    s.submit(&task::fill(&mine, 0xbad).unwrap()).unwrap();
    let e = s.synchronize(T).unwrap_err();
    assert!(e.is(Errno::EIO) && e.message().contains("EACCES"), "{e}");
    assert_eq!(next.read_vec::<u32>(0, 16).unwrap(), [7; 16]);
    assert_ne!(next.dev_addr(), addr);
    drop(mine); // its FREE_MEMORY finds nothing: harmless
    std::thread::sleep(Duration::from_millis(10));
}

/// A revoked export's stale mappings on the mock device (docs/abi.md section 4), as on the
/// kernel (kernel/mappings.rs): the exporter's own host view of memory it freed and the
/// importer's of the revoked import both die of SIGBUS at their next load, so no byte passes
/// between them through it; the importer learns of the revocation from `is_revoked`, its
/// tasks are refused, and the memory's next owner sees nothing. Each load runs in a child,
/// this test binary run again for this test alone, which must die of SIGBUS.
#[test]
fn a_revoked_exports_stale_mappings_die_of_sigbus_on_both_sides() {
    if !matches!(davinci_tests::backend_name().as_str(), "embedded" | "mockd") {
        return; // the kernel: SIGBUS, tested in a child process by kernel/mappings.rs
    }
    if let Ok(side) = std::env::var(STALE_LOAD) {
        stale_load(&side);
    }
    let name = format!(
        "{}::a_revoked_exports_stale_mappings_die_of_sigbus_on_both_sides",
        module_path!().split_once("::").map_or("", |(_, m)| m)
    );
    for side in ["exporter", "importer"] {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([name.as_str(), "--exact", "--test-threads=1", "--nocapture"])
            .env(STALE_LOAD, side)
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(nix::sys::signal::Signal::SIGBUS as i32),
            "{side}: the stale load must die of SIGBUS, not {}; its output:\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // What the parent checks with no stale load: the importer's tasks, the next owner.
    let (_shared, a, b) = shared_pair();
    let buf = a.alloc(4096).unwrap();
    buf.write_slice(0, &[0x5eedu32; 8]).unwrap();
    let mine = b.import(buf.export(ExportTo::SameUser).unwrap()).unwrap();
    drop(buf);
    assert!(mine.is_revoked().unwrap());
    let next = a.alloc(4096).unwrap();
    assert_eq!(
        next.read_vec::<u32>(0, 8).unwrap(),
        [0; 8],
        "the next owner sees nothing"
    );
    let mut s = b.create_context().unwrap().create_stream().unwrap();
    s.submit(&task::fill(&mine, 1).unwrap()).unwrap();
    let e = s.synchronize(T).unwrap_err();
    assert!(e.is(Errno::EIO) && e.message().contains("EACCES"), "{e}");
}

/// The child's side of the test above (`exporter` or `importer`): a load through a stale
/// mapping of a revoked export, which must not return.
const STALE_LOAD: &str = "DAVINCI_TEST_STALE_LOAD";

fn stale_load(side: &str) -> ! {
    let (_shared, a, b) = shared_pair();
    let buf = a.alloc(4096).unwrap();
    buf.write_slice(0, &[0x5eedu32; 8]).unwrap();
    let mine = b.import(buf.export(ExportTo::SameUser).unwrap()).unwrap();
    assert_eq!(mine.read_vec::<u32>(0, 8).unwrap(), [0x5eed; 8]);
    let stale = if side == "exporter" {
        // FREE_MEMORY straight to the driver: the exporter's buffer keeps its host view.
        let h = HandleArgs {
            handle: buf.handle(),
            pad: 0,
        };
        let mut arg = vec![0u8; HandleArgs::SIZE];
        h.encode(&mut arg);
        a.raw_ioctl(DRIVER_CMD_FREE_MEMORY, &mut arg).unwrap();
        assert!(mine.is_revoked().unwrap());
        buf
    } else {
        drop(buf);
        assert!(mine.is_revoked().unwrap());
        mine
    };
    eprintln!("{side}: loading through the stale mapping");
    let got = stale.read_vec::<u32>(0, 8);
    panic!("{side}: a load through a revoked export's stale mapping returned {got:?}");
}

/// Exports as fds (ABI 1.5, `DAVINCI_FEAT_EXPORT_FD`): where the device makes them (the
/// kernel module's devices, which must), another client imports through the fd, and the
/// export is reached no other way; where it does not (davinci-mockd, the embedded mock), the
/// request is refused as a 1.4 driver refuses the flag (`EINVAL`), saying why, and the token
/// path is untouched. Passing the fd to another process: `kernel/export_fds.rs`.
#[test]
fn an_export_is_an_fd_where_the_device_makes_them_and_refused_with_why_elsewhere() {
    use std::os::fd::AsFd;
    let (_shared, a, b) = shared_pair();
    let buf = a.alloc(4096).unwrap();
    buf.write_slice(0, &[11u32; 4]).unwrap();
    let kernel = davinci_tests::backend_name().starts_with("/dev/");
    if !a.features().contains(Features::EXPORT_FD) {
        assert!(!kernel, "the kernel module's devices make export fds");
        let e = buf.export_fd(ExportTo::SameUser).unwrap_err();
        assert!(e.is(Errno::EINVAL), "{e}");
        assert!(e.to_string().contains("no export fds"), "{e}");
        // Asked raw, past the library's check: the device says the same.
        let mut raw = davinci_uapi::ExportMemoryArgs {
            handle: buf.handle(),
            flags: davinci_uapi::EXPORT_FLAG_FD,
            uid: davinci_uapi::EXPORT_OWN_UID,
            ..Default::default()
        };
        let mut bytes = [0u8; davinci_uapi::ExportMemoryArgs::SIZE];
        raw.encode(&mut bytes);
        let e = a
            .raw_ioctl(davinci_uapi::DRIVER_CMD_EXPORT_MEMORY, &mut bytes)
            .unwrap_err();
        assert!(e.is(Errno::EINVAL), "{e}");
        raw = davinci_uapi::ExportMemoryArgs::decode(&bytes);
        assert_eq!(raw.token, 0, "nothing exported");
        // The token path as before.
        let t = buf.export(ExportTo::SameUser).unwrap();
        assert_eq!(b.import(t).unwrap().read_vec::<u32>(0, 1).unwrap(), [11]);
        return;
    }
    let fd = buf.export_fd(ExportTo::SameUser).unwrap();
    // Exported by token as well, that is another export (ABI 1.5: several exports of one
    // allocation), with a token of its own; the fd's export is still reached by the fd alone.
    let by_token = buf.export(ExportTo::SameUser).unwrap();
    assert_ne!(by_token.0, 0);
    let mine = b.import_fd(fd.as_fd()).unwrap();
    assert_eq!(mine.read_vec::<u32>(0, 4).unwrap(), [11; 4]);
    assert_eq!(mine.dev_addr(), buf.dev_addr());
    assert!(
        b.import_fd(fd.as_fd()).unwrap_err().is(Errno::EBUSY),
        "twice"
    );
    assert!(
        a.import_fd(fd.as_fd()).unwrap_err().is(Errno::EINVAL),
        "its own"
    );
}
