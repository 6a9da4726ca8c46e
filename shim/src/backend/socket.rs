//! The `davinci-mockd` backend (`mock:SOCKET`): one `SOCK_SEQPACKET` connection is one open
//! of the device; ioctls travel as frames (see `davinci_mockd_proto::wire`), mmap cookies
//! come back as memfds.
//!
//! Several threads may use one open at once (a thread blocked in WAIT_EVENT does not hold up
//! another's submit): each request carries a tag, one caller at a time reads the socket and
//! hands every reply to the caller whose tag it carries. That mechanism is
//! `davinci_mockd_proto::client`'s (shared with the LD_PRELOAD library); this file words its
//! errors for the shim and turns replies into ioctl results, mappings and client lists.
//!
//! A new allocation's or stream's memfds come with the ALLOC_MEMORY / CREATE_STREAM reply
//! (`davinci_mockd_proto::Premapped`): they are kept (at most [`MAX_PREMAPPED`], all
//! dropped by any FREE_MEMORY, DESTROY_STREAM or DESTROY_CONTEXT) until the shim maps them,
//! which then costs no MMAP round trip. A daemon that sends none is asked with MMAP.
//!
//! Nothing waits for ever on a daemon that stopped answering: connecting gives up after
//! [`CONNECT_TIMEOUT`](davinci_mockd_proto::client::CONNECT_TIMEOUT), and every call but
//! WAIT_EVENT (whose wait is bounded by its own timeout, or is meant to last) after the reply
//! timeout ([`reply_timeout`](davinci_mockd_proto::client::reply_timeout): 10 s, or
//! `$DAVINCI_SOCKET_TIMEOUT` seconds, read once at open), with `ETIMEDOUT` naming the socket.
#![forbid(unsafe_code)]

use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use davinci_mockd_proto::client::{CallError, Client, Incoming, SOCKET_TIMEOUT_ENV};
use davinci_mockd_proto::{
    HelloReply, Kind, MmapArgs, MmapReply, Premapped, WireRole, MAX_PAYLOAD,
};
use davinci_uapi::{
    ClientUsage, Errno, KernelInfo, ListClientsArgs, ListKernelsArgs, Wire,
    DRIVER_CMD_DESTROY_CONTEXT, DRIVER_CMD_DESTROY_STREAM, DRIVER_CMD_FREE_MEMORY,
    DRIVER_CMD_LIST_CLIENTS, DRIVER_CMD_LIST_KERNELS,
};

use super::{list_clients_arg, Backend, MapFd, MapFile, Role};
use crate::error::{Error, Result};

/// An open of a device served by `davinci-mockd`: the shared client of
/// `davinci_mockd_proto::client`, its errors worded for the shim.
pub(crate) struct SocketBackend {
    client: Client,
    path: PathBuf,
    hello: HelloReply,
    /// Memfds that came with ALLOC_MEMORY / CREATE_STREAM replies, not mapped yet.
    premapped: Mutex<Vec<(Premapped, OwnedFd)>>,
}

/// Memfds of new objects kept for their first map, at most (the oldest go first).
pub const MAX_PREMAPPED: usize = 16;

