//! The caller's user memory as the device core sees it through [`UserMem`] ([`User`]): a
//! small mapped window, `EFAULT` elsewhere, and the check that only LIST_CLIENTS writes it,
//! inside its own buffer.
#![forbid(unsafe_code)]

use davinci_driver_core::{Error, Result, UserMem};
use davinci_uapi::Errno;

/// Where the mapped window starts.
pub(super) const USER_BASE: u64 = 0x1_0000;
/// Its length.
pub(super) const USER_LEN: u64 = 64 << 10;

/// The caller's address space as a kernel sees it: `USER_LEN` bytes mapped at `USER_BASE`
/// and nothing else. A write anywhere else fails with `EFAULT` (what `copy_to_user` returns
/// for a bad pointer), never a panic: a raw LIST_CLIENTS may carry any `buf`.
///
/// Only LIST_CLIENTS writes user memory, and only inside `[buf, buf + capacity *
/// entry_size)` of the very arguments it was called with: [`State::ioctl`](super::state::State::ioctl) sets `window`
/// from every LIST_CLIENTS argument (structured or raw) for the length of that call, and
/// every write, mapped or not, is checked against it.
pub(super) struct User {
    pub(super) mem: Vec<u8>,
    /// The window of the call in progress (`None`: no call may write user memory).
    pub(super) window: Option<(u64, u64)>,
    /// Writes of the call in progress that faulted.
    pub(super) faults: u32,
}

impl UserMem for User {
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        let Some((lo, hi)) = self.window else {
            panic!(
                "a user-memory write [{addr:#x}, +{}) outside LIST_CLIENTS",
                data.len()
            );
        };
        let end = addr.checked_add(data.len() as u64);
        assert!(
            addr >= lo && end.is_some_and(|e| e <= hi),
            "LIST_CLIENTS wrote [{addr:#x}, +{}) outside [{lo:#x}, {hi:#x})",
            data.len(),
        );
        match addr.checked_sub(USER_BASE) {
            Some(o)
                if o.checked_add(data.len() as u64)
                    .is_some_and(|e| e <= USER_LEN) =>
            {
                self.mem[o as usize..o as usize + data.len()].copy_from_slice(data);
                Ok(())
            }
            _ => {
                self.faults += 1;
                Err(Error::new(
                    Errno::EFAULT,
                    "outside the caller's mapped memory",
                ))
            }
        }
    }
}
