//! The CUDA/ACL usage patterns of the conformance suite (`tests/tests/conformance/patterns.rs`,
//! docs/runtimes.md "Porting from CUDA/ACL"), timed: the tests only say that each finishes,
//! with the right results; these rows say how long it takes, against a bound. Each runs on
//! default rings, on the run's device, and checks its results like the test does.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_shim::{task, Device, DeviceMem, Region, Stream, Task, TaskDesc};

use crate::measure::{Fail, ThroughputRun};

/// Which pattern a row times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// 2,048 steps of: a FILL and a record on a side stream nobody synchronizes or polls, a
    /// wait for the record, a COPY and a synchronize on the main stream.
    SideStream,
    /// 100,000 tasks (NOPs, a FILL every 1,000) in one `submit_batch`, then another stream
    /// waits for the burst's record and synchronizes.
    Burst,
    /// 100,000 rounds over four streams: each waits for the previous stream's record, adds 1
    /// to one word and records its own event; one wait for the last record.
    PingPong,
}

impl Pattern {
    /// Steps (side stream), tasks (burst) or rounds (ping-pong) per run.
    pub const fn steps(self) -> u64 {
        match self {
            Pattern::SideStream => 2048,
            Pattern::Burst | Pattern::PingPong => 100_000,
        }
    }
}

const T: Duration = Duration::from_secs(60);

fn err(what: &str) -> impl Fn(davinci_shim::Error) -> Fail + '_ {
    move |e| Fail::Error(format!("{what}: {e}"))
}

/// Runs `p` once on `dev`; the steps it made and the time they took (setup excluded).
///
/// # Errors
/// A device error, or a result that is not what the pattern computes.
pub fn run(dev: &Device, p: Pattern) -> Result<ThroughputRun, Fail> {
    let ctx = dev.create_context().map_err(err("CREATE_CONTEXT"))?;
    let stream = || ctx.create_stream().map_err(err("CREATE_STREAM"));
    let steps = p.steps();
    let t0;
    match p {
        Pattern::SideStream => {
            let (mut side, mut main) = (stream()?, stream()?);
            let ev = ctx.create_event().map_err(err("CREATE_EVENT"))?;
            let src = dev.alloc(4).map_err(err("alloc"))?;
            let out = dev.alloc(4 * steps as usize).map_err(err("alloc"))?;
            t0 = Instant::now();
            for i in 0..steps as usize {
                let word = Region::range(&out, i * 4..i * 4 + 4).map_err(err("region"))?;
                side.submit(&task::fill(&src, i as u32).map_err(err("fill"))?)
                    .map_err(err("submit"))?;
                let r = ev.record(&mut side).map_err(err("record"))?;
                main.wait_recorded(&r).map_err(err("wait"))?;
                main.submit(&task::copy(word, &src).map_err(err("copy"))?)
                    .map_err(err("submit"))?;
                main.synchronize(T).map_err(err("synchronize"))?;
            }
            let got = out
                .read_vec::<u32>(0, steps as usize)
                .map_err(err("read"))?;
            if got.iter().enumerate().any(|(i, &v)| v != i as u32) {
                return Err(Fail::Error("a step copied another step's fill".into()));
            }
        }
        Pattern::Burst => {
            let (at, out) = (
                dev.alloc(4).map_err(err("alloc"))?,
                dev.alloc(4).map_err(err("alloc"))?,
            );
            let ev = ctx.create_event().map_err(err("CREATE_EVENT"))?;
            let tasks: Vec<Task> = (0..steps as u32)
                .map(|i| match i % 1000 {
                    999 => task::fill(&at, i),
                    _ => Ok(task::nop()),
                })
                .collect::<Result<_, _>>()
                .map_err(err("fill"))?;
            let mut burst = stream()?;
            let mut after = stream()?;
            t0 = Instant::now();
            burst.submit_batch(&tasks).map_err(err("submit_batch"))?;
            let r = ev.record(&mut burst).map_err(err("record"))?;
            let wait = TaskDesc::event_wait(0, ev.handle(), r.value());
            after
                .submit(&Task::from_desc(wait).map_err(err("wait"))?)
                .map_err(err("submit"))?;
            after
                .submit(&task::copy(&out, &at).map_err(err("copy"))?)
                .map_err(err("submit"))?;
            after.synchronize(T).map_err(err("synchronize"))?;
            let last = (steps - 1) as u32;
            if out.read_vec::<u32>(0, 1).map_err(err("read"))? != [last] {
                return Err(Fail::Error(
                    "the burst's last FILL is not what came after".into(),
                ));
            }
        }
        Pattern::PingPong => {
            let mut streams: Vec<Stream> = (0..4).map(|_| stream()).collect::<Result<_, _>>()?;
            let events = (0..4)
                .map(|_| ctx.create_event())
                .collect::<Result<Vec<_>, _>>()
                .map_err(err("CREATE_EVENT"))?;
            let (counter, one) = (
                dev.alloc(4).map_err(err("alloc"))?,
                dev.alloc(4).map_err(err("alloc"))?,
            );
            one.write_slice(0, &[1u32]).map_err(err("write"))?;
            let add = task::add::<u32>(&counter, &counter, &one).map_err(err("add"))?;
            t0 = Instant::now();
            let mut last = None;
            for r in 0..steps as usize {
                let s = &mut streams[r % 4];
                if let Some(prev) = &last {
                    s.wait_recorded(prev).map_err(err("wait"))?;
                }
                s.submit(&add).map_err(err("submit"))?;
                last = Some(events[r % 4].record(s).map_err(err("record"))?);
            }
            if let Some(l) = &last {
                l.synchronize(T).map_err(err("synchronize"))?;
            }
            if counter.read_vec::<u32>(0, 1).map_err(err("read"))? != [steps as u32] {
                return Err(Fail::Error(
                    "the rounds did not run once each, in order".into(),
                ));
            }
        }
    }
    Ok(ThroughputRun {
        tasks: steps,
        elapsed: t0.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pattern_finishes_with_its_results() {
        let dev = Device::embedded().unwrap();
        for p in [Pattern::SideStream, Pattern::Burst, Pattern::PingPong] {
            let r = run(&dev, p).unwrap_or_else(|e| panic!("{p:?}: {e:?}"));
            assert_eq!(r.tasks, p.steps());
        }
    }
}
