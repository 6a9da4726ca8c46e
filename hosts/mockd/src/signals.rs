//! The daemon's signals (SIGTERM, SIGINT: shut down; SIGUSR1: reset every device), taken
//! synchronously from a `signalfd`, which says who sent each one: the sender's pid and uid
//! and how (`si_code`: `SI_USER` from `kill`, `SI_QUEUE`, `SI_TKILL`, the kernel). The
//! signals are blocked before any thread starts (threads inherit the mask), so none is
//! delivered anywhere else.
#![forbid(unsafe_code)]

use nix::libc;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{siginfo, SfdFlags, SignalFd};

/// The signals the daemon takes, blocked in every thread and read from one `signalfd`.
#[derive(Debug)]
pub(crate) struct Signals {
    fd: SignalFd,
    own_pid: u32,
}

/// One signal taken, and who sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Received {
    /// The signal (`None`: a number the daemon did not ask for, which cannot happen).
    pub(crate) signal: Option<Signal>,
    /// `ssi_pid`: the sending process (0 from the kernel).
    pub(crate) pid: u32,
    /// `ssi_uid`: the sender's real uid.
    pub(crate) uid: u32,
    /// `ssi_code`: how it was sent.
    pub(crate) code: i32,
    /// Sent by this process itself (the `--reset-after` timer).
    pub(crate) own: bool,
}

impl Received {
    /// What was read as `info`, in a process whose pid is `own_pid`.
    fn from_info(info: &siginfo, own_pid: u32) -> Received {
        Received::new(
            info.ssi_signo,
            info.ssi_pid,
            info.ssi_uid,
            info.ssi_code,
            own_pid,
        )
    }

    /// Signal number `signo` sent by `pid` (real uid `uid`) with `si_code` `code`, taken by
    /// a process whose pid is `own_pid`.
    pub(crate) fn new(signo: u32, pid: u32, uid: u32, code: i32, own_pid: u32) -> Received {
        Received {
            signal: i32::try_from(signo)
                .ok()
                .and_then(|n| Signal::try_from(n).ok()),
            pid,
            uid,
            code,
            own: pid == own_pid && code == libc::SI_USER,
        }
    }

    /// The signal's name (`SIGTERM`).
    pub(crate) fn name(&self) -> &'static str {
        self.signal.map_or("unknown", Signal::as_str)
    }

    /// `si_code`'s name.
    pub(crate) fn code_name(&self) -> &'static str {
        match self.code {
            libc::SI_USER => "SI_USER",
            libc::SI_QUEUE => "SI_QUEUE",
            libc::SI_TKILL => "SI_TKILL",
            libc::SI_KERNEL => "SI_KERNEL",
            c if c > 0 => "kernel",
            _ => "other",
        }
    }

    /// Who sent it, in words: `--reset-after` (this process's own timer), `kill`,
    /// `sigqueue`, `tgkill`, `kernel`.
    pub(crate) fn sender(&self) -> &'static str {
        if self.own {
            return "--reset-after";
        }
        match self.code {
            libc::SI_USER => "kill",
            libc::SI_QUEUE => "sigqueue",
            libc::SI_TKILL => "tgkill",
            c if c > 0 => "kernel",
            _ => "other",
        }
    }
}

impl Signals {
    /// Blocks SIGTERM, SIGINT and SIGUSR1 in the calling thread (call it before any thread
    /// starts: they inherit the mask) and opens the `signalfd` that takes them.
    ///
    /// # Errors
    /// The mask cannot be set or the `signalfd` cannot be made.
    pub(crate) fn block() -> nix::Result<Signals> {
        let mut set = SigSet::empty();
        set.add(Signal::SIGTERM);
        set.add(Signal::SIGINT);
        set.add(Signal::SIGUSR1);
        set.thread_block()?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC)?;
        Ok(Signals {
            fd,
            own_pid: std::process::id(),
        })
    }

    /// The next signal, waiting for it.
    ///
    /// # Errors
    /// The `signalfd` cannot be read (not `EINTR`, which is retried).
    pub(crate) fn next(&self) -> nix::Result<Received> {
        loop {
            match self.fd.read_signal() {
                Ok(Some(info)) => return Ok(Received::from_info(&info, self.own_pid)),
                // Blocking descriptor: "no signal" cannot happen; read again.
                Ok(None) | Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(signo: Signal, pid: u32, uid: u32, code: i32, own_pid: u32) -> Received {
        Received::new(signo as u32, pid, uid, code, own_pid)
    }

    #[test]
    fn the_sender_is_named_by_pid_uid_and_how() {
        let r = info(Signal::SIGUSR1, 4242, 1000, libc::SI_USER, 77);
        assert_eq!(r.signal, Some(Signal::SIGUSR1));
        assert_eq!((r.pid, r.uid, r.own), (4242, 1000, false));
        assert_eq!(
            (r.name(), r.code_name(), r.sender()),
            ("SIGUSR1", "SI_USER", "kill")
        );
        // The daemon's own timer: kill(getpid(), SIGUSR1).
        let r = info(Signal::SIGUSR1, 77, 0, libc::SI_USER, 77);
        assert_eq!((r.own, r.sender()), (true, "--reset-after"));
        // Other ways to send: not the timer even from our pid.
        let r = info(Signal::SIGTERM, 77, 0, libc::SI_TKILL, 77);
        assert_eq!(
            (r.own, r.code_name(), r.sender()),
            (false, "SI_TKILL", "tgkill")
        );
        let r = info(Signal::SIGINT, 9, 0, libc::SI_QUEUE, 77);
        assert_eq!((r.name(), r.sender()), ("SIGINT", "sigqueue"));
        let r = info(Signal::SIGTERM, 0, 0, libc::SI_KERNEL, 77);
        assert_eq!((r.code_name(), r.sender()), ("SI_KERNEL", "kernel"));
    }
}
