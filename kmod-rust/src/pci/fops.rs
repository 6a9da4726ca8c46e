// SPDX-License-Identifier: GPL-2.0

//! The file operations of a PCI device's node (`pci/helpers.c`'s const `davinci_pci_fops`):
//! each forwards its caller's call to the device through the admin queue
//! ([`PciShared`]): open is OPEN (who the opener is, found as for a software device),
//! release is CLOSE, an ioctl is IOCTL (WAIT_EVENT sleeps on vector 1 between WAIT_AGAINs;
//! LIST_CLIENTS' entries, and TRACE's and READ_EVENTS' records, come through BAR2's list
//! area), mmap and each fault are MMAP_TARGET, and the pages inserted are BAR2's (rings,
//! memory: write-back) or, for a stream's doorbell page, BAR0's first page (uncached): the
//! client's doorbell is a store to the device's Doorbell register, with no system call.
//!
//! User memory is touched only with the device's mutex released (a fault on it would take
//! `mmap_lock`, which the fault handler holds while it takes the mutex).

use core::ffi::c_void;
use core::sync::atomic::Ordering;
use kernel::ffi::{c_int, c_long, c_uint, c_ulong};

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::uaccess::UserSlice;

use super::dev::PciShared;
use crate::davinci_driver_core::Role;
use crate::davinci_hwif::layout::{LIST_BUF, LIST_ENTRIES, LIST_ENTRY_SIZE};
use crate::davinci_hwif::{AdminOp, ArgBuf, Completion, MapKind, OpenArgs, ReplyKind};
use crate::davinci_uapi::ioctl::{ioc_dir, IOC_READ};
use crate::davinci_uapi::{
    DeviceIdentity, Errno, KernelInfo, ListClientsArgs, ListKernelsArgs, WaitEventArgs, Wire,
    DRIVER_CMD_GET_IDENTITY, DRIVER_CMD_GET_LAST_ERROR, DRIVER_CMD_LIST_CLIENTS,
    DRIVER_CMD_LIST_KERNELS, DRIVER_CMD_READ_EVENTS, DRIVER_CMD_TRACE, DRIVER_CMD_WAIT_EVENT,
};
use crate::device::{errno, READY};
use crate::export_fd;
use crate::fops::opener;
use crate::ioctl::{copy_out, creates, read_arg, MAX_ARG};
use crate::sys::File;

extern "C" {
    fn davinci_signal_pending() -> c_int;
    fn davinci_cond_resched();
    fn davinci_map_pfns(
        vma: *mut c_void,
        addr: c_ulong,
        pfn: u64,
        count: u64,
        uncached: c_int,
    ) -> c_int;
}

/// Longest single sleep of a WAIT_EVENT before it asks again, a safety net only: its client's
/// notification word wakes it, as do a signal, its deadline (exact) and the device's loss.
/// Each parked sleeper costs one admin round trip per slice, which every tenant's calls queue
/// behind: at 1 s, a tenant parking 256 waits (the conformance suite's "waits" attacker)
/// kept the admin queue busy enough under a loaded host that the device plugin's 5 s health
/// check went unanswered.
const WAIT_SLICE_MS: u64 = 10_000;
/// Pages one fault maps: the faulting one and up to this many after it.
const FAULT_AROUND: u64 = 16;

/// One open file of a PCI device.
pub(crate) struct PciOpen {
    pub(super) dev: Arc<PciShared>,
    /// The open's handle in the device's client table (what the admin queue names it by).
    pub(super) client: u32,
    /// Its blocked WAIT_EVENTs (bounded) and the deadlines of interrupted ones.
    waits: crate::waits::OpenWaits,
}

/// One admin call of `o`, the device's lock taken killably (`EINTR` when killed first).
fn call(o: &PciOpen, op: AdminOp) -> Result<KBox<Completion>, Errno> {
    let mut d = o.dev.lock().map_err(|_| Errno::EINTR)?;
    d.call(o.client, op)
}

/// A failed completion's errno.
pub(super) fn failed(c: &Completion) -> Errno {
    Errno::from_code(c.errno as i32).unwrap_or(Errno::EIO)
}

/// A call the module refuses itself, before the device sees it: recorded for GET_LAST_ERROR
/// (`pci/lasterr.rs`), its errno returned.
fn refuse(o: &PciOpen, cmd: u32, e: &crate::davinci_driver_core::Error) -> c_long {
    if let Ok(mut d) = o.dev.lock() {
        d.note_refusal(o.client, cmd, e);
    }
    errno(e.errno) as c_long
}