fn relock<T>(r: std::sync::LockResult<T>) -> T {
    // Nothing panics while holding the lock; if something did, the list is still whole.
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn errno_of(code: i32) -> Errno {
    Errno::from_code(code).unwrap_or(Errno::EPROTO)
}

impl SocketBackend {
    /// Connects to the socket at `path` and opens the device as `role`.
    ///
    /// # Errors
    /// `ENODEV` if there is no socket or no daemon behind it, `EPERM` if the socket's
    /// permissions refuse this user, `EACCES` if the socket, its directory or its daemon is
    /// not one this process trusts (`davinci_mockd_proto::trust`), `EBUSY` (naming the holder) if a client open meets a
    /// device in exclusive use, `EPROTO` if the daemon speaks another ABI major.
    pub(crate) fn open(path: &Path, role: Role) -> Result<SocketBackend> {
        let client = Client::connect(path, format!("mock:{}", path.display()))
            .map_err(|e| connect_error(path, &e))?;
        let role = match role {
            Role::Client => WireRole::Client,
            Role::Control => WireRole::Control,
        };
        let hello = client.hello(role).map_err(|e| match e {
            CallError::Refused { errno, msg } => Error::new(
                errno_of(errno),
                "open",
                format!("mock:{}: {msg}", path.display()),
            ),
            CallError::MalformedHello => Error::new(
                Errno::EPROTO,
                "open",
                "malformed HELLO reply from the daemon",
            ),
            e => call_error("open", e),
        })?;
        Ok(SocketBackend {
            client,
            path: path.to_path_buf(),
            hello,
            premapped: Mutex::new(Vec::new()),
        })
    }

    /// Sends one request and waits for its reply.
    fn call(&self, op: &'static str, kind: Kind, request: u32, arg: Vec<u8>) -> Result<Incoming> {
        self.client.call(kind, request, arg).map_err(|e| match e {
            CallError::TimedOut(limit) => Error::new(
                Errno::ETIMEDOUT,
                op,
                format!(
                    "mock:{}: davinci-mockd did not answer within {:.1} s (is the daemon \
                     hung, or is this not a davinci-mockd socket? ${SOCKET_TIMEOUT_ENV} \
                     sets the limit in seconds)",
                    self.path.display(),
                    limit.as_secs_f64()
                ),
            ),
            e => call_error(op, e),
        })
    }

    /// LIST_CLIENTS: the usage of every attached client. The daemon returns what it would
    /// write through the user pointer as the reply payload; no pointer is dereferenced here.
    fn list_clients_from_payload(&self) -> Result<Vec<ClientUsage>> {
        let capacity = (MAX_PAYLOAD / ClientUsage::SIZE) as u32;
        // Any non-zero base: the payload is addressed relative to it.
        let arg = list_clients_arg(1 << 12, capacity);
        let got = self.call("LIST_CLIENTS", Kind::Ioctl, DRIVER_CMD_LIST_CLIENTS, arg)?;
        if got.reply.errno != 0 {
            return Err(Error::new(
                errno_of(got.reply.errno),
                "LIST_CLIENTS",
                got.reply.msg,
            ));
        }
        let out = ListClientsArgs::from_bytes(&got.reply.arg)
            .ok_or_else(|| Error::new(Errno::EPROTO, "LIST_CLIENTS", "malformed reply argument"))?;
        let n = out.count.min(capacity) as usize;
        let entries: Vec<ClientUsage> = got
            .reply
            .payload
            .chunks_exact(ClientUsage::SIZE)
            .take(n)
            .map(ClientUsage::decode)
            .collect();
        if entries.len() != n {
            return Err(Error::new(
                Errno::EPROTO,
                "LIST_CLIENTS",
                format!("daemon reported {n} clients but sent {}", entries.len()),
            ));
        }
        Ok(entries)
    }
}

/// The shim's error for what the shared client reports (its messages name the socket).
fn call_error(op: &'static str, e: CallError) -> Error {
    match e {
        CallError::Interrupted => Error::new(
            Errno::EINTR,
            op,
            "interrupted by a signal handler on the waiting thread",
        ),
        CallError::Refused { errno, msg } => Error::new(errno_of(errno), op, msg),
        e => Error::new(errno_of(e.errno()), op, e.to_string()),
    }
}

fn connect_error(path: &Path, e: &std::io::Error) -> Error {
    let p = path.display();
    match e.raw_os_error() {
        Some(libc::ENOENT) => Error::new(
            Errno::ENODEV,
            "open",
            format!("mock:{p}: no such socket (is davinci-mockd running with this --socket-dir?)"),
        ),
        Some(libc::ECONNREFUSED) => Error::new(
            Errno::ENODEV,
            "open",
            format!("mock:{p}: nobody listens on this socket (davinci-mockd stopped?)"),
        ),
        Some(libc::EACCES) | Some(libc::EPERM) => Error::new(
            Errno::EPERM,
            "open",
            format!(
                "mock:{p}: permission denied (connecting needs write permission on the socket)"
            ),
        ),
        // Not the OS's refusal but the trust rule's (davinci_mockd_proto::trust): its
        // message names the socket, what was found and what to do.
        None if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Error::new(Errno::EACCES, "open", e.to_string())
        }
        _ if e.kind() == std::io::ErrorKind::TimedOut => Error::new(
            Errno::ETIMEDOUT,
            "open",
            format!("mock:{p}: cannot connect: {e} (is davinci-mockd hung?)"),
        ),
        _ => Error::new(
            Errno::ENODEV,
            "open",
            format!("mock:{p}: cannot connect: {e}"),
        ),
    }
}

impl fmt::Display for SocketBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "davinci-mockd device {} at mock:{}",
            self.hello.device_id,
            self.path.display()
        )
    }
}

