// SPDX-License-Identifier: GPL-2.0

//! The file operations of every davinci device: `open` (who the opener is: pid, uid, admin,
//! container, process name), `release` (everything the open held goes), `mmap` (the buffer
//! `DeviceCore::mmap_target` names, mapped with `remap_vmalloc_range`); `ioctl` is in `ioctl`.

use core::cell::UnsafeCell;
use kernel::ffi::{c_char, c_int};

use kernel::bindings;
use kernel::prelude::*;

use crate::davinci_driver_core::{container, MmapTarget, OpenParams, Role, CONTAINER_LEN};
use crate::davinci_uapi::Errno;
use crate::device::{errno, DevState, Open};
use crate::ioctl::fop_ioctl;

/// The file operations every davinci device shares.
struct Fops(UnsafeCell<bindings::file_operations>);
// SAFETY: written once in `fops` before the first registration, read-only afterwards.
unsafe impl Sync for Fops {}
// SAFETY: an all-zero file_operations is valid (every callback None).
static FOPS: Fops = Fops(UnsafeCell::new(unsafe { core::mem::zeroed() }));

/// The table, filled in for `module`.
pub(crate) fn fops(module: &'static ThisModule) -> *const bindings::file_operations {
    let p = FOPS.0.get();
    // SAFETY: called from module init (single-threaded) before any device is registered,
    // so nothing reads the table meanwhile; the values are the same every time.
    unsafe {
        (*p).owner = module.as_ptr();
        (*p).open = Some(fop_open);
        (*p).release = Some(fop_release);
        (*p).unlocked_ioctl = Some(fop_ioctl);
        // Every argument is made of fixed-width fields with explicit padding, so a 32-bit
        // caller's struct has the 64-bit layout and the same handler serves it (what
        // `compat_ptr_ioctl` does; it is not built without CONFIG_COMPAT). 32-bit callers
        // cannot use the data plane (docs/abi.md 1.1), the control plane works.
        (*p).compat_ioctl = Some(fop_ioctl);
        (*p).mmap = Some(fop_mmap);
        (*p).llseek = Some(bindings::noop_llseek);
    }
    p
}

/// The opener's parameters: pid (thread-group id in the initial pid namespace, as an operator
/// on the host sees it), uid (of the credentials the file was opened with), admin.
///
/// Nothing here reads `task_struct` fields from Rust: bindgen's layout of `task_struct` for
/// this configuration is 64 bytes off the C one before `thread` (asm-offsets' TASK_threadsp
/// 1880 against bindgen's 1816), so `Task::pid()` reads garbage. Exported functions and
/// `struct file`/`struct cred` (whose layouts the tests check through their results) are used
/// instead.
fn open_params(file: *mut bindings::file, role: Role) -> OpenParams {
    // SAFETY: `get_current` returns the running task, valid for this call;
    // `__task_pid_nr_ns` takes the RCU read lock itself; `init_pid_ns` is the initial pid
    // namespace, a static that lives forever (only its address is taken).
    let pid = unsafe {
        bindings::__task_pid_nr_ns(
            bindings::get_current(),
            bindings::pid_type_PIDTYPE_TGID,
            core::ptr::addr_of_mut!(bindings::init_pid_ns),
        )
    };
    // SAFETY: `file` is the file being opened (valid for the call); `f_cred` is set at open
    // and holds a reference on the credentials for the file's life.
    let uid = unsafe { (*(*file).f_cred).uid.val };
    // SAFETY: `capable` has no preconditions.
    let admin = unsafe { bindings::capable(bindings::CAP_SYS_ADMIN as c_int) };
    OpenParams {
        role,
        pid: pid as u32,
        uid,
        admin,
        container: container_of_current(),
        comm: comm_of_current(),
    }
}

extern "C" {
    /// `helpers.c`: the current task's cgroup v2 path in the initial cgroup namespace.
    fn davinci_current_cgroup_path(buf: *mut c_char, len: usize) -> c_int;
    /// `helpers.c`: the current task's name, NUL-padded into 16 bytes.
    fn davinci_current_comm(buf: *mut c_char);
}

/// The opener's process name.
fn comm_of_current() -> [u8; 16] {
    let mut comm = [0u8; 16];
    // SAFETY: `comm` is a live 16-byte buffer, which the helper fills exactly (it copies
    // TASK_COMM_LEN = 16 bytes, checked at build time); `current` is valid in open.
    unsafe { davinci_current_comm(comm.as_mut_ptr().cast()) };
    comm
}

