//! driver-core against its checking fake platform: What the device reports about itself: GET_INFO (the caller's id, the opcodes it runs) and
//! GET_COUNTERS (totals that outlive the streams and clients they came from).

mod support;

use davinci_driver_core::{
    Config, DeviceCore, DoorbellRegister, Identity, Inject, Reply, Role, Run,
};
use davinci_uapi::*;
use support::*;

/// ABI 1.1: GET_INFO tells a client its own client id (the one LIST_CLIENTS reports, so a
/// client in a container can find itself) and which opcodes the device runs; an opcode
/// outside the mask fails with EBADMSG, one inside does not fail for its opcode.
#[test]
fn get_info_names_the_caller_and_the_opcodes() {
    let mut dev = device();
    let (root, a, b) = shared_pair(&mut dev);
    let info = |dev: &mut DeviceCore<HeapPlatform>, client: u32| {
        let mut i = DeviceInfo::default();
        call(dev, client, DRIVER_CMD_GET_INFO, &mut i).unwrap();
        i
    };
    let (ia, ib, ic) = (info(&mut dev, a), info(&mut dev, b), info(&mut dev, root));
    assert!(ia
        .features
        .contains(Features::CALLER_ID | Features::OPCODE_MASK));
    assert_eq!(
        (ia.abi_major, ia.abi_minor),
        (ABI_VERSION_MAJOR, ABI_VERSION_MINOR)
    );
    assert_eq!(ic.caller_id, 0, "a control open is not a client");
    let ids: Vec<(u32, u32)> = dev.clients().map(|u| (u.pid, u.client_id)).collect();
    assert!(
        ids.contains(&(10, ia.caller_id)) && ids.contains(&(20, ib.caller_id)),
        "{ids:?}"
    );
    assert_ne!(ia.caller_id, ib.caller_id);
    // WAIT_EVENT on a stream: the completion count is 32 bits; a value with high bits is
    // EINVAL, not silently truncated.
    let k0 = ctx(&mut dev, a);
    let s0 = stream(&mut dev, a, k0, 8, 8);
    let mut w = WaitEventArgs {
        kind: WaitKind::Stream as u32,
        handle: s0.handle,
        value: 1 << 32,
        ..Default::default()
    };
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_WAIT_EVENT, &mut w),
        Err(Errno::EINVAL)
    );
    w.value = 0;
    assert_eq!(
        call(&mut dev, a, DRIVER_CMD_WAIT_EVENT, &mut w),
        Ok(Reply::Done)
    );
    // The mask: NOP..EVENT_WAIT run, and KERNEL_LAUNCH in a build that runs kernels (these
    // tests build with feature `kernels`; the kernel module does not, `KERNELS` says which).
    let launch = if davinci_driver_core::engine::KERNELS {
        1 << 6
    } else {
        0
    };
    assert_eq!(ia.opcodes, 0b11_1111 | launch);
    let k = ctx(&mut dev, a);
    for op in 0..8u8 {
        let mut s = stream(&mut dev, a, k, 8, 8);
        let mut d = TaskDesc::nop(u64::from(op));
        d.opcode = op;
        s.prod.push(&d).unwrap();
        s.prod.publish();
        dev.run_stream(s.handle, 8);
        let rec = drain(&mut s)[0];
        let bad_opcode = rec.status == -Errno::EBADMSG.code()
            && Fault::decode(rec.result).map(|f| f.operand) == Some(FaultOperand::Opcode);
        // Operands are zero, so only the opcode itself can make a descriptor fail on its
        // opcode... EVENT_* with handle 0 fail on the handle (ENOENT), a KERNEL_LAUNCH of
        // kernel 0 on the handle (EBADMSG, HANDLE), zero-length FILL/COPY/ADD are fine.
        assert_eq!(
            bad_opcode,
            ia.opcodes & (1 << op) == 0,
            "opcode {op}: status {}",
            rec.status
        );
    }
}

