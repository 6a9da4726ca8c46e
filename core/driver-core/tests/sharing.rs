//! EXPORT_MEMORY and IMPORT_MEMORY (ABI 1.4) in driver-core: who may import, what an import
//! reaches (the engine runs the importer's descriptors on the exporter's memory), and that
//! the exporter's free or close revokes every import, mappings included.

mod support;

use davinci_driver_core::{
    dva_offset, MmapTarget, Platform, Role, Run, MAX_CLIENT_EXPORTS, MAX_EXPORTS, MAX_IMPORTERS,
};
use davinci_uapi::*;
use support::*;

fn export(dev: &mut Dev, c: u32, handle: u32, uid: u32, client_id: u32) -> Result<u64, Errno> {
    let mut a = ExportMemoryArgs {
        handle,
        uid,
        client: client_id,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_EXPORT_MEMORY, &mut a).map(|_| a.token)
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

type Dev = davinci_driver_core::DeviceCore<davinci_driver_core::test_util::HeapPlatform>;

#[test]
fn an_importer_runs_descriptors_on_the_exporters_memory() {
    let mut dev = device();
    let (_root, a, _b) = shared_pair(&mut dev);
    // Another client of a's user (uid 1000).
    let a2 = dev.open(params(11, 1000, Role::Client)).unwrap();
    let m = alloc(&mut dev, a, 8192);
    dev.platform_mut()
        .mem_write(a, dva_offset(m.dev_addr).unwrap(), &[5u8; 64])
        .unwrap();
    let token = export(&mut dev, a, m.handle, EXPORT_OWN_UID, 0).unwrap();
    let i = import(&mut dev, a2, token).unwrap();
    assert_eq!((i.dev_addr, i.size), (m.dev_addr, m.alloc_size));
    assert_ne!(i.handle, m.handle);
    // Its mmap cookie maps the exporter's backing.
    assert_eq!(
        dev.mmap_target(a2, i.mmap_offset, 4096),
        Ok(MmapTarget::Memory {
            owner: a,
            offset: dva_offset(m.dev_addr).unwrap(),
            len: m.alloc_size,
            skip: 0
        })
    );
    let mine = alloc(&mut dev, a2, 8192);
    let k = ctx(&mut dev, a2);
    let mut s = stream(&mut dev, a2, k, 16, 16);
    // COPY out of the import into a2's own memory, then FILL the import.
    s.prod
        .push(&TaskDesc::copy(
            1,
            DevAddr(mine.dev_addr),
            DevAddr(i.dev_addr),
            64,
        ))
        .unwrap();
    s.prod
        .push(&TaskDesc::fill(
            2,
            DevAddr(i.dev_addr + 64),
            64,
            0x0909_0909,
        ))
        .unwrap();
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(2));
    let r = drain(&mut s);
    assert!(r.iter().all(|r| r.status == 0), "{r:?}");
    assert_eq!(mem(&mut dev, a2, &mine, 64), vec![5u8; 64]);
    assert_eq!(mem(&mut dev, a, &m, 128)[64..], [9u8; 64]);
    // Quota: the import counts as an allocation of a2, the memory stays a's.
    assert_eq!(dev.client_usage(a2).unwrap().allocations, 2);
    assert_eq!(dev.client_usage(a2).unwrap().memory_bytes, mine.alloc_size);
}

