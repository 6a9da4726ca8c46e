//! davinci-ccl-bench: collectives' bandwidth per size, in nccl-tests' terms (algorithm
//! bandwidth: bytes / time; bus bandwidth: what each rank's links carry, algbw times 2(n-1)/n
//! for all-reduce, (n-1)/n for all-gather and reduce-scatter, 1 for broadcast and reduce),
//! beside the host's memcpy bandwidth measured in the same run (the bound of a path that
//! moves data through the host).
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use davinci_ccl::{Comm, DataType, RedOp, UniqueId};
use davinci_shim::{Device, DeviceBuffer};

const USAGE: &str = "\
davinci-ccl-bench: collectives' bandwidth per size, as nccl-tests reports it

Usage: davinci-ccl-bench [OPTIONS]

Options:
  -n, --ranks <N>          Ranks, a device each: threads of this process, or processes
                           with --processes [default: 4]
  -d, --device <SPEC>      Each rank's device; {rank} is replaced by the rank, e.g.
                           'mock:/run/davinci/davinci{rank}.sock' [default: embedded]
  -c, --collective <NAME>  all_reduce, all_gather, reduce_scatter, broadcast, reduce or
                           all [default: all_reduce]
  -t, --dtype <TYPE>       float32, float16, bfloat16 or int32 [default: float32]
  -b, --min-bytes <SIZE>   Smallest message (bytes, K/M suffixes) [default: 4]
  -e, --max-bytes <SIZE>   Largest message [default: 64M]
  -f, --factor <N>         Multiply the size by N each step [default: 4]
  -i, --iters <N>          Timed iterations per size (after 2 warm-up) [default: 5]
  -p, --processes          A process per rank (davinci-ccl's staged path through a shared
                           segment) instead of a thread per rank (its direct path: every
                           rank in one process moves data between the buffers itself)
      --json               One JSON object per line instead of the table
  -h, --help               This text
";

#[derive(Clone)]
struct Opts {
    ranks: usize,
    device: String,
    collectives: Vec<&'static str>,
    ty: DataType,
    min: usize,
    max: usize,
    factor: usize,
    iters: usize,
    processes: bool,
    json: bool,
}

fn size(v: &str) -> Result<usize, String> {
    let (num, mul) = match v.chars().last() {
        Some('K' | 'k') => (&v[..v.len() - 1], 1 << 10),
        Some('M' | 'm') => (&v[..v.len() - 1], 1 << 20),
        Some('G' | 'g') => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("'{v}': expected a size in bytes (K, M, G suffixes), above 0"))
}

fn parse(args: &[String]) -> Result<Option<Opts>, String> {
    let mut o = Opts {
        ranks: 4,
        device: "embedded".into(),
        collectives: vec!["all_reduce"],
        ty: DataType::F32,
        min: 4,
        max: 64 << 20,
        factor: 4,
        iters: 5,
        processes: false,
        json: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value (--help)"))
        };
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "-n" | "--ranks" => {
                let v = val(a)?;
                o.ranks = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=davinci_ccl::MAX_RANKS).contains(n))
                    .ok_or_else(|| {
                        format!("--ranks '{v}': expected 1..={}", davinci_ccl::MAX_RANKS)
                    })?;
            }
            "-d" | "--device" => o.device = val(a)?,
            "-c" | "--collective" => {
                let v = val(a)?;
                o.collectives = match v.as_str() {
                    "all" => vec!["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"],
                    "all_reduce" => vec!["all_reduce"],
                    "all_gather" => vec!["all_gather"],
                    "reduce_scatter" => vec!["reduce_scatter"],
                    "broadcast" => vec!["broadcast"],
                    "reduce" => vec!["reduce"],
                    _ => return Err(format!("--collective '{v}': expected all_reduce, all_gather, reduce_scatter, broadcast, reduce or all")),
                };
            }
            "-t" | "--dtype" => {
                let v = val(a)?;
                o.ty = DataType::ALL
                    .into_iter()
                    .find(|t| t.name() == v)
                    .ok_or_else(|| {
                        format!("--dtype '{v}': expected float32, float16, bfloat16 or int32")
                    })?;
            }
            "-b" | "--min-bytes" => o.min = size(&val(a)?)?,
            "-e" | "--max-bytes" => o.max = size(&val(a)?)?,
            "-f" | "--factor" => {
                let v = val(a)?;
                o.factor = v
                    .parse()
                    .ok()
                    .filter(|&f| f >= 2)
                    .ok_or_else(|| format!("--factor '{v}': expected 2 or more"))?;
            }
            "-i" | "--iters" => {
                let v = val(a)?;
                o.iters = v
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| format!("--iters '{v}': expected 1 or more"))?;
            }
            "-p" | "--processes" => o.processes = true,
            "--json" => o.json = true,
            other => return Err(format!("unknown argument '{other}' (--help)")),
        }
    }
    if o.min > o.max {
        return Err(format!(
            "--min-bytes {} is above --max-bytes {}",
            o.min, o.max
        ));
    }
    Ok(Some(o))
}