fn counters(dev: &mut DeviceCore<HeapPlatform>, c: u32) -> DeviceCounters {
    let mut k = DeviceCounters::default();
    call(dev, c, DRIVER_CMD_GET_COUNTERS, &mut k).unwrap();
    let direct = dev.counters();
    assert!(direct.now_ns > k.now_ns, "each read reads the device clock");
    assert_eq!(
        DeviceCounters { now_ns: 0, ..k },
        DeviceCounters {
            now_ns: 0,
            ..direct
        },
        "the ioctl reports what counters() says"
    );
    k
}

/// GET_COUNTERS (ABI 1.3): device-wide totals that only grow, across streams and clients
/// that are gone (a destroyed stream's tasks, a closed client's), stream errors from a failed
/// descriptor and from a reset, doorbells (`stream_woke` told so by the host, or NOTIFY),
/// client opens without control opens, and the live object counts; any open may ask.
#[test]
fn get_counters_totals_survive_the_streams_and_clients_they_came_from() {
    let mut dev = device();
    assert!(dev.info().features.contains(Features::COUNTERS));
    let ctl = dev.open(params(9, 0, Role::Control)).unwrap();
    let zero = counters(&mut dev, ctl);
    assert_eq!(
        DeviceCounters { now_ns: 0, ..zero },
        DeviceCounters {
            engines: 1,
            ..DeviceCounters::default()
        },
        "a new device counts nothing (and has one engine, healthy)"
    );

    let root = dev.open(params(10, 0, Role::Control)).unwrap();
    dev.set_share_mode(root, ShareMode::Shared).unwrap();
    dev.close(root);
    let a = dev.open(params(1, 1000, Role::Client)).unwrap();
    let b = dev.open(params(2, 1000, Role::Client)).unwrap();
    let (ka, kb) = (ctx(&mut dev, a), ctx(&mut dev, b));
    let mut sa = stream(&mut dev, a, ka, 16, 16);
    let mut sb = stream(&mut dev, b, kb, 16, 16);
    let _mem = alloc(&mut dev, b, 4096);
    nops(&mut sa, 1, 5);
    nops(&mut sb, 1, 3);
    assert_eq!(dev.run_stream(sa.handle, 64), Run::Progress(5));
    assert_eq!(dev.run_stream(sb.handle, 64), Run::Progress(3));
    drain(&mut sa);
    drain(&mut sb);
    let k = counters(&mut dev, a);
    assert_eq!((k.tasks_submitted, k.tasks_completed), (8, 8));
    assert_eq!(
        (k.clients_opened, k.contexts, k.streams, k.allocations),
        (2, 2, 2, 1)
    );
    assert_eq!((k.stream_errors, k.doorbells), (0, 0));

    // A doorbell is counted when the host says one woke the worker, not at every disarm...
    assert!(dev.stream_prepare_sleep(sa.handle));
    dev.stream_woke(sa.handle, false);
    assert_eq!(counters(&mut dev, ctl).doorbells, 0);
    assert!(dev.stream_prepare_sleep(sa.handle));
    dev.stream_woke(sa.handle, true);
    assert_eq!(counters(&mut dev, ctl).doorbells, 1);
    // ... and NOTIFY is not counted where the doorbell is a word (this device): the host
    // counts the word's changes, NOTIFY's included. Where it is not, NOTIFY is the doorbell.
    assert!(dev.info().features.contains(Features::DOORBELL_FUTEX));
    let mut h = HandleArgs {
        handle: sa.handle,
        pad: 0,
    };
    call(&mut dev, a, DRIVER_CMD_NOTIFY, &mut h).unwrap();
    assert_eq!(counters(&mut dev, ctl).doorbells, 1);
    let mut plain = DeviceCore::new(
        Config {
            platform_features: Features::empty(),
            ..*dev.config()
        },
        HeapPlatform::default(),
    );
    let p = plain.open(params(5, 1000, Role::Client)).unwrap();
    let kp = ctx(&mut plain, p);
    let sp = stream(&mut plain, p, kp, 16, 16);
    let mut h = HandleArgs {
        handle: sp.handle,
        pad: 0,
    };
    call(&mut plain, p, DRIVER_CMD_NOTIFY, &mut h).unwrap();
    call(&mut plain, p, DRIVER_CMD_NOTIFY, &mut h).unwrap();
    assert_eq!(plain.counters().doorbells, 2);

    // A descriptor that fails (unknown opcode) puts the stream in the error state: one error.
    let mut bad = TaskDesc::nop(9);
    bad.opcode = 0xee;
    sa.prod.push(&bad).unwrap();
    sa.prod.publish();
    assert!(matches!(dev.run_stream(sa.handle, 64), Run::Failed(_)));
    let k = counters(&mut dev, ctl);
    assert_eq!(
        (k.tasks_submitted, k.tasks_completed, k.stream_errors),
        (9, 9, 1)
    );

    // Client a goes (its stream with it): its tasks, error and wake-up stay counted.
    dev.close(a);
    let k = counters(&mut dev, ctl);
    assert_eq!(
        (
            k.tasks_submitted,
            k.tasks_completed,
            k.stream_errors,
            k.doorbells
        ),
        (9, 9, 1, 1)
    );
    assert_eq!((k.clients_opened, k.contexts, k.streams), (2, 1, 1));

    // A reset stops b's running stream: a second error. A new client is a third open.
    assert_eq!(dev.reset(), 1);
    let c = dev.open(params(3, 1000, Role::Client)).unwrap();
    let k = counters(&mut dev, c);
    assert_eq!((k.stream_errors, k.clients_opened), (2, 3));
    dev.close(b);
    dev.close(c);
    let k = counters(&mut dev, ctl);
    assert_eq!((k.tasks_submitted, k.tasks_completed), (9, 9));
    assert_eq!(
        (k.contexts, k.streams, k.events, k.allocations),
        (0, 0, 0, 0)
    );
}