#[test]
fn grants_are_explicit_and_a_refusal_says_nothing_about_the_token() {
    let mut dev = device();
    let (_root, a, b) = shared_pair(&mut dev);
    let a2 = dev.open(params(11, 1000, Role::Client)).unwrap();
    let m = alloc(&mut dev, a, 4096);
    // To the exporter's own user: b (uid 1001) gets what a token that never existed gets.
    let t = export(&mut dev, a, m.handle, EXPORT_OWN_UID, 0).unwrap();
    assert_eq!(import(&mut dev, b, t).err(), Some(Errno::ENOENT));
    assert_eq!(import(&mut dev, b, t ^ 1).err(), Some(Errno::ENOENT));
    assert_eq!(import(&mut dev, a, t).err(), Some(Errno::EINVAL), "its own");
    // The same grant again: the same token; another grant (ABI 1.5): another export, which
    // that grantee imports, while the first still refuses it.
    assert_eq!(export(&mut dev, a, m.handle, EXPORT_OWN_UID, 0), Ok(t));
    let t_b = export(&mut dev, a, m.handle, 1001, 0).unwrap();
    assert_ne!(t_b, t);
    assert_eq!(import(&mut dev, b, t).err(), Some(Errno::ENOENT));
    let ib = import(&mut dev, b, t_b).unwrap();
    assert_eq!(ib.dev_addr, m.dev_addr);
    free(&mut dev, b, ib.handle).unwrap();
    // To one client of another user.
    let n = alloc(&mut dev, a, 4096);
    let b_client_id = dev.info_for(b).caller_id;
    let t2 = export(&mut dev, a, n.handle, 1001, b_client_id).unwrap();
    assert_eq!(import(&mut dev, a2, t2).err(), Some(Errno::ENOENT));
    let i = import(&mut dev, b, t2).unwrap();
    assert_eq!(import(&mut dev, b, t2).err(), Some(Errno::EBUSY), "twice");
    // An import is not exported again; a foreign handle is not exported at all.
    assert_eq!(
        export(&mut dev, b, i.handle, EXPORT_OWN_UID, 0).err(),
        Some(Errno::EINVAL)
    );
    assert_eq!(
        export(&mut dev, b, n.handle, EXPORT_OWN_UID, 0).err(),
        Some(Errno::ENOENT)
    );
    // Flags are reserved.
    let mut x = ImportMemoryArgs {
        token: t2,
        flags: 1,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, b, DRIVER_CMD_IMPORT_MEMORY, &mut x).err(),
        Some(Errno::EINVAL)
    );
}

#[test]
fn the_exporters_free_and_close_revoke_every_import() {
    let mut dev = device();
    let (_root, a, _b) = shared_pair(&mut dev);
    let a2 = dev.open(params(11, 1000, Role::Client)).unwrap();
    let m = alloc(&mut dev, a, 4096);
    let t = export(&mut dev, a, m.handle, EXPORT_OWN_UID, 0).unwrap();
    let i = import(&mut dev, a2, t).unwrap();
    dev.platform_mut().revoked.clear();
    free(&mut dev, a, m.handle).unwrap();
    let revoked = &dev.platform().revoked;
    assert!(
        revoked.contains(&(a2, i.mmap_offset, i.size)),
        "the importer's mapping was revoked: {revoked:?}"
    );
    assert_eq!(import(&mut dev, a2, t).err(), Some(Errno::ENOENT));
    assert_eq!(free(&mut dev, a2, i.handle).err(), Some(Errno::ENOENT));
    assert_eq!(dev.client_usage(a2).unwrap().allocations, 0);
    // The importer's descriptors on the old address fault.
    let k = ctx(&mut dev, a2);
    let mut s = stream(&mut dev, a2, k, 16, 16);
    s.prod
        .push(&TaskDesc::fill(1, DevAddr(i.dev_addr), 64, 1))
        .unwrap();
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(Errno::EACCES));
    // Close: the exporter's close revokes; the importer's close drops its imports.
    let m = alloc(&mut dev, a, 4096);
    let t = export(&mut dev, a, m.handle, EXPORT_OWN_UID, 0).unwrap();
    let i = import(&mut dev, a2, t).unwrap();
    dev.close(a2);
    assert_eq!(dev.client_usage(a).unwrap().allocations, 1);
    let a3 = dev.open(params(12, 1000, Role::Client)).unwrap();
    import(&mut dev, a3, t).unwrap();
    dev.close(a);
    assert_eq!(dev.client_usage(a3).unwrap().allocations, 0);
    assert_eq!(dev.info().memory_used, 0);
    let _ = i;
}

