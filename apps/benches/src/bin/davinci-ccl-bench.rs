//! davinci-ccl-bench: collectives' bandwidth per size, in nccl-tests' terms (algorithm
//! bandwidth: bytes / time; bus bandwidth: what each rank's links carry, algbw times 2(n-1)/n
//! for all-reduce, (n-1)/n for all-gather and reduce-scatter, 1 for broadcast and reduce),
//! beside the host's memcpy bandwidth measured in the same run (the bound of a path that
//! moves data through the host).
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use davinci_ccl::{Comm, DataType, RedOp};
use davinci_shim::{Device, DeviceBuffer};

const USAGE: &str = "\
davinci-ccl-bench: collectives' bandwidth per size, as nccl-tests reports it

Usage: davinci-ccl-bench [OPTIONS]

Options:
  -n, --ranks <N>          Ranks (threads of this process, a device each) [default: 4]
  -d, --device <SPEC>      Each rank's device; {rank} is replaced by the rank, e.g.
                           'mock:/run/davinci/davinci{rank}.sock' [default: embedded]
  -c, --collective <NAME>  all_reduce, all_gather, reduce_scatter, broadcast, reduce or
                           all [default: all_reduce]
  -t, --dtype <TYPE>       float32, float16, bfloat16 or int32 [default: float32]
  -b, --min-bytes <SIZE>   Smallest message (bytes, K/M suffixes) [default: 4]
  -e, --max-bytes <SIZE>   Largest message [default: 64M]
  -f, --factor <N>         Multiply the size by N each step [default: 4]
  -i, --iters <N>          Timed iterations per size (after 2 warm-up) [default: 5]
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
    let comms = match Comm::init_all(n) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("davinci-ccl-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut sizes = Vec::new();
    let mut b = o.min;
    while b <= o.max {
        sizes.push(b);
        b = match b.checked_mul(o.factor) {
            Some(x) => x,
            None => break,
        };
    }
    // Each rank: its device, then every collective and size; rank 0 reports.
    let results = std::thread::scope(|s| {
        let joins: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(r, mut comm)| {
                let (o, sizes) = (o.clone(), sizes.clone());
                s.spawn(
                    move || -> Result<Vec<(&'static str, usize, Duration)>, String> {
                        let spec = o.device.replace("{rank}", &r.to_string());
                        let dev = if spec == "embedded" {
                            Device::embedded()
                        } else {
                            Device::open(&spec)
                        }
                        .map_err(|e| format!("rank {r}: {spec}: {e}"))?;
                        let mut out = Vec::new();
                        for &c in &o.collectives {
                            for &bytes in &sizes {
                                // Whole elements, divisible among the ranks where it matters.
                                let unit = o.ty.size()
                                    * if c == "all_gather" || c == "reduce_scatter" {
                                        n
                                    } else {
                                        1
                                    };
                                let bytes = (bytes / unit).max(1) * unit;
                                let t = run(&mut comm, &dev, c, bytes, &o)
                                    .map_err(|e| format!("rank {r}: {c} of {bytes} bytes: {e}"))?;
                                out.push((c, bytes, median(t)));
                            }
                        }
                        Ok(out)
                    },
                )
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
    let rows = rows.unwrap_or_default();
    if !o.json {
        println!(
            "# davinci-ccl-bench: {n} ranks, {} on {}, memcpy measured in the same run",
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
    for (c, bytes, t) in rows {
        let secs = t.as_secs_f64().max(1e-9);
        let alg = bytes as f64 / secs / 1e9;
        let bus = alg * bus_factor(c, n);
        let mc = memcpy_bw(bytes) / 1e9;
        if o.json {
            println!(
                "{{\"collective\":\"{c}\",\"ranks\":{n},\"dtype\":\"{}\",\"bytes\":{bytes},\"time_us\":{:.1},\"algbw_gbps\":{alg:.3},\"busbw_gbps\":{bus:.3},\"memcpy_gbps\":{mc:.3},\"bus_over_memcpy\":{:.3}}}",
                o.ty.name(),
                secs * 1e6,
                bus / mc
            );
        } else {
            println!(
                "  {c:>14} {bytes:>12} {:>10.1} {alg:>10.3} {bus:>10.3} {mc:>12.3} {:>10.2}",
                secs * 1e6,
                bus / mc
            );
        }
    }
    ExitCode::SUCCESS
}
