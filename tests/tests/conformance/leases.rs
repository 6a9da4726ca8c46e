//! Export leases and ranges (issue 44, ABI 1.5 `DAVINCI_FEAT_EXPORT_LEASE`) on every
//! backend: a leased buffer's data stays valid after its exporter drops it, until the last
//! importer frees its import (charged to the exporter meanwhile, as LIST_CLIENTS and
//! GET_USAGE show); the exporter's close still reclaims everything and revokes the imports;
//! a pool block is exported alone (not its chunk), and a block held by a lease is not reused
//! until its import goes. One device for the whole file where it can (the mockd backend
//! gives a test process at most 128 fresh devices).
#![forbid(unsafe_code)]

use davinci_shim::{
    task, Device, DeviceMem, Errno, ExportTo, Features, Lifetime, MemPool, PoolOptions, TaskDesc,
};
use davinci_tests::descs::SubmitDescs;
use davinci_tests::{control_of, second_client};

use super::isolation::shared_pair;
use super::T;

/// This client's memory as an operator sees it (LIST_CLIENTS).
fn listed_memory(of: &Device) -> u64 {
    let id = of.client_id().unwrap();
    control_of(of)
        .unwrap()
        .clients()
        .unwrap()
        .into_iter()
        .find(|c| c.client_id == id)
        .map_or(0, |c| c.memory_bytes)
}

/// One FILL of `len` bytes at `addr` by `dev` on a new stream: `Ok` or the stream's error.
fn fill_at(dev: &Device, addr: u64, len: u64) -> davinci_shim::Result<()> {
    let mut s = dev.create_context()?.create_stream()?;
    s.submit_desc(&TaskDesc::fill(
        1,
        davinci_shim::DevAddr(addr),
        len,
        0x0bad_0bad,
    ))?;
    s.synchronize(T)
}

/// Every case on one device, in turn (the device's memory in use is compared before and
/// after each; the mockd backend has 128 fresh devices for the whole suite).
#[test]
fn leases_ranges_and_unexport() {
    let (_shared, a, b) = shared_pair();
    a_leased_buffer_outlives_its_exporters_free_until_the_last_import_goes(&a, &b);
    the_exporters_close_reclaims_a_lease_and_its_importers_get_a_clear_error(&a, &b);
    a_pool_block_is_exported_alone_and_a_leased_block_is_not_reused_until_its_import_goes(&a, &b);
    a_range_export_and_unexport_of_a_buffer(&a, &b);
}

fn faulted(r: davinci_shim::Result<()>) -> bool {
    matches!(r, Err(e) if e.is(Errno::EIO) && e.message().contains("EACCES"))
}

fn a_leased_buffer_outlives_its_exporters_free_until_the_last_import_goes(a: &Device, b: &Device) {
    assert!(a.features().contains(Features::EXPORT_LEASE));
    let c = second_client(a).unwrap();
    let out = b.alloc(256 << 10).unwrap();
    // The device's memory in use, and the exporter's as LIST_CLIENTS reports it.
    let base = (a.memory_used().unwrap(), listed_memory(a));
    let buf = a.alloc(256 << 10).unwrap();
    let items: Vec<u32> = (0..64 << 10).collect();
    buf.write_slice(0, &items).unwrap();
    let token = buf.export_lease(ExportTo::SameUser).unwrap();
    assert_eq!(buf.export_lease(ExportTo::SameUser).unwrap(), token);
    let theirs = b.import(token).unwrap();
    let third = c.import(token).unwrap();
    let size = buf.capacity();

    // The sender lets go (a Ray object whose last reference died): the receivers keep it.
    drop(buf);
    assert!(!theirs.is_revoked().unwrap(), "a lease is not revoked");
    assert_eq!(theirs.read_vec::<u32>(0, 64 << 10).unwrap(), items);
    let mut s = b.create_context().unwrap().create_stream().unwrap();
    s.submit(&task::copy(&out, &theirs).unwrap()).unwrap();
    s.synchronize(T).unwrap();
    assert_eq!(out.read_vec::<u32>(0, 64 << 10).unwrap(), items);
    // Still charged to the exporter, as its own views and the operator's say.
    assert_eq!(a.memory_used().unwrap(), base.0 + size);
    assert_eq!(listed_memory(a), base.1 + size);
    // The token takes no new import once the exporter freed it.
    let d = second_client(a).unwrap();
    assert!(d.import(token).unwrap_err().is(Errno::ENOENT));

    drop(theirs);
    assert_eq!(third.read_vec::<u32>(0, 4).unwrap(), items[..4]);
    assert_eq!(a.memory_used().unwrap(), base.0 + size, "one import left");
    let addr = third.dev_addr().0;
    drop(third);
    // The last import went: the memory and its charge with it.
    assert_eq!(a.memory_used().unwrap(), base.0);
    assert_eq!(listed_memory(a), base.1);
    assert!(faulted(fill_at(&c, addr, 64)));
}