#[test]
fn exports_and_imports_are_bounded() {
    let mut dev = device();
    let (_root, a, b) = shared_pair(&mut dev);
    let m = alloc(&mut dev, a, 4096);
    let t = export(&mut dev, a, m.handle, EXPORT_OWN_UID, 0).unwrap();
    let importers: Vec<u32> = (0..MAX_IMPORTERS as u32 + 1)
        .map(|k| dev.open(params(100 + k, 1000, Role::Client)).unwrap())
        .collect();
    for &c in &importers[..MAX_IMPORTERS] {
        import(&mut dev, c, t).unwrap();
    }
    assert_eq!(
        import(&mut dev, importers[MAX_IMPORTERS], t).err(),
        Some(Errno::ENOSPC)
    );
    // Freeing one import makes room.
    dev.close(importers[0]);
    import(&mut dev, importers[MAX_IMPORTERS], t).unwrap();
    // Exports: at most MAX_CLIENT_EXPORTS per tenant (one was made above; A's importers are
    // of A's tenant, its user), MAX_EXPORTS on the device: four tenants fill it.
    let mut made = 1;
    let mut exporters = vec![a];
    let mut more = vec![b];
    let e = loop {
        let c = *exporters.last().unwrap();
        let n = alloc(&mut dev, c, 4096);
        match export(&mut dev, c, n.handle, EXPORT_OWN_UID, 0) {
            Ok(_) => made += 1,
            Err(Errno::ENOSPC) if made % MAX_CLIENT_EXPORTS == 0 && made < MAX_EXPORTS => {
                // This tenant's quarter is full: another tenant still exports.
                let next = more.pop().unwrap_or_else(|| {
                    dev.open(params(200 + made as u32, 1000 + made as u32, Role::Client))
                        .unwrap()
                });
                exporters.push(next);
            }
            Err(e) => break e,
        }
    };
    assert_eq!(
        (e, made),
        (Errno::ENOSPC, MAX_EXPORTS),
        "the device's table, full"
    );
}

#[test]
fn an_import_whose_reply_is_lost_is_undone() {
    let mut dev = device();
    let (_root, a, _b) = shared_pair(&mut dev);
    let a2 = dev.open(params(11, 1000, Role::Client)).unwrap();
    let m = alloc(&mut dev, a, 4096);
    let t = export(&mut dev, a, m.handle, EXPORT_OWN_UID, 0).unwrap();
    let i = import(&mut dev, a2, t).unwrap();
    let mut reply = vec![0u8; ImportMemoryArgs::SIZE];
    i.encode(&mut reply);
    dev.undo_create(a2, DRIVER_CMD_IMPORT_MEMORY, &reply)
        .unwrap();
    assert_eq!(dev.client_usage(a2).unwrap().allocations, 0);
    import(&mut dev, a2, t).unwrap();
}

/// An export's token carries no device-wide sequence: another tenant's exports in between do
/// not show in the next token, and its serial part is not a count.
#[test]
fn export_tokens_carry_no_count_of_other_tenants_exports() {
    let mut dev = device();
    dev.set_secret(0x5eed).unwrap();
    let (_root, a, b) = shared_pair(&mut dev);
    let mut serials = Vec::new();
    for k in 0..6 {
        let c = if k % 2 == 0 { a } else { b };
        let m = alloc(&mut dev, c, 4096);
        let t = export(&mut dev, c, m.handle, EXPORT_OWN_UID, 0).unwrap();
        serials.push((t >> 32) as u32);
    }
    assert!(serials.iter().all(|&s| s != 0));
    let steps: Vec<i64> = serials
        .windows(2)
        .map(|w| i64::from(w[1]) - i64::from(w[0]))
        .collect();
    assert!(
        steps.iter().all(|&d| d.abs() > 2),
        "serials {serials:?} count the exports"
    );
    let mut sorted = serials.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), serials.len(), "serials are unique");
}