/// The bytes each rank's buffers need for collective `c` at message size `bytes`.
fn bufs(c: &str, bytes: usize, n: usize) -> (usize, usize) {
    match c {
        "all_gather" => (bytes / n, bytes),
        "reduce_scatter" => (bytes, bytes / n),
        _ => (bytes, bytes),
    }
}

fn bus_factor(c: &str, n: usize) -> f64 {
    let n = n as f64;
    match c {
        "all_reduce" => 2.0 * (n - 1.0) / n,
        "all_gather" | "reduce_scatter" => (n - 1.0) / n,
        _ => 1.0,
    }
}

/// One rank's run of collective `c` on `bytes`: the time of each timed iteration.
fn run(
    comm: &mut Comm,
    dev: &Device,
    c: &str,
    bytes: usize,
    o: &Opts,
) -> davinci_shim::Result<Vec<Duration>> {
    let n = comm.nranks();
    let e = o.ty.size();
    let (sb, rb) = bufs(c, bytes, n);
    let send: DeviceBuffer = dev.alloc(sb.max(e))?;
    let recv: DeviceBuffer = dev.alloc(rb.max(e))?;
    let mut s = dev.create_context()?.create_stream()?;
    let count = match c {
        "all_gather" => sb / e,
        "reduce_scatter" => rb / e,
        _ => bytes / e,
    };
    let mut times = Vec::new();
    for i in 0..o.iters + 2 {
        comm.barrier()?;
        let t = Instant::now();
        match c {
            "all_reduce" => comm.all_reduce(&send, &recv, count, o.ty, RedOp::Sum, &mut s)?,
            "all_gather" => comm.all_gather(&send, &recv, count, o.ty, &mut s)?,
            "reduce_scatter" => {
                comm.reduce_scatter(&send, &recv, count, o.ty, RedOp::Sum, &mut s)?
            }
            "broadcast" => comm.broadcast(&send, &recv, count, o.ty, 0, &mut s)?,
            _ => comm.reduce(&send, &recv, count, o.ty, RedOp::Sum, 0, &mut s)?,
        }
        comm.barrier()?;
        if i >= 2 {
            times.push(t.elapsed());
        }
    }
    Ok(times)
}

/// The host's memcpy bandwidth at `bytes` (bytes/s, the best of a few copies).
fn memcpy_bw(bytes: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let reps = (64 << 20) / bytes.max(1) + 1;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..reps.min(1000) {
            dst.copy_from_slice(std::hint::black_box(&src));
        }
        best = best.min(t.elapsed().as_secs_f64() / reps.min(1000) as f64);
    }
    std::hint::black_box(&dst);
    bytes as f64 / best
}

