//! What driver-core's integration tests share: the device they run (driver-core's own checking
//! heap platform, `test_util`, with room for the larger allocations the tests make), open
//! parameters by pid and uid, ioctls through `DeviceCore::ioctl`, and a host's view of a
//! stream (its ring ends over the platform's memory).
#![allow(dead_code)]

use davinci_driver_core::{
    dva_offset, DeviceCore, NoUserMem, OpenParams, Reply, Role, CONTAINER_LEN,
};
use davinci_ring::{Consumer, Producer, RingRegion};
use davinci_uapi::*;

pub use davinci_driver_core::test_util::HeapPlatform;

/// Device memory of the test device.
pub const MEM: u64 = 16 << 20;

/// A fresh device: [`MEM`] bytes, 8 MiB per client.
pub fn device() -> DeviceCore<HeapPlatform> {
    davinci_driver_core::test_util::device_with(MEM, 8 << 20)
}

/// Open parameters for `pid` running as `uid` (admin if 0), labelled container `ctr-<pid>`;
/// its tenant is its user, as a daemon that runs in that container counts its clients
/// ([`params_in`] for a tenant that is a container).
pub fn params(pid: u32, uid: u32, role: Role) -> OpenParams {
    let mut container = [0u8; CONTAINER_LEN];
    let name = format!("ctr-{pid}");
    container[..name.len()].copy_from_slice(name.as_bytes());
    OpenParams {
        role,
        pid,
        uid,
        admin: uid == 0,
        container,
        comm: davinci_uapi::ClientUsage::comm_field(&format!("proc-{pid}")),
        tenant: davinci_driver_core::Tenant::User(uid),
    }
}

/// Open parameters for `pid` running as `uid` in container `id`, its tenant.
pub fn params_in(pid: u32, uid: u32, role: Role, id: &str) -> OpenParams {
    let container = davinci_driver_core::container::container_field(id);
    OpenParams {
        container,
        tenant: davinci_driver_core::Tenant::of(uid, &container),
        ..params(pid, uid, role)
    }
}

