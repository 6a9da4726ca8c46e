//! The descriptors a successful ALLOC_MEMORY or CREATE_STREAM reply carries: the memfd of
//! each object the call created (the allocation; a stream's command ring, event ring and
//! doorbell), with a [`Premapped`] record each in the payload, so a client maps them without
//! one MMAP round trip per object. Exactly what MMAP of the same cookies would answer (the
//! same `MockDevice::map_shared`, for the same open); a client that does not want them closes
//! them. The descriptors are the device's own, lent to `sendmsg` (no `dup`, no `close` here):
//! a stream's three are its one memfd, attached three times.
#![forbid(unsafe_code)]

use davinci_mock_device::{MemFd, MockDevice};
use davinci_mockd_proto::{Premapped, MAX_FDS};
use davinci_uapi::{
    AllocMemoryArgs, CreateStreamArgs, Wire, DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_STREAM,
};

/// The objects a successful `request` (its reply argument `arg`) created, mapped for
/// `client`: their records and memfds, in order. `None` for any other request, or when one
/// cannot be mapped (the client then sends MMAP, which reports why).
pub(crate) fn objects(
    dev: &MockDevice,
    client: u32,
    request: u32,
    arg: &[u8],
) -> Option<(Vec<Premapped>, Vec<MemFd>)> {
    let wanted: Vec<(u64, u64)> = match request {
        DRIVER_CMD_ALLOC_MEMORY => {
            let a = AllocMemoryArgs::from_bytes(arg)?;
            vec![(a.mmap_offset, a.alloc_size)]
        }
        DRIVER_CMD_CREATE_STREAM => {
            let a = CreateStreamArgs::from_bytes(arg)?;
            vec![
                (a.cmd_ring.mmap_offset, a.cmd_ring.mmap_size),
                (a.event_ring.mmap_offset, a.event_ring.mmap_size),
                (a.doorbell_offset, a.doorbell_size),
            ]
        }
        _ => return None,
    };
    if wanted.len() > MAX_FDS {
        return None;
    }
    let mut records = Vec::with_capacity(wanted.len());
    let mut fds = Vec::with_capacity(wanted.len());
    for (cookie, len) in wanted {
        let src = dev.map_shared(client, cookie, len).ok()?;
        records.push(Premapped {
            cookie,
            offset: src.offset,
            len,
        });
        fds.push(src.fd);
    }
    Some((records, fds))
}
