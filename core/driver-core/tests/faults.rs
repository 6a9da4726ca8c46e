//! driver-core against its checking fake platform: Injected faults (abi.md 5.6: an error, a hang, a stop on the Nth task) and a device reset.

mod support;

use davinci_driver_core::{Inject, Role, Run, StreamState};
use davinci_uapi::*;
use support::*;

/// Injected faults (abi.md 5.6): an error completion on the Nth task stops the stream like
/// any error (records before it arrive, nothing after it runs); the stream is recovered by
/// destroying and re-creating it; a per-stream fault leaves the other streams alone.
#[test]
fn an_injected_error_completes_the_nth_task_with_its_errno_and_stops_the_stream() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut s = stream(&mut dev, c, k, 16, 16);
    let mut other = stream(&mut dev, c, k, 16, 16);
    nops(&mut s, 1, 2);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Progress(2));
    // Armed now: counted from here, so the third task from now fails.
    dev.inject(
        Some(s.handle),
        Some(Inject::ErrorAt {
            nth: 3,
            errno: Errno::EIO,
        }),
    )
    .unwrap();
    nops(&mut s, 3, 5);
    nops(&mut other, 100, 5);
    assert_eq!(dev.run_stream(s.handle, 64), Run::Failed(Errno::EIO));
    let r = drain(&mut s);
    assert_eq!(user_data(&r), [1, 2, 3, 4, 5]);
    assert_eq!(
        r.iter().map(|r| r.status).collect::<Vec<_>>(),
        [0, 0, 0, 0, -Errno::EIO.code()]
    );
    assert_eq!(r[4].result, 0, "a device fault names no operand");
    assert_eq!(
        dev.stream_state(c, s.handle),
        Ok(StreamState::Error(Errno::EIO))
    );
    let (r, status) = wait_stream_timed_out(&mut dev, c, s.handle, 6);
    assert_eq!((r, status), (Err(Errno::EIO), Errno::EIO.code() as u32));
    // The other stream is not armed.
    assert_eq!(dev.run_stream(other.handle, 64), Run::Progress(5));
    assert!(drain(&mut other).iter().all(|r| r.status == 0));

    // Recovery (abi.md 5.5): destroy, create, re-submit from the failed task.
    let mut h = HandleArgs {
        handle: s.handle,
        pad: 0,
    };
    call(&mut dev, c, DRIVER_CMD_DESTROY_STREAM, &mut h).unwrap();
    let mut again = stream(&mut dev, c, k, 16, 16);
    nops(&mut again, 5, 3);
    assert_eq!(dev.run_stream(again.handle, 64), Run::Progress(3));
    assert_eq!(user_data(&drain(&mut again)), [5, 6, 7]);
}

