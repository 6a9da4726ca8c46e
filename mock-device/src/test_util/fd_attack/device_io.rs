//! How the harness's clients reach the device: ioctls, mappings of mmap cookies (kept as
//! [`Held`] descriptors), reads and writes of the files behind them, and where the ring
//! header's fields lie in those files.
#![forbid(unsafe_code)]

use std::mem::offset_of;
use std::os::fd::OwnedFd;

use davinci_uapi::rings::RING_HEADER_SIZE;
use davinci_uapi::{
    AllocMemoryArgs, CreateStreamArgs, RingHeader, Wire, DRIVER_CMD_ALLOC_MEMORY,
    DRIVER_CMD_CREATE_STREAM,
};

use crate::{MockDevice, NoUserMem};

/// The ring header's size: where slot 0 starts.
pub(super) const RING_HEADER: u64 = RING_HEADER_SIZE as u64;
/// Offsets of the ring header's fields, in `Op::Header`'s numbering.
pub(super) const HEADER_FIELDS: [usize; 8] = [
    offset_of!(RingHeader, tail),
    offset_of!(RingHeader, head),
    offset_of!(RingHeader, entries),
    offset_of!(RingHeader, mask),
    offset_of!(RingHeader, flags),
    offset_of!(RingHeader, dropped),
    offset_of!(RingHeader, error),
    offset_of!(RingHeader, error_index),
];

/// One ioctl of `client`; the errno on failure.
pub(super) fn call<T: Wire>(
    dev: &MockDevice,
    client: u32,
    request: u32,
    args: &mut T,
) -> Result<(), i32> {
    let mut arg = vec![0u8; T::SIZE];
    args.encode(&mut arg);
    let r = dev.ioctl(client, request, &mut arg, &mut NoUserMem);
    *args = T::decode(&arg);
    r.map_err(|e| e.errno.code())
}

/// The file's size, -1 if `fstat` fails.
pub(super) fn size_of(fd: &OwnedFd) -> i64 {
    nix::sys::stat::fstat(fd).map_or(-1, |s| s.st_size)
}

/// The native-endian word at `offset`, 0 if it cannot be read.
pub(super) fn pread_u32(fd: &OwnedFd, offset: u64) -> u32 {
    let mut b = [0u8; 4];
    match nix::sys::uio::pread(fd, &mut b, offset as i64) {
        Ok(4) => u32::from_ne_bytes(b),
        _ => 0,
    }
}

/// Writes `bytes` at `offset`, landing or not.
pub(super) fn pwrite(fd: &OwnedFd, offset: u64, bytes: &[u8]) {
    // The attacker does not care whether its writes land.
    let _ = nix::sys::uio::pwrite(fd, bytes, offset as i64);
}

/// A descriptor, the object's offset in it, and the file's size when it was handed out.
pub(super) struct Held {
    pub(super) fd: OwnedFd,
    pub(super) offset: u64,
    pub(super) size: i64,
}

/// Maps `cookie` of `client`, which must be live.
pub(super) fn map(dev: &MockDevice, client: u32, cookie: u64, len: u64) -> Held {
    let src = dev
        .map(client, cookie, len)
        .unwrap_or_else(|e| panic!("map of a live object failed: {e:?}"));
    let size = size_of(&src.fd);
    Held {
        fd: src.fd,
        offset: src.offset,
        size,
    }
}

/// CREATE_STREAM with those ring depths, which must succeed.
pub(super) fn create_stream(
    dev: &MockDevice,
    client: u32,
    ctx: u32,
    cmd: u32,
    ev: u32,
) -> CreateStreamArgs {
    let mut s = CreateStreamArgs {
        ctx,
        cmd_entries: cmd,
        event_entries: ev,
        ..CreateStreamArgs::default()
    };
    call(dev, client, DRIVER_CMD_CREATE_STREAM, &mut s).expect("create a stream");
    s
}

/// ALLOC_MEMORY of `size`, which must succeed.
pub(super) fn alloc(dev: &MockDevice, client: u32, size: u64) -> AllocMemoryArgs {
    let mut a = AllocMemoryArgs {
        size,
        ..AllocMemoryArgs::default()
    };
    call(dev, client, DRIVER_CMD_ALLOC_MEMORY, &mut a).expect("allocate");
    a
}
