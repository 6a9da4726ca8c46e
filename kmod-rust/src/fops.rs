// SPDX-License-Identifier: GPL-2.0

//! The file operations behind `helpers.c`'s const `davinci_fops` table: `open` (who the
//! opener is: pid, uid, admin, container, process name), `release` (everything the open held
//! goes), the mmap check and the page-fault handler; `ioctl` is in `ioctl`.
//!
//! Mappings are filled on fault, one window of pages at a time, each fault looking the object
//! up again under the device lock: once FREE_MEMORY or DESTROY_STREAM has revoked an object's
//! mappings (`Platform::revoke_mappings`, under the same lock), none of its pages can come
//! back, so every page a client maps is one the device still counts.

use core::ffi::c_void;
use core::sync::atomic::Ordering;
use kernel::ffi::{c_int, c_ulong};

use kernel::bindings;
use kernel::prelude::*;

use crate::davinci_driver_core::{container, MmapTarget, OpenParams, Role, Tenant, CONTAINER_LEN};
use crate::davinci_uapi::Errno;
use crate::device::{errno, DevState, Locked, Open, READY};
use crate::platform::VBuf;
use crate::sys::{self, Faulting, File, FileMapping};

/// Who opens `file`, and where its mappings live, for either kind of node: a writable open is
/// a client, a read-only one a control open; pid (in the initial pid namespace, as an
/// operator on the host sees it), uid (of the credentials the file was opened with), admin,
/// container, name. Sleeps (finding the container takes cgroup_mutex): call it before the
/// device is touched. `ENODEV` if the file has no mapping.
pub(crate) fn opener(file: File) -> Result<(OpenParams, FileMapping), Errno> {
    let role = if file.writable() {
        Role::Client
    } else {
        Role::Control
    };
    let (uid, container) = (file.uid(), container_of_current());
    let params = OpenParams {
        role,
        pid: sys::current_tgid(),
        uid,
        admin: sys::opener_admin(),
        container,
        comm: sys::current_comm(),
        // The opener's cgroup's container, else its user (driver-core's rule).
        tenant: Tenant::of(uid, &container),
    };
    let mapping = file.mapping().ok_or(Errno::ENODEV)?;
    Ok((params, mapping))
}

/// The opener's container id, from its cgroup path by driver-core's rule (the same the mock
/// daemon applies to `/proc/<pid>/cgroup`); empty on the host or without cgroups. Sleeps:
/// call it before taking the device lock.
fn container_of_current() -> [u8; CONTAINER_LEN] {
    let mut path = [0u8; 256];
    let Ok(n) = usize::try_from(sys::current_cgroup_path(&mut path)) else {
        // No cgroups, or a path longer than any container runtime makes.
        return [0; CONTAINER_LEN];
    };
    let text = path
        .get(..n.min(path.len()))
        .and_then(|b| core::str::from_utf8(b).ok())
        .unwrap_or("");
    container::container_field(container::container_id_from_path(text))
}

/// `open` (from `davinci_fops`).
#[no_mangle]
unsafe extern "C" fn davinci_open(
    _inode: *mut bindings::inode,
    file: *mut bindings::file,
) -> c_int {
    // SAFETY: `file` is the file being opened, used only during this call.
    let file = unsafe { File::new(file) };
    // Until module init finished (it may still fail) no open succeeds.
    if !READY.load(Ordering::Acquire) {
        return errno(Errno::ENODEV);
    }
    // The misc core set `private_data` to our miscdevice before calling `open`.
    let Some(dev) = DevState::of_misc(file.private()) else {
        return errno(Errno::ENODEV);
    };
    // The parameters first: finding the container sleeps on cgroup_mutex.
    let (params, mapping) = match opener(file) {
        Ok(o) => o,
        Err(e) => return errno(e),
    };
    // Allocated before the device is touched, so nothing needs undoing if it fails.
    let Ok(open) = KBox::new(
        Open {
            dev,
            client: 0,
            queue: 0,
            waits: crate::waits::OpenWaits::new(),
        },
        GFP_KERNEL,
    ) else {
        return errno(Errno::ENOMEM);
    };
    let mut open = open;
    {
        let mut d = dev.lock();
        match d.open(params) {
            Ok(client) => {
                let Some(queue) = d.platform_mut().set_mapping(client, mapping) else {
                    // Cannot happen: the device has at most as many opens as slots.
                    d.close(client);
                    return errno(Errno::ENOSPC);
                };
                open.client = client;
                open.queue = queue;
            }
            Err(e) => return errno(e.error.errno),
        }
    }
    // `release` takes the box back.
    file.set_private(KBox::into_raw(open).cast());
    0
}

