//! Export leases and ranges (ABI 1.5, `DAVINCI_FEAT_EXPORT_LEASE`) in driver-core: under a
//! lease the exporter's FREE_MEMORY leaves the memory to its imports until the last one goes
//! (charged to the exporter meanwhile, its handle naming nothing); the exporter's close
//! still reclaims everything; EXPORT_RANGE exports whole pages of an allocation, and an
//! import of one reaches those pages alone.

mod support;

use davinci_driver_core::{dva_offset, MmapTarget, Platform, Role, Run};
use davinci_uapi::*;
use support::*;

type Dev = davinci_driver_core::DeviceCore<davinci_driver_core::test_util::HeapPlatform>;

fn export_lease(dev: &mut Dev, c: u32, handle: u32) -> Result<u64, Errno> {
    let mut a = ExportMemoryArgs {
        handle,
        uid: EXPORT_OWN_UID,
        flags: EXPORT_FLAG_LEASE,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_EXPORT_MEMORY, &mut a).map(|_| a.token)
}

fn export_range(
    dev: &mut Dev,
    c: u32,
    handle: u32,
    (offset, len): (u64, u64),
    flags: u32,
) -> Result<u64, Errno> {
    let mut a = ExportRangeArgs {
        handle,
        flags,
        uid: EXPORT_OWN_UID,
        offset,
        len,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_EXPORT_RANGE, &mut a).map(|_| a.token)
}

fn unexport(dev: &mut Dev, c: u32, handle: u32, (offset, len): (u64, u64)) -> Result<u32, Errno> {
    let mut a = UnexportMemoryArgs {
        handle,
        offset,
        len,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_UNEXPORT_MEMORY, &mut a).map(|_| a.imports)
}

fn import(dev: &mut Dev, c: u32, token: u64) -> Result<ImportMemoryArgs, Errno> {
    let mut a = ImportMemoryArgs {
        token,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_IMPORT_MEMORY, &mut a).map(|_| a)
}

fn free(dev: &mut Dev, c: u32, handle: u32) -> Result<(), Errno> {
    let mut f = HandleArgs { handle, pad: 0 };
    call(dev, c, DRIVER_CMD_FREE_MEMORY, &mut f).map(|_| ())
}

/// Runs one FILL of `len` bytes at `addr` on a new stream of `c`: its status.
fn fill(dev: &mut Dev, c: u32, addr: u64, len: u64) -> i32 {
    let k = ctx(dev, c);
    let mut s = stream(dev, c, k, 16, 16);
    s.prod
        .push(&TaskDesc::fill(1, DevAddr(addr), len, 0x0707_0707))
        .unwrap();
    s.prod.publish();
    match dev.run_stream(s.handle, 64) {
        Run::Progress(1) => drain(&mut s)[0].status,
        Run::Failed(e) => -(e as i32),
        other => panic!("{other:?}"),
    }
}

/// The exports `c`'s tenant holds (GET_USAGE).
fn exports(dev: &mut Dev, c: u32) -> u32 {
    let mut u = Usage::default();
    call(dev, c, DRIVER_CMD_GET_USAGE, &mut u).unwrap();
    u.exports
}

fn read(dev: &mut Dev, owner: u32, addr: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0; len];
    dev.platform_mut()
        .mem_read(owner, dva_offset(addr).unwrap(), &mut b)
        .unwrap();
    b
}