impl Backend for SocketBackend {
    fn ioctl(&self, op: &'static str, request: u32, arg: &mut [u8]) -> Result<()> {
        if matches!(
            request,
            DRIVER_CMD_FREE_MEMORY | DRIVER_CMD_DESTROY_STREAM | DRIVER_CMD_DESTROY_CONTEXT
        ) {
            // A cookie names another object once this one is gone: no kept memfd outlives it.
            relock(self.premapped.lock()).clear();
        }
        let got = self.call(op, Kind::Ioctl, request, arg.to_vec())?;
        let r = got.reply;
        if r.errno == 0 && !got.fds.is_empty() {
            if let Some(records) = Premapped::decode_all(&r.payload, got.fds.len()) {
                let mut kept = relock(self.premapped.lock());
                kept.extend(records.into_iter().zip(got.fds));
                let over = kept.len().saturating_sub(MAX_PREMAPPED);
                kept.drain(..over);
            }
        }
        if r.arg.len() == arg.len() {
            arg.copy_from_slice(&r.arg);
        } else if r.errno == 0 {
            return Err(Error::new(
                Errno::EPROTO,
                op,
                "daemon replied with an argument of another size",
            ));
        }
        if r.errno != 0 {
            return Err(Error::new(errno_of(r.errno), op, r.msg));
        }
        Ok(())
    }

    fn map(&self, cookie: u64, len: u64) -> Result<MapFd> {
        {
            let mut kept = relock(self.premapped.lock());
            // What MMAP would check: the cookie, and a length from 1 to the object's.
            if let Some(i) = kept
                .iter()
                .position(|(p, _)| p.cookie == cookie && len != 0 && len <= p.len)
            {
                let (p, fd) = kept.remove(i);
                return Ok(MapFd {
                    fd: MapFile::Owned(fd),
                    offset: p.offset,
                });
            }
        }
        let got = self.call("mmap", Kind::Mmap, 0, MmapArgs { cookie, len }.encode())?;
        if got.reply.errno != 0 {
            return Err(Error::new(errno_of(got.reply.errno), "mmap", got.reply.msg));
        }
        let reply = MmapReply::decode(&got.reply.arg)
            .ok_or_else(|| Error::new(Errno::EPROTO, "mmap", "malformed MMAP reply"))?;
        let mut fds = got.fds.into_iter();
        match (fds.next(), fds.next()) {
            (Some(fd), None) => Ok(MapFd {
                fd: MapFile::Owned(fd),
                offset: reply.offset,
            }),
            _ => Err(Error::new(
                Errno::EPROTO,
                "mmap",
                "MMAP reply must carry exactly one descriptor",
            )),
        }
    }

    fn maps_files(&self) -> bool {
        true
    }

    fn list_clients(&self) -> Result<Vec<ClientUsage>> {
        self.list_clients_from_payload()
    }

    fn ioctl_into(
        &self,
        op: &'static str,
        request: u32,
        arg: &mut [u8],
        out: &mut [u8],
    ) -> Result<()> {
        super::entries_fit(op, arg, out)?;
        // The daemon sends what the driver wrote at `buf + k` as payload byte `k`.
        arg[..8].copy_from_slice(&(1u64 << 20).to_ne_bytes());
        let got = self.call(op, Kind::Ioctl, request, arg.to_vec())?;
        if got.reply.errno != 0 {
            return Err(Error::new(errno_of(got.reply.errno), op, got.reply.msg));
        }
        if got.reply.arg.len() != arg.len() {
            return Err(Error::new(Errno::EPROTO, op, "malformed reply argument"));
        }
        arg.copy_from_slice(&got.reply.arg);
        let n = got.reply.payload.len();
        let Some(dst) = out.get_mut(..n) else {
            return Err(Error::new(
                Errno::EPROTO,
                op,
                "the daemon sent more entries than the buffer holds",
            ));
        };
        dst.copy_from_slice(&got.reply.payload);
        Ok(())
    }

    fn list_kernels(&self) -> Result<Vec<KernelInfo>> {
        const OP: &str = "LIST_KERNELS";
        let capacity = 64u32;
        let arg = super::list_kernels_arg(1 << 12, capacity);
        let got = self.call(OP, Kind::Ioctl, DRIVER_CMD_LIST_KERNELS, arg)?;
        if got.reply.errno != 0 {
            return Err(Error::new(errno_of(got.reply.errno), OP, got.reply.msg));
        }
        let out = ListKernelsArgs::from_bytes(&got.reply.arg)
            .ok_or_else(|| Error::new(Errno::EPROTO, OP, "malformed reply argument"))?;
        let n = out.count.min(capacity) as usize;
        let entries: Vec<KernelInfo> = got
            .reply
            .payload
            .chunks_exact(KernelInfo::SIZE)
            .take(n)
            .map(KernelInfo::decode)
            .collect();
        if entries.len() != n {
            return Err(Error::new(
                Errno::EPROTO,
                OP,
                format!("daemon reported {n} kernels but sent {}", entries.len()),
            ));
        }
        Ok(entries)
    }
}

impl Drop for SocketBackend {
    fn drop(&mut self) {
        // Closing the socket closes the open; the daemon releases everything it held. A CLOSE
        // frame first makes that orderly (and synchronous) when the daemon is still there.
        if self.client.idle() {
            let _ = self.client.call(Kind::Close, 0, Vec::new());
        }
        self.client.socket().shutdown();
    }
}