/// `open` (from `pci/helpers.c`'s `davinci_pci_cdev_open`), with a reference on the node's
/// device that this function owns.
#[no_mangle]
unsafe extern "C" fn davinci_pci_open(state: *mut c_void, file: *mut bindings::file) -> c_int {
    // SAFETY: `state` is a reference `davinci_pci_get` made for this open, handed over.
    let dev = unsafe { Arc::<PciShared>::from_raw(state.cast()) };
    // SAFETY: `file` is the file being opened, used only during this call.
    let file = unsafe { File::new(file) };
    if !READY.load(Ordering::Acquire) {
        return errno(Errno::ENODEV);
    }
    let (p, _) = match opener(file) {
        Ok(o) => o,
        Err(e) => return errno(e),
    };
    let Ok(open) = KBox::new(
        PciOpen {
            dev: dev.clone(),
            client: 0,
            waits: crate::waits::OpenWaits::new(),
        },
        GFP_KERNEL,
    ) else {
        return errno(Errno::ENOMEM);
    };
    let mut open = open;
    {
        let Ok(mut d) = dev.lock() else {
            return errno(Errno::EINTR);
        };
        let c = match d.call(
            0,
            AdminOp::Open(OpenArgs {
                control: p.role == Role::Control,
                pid: p.pid,
                uid: p.uid,
                admin: p.admin,
                comm: p.comm,
                container: p.container,
            }),
        ) {
            Ok(c) => c,
            Err(e) => return errno(e),
        };
        if c.reply != ReplyKind::Done {
            return errno(failed(&c));
        }
        if d.add_open(c.client).is_err() {
            let _ = d.call(c.client, AdminOp::Close);
            return errno(Errno::ENOMEM);
        }
        open.client = c.client;
    }
    // SAFETY: `file` is the file being opened.
    unsafe { dev.inode.adopt(file.raw()) };
    file.set_private(KBox::into_raw(open).cast());
    0
}

/// `release` (from `davinci_pci_fops`): CLOSE; everything the open held goes on the device.
#[no_mangle]
unsafe extern "C" fn davinci_pci_release(
    _inode: *mut bindings::inode,
    file: *mut bindings::file,
) -> c_int {
    // SAFETY: `file` is the file being released, used only during this call.
    let file = unsafe { File::new(file) };
    // SAFETY: `open` stored a boxed `PciOpen` in `private_data`; release is called once.
    let o = unsafe { KBox::from_raw(file.private().cast::<PciOpen>()) };
    let mut d = o.dev.lock_always();
    // A lost device has nothing left to close.
    let _ = d.call(o.client, AdminOp::Close);
    d.remove_open(o.client);
    0
}

/// The open of a PCI file.
///
/// # Safety
///
/// `open` is the `private_data` of a PCI device's file (a `PciOpen`), during a file or vm
/// operation on it (so release has not run).
pub(super) unsafe fn open_of<'a>(open: *mut c_void) -> &'a PciOpen {
    // SAFETY: the caller's contract.
    unsafe { &*open.cast::<PciOpen>() }
}

/// `unlocked_ioctl` (from `davinci_pci_fops`).
#[no_mangle]
unsafe extern "C" fn davinci_pci_ioctl(
    file: *mut bindings::file,
    cmd: c_uint,
    arg: c_ulong,
) -> c_long {
    // SAFETY: `file` is the file of this call, used only during it.
    let file = unsafe { File::new(file) };
    // SAFETY: `private_data` is this PCI file's `PciOpen`, alive until release.
    let o = unsafe { open_of(file.private()) };
    ioctl(file, o, cmd, arg)
}