/// The host's memcpy bandwidth at `bytes` with `threads` copying at once (each its own
/// buffers; bytes copied by all of them per second, the best of a few rounds).
fn parallel_memcpy_bw(bytes: usize, threads: usize) -> f64 {
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..threads)
        .map(|_| (vec![1u8; bytes], vec![0u8; bytes]))
        .collect();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        std::thread::scope(|s| {
            for (src, dst) in pairs.iter_mut() {
                s.spawn(move || dst.copy_from_slice(std::hint::black_box(src)));
            }
        });
        best = best.min(t.elapsed().as_secs_f64());
    }
    (threads * bytes) as f64 / best
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("davinci-ccl-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let n = o.ranks;
    let mut sizes = Vec::new();
    let mut b = o.min;
    while b <= o.max {
        sizes.push(b);
        b = match b.checked_mul(o.factor) {
            Some(x) => x,
            None => break,
        };
    }
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec, &o, &sizes);
    }
    if o.processes {
        return parent(&args, &o);
    }
    let comms = match Comm::init_all(n) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("davinci-ccl-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Each rank: its device, then every collective and size; rank 0 reports.
    let results = std::thread::scope(|s| {
        let joins: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(r, mut comm)| {
                let (o, sizes) = (o.clone(), sizes.clone());
                s.spawn(move || rank(r, &mut comm, &o, &sizes))
            })
            .collect();
        joins
            .into_iter()
            .map(|j| j.join().unwrap_or_else(|_| Err("a rank panicked".into())))
            .collect::<Vec<_>>()
    });
    let mut rows = None;
    for r in results {
        match r {
            Ok(v) => {
                rows.get_or_insert(v);
            }
            Err(e) => {
                eprintln!("davinci-ccl-bench: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    report(&o, rows.unwrap_or_default());
    ExitCode::SUCCESS
}

/// What tells a process started by `--processes` its communicator and rank.
const CHILD_ENV: &str = "DAVINCI_CCL_BENCH_RANK";

type Row = (&'static str, usize, Duration);

/// One rank: its device, then every collective and size.
fn rank(r: usize, comm: &mut Comm, o: &Opts, sizes: &[usize]) -> Result<Vec<Row>, String> {
    let n = o.ranks;
    let spec = o.device.replace("{rank}", &r.to_string());
    let dev = if spec == "embedded" {
        Device::embedded()
    } else {
        Device::open(&spec)
    }
    .map_err(|e| format!("rank {r}: {spec}: {e}"))?;
    let mut out = Vec::new();
    for &c in &o.collectives {
        for &bytes in sizes {
            // Whole elements, divisible among the ranks where it matters.
            let unit = o.ty.size()
                * if c == "all_gather" || c == "reduce_scatter" {
                    n
                } else {
                    1
                };
            let bytes = (bytes / unit).max(1) * unit;
            let t = run(comm, &dev, c, bytes, o)
                .map_err(|e| format!("rank {r}: {c} of {bytes} bytes: {e}"))?;
            out.push((c, bytes, median(t)));
        }
    }
    Ok(out)
}

/// `--processes`: starts a process per rank (this program again, told its rank), rank 0's
/// output is the report.
fn parent(args: &[String], o: &Opts) -> ExitCode {
    let id = match UniqueId::new() {
        Ok(id) => id,
        Err(e) => {
            eprintln!("davinci-ccl-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("davinci-ccl-bench: cannot find this program to start the ranks: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut kids = Vec::new();
    for r in 0..o.ranks {
        let out = if r == 0 {
            std::process::Stdio::inherit()
        } else {
            std::process::Stdio::null()
        };
        match std::process::Command::new(&exe)
            .args(args)
            .env(CHILD_ENV, format!("{id},{r}"))
            .stdout(out)
            .spawn()
        {
            Ok(k) => kids.push(k),
            Err(e) => {
                eprintln!("davinci-ccl-bench: cannot start rank {r}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let mut ok = true;
    for mut k in kids {
        ok &= k.wait().is_ok_and(|s| s.success());
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A rank started by [`parent`]: `spec` is `<unique id>,<rank>`.
fn child(spec: &str, o: &Opts, sizes: &[usize]) -> ExitCode {
    let parsed = spec
        .split_once(',')
        .and_then(|(id, r)| Some((id.parse::<UniqueId>().ok()?, r.parse::<usize>().ok()?)));
    let Some((id, r)) = parsed else {
        eprintln!("davinci-ccl-bench: {CHILD_ENV}='{spec}': expected <unique id>,<rank>");
        return ExitCode::from(2);
    };
    let rows = Comm::init_rank(&id, o.ranks, r)
        .map_err(|e| format!("rank {r}: {e}"))
        .and_then(|mut comm| rank(r, &mut comm, o, sizes));
    match rows {
        Ok(rows) => {
            if r == 0 {
                report(o, rows);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("davinci-ccl-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints rank 0's rows: the table, or a JSON object per row.
fn report(o: &Opts, rows: Vec<Row>) {
    let n = o.ranks;
    if !o.json {
        println!(
            "# davinci-ccl-bench: {n} ranks ({}), {} on {}, memcpy measured in the same run",
            if o.processes {
                "a process each: the staged path"
            } else {
                "threads of one process: the direct path"
            },
            o.ty.name(),
            o.device
        );
        println!(
            "# {:>14} {:>12} {:>10} {:>10} {:>10} {:>12} {:>10}",
            "collective",
            "size(B)",
            "time(us)",
            "algbw(GB/s)",
            "busbw(GB/s)",
            "memcpy(GB/s)",
            "bus/memcpy"
        );
    }
    // What the host allows: an all-reduce reads every rank's send and writes every rank's
    // recv, n copies of the message at best, at the bandwidth of the host's cores copying
    // together; so busbw <= 2(n-1)/n * that bandwidth / n.
    let biggest = rows
        .iter()
        .filter(|r| r.0 == "all_reduce")
        .map(|r| r.1)
        .max();
    let bound = biggest.map(|bytes| {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let threads = n.min(cores);
        let agg = parallel_memcpy_bw(bytes, threads) / 1e9;
        (
            bytes,
            threads,
            agg,
            bus_factor("all_reduce", n) * agg / n as f64,
        )
    });
    if let (Some((bytes, threads, agg, b)), false) = (bound, o.json) {
        println!(
            "# all_reduce's bound on this host: n copies of the message at the memcpy bandwidth \
             of {threads} threads copying together ({agg:.3} GB/s at {bytes} B): busbw <= {b:.3} GB/s"
        );
    }
    for (c, bytes, t) in rows {
        let secs = t.as_secs_f64().max(1e-9);
        let alg = bytes as f64 / secs / 1e9;
        let bus = alg * bus_factor(c, n);
        let mc = memcpy_bw(bytes) / 1e9;
        if o.json {
            println!(
                "{{\"collective\":\"{c}\",\"ranks\":{n},\"dtype\":\"{}\",\"bytes\":{bytes},\"time_us\":{:.1},\"algbw_gbps\":{alg:.3},\"busbw_gbps\":{bus:.3},\"memcpy_gbps\":{mc:.3},\"bus_over_memcpy\":{:.3}{}}}",
                o.ty.name(),
                secs * 1e6,
                bus / mc,
                match bound {
                    Some((b, _, _, v)) if c == "all_reduce" && b == bytes =>
                        format!(",\"busbw_bound_gbps\":{v:.3}"),
                    _ => String::new(),
                }
            );
        } else {
            println!(
                "  {c:>14} {bytes:>12} {:>10.1} {alg:>10.3} {bus:>10.3} {mc:>12.3} {:>10.2}",
                secs * 1e6,
                bus / mc
            );
        }
    }
}
