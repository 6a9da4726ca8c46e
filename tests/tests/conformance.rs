//! Conformance of a device backend through the shim: corrupted rings and garbage descriptors
//! are contained, the slow path, event ordering, isolation between clients, the memory pool,
//! bounded waits, and that dropping everything gives all memory back. One file per area in
//! `conformance/`; this one holds what they share, a workload run clean, and what a client
//! sees of itself.
#![deny(unsafe_code)]

use davinci_tests::descs::SubmitDescs;
use std::time::{Duration, Instant};

use davinci_shim::{
    ClientUsage, Completion, DevAddr, Device, DeviceMem, Dtype, Errno, Opcode, ShareMode, Stream,
    TaskDesc,
};
use davinci_tests::model::{self, Rng};
use davinci_tests::workload::{self, WorkloadConfig};
use davinci_tests::{backend_name, control_of, open_default, second_client};
use davinci_uapi::{
    HandleArgs, WaitEventArgs, WaitKind, Wire, DRIVER_CMD_DESTROY_CONTEXT, DRIVER_CMD_FREE_MEMORY,
    DRIVER_CMD_WAIT_EVENT,
};

const T: Duration = Duration::from_secs(20);

/// Containment of corrupted rings and garbage descriptors; clear errors.
#[path = "conformance/containment.rs"]
mod containment;

/// Streams: the slow path, ordering, doorbells, full rings, bounded waits.
#[path = "conformance/streams.rs"]
mod streams;

/// Device memory: the pool, and everything given back.
#[path = "conformance/memory.rs"]
mod memory;

/// Isolation between the clients of one device (issue 13), on the same backends.
#[path = "conformance/isolation.rs"]
mod isolation;

/// Per-client quotas (issue 21, ABI 1.4), on the same backends.
#[path = "conformance/quotas.rs"]
mod quotas;

/// Buffer lifetimes, stream drops, signals, event values and host callbacks (issue 23).
#[path = "conformance/lifetimes.rs"]
mod lifetimes;

/// Memory shared between clients (issue 23, ABI 1.4 EXPORT/IMPORT_MEMORY).
#[path = "conformance/sharing.rs"]
mod sharing;

/// Events shared between clients (issue 44, ABI 1.5 EXPORT/IMPORT_EVENT).
#[path = "conformance/shared_events.rs"]
mod shared_events;

/// Export leases, ranges and unexport (issue 44, ABI 1.5 DAVINCI_FEAT_EXPORT_LEASE).
#[path = "conformance/leases.rs"]
mod leases;

/// Device identity and busy time (issue 24, ABI 1.4 GET_IDENTITY).
#[path = "conformance/identity.rs"]
mod identity;

/// The device's sensors (issue 45, ABI 1.5 GET_SENSORS).
#[path = "conformance/sensors.rs"]
mod sensors;

/// The device's event log (issue 46, ABI 1.5 READ_EVENTS): every code a client can cause.
#[path = "conformance/device_events.rs"]
mod device_events;

/// Per-task traces (issue 46, ABI 1.5 TRACE): timelines, tenants, overflow.
#[path = "conformance/traces.rs"]
mod traces;

/// CUDA/ACL usage patterns: no stream stops on completions nobody reaped (issue 39).
#[path = "conformance/patterns.rs"]
mod patterns;

/// Noisy and hostile neighbours (issue 21): the daemon and the kernel.
#[path = "conformance/neighbours.rs"]
mod neighbours;

/// Hoarders of many uids and opens leave another tenant its share (issue 41, item 6).
#[path = "conformance/hoarders.rs"]
mod hoarders;

/// Containers as tenants: one tenant of several uids, a late tenant and the slots (issue 41).
#[path = "conformance/containers.rs"]
mod containers;

/// Device compute (issue 43, ABI 1.5): kernels, dtypes, byte fills.
#[path = "conformance/kernels.rs"]
mod kernels;

