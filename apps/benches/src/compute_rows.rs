//! Data movement and GEMM against this host's own limits (issue 43), in the same run: the
//! device's COPY and FILL (bytes/s) beside `memcpy` and `memset` of the same sizes, and the
//! device's f32 GEMM (FLOP/s) beside the same GEMM computed directly on host slices by the
//! kernel library (`davinci-kernels`, `matrixmultiply` single-threaded): the reference the
//! device's units are built from, so the ratio is what launching costs.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_kernels::gemm::{gemm, GemmInput, GemmOutput, GemmParams};
use davinci_kernels::{Slice, SliceMut};
use davinci_shim::task::{self, Matrix};
use davinci_shim::{Device, DeviceMem, Dtype};

use crate::measure::{Fail, ThroughputRun};

/// What moves the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Move {
    /// `copy_from_slice` between two host buffers (the baseline of COPY).
    Memcpy,
    /// `fill` of a host buffer (the baseline of FILL).
    Memset,
    /// The device's COPY between two device buffers.
    Copy,
    /// The device's FILL of a device buffer.
    Fill,
}

/// Repeats `f` (which moves `unit` bytes or FLOPs per call) until `min` has passed and at
/// least 3 calls ran; the best call's rate, as a run of `unit` "tasks" over its time.
fn best(
    unit: u64,
    min: Duration,
    mut f: impl FnMut() -> Result<(), Fail>,
) -> Result<ThroughputRun, Fail> {
    f()?; // warm: first touches, page faults, pool fills
    let start = Instant::now();
    let (mut calls, mut fastest) = (0u32, Duration::MAX);
    while calls < 3 || start.elapsed() < min {
        let t = Instant::now();
        f()?;
        fastest = fastest.min(t.elapsed());
        calls += 1;
    }
    Ok(ThroughputRun {
        tasks: unit,
        elapsed: fastest,
    })
}

fn shim_err(what: &'static str) -> impl Fn(davinci_shim::Error) -> Fail {
    move |e| Fail::Error(format!("{what}: {e}"))
}

/// Bytes per second of `how` over buffers of `bytes` (the best of repeated calls over at
/// least `min`); the device's tasks are synchronized each time and checked.
///
/// # Errors
/// A shim error, or a device result that is not what was asked.
pub fn data(dev: &Device, how: Move, bytes: usize, min: Duration) -> Result<ThroughputRun, Fail> {
    let n = bytes as u64;
    match how {
        Move::Memcpy => {
            let (src, mut dst) = (vec![7u8; bytes], vec![0u8; bytes]);
            best(n, min, || {
                dst.copy_from_slice(std::hint::black_box(&src));
                std::hint::black_box(&dst);
                Ok(())
            })
        }
        Move::Memset => {
            let mut dst = vec![0u8; bytes];
            let mut v = 0u8;
            best(n, min, || {
                v = v.wrapping_add(1);
                dst.fill(std::hint::black_box(v));
                std::hint::black_box(&dst);
                Ok(())
            })
        }
        Move::Copy | Move::Fill => {
            let a = dev.alloc(bytes).map_err(shim_err("alloc"))?;
            let b = dev.alloc(bytes).map_err(shim_err("alloc"))?;
            a.write(0, &vec![9u8; bytes]).map_err(shim_err("write"))?;
            let mut s = dev
                .create_context()
                .and_then(|c| c.create_stream())
                .map_err(shim_err("stream"))?;
            let t = match how {
                Move::Copy => task::copy(&b, &a),
                _ => task::fill(&b, 0x5a5a_5a5a),
            }
            .map_err(shim_err("task"))?;
            let run = best(n, min, || {
                s.submit(&t).map_err(shim_err("submit"))?;
                s.synchronize(Duration::from_secs(60))
                    .map_err(shim_err("synchronize"))
            })?;
            let want = if how == Move::Copy { 9u8 } else { 0x5a };
            let mut last = [0u8; 4];
            b.read(bytes - 4, &mut last).map_err(shim_err("read"))?;
            if last != [want; 4] {
                return Err(Fail::Error(format!(
                    "{how:?} left {last:?} at the end, not {want}"
                )));
            }
            Ok(run)
        }
    }
}

/// FLOP/s (2·n³ per call) of an `n`×`n`×`n` f32 GEMM: on the device (`Some`) or directly on
/// host slices through `davinci-kernels` (`None`, one thread), the best of repeated calls;
/// checked against a known result.
///
/// # Errors
/// A shim error, or a wrong product.
pub fn gemm_rate(dev: Option<&Device>, n: usize, min: Duration) -> Result<ThroughputRun, Fail> {
    let flops = 2 * (n as u64).pow(3);
    // A: every element 0.5; B: 2.0: every element of C is n.
    let (ha, hb) = (vec![0.5f32; n * n], vec![2.0f32; n * n]);
    let want = n as f32;
    match dev {
        None => {
            let mut c = vec![0f32; n * n];
            let p = GemmParams {
                m: n,
                n,
                k: n,
                batch: 1,
                a: GemmInput {
                    ld: n,
                    batch_stride: 0,
                    trans: false,
                },
                b: GemmInput {
                    ld: n,
                    batch_stride: 0,
                    trans: false,
                },
                c: GemmOutput {
                    ld: n,
                    batch_stride: 0,
                },
                alpha: 1.0,
                beta: 0.0,
            };
            let run = best(flops, min, || {
                gemm(
                    &p,
                    Slice::F32(&ha),
                    Slice::F32(&hb),
                    SliceMut::F32(&mut c),
                    0..n,
                )
                .map_err(|e| Fail::Error(format!("reference GEMM: {e}")))
            })?;
            if c[n * n - 1] != want {
                return Err(Fail::Error(format!(
                    "reference GEMM gave {}, not {want}",
                    c[n * n - 1]
                )));
            }
            Ok(run)
        }
        Some(dev) => {
            let bytes = n * n * 4;
            let (a, b, c) = (
                dev.alloc(bytes).map_err(shim_err("alloc"))?,
                dev.alloc(bytes).map_err(shim_err("alloc"))?,
                dev.alloc(bytes).map_err(shim_err("alloc"))?,
            );
            a.write_slice(0, &ha).map_err(shim_err("write"))?;
            b.write_slice(0, &hb).map_err(shim_err("write"))?;
            let nn = n as u64;
            let m = |x| Matrix::new(x, Dtype::F32, nn, nn);
            let t = task::gemm(m(&a), m(&b), m(&c), 1.0, 0.0).map_err(shim_err("task::gemm"))?;
            let mut s = dev
                .create_context()
                .and_then(|c| c.create_stream())
                .map_err(shim_err("stream"))?;
            let run = best(flops, min, || {
                s.submit(&t).map_err(shim_err("submit"))?;
                s.synchronize(Duration::from_secs(60))
                    .map_err(shim_err("synchronize"))
            })?;
            let got = c.read_vec::<f32>(bytes - 4, 1).map_err(shim_err("read"))?;
            if got != [want] {
                return Err(Fail::Error(format!(
                    "the device's GEMM gave {got:?}, not {want}"
                )));
            }
            Ok(run)
        }
    }
}