fn the_exporters_close_reclaims_a_lease_and_its_importers_get_a_clear_error(
    a: &Device,
    b: &Device,
) {
    let base = a.memory_used().unwrap();
    let sender = second_client(a).unwrap();
    let buf = sender.alloc(64 << 10).unwrap();
    buf.write_slice(0, &[9u32; 16]).unwrap();
    let theirs = b
        .import(buf.export_lease(ExportTo::SameUser).unwrap())
        .unwrap();
    drop(buf);
    assert_eq!(theirs.read_vec::<u32>(0, 16).unwrap(), [9; 16]);
    // The sender goes (a killed actor closes its device the same way).
    drop(sender);
    assert!(
        theirs.is_revoked().unwrap(),
        "revoked by the exporter's end"
    );
    assert!(faulted(fill_at(b, theirs.dev_addr().0, 64)));
    assert_eq!(a.memory_used().unwrap(), base, "every byte reclaimed");
}

fn a_pool_block_is_exported_alone_and_a_leased_block_is_not_reused_until_its_import_goes(
    a: &Device,
    b: &Device,
) {
    let page = a.info().page_size as usize;
    // Blocks of the default alignment are not whole pages: refused, saying what to do.
    let small = MemPool::new(a);
    let blk = small.alloc(256).unwrap();
    let e = blk.export(ExportTo::SameUser, Lifetime::Lease).unwrap_err();
    assert!(e.is(Errno::EINVAL) && e.message().contains("align"), "{e}");

    let pool = MemPool::with_options(a, PoolOptions::default().align(page));
    let first = pool.alloc(page).unwrap();
    let second = pool.alloc(2 * page).unwrap();
    first.write_slice(0, &[1u32; 4]).unwrap();
    second.write_slice(0, &[2u32; 4]).unwrap();
    let t = second.export(ExportTo::SameUser, Lifetime::Lease).unwrap();
    let theirs = b.import(t).unwrap();
    assert_eq!(
        (theirs.dev_addr(), theirs.len()),
        (second.dev_addr(), 2 * page)
    );
    assert_eq!(theirs.read_vec::<u32>(0, 4).unwrap(), [2; 4]);
    // The block alone: the importer's tasks on its neighbour fault, past its end too.
    assert!(faulted(fill_at(b, first.dev_addr().0, 64)));
    let past = fill_at(b, second.dev_addr().0, 3 * page as u64);
    assert!(
        matches!(&past, Err(e) if e.message().contains("ERANGE")),
        "{past:?}"
    );
    assert_eq!(first.read_vec::<u32>(0, 4).unwrap(), [1; 4]);

    // The block goes back to the pool while imported: held, not reused.
    let held_at = second.dev_addr();
    drop(second);
    assert_eq!(pool.stats().leased_blocks, 1);
    let others: Vec<_> = (0..4).map(|_| pool.alloc(2 * page).unwrap()).collect();
    assert!(others.iter().all(|o| o.dev_addr() != held_at));
    assert_eq!(theirs.read_vec::<u32>(0, 4).unwrap(), [2; 4]);
    drop(others);
    // Its import goes: the pool takes it back.
    drop(theirs);
    pool.trim();
    assert_eq!(pool.stats().leased_blocks, 0);
    let again = pool.alloc(2 * page).unwrap();
    assert_eq!(again.dev_addr(), held_at, "first fit finds the block again");

    // Without a lease, the block's return revokes its import.
    let t = again.export(ExportTo::SameUser, Lifetime::Revoke).unwrap();
    let theirs = b.import(t).unwrap();
    drop(again);
    assert!(theirs.is_revoked().unwrap());
    assert_eq!(pool.stats().leased_blocks, 0);
}

fn a_range_export_and_unexport_of_a_buffer(a: &Device, b: &Device) {
    let page = a.info().page_size as usize;
    let buf = a.alloc(4 * page).unwrap();
    let e = buf
        .export_range(100, page, ExportTo::SameUser, Lifetime::Revoke)
        .unwrap_err();
    assert!(e.is(Errno::EINVAL) && e.message().contains("page"), "{e}");
    let e = buf
        .export_range(3 * page, 2 * page, ExportTo::SameUser, Lifetime::Revoke)
        .unwrap_err();
    assert!(e.is(Errno::ERANGE), "{e}");
    let t = buf
        .export_range(page, page, ExportTo::SameUser, Lifetime::Revoke)
        .unwrap();
    let theirs = b.import(t).unwrap();
    assert_eq!(theirs.dev_addr(), buf.dev_addr() + page as u64);
    theirs.write_slice(0, &[3u32; 4]).unwrap();
    assert_eq!(buf.read_vec::<u32>(page, 4).unwrap(), [3; 4]);
    // Unexport: the import is revoked; the buffer stays the exporter's.
    assert_eq!(buf.unexport_range(page, page).unwrap(), 0);
    assert!(theirs.is_revoked().unwrap());
    assert!(b.import(t).unwrap_err().is(Errno::ENOENT));
    buf.write_slice(page, &[4u32; 4]).unwrap();
    // A lease of the whole: unexport says one import stands, until it goes.
    let whole = b
        .import(buf.export_lease(ExportTo::SameUser).unwrap())
        .unwrap();
    assert_eq!(buf.unexport().unwrap(), 1);
    assert_eq!(whole.read_vec::<u32>(page, 4).unwrap(), [4; 4]);
    drop(whole);
    assert_eq!(buf.unexport().unwrap(), 0);
}