/// New streams beside clients churning theirs (issue 41): every one is served.
#[path = "conformance/churn.rs"]
mod churn;

fn dev() -> Device {
    open_default().expect("open the test device")
}

fn poll_all(s: &mut Stream) -> Vec<Completion> {
    let mut v = Vec::new();
    s.poll(&mut v);
    v
}

/// Proves `s` still executes tasks correctly: a FILL, an ADD of each dtype and a COPY on
/// fresh buffers, checked against the CPU.
fn assert_works(dev: &Device, s: &mut Stream, seed: u64) {
    let n = 512usize;
    let a = dev.alloc(n * 4).unwrap();
    let b = dev.alloc(n * 4).unwrap();
    let c = dev.alloc(n * 4).unwrap();
    let d = dev.alloc(n * 4).unwrap();
    let mut rng = Rng::new(seed);
    let ha: Vec<u32> = (0..n).map(|_| rng.float_bits()).collect();
    let hb: Vec<u32> = (0..n).map(|_| rng.float_bits()).collect();
    a.write_slice(0, &ha).unwrap();
    b.write_slice(0, &hb).unwrap();
    for (i, dt) in [Dtype::U32, Dtype::I32, Dtype::F32].into_iter().enumerate() {
        s.submit_descs(&[
            TaskDesc::fill(1, d.dev_addr(), (n * 4) as u64, 0x0bad_f00d ^ i as u32),
            TaskDesc::add(2, dt, c.dev_addr(), a.dev_addr(), b.dev_addr(), n as u64),
            TaskDesc::copy(3, d.dev_addr() + 64, c.dev_addr(), 256),
        ])
        .unwrap();
        s.synchronize(T).unwrap();
        let want = model::add(dt, &ha, &hb);
        assert_eq!(c.read_vec::<u32>(0, n).unwrap(), want, "{dt:?} add");
        let dv = d.read_vec::<u32>(0, n).unwrap();
        assert_eq!(&dv[..16], &[0x0bad_f00d ^ i as u32; 16][..]);
        assert_eq!(&dv[16..80], &want[..64], "copy");
        assert_eq!(&dv[80..], &vec![0x0bad_f00d ^ i as u32; n - 80][..]);
    }
    let done = poll_all(s);
    assert_eq!(done.len(), 9);
    assert!(done.iter().all(Completion::is_ok), "{done:?}");
}

