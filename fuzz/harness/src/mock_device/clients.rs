//! A client as the harness holds it ([`Client`]): its context, its `work` and `guard`
//! allocations (the guard's first half a canary, mapped), its private checking stream and
//! its other streams ([`Stream`]: the command ring, event ring and doorbell mapped through
//! [`SharedMapping`], written and read as a host does); the ioctl and mmap calls it makes;
//! [`User`], the user memory of its raw ioctls.
#![forbid(unsafe_code)]

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use davinci_driver_core::Result as DResult;
use davinci_mock_device::{MockDevice, UserMem};
use davinci_shm::{futex_wake, SharedMapping};
use davinci_uapi::mmap::DOORBELL_REG_OFFSET;
use davinci_uapi::*;

/// Clients attached at once (more opens are skipped).
pub const MAX_CLIENTS: usize = 3;
/// A client's work buffer (its descriptors' target).
pub(super) const WORK: u64 = 16 << 10;
/// A client's guard allocation: the canary, then the area [`Op::Check`](super::Op::Check) fills.
pub(super) const GUARD: u64 = 8 << 10;
pub(super) const CANARY_LEN: u64 = 4096;

/// A client's buffer for user pointers: 64 KiB at `USER_BASE`, `EFAULT` elsewhere.
pub(super) struct User {
    pub(super) mem: Vec<u8>,
}

const USER_BASE: u64 = 0x10_0000;

impl UserMem for User {
    fn write(&mut self, addr: u64, data: &[u8]) -> DResult<()> {
        match addr.checked_sub(USER_BASE) {
            Some(o) if o.checked_add(data.len() as u64).is_some_and(|e| e <= 65536) => {
                self.mem[o as usize..o as usize + data.len()].copy_from_slice(data);
                Ok(())
            }
            _ => Err(davinci_driver_core::Error::new(
                Errno::EFAULT,
                "outside the caller's mapped memory",
            )),
        }
    }
}

pub(super) struct Stream {
    pub(super) handle: u32,
    pub(super) args: CreateStreamArgs,
    pub(super) cmd: SharedMapping,
    pub(super) evt: SharedMapping,
    pub(super) bell: SharedMapping,
    /// The tail this client keeps (it may also write any value into the header).
    pub(super) tail: u32,
    pub(super) pushed: u64,
}

pub(super) struct Client {
    /// Its handle in the device's client table.
    pub(super) client: u32,
    pub(super) ctx: u32,
    pub(super) work: AllocMemoryArgs,
    pub(super) guard: AllocMemoryArgs,
    pub(super) guard_map: SharedMapping,
    pub(super) canary: u32,
    pub(super) check: Stream,
    pub(super) checks: u32,
    pub(super) streams: Vec<Stream>,
}

pub(super) fn call<T: Wire>(
    dev: &MockDevice,
    client: u32,
    request: u32,
    args: &mut T,
) -> DResult<()> {
    let mut arg = vec![0u8; T::SIZE];
    args.encode(&mut arg);
    let r = dev.ioctl(
        client,
        request,
        &mut arg,
        &mut davinci_mock_device::NoUserMem,
    );
    *args = T::decode(&arg);
    r
}

pub(super) fn map(dev: &MockDevice, client: u32, cookie: u64, len: u64) -> SharedMapping {
    let src = dev
        .map(client, cookie, len)
        .unwrap_or_else(|e| panic!("mmap of the client's own object failed: {e:?}"));
    SharedMapping::map(src.fd.as_fd(), src.offset, len as usize)
        .unwrap_or_else(|e| panic!("mapping a descriptor the device handed out failed: {e}"))
}

pub(super) fn create_stream(
    dev: &MockDevice,
    client: u32,
    ctx: u32,
    ce: u32,
    ee: u32,
) -> Option<Stream> {
    let mut a = CreateStreamArgs {
        ctx,
        cmd_entries: ce,
        event_entries: ee,
        ..Default::default()
    };
    call(dev, client, DRIVER_CMD_CREATE_STREAM, &mut a).ok()?;
    let cmd = map(dev, client, a.cmd_ring.mmap_offset, a.cmd_ring.mmap_size);
    let evt = map(
        dev,
        client,
        a.event_ring.mmap_offset,
        a.event_ring.mmap_size,
    );
    let bell = map(dev, client, a.doorbell_offset, a.doorbell_size);
    Some(Stream {
        handle: a.handle,
        args: a,
        cmd,
        evt,
        bell,
        tail: 0,
        pushed: 0,
    })
}

pub(super) fn header_offset(r: &RingMapping, field: u8) -> u64 {
    let o = &r.offsets;
    u64::from(
        [
            o.tail,
            o.head,
            o.entries,
            o.mask,
            o.flags,
            o.dropped,
            o.error,
            o.error_index,
        ][field as usize % 8],
    )
}

impl Stream {
    pub(super) fn word(m: &SharedMapping, off: u64) -> &std::sync::atomic::AtomicU32 {
        m.word(off).expect("a header word inside the ring mapping")
    }

    pub(super) fn push(&mut self, d: &TaskDesc) {
        let r = &self.args.cmd_ring;
        let slot = u64::from(self.tail & (r.entries - 1));
        let at = u64::from(r.offsets.slots) + slot * u64::from(r.offsets.slot_size);
        let mut b = [0u8; TaskDesc::SIZE];
        d.encode(&mut b);
        self.cmd.write(at, &b).expect("a slot inside the ring");
        self.tail = self.tail.wrapping_add(1);
        self.pushed += 1;
    }

    pub(super) fn publish(&self) {
        Self::word(&self.cmd, u64::from(self.args.cmd_ring.offsets.tail))
            .store(self.tail, Ordering::Release);
    }

    pub(super) fn kick(&self) {
        let w = Self::word(&self.bell, DOORBELL_REG_OFFSET);
        w.fetch_add(1, Ordering::Relaxed);
        futex_wake(w);
    }

    /// Records from the head up to the tail (at most `entries`), then head = tail.
    pub(super) fn reap(&self) -> Vec<EventRecord> {
        let r = &self.args.event_ring;
        let tail = Self::word(&self.evt, u64::from(r.offsets.tail)).load(Ordering::Acquire);
        let head_w = Self::word(&self.evt, u64::from(r.offsets.head));
        let head = head_w.load(Ordering::Relaxed);
        let n = tail.wrapping_sub(head).min(r.entries);
        let mut out = Vec::new();
        for i in 0..n {
            let slot = u64::from(head.wrapping_add(i) & (r.entries - 1));
            let at = u64::from(r.offsets.slots) + slot * u64::from(r.offsets.slot_size);
            let mut b = [0u8; EventRecord::SIZE];
            self.evt.read(at, &mut b).expect("a record inside the ring");
            out.push(EventRecord::decode(&b));
        }
        head_w.store(tail, Ordering::Release);
        out
    }
}
