//! One open of a `davinci-mockd` device: a `SOCK_SEQPACKET` connection speaking
//! `davinci_mockd_proto::wire` (HELLO, then IOCTL, MMAP, CANCEL and CLOSE frames).
//!
//! Several threads may use one open at once, as they may use one file of the kernel module
//! (a thread blocked in WAIT_EVENT does not hold up another's CREATE_STREAM): each request
//! carries a tag, one caller at a time reads the socket and hands every reply to the caller
//! whose tag it carries (`davinci_mockd_proto::client`, which the shim's `mock:` backend
//! uses too; this file adds the descriptor checks and words errors). Nothing waits for ever
//! on a daemon that stopped answering: connecting gives up after [`CONNECT_TIMEOUT`], every
//! call but WAIT_EVENT (bounded by its own timeout) after the reply timeout
//! (`$DAVINCI_SOCKET_TIMEOUT` seconds, default 10, read at open), with `ETIMEDOUT`.
//!
//! The connection's socket sits on a high descriptor number ([`PRIVATE_FD_MIN`]), away from
//! the numbers the program counts on, and is checked before every use to still be the socket
//! this open connected (a program that closed it behind the library's back, for instance
//! with `close_range`, gets `ENODEV`, and no frame goes to whatever file took the number).

use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use davinci_mockd_proto::client::{CallError, Client};
use davinci_mockd_proto::{connect_trusted, Kind, Trust, WireRole};

use crate::sys::{self, FileId};
use crate::Failure;

pub use davinci_mockd_proto::client::{Incoming, CONNECT_TIMEOUT, REPLY_TIMEOUT};

/// The connection's own descriptor is moved to this number or above (when the descriptor
/// limit allows), so the program's `open` gets the lowest free number as POSIX promises.
pub const PRIVATE_FD_MIN: RawFd = 512;

/// An open of a device served by `davinci-mockd`: the shared client of
/// `davinci_mockd_proto::client`, plus what only an interposed descriptor needs (the fork
/// and closed-behind-its-back checks).
pub struct Conn {
    client: Client,
    /// What the socket's descriptor is (checked before each use).
    sock_id: Option<FileId>,
    path: PathBuf,
    /// The process that opened it: a child after `fork` shares the socket but must not use it.
    pid: u32,
    /// HELLO succeeded: there is an open for CLOSE to end.
    opened: bool,
}

/// The library's failure for what the shared client reports (messages name the socket).
fn failure(path: &Path, e: CallError) -> Failure {
    let msg = match e {
        CallError::Refused { .. } | CallError::MalformedHello | CallError::TimedOut(_) => {
            format!("{}: {e}", path.display())
        }
        _ => e.to_string(),
    };
    Failure::new(e.errno(), msg)
}

impl Conn {
    /// Connects to the socket at `path`, if this process trusts it
    /// (`davinci_mockd_proto::trust`: the socket, its directory and the daemon listening),
    /// and opens the device as `role`.
    ///
    /// # Errors
    /// `EACCES` naming the socket and why when it is not trusted (said on stderr once per
    /// process); the `connect(2)` errno (`ENOENT`: no such socket, `ECONNREFUSED`: no daemon behind it,
    /// `EACCES`: the socket's permissions refuse this user), `ETIMEDOUT`, or the HELLO
    /// reply's errno (`EBUSY` for a device in exclusive use, `EPROTO` for another ABI major).
    pub fn open(path: &Path, role: WireRole) -> Result<Conn, Failure> {
        let p = path.display();
        let trust = Trust::from_env();
        let sock = connect_trusted(path, &trust, CONNECT_TIMEOUT).map_err(|e| {
            if e.raw_os_error().is_none() && e.kind() == std::io::ErrorKind::PermissionDenied {
                // The trust rule's refusal: said on stderr once, whatever DAVINCI_PRELOAD_LOG.
                return Failure::said_once(libc::EACCES, e.to_string());
            }
            let errno = if e.kind() == std::io::ErrorKind::TimedOut {
                libc::ETIMEDOUT
            } else {
                e.raw_os_error().unwrap_or(libc::EIO)
            };
            Failure::new(errno, format!("cannot connect to {p}: {e}"))
        })?;
        // Out of the program's way; where the limit is lower, it stays where it is.
        let sock = sock.duplicate_at_least(PRIVATE_FD_MIN).unwrap_or(sock);
        let sock_id = sys::file_id(sock.as_fd().as_raw_fd());
        let mut c = Conn {
            client: Client::new(sock, p.to_string()),
            sock_id,
            path: path.to_path_buf(),
            pid: std::process::id(),
            opened: false,
        };
        c.check()?;
        c.client.hello(role).map_err(|e| failure(path, e))?;
        c.opened = true;
        Ok(c)
    }

    /// Whether this process is a child that inherited the open through `fork` (the socket is
    /// shared with the parent, whose replies it would steal).
    pub fn inherited(&self) -> bool {
        std::process::id() != self.pid
    }

    /// The socket's path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fails in a child after `fork`; marks the connection dead when its descriptor is no
    /// longer the socket this open connected.
    fn check(&self) -> Result<(), Failure> {
        if self.inherited() {
            return Err(Failure::new(
                libc::EBADFD,
                "this davinci descriptor was opened by the parent process before fork; open the device again in the child".to_string(),
            ));
        }
        if self.sock_id.is_none()
            || sys::file_id(self.client.socket().as_fd().as_raw_fd()) != self.sock_id
        {
            self.client.mark_dead(|| {
                format!(
                    "{}: the library's connection descriptor was closed behind its back",
                    self.path.display()
                )
            });
        }
        Ok(())
    }

    /// Sends one request and waits for its reply. A blocking WAIT_EVENT whose wait a signal
    /// handler (installed without `SA_RESTART`) interrupts is cancelled and fails with
    /// `EINTR`, as the kernel module's does; other calls read on through signals, as the
    /// module's do not return `EINTR` either.
    ///
    /// # Errors
    /// `EBADFD` in a child after `fork`; `ENODEV` when the connection is gone; `ETIMEDOUT`
    /// when the daemon does not answer; `EINTR` as above.
    pub fn call(&self, kind: Kind, request: u32, arg: Vec<u8>) -> Result<Incoming, Failure> {
        self.check()?;
        self.client
            .call(kind, request, arg)
            .map_err(|e| failure(&self.path, e))
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // The last descriptor of the open is closed. Closing the socket ends the open; a CLOSE
        // frame first makes that synchronous (as the module's release is: when close returns,
        // everything the open held is gone). Never from a child after fork: the socket is the
        // parent's open too, and only the child's copy of the descriptor goes.
        if self.opened && !self.inherited() && self.client.idle() {
            let _ = self.call(Kind::Close, 0, Vec::new());
        }
    }
}
