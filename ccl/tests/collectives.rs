//! Every collective against a reference computed here in f64 (exact for i32, within the
//! element type's rounding for floats), for 2, 4 and 8 ranks, every element type and
//! operator, sizes from one element to several staging chunks; ranks as threads of this
//! process, and as processes (this test binary started again as each rank), each rank with
//! a device of its own.

use std::process::Command;
use std::time::Duration;

use davinci_ccl::{Comm, DataType, RedOp, UniqueId, ONE_SHOT_BYTES, SLOT_BYTES};
use davinci_shim::{Device, DeviceBuffer, DeviceMem, Errno};
use half::{bf16, f16};

/// Rank `r`'s input element `i`: small values, so sums and products stay exact in f32
/// (and near it in f16/bf16), different on every rank and element.
fn value(r: usize, i: usize, op: RedOp) -> f64 {
    match op {
        // Products of 8 ranks: +-1 and 2 only.
        RedOp::Prod => [1.0, -1.0, 2.0, 1.0][(r * 7 + i * 3) % 4],
        _ => ((r * 131 + i * 17) % 29) as f64 - 14.0,
    }
}

fn encode(ty: DataType, v: &[f64]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| match ty {
            DataType::F32 => (x as f32).to_le_bytes().to_vec(),
            DataType::I32 => (x as i32).to_le_bytes().to_vec(),
            DataType::F16 => f16::from_f64(x).to_le_bytes().to_vec(),
            DataType::Bf16 => bf16::from_f64(x).to_le_bytes().to_vec(),
        })
        .collect()
}

fn decode(ty: DataType, b: &[u8]) -> Vec<f64> {
    b.chunks_exact(ty.size())
        .map(|c| match ty {
            DataType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
            DataType::I32 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
            DataType::F16 => f16::from_le_bytes([c[0], c[1]]).to_f64(),
            DataType::Bf16 => bf16::from_le_bytes([c[0], c[1]]).to_f64(),
        })
        .collect()
}

fn fold(op: RedOp, vals: impl Iterator<Item = f64>) -> f64 {
    vals.reduce(|a, b| match op {
        RedOp::Sum => a + b,
        RedOp::Prod => a * b,
        RedOp::Max => a.max(b),
        RedOp::Min => a.min(b),
    })
    .unwrap_or(0.0)
}

fn close(ty: DataType, got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    // Inputs are integers within each type's exact range; f16 and bf16 round sums of up to
    // 8 of them (each step rounded): a relative tolerance of a few units in the last place.
    let tol = match ty {
        DataType::F32 | DataType::I32 => 0.0,
        DataType::F16 => 4.0 / 1024.0,
        DataType::Bf16 => 4.0 / 128.0,
    };
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{what}: element {i} of {}: got {g}, want {w}",
            got.len()
        );
    }
}

fn buf(dev: &Device, bytes: &[u8]) -> DeviceBuffer {
    let b = dev.alloc(bytes.len().max(1)).unwrap();
    b.write(0, bytes).unwrap();
    b
}