/// `release` (from `davinci_fops`): called once, when the last reference to the file goes
/// (every mapping holds one, so no mapping of the open is left).
#[no_mangle]
unsafe extern "C" fn davinci_release(
    _inode: *mut bindings::inode,
    file: *mut bindings::file,
) -> c_int {
    // SAFETY: `file` is the file being released, used only during this call.
    let file = unsafe { File::new(file) };
    // SAFETY: `open` stored a boxed `Open` in `private_data`; release is called once.
    let o = unsafe { KBox::from_raw(file.private().cast::<Open>()) };
    {
        let mut d = o.dev.lock();
        // Everything the open held goes: contexts, streams (their buffers), events, memory.
        d.close(o.client);
        d.platform_mut().clear_mapping(o.client);
    }
    o.dev.worker_kick();
    0
}

/// The buffer behind `target` of `client`, if it still exists.
fn buffer_of<'a>(dev: &'a Locked<'_>, client: u32, target: MmapTarget) -> Option<&'a VBuf> {
    match target {
        MmapTarget::Memory { owner, offset, .. } => dev.platform().backing(owner, offset),
        MmapTarget::CmdRing { stream } => dev.stream_mem(client, stream).map(|m| &m.cmd),
        MmapTarget::EventRing { stream } => dev.stream_mem(client, stream).map(|m| &m.event),
        MmapTarget::Doorbell { stream } => dev.stream_mem(client, stream).map(|m| &m.doorbell),
    }
}

/// `mmap`'s check (from `helpers.c`'s `davinci_mmap`, which sets the vma up after it): the
/// object at `cookie` exists, is the caller's and is at least `len` bytes. 0 or -errno.
#[no_mangle]
unsafe extern "C" fn davinci_mmap_check(open: *mut c_void, cookie: u64, len: u64) -> c_int {
    // SAFETY: `open` is the file's `private_data`, its `Open` (set in `open`, freed in
    // `release`, which cannot run during mmap).
    let o = unsafe { &*open.cast::<Open>() };
    let dev = o.dev.lock();
    match dev.mmap_target(o.client, cookie, len) {
        Ok(t) if buffer_of(&dev, o.client, t).is_some() => 0,
        Ok(_) => errno(Errno::ENOENT),
        Err(e) => errno(e.errno),
    }
}

/// The page-fault handler (from `helpers.c`'s `davinci_vm_fault`): maps page `page` of the
/// object at `cookie` (and a few after it) at `addr` of `vma`, if the object still exists.
/// 0, or -errno (the fault then raises SIGBUS, or OOM for -ENOMEM).
#[no_mangle]
unsafe extern "C" fn davinci_fault(
    open: *mut c_void,
    cookie: u64,
    page: u64,
    vma: *mut bindings::vm_area_struct,
    addr: c_ulong,
) -> c_int {
    // SAFETY: `open` is the `private_data` of the vma's file, its `Open`: the vma holds a
    // reference on the file, so it is not released meanwhile.
    let o = unsafe { &*open.cast::<Open>() };
    let page_size = 1u64 << bindings::PAGE_SHIFT;
    let Some(need) = page.checked_add(1).and_then(|p| p.checked_mul(page_size)) else {
        return errno(Errno::EFAULT);
    };
    let dev = o.dev.lock();
    let target = match dev.mmap_target(o.client, cookie, need) {
        Ok(t) => t,
        Err(e) => return errno(e.errno),
    };
    let Some(buf) = buffer_of(&dev, o.client, target) else {
        return errno(Errno::ENOENT);
    };
    // The view: the whole buffer, or the range an import of part of it reaches (whole pages
    // from `skip`, `len` bytes: the core's, checked against the buffer here all the same).
    let (skip, len) = match target {
        MmapTarget::Memory { skip, len, .. } => (skip, len),
        _ => (0, buf.len() as u64),
    };
    if skip % page_size != 0 || skip.checked_add(len).is_none_or(|e| e > buf.len() as u64) {
        return errno(Errno::EFAULT);
    }
    let f = Faulting { vma, addr };
    // SAFETY: in the fault handler with the vma locked; `buf` is a live buffer of
    // `buf.len()` bytes (a page multiple) and `[skip, skip + len)` lies in it (checked just
    // above, `skip` a page multiple), and the device lock is held until the pages are in, so
    // the object cannot be freed (nor its mappings revoked) meanwhile.
    unsafe { f.map(buf.as_ptr().add(skip as usize), page, len / page_size) }
}