/// Puts `dev` in shared mode through an admin's control open and opens two clients of two
/// users: `(root, a, b)`, with pids 10 and 20 and uids 1000 and 1001.
pub fn shared_pair(dev: &mut DeviceCore<HeapPlatform>) -> (u32, u32, u32) {
    let root = dev.open(params(1, 0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    let a = dev.open(params(10, 1000, Role::Client)).unwrap();
    let b = dev.open(params(20, 1001, Role::Client)).unwrap();
    (root, a, b)
}

pub fn call<T: Wire>(
    dev: &mut DeviceCore<HeapPlatform>,
    client: u32,
    request: u32,
    args: &mut T,
) -> Result<Reply, Errno> {
    let mut b = vec![0u8; T::SIZE];
    args.encode(&mut b);
    let r = dev.ioctl(client, request, &mut b, &mut NoUserMem);
    *args = T::decode(&b);
    r.map_err(|e| e.errno)
}

pub fn ctx(dev: &mut DeviceCore<HeapPlatform>, c: u32) -> u32 {
    let mut a = CreateContextArgs::default();
    call(dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut a).unwrap();
    a.handle
}

pub fn alloc(dev: &mut DeviceCore<HeapPlatform>, c: u32, size: u64) -> AllocMemoryArgs {
    let mut a = AllocMemoryArgs {
        size,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a).unwrap();
    a
}

/// The host's ends of one stream: its handle, the command ring's producer, the event ring's
/// consumer, and the command ring's base (for tests that corrupt it).
pub struct Host {
    pub handle: u32,
    pub prod: Producer<TaskDesc>,
    pub cons: Consumer<EventRecord>,
    pub cmd_ptr: *mut u8,
}

pub fn stream(dev: &mut DeviceCore<HeapPlatform>, c: u32, ctx: u32, ce: u32, ee: u32) -> Host {
    let mut a = CreateStreamArgs {
        ctx,
        cmd_entries: ce,
        event_entries: ee,
        ..Default::default()
    };
    let r = call(dev, c, DRIVER_CMD_CREATE_STREAM, &mut a).unwrap();
    assert_eq!(r, Reply::StreamCreated(a.handle));
    assert_eq!(a.cmd_ring.entries, ce);
    assert_eq!(a.cmd_ring.offsets.slots, 192);
    let m = dev.stream_mem(c, a.handle).unwrap();
    // SAFETY: the fake platform's buffers live as long as the stream, which outlives `Host`
    // in every test; both sides only touch them through the ring protocol.
    let (cr, er) = unsafe {
        (
            RingRegion::new(m.cmd_ptr, m.cmd_len, ce, 64).unwrap(),
            RingRegion::new(m.event_ptr, m.event_len, ee, 32).unwrap(),
        )
    };
    Host {
        handle: a.handle,
        prod: Producer::new(cr),
        cons: Consumer::new(er),
        cmd_ptr: m.cmd_ptr,
    }
}

pub fn drain(h: &mut Host) -> Vec<EventRecord> {
    let mut v = Vec::new();
    h.cons.consume(usize::MAX, |r| v.push(r));
    v
}

pub fn mem(dev: &mut DeviceCore<HeapPlatform>, c: u32, a: &AllocMemoryArgs, len: usize) -> Vec<u8> {
    use davinci_driver_core::Platform;
    let mut b = vec![0; len];
    dev.platform_mut()
        .mem_read(c, dva_offset(a.dev_addr).unwrap(), &mut b)
        .unwrap();
    b
}

pub fn event(dev: &mut DeviceCore<HeapPlatform>, c: u32, ctx: u32) -> u32 {
    let mut a = CreateEventArgs {
        ctx,
        ..Default::default()
    };
    call(dev, c, DRIVER_CMD_CREATE_EVENT, &mut a).unwrap();
    a.handle
}

/// WAIT_EVENT(EVENT) for `value` with timeout 0: the errno, and `status`.
pub fn wait_event_now(
    dev: &mut DeviceCore<HeapPlatform>,
    c: u32,
    ev: u32,
    value: u64,
) -> (Result<Reply, Errno>, u32) {
    let mut w = WaitEventArgs {
        kind: WaitKind::Event as u32,
        handle: ev,
        value,
        ..Default::default()
    };
    let r = call(dev, c, DRIVER_CMD_WAIT_EVENT, &mut w);
    (r, w.status)
}

pub fn nops(h: &mut Host, from: u64, n: u64) {
    for i in from..from + n {
        h.prod.push(&TaskDesc::nop(i)).unwrap();
    }
    h.prod.publish();
}

pub fn user_data(v: &[EventRecord]) -> Vec<u64> {
    v.iter().map(|r| r.user_data).collect()
}

/// WAIT_EVENT on `stream` for `value` that has already timed out: the errno and `status`.
pub fn wait_stream_timed_out(
    dev: &mut DeviceCore<HeapPlatform>,
    c: u32,
    stream: u32,
    value: u64,
) -> (Result<Option<()>, Errno>, u32) {
    let mut w = WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: stream,
        value,
        timeout_ns: 1_000_000,
        ..Default::default()
    };
    let spec = match call(dev, c, DRIVER_CMD_WAIT_EVENT, &mut w) {
        Ok(Reply::Wait(spec)) => spec,
        Err(e) => return (Err(e), w.status),
        other => panic!("expected a blocking wait, got {other:?}"),
    };
    let mut raw = vec![0u8; WaitEventArgs::SIZE];
    w.encode(&mut raw);
    let r = dev.finish_wait(c, &spec, &mut raw, true);
    (r.map_err(|e| e.errno), WaitEventArgs::decode(&raw).status)
}

/// Kernel launches (tests/kernels.rs, tests/kernel_refusals.rs).
pub mod kernels {
    use super::*;
    use davinci_driver_core::{dva_offset as dva, Platform, Run};
    use davinci_uapi::kernels::KernelId;

    pub type Dev = DeviceCore<HeapPlatform>;

    pub fn put(dev: &mut Dev, c: u32, addr: u64, bytes: &[u8]) {
        dev.platform_mut()
            .mem_write(c, dva(addr).unwrap(), bytes)
            .unwrap();
    }

    pub fn get(dev: &mut Dev, c: u32, addr: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        dev.platform_mut()
            .mem_read(c, dva(addr).unwrap(), &mut b)
            .unwrap();
        b
    }

    pub fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    pub fn as_f32(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// A client with a context, one stream and `size` bytes of memory: (client, stream, base).
    pub fn setup(dev: &mut Dev, size: u64) -> (u32, Host, u64) {
        let c = dev.open(params(1, 1000, Role::Client)).unwrap();
        let k = ctx(dev, c);
        let a = alloc(dev, c, size);
        let s = stream(dev, c, k, 16, 16);
        (c, s, a.dev_addr)
    }

    /// Writes `block` at `at` and launches it: the record, and the passes it took.
    pub fn launch<T: Wire>(
        dev: &mut Dev,
        c: u32,
        s: &mut Host,
        k: KernelId,
        block: &T,
        at: u64,
    ) -> (EventRecord, u32) {
        let mut b = vec![0u8; T::SIZE];
        block.encode(&mut b);
        put(dev, c, at, &b);
        s.prod
            .push(&TaskDesc::kernel_launch(
                7,
                k as u32,
                1,
                DevAddr(at),
                T::SIZE as u64,
            ))
            .unwrap();
        s.prod.publish();
        let mut passes = 0;
        loop {
            passes += 1;
            match dev.run_stream(s.handle, 64) {
                Run::Continuing => continue,
                _ => break,
            }
        }
        let recs = drain(s);
        assert_eq!(recs.len(), 1);
        (recs[0], passes)
    }

    pub fn gemm_block(m: u64, n: u64, k: u64, addrs: (u64, u64, u64)) -> GemmParams {
        GemmParams {
            m,
            n,
            k,
            batch: 1,
            a: addrs.0,
            b: addrs.1,
            c: addrs.2,
            lda: k,
            ldb: n,
            ldc: n,
            dtype_a: Dtype::F32 as u8,
            dtype_b: Dtype::F32 as u8,
            dtype_c: Dtype::F32 as u8,
            alpha: 1f32.to_bits(),
            ..Default::default()
        }
    }
}
