//! What the daemon's integration tests share: a raw client of one connection (frames by hand,
//! replies checked for their descriptors), one ioctl through it, and a new stream.
#![allow(dead_code)]

use std::path::Path;

use davinci_mockd_proto::sockio::SeqPacket;
use davinci_mockd_proto::{Hello, Kind, Reply, Request, WireRole, MAX_REPLY};
use davinci_uapi::{
    CreateContextArgs, CreateStreamArgs, Wire, ABI_VERSION_MAJOR, ABI_VERSION_MINOR,
    DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_STREAM,
};

/// One connection, spoken to frame by frame.
pub struct Raw {
    pub c: SeqPacket,
    /// The last tag sent.
    pub tag: u32,
}

impl Raw {
    /// Sends one frame with the next tag; that tag.
    pub fn send(&mut self, kind: Kind, request: u32, arg: Vec<u8>) -> u32 {
        self.tag += 1;
        let f = Request {
            kind,
            tag: self.tag,
            request,
            arg,
        };
        self.c.send(&f.encode().unwrap(), &[]).unwrap();
        self.tag
    }

    /// Sends one frame and receives the next reply.
    pub fn call(&mut self, kind: Kind, request: u32, arg: Vec<u8>) -> (Reply, usize) {
        self.send(kind, request, arg);
        self.recv()
    }

    /// The next reply and how many descriptors came with it (as many as it says).
    pub fn recv(&mut self) -> (Reply, usize) {
        let mut buf = vec![0u8; MAX_REPLY];
        let r = self.c.recv(&mut buf, true).unwrap();
        assert!(r.len > 0, "daemon closed the connection");
        let rep = Reply::decode(&buf[..r.len]).unwrap();
        assert_eq!(rep.nfds as usize, r.fds.len());
        (rep, r.fds.len())
    }

    /// Connects to `path` and says HELLO as `role`: the connection and the HELLO reply.
    pub fn open(path: &Path, role: WireRole) -> (Raw, Reply) {
        let mut raw = Raw {
            c: SeqPacket::connect(path).unwrap(),
            tag: 0,
        };
        let h = Hello {
            abi_major: ABI_VERSION_MAJOR,
            abi_minor: ABI_VERSION_MINOR,
            role: role as u32,
            reserved: 0,
        };
        let (r, _) = raw.call(Kind::Hello, 0, h.encode());
        (raw, r)
    }
}

/// One ioctl through the daemon: (errno, the argument after the call).
pub fn ioctl<T: Wire>(raw: &mut Raw, request: u32, args: &T) -> (i32, T) {
    let mut arg = vec![0; T::SIZE];
    args.encode(&mut arg);
    let (r, _) = raw.call(Kind::Ioctl, request, arg);
    (r.errno, T::decode(&r.arg))
}

/// A context and a stream in it (8 entries each way): the stream's handle.
pub fn new_stream(raw: &mut Raw) -> u32 {
    let (e, ctx) = ioctl(
        raw,
        DRIVER_CMD_CREATE_CONTEXT,
        &CreateContextArgs::default(),
    );
    assert_eq!(e, 0);
    let (e, s) = ioctl(
        raw,
        DRIVER_CMD_CREATE_STREAM,
        &CreateStreamArgs {
            ctx: ctx.handle,
            cmd_entries: 8,
            event_entries: 8,
            ..Default::default()
        },
    );
    assert_eq!(e, 0);
    s.handle
}