/// One rank's share of the whole check: every collective on `count` elements of `ty`.
fn run_rank(comm: &mut Comm, ty: DataType, count: usize) {
    let (r, n) = (comm.rank(), comm.nranks());
    let dev = Device::embedded().unwrap();
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    let bytes = count * ty.size();
    let what = |c: &str| format!("{c}, {n} ranks, rank {r}, {count} {}", ty.name());
    for op in RedOp::ALL {
        let mine: Vec<f64> = (0..count).map(|i| value(r, i, op)).collect();
        let send = buf(&dev, &encode(ty, &mine));
        let recv = dev.alloc(bytes.max(1)).unwrap();
        comm.all_reduce(&send, &recv, count, ty, op, &mut s)
            .unwrap();
        let want: Vec<f64> = (0..count)
            .map(|i| fold(op, (0..n).map(|k| value(k, i, op))))
            .collect();
        let mut got = vec![0u8; bytes];
        recv.read(0, &mut got).unwrap();
        close(
            ty,
            &decode(ty, &got),
            &want,
            &what(&format!("all_reduce {}", op.name())),
        );
        // In place.
        comm.all_reduce(&send, &send, count, ty, op, &mut s)
            .unwrap();
        send.read(0, &mut got).unwrap();
        close(ty, &decode(ty, &got), &want, &what("all_reduce in place"));
    }
    // Reduce to the last rank.
    let op = RedOp::Sum;
    let mine: Vec<f64> = (0..count).map(|i| value(r, i, op)).collect();
    let send = buf(&dev, &encode(ty, &mine));
    let recv = dev.alloc(bytes.max(1)).unwrap();
    recv.write(0, &vec![0x55; bytes]).unwrap();
    comm.reduce(&send, &recv, count, ty, op, n - 1, &mut s)
        .unwrap();
    let mut got = vec![0u8; bytes];
    recv.read(0, &mut got).unwrap();
    if r == n - 1 {
        let want: Vec<f64> = (0..count)
            .map(|i| fold(op, (0..n).map(|k| value(k, i, op))))
            .collect();
        close(ty, &decode(ty, &got), &want, &what("reduce (root)"));
    } else {
        assert!(
            got.iter().all(|&b| b == 0x55),
            "{}: a non-root's recv was written",
            what("reduce")
        );
    }
    // All-gather.
    let gathered = dev.alloc((bytes * n).max(1)).unwrap();
    comm.all_gather(&send, &gathered, count, ty, &mut s)
        .unwrap();
    let mut got = vec![0u8; bytes * n];
    gathered.read(0, &mut got).unwrap();
    let want: Vec<f64> = (0..n)
        .flat_map(|k| (0..count).map(move |i| value(k, i, op)))
        .collect();
    close(ty, &decode(ty, &got), &want, &what("all_gather"));
    // Reduce-scatter: n blocks of `count` in, block r out.
    let blocks: Vec<f64> = (0..n * count).map(|i| value(r, i, op)).collect();
    let big = buf(&dev, &encode(ty, &blocks));
    comm.reduce_scatter(&big, &recv, count, ty, op, &mut s)
        .unwrap();
    recv.read(0, &mut got[..bytes]).unwrap();
    let want: Vec<f64> = (0..count)
        .map(|i| fold(op, (0..n).map(|k| value(k, r * count + i, op))))
        .collect();
    close(
        ty,
        &decode(ty, &got[..bytes]),
        &want,
        &what("reduce_scatter"),
    );
    // Broadcast from rank 1 (0 with one rank).
    let root = 1 % n;
    comm.broadcast(&send, &recv, count, ty, root, &mut s)
        .unwrap();
    recv.read(0, &mut got[..bytes]).unwrap();
    let want: Vec<f64> = (0..count).map(|i| value(root, i, op)).collect();
    close(ty, &decode(ty, &got[..bytes]), &want, &what("broadcast"));
}

/// Point-to-point on `count` i32 elements: a ring shift (send to the next rank, receive
/// from the previous, in one group), then an all-to-all (a block to every rank, itself
/// included, and one from each), every byte checked.
fn run_p2p(comm: &mut Comm, count: usize) {
    let (r, n) = (comm.rank(), comm.nranks());
    let dev = Device::embedded().unwrap();
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    let val = |from: usize, to: usize, i: usize| (from * 1_000_000 + to * 10_000 + i) as i32;
    let bytes = (count * 4).max(1);
    let next = (r + 1) % n;
    let prev = (r + n - 1) % n;
    let mine = dev.alloc(bytes).unwrap();
    mine.write_slice(0, &(0..count).map(|i| val(r, next, i)).collect::<Vec<_>>())
        .unwrap();
    let got = dev.alloc(bytes).unwrap();
    comm.group(&mut s, |g| {
        g.send(&mine, count, DataType::I32, next)?;
        g.recv(&got, count, DataType::I32, prev)
    })
    .unwrap();
    let want: Vec<i32> = (0..count).map(|i| val(prev, r, i)).collect();
    assert_eq!(
        got.read_vec::<i32>(0, count).unwrap(),
        want,
        "ring shift, {n} ranks, rank {r}, {count} elements"
    );
    let outs: Vec<DeviceBuffer> = (0..n)
        .map(|to| {
            let b = dev.alloc(bytes).unwrap();
            b.write_slice(0, &(0..count).map(|i| val(r, to, i)).collect::<Vec<_>>())
                .unwrap();
            b
        })
        .collect();
    let ins: Vec<DeviceBuffer> = (0..n).map(|_| dev.alloc(bytes).unwrap()).collect();
    comm.group(&mut s, |g| {
        for k in 0..n {
            g.send(&outs[k], count, DataType::I32, k)?;
            g.recv(&ins[k], count, DataType::I32, k)?;
        }
        Ok(())
    })
    .unwrap();
    for (from, b) in ins.iter().enumerate() {
        let want: Vec<i32> = (0..count).map(|i| val(from, r, i)).collect();
        assert_eq!(
            b.read_vec::<i32>(0, count).unwrap(),
            want,
            "all-to-all, {n} ranks, rank {r} from {from}, {count} elements"
        );
    }
}

