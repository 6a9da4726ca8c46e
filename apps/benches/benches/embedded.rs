//! The shim's data path on the embedded mock device: batched submit + synchronize, single-task
//! round trips (submit, spin on poll), and memory allocation with and without the pool.
//!
//! `cargo bench -p davinci-benches --bench embedded`. The comparison with baselines (a
//! hand-written two-ring SPSC pipeline, io_uring NOP, an empty ioctl) in one table is the
//! `davinci-bench` binary (`cargo run --release -p davinci-benches --bin davinci-bench`).
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use davinci_shim::{task, Device, MemPool, StreamOptions, Task};

const T: Duration = Duration::from_secs(30);

fn data_path(c: &mut Criterion) {
    let dev = Device::embedded().expect("embedded device");
    let ctx = dev.create_context().expect("context");
    let mut s = ctx
        .create_stream_with(StreamOptions::depths(1024, 2048))
        .expect("stream");
    let mut g = c.benchmark_group("embedded");
    g.measurement_time(Duration::from_secs(3));

    for batch in [1usize, 32, 256] {
        let descs: Vec<Task> = (0..batch as u64)
            .map(|i| task::nop().with_user_data(i))
            .collect();
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(format!("nop_batch_{batch}_submit_synchronize"), |b| {
            b.iter(|| {
                s.submit_batch(&descs).expect("submit");
                s.synchronize(T).expect("synchronize");
                black_box(s.poll_each(|c| {
                    black_box(c);
                }));
            })
        });
    }

    g.throughput(Throughput::Elements(1));
    g.bench_function("nop_round_trip_spin_poll", |b| {
        b.iter(|| {
            s.submit(&task::nop().with_user_data(7)).expect("submit");
            loop {
                if s.poll_each(|c| {
                    black_box(c);
                }) > 0
                {
                    break;
                }
                std::hint::spin_loop();
            }
        })
    });

    let buf = dev.alloc(1 << 20).expect("alloc");
    let fill = task::fill(&buf, 0x5a5a_5a5a).expect("fill");
    g.throughput(Throughput::Bytes(1 << 20));
    g.bench_function("fill_1MiB_submit_synchronize", |b| {
        b.iter(|| {
            s.submit(&fill).expect("submit");
            s.synchronize(T).expect("synchronize");
            s.poll_each(drop);
        })
    });
    drop(buf);

    let pool = MemPool::new(&dev);
    g.throughput(Throughput::Elements(1));
    g.bench_function("pool_alloc_free_256B", |b| {
        b.iter(|| black_box(pool.alloc(256).expect("pool alloc")))
    });
    g.bench_function("driver_alloc_free_4KiB", |b| {
        b.iter(|| black_box(dev.alloc(4096).expect("alloc")))
    });
    g.finish();
}

criterion_group!(benches, data_path);
criterion_main!(benches);