/// The opener's container id, from its cgroup path by driver-core's rule (the same the mock
/// daemon applies to `/proc/<pid>/cgroup`); empty on the host or without cgroups. Sleeps:
/// call it before taking the device lock.
fn container_of_current() -> [u8; CONTAINER_LEN] {
    let mut path = [0u8; 256];
    // SAFETY: `path` is a live buffer of `path.len()` bytes, which the helper writes at most
    // (NUL included); it is called in process context (open) with no lock held.
    let n = unsafe { davinci_current_cgroup_path(path.as_mut_ptr().cast(), path.len()) };
    let Ok(n) = usize::try_from(n) else {
        // No cgroups, or a path longer than any container runtime makes.
        return [0; CONTAINER_LEN];
    };
    let text = path
        .get(..n.min(path.len()))
        .and_then(|b| core::str::from_utf8(b).ok())
        .unwrap_or("");
    container::container_field(container::container_id_from_path(text))
}

unsafe extern "C" fn fop_open(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    // SAFETY: the misc core set `private_data` to our miscdevice before calling `open`.
    let misc = unsafe { (*file).private_data };
    let Some(dev) = DevState::of_misc(misc) else {
        return errno(Errno::ENODEV);
    };
    // O_RDONLY is a control open, anything writable a client (docs/abi.md 1.1).
    // SAFETY: `file` is valid for the call.
    let writable = unsafe { (*file).f_flags } & bindings::O_ACCMODE != 0;
    let role = if writable {
        Role::Client
    } else {
        Role::Control
    };
    // The parameters first: finding the container sleeps on cgroup_mutex.
    let params = open_params(file, role);
    let client = match dev.lock().open(params) {
        Ok(c) => c,
        Err(e) => return errno(e.error.errno),
    };
    match KBox::new(Open { dev, client }, GFP_KERNEL) {
        Ok(o) => {
            // SAFETY: `file` is valid; `release` takes the box back.
            unsafe { (*file).private_data = KBox::into_raw(o).cast() };
            0
        }
        Err(_) => {
            dev.lock().close(client);
            errno(Errno::ENOMEM)
        }
    }
}

unsafe extern "C" fn fop_release(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    // SAFETY: `open` stored a boxed `Open` in `private_data`; release is called once.
    let o = unsafe { KBox::from_raw((*file).private_data.cast::<Open>()) };
    // Everything the open held goes: contexts, streams (their buffers), events, memory.
    o.dev.lock().close(o.client);
    o.dev.worker_kick();
    0
}

unsafe extern "C" fn fop_mmap(
    file: *mut bindings::file,
    vma: *mut bindings::vm_area_struct,
) -> c_int {
    // SAFETY: `private_data` is the `Open` of this file; `vma` is valid for the call and the
    // caller holds the mmap write lock.
    let (o, start, end, pgoff) = unsafe {
        let o = &*(*file).private_data.cast::<Open>();
        let r = (*vma).__bindgen_anon_1.__bindgen_anon_1;
        (o, r.vm_start, r.vm_end, (*vma).vm_pgoff)
    };
    let len = (end - start) as u64;
    let cookie = (pgoff as u64) << bindings::PAGE_SHIFT;
    // SAFETY: as above.
    let flags = unsafe { (*vma).__bindgen_anon_2.vm_flags };
    if flags & (bindings::VM_SHARED as bindings::vm_flags_t) == 0 {
        // A private mapping would copy on write: the device would never see the copy.
        return errno(Errno::EINVAL);
    }
    let dev = o.dev.lock();
    let kaddr = match dev.mmap_target(o.client, cookie, len) {
        Ok(MmapTarget::Memory { offset, .. }) => {
            dev.platform().backing(o.client, offset).map(|b| b.as_ptr())
        }
        Ok(MmapTarget::CmdRing { stream }) => {
            dev.stream_mem(o.client, stream).map(|m| m.cmd.as_ptr())
        }
        Ok(MmapTarget::EventRing { stream }) => {
            dev.stream_mem(o.client, stream).map(|m| m.event.as_ptr())
        }
        Ok(MmapTarget::Doorbell { stream }) => dev
            .stream_mem(o.client, stream)
            .map(|m| m.doorbell.as_ptr()),
        Err(e) => return errno(e.errno),
    };
    let Some(kaddr) = kaddr else {
        return errno(Errno::ENOENT);
    };
    // SAFETY: `vma` is valid and write-locked by the caller; the flags keep the mapping out
    // of fork children and from growing (mremap). `kaddr` is a `vmalloc_user` buffer at least
    // `len` bytes long (driver-core checked `len` against the object), alive while the device
    // lock is held; `remap_vmalloc_range` takes a reference on every page it maps, so the
    // pages outlive the buffer if the object is destroyed while mapped.
    unsafe {
        (*vma).__bindgen_anon_2.__vm_flags |=
            (bindings::VM_DONTCOPY | bindings::VM_DONTEXPAND) as bindings::vm_flags_t;
        bindings::remap_vmalloc_range(vma, kaddr.cast(), 0)
    }
}