/// A hung task is taken (the head moves past it) but never completes, and nothing after it
/// is taken; a stream told to stop consuming leaves its ring full. Waits on either time out
/// (ETIMEDOUT) rather than fail; a device-wide fault arms every stream, also new ones.
#[test]
fn injected_hangs_and_stops_halt_the_stream_and_waits_time_out() {
    let mut dev = device();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut hang = stream(&mut dev, c, k, 16, 16);
    dev.inject(Some(hang.handle), Some(Inject::HangAt { nth: 2 }))
        .unwrap();
    nops(&mut hang, 1, 4);
    assert_eq!(dev.run_stream(hang.handle, 64), Run::Progress(1));
    assert_eq!(dev.run_stream(hang.handle, 64), Run::Halted);
    assert_eq!(user_data(&drain(&mut hang)), [1]);
    let head = |h: &Host| {
        let off = davinci_driver_core::test_util::hdr::HEAD;
        // SAFETY: `cmd_ptr` points at the live command ring (it outlives `Host`, see
        // `stream`); `off` is the 4-aligned offset of the u32 head in its header.
        unsafe { core::ptr::read_volatile(h.cmd_ptr.add(off).cast::<u32>()) }
    };
    assert_eq!(head(&hang), 2, "the hung task was taken");
    assert_eq!(
        wait_stream_timed_out(&mut dev, c, hang.handle, 2),
        (Err(Errno::ETIMEDOUT), 0)
    );
    assert_eq!(dev.stream_state(c, hang.handle), Ok(StreamState::Running));

    // Device-wide: existing and new streams stop before their 3rd task.
    dev.inject(None, Some(Inject::StopAt { nth: 3 })).unwrap();
    let mut stop = stream(&mut dev, c, k, 4, 4);
    nops(&mut stop, 1, 4);
    assert_eq!(dev.run_stream(stop.handle, 64), Run::Progress(2));
    assert_eq!(dev.run_stream(stop.handle, 64), Run::Halted);
    assert_eq!(user_data(&drain(&mut stop)), [1, 2]);
    assert_eq!(head(&stop), 2, "nothing taken from the third on");
    assert!(stop.prod.push(&TaskDesc::nop(9)).is_ok());
    assert!(stop.prod.push(&TaskDesc::nop(10)).is_ok());
    assert!(
        stop.prod.push(&TaskDesc::nop(11)).is_err(),
        "the ring fills up"
    );
    assert_eq!(
        wait_stream_timed_out(&mut dev, c, stop.handle, 3),
        (Err(Errno::ETIMEDOUT), 0)
    );
    // Disarmed: a new stream runs freely.
    dev.inject(None, None).unwrap();
    let mut free = stream(&mut dev, c, k, 16, 16);
    nops(&mut free, 1, 8);
    assert_eq!(dev.run_stream(free.handle, 64), Run::Progress(8));
    assert_eq!(
        dev.inject(Some(0xdead), Some(Inject::HangAt { nth: 1 }))
            .unwrap_err()
            .errno,
        Errno::ENOENT
    );
}

/// A device reset stops every running stream with ECANCELED and no record; the records
/// already published stay; queued EVENT_RECORDs become unreachable (their waiters fail
/// rather than hang); clients, contexts and memory stay, and new streams run.
#[test]
fn a_device_reset_stops_every_stream_and_the_device_serves_new_ones() {
    let mut dev = device();
    let admin = dev.open(params(9, 0, Role::Control)).unwrap();
    dev.set_share_mode(admin, ShareMode::Shared).unwrap();
    let a = dev.open(params(1, 1000, Role::Client)).unwrap();
    let b = dev.open(params(2, 1001, Role::Client)).unwrap();
    let (ka, kb) = (ctx(&mut dev, a), ctx(&mut dev, b));
    let mem_a = alloc(&mut dev, a, 4096);
    let mut sa = stream(&mut dev, a, ka, 16, 16);
    let mut sb = stream(&mut dev, b, kb, 16, 16);
    let ev = event(&mut dev, a, ka);
    sa.prod
        .push(&TaskDesc::fill(
            1,
            DevAddr(mem_a.dev_addr),
            4096,
            0xabab_abab,
        ))
        .unwrap();
    sa.prod.publish();
    nops(&mut sb, 1, 2);
    assert_eq!(dev.run_stream(sa.handle, 64), Run::Progress(1));
    assert_eq!(dev.run_stream(sb.handle, 64), Run::Progress(2));
    // Queued, never run: a NOP and a record of the event.
    nops(&mut sa, 2, 1);
    sa.prod.push(&TaskDesc::event_record(3, ev, 7)).unwrap();
    sa.prod.publish();

    assert_eq!(dev.reset(), 2);
    for (c, h) in [(a, sa.handle), (b, sb.handle)] {
        assert_eq!(
            dev.stream_state(c, h),
            Ok(StreamState::Error(Errno::ECANCELED))
        );
        assert_eq!(dev.run_stream(h, 64), Run::Failed(Errno::ECANCELED));
    }
    assert_eq!(user_data(&drain(&mut sa)), [1], "published records stay");
    assert_eq!(user_data(&drain(&mut sb)), [1, 2]);
    assert_eq!(
        wait_event_now(&mut dev, a, ev, 7),
        (Err(Errno::EIO), Errno::ECANCELED.code() as u32)
    );
    assert_eq!(
        wait_stream_timed_out(&mut dev, b, sb.handle, 3),
        (Err(Errno::EIO), Errno::ECANCELED.code() as u32)
    );
    // Memory and contexts stay; a new stream in the same context runs and sees the data.
    assert!(mem(&mut dev, a, &mem_a, 4096).iter().all(|&x| x == 0xab));
    let mut again = stream(&mut dev, a, ka, 16, 16);
    nops(&mut again, 10, 2);
    assert_eq!(dev.run_stream(again.handle, 64), Run::Progress(2));
    assert_eq!(user_data(&drain(&mut again)), [10, 11]);
    assert_eq!(dev.reset(), 1, "only running streams count");
}