/// Element counts that cross the paths' edges: one element, odd counts, the one-shot limit
/// and past it, more than one staging chunk.
fn counts(ty: DataType) -> Vec<usize> {
    let e = ty.size();
    vec![
        1,
        3,
        1000,
        ONE_SHOT_BYTES / e,
        ONE_SHOT_BYTES / e + 1,
        SLOT_BYTES / e + 5,
    ]
}

#[test]
fn every_collective_matches_the_reference_for_2_4_and_8_ranks_in_threads() {
    for n in [2, 4, 8] {
        let comms = Comm::init_all(n).unwrap();
        std::thread::scope(|s| {
            for mut comm in comms {
                assert!(comm.is_direct(), "threads of one process: the direct path");
                s.spawn(move || {
                    for ty in DataType::ALL {
                        for count in counts(ty) {
                            // The chunked sizes in f32 and f16 (i32 and bf16 share their
                            // paths), and with 8 ranks in f32 only: time.
                            let chunked = count > ONE_SHOT_BYTES / ty.size() + 1;
                            let wide = ty == DataType::F32 || (ty == DataType::F16 && n < 8);
                            if chunked && !wide {
                                continue;
                            }
                            run_rank(&mut comm, ty, count);
                        }
                    }
                });
            }
        });
    }
}

const CHILD_ENV: &str = "DAVINCI_CCL_TEST_CHILD";

/// The body of a child rank: run by `ranks_in_separate_processes_agree_with_the_reference`,
/// which starts this binary again for it.
#[test]
#[ignore = "a rank of ranks_in_separate_processes_agree_with_the_reference, started by it"]
fn child_rank() {
    let spec = std::env::var(CHILD_ENV).expect("started by the parent test, with its spec");
    let mut parts = spec.split(',');
    let id: UniqueId = parts.next().unwrap().parse().unwrap();
    let n: usize = parts.next().unwrap().parse().unwrap();
    let r: usize = parts.next().unwrap().parse().unwrap();
    let mut comm = Comm::init_rank_timeout(&id, n, r, Duration::from_secs(60)).unwrap();
    assert!(
        !comm.is_direct(),
        "ranks of other processes: the staged path"
    );
    for ty in DataType::ALL {
        for count in [1, 777, ONE_SHOT_BYTES / ty.size() + 9] {
            run_rank(&mut comm, ty, count);
        }
    }
    for count in [1, 5000, SLOT_BYTES / 4 * 2 + 7] {
        run_p2p(&mut comm, count);
    }
}