fn wait_for_error(s: &Stream) -> davinci_shim::StreamError {
    let until = Instant::now() + T;
    loop {
        if let Some(e) = s.error_state() {
            return e;
        }
        assert!(
            Instant::now() < until,
            "stream never entered the error state"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A descriptor this client may not run: it stops its stream with `EACCES`.
fn poison_pill(user_data: u64) -> TaskDesc {
    TaskDesc::fill(user_data, DevAddr(0x10), 64, 0)
}

fn raw_handle(dev: &Device, request: u32, handle: u32) -> davinci_shim::Result<()> {
    let mut arg = vec![0u8; HandleArgs::SIZE];
    HandleArgs { handle, pad: 0 }.encode(&mut arg);
    dev.raw_ioctl(request, &mut arg)
}

#[test]
fn clients_are_isolated_in_shared_mode() {
    let one = dev();
    // Exclusive by default: a second client is refused, naming the holder.
    let err = second_client(&one).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EBUSY), "{err}");
    assert!(err.message().contains("held by"), "{err}");
    one.set_share_mode(ShareMode::Shared).unwrap();
    let two = second_client(&one).unwrap();
    assert_eq!(two.share_mode().unwrap(), (ShareMode::Shared, 2));

    let secret = one.alloc(4096).unwrap();
    secret.write_slice(0, &[0x5ec2_e700u32; 1024]).unwrap();
    let ctx1 = one.create_context().unwrap();
    let ev1 = ctx1.create_event().unwrap();
    let mut s1 = ctx1.create_stream().unwrap();
    let mine = two.alloc(4096).unwrap();
    let ctx2 = two.create_context().unwrap();

    // Device addresses of another client: EACCES completions, nothing read or written.
    let attempts = [
        (
            "read",
            TaskDesc::copy(1, mine.dev_addr(), secret.dev_addr(), 4096),
        ),
        ("write", TaskDesc::fill(1, secret.dev_addr(), 4096, 0)),
        (
            "add",
            TaskDesc::add(
                1,
                Dtype::U32,
                mine.dev_addr(),
                secret.dev_addr(),
                mine.dev_addr(),
                8,
            ),
        ),
    ];
    for (what, d) in attempts {
        let mut s = ctx2.create_stream().unwrap();
        s.submit_desc(&d).unwrap();
        let err = s.synchronize(T).unwrap_err();
        assert!(err.message().contains("EACCES"), "{what}: {err}");
        let c = poll_all(&mut s);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].errno(), Some(Errno::EACCES), "{what}");
    }
    assert_eq!(mine.read_vec::<u32>(0, 1024).unwrap(), vec![0; 1024]);
    assert_eq!(
        secret.read_vec::<u32>(0, 1024).unwrap(),
        vec![0x5ec2_e700; 1024]
    );

    // Another client's handles look exactly like stale ones: ENOENT.
    let err = raw_handle(&two, DRIVER_CMD_FREE_MEMORY, secret.handle()).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT), "{err}");
    let err = raw_handle(&two, DRIVER_CMD_DESTROY_CONTEXT, ctx1.handle()).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT), "{err}");
    let mut w = WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: s1.handle(),
        value: 0,
        timeout_ns: 0,
        ..Default::default()
    };
    let mut arg = vec![0u8; WaitEventArgs::SIZE];
    w.encode(&mut arg);
    let err = two.raw_ioctl(DRIVER_CMD_WAIT_EVENT, &mut arg).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT), "{err}");
    w.kind = WaitKind::Event as u32;
    w.handle = ev1.handle();
    w.encode(&mut arg);
    let err = two.raw_ioctl(DRIVER_CMD_WAIT_EVENT, &mut arg).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOENT), "{err}");
    let mut s = ctx2.create_stream().unwrap();
    s.submit_desc(&TaskDesc::event_record(1, ev1.handle(), 5))
        .unwrap();
    assert!(s.synchronize(T).unwrap_err().message().contains("ENOENT"));
    assert_eq!(ev1.value().unwrap(), 0);

    // The first client is unaffected.
    assert_works(&one, &mut s1, 7);
    assert_eq!(secret.read_vec::<u32>(0, 4).unwrap(), vec![0x5ec2_e700; 4]);
    // Going back to exclusive would strand the second client.
    assert_eq!(
        one.set_share_mode(ShareMode::Exclusive)
            .unwrap_err()
            .errno(),
        Some(Errno::EBUSY)
    );
}

#[test]
fn workload_runs_clean() {
    let dev = dev();
    let cfg = WorkloadConfig {
        tasks: 20_000,
        latency_samples: 200,
        ..WorkloadConfig::default()
    };
    let mut last = 0;
    let r = workload::run(&dev, &cfg, |n| {
        assert!(n >= last);
        last = n;
    })
    .unwrap();
    assert_eq!(r.mismatches, 0, "{:?}", r.first_mismatches);
    assert!(r.tasks >= 20_000);
    assert!(r.values_checked > 0);
    assert_eq!(r.latency.samples, 200);
    assert!(r.latency.p50_ns <= r.latency.p99_ns);
    assert_eq!(last, r.tasks + 200);
    let _ = backend_name();
}