fn ioctl(file: File, o: &PciOpen, cmd: u32, arg: c_ulong) -> c_long {
    let fail = |e: Errno| errno(e) as c_long;
    let mut buf = [0u8; MAX_ARG];
    let size = match read_arg(&file, cmd, arg, &mut buf) {
        Ok(n) => n,
        Err(e) => return fail(e),
    };
    // Export fds (`export_fd`): an import's fd resolved to its token before the device is
    // asked; whether an export is asked as an fd, from the request (not the device's reply).
    let import_fd = match export_fd::resolve_import(cmd, &mut buf[..size], o.dev.instance) {
        Ok(fd) => fd,
        Err(e) => return refuse(o, cmd, &e),
    };
    let wants_fd = export_fd::wants_fd(cmd, &buf[..size]);
    let Some(a) = ArgBuf::from_slice(&buf[..size]) else {
        return fail(Errno::ENOTTY);
    };
    let dir = ioc_dir(cmd);
    let copy_back = |a: &ArgBuf| {
        if dir & IOC_READ != 0 {
            copy_out(arg, a.as_slice())
        } else {
            0
        }
    };
    match cmd {
        DRIVER_CMD_WAIT_EVENT => return wait_event(o, arg, a, &copy_back),
        DRIVER_CMD_LIST_CLIENTS | DRIVER_CMD_LIST_KERNELS => {
            return list_entries(o, cmd, a, &copy_back)
        }
        // TRACE's READ and READ_EVENTS: their records through the list area too.
        DRIVER_CMD_TRACE | DRIVER_CMD_READ_EVENTS => {
            if let Some(r) = super::entries::read_entries(o, cmd, a, &copy_back) {
                return r;
            }
        }
        _ => {}
    }
    let c = match call(
        o,
        AdminOp::Ioctl {
            request: cmd,
            arg: a,
        },
    ) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    if c.reply != ReplyKind::Done {
        return fail(failed(&c));
    }
    let mut reply = c.arg;
    if cmd == DRIVER_CMD_GET_LAST_ERROR {
        // The module's own refusals, which the device never saw (`pci/lasterr.rs`).
        if let Ok(d) = o.dev.lock() {
            d.overlay_last_error(o.client, reply.as_mut_slice());
        }
    }
    if cmd == DRIVER_CMD_GET_IDENTITY {
        // The device process cannot know where the guest put it: this side says.
        let mut id = DeviceIdentity::decode(reply.as_slice());
        id.bus_id = o.dev.bus_id;
        (id.pci_vendor, id.pci_device) = o.dev.pci_ids;
        id.encode(reply.as_mut_slice());
    }
    super::rights::note_rights(o, cmd, reply.as_slice());
    if let Some(fd) = import_fd {
        export_fd::restore_import(reply.as_mut_slice(), fd);
    }
    let pending = if wants_fd {
        match export_fd::export_fd(reply.as_mut_slice(), o.dev.instance) {
            Ok(p) => Some(p),
            Err(e) => return refuse(o, cmd, &e),
        }
    } else {
        None
    };
    let r = copy_back(&reply);
    // The fd appears only once the caller has its number (else it is dropped).
    if let (0, Some(p)) = (r, pending) {
        p.commit();
    }
    if r != 0 && creates(cmd) {
        // The caller cannot learn the handle: what was created goes again (docs/abi.md 1.4).
        let _ = o.dev.lock_always().call(
            o.client,
            AdminOp::Undo {
                request: cmd,
                arg: c.arg,
            },
        );
    }
    r
}

/// WAIT_EVENT: asked once; while the device says WAIT_NEEDED, sleeps until vector 1 (at most
/// a slice, the deadline exact) and asks again (WAIT_AGAIN), with whether the deadline
/// passed; a signal ends it after one more look (restarted by SA_RESTART, with its first
/// deadline, or EINTR). At most driver-core's bound of blocked waits per open sleep (`EBUSY`
/// beyond it).
fn wait_event(
    o: &PciOpen,
    arg: c_ulong,
    a: ArgBuf,
    copy_back: &dyn Fn(&ArgBuf) -> c_long,
) -> c_long {
    let timeout_ns = WaitEventArgs::decode(a.as_slice()).timeout_ns;
    let dev = &o.dev;
    let (key, deadline) =
        o.waits
            .deadline(arg as u64, a.as_slice(), timeout_ns, crate::sys::now_ns());
    let mut blocked = None;
    // This client's notification word, before the device looks: a change after this wakes.
    let mut before = dev.notified(o.client);
    let mut c = match call(
        o,
        AdminOp::Ioctl {
            request: DRIVER_CMD_WAIT_EVENT,
            arg: a,
        },
    ) {
        Ok(c) => c,
        Err(e) => return errno(e) as c_long,
    };
    loop {
        match c.reply {
            ReplyKind::Done => return copy_back(&c.arg),
            ReplyKind::Failed => {
                let r = copy_back(&c.arg);
                return if r != 0 {
                    r
                } else {
                    errno(failed(&c)) as c_long
                };
            }
            ReplyKind::WaitNeeded => {}
        }
        if blocked.is_none() {
            match o.waits.blocked.enter() {
                Ok(b) => blocked = Some(b),
                Err(e) => {
                    // The bound (driver-core's rule): `current` and `status` as the device
                    // answered, then EBUSY.
                    let r = copy_back(&c.arg);
                    return if r != 0 {
                        r
                    } else {
                        refuse(o, DRIVER_CMD_WAIT_EVENT, &e)
                    };
                }
            }
        }
        // SAFETY: no preconditions (process context).
        let signalled = unsafe { davinci_signal_pending() } != 0;
        let now = crate::sys::now_ns();
        if !signalled && now < deadline {
            let left_ms = (deadline - now).div_ceil(1_000_000).clamp(1, WAIT_SLICE_MS) as u32;
            let _ = dev.wait_notified(o.client, before, left_ms);
        }
        // SAFETY: as above.
        let signalled = signalled || unsafe { davinci_signal_pending() } != 0;
        before = dev.notified(o.client);
        let timed_out = crate::sys::now_ns() >= deadline;
        c = match call(
            o,
            AdminOp::WaitAgain {
                arg: c.arg,
                timed_out,
            },
        ) {
            Ok(c) => c,
            Err(e) => return errno(e) as c_long,
        };
        if signalled && c.reply == ReplyKind::WaitNeeded {
            // `current` and `status` as they are now; the kernel restarts the call (which
            // keeps this deadline) or returns EINTR.
            o.waits.interrupted(key, deadline);
            let r = copy_back(&c.arg);
            return if r != 0 {
                r
            } else {
                ERESTARTSYS.to_errno() as c_long
            };
        }
    }
}

