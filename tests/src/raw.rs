//! A client of `davinci-mockd` that speaks the wire protocol by hand, with no shim: it sees
//! every reply and every file descriptor the daemon sends, so tests can play a hostile client
//! (truncate the memfds it is given, send odd requests) as an attacker would.

use std::os::fd::OwnedFd;
use std::path::Path;

use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{
    Hello, HelloReply, Kind, MmapArgs, MmapReply, Reply, Request, WireRole, MAX_REPLY,
};
use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateStreamArgs, Errno, SubmitTaskArgs, TaskDesc,
    WaitEventArgs, WaitKind, Wire, ABI_VERSION_MAJOR, ABI_VERSION_MINOR, DRIVER_CMD_ALLOC_MEMORY,
    DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_STREAM, DRIVER_CMD_SUBMIT_TASK,
    DRIVER_CMD_WAIT_EVENT,
};

/// A failed call: the errno the daemon replied with (`EIO` for a broken connection) and its
/// message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawError {
    /// Positive errno, as the reply carried it.
    pub errno: i32,
    /// What was wrong.
    pub msg: String,
    /// The argument bytes the reply carried (the driver fills some on failure too, e.g.
    /// WAIT_EVENT's `status`).
    pub arg: Vec<u8>,
}

impl std::fmt::Display for RawError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "errno {}: {}", self.errno, self.msg)
    }
}

fn broken(e: impl std::fmt::Display) -> RawError {
    RawError {
        errno: Errno::EIO.code(),
        msg: format!("connection to the daemon broke: {e}"),
        arg: Vec::new(),
    }
}

/// One open of a device, over its own connection.
#[derive(Debug)]
pub struct RawClient {
    conn: SeqPacket,
    tag: u32,
    /// What HELLO answered.
    pub hello: HelloReply,
}

impl RawClient {
    /// Connects to `socket` and says HELLO with `role`.
    ///
    /// # Errors
    /// The connection fails, or the daemon refuses the open.
    pub fn open(socket: &Path, role: WireRole) -> Result<RawClient, RawError> {
        let conn = SeqPacket::connect(socket).map_err(broken)?;
        let mut c = RawClient {
            conn,
            tag: 0,
            hello: HelloReply::default(),
        };
        let h = Hello {
            abi_major: ABI_VERSION_MAJOR,
            abi_minor: ABI_VERSION_MINOR,
            role: role as u32,
            reserved: 0,
        };
        let (r, _) = c.call(Kind::Hello, 0, h.encode())?;
        c.hello = HelloReply::decode(&r.arg).ok_or_else(|| broken("bad HELLO reply"))?;
        Ok(c)
    }

    /// Sends one request and returns its reply and the descriptors that came with it; an
    /// error reply is `Err`.
    ///
    /// # Errors
    /// The daemon replied with an errno, or the connection broke.
    pub fn call(
        &mut self,
        kind: Kind,
        request: u32,
        arg: Vec<u8>,
    ) -> Result<(Reply, Vec<OwnedFd>), RawError> {
        self.tag = self.tag.wrapping_add(1);
        let frame = Request {
            kind,
            tag: self.tag,
            request,
            arg,
        }
        .encode()
        .map_err(broken)?;
        self.conn.send(&frame, &[]).map_err(broken)?;
        let mut buf = vec![0u8; MAX_REPLY];
        let got = self.conn.recv(&mut buf, true).map_err(broken)?;
        if got.len == 0 {
            return Err(broken("the daemon closed the connection"));
        }
        let reply = Reply::decode(&buf[..got.len]).map_err(broken)?;
        if reply.errno != 0 {
            return Err(RawError {
                errno: reply.errno,
                msg: reply.msg,
                arg: reply.arg,
            });
        }
        Ok((reply, got.fds))
    }

    /// One ioctl with a typed argument; returns the argument as the driver left it.
    ///
    /// # Errors
    /// The driver's errno and message.
    pub fn ioctl<T: Wire>(&mut self, request: u32, arg: &T) -> Result<T, RawError> {
        let mut bytes = vec![0u8; T::SIZE];
        arg.encode(&mut bytes);
        let (r, _) = self.call(Kind::Ioctl, request, bytes)?;
        Ok(T::decode(&r.arg))
    }

    /// CREATE_CONTEXT; the context handle.
    ///
    /// # Errors
    /// The driver's errno and message.
    pub fn create_context(&mut self) -> Result<u32, RawError> {
        Ok(self
            .ioctl(DRIVER_CMD_CREATE_CONTEXT, &CreateContextArgs::default())?
            .handle)
    }

    /// CREATE_STREAM in `ctx` with these ring depths; the driver's reply.
    ///
    /// # Errors
    /// The driver's errno and message.
    pub fn create_stream(
        &mut self,
        ctx: u32,
        cmd_entries: u32,
        event_entries: u32,
    ) -> Result<CreateStreamArgs, RawError> {
        self.ioctl(
            DRIVER_CMD_CREATE_STREAM,
            &CreateStreamArgs {
                ctx,
                cmd_entries,
                event_entries,
                ..CreateStreamArgs::default()
            },
        )
    }

    /// ALLOC_MEMORY of `size` bytes; the driver's reply.
    ///
    /// # Errors
    /// The driver's errno and message.
    pub fn alloc(&mut self, size: u64) -> Result<AllocMemoryArgs, RawError> {
        self.ioctl(
            DRIVER_CMD_ALLOC_MEMORY,
            &AllocMemoryArgs {
                size,
                ..AllocMemoryArgs::default()
            },
        )
    }

    /// SUBMIT_TASK (the slow path) of one descriptor on `stream`.
    ///
    /// # Errors
    /// The driver's errno and message.
    pub fn submit(&mut self, stream: u32, desc: TaskDesc) -> Result<(), RawError> {
        self.ioctl(
            DRIVER_CMD_SUBMIT_TASK,
            &SubmitTaskArgs {
                stream,
                desc,
                ..SubmitTaskArgs::default()
            },
        )
        .map(|_| ())
    }

    /// WAIT_EVENT on `stream` until it has produced `completions` records (or `timeout_ns`).
    ///
    /// # Errors
    /// The driver's errno and message (`EIO` for a stream in the error state).
    pub fn wait_stream(
        &mut self,
        stream: u32,
        completions: u64,
        timeout_ns: u64,
    ) -> Result<WaitEventArgs, RawError> {
        self.ioctl(
            DRIVER_CMD_WAIT_EVENT,
            &WaitEventArgs {
                kind: WaitKind::Stream as u32,
                handle: stream,
                value: completions,
                timeout_ns,
                ..WaitEventArgs::default()
            },
        )
    }

    /// MMAP of `cookie` for `len` bytes: the memfd to map and the offset of the object in it.
    ///
    /// # Errors
    /// The driver's errno and message, or a reply without exactly one descriptor.
    pub fn mmap(&mut self, cookie: u64, len: u64) -> Result<(MmapReply, OwnedFd), RawError> {
        let (r, mut fds) = self.call(Kind::Mmap, 0, MmapArgs { cookie, len }.encode())?;
        let reply = MmapReply::decode(&r.arg).ok_or_else(|| broken("bad MMAP reply"))?;
        match (fds.pop(), fds.is_empty()) {
            (Some(fd), true) => Ok((reply, fd)),
            _ => Err(broken("an MMAP reply must carry exactly one descriptor")),
        }
    }
}
