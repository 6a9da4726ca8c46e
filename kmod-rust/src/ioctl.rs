// SPDX-License-Identifier: GPL-2.0

//! The ioctl path: the argument copied in (its size and direction from the request number),
//! `DeviceCore::ioctl` under the device lock, WAIT_EVENT's sleep with the lock released, and
//! the results copied out after the lock is dropped (the entries of LIST_CLIENTS,
//! LIST_KERNELS, TRACE's READ and READ_EVENTS gathered first, [`UserOut`]). User memory is only
//! touched through `UserSlice`, never under the device lock.

use kernel::ffi::{c_long, c_uint, c_ulong};

use kernel::bindings;
use kernel::prelude::*;
use kernel::uaccess::UserSlice;

use crate::davinci_driver_core::{Error as CoreError, Platform, Reply, UserMem, MAX_CLIENTS};
use crate::davinci_uapi::ioctl::{ioc_dir, ioc_size, IOC_READ, IOC_WRITE};
use crate::davinci_uapi::{
    command_by_request, AllocMemoryArgs, Caller, ClientUsage, DeviceEvent, Errno, ListClientsArgs,
    ReadEventsArgs, TraceArgs, TraceRecord, WaitEventArgs, Wire, DEVICE_EVENTS_MAX,
    DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_LIST_CLIENTS, DRIVER_CMD_LIST_KERNELS,
    DRIVER_CMD_READ_EVENTS, DRIVER_CMD_TRACE, DRIVER_CMD_WAIT_EVENT, TRACE_RECORDS_MAX,
};
use crate::device::{errno, Open, Woke};
use crate::export_fd;
use crate::platform::VBuf;
use crate::sys::File;
use crate::worker::serve_kick;

/// Longest single sleep of a WAIT_EVENT before it re-checks (the deadline is exact anyway).
const WAIT_SLICE_MS: u64 = 1000;
/// Largest ioctl argument this driver has (the biggest ABI struct is far smaller).
pub(crate) const MAX_ARG: usize = 256;
/// The largest entry size driver-core accepts (`entry_size`: a multiple of 8 up to this).
const ENTRY_SIZE_MAX: u64 = 4096;

static ZEROS: [u8; 256] = [0; 256];

/// One piece of a command's output: `len` bytes at `off` from the caller's buffer, either
/// kept bytes (from `at` in `UserOut::data`) or zeroes.
struct Seg {
    off: u64,
    len: usize,
    at: Option<usize>,
}

/// The bounds of what one command writes to its caller's buffer: at most `entries` entries of
/// this driver's `size` bytes kept, and (padded to the caller's larger entries) at most
/// `entries * ENTRY_SIZE_MAX` bytes from the buffer's start.
#[derive(Clone, Copy)]
struct Bounds {
    /// The caller's buffer (`buf` of the command's argument); 0: the command writes none.
    base: u64,
    entries: usize,
    size: usize,
}

impl Bounds {
    /// For command `cmd` with argument `arg` (already copied in): LIST_CLIENTS and
    /// LIST_KERNELS (one entry per client at most), TRACE's READ (a trace buffer's records)
    /// and READ_EVENTS (the event log's). Every other command writes nothing through a
    /// pointer: any write it attempted would fault.
    fn of(cmd: u32, arg: &[u8]) -> Bounds {
        let none = Bounds {
            base: 0,
            entries: 0,
            size: 0,
        };
        let (buf, entries, size) = match cmd {
            // LIST_KERNELS' argument has LIST_CLIENTS' layout (the PCI transport asserts it).
            DRIVER_CMD_LIST_CLIENTS | DRIVER_CMD_LIST_KERNELS => (
                ListClientsArgs::from_bytes(arg).map(|a| a.buf),
                MAX_CLIENTS,
                core::mem::size_of::<ClientUsage>(),
            ),
            DRIVER_CMD_TRACE => (
                TraceArgs::from_bytes(arg).map(|a| a.buf),
                TRACE_RECORDS_MAX as usize,
                TraceRecord::SIZE,
            ),
            DRIVER_CMD_READ_EVENTS => (
                ReadEventsArgs::from_bytes(arg).map(|a| a.buf),
                DEVICE_EVENTS_MAX as usize,
                DeviceEvent::SIZE,
            ),
            _ => return none,
        };
        match buf {
            Some(base) => Bounds {
                base,
                entries,
                size,
            },
            None => none,
        }
    }

