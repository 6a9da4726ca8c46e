//! driver-core against its checking fake platform: long tasks (FILL, COPY, ADD) run in chunks
//! of bounded work, with nothing held between two, so the control path and the other streams
//! go between them; a client's share of a pass does not grow with its streams; a chunked COPY
//! is still a memmove; what the control path changes between chunks is seen by the next one.

mod support;

use davinci_driver_core::{dva_offset, Platform, Role, Run, StreamState, MIN_PASS_WORK, PASS_WORK};
use davinci_uapi::*;
use support::*;

/// A device shared by several clients (an admin's control open set it so).
fn shared_device() -> davinci_driver_core::DeviceCore<HeapPlatform> {
    let mut dev = device();
    let root = dev.open(params(100, 0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    dev
}

/// Runs `stream` until it stops continuing: the number of calls and the last result.
fn run_to_end(dev: &davinci_driver_core::DeviceCore<HeapPlatform>, stream: u32) -> (u32, Run) {
    let mut calls = 0;
    loop {
        calls += 1;
        let r = dev.run_stream(stream, 64);
        if r != Run::Continuing {
            return (calls, r);
        }
        assert!(calls < 10_000, "a long task never ended");
    }
}

#[test]
fn a_long_fill_runs_in_bounded_chunks_with_the_control_path_between_them() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let len = 4 * PASS_WORK;
    let a = alloc(&mut dev, c, len);
    let mut s = stream(&mut dev, c, k, 16, 16);
    s.prod
        .push(&TaskDesc::fill(1, DevAddr(a.dev_addr), len, 0xA5A5_A5A5))
        .unwrap();
    s.prod.push(&TaskDesc::nop(2)).unwrap();
    s.prod.publish();

    let mut chunks = 0;
    loop {
        match dev.run_stream(s.handle, 64) {
            Run::Continuing => {
                chunks += 1;
                // Nothing is held between two chunks: control calls go between them, and
                // the stream does not sleep with a task part-way.
                let mut info = DeviceInfo::default();
                call(&mut dev, c, DRIVER_CMD_GET_INFO, &mut info).unwrap();
                let b = alloc(&mut dev, c, 4096);
                let mut f = HandleArgs {
                    handle: b.handle,
                    pad: 0,
                };
                call(&mut dev, c, DRIVER_CMD_FREE_MEMORY, &mut f).unwrap();
                assert!(!dev.stream_prepare_sleep(s.handle));
                assert!(drain(&mut s).is_empty(), "a record before the task ended");
            }
            Run::Progress(n) => {
                assert_eq!(n, 2, "the FILL's record and the NOP's");
                break;
            }
            r => panic!("unexpected {r:?}"),
        }
    }
    // PASS_WORK bytes of FILL per pass: the first pass and three more.
    assert_eq!(chunks, 3);
    let r = drain(&mut s);
    assert_eq!(user_data(&r), [1, 2]);
    assert_eq!((r[0].status, r[0].result), (0, len));
    let m = mem(&mut dev, c, &a, len as usize);
    assert!(m.chunks_exact(4).all(|w| w == [0xA5; 4]));
    // Counted once each: taken when the FILL started, completed when it ended.
    let u = dev.client_usage(c).unwrap();
    assert_eq!((u.tasks_submitted, u.tasks_completed), (2, 2));
    let k = dev.counters();
    assert_eq!((k.tasks_submitted, k.tasks_completed), (2, 2));
}

#[test]
fn a_client_with_many_streams_gets_one_share_of_a_pass() {
    let mut dev = shared_device();
    let busy = dev.open(params(1, 1000, Role::Client)).unwrap();
    let quiet = dev.open(params(2, 1001, Role::Client)).unwrap();
    let (kb, kq) = (ctx(&mut dev, busy), ctx(&mut dev, quiet));
    let mut hosts = Vec::new();
    for i in 0..4 {
        let a = alloc(&mut dev, busy, PASS_WORK);
        let mut s = stream(&mut dev, busy, kb, 16, 16);
        s.prod
            .push(&TaskDesc::fill(i, DevAddr(a.dev_addr), PASS_WORK, 1))
            .unwrap();
        s.prod.publish();
        hosts.push((s, a));
    }
    let qa = alloc(&mut dev, quiet, PASS_WORK);
    let mut q = stream(&mut dev, quiet, kq, 16, 16);
    q.prod
        .push(&TaskDesc::fill(9, DevAddr(qa.dev_addr), PASS_WORK, 1))
        .unwrap();
    q.prod.publish();

    // One pass over every stream: the quiet client's one stream does its whole share; each
    // of the busy client's four streams a quarter of it.
    assert_eq!(dev.run_stream(q.handle, 64), Run::Progress(1));
    for (s, a) in &hosts {
        assert_eq!(dev.run_stream(s.handle, 64), Run::Continuing);
        let m = mem(&mut dev, busy, a, PASS_WORK as usize);
        let done = m.chunks_exact(4).take_while(|w| *w == [1, 0, 0, 0]).count() as u64 * 4;
        assert_eq!(done, (PASS_WORK / 4).max(MIN_PASS_WORK));
    }
    for (s, _) in &mut hosts {
        let (calls, r) = run_to_end(&dev, s.handle);
        assert_eq!((calls, r), (3, Run::Progress(1)), "three more quarters");
        assert_eq!(drain(s)[0].result, PASS_WORK);
    }
}

#[test]
fn a_chunked_copy_is_a_memmove_in_both_directions() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let size = 4 * PASS_WORK;
    let a = alloc(&mut dev, c, size);
    let mut s = stream(&mut dev, c, k, 16, 16);
    let pattern: Vec<u8> = (0..size).map(|i| (i * 7 + i / 4093) as u8).collect();
    // Overlapping ranges of several chunks each, the destination above and below the source,
    // and a length that is not a multiple of the chunk or of 4.
    let len = PASS_WORK + PASS_WORK / 2 + 3;
    for (dst, src) in [(PASS_WORK / 2 + 5, 0), (1, PASS_WORK + 9)] {
        dev.platform()
            .mem_write(c, dva_offset(a.dev_addr).unwrap(), &pattern)
            .unwrap();
        s.prod
            .push(&TaskDesc::copy(
                0,
                DevAddr(a.dev_addr + dst),
                DevAddr(a.dev_addr + src),
                len,
            ))
            .unwrap();
        s.prod.publish();
        let (calls, r) = run_to_end(&dev, s.handle);
        assert_eq!(r, Run::Progress(1));
        assert!(calls >= 3, "COPY costs two per byte: {calls} calls");
        assert_eq!(drain(&mut s)[0].status, 0);
        let mut want = pattern.clone();
        want.copy_within(src as usize..(src + len) as usize, dst as usize);
        assert!(
            mem(&mut dev, c, &a, size as usize) == want,
            "dst {dst} src {src}: not a memmove"
        );
    }
}