fn usage_of(dev: &mut DeviceCore<HeapPlatform>, client: u32) -> Vec<ClientUsage> {
    dev.clients_seen_by(client).collect()
}

/// Busy time (ABI 1.4): a pass that runs tasks adds its time to its stream, so to its client
/// (LIST_CLIENTS `busy_ns`) and the device (GET_COUNTERS `busy_ns`), and it stays counted
/// when the stream and the client are gone; an idle pass adds nothing. Health says Warning
/// while a stream is hung by an injected fault. GET_IDENTITY reports what the host set.
#[test]
fn busy_time_health_and_identity() {
    let mut dev = device();
    let ctl = dev.open(params(9, 0, Role::Control)).unwrap();
    dev.set_share_mode(ctl, ShareMode::Shared).unwrap();
    let a = dev.open(params(1, 1000, Role::Client)).unwrap();
    let b = dev.open(params(2, 1001, Role::Client)).unwrap();
    let (ka, kb) = (ctx(&mut dev, a), ctx(&mut dev, b));
    let mut sa = stream(&mut dev, a, ka, 16, 16);
    let mut sb = stream(&mut dev, b, kb, 16, 16);
    assert_eq!(dev.run_stream(sb.handle, 64), Run::Idle);
    assert_eq!(
        counters(&mut dev, ctl).busy_ns,
        0,
        "an idle pass is not busy"
    );

    nops(&mut sa, 1, 5);
    assert_eq!(dev.run_stream(sa.handle, 64), Run::Progress(5));
    drain(&mut sa);
    let k = counters(&mut dev, ctl);
    assert!(k.busy_ns > 0);
    let usage = usage_of(&mut dev, ctl);
    let busy = |u: &[ClientUsage], pid: u32| u.iter().find(|c| c.pid == pid).map(|c| c.busy_ns);
    assert_eq!(
        busy(&usage, 1),
        Some(k.busy_ns),
        "a's tasks are all the device ran"
    );
    assert_eq!(busy(&usage, 2), Some(0), "b ran nothing");
    assert_eq!(dev.run_stream(sa.handle, 64), Run::Idle);
    assert_eq!(counters(&mut dev, ctl).busy_ns, k.busy_ns);

    // b's tasks add to b and to the device, not to a.
    nops(&mut sb, 1, 3);
    assert_eq!(dev.run_stream(sb.handle, 64), Run::Progress(3));
    drain(&mut sb);
    let k2 = counters(&mut dev, ctl);
    let usage = usage_of(&mut dev, ctl);
    assert_eq!(busy(&usage, 1), Some(k.busy_ns));
    let b_busy = busy(&usage, 2).unwrap();
    assert!(b_busy > 0);
    assert_eq!(k2.busy_ns, k.busy_ns + b_busy);

    // A destroyed stream's time stays with its client and the device; a closed client's
    // with the device.
    dev.destroy_stream(a, sa.handle).unwrap();
    assert_eq!(busy(&usage_of(&mut dev, ctl), 1), Some(k.busy_ns));
    dev.close(a);
    assert_eq!(counters(&mut dev, ctl).busy_ns, k2.busy_ns);

    // A hung stream: Warning, counted; gone, OK again.
    assert_eq!(k2.health, HEALTH_OK);
    dev.inject(Some(sb.handle), Some(Inject::HangAt { nth: 1 }))
        .unwrap();
    nops(&mut sb, 10, 2);
    assert_eq!(dev.run_stream(sb.handle, 64), Run::Halted);
    let k3 = counters(&mut dev, ctl);
    assert_eq!((k3.health, k3.hung_streams), (HEALTH_WARNING, 1));
    dev.destroy_stream(b, sb.handle).unwrap();
    let k4 = counters(&mut dev, ctl);
    assert_eq!((k4.health, k4.hung_streams), (HEALTH_OK, 0));

    // GET_IDENTITY: any open may ask; it reports what the host set, engines included.
    assert!(dev.info().features.contains(Features::IDENTITY));
    let mut id = DeviceIdentity::default();
    call(&mut dev, b, DRIVER_CMD_GET_IDENTITY, &mut id).unwrap();
    assert_eq!(id, Identity::DEFAULT.identity);
    let uuid = davinci_driver_core::derive_uuid(&[b"test", b"0"]);
    dev.set_device_identity(Identity::new(uuid, "model x", "driver 1.2", 3, 4));
    call(&mut dev, ctl, DRIVER_CMD_GET_IDENTITY, &mut id).unwrap();
    assert_eq!(
        (id.uuid, id.model(), id.driver_version(), id.numa_node),
        (uuid, "model x", "driver 1.2", 3)
    );
    assert_eq!(counters(&mut dev, ctl).engines, 4);
}

