//! Memory shared between clients (issue 23, ABI 1.4 EXPORT_MEMORY / IMPORT_MEMORY), on every
//! backend: an export's token lets exactly the clients it names import the allocation, an
//! import reaches the same bytes at the same device address, and the exporter's free
//! revokes every import (the importer's tasks then fault, and nothing reaches the memory's
//! next owner). Two processes: `mockd_acceptance.rs` and `kernel.rs`.
#![forbid(unsafe_code)]

use std::time::Duration;

use davinci_shim::{task, DeviceMem, Errno, ExportTo, ExportToken, Features};
use davinci_tests::second_client;

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
    // Another grant of the same allocation: refused, the first stays.
    assert!(buf.export(ExportTo::SameUser).unwrap_err().is(Errno::EBUSY));
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

/// What a host view of a revoked import does on the mock device (docs/abi.md section 4): a
/// load reads zeros and a store lands nowhere the device or the memory's next owner reads;
/// the importer learns of the revocation from `is_revoked`. (On the kernel driver the same
/// access raises SIGBUS: kernel.rs.)
#[test]
fn a_revoked_import_on_the_mock_reads_zeros_and_reaches_nothing() {
    if !matches!(davinci_tests::backend_name().as_str(), "embedded" | "mockd") {
        return; // the kernel: SIGBUS, tested in a child process by kernel.rs
    }
    let (_shared, a, b) = shared_pair();
    let buf = a.alloc(4096).unwrap();
    buf.write_slice(0, &[0x5eedu32; 8]).unwrap();
    let mine = b.import(buf.export(ExportTo::SameUser).unwrap()).unwrap();
    assert_eq!(mine.read_vec::<u32>(0, 8).unwrap(), [0x5eed; 8]);
    drop(buf);
    assert!(mine.is_revoked().unwrap());
    assert_eq!(
        mine.read_vec::<u32>(0, 8).unwrap(),
        [0; 8],
        "a load reads zeros"
    );
    mine.write_slice(0, &[0xbadu32; 8]).unwrap();
    let next = a.alloc(4096).unwrap();
    assert_eq!(
        next.read_vec::<u32>(0, 8).unwrap(),
        [0; 8],
        "the next owner sees nothing"
    );
    // The device refuses the importer's tasks on it.
    let mut s = b.create_context().unwrap().create_stream().unwrap();
    s.submit(&task::fill(&mine, 1).unwrap()).unwrap();
    let e = s.synchronize(T).unwrap_err();
    assert!(e.is(Errno::EIO) && e.message().contains("EACCES"), "{e}");
}
