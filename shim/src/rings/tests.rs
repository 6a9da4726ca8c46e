//! The host's ends over ordinary memory this test owns (a file of three pages: command ring,
//! event ring, doorbell page), with no device: what ringing writes, and where.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use davinci_shm::SharedMapping;
use davinci_uapi::TaskDesc;

use super::{Part, StreamRings, Wake};

const PAGE: usize = 4096;
const BELL: u64 = 2 * PAGE as u64;

/// Three zeroed pages of a private (unlinked) file, mapped shared.
fn stream_memory() -> Arc<SharedMapping> {
    let path = std::env::temp_dir().join(format!(
        "davinci-shim-rings-{}-{:?}-{}",
        std::process::id(),
        std::thread::current().id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let f = std::fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f.set_len(3 * PAGE as u64).unwrap();
    Arc::new(SharedMapping::map(f.as_fd(), 0, 3 * PAGE).unwrap())
}

fn rings(map: &Arc<SharedMapping>, wake: Wake) -> Result<StreamRings, String> {
    let part = |i: usize| Part::within(map, i * PAGE, PAGE).unwrap();
    StreamRings::new(part(0), 16, part(1), 16, part(2), wake)
}

/// The doorbell page's words, as the device would read them.
fn bell_words(map: &SharedMapping) -> Vec<u32> {
    (0..PAGE as u64 / 4)
        .map(|i| map.word(BELL + 4 * i).unwrap().load(Ordering::Relaxed))
        .collect()
}

/// ABI 1.4: a hardware doorbell is rung by storing GET_INFO's `doorbell_value` at its
/// `doorbell_offset`, whatever the tail: nothing else in the page changes (not word 0, where
/// the 1.3 text put the tail: ivshmem's interrupt mask).
#[test]
fn an_mmio_doorbell_writes_the_devices_value_at_its_register() {
    let map = stream_memory();
    let value = 0x0003_0001;
    let mut r = rings(&map, Wake::Mmio { offset: 12, value }).unwrap();
    assert_eq!(r.push_slice(&[TaskDesc::nop(1), TaskDesc::nop(2)]), 2);
    r.publish();
    assert_eq!(r.tail(), 2);
    assert!(!r.ring_doorbell(), "no futex call for a register");
    let mut expect = vec![0u32; PAGE / 4];
    expect[3] = value;
    assert_eq!(bell_words(&map), expect);
    // Rung again with another tail: the same value, the same place.
    map.word(BELL + 12).unwrap().store(0, Ordering::Relaxed);
    assert_eq!(r.push_slice(&[TaskDesc::nop(3)]), 1);
    r.publish();
    r.ring_doorbell();
    assert_eq!(bell_words(&map), expect);
}

/// The last word of the page is a register too; one past it, a misaligned one, or one
/// beyond the mapping is refused when the stream is set up, with a message, not a panic.
#[test]
fn an_mmio_register_outside_the_doorbell_mapping_is_refused() {
    let map = stream_memory();
    let last = PAGE as u32 - 4;
    let r = rings(
        &map,
        Wake::Mmio {
            offset: last,
            value: 9,
        },
    )
    .unwrap();
    r.ring_doorbell();
    assert_eq!(bell_words(&map)[PAGE / 4 - 1], 9);
    for offset in [PAGE as u32, last + 2, 13, u32::MAX - 3, u32::MAX] {
        let err = rings(&map, Wake::Mmio { offset, value: 1 })
            .err()
            .unwrap_or_else(|| panic!("offset {offset} accepted"));
        assert!(
            err.contains("doorbell register") && err.contains("4096-byte doorbell mapping"),
            "{err}"
        );
    }
}

/// A software doorbell (the mock device's) is still the word at offset 0, incremented.
#[test]
fn a_futex_doorbell_increments_word_zero() {
    let map = stream_memory();
    let r = rings(&map, Wake::Futex).unwrap();
    assert!(r.ring_doorbell());
    assert!(r.ring_doorbell());
    let mut expect = vec![0u32; PAGE / 4];
    expect[0] = 2;
    assert_eq!(bell_words(&map), expect);
    // NOTIFY's streams leave the page alone.
    let map = stream_memory();
    let r = rings(&map, Wake::Notify).unwrap();
    assert!(!r.ring_doorbell());
    assert_eq!(bell_words(&map), vec![0u32; PAGE / 4]);
}