/// A host's fault text (the kernel's `inject` parameter, the PCI device's admin INJECT):
/// parsed once and applied the same way on every host. A rule without selectors arms the
/// streams that exist and the new ones; one with selectors only the new streams it selects;
/// `none` disarms; `reset` resets; a bad text says why and arms nothing.
#[test]
fn a_hosts_fault_text_arms_disarms_and_resets_as_on_every_host() {
    use davinci_driver_core::{HostFault, InjectRule};
    let mut dev = device();
    let admin = dev.open(params(9, 0, Role::Control)).unwrap();
    dev.set_share_mode(admin, ShareMode::Shared).unwrap();
    let c = dev.open(params(1, 1000, Role::Client)).unwrap();
    let k = ctx(&mut dev, c);
    let mut before = stream(&mut dev, c, k, 16, 16);

    assert!(HostFault::parse("explode-at=2").is_err());
    assert!(HostFault::parse("hang-at=2@colour=red").is_err());
    assert_eq!(HostFault::parse(" none\n"), Ok(HostFault::Arm(None)));
    assert_eq!(HostFault::parse(""), Ok(HostFault::Arm(None)));
    assert_eq!(HostFault::parse("reset"), Ok(HostFault::Reset));

    // Without selectors: the stream that exists is armed too.
    let f = HostFault::parse("error-at=2:EFAULT").unwrap();
    assert_eq!(dev.apply_host_fault(&f), 0);
    nops(&mut before, 1, 3);
    assert_eq!(
        dev.run_stream(before.handle, 64),
        Run::Failed(Errno::EFAULT)
    );
    assert_eq!(user_data(&drain(&mut before)), [1, 2]);

    // Disarmed: a new stream runs everything.
    assert_eq!(dev.apply_host_fault(&HostFault::Arm(None)), 0);
    let mut clean = stream(&mut dev, c, k, 16, 16);
    nops(&mut clean, 1, 3);
    assert_eq!(dev.run_stream(clean.handle, 64), Run::Progress(3));

    // With a selector: only a new stream of the selected process is armed.
    let rule = HostFault::parse("hang-at=1@pid=2").unwrap();
    assert_eq!(
        rule,
        HostFault::Arm(Some(InjectRule::parse("hang-at=1@pid=2").unwrap()))
    );
    dev.apply_host_fault(&rule);
    let other = dev.open(params(2, 1000, Role::Client)).unwrap();
    let ko = ctx(&mut dev, other);
    let mut selected = stream(&mut dev, other, ko, 16, 16);
    nops(&mut selected, 1, 2);
    nops(&mut clean, 10, 2);
    assert_eq!(dev.run_stream(clean.handle, 64), Run::Progress(2));
    assert_ne!(dev.run_stream(selected.handle, 64), Run::Progress(2));
    assert!(drain(&mut selected).is_empty(), "the selected stream hangs");

    // reset: the running streams stop.
    assert_eq!(dev.apply_host_fault(&HostFault::Reset), 2);
    assert_eq!(
        dev.stream_state(c, clean.handle),
        Ok(StreamState::Error(Errno::ECANCELED))
    );
}