#[test]
fn a_chunked_add_gives_the_bits_of_an_unchunked_one() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let n = PASS_WORK / 4; // elements: 256 KiB each operand, several passes of F32
    let (x, y, out) = (
        alloc(&mut dev, c, n * 4),
        alloc(&mut dev, c, n * 4),
        alloc(&mut dev, c, n * 4),
    );
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let ys: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_ne_bytes()).collect::<Vec<u8>>();
    dev.platform()
        .mem_write(c, dva_offset(x.dev_addr).unwrap(), &bytes(&xs))
        .unwrap();
    dev.platform()
        .mem_write(c, dva_offset(y.dev_addr).unwrap(), &bytes(&ys))
        .unwrap();
    let mut s = stream(&mut dev, c, k, 16, 16);
    s.prod
        .push(&TaskDesc::add(
            3,
            Dtype::F32,
            DevAddr(out.dev_addr),
            DevAddr(x.dev_addr),
            DevAddr(y.dev_addr),
            n,
        ))
        .unwrap();
    s.prod.publish();
    let (calls, r) = run_to_end(&dev, s.handle);
    assert_eq!(r, Run::Progress(1));
    assert!(calls > 1, "an F32 ADD of 1 MiB ran in one pass");
    let rec = drain(&mut s);
    assert_eq!((rec[0].status, rec[0].result), (0, n));
    let got = mem(&mut dev, c, &out, (n * 4) as usize);
    let want = bytes(&xs.iter().zip(&ys).map(|(a, b)| a + b).collect::<Vec<_>>());
    assert!(got == want, "F32 sums differ from the host's");
}