/// ABI 1.4: a device whose doorbell page is a hardware register (the PCI device) reports
/// `DOORBELL_MMIO` with where the register is and what rings it; a device without one
/// reports neither, and a host cannot name a register without the feature, nor after the
/// first open.
#[test]
fn get_info_reports_the_hardware_doorbell_register_only_with_doorbell_mmio() {
    let get_info = |dev: &mut DeviceCore<HeapPlatform>, client: u32| {
        let mut i = DeviceInfo::default();
        call(dev, client, DRIVER_CMD_GET_INFO, &mut i).unwrap();
        i
    };
    // The mock's futex doorbell: no register, both fields 0.
    let mut futex = device();
    let reg = DoorbellRegister::new(12, 1).unwrap();
    assert_eq!(
        futex.set_doorbell(reg).map_err(|e| e.errno),
        Err(Errno::EINVAL),
        "a register without DOORBELL_MMIO"
    );
    let ctl = futex.open(params(1, 0, Role::Control)).unwrap();
    let i = get_info(&mut futex, ctl);
    assert!(!i.features.contains(Features::DOORBELL_MMIO));
    assert_eq!((i.doorbell_offset, i.doorbell_value), (0, 0));

    let mut pci = DeviceCore::new(
        Config {
            platform_features: Features::DOORBELL_MMIO,
            ..*device().config()
        },
        HeapPlatform::default(),
    );
    // The feature without its register is not advertised: a client would not know where
    // to write (the 1.3 text's "tail at offset 0" rings nothing on a PCI device).
    assert!(!pci.info().features.contains(Features::DOORBELL_MMIO));
    assert_eq!(pci.doorbell(), None);
    let reg = DoorbellRegister::new(12, 0x0000_0001).unwrap();
    pci.set_doorbell(reg).unwrap();
    assert_eq!(pci.doorbell(), Some(reg));
    let c = pci.open(params(7, 1000, Role::Client)).unwrap();
    let i = get_info(&mut pci, c);
    assert!(i.features.contains(Features::DOORBELL_MMIO));
    assert!(!i.features.contains(Features::DOORBELL_FUTEX));
    assert_eq!((i.doorbell_offset, i.doorbell_value), (12, 1));
    // Fixed once a client may have read it.
    let other = DoorbellRegister::new(0, 2).unwrap();
    assert_eq!(
        pci.set_doorbell(other).map_err(|e| e.errno),
        Err(Errno::EBUSY)
    );
    assert_eq!(get_info(&mut pci, c).doorbell_value, 1);
}