/// A runtime sees itself as an operator does: `Device`'s text names the client id that
/// `Control::clients` (and `davinci-smi info -t usage`) lists, with its pid and container id;
/// the ABI's raw fields come back typed (share mode, opcode).
#[test]
fn a_client_sees_itself_as_operators_do() {
    let dev = dev();
    let client_id = dev
        .client_id()
        .expect("ABI 1.1 drivers report the caller's client id");
    assert!(
        dev.to_string().ends_with(&format!(" (client {client_id})")),
        "{dev}"
    );
    let ctl = control_of(&dev).expect("control open");
    assert!(ctl.to_string().ends_with(" (control open)"), "{ctl}");
    let clients: Vec<ClientUsage> = ctl.clients().expect("LIST_CLIENTS");
    let me = clients
        .iter()
        .find(|c| c.client_id == client_id)
        .unwrap_or_else(|| panic!("client {client_id} not in {clients:?}"));
    assert_eq!(me.pid, std::process::id());
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let container = davinci_mockd::peer::container_id_from_cgroup(&cgroup);
    assert_eq!(
        me.container_id(),
        (!container.is_empty()).then_some(container)
    );
    // ABI 1.2: the process name as the kernel keeps it, and nothing queued.
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    assert_eq!(me.comm(), comm.trim_end());
    assert_eq!(me.tasks_queued, 0);
    assert_eq!(
        dev.query_info().unwrap().share_mode(),
        Some(ShareMode::Exclusive)
    );

    let ctx = dev.create_context().unwrap();
    let mut s = ctx.create_stream().unwrap();
    let b = dev.alloc(64).unwrap();
    s.submit_desc(&TaskDesc::fill(5, b.dev_addr(), 64, 1))
        .unwrap();
    s.synchronize(T).unwrap();
    let c = poll_all(&mut s);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].opcode(), Some(Opcode::Fill));
}

/// GET_COUNTERS (ABI 1.3) on every backend: the device-wide totals grow by what this client
/// did (tasks taken and completed, a stream error), count its stream while it exists, and
/// keep its tasks after the stream and the client are gone. Exact on a device of its own
/// (embedded, mockd); at least as much where other tests may share the device (kernel).
#[test]
fn device_counters_count_this_clients_work_and_keep_it() {
    let dev = dev();
    let ctl = control_of(&dev).expect("control open");
    assert!(ctl
        .info()
        .unwrap()
        .features
        .contains(davinci_uapi::Features::COUNTERS));
    let exact = !backend_name().starts_with("/dev/");
    let before = ctl.counters().expect("GET_COUNTERS");
    {
        let ctx = dev.create_context().unwrap();
        let mut s = ctx.create_stream().unwrap();
        let n = 100u64;
        let nops: Vec<TaskDesc> = (0..n).map(TaskDesc::nop).collect();
        s.submit_descs(&nops).unwrap();
        s.synchronize(T).unwrap();
        assert_eq!(poll_all(&mut s).len(), n as usize);
        let mid = ctl.counters().unwrap();
        assert!(mid.streams >= 1 && mid.contexts >= 1, "{mid:?}");
        s.submit_desc(&poison_pill(7)).unwrap();
        wait_for_error(&s);
        let after = ctl.counters().unwrap();
        let (sub, done, errs) = (
            after.tasks_submitted - before.tasks_submitted,
            after.tasks_completed - before.tasks_completed,
            after.stream_errors - before.stream_errors,
        );
        if exact {
            assert_eq!(
                (sub, done, errs),
                (n + 1, n + 1, 1),
                "{before:?} -> {after:?}"
            );
        } else {
            assert!(sub > n && done > n && errs >= 1, "{before:?} -> {after:?}");
        }
    }
    drop(dev);
    let gone = ctl.counters().unwrap();
    assert!(
        gone.tasks_completed > before.tasks_completed + 100,
        "{gone:?}"
    );
    // This client was attached before the first read: counted there already, and still after.
    assert!(before.clients_opened >= 1 && gone.clients_opened >= before.clients_opened);
    if exact {
        assert_eq!((gone.streams, gone.contexts, gone.allocations), (0, 0, 0));
    }
}