#[test]
fn a_lease_keeps_the_memory_after_the_exporters_free_until_the_last_import_goes() {
    let mut dev = device();
    assert!(dev.info().features.contains(Features::EXPORT_LEASE));
    let (_root, a, _b) = shared_pair(&mut dev);
    let (a2, a3) = (
        dev.open(params(11, 1000, Role::Client)).unwrap(),
        dev.open(params(12, 1000, Role::Client)).unwrap(),
    );
    let before = dev.info().memory_used;
    let m = alloc(&mut dev, a, 8192);
    let off = dva_offset(m.dev_addr).unwrap();
    dev.platform_mut().mem_write(a, off, &[5u8; 64]).unwrap();
    let t = export_lease(&mut dev, a, m.handle).unwrap();
    assert_eq!(export_lease(&mut dev, a, m.handle), Ok(t), "the same again");
    let i2 = import(&mut dev, a2, t).unwrap();
    let i3 = import(&mut dev, a3, t).unwrap();

    dev.platform_mut().revoked.clear();
    free(&mut dev, a, m.handle).unwrap();
    // Only the exporter's own mapping went; the memory stays, charged to the exporter.
    assert_eq!(
        dev.platform().revoked,
        vec![(a, m.mmap_offset, m.alloc_size)]
    );
    assert_eq!(dev.info().memory_used, before + m.alloc_size);
    let ua = dev.client_usage(a).unwrap();
    assert_eq!((ua.allocations, ua.memory_bytes), (1, m.alloc_size));
    // The exporter's handle names nothing any more: free, export, mmap, descriptors.
    assert_eq!(free(&mut dev, a, m.handle), Err(Errno::ENOENT));
    assert_eq!(export_lease(&mut dev, a, m.handle), Err(Errno::ENOENT));
    assert_eq!(
        dev.mmap_target(a, m.mmap_offset, 4096)
            .err()
            .map(|e| e.errno),
        Some(Errno::ENOENT)
    );
    assert_eq!(fill(&mut dev, a, m.dev_addr, 64), -(Errno::EACCES as i32));
    // No new import of a freed lease.
    let a4 = dev.open(params(13, 1000, Role::Client)).unwrap();
    assert_eq!(import(&mut dev, a4, t).err(), Some(Errno::ENOENT));
    // The importers still reach the data, and write it.
    assert_eq!(read(&mut dev, a, i2.dev_addr, 64), vec![5u8; 64]);
    assert_eq!(fill(&mut dev, a2, i2.dev_addr + 64, 64), 0);
    assert_eq!(read(&mut dev, a, i3.dev_addr + 64, 4), vec![7u8; 4]);
    assert!(dev.mmap_target(a3, i3.mmap_offset, 8192).is_ok());

    free(&mut dev, a2, i2.handle).unwrap();
    assert_eq!(dev.info().memory_used, before + m.alloc_size, "a3 holds it");
    dev.platform_mut().revoked.clear();
    free(&mut dev, a3, i3.handle).unwrap();
    // The last import went: the memory, its charge and the export with it.
    assert_eq!(dev.info().memory_used, before);
    let ua = dev.client_usage(a).unwrap();
    assert_eq!((ua.allocations, ua.memory_bytes), (0, 0));
    assert_eq!(exports(&mut dev, a), 0);
    assert_eq!(
        dev.platform().revoked,
        vec![(a3, i3.mmap_offset, i3.size)],
        "the exporter's mapping was revoked at its free, not again"
    );
    assert_eq!(fill(&mut dev, a3, i3.dev_addr, 64), -(Errno::EACCES as i32));
}

#[test]
fn a_lease_nobody_imported_goes_with_the_free_and_a_plain_export_still_revokes() {
    let mut dev = device();
    let (_root, a, _b) = shared_pair(&mut dev);
    let a2 = dev.open(params(11, 1000, Role::Client)).unwrap();
    let before = dev.info().memory_used;
    let m = alloc(&mut dev, a, 4096);
    export_lease(&mut dev, a, m.handle).unwrap();
    free(&mut dev, a, m.handle).unwrap();
    assert_eq!(dev.info().memory_used, before);
    assert_eq!(exports(&mut dev, a), 0);

    // One allocation, a lease and a plain export (two grants of it): the free revokes the
    // plain export's import and leaves the lease's.
    let m = alloc(&mut dev, a, 4096);
    let lease = export_lease(&mut dev, a, m.handle).unwrap();
    let plain = export_range(&mut dev, a, m.handle, (0, 4096), 0).unwrap();
    assert_ne!(lease, plain);
    let a3 = dev.open(params(12, 1000, Role::Client)).unwrap();
    let by_lease = import(&mut dev, a2, lease).unwrap();
    let by_plain = import(&mut dev, a3, plain).unwrap();
    free(&mut dev, a, m.handle).unwrap();
    assert_eq!(free(&mut dev, a3, by_plain.handle), Err(Errno::ENOENT));
    assert_eq!(dev.client_usage(a3).unwrap().allocations, 0);
    assert_eq!(fill(&mut dev, a2, by_lease.dev_addr, 4096), 0);
    dev.close(a2);
    assert_eq!(
        dev.info().memory_used,
        before,
        "the importer's close ends it"
    );
}