fn spawn_ranks(
    id: &UniqueId,
    n: usize,
    ranks: impl Iterator<Item = usize>,
) -> Vec<std::process::Child> {
    let exe = std::env::current_exe().unwrap();
    ranks
        .map(|r| {
            Command::new(&exe)
                .args(["--exact", "child_rank", "--ignored", "--test-threads=1"])
                .env(CHILD_ENV, format!("{id},{n},{r}"))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect()
}

#[test]
fn ranks_in_separate_processes_agree_with_the_reference() {
    for n in [2, 4] {
        let id = UniqueId::new().unwrap();
        let kids = spawn_ranks(&id, n, 0..n);
        for k in kids {
            let out = k.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "a rank of {n} failed: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
}

#[test]
fn a_rank_that_never_comes_is_a_timeout_not_a_hang() {
    let id = UniqueId::new().unwrap();
    let e = Comm::init_rank_timeout(&id, 2, 0, Duration::from_millis(300)).unwrap_err();
    assert!(e.is(Errno::ETIMEDOUT), "{e}");
    assert!(e.message().contains("1 of 2 joined"), "{e}");
    // Bad arguments.
    let id = UniqueId::new().unwrap();
    assert!(Comm::init_rank(&id, 2, 2).unwrap_err().is(Errno::EINVAL));
    assert!(Comm::init_rank(&id, 0, 0).unwrap_err().is(Errno::EINVAL));
    assert!(Comm::init_rank(&id, 65, 0).unwrap_err().is(Errno::EINVAL));
}

#[test]
fn mismatched_calls_are_refused_with_the_numbers() {
    let mut comms = Comm::init_all(1).unwrap();
    let comm = &mut comms[0];
    let dev = Device::embedded().unwrap();
    let mut s = dev.create_context().unwrap().create_stream().unwrap();
    let small = dev.alloc(16).unwrap();
    let e = comm
        .all_reduce(&small, &small, 5, DataType::F32, RedOp::Sum, &mut s)
        .unwrap_err();
    assert!(
        e.is(Errno::EINVAL) && e.message().contains("20 bytes"),
        "{e}"
    );
    let e = comm
        .broadcast(&small, &small, 1, DataType::F32, 3, &mut s)
        .unwrap_err();
    assert!(e.is(Errno::EINVAL) && e.message().contains("root 3"), "{e}");
    // One rank: every collective is a copy.
    small.write_slice(0, &[1.5f32, 2.5, 3.5, 4.5]).unwrap();
    let out = dev.alloc(16).unwrap();
    comm.all_reduce(&small, &out, 4, DataType::F32, RedOp::Max, &mut s)
        .unwrap();
    assert_eq!(out.read_vec::<f32>(0, 4).unwrap(), [1.5, 2.5, 3.5, 4.5]);
}

#[test]
fn a_segment_file_open_to_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let id = UniqueId::new().unwrap();
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("davinci-ccl-{id}"));
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = Comm::init_rank_timeout(&id, 1, 0, Duration::from_secs(5)).unwrap_err();
    let _ = std::fs::remove_file(&path);
    assert!(
        e.is(Errno::EPERM) && e.message().contains("open to others"),
        "{e}"
    );
}

/// Device memory seen only through copies (as a binding's buffer type may be): no host view.
struct NoView<'a>(&'a DeviceBuffer);

impl davinci_ccl::Bytes for NoView<'_> {
    fn len(&self) -> usize {
        DeviceMem::len(self.0)
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> davinci_shim::Result<()> {
        DeviceMem::read(self.0, offset, out)
    }
    fn write(&self, offset: usize, data: &[u8]) -> davinci_shim::Result<()> {
        DeviceMem::write(self.0, offset, data)
    }
}

#[test]
fn ranks_of_one_process_joined_one_by_one_go_direct_and_one_without_a_host_view_sends_all_through_the_segment(
) {
    let n = 4;
    let id = UniqueId::new().unwrap();
    // Past the one-shot size, two staging chunks: the staged path's chunked loops.
    let count = SLOT_BYTES / 4 + 3;
    std::thread::scope(|s| {
        for r in 0..n {
            let id = &id;
            s.spawn(move || {
                let mut comm = Comm::init_rank(id, n, r).unwrap();
                assert!(comm.is_direct(), "rank {r}: every rank is in this process");
                let dev = Device::embedded().unwrap();
                let mut st = dev.create_context().unwrap().create_stream().unwrap();
                let mine: Vec<f32> = (0..count).map(|i| (r * 3 + i % 5) as f32).collect();
                let send = dev.alloc(count * 4).unwrap();
                send.write_slice(0, &mine).unwrap();
                let recv = dev.alloc(count * 4 * n).unwrap();
                // Rank 2 lends its buffers without a host view: every rank must take the
                // staged path alike (or they would wait at different barriers).
                let (sv, rv) = (NoView(&send), NoView(&recv));
                let (sb, rb): (&dyn davinci_ccl::Bytes, &dyn davinci_ccl::Bytes) =
                    if r == 2 { (&sv, &rv) } else { (&send, &recv) };
                comm.all_reduce(sb, rb, count, DataType::F32, RedOp::Sum, &mut st)
                    .unwrap();
                let got = recv.read_vec::<f32>(0, count).unwrap();
                for (i, g) in got.iter().enumerate() {
                    let want: f32 = (0..n).map(|k| (k * 3 + i % 5) as f32).sum();
                    assert_eq!(*g, want, "all_reduce element {i} on rank {r}");
                }
                comm.all_gather(sb, rb, count, DataType::F32, &mut st)
                    .unwrap();
                for k in 0..n {
                    let got = recv.read_vec::<f32>(k * count * 4, 7).unwrap();
                    let want: Vec<f32> = (0..7).map(|i| (k * 3 + i % 5) as f32).collect();
                    assert_eq!(got, want, "all_gather block {k} on rank {r}");
                }
                comm.broadcast(sb, rb, count, DataType::F32, 2, &mut st)
                    .unwrap();
                let got = recv.read_vec::<f32>((count - 5) * 4, 5).unwrap();
                let want: Vec<f32> = (count - 5..count).map(|i| (6 + i % 5) as f32).collect();
                assert_eq!(got, want, "broadcast from rank 2 on rank {r}");
            });
        }
    });
}

#[test]
fn sends_and_receives_in_groups_arrive_whole_for_2_4_and_8_ranks_in_threads() {
    for n in [2, 4, 8] {
        let comms = Comm::init_all(n).unwrap();
        std::thread::scope(|s| {
            for mut comm in comms {
                s.spawn(move || {
                    for count in [0, 1, 5000, SLOT_BYTES / 4 + 3] {
                        run_p2p(&mut comm, count);
                    }
                });
            }
        });
    }
}

#[test]
fn a_receive_of_the_wrong_size_or_from_a_silent_peer_is_an_error_not_a_hang() {
    let id = UniqueId::new().unwrap();
    let results: Vec<(Option<Errno>, String)> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..2)
            .map(|r| {
                let id = &id;
                s.spawn(move || {
                    let mut comm =
                        Comm::init_rank_timeout(id, 2, r, Duration::from_secs(20)).unwrap();
                    let dev = Device::embedded().unwrap();
                    let mut st = dev.create_context().unwrap().create_stream().unwrap();
                    let b = dev.alloc(4096).unwrap();
                    let e = comm.send(&b, 1, DataType::F32, 2, &mut st).unwrap_err();
                    assert!(e.is(Errno::EINVAL) && e.message().contains("peer 2"), "{e}");
                    // Rank 0 sends 100 elements, rank 1 expects 10.
                    let e = if r == 0 {
                        comm.send(&b, 100, DataType::F32, 1, &mut st).unwrap_err()
                    } else {
                        comm.recv(&b, 10, DataType::F32, 0, &mut st).unwrap_err()
                    };
                    (e.errno(), e.message().to_string())
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    assert_eq!(results[1].0, Some(Errno::EINVAL), "{:?}", results[1]);
    assert!(results[1].1.contains("sends 400 bytes") && results[1].1.contains("expects 40"));
    assert_eq!(
        results[0].0,
        Some(Errno::ECANCELED),
        "the sender learns: {:?}",
        results[0]
    );

    // A peer that never sends: ETIMEDOUT after the communicator's timeout.
    let id = UniqueId::new().unwrap();
    std::thread::scope(|s| {
        for r in 0..2 {
            let id = &id;
            s.spawn(move || {
                let mut comm =
                    Comm::init_rank_timeout(id, 2, r, Duration::from_millis(500)).unwrap();
                if r == 0 {
                    let dev = Device::embedded().unwrap();
                    let mut st = dev.create_context().unwrap().create_stream().unwrap();
                    let b = dev.alloc(64).unwrap();
                    let e = comm.recv(&b, 4, DataType::I32, 1, &mut st).unwrap_err();
                    assert!(
                        e.is(Errno::ETIMEDOUT) && e.message().contains("recv from rank 1"),
                        "{e}"
                    );
                }
            });
        }
    });
}

#[test]
fn stream_ordered_calls_wait_for_the_streams_work_and_the_stream_waits_for_them() {
    use davinci_shim::task;
    let n = 4;
    let count = ONE_SHOT_BYTES / 4 * 3 + 1; // past the one-shot path
    let comms = Comm::init_all(n).unwrap();
    std::thread::scope(|s| {
        for comm in comms {
            s.spawn(move || {
                let r = comm.rank();
                let dev = Device::embedded().unwrap();
                let ctx = dev.create_context().unwrap();
                let mut st = ctx.create_stream().unwrap();
                let mut sc = comm.into_stream_ordered(&ctx).unwrap();
                let (send, recv, out) = (
                    dev.alloc(count * 4).unwrap(),
                    dev.alloc(count * 4).unwrap(),
                    dev.alloc(count * 4).unwrap(),
                );
                for round in 0..3u32 {
                    // Queued, none of it run yet: the input is filled on the device, the
                    // all-reduce waits for that, and the copy after it waits for the result.
                    let v = (r as u32 + 1) * 10 + round;
                    st.submit(&task::fill(&send, v).unwrap()).unwrap();
                    sc.all_reduce(&send, &recv, count, DataType::I32, RedOp::Sum, &mut st)
                        .unwrap();
                    st.submit(&task::copy(&out, &recv).unwrap()).unwrap();
                    st.synchronize(Duration::from_secs(60)).unwrap();
                    let want: i32 = (0..n).map(|k| ((k as u32 + 1) * 10 + round) as i32).sum();
                    let got = out.read_vec::<i32>(0, count).unwrap();
                    assert!(
                        got.iter().all(|&x| x == want),
                        "rank {r} round {round}: {} of {count} wrong (first {:?}, want {want})",
                        got.iter().filter(|&&x| x != want).count(),
                        got.iter().find(|&&x| x != want)
                    );
                }
                // Sends and receives too: a ring shift, alone (ordered by parity so that they
                // match) and as one group (every rank sends first).
                let next = (r + 1) % n;
                let prev = (r + n - 1) % n;
                st.submit(&task::fill(&send, r as u32).unwrap()).unwrap();
                if r % 2 == 0 {
                    sc.send(&send, count, DataType::I32, next, &mut st).unwrap();
                    sc.recv(&recv, count, DataType::I32, prev, &mut st).unwrap();
                } else {
                    sc.recv(&recv, count, DataType::I32, prev, &mut st).unwrap();
                    sc.send(&send, count, DataType::I32, next, &mut st).unwrap();
                }
                st.submit(&task::copy(&out, &recv).unwrap()).unwrap();
                st.synchronize(Duration::from_secs(60)).unwrap();
                assert_eq!(out.read_vec::<i32>(0, 1).unwrap(), [prev as i32]);
                st.submit(&task::fill(&send, 100 + r as u32).unwrap())
                    .unwrap();
                sc.group(
                    &[
                        (&send, count, DataType::I32, next, true),
                        (&recv, count, DataType::I32, prev, false),
                    ],
                    &mut st,
                )
                .unwrap();
                st.submit(&task::copy(&out, &recv).unwrap()).unwrap();
                st.synchronize(Duration::from_secs(60)).unwrap();
                assert_eq!(
                    out.read_vec::<i32>((count - 1) * 4, 1).unwrap(),
                    [100 + prev as i32]
                );
                sc.synchronize(Duration::from_secs(60)).unwrap();
                // Bad calls fail at once, nothing queued.
                let small = dev.alloc(16).unwrap();
                let e = sc
                    .all_reduce(&small, &small, 5, DataType::F32, RedOp::Sum, &mut st)
                    .unwrap_err();
                assert!(
                    e.is(Errno::EINVAL) && e.message().contains("20 bytes"),
                    "{e}"
                );
                let e = sc.send(&small, 1, DataType::F32, n, &mut st).unwrap_err();
                assert!(e.is(Errno::EINVAL), "{e}");
                let nv = NoView(&small);
                let e = sc
                    .all_reduce(&nv, &nv, 1, DataType::F32, RedOp::Sum, &mut st)
                    .unwrap_err();
                assert!(e.message().contains("host view"), "{e}");
            });
        }
    });
}
