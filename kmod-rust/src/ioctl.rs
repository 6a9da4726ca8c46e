// SPDX-License-Identifier: GPL-2.0

//! The `ioctl` file operation: the argument copied in (its size and direction from the request
//! number), `DeviceCore::ioctl` under the device lock, WAIT_EVENT's sleep with the lock
//! released, and the results copied out after the lock is dropped (LIST_CLIENTS' entries
//! gathered in a kernel buffer first, [`UserOut`]).

use core::ffi::c_void;
use kernel::ffi::{c_int, c_long, c_uint, c_ulong};

use kernel::bindings;
use kernel::prelude::*;

use crate::davinci_driver_core::{Error as CoreError, Platform, Reply, UserMem, MAX_CLIENTS};
use crate::davinci_uapi::ioctl::{ioc_dir, ioc_size, IOC_READ, IOC_WRITE};
use crate::davinci_uapi::{
    command_by_request, Errno, ListClientsArgs, Wire, DRIVER_CMD_LIST_CLIENTS,
    DRIVER_CMD_WAIT_EVENT,
};
use crate::device::{errno, Open, Woke};
use crate::wake::queue_of;

/// Longest single sleep of a WAIT_EVENT before it re-checks (the deadline is exact anyway).
const WAIT_SLICE_MS: u64 = 1000;
/// Largest ioctl argument this driver has (the biggest ABI struct is far smaller).
const MAX_ARG: usize = 256;

/// Most bytes LIST_CLIENTS can write: every client, at the largest entry size driver-core
/// accepts.
const LIST_OUT_MAX: usize = MAX_CLIENTS * 4096;

/// LIST_CLIENTS' entries, gathered in a kernel buffer under the device lock and copied to the
/// caller's buffer after the lock is dropped ([`UserOut::copy_out`]). A `copy_to_user` under
/// the device lock could fault and take `mmap_lock`, which `mmap` holds while it takes the
/// device lock: lockdep reported exactly that circular dependency.
struct UserOut {
    /// The caller's buffer (`davinci_list_clients_args.buf`); driver-core writes the
    /// entries upwards from it, contiguously.
    base: u64,
    bytes: KVec<u8>,
}

impl UserOut {
    /// For command `cmd` with argument `arg` (already copied in).
    fn new(cmd: u32, arg: &[u8]) -> UserOut {
        let base = if cmd == DRIVER_CMD_LIST_CLIENTS {
            ListClientsArgs::from_bytes(arg).map_or(0, |a| a.buf)
        } else {
            0
        };
        UserOut {
            base,
            bytes: KVec::new(),
        }
    }

    /// Copies what was gathered to the caller: 0, or `-EFAULT`.
    fn copy_out(&self) -> c_int {
        if self.bytes.is_empty() {
            return 0;
        }
        copy_out(self.base as c_ulong, &self.bytes)
    }
}

impl UserMem for UserOut {
    fn write(&mut self, addr: u64, data: &[u8]) -> crate::davinci_driver_core::Result<()> {
        let fault = || CoreError::new(Errno::EFAULT, "LIST_CLIENTS buffer range overflows");
        let off = addr
            .checked_sub(self.base)
            .and_then(|o| usize::try_from(o).ok())
            .ok_or_else(fault)?;
        let end = off
            .checked_add(data.len())
            .filter(|&e| e <= LIST_OUT_MAX)
            .ok_or_else(fault)?;
        if end > self.bytes.len() {
            self.bytes
                .extend_with(end - self.bytes.len(), 0, GFP_KERNEL)
                .map_err(|_| {
                    CoreError::new(Errno::ENOMEM, "out of kernel memory (LIST_CLIENTS)")
                })?;
        }
        self.bytes[off..end].copy_from_slice(data);
        Ok(())
    }
}

fn copy_out(arg: c_ulong, buf: &[u8]) -> c_int {
    // SAFETY: as in `UserOut::write`.
    let left =
        unsafe { bindings::copy_to_user(arg as *mut c_void, buf.as_ptr().cast(), buf.len() as _) };
    if left == 0 {
        0
    } else {
        errno(Errno::EFAULT)
    }
}

/// `unlocked_ioctl` (and `compat_ioctl`).
pub(crate) unsafe extern "C" fn fop_ioctl(
    file: *mut bindings::file,
    cmd: c_uint,
    arg: c_ulong,
) -> c_long {
    // SAFETY: `private_data` is the `Open` of this file (set in `open`), alive until release.
    let o = unsafe { &*(*file).private_data.cast::<Open>() };
    ioctl(o, cmd, arg) as c_long
}

fn ioctl(o: &Open, cmd: u32, arg: c_ulong) -> c_int {
    // An unknown command is ENOTTY before its argument is touched (driver-core checks it
    // again, with the size, and says why).
    if command_by_request(cmd).is_none() {
        return errno(Errno::ENOTTY);
    }
    let size = ioc_size(cmd);
    if size > MAX_ARG {
        return errno(Errno::ENOTTY);
    }
    let mut buf = [0u8; MAX_ARG];
    let a = &mut buf[..size];
    let dir = ioc_dir(cmd);
    if dir & IOC_WRITE != 0 && size > 0 {
        // SAFETY: `copy_from_user` checks the user range and writes at most `size` bytes
        // into `a`, a live kernel buffer of that length.
        let left = unsafe {
            bindings::copy_from_user(a.as_mut_ptr().cast(), arg as *const c_void, size as _)
        };
        if left != 0 {
            return errno(Errno::EFAULT);
        }
    }
    let copy_back = |a: &[u8]| {
        if dir & IOC_READ != 0 {
            copy_out(arg, a)
        } else {
            0
        }
    };
    let mut dev = o.dev.lock();
    let mut out = UserOut::new(cmd, a);
    let r = dev.ioctl(o.client, cmd, a, &mut out);
    match r {
        Ok(Reply::Done) | Ok(Reply::StreamCreated(_)) | Ok(Reply::Kick(_)) => {
            if matches!(r, Ok(Reply::StreamCreated(_)) | Ok(Reply::Kick(_))) {
                o.dev.wake.kick();
            }
            drop(dev);
            // No user memory is touched under the device lock (see `UserOut`).
            let c = out.copy_out();
            if c != 0 {
                return c;
            }
            copy_back(a)
        }
        Ok(Reply::Wait(spec)) => {
            let now = dev.platform().now_ns();
            let deadline = now.saturating_add(spec.timeout_ns);
            loop {
                let now = dev.platform().now_ns();
                let timed_out = now >= deadline;
                match dev.finish_wait(o.client, &spec, a, timed_out) {
                    Ok(Some(())) => {
                        drop(dev);
                        return copy_back(a);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        drop(dev);
                        let c = copy_back(a);
                        return if c != 0 { c } else { errno(e.errno) };
                    }
                }
                let left_ms = (deadline - now).div_ceil(1_000_000).clamp(1, WAIT_SLICE_MS) as u32;
                let queue = &o.dev.wake.waiters[queue_of(o.client)];
                if let Woke::Signal = dev.wait(queue, left_ms) {
                    return errno(Errno::EINTR);
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
            errno(e.errno)
        }
    }
}