/// A device whose host makes export fds (the kernel module's: `Features::EXPORT_FD`).
fn fd_device() -> Dev {
    let mut config = *device().config();
    config.platform_features |= Features::EXPORT_FD;
    davinci_driver_core::DeviceCore::new(
        config,
        davinci_driver_core::test_util::HeapPlatform::default(),
    )
}

fn export_flags(dev: &mut Dev, c: u32, handle: u32, flags: u32) -> Result<u64, Errno> {
    let mut a = ExportMemoryArgs {
        handle,
        flags,
        uid: EXPORT_OWN_UID,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_EXPORT_MEMORY, &mut a).map(|_| a.token)
}

fn import_flags(dev: &mut Dev, c: u32, token: u64, flags: u32) -> Result<ImportMemoryArgs, Errno> {
    let mut a = ImportMemoryArgs {
        token,
        flags,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_IMPORT_MEMORY, &mut a).map(|_| a)
}

#[test]
fn an_export_that_is_an_fd_is_reached_through_the_fd_alone() {
    // A host without export fds refuses the flag as a 1.4 driver does (EINVAL), both ways,
    // and reports no DAVINCI_FEAT_EXPORT_FD.
    let mut dev = device();
    let (_root, a, _b) = shared_pair(&mut dev);
    assert!(!dev.info().features.contains(Features::EXPORT_FD));
    let m = alloc(&mut dev, a, 4096);
    assert_eq!(
        export_flags(&mut dev, a, m.handle, EXPORT_FLAG_FD).err(),
        Some(Errno::EINVAL)
    );
    assert_eq!(
        import_flags(&mut dev, a, 1, IMPORT_FLAG_FD).err(),
        Some(Errno::EINVAL)
    );

    let mut dev = fd_device();
    assert!(dev.info().features.contains(Features::EXPORT_FD));
    let (_root, a, b) = shared_pair(&mut dev);
    let a2 = dev.open(params(11, 1000, Role::Client)).unwrap();
    let m = alloc(&mut dev, a, 4096);
    // Unknown flags are refused.
    assert_eq!(
        export_flags(&mut dev, a, m.handle, 4).err(),
        Some(Errno::EINVAL)
    );
    // The host gets the token (it keeps it in the fd it makes); by token alone the export
    // is what a token that never existed is, to everyone it was granted to.
    let t = export_flags(&mut dev, a, m.handle, EXPORT_FLAG_FD).unwrap();
    assert_eq!(import(&mut dev, a2, t).err(), Some(Errno::ENOENT));
    // The same kind again is the same token; the other kind is another export (ABI 1.5).
    assert_eq!(export_flags(&mut dev, a, m.handle, EXPORT_FLAG_FD), Ok(t));
    let by_token = export(&mut dev, a, m.handle, EXPORT_OWN_UID, 0).unwrap();
    assert_ne!(by_token, t);
    // Through the fd (the host resolved it to the token): the grant still applies.
    assert_eq!(
        import_flags(&mut dev, b, t, IMPORT_FLAG_FD).err(),
        Some(Errno::ENOENT),
        "another user"
    );
    let i = import_flags(&mut dev, a2, t, IMPORT_FLAG_FD).unwrap();
    assert_eq!((i.dev_addr, i.size), (m.dev_addr, m.alloc_size));
    // A token export is reached by token, and through an fd flag too (the host made no fd
    // for it, so nobody can name it that way from user space).
    let n = alloc(&mut dev, a, 4096);
    let tn = export(&mut dev, a, n.handle, EXPORT_OWN_UID, 0).unwrap();
    assert_ne!(export_flags(&mut dev, a, n.handle, EXPORT_FLAG_FD), Ok(tn));
    assert!(import(&mut dev, a2, tn).is_ok());
    // The exporter's free revokes the fd's export like any other.
    free(&mut dev, a, m.handle).unwrap();
    assert_eq!(
        import_flags(&mut dev, a2, t, IMPORT_FLAG_FD).err(),
        Some(Errno::ENOENT)
    );
}