#[test]
fn the_exporters_close_reclaims_leased_memory_and_revokes_its_imports() {
    let mut dev = device();
    let (_root, a, _b) = shared_pair(&mut dev);
    let a2 = dev.open(params(11, 1000, Role::Client)).unwrap();
    let before = dev.info().memory_used;
    // One freed (released to its lease), one still the exporter's.
    let m = alloc(&mut dev, a, 4096);
    let n = alloc(&mut dev, a, 4096);
    let tm = export_lease(&mut dev, a, m.handle).unwrap();
    let tn = export_lease(&mut dev, a, n.handle).unwrap();
    let im = import(&mut dev, a2, tm).unwrap();
    let inn = import(&mut dev, a2, tn).unwrap();
    free(&mut dev, a, m.handle).unwrap();
    dev.platform_mut().revoked.clear();
    dev.close(a);
    assert_eq!(dev.info().memory_used, before);
    let revoked = &dev.platform().revoked;
    for i in [&im, &inn] {
        assert!(
            revoked.contains(&(a2, i.mmap_offset, i.size)),
            "{revoked:?}"
        );
    }
    assert_eq!(dev.client_usage(a2).unwrap().allocations, 0);
    assert_eq!(fill(&mut dev, a2, im.dev_addr, 64), -(Errno::EACCES as i32));
}

#[test]
fn a_range_export_reaches_its_pages_alone() {
    let mut dev = device();
    let (_root, a, b) = shared_pair(&mut dev);
    let a2 = dev.open(params(11, 1000, Role::Client)).unwrap();
    let page = u64::from(dev.info().page_size);
    let m = alloc(&mut dev, a, 4 * page);
    let off = dva_offset(m.dev_addr).unwrap();
    // Bad ranges: not whole pages, empty, past the end, not the caller's.
    for (range, errno) in [
        ((100, page), Errno::EINVAL),
        ((page, 100), Errno::EINVAL),
        ((page, 0), Errno::EINVAL),
        ((3 * page, 2 * page), Errno::ERANGE),
        ((u64::MAX - page + 1, page), Errno::ERANGE),
    ] {
        assert_eq!(
            export_range(&mut dev, a, m.handle, range, 0),
            Err(errno),
            "{range:?}"
        );
    }
    assert_eq!(
        export_range(&mut dev, b, m.handle, (0, page), 0),
        Err(Errno::ENOENT)
    );
    // Pages 1 and 2.
    let t = export_range(&mut dev, a, m.handle, (page, 2 * page), 0).unwrap();
    let i = import(&mut dev, a2, t).unwrap();
    assert_eq!((i.dev_addr, i.size), (m.dev_addr + page, 2 * page));
    assert_eq!(
        dev.mmap_target(a2, i.mmap_offset, 2 * page),
        Ok(MmapTarget::Memory {
            owner: a,
            offset: off,
            len: 2 * page,
            skip: page,
        })
    );
    assert!(dev.mmap_target(a2, i.mmap_offset, 3 * page).is_err());
    assert_eq!(fill(&mut dev, a2, i.dev_addr, 2 * page), 0);
    assert_eq!(read(&mut dev, a, i.dev_addr, 4), vec![7u8; 4]);
    // Outside the range: the page before is not the importer's; past its end is ERANGE.
    assert_eq!(fill(&mut dev, a2, m.dev_addr, 64), -(Errno::EACCES as i32));
    assert_eq!(
        fill(&mut dev, a2, i.dev_addr + page, 2 * page),
        -(Errno::ERANGE as i32)
    );
    assert_eq!(read(&mut dev, a, m.dev_addr, 4), vec![0u8; 4]);
    // A second range of the same allocation for the same importer: page 3, under a lease.
    let t3 = export_range(&mut dev, a, m.handle, (3 * page, page), EXPORT_FLAG_LEASE).unwrap();
    let i3 = import(&mut dev, a2, t3).unwrap();
    assert_eq!(fill(&mut dev, a2, i3.dev_addr, page), 0);
    // The exporter's free revokes the plain range and leaves the leased one.
    free(&mut dev, a, m.handle).unwrap();
    assert_eq!(fill(&mut dev, a2, i.dev_addr, 64), -(Errno::EACCES as i32));
    assert_eq!(fill(&mut dev, a2, i3.dev_addr, page), 0);
    assert_eq!(
        fill(&mut dev, a2, i3.dev_addr - page, 64),
        -(Errno::EACCES as i32)
    );
    free(&mut dev, a2, i3.handle).unwrap();
    assert_eq!(dev.client_usage(a).unwrap().memory_bytes, 0);
}