#[test]
fn freeing_the_buffer_of_a_task_part_way_stops_it_before_it_writes_again() {
    let mut dev = shared_device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let other = dev.open(params(2, 1001, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let len = 4 * PASS_WORK;
    let a = alloc(&mut dev, c, len);
    let mut s = stream(&mut dev, c, k, 16, 16);
    s.prod
        .push(&TaskDesc::fill(1, DevAddr(a.dev_addr), len, 0xFFFF_FFFF))
        .unwrap();
    s.prod.push(&TaskDesc::nop(2)).unwrap();
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Continuing);
    let mut f = HandleArgs {
        handle: a.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_FREE_MEMORY, &mut f).unwrap();
    // Another tenant gets the same memory before the next chunk.
    let b = alloc(&mut dev, other, len);
    assert_eq!(
        dva_offset(b.dev_addr),
        dva_offset(a.dev_addr),
        "the allocator reuses the freed range (under another address: its generation)"
    );
    assert_ne!(b.dev_addr, a.dev_addr);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(Errno::EACCES));
    let u = dev.client_usage(c).unwrap();
    assert_eq!(
        (u.tasks_submitted, u.tasks_completed),
        (1, 1),
        "the NOP was not taken"
    );
    let r = drain(&mut s);
    assert_eq!(user_data(&r), [1]);
    assert_eq!(r[0].status, -Errno::EACCES.code());
    assert_eq!(
        dev.stream_state(c, s.handle),
        Ok(StreamState::Error(Errno::EACCES))
    );
    assert!(
        mem(&mut dev, other, &b, len as usize)
            .iter()
            .all(|&x| x == 0),
        "the next owner's memory was written"
    );
}

#[test]
fn destroying_a_stream_with_a_task_part_way_returns_everything() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let a = alloc(&mut dev, c, 2 * PASS_WORK);
    let mut s = stream(&mut dev, c, k, 16, 16);
    s.prod
        .push(&TaskDesc::fill(1, DevAddr(a.dev_addr), 2 * PASS_WORK, 1))
        .unwrap();
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Continuing);
    let mut d = HandleArgs {
        handle: s.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_DESTROY_STREAM, &mut d).unwrap();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Gone);
    dev.close(c);
    assert_eq!(dev.info().memory_used, 0);
    assert_eq!(dev.platform().live_streams, 0);
}

#[test]
fn a_freed_address_faults_even_once_its_memory_is_reused() {
    let mut dev = shared_device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let a = alloc(&mut dev, c, 4096);
    let mut f = HandleArgs {
        handle: a.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_FREE_MEMORY, &mut f).unwrap();
    // The same client gets the same memory back, under a new address.
    let b = alloc(&mut dev, c, 4096);
    assert_eq!(dva_offset(b.dev_addr), dva_offset(a.dev_addr));
    assert_ne!(
        b.dev_addr, a.dev_addr,
        "a freed address was handed out again"
    );
    dev.platform_mut()
        .mem_write(c, dva_offset(b.dev_addr).unwrap(), &[7u8; 64])
        .unwrap();
    let mut s = stream(&mut dev, c, k, 16, 16);
    // A stale descriptor (the old address), then one through the new address.
    s.prod
        .push(&TaskDesc::fill(1, DevAddr(a.dev_addr), 64, 0xbad))
        .unwrap();
    s.prod.publish();
    assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(Errno::EACCES));
    let r = drain(&mut s);
    assert_eq!(r[0].status, -Errno::EACCES.code());
    assert_eq!(
        davinci_uapi::Fault::decode(r[0].result).map(|f| f.kind),
        Some(davinci_uapi::FaultKind::NotOwned)
    );
    assert_eq!(
        mem(&mut dev, c, &b, 64),
        vec![7u8; 64],
        "the new owner's bytes"
    );
}