    /// Most bytes of entries kept in kernel memory: one entry of this driver's size per entry
    /// (LIST_CLIENTS: about 45 KiB; a trace buffer: 56 KiB). The zeroes that pad a caller's
    /// larger entries are written from a static page, not kept.
    fn data_max(&self) -> usize {
        self.entries * self.size
    }

    /// Most separate pieces: an entry and its padding, per entry.
    fn segs_max(&self) -> usize {
        2 * self.entries
    }

    /// Highest offset written at from the caller's buffer: every entry, at the largest entry
    /// size driver-core accepts.
    fn span_max(&self) -> u64 {
        self.entries as u64 * ENTRY_SIZE_MAX
    }
}

/// A command's entries, gathered under the device lock and copied to the caller's buffer
/// after it is dropped ([`UserOut::copy_out`]): a copy to user space under the device lock
/// could fault and take `mmap_lock`, which `mmap` and the fault handler hold while they take
/// the device lock (lockdep reported that cycle). Kernel memory is bounded by the command's
/// entries ([`Bounds`]), whatever entry size and capacity the caller asks for.
struct UserOut {
    bounds: Bounds,
    segs: KVVec<Seg>,
    data: KVVec<u8>,
}

impl UserOut {
    /// For command `cmd` with argument `arg` (already copied in).
    fn new(cmd: u32, arg: &[u8]) -> UserOut {
        UserOut {
            bounds: Bounds::of(cmd, arg),
            segs: KVVec::new(),
            data: KVVec::new(),
        }
    }

    /// Copies what was gathered to the caller: `Ok`, or `EFAULT`.
    fn copy_out(&self) -> Result {
        for s in self.segs.iter() {
            let addr = self.bounds.base.checked_add(s.off).ok_or(EFAULT)?;
            let mut w = UserSlice::new(addr as usize, s.len).writer();
            match s.at {
                Some(at) => w.write_slice(self.data.get(at..at + s.len).ok_or(EFAULT)?)?,
                None => {
                    let mut left = s.len;
                    while left > 0 {
                        let k = left.min(ZEROS.len());
                        w.write_slice(&ZEROS[..k])?;
                        left -= k;
                    }
                }
            }
        }
        Ok(())
    }
}

impl UserMem for UserOut {
    fn write(&mut self, addr: u64, data: &[u8]) -> crate::davinci_driver_core::Result<()> {
        let fault = || CoreError::new(Errno::EFAULT, "entries beyond the caller's buffer range");
        let nomem = || CoreError::new(Errno::ENOMEM, "out of kernel memory (entries)");
        let b = self.bounds;
        if b.base == 0 {
            return Err(fault());
        }
        let off = addr.checked_sub(b.base).ok_or_else(fault)?;
        if off
            .checked_add(data.len() as u64)
            .is_none_or(|end| end > b.span_max())
        {
            return Err(fault());
        }
        let zeros = data.iter().all(|&b| b == 0);
        // A piece that continues the last one (padding after padding, an entry right after
        // an entry) joins it: one copy to the caller for a run of entries.
        if let Some(last) = self.segs.last_mut() {
            if last.off + last.len as u64 == off {
                match last.at {
                    None if zeros => {
                        last.len += data.len();
                        return Ok(());
                    }
                    Some(at) if !zeros && at + last.len == self.data.len() => {
                        if self.data.len() + data.len() > b.data_max() {
                            return Err(nomem());
                        }
                        self.data
                            .extend_from_slice(data, GFP_KERNEL)
                            .map_err(|_| nomem())?;
                        last.len += data.len();
                        return Ok(());
                    }
                    _ => {}
                }
            }
        }
        if self.segs.len() >= b.segs_max() {
            return Err(nomem());
        }
        if zeros {
            // Padding: remembered as a run of zeroes.
            return self
                .segs
                .push(
                    Seg {
                        off,
                        len: data.len(),
                        at: None,
                    },
                    GFP_KERNEL,
                )
                .map_err(|_| nomem());
        }
        if self.data.len() + data.len() > b.data_max() {
            return Err(nomem());
        }
        let at = self.data.len();
        self.data
            .extend_from_slice(data, GFP_KERNEL)
            .map_err(|_| nomem())?;
        self.segs
            .push(
                Seg {
                    off,
                    len: data.len(),
                    at: Some(at),
                },
                GFP_KERNEL,
            )
            .map_err(|_| nomem())
    }
}

/// Copies `buf` to the caller's `arg`: 0, or `-EFAULT`.
pub(crate) fn copy_out(arg: c_ulong, buf: &[u8]) -> c_long {
    match UserSlice::new(arg as usize, buf.len())
        .writer()
        .write_slice(buf)
    {
        Ok(()) => 0,
        Err(_) => errno(Errno::EFAULT) as c_long,
    }
}

