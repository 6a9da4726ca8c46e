// SPDX-License-Identifier: GPL-2.0

//! Mapping rights of a PCI device's clients: where each mmap cookie lies in BAR2 (or BAR0's
//! doorbell page), as MMAP_TARGET granted it, checked (the cookie's kind, the length, BAR2's
//! heap) and recorded in the kernel. Rights are asked for when an ioctl creates the object
//! ([`note_rights`]: ALLOC_MEMORY, IMPORT_MEMORY, CREATE_STREAM), so the `mmap` and page
//! faults that follow are served from the record with no device round trip under
//! `mmap_lock` (issue 42, Why 7); only a right not recorded (a full table) is asked for there.

use core::ffi::c_void;
use kernel::ffi::c_int;

use super::dev::MapRight;
use super::fops::{failed, open_of, PciOpen};
use crate::davinci_hwif::{AdminOp, MapKind, MmapReply, ReplyKind};
use crate::davinci_uapi::{
    decode_mmap_offset, AllocMemoryArgs, CreateStreamArgs, Errno, ImportMemoryArgs, MmapKind, Wire,
    DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_STREAM, DRIVER_CMD_IMPORT_MEMORY,
};
use crate::device::errno;

/// After `cmd` created an object whose mmap cookies its reply `reply` carries (ALLOC_MEMORY,
/// IMPORT_MEMORY, CREATE_STREAM): each cookie's right asked for (MMAP_TARGET, at least one
/// byte: the device answers the object's whole range) and recorded now, in the ioctl. A right
/// not recorded (the device refused, a full table, killed while waiting) is asked for at
/// `mmap` as before; a reply that breaks the rules loses the device, as it would there.
pub(super) fn note_rights(o: &PciOpen, cmd: u32, reply: &[u8]) {
    let mut cookies = [0u64; 3];
    match cmd {
        DRIVER_CMD_ALLOC_MEMORY => cookies[0] = AllocMemoryArgs::decode(reply).mmap_offset,
        DRIVER_CMD_IMPORT_MEMORY => cookies[0] = ImportMemoryArgs::decode(reply).mmap_offset,
        DRIVER_CMD_CREATE_STREAM => {
            let a = CreateStreamArgs::decode(reply);
            cookies = [
                a.cmd_ring.mmap_offset,
                a.event_ring.mmap_offset,
                a.doorbell_offset,
            ];
        }
        _ => return,
    }
    let Ok(mut d) = o.dev.lock() else {
        return;
    };
    for cookie in cookies {
        if cookie == 0 || d.mapped(o.client, cookie).is_some() {
            continue;
        }
        if matches!(target(o, &mut d, cookie, 1), Err(Errno::ENODEV)) {
            return;
        }
    }
}

/// `mmap`'s check (from `pci/helpers.c`'s `davinci_pci_mmap`): the object exists, is the
/// caller's and is at least `len` bytes, by the right recorded when it was created
/// ([`note_rights`]), else by MMAP_TARGET. 0 or -errno.
#[no_mangle]
unsafe extern "C" fn davinci_pci_mmap_check(open: *mut c_void, cookie: u64, len: u64) -> c_int {
    // SAFETY: `open` is this PCI file's `private_data` (mmap cannot run during release).
    let o = unsafe { open_of(open) };
    let Ok(mut d) = o.dev.lock() else {
        return errno(Errno::EINTR);
    };
    match target(o, &mut d, cookie, len) {
        Ok(_) => 0,
        Err(e) => errno(e),
    }
}

/// Where `cookie` of `o` lies, at least `len` bytes: the right recorded when the device
/// granted it, else MMAP_TARGET, whose reply is checked (its kind is the cookie's, it covers
/// `len`, a ring or memory lies in BAR2's heap; else the device is lost: `EIO`) and recorded.
pub(super) fn target(
    o: &PciOpen,
    d: &mut super::admin::Locked<'_>,
    cookie: u64,
    len: u64,
) -> Result<MapRight, Errno> {
    if d.dead() {
        return Err(Errno::ENODEV);
    }
    if let Some(m) = d.mapped(o.client, cookie) {
        if len <= m.len {
            return Ok(m);
        }
    }
    let c = d.call(o.client, AdminOp::MmapTarget { cookie, len })?;
    if c.reply != ReplyKind::Done {
        return Err(failed(&c));
    }
    let Ok(m) = MmapReply::from_arg(c.arg.as_slice()) else {
        return Err(d.violation("its MMAP_TARGET reply does not decode"));
    };
    let kind = match decode_mmap_offset(cookie) {
        Some((MmapKind::CmdRing, _)) => MapKind::CmdRing,
        Some((MmapKind::EventRing, _)) => MapKind::EventRing,
        Some((MmapKind::Doorbell, _)) => MapKind::Doorbell,
        Some((MmapKind::Memory, _)) => MapKind::Memory,
        None => return Err(d.violation("it granted a mapping of a cookie the ABI never hands out")),
    };
    if m.kind != kind {
        return Err(d.violation("its MMAP_TARGET reply is of another kind than the cookie"));
    }
    if m.len < len {
        return Err(d.violation("its MMAP_TARGET reply is shorter than the mapping it granted"));
    }
    // Only heap pages of BAR2 go to a client (never its header, admin rings or list area).
    let l = o.dev.layout();
    let in_heap = m
        .offset
        .checked_add(m.len)
        .is_some_and(|end| m.offset >= l.heap_offset && end <= l.region_size);
    if m.kind != MapKind::Doorbell && !in_heap {
        return Err(d.violation("its MMAP_TARGET reply lies outside BAR2's heap"));
    }
    if m.kind == MapKind::CmdRing {
        d.note_ring(o.client, cookie, m.offset, m.len);
    }
    let right = MapRight {
        client: o.client,
        cookie,
        kind: m.kind,
        offset: m.offset,
        len: m.len,
    };
    d.note_map(right);
    Ok(right)
}
