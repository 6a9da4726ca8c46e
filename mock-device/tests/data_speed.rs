//! How fast the engine moves device memory (FILL, COPY between and within allocations, ADD),
//! printed, never asserted (speed is measured, not tested): `cargo test --release -p
//! davinci-mock-device --test data_speed -- --ignored --nocapture`.
#![forbid(unsafe_code)]

use std::time::Instant;

use davinci_driver_core::NoUserMem;
use davinci_mock_device::{local_open_params, MockConfig, MockDevice, Role};
use davinci_uapi::*;

fn call<T: Wire>(dev: &MockDevice, client: u32, request: u32, args: &mut T) -> Result<(), Errno> {
    let mut arg = vec![0u8; T::SIZE];
    args.encode(&mut arg);
    let r = dev.ioctl(client, request, &mut arg, &mut NoUserMem);
    *args = T::decode(&arg);
    r.map_err(|e| e.errno)
}

const LEN: u64 = 64 << 20;
const ROUNDS: u32 = 8;

#[test]
#[ignore = "a measurement: run it with --ignored --nocapture, in release"]
fn engine_data_movement_speed() {
    let dev = MockDevice::new(MockConfig {
        memory_size: 4 * LEN + (1 << 20),
        ..MockConfig::default()
    });
    let c = dev.open(local_open_params(Role::Client, true)).unwrap();
    let alloc = |size| {
        let mut a = AllocMemoryArgs {
            size,
            ..Default::default()
        };
        call(&dev, c, DRIVER_CMD_ALLOC_MEMORY, &mut a).unwrap();
        DevAddr(a.dev_addr)
    };
    let (a, b, d) = (alloc(LEN), alloc(LEN), alloc(LEN));
    let mut ctx = CreateContextArgs::default();
    call(&dev, c, DRIVER_CMD_CREATE_CONTEXT, &mut ctx).unwrap();
    let mut s = CreateStreamArgs {
        ctx: ctx.handle,
        cmd_entries: 64,
        event_entries: 64,
        ..Default::default()
    };
    call(&dev, c, DRIVER_CMD_CREATE_STREAM, &mut s).unwrap();
    // No completion is reaped: 64 event entries hold every task of the run (43).
    let mut n = 0u64;
    let mut run = |desc: TaskDesc| {
        n += 1;
        let mut sub = SubmitTaskArgs {
            stream: s.handle,
            desc,
            ..Default::default()
        };
        call(&dev, c, DRIVER_CMD_SUBMIT_TASK, &mut sub).unwrap();
        let mut w = WaitEventArgs {
            kind: WaitKind::Stream as u32,
            handle: s.handle,
            value: n,
            timeout_ns: 600_000_000_000,
            ..Default::default()
        };
        call(&dev, c, DRIVER_CMD_WAIT_EVENT, &mut w).unwrap();
        assert_eq!(w.status, 0);
    };
    // Every page touched once before timing.
    for x in [a, b, d] {
        run(TaskDesc::fill(0, x, LEN, 1));
    }
    let half = DevAddr(a.0 + LEN / 2);
    let rows: [(&str, TaskDesc, u64); 5] = [
        ("FILL 64 MiB", TaskDesc::fill(0, d, LEN, 0x0102_0304), LEN),
        (
            "COPY 64 MiB, two allocations",
            TaskDesc::copy(0, d, a, LEN),
            LEN,
        ),
        (
            "COPY 32 MiB within one allocation",
            TaskDesc::copy(0, half, a, LEN / 2),
            LEN / 2,
        ),
        (
            "ADD u32 64 MiB",
            TaskDesc::add(0, Dtype::U32, d, a, b, LEN / 4),
            LEN,
        ),
        (
            "ADD f32 64 MiB",
            TaskDesc::add(0, Dtype::F32, d, a, b, LEN / 4),
            LEN,
        ),
    ];
    for (name, desc, bytes) in rows {
        let t = Instant::now();
        for _ in 0..ROUNDS {
            run(desc);
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{name:<36} {:>7.2} GB/s",
            (bytes * u64::from(ROUNDS)) as f64 / secs / 1e9
        );
    }
}