/// Device memory an ALLOC_MEMORY makes before it takes the device lock, when it is at least
/// this large (smaller buffers are made under the lock, as before: cheap enough).
const PREMADE_MIN: u64 = 1 << 20;

/// ALLOC_MEMORY's buffer, made (allocated and zeroed, charged to the caller's memory cgroup)
/// before the device is locked for the call, if the call may pass (driver-core's
/// `alloc_backing_size`, under a brief lock) and the buffer is large: zeroing up to 4 GiB
/// under the device lock held up every caller of the device, and an `open` waiting for it
/// holds the misc core's global mutex (every misc open on the machine waited).
fn premade(o: &Open, arg: &[u8]) -> Option<VBuf> {
    let a = AllocMemoryArgs::from_bytes(arg)?;
    let size = o.dev.lock().alloc_backing_size(o.client, a.size).ok()?;
    if size < PREMADE_MIN {
        return None;
    }
    VBuf::new(usize::try_from(size).ok()?).ok()
}

/// Whether request `cmd` creates an object (which must not outlive a lost reply): uapi's one
/// table of creates and their undos.
pub(crate) fn creates(cmd: u32) -> bool {
    crate::davinci_uapi::undo_request(cmd).is_some()
}

/// `unlocked_ioctl` (from `davinci_fops`; `compat_ptr_ioctl` calls it for 32-bit callers).
#[no_mangle]
unsafe extern "C" fn davinci_ioctl(file: *mut bindings::file, cmd: c_uint, arg: c_ulong) -> c_long {
    // SAFETY: `file` is the file of this call, used only during it.
    let file = unsafe { File::new(file) };
    // SAFETY: `private_data` is the `Open` of this file (set in `open`), alive until release,
    // which cannot run during an ioctl on the file.
    let o = unsafe { &*file.private().cast::<Open>() };
    ioctl(file, o, cmd, arg)
}

/// What every ioctl goes through before a device sees it, on either kind of node: an unknown
/// command is `ENOTTY` before its argument is touched (the device checks it again, with the
/// size, and says why); an admin's command (SET_DEVICE_SHARE, TENANT_SHARE) is checked against
/// the opener's credentials here (`EPERM`), besides the device's check of what open found;
/// the argument is copied in (`EFAULT`) for a command that writes one. Returns its size.
pub(crate) fn read_arg(
    file: &File,
    cmd: u32,
    arg: c_ulong,
    buf: &mut [u8; MAX_ARG],
) -> Result<usize, Errno> {
    let Some(command) = command_by_request(cmd) else {
        return Err(Errno::ENOTTY);
    };
    let size = ioc_size(cmd);
    if size > MAX_ARG {
        return Err(Errno::ENOTTY);
    }
    if command.caller == Caller::Admin && !file.admin() {
        return Err(Errno::EPERM);
    }
    if ioc_dir(cmd) & IOC_WRITE != 0
        && size > 0
        && UserSlice::new(arg as usize, size)
            .reader()
            .read_slice(&mut buf[..size])
            .is_err()
    {
        return Err(Errno::EFAULT);
    }
    Ok(size)
}

