//! An [`Error`] as text, the one formatter every host uses where it turns an error into words
//! (the daemon's replies, the kernel's GET_LAST_ERROR, the PCI device's completions, the
//! in-process shim): the static message, and for a quota refusal ([`QuotaHit`]) the numbers
//! (asked, held, the limit) and the setting that changes the limit. No heap: the text is
//! written into a fixed buffer ([`Message`]). A buffer too small for the full text gets a
//! short form that still carries the numbers and the setting (GET_LAST_ERROR's 111 bytes);
//! one smaller still gets the short form cut at a character boundary.

use core::fmt::{self, Write};

use crate::error::{Error, QuotaHit, QuotaKind};

/// Most bytes of a [`Message`] (the full text of every error fits).
pub const MESSAGE_MAX: usize = 384;

/// An error's text in a fixed buffer: at most [`MESSAGE_MAX`] bytes (or the capacity asked
/// for), UTF-8, cut at a character boundary.
#[derive(Clone, Copy)]
pub struct Message {
    buf: [u8; MESSAGE_MAX],
    len: usize,
    cap: usize,
    cut: bool,
}

impl Message {
    /// An empty message of at most `cap` bytes (at most [`MESSAGE_MAX`]).
    pub const fn with_capacity(cap: usize) -> Message {
        Message {
            buf: [0; MESSAGE_MAX],
            len: 0,
            cap: if cap < MESSAGE_MAX { cap } else { MESSAGE_MAX },
            cut: false,
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        let bytes = self.buf.get(..self.len).unwrap_or(&[]);
        // Only whole characters are ever copied in.
        core::str::from_utf8(bytes).unwrap_or("")
    }

    /// Whether something did not fit.
    pub fn is_cut(&self) -> bool {
        self.cut
    }
}

impl Write for Message {
    /// Appends what fits (whole characters); never fails, so a long text is cut, not lost.
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.cap.saturating_sub(self.len);
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        if n < s.len() {
            self.cut = true;
        }
        if let (Some(dst), Some(src)) = (
            self.buf.get_mut(self.len..self.len + n),
            s.as_bytes().get(..n),
        ) {
            dst.copy_from_slice(src);
            self.len += n;
        }
        Ok(())
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<&str> for Message {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Error {
    /// The error as text, in full: the message and, for a quota refusal, its numbers and
    /// setting.
    pub fn message(&self) -> Message {
        self.message_within(MESSAGE_MAX)
    }

    /// The error as text in at most `cap` bytes: the full text if it fits, else for a quota
    /// refusal the short form (the numbers and the setting, in at most 111 bytes for every
    /// table quota and for memory up to 4 GiB), cut at a character boundary if even that
    /// does not fit; any other message cut.
    pub fn message_within(&self, cap: usize) -> Message {
        let mut m = Message::with_capacity(cap);
        match &self.quota {
            None => {
                let _ = m.write_str(self.msg);
            }
            Some(hit) => {
                let _ = write_full(&mut m, self.msg, hit);
                if m.is_cut() {
                    m = Message::with_capacity(cap);
                    let _ = write_short(&mut m, hit);
                }
            }
        }
        m
    }
}

/// `{msg}: asked 1 more, the tenant holds 64, quota 64 (the setting)`.
fn write_full(w: &mut Message, msg: &str, hit: &QuotaHit) -> fmt::Result {
    let QuotaHit {
        kind,
        asked,
        held,
        limit,
        shared,
    } = *hit;
    match kind {
        QuotaKind::Memory => {
            let kmod = if shared {
                "the kernel module's memory_mb over tenant_slots while the device is shared"
            } else {
                "the kernel module's memory_mb"
            };
            write!(
                w,
                "{msg}: asked {asked} bytes more, the tenant holds {held}, limit {limit} \
                 (GET_USAGE memory_limit; davinci-mockd --tenant-memory-limit SIZE or \
                 --tenant-slots N, or {kmod})"
            )
        }
        QuotaKind::Opens => write!(
            w,
            "{msg}: asked {asked} more, the tenant holds {held}, quota {limit} (the device's \
             client opens over its tenant slots: davinci-mockd --tenant-slots N, or the \
             kernel module's tenant_slots parameter)"
        ),
        _ => {
            let name = kind.name();
            write!(
                w,
                "{msg}: asked {asked} more, the tenant holds {held}, quota {limit} \
                 (davinci-mockd --tenant-quota {name}=N or --tenant-slots N, or the kernel \
                 module's quota_{name} or tenant_slots parameter)"
            )
        }
    }
}

/// The same numbers in at most 111 bytes: `streams quota (shared): asked 1, holds 64,
/// quota 64; --tenant-quota streams=N, quota_streams`.
fn write_short(w: &mut Message, hit: &QuotaHit) -> fmt::Result {
    let QuotaHit {
        kind,
        asked,
        held,
        limit,
        shared,
    } = *hit;
    match kind {
        QuotaKind::Memory => {
            let kmod = if shared {
                "memory_mb/slots"
            } else {
                "memory_mb"
            };
            write!(
                w,
                "memory limit: asked {asked}, holds {held}, limit {limit} B; \
                 --tenant-memory-limit, {kmod}"
            )
        }
        QuotaKind::Opens => write!(
            w,
            "opens quota: asked {asked}, holds {held}, quota {limit}; --tenant-slots, \
             tenant_slots"
        ),
        _ => {
            let name = kind.name();
            write!(
                w,
                "{name} quota (shared): asked {asked}, holds {held}, quota {limit}; \
                 --tenant-quota {name}=N, quota_{name}"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{MAX_ALLOCATIONS, MAX_EVENTS};
    use davinci_uapi::{Errno, LAST_ERROR_MESSAGE_LEN};

    const STREAMS: &str = "this client holds its quota of streams on a shared device";

    fn hit(kind: QuotaKind, asked: u64, held: u64, limit: u64) -> QuotaHit {
        QuotaHit {
            kind,
            asked,
            held,
            limit,
            shared: true,
        }
    }

    #[test]
    fn a_plain_error_is_its_message() {
        let e = Error::new(Errno::EINVAL, "pad must be 0");
        assert_eq!(e.message(), "pad must be 0");
        assert!(!e.message().is_cut());
        assert_eq!(e.message_within(3), "pad");
        assert!(e.message_within(3).is_cut());
        let mut shown = Message::with_capacity(64);
        let _ = write!(shown, "{e}");
        assert_eq!(shown, "EINVAL: pad must be 0");
    }

    #[test]
    fn a_quota_refusal_names_its_numbers_and_setting() {
        let e = Error::quota(Errno::ENOSPC, STREAMS, hit(QuotaKind::Streams, 1, 64, 64));
        assert_eq!(
            e.message(),
            "this client holds its quota of streams on a shared device: asked 1 more, the \
             tenant holds 64, quota 64 (davinci-mockd --tenant-quota streams=N or \
             --tenant-slots N, or the kernel module's quota_streams or tenant_slots parameter)"
        );
        assert_eq!(
            e.message_within(LAST_ERROR_MESSAGE_LEN - 1),
            "streams quota (shared): asked 1, holds 64, quota 64; --tenant-quota streams=N, \
             quota_streams"
        );
        let m = Error::quota(
            Errno::ENOMEM,
            "allocation would exceed this client's device memory limit",
            hit(QuotaKind::Memory, 4096, 67_104_768, 67_108_864),
        );
        let full = m.message();
        assert!(
            full.as_str().starts_with(
                "allocation would exceed this client's device memory limit: asked 4096 bytes \
                 more, the tenant holds 67104768, limit 67108864 (GET_USAGE memory_limit; \
                 davinci-mockd --tenant-memory-limit SIZE or --tenant-slots N, or the kernel \
                 module's memory_mb over tenant_slots"
            ),
            "{full}"
        );
        assert_eq!(
            m.message_within(LAST_ERROR_MESSAGE_LEN - 1),
            "memory limit: asked 4096, holds 67104768, limit 67108864 B; \
             --tenant-memory-limit, memory_mb/slots"
        );
        let exclusive = Error::quota(
            Errno::ENOMEM,
            "x",
            QuotaHit {
                shared: false,
                ..hit(QuotaKind::Memory, 1, 2, 3)
            },
        );
        assert!(exclusive
            .message()
            .as_str()
            .contains("the kernel module's memory_mb)"));
    }

    /// The short form of every table quota at its largest numbers, and of memory up to the
    /// kernel module's largest device (4 GiB), fits GET_LAST_ERROR's message field whole.
    #[test]
    fn the_short_form_fits_get_last_error() {
        let cap = LAST_ERROR_MESSAGE_LEN - 1;
        let big = [
            hit(QuotaKind::Contexts, 1, 256, 256),
            hit(QuotaKind::Streams, 1, 256, 256),
            hit(QuotaKind::Events, 1, MAX_EVENTS as u64, MAX_EVENTS as u64),
            hit(
                QuotaKind::Allocations,
                1,
                MAX_ALLOCATIONS as u64,
                MAX_ALLOCATIONS as u64,
            ),
            hit(QuotaKind::Exports, 1, 64, 64),
            hit(QuotaKind::Opens, 1, 256, 256),
            hit(QuotaKind::Memory, 4 << 30, 4 << 30, 4 << 30),
        ];
        for h in big {
            let m = Error::quota(Errno::ENOSPC, STREAMS, h).message_within(cap);
            assert!(!m.is_cut(), "{m} ({} bytes)", m.as_str().len());
            assert!(m.as_str().contains(h.kind.name()), "{m}");
            assert!(m.as_str().contains(format_u64(h.held).as_str()), "{m}");
            // Every full form fits a message whole.
            assert!(!Error::quota(Errno::ENOSPC, STREAMS, h).message().is_cut());
        }
    }

    #[test]
    fn a_message_is_cut_at_a_character_boundary() {
        let mut m = Message::with_capacity(4);
        let _ = m.write_str("aé€");
        assert_eq!(m, "aé");
        assert!(m.is_cut());
        let _ = m.write_str("b");
        assert_eq!(m, "aéb");
        let mut big = Message::with_capacity(10_000);
        for _ in 0..100 {
            let _ = big.write_str("0123456789");
        }
        assert_eq!(big.as_str().len(), MESSAGE_MAX);
    }

    fn format_u64(v: u64) -> Message {
        let mut m = Message::with_capacity(32);
        let _ = write!(m, "{v}");
        m
    }
}