/// ABI 1.4: GET_IDENTITY reports the PCI address and ids a host set, and a software
/// device's are empty (on no bus).
#[test]
fn get_identity_reports_the_bus_location() {
    let mut dev = device();
    let ctl = dev.open(params(1, 0, Role::Control)).unwrap();
    let mut id = DeviceIdentity::default();
    call(&mut dev, ctl, DRIVER_CMD_GET_IDENTITY, &mut id).unwrap();
    assert_eq!((id.bus_id(), id.pci_vendor, id.pci_device), ("", 0, 0));
    assert_eq!(id.bus_id, [0; 16]);
    let uuid = davinci_driver_core::derive_uuid(&[b"pci", b"0"]);
    dev.set_device_identity(
        Identity::new(uuid, "davinci pci", "davinci-pcidev 0.1", 0, 1).with_pci(
            "0000:00:04.0",
            0x1af4,
            0x1110,
        ),
    );
    call(&mut dev, ctl, DRIVER_CMD_GET_IDENTITY, &mut id).unwrap();
    assert_eq!(
        (id.bus_id(), id.pci_vendor, id.pci_device),
        ("0000:00:04.0", 0x1af4, 0x1110)
    );
    assert_eq!((id.uuid, id.model()), (uuid, "davinci pci"));
    assert_eq!(
        id.chip_name, [0; 12],
        "no chip name until the host sets one"
    );
    let named = *dev.device_identity();
    dev.set_device_identity(named.with_names("Ascend910B3", "910B3-and-more"));
    call(&mut dev, ctl, DRIVER_CMD_GET_IDENTITY, &mut id).unwrap();
    assert_eq!((id.model(), id.chip_name()), ("Ascend910B3", "910B3-and-m"));
    assert_eq!(id.bus_id(), "0000:00:04.0", "names leave the bus location");
}

/// ABI 1.5: GET_SENSORS, any open, with the feature bit: the model starts at the idle steady
/// state, integrates idle power over the device clock, and its configured limits set the
/// throttle bits.
#[test]
fn get_sensors_reports_the_model() {
    let mut dev = device();
    let ctl = dev.open(params(1, 0, Role::Control)).unwrap();
    let mut info = DeviceInfo::default();
    call(&mut dev, ctl, DRIVER_CMD_GET_INFO, &mut info).unwrap();
    assert!(info.features.contains(Features::SENSORS));
    let mut s = DeviceSensors::default();
    call(&mut dev, ctl, DRIVER_CMD_GET_SENSORS, &mut s).unwrap();
    assert_eq!(
        (s.temperature_mc, s.power_mw, s.voltage_mv),
        (39_000, 60_000, 800)
    );
    assert_eq!((s.throttle, s.power_limit_mw), (0, 310_000));
    let t0 = s.now_ns;
    dev.platform()
        .now
        .store(t0 + 10_000_000_000, core::sync::atomic::Ordering::Relaxed);
    call(&mut dev, ctl, DRIVER_CMD_GET_SENSORS, &mut s).unwrap();
    // 60 W over the 10 s (and a few fake-clock ticks) since the first reading.
    assert_eq!(s.energy_mj, 600_000);
    assert_eq!(
        s.temperature_mc, 39_000,
        "idle stays at the idle steady state"
    );
    dev.set_sensor_config(davinci_driver_core::SensorConfig {
        ambient_mc: 100_000,
        ..davinci_driver_core::SensorConfig::DEFAULT
    });
    call(&mut dev, ctl, DRIVER_CMD_GET_SENSORS, &mut s).unwrap();
    assert_eq!(s.temperature_mc, 109_000);
    assert_eq!(s.throttle, THROTTLE_THERMAL);
    assert_eq!(s.energy_mj, 0, "a new model starts without energy");
}