fn ioctl(file: File, o: &Open, cmd: u32, arg: c_ulong) -> c_long {
    let fail = |e: Errno| errno(e) as c_long;
    let mut buf = [0u8; MAX_ARG];
    let size = match read_arg(&file, cmd, arg, &mut buf) {
        Ok(n) => n,
        Err(e) => return fail(e),
    };
    let a = &mut buf[..size];
    let dir = ioc_dir(cmd);
    let copy_back = |a: &[u8]| {
        if dir & IOC_READ != 0 {
            copy_out(arg, a)
        } else {
            0
        }
    };
    // Export fds (`export_fd`): an import's fd resolved to its token before the device is
    // asked; whether an export is asked as an fd, from the request.
    let instance = export_fd::software_instance(o.dev.index);
    let import_fd = match export_fd::resolve_import(cmd, a, instance) {
        Ok(fd) => fd,
        Err(e) => {
            o.dev.lock().note_host_failure(o.client, cmd, &e);
            return fail(e.errno);
        }
    };
    let wants_fd = export_fd::wants_fd(cmd, a);
    // WAIT_EVENT: its deadline (the first call's, for a call a signal interrupted), before
    // the device is asked.
    let wait = (cmd == DRIVER_CMD_WAIT_EVENT).then(|| {
        let timeout = WaitEventArgs::from_bytes(a).map_or(0, |w| w.timeout_ns);
        o.waits
            .deadline(arg as u64, a, timeout, crate::sys::now_ns())
    });
    let premade = if cmd == DRIVER_CMD_ALLOC_MEMORY {
        premade(o, a)
    } else {
        None
    };
    let mut dev = o.dev.lock();
    if premade.is_some() {
        dev.platform_mut().set_premade(premade);
    }
    let mut out = UserOut::new(cmd, a);
    let r = dev.ioctl(o.client, cmd, a, &mut out);
    // A premade buffer the call did not take is freed after the lock is released.
    dev.platform_mut().retire_premade();
    match r {
        Ok(Reply::Done) | Ok(Reply::StreamCreated(_)) | Ok(Reply::Kick(_)) => {
            let kick = match r {
                Ok(Reply::StreamCreated(_)) => true,
                // NOTIFY, SUBMIT_TASK: the stream's turn runs here (`serve_kick`).
                Ok(Reply::Kick(stream)) => serve_kick(o.dev, &dev, stream),
                _ => false,
            };
            if kick {
                o.dev.wake.kick();
            }
            drop(dev);
            // No user memory is touched under the device lock (see `UserOut`).
            if out.copy_out().is_err() {
                return fail(Errno::EFAULT);
            }
            if let Some(fd) = import_fd {
                export_fd::restore_import(a, fd);
            }
            let pending = if wants_fd {
                match export_fd::export_fd(a, instance) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        o.dev.lock().note_host_failure(o.client, cmd, &e);
                        return fail(e.errno);
                    }
                }
            } else {
                None
            };
            let c = copy_back(a);
            // The fd appears only once the caller has its number (else it is dropped).
            if let (0, Some(p)) = (c, pending) {
                p.commit();
            }
            if c != 0 && creates(cmd) {
                // The caller cannot learn the handle: what was created goes again, so a
                // failed call creates nothing (docs/abi.md 1.4).
                let _ = o.dev.lock().undo_create(o.client, cmd, a);
                o.dev.wake.kick();
            }
            c
        }
        Ok(Reply::Wait(spec)) => {
            let (key, deadline) = wait.unwrap_or((0, u64::MAX));
            // The bound on blocked waits (driver-core's rule): one more than an open may
            // have is EBUSY, `current` and `status` copied out as for any failure.
            let _blocked = match o.waits.blocked.enter() {
                Ok(b) => b,
                Err(e) => {
                    let _ = dev.finish_wait(o.client, &spec, a, false);
                    dev.note_host_failure(o.client, cmd, &e);
                    drop(dev);
                    let c = copy_back(a);
                    return if c != 0 { c } else { fail(e.errno) };
                }
            };
            let mut interrupted = false;
            loop {
                let now = dev.platform().now_ns();
                let timed_out = now >= deadline;
                match dev.finish_wait(o.client, &spec, a, timed_out) {
                    Ok(Some(())) => {
                        drop(dev);
                        return copy_back(a);
                    }
                    Ok(None) if interrupted => {
                        // A signal: `current` and `status` as they are now, then the
                        // kernel restarts the call (SA_RESTART), which keeps this deadline
                        // (`OpenWaits`), or returns EINTR.
                        drop(dev);
                        o.waits.interrupted(key, deadline);
                        let c = copy_back(a);
                        return if c != 0 {
                            c
                        } else {
                            ERESTARTSYS.to_errno() as c_long
                        };
                    }
                    Ok(None) => {}
                    Err(e) => {
                        drop(dev);
                        let c = copy_back(a);
                        return if c != 0 { c } else { fail(e.errno) };
                    }
                }
                let left_ms = (deadline - now).div_ceil(1_000_000).clamp(1, WAIT_SLICE_MS) as u32;
                let Some(queue) = o.dev.wake.waiters.get(o.queue) else {
                    return fail(Errno::ENODEV);
                };
                if let Woke::Signal = dev.wait(queue, left_ms) {
                    // One more look (the wait may have been reached meanwhile), then out.
                    interrupted = true;
                }
            }
        }
        Err(e) => {
            drop(dev);
            // WAIT_EVENT reports `current`/`status` on its failures too (docs/abi.md 1.4).
            if cmd == DRIVER_CMD_WAIT_EVENT {
                let c = copy_back(a);
                if c != 0 {
                    return c;
                }
            }
            fail(e.errno)
        }
    }
}