#[test]
fn unexport_ends_a_ranges_exports_and_a_lease_lasts_until_its_imports_go() {
    let mut dev = device();
    let (_root, a, b) = shared_pair(&mut dev);
    let (a2, a3) = (
        dev.open(params(11, 1000, Role::Client)).unwrap(),
        dev.open(params(12, 1000, Role::Client)).unwrap(),
    );
    let page = u64::from(dev.info().page_size);
    let m = alloc(&mut dev, a, 2 * page);
    // A plain export of page 0 and a lease of page 1 (a pool's two blocks).
    let plain = export_range(&mut dev, a, m.handle, (0, page), 0).unwrap();
    let lease = export_range(&mut dev, a, m.handle, (page, page), EXPORT_FLAG_LEASE).unwrap();
    let ip = import(&mut dev, a2, plain).unwrap();
    let il = import(&mut dev, a2, lease).unwrap();
    // Bad calls: not the caller's, not whole pages, flags.
    assert_eq!(
        unexport(&mut dev, b, m.handle, (0, page)),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        unexport(&mut dev, a, m.handle, (1, page)),
        Err(Errno::EINVAL)
    );
    let mut bad = UnexportMemoryArgs {
        handle: m.handle,
        flags: 1,
        len: page,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_UNEXPORT_MEMORY, &mut bad),
        Err(Errno::EINVAL)
    );
    // The plain one goes now, its import revoked.
    assert_eq!(unexport(&mut dev, a, m.handle, (0, page)), Ok(0));
    assert_eq!(fill(&mut dev, a2, ip.dev_addr, 64), -(Errno::EACCES as i32));
    assert_eq!(import(&mut dev, a3, plain).err(), Some(Errno::ENOENT));
    // The lease takes no new import and says one import stands, until it goes.
    assert_eq!(unexport(&mut dev, a, m.handle, (page, page)), Ok(1));
    assert_eq!(import(&mut dev, a3, lease).err(), Some(Errno::ENOENT));
    assert_eq!(fill(&mut dev, a2, il.dev_addr, 64), 0);
    assert_eq!(
        unexport(&mut dev, a, m.handle, (page, page)),
        Ok(1),
        "asked again"
    );
    free(&mut dev, a2, il.handle).unwrap();
    assert_eq!(unexport(&mut dev, a, m.handle, (page, page)), Ok(0));
    assert_eq!(exports(&mut dev, a), 0, "both exports gone");
    // The allocation is still the exporter's, and exports again (a new token).
    assert_eq!(fill(&mut dev, a, m.dev_addr, 2 * page), 0);
    let again = export_range(&mut dev, a, m.handle, (page, page), EXPORT_FLAG_LEASE).unwrap();
    assert_ne!(again, lease);
    import(&mut dev, a3, again).unwrap();
    // The whole allocation: offset and len 0.
    let whole = export_lease(&mut dev, a, m.handle).unwrap();
    import(&mut dev, a3, whole).unwrap();
    assert_eq!(unexport(&mut dev, a, m.handle, (0, 0)), Ok(1));
    free(&mut dev, a, m.handle).unwrap();
    dev.close(a3);
    assert_eq!(dev.client_usage(a).unwrap().memory_bytes, 0);
}