/// Whether LIST_CLIENTS' `entry_size` is one the ABI accepts (else the device says EINVAL).
pub(super) fn entry_size_ok(n: u32) -> bool {
    n % 8 == 0 && (8..=4096).contains(&n)
}

// LIST_KERNELS' argument is LIST_CLIENTS' layout (buf, capacity, count, entry_size, pad): one
// decoding serves both, and its entries fit the list area's.
const _: () = {
    assert!(ListKernelsArgs::SIZE == ListClientsArgs::SIZE);
    assert!(core::mem::offset_of!(ListKernelsArgs, entry_size) == 16);
    assert!(core::mem::offset_of!(ListClientsArgs, entry_size) == 16);
    assert!(KernelInfo::SIZE as u64 <= LIST_ENTRY_SIZE);
};

/// LIST_CLIENTS and LIST_KERNELS (`cmd`): the device writes the entries into BAR2's list area
/// (its own entry size, at most the caller's), this side copies them to the caller's buffer
/// at the caller's stride, zero-padded, with the device's mutex released. The arguments are
/// checked here as driver-core checks them (the device is not trusted to refuse them), and
/// the device's count bounds nothing: at most the caller's capacity and the list area's
/// entries are read and copied.
fn list_entries(o: &PciOpen, cmd: u32, a: ArgBuf, copy_back: &dyn Fn(&ArgBuf) -> c_long) -> c_long {
    let asked = ListClientsArgs::decode(a.as_slice());
    if asked.pad != 0 || !entry_size_ok(asked.entry_size) {
        return errno(Errno::EINVAL) as c_long;
    }
    if asked.capacity != 0 && asked.buf == 0 {
        return errno(Errno::EFAULT) as c_long;
    }
    // The caller's whole buffer must be addressable (as the software device checks it).
    let span = u64::from(asked.capacity) * u64::from(asked.entry_size);
    if asked.buf != 0 && asked.buf.checked_add(span).is_none() {
        return errno(Errno::EFAULT) as c_long;
    }
    let mut fwd = asked;
    if asked.buf != 0 {
        fwd.buf = LIST_BUF;
    }
    fwd.entry_size = asked.entry_size.min(LIST_ENTRY_SIZE as u32);
    fwd.capacity = asked.capacity.min(LIST_ENTRIES as u32);
    let mut fa = a;
    fwd.encode(fa.as_mut_slice());
    let mut entries = KVVec::<u8>::new();
    let (count, n) = {
        let Ok(mut d) = o.dev.lock() else {
            return errno(Errno::EINTR) as c_long;
        };
        let c = match d.call(
            o.client,
            AdminOp::Ioctl {
                request: cmd,
                arg: fa,
            },
        ) {
            Ok(c) => c,
            Err(e) => return errno(e) as c_long,
        };
        if c.reply != ReplyKind::Done {
            return errno(failed(&c)) as c_long;
        }
        let got = ListClientsArgs::decode(c.arg.as_slice());
        if u64::from(got.count) > LIST_ENTRIES {
            return errno(d.violation("it listed more entries than its list area holds")) as c_long;
        }
        // (`fwd.capacity` is at most LIST_ENTRIES, `fwd.entry_size` at most LIST_ENTRY_SIZE.)
        let n = got.count.min(fwd.capacity) as usize;
        let bytes = n * fwd.entry_size as usize;
        if bytes > 0 {
            if entries.extend_with(bytes, 0, GFP_KERNEL).is_err() {
                return errno(Errno::ENOMEM) as c_long;
            }
            if d.read_list(&mut entries).is_err() {
                return errno(Errno::ENODEV) as c_long;
            }
        }
        (got.count, n)
    };
    let (have, stride) = (fwd.entry_size as usize, asked.entry_size as usize);
    static ZEROS: [u8; 256] = [0; 256];
    for i in 0..n {
        let at = asked.buf + (i * stride) as u64;
        let mut w = UserSlice::new(at as usize, stride).writer();
        let Some(e) = entries.get(i * have..(i + 1) * have) else {
            return errno(Errno::EFAULT) as c_long;
        };
        if w.write_slice(e).is_err() {
            return errno(Errno::EFAULT) as c_long;
        }
        let mut left = stride - have;
        while left > 0 {
            let k = left.min(ZEROS.len());
            if w.write_slice(&ZEROS[..k]).is_err() {
                return errno(Errno::EFAULT) as c_long;
            }
            left -= k;
        }
        // SAFETY: no preconditions (process context, no lock held).
        unsafe { davinci_cond_resched() };
    }
    let mut reply = asked;
    reply.count = count;
    let mut out = a;
    reply.encode(out.as_mut_slice());
    copy_back(&out)
}

/// The page-fault handler of a PCI mapping (from `davinci_pci_vm_fault`): maps page `page`
/// of the object at `cookie` (and a few after it) at `addr`, if it still exists. 0 or -errno
/// (`EINTR`: killed while waiting for the lock, the fault is retried or the task dies).
///
/// The pages come from the mapping right recorded at mmap (no device round trip under
/// `mmap_lock`), checked there to lie in BAR2's heap and to cover the whole mapping; only a
/// right no longer recorded (the table was full) asks the device again.
#[no_mangle]
unsafe extern "C" fn davinci_pci_fault(
    open: *mut c_void,
    cookie: u64,
    page: u64,
    vma: *mut bindings::vm_area_struct,
    addr: c_ulong,
) -> c_int {
    // SAFETY: the vma holds a reference on its file, whose `private_data` is its `PciOpen`.
    let o = unsafe { open_of(open) };
    const PAGE: u64 = 1 << bindings::PAGE_SHIFT;
    let Some(need) = page.checked_add(1).and_then(|p| p.checked_mul(PAGE)) else {
        return errno(Errno::EFAULT);
    };
    let Ok(mut d) = o.dev.lock() else {
        return errno(Errno::EINTR);
    };
    let m = match super::rights::target(o, &mut d, cookie, need) {
        Ok(m) => m,
        Err(e) => return errno(e),
    };
    let (pfn, count, uncached) = if m.kind == MapKind::Doorbell {
        // BAR0's first page: the Doorbell register. Only when the page holds nothing else
        // (checked at probe, logged): another device's registers must not reach a client.
        if page != 0 || !o.dev.regs_alone {
            return errno(Errno::EFAULT);
        }
        (o.dev.regs_phys / PAGE, 1, true)
    } else {
        // `target` checked `need <= m.len` and the range against BAR2's heap: `page` is one
        // of the object's, and so are the (at most FAULT_AROUND) after it.
        let Some(left) = (m.len / PAGE).checked_sub(page).filter(|&n| n > 0) else {
            return errno(Errno::EFAULT);
        };
        let Some(first) = o
            .dev
            .shm_phys
            .checked_add(m.offset)
            .map(|a| a / PAGE)
            .and_then(|p| p.checked_add(page))
        else {
            return errno(Errno::EFAULT);
        };
        (first, left.min(FAULT_AROUND), false)
    };
    // SAFETY: in the fault handler with the vma locked; the pfns are the device's BARs (the
    // object's pages, which stay its own until a completion revokes them: that takes the
    // device mutex, held here until the pages are in).
    unsafe { davinci_map_pfns(vma.cast(), addr, pfn, count, c_int::from(uncached)) }
}
