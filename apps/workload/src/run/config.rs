//! What a run is to do: [`WorkloadConfig`] (the options of `davinci-workload`), the plan it
//! implies (rounds, tasks, streams) and the device memory it needs ([`MemoryNeed`]).
#![forbid(unsafe_code)]

use std::time::Duration;

use davinci_shim::{Errno, Error, Result};

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadConfig {
    /// Tasks of the throughput phase (rounded up to whole rounds).
    pub tasks: u64,
    /// Streams (all in one context).
    pub streams: usize,
    /// Descriptors per `submit_batch` call.
    pub batch: usize,
    /// Elements per vector.
    pub elements: usize,
    /// Vector jobs per stream per round.
    pub slots: usize,
    /// Single-task round trips of the latency phase.
    pub latency_samples: usize,
    /// Longest a synchronize or a round trip may take before the run fails.
    pub timeout: Duration,
    /// Seed of the input data.
    pub seed: u64,
}

/// Bytes per pool chunk (one ALLOC_MEMORY each) the workload's buffers are carved from.
pub(super) const POOL_CHUNK: u64 = 4 << 20;
/// The pool's block alignment.
pub(super) const POOL_ALIGN: u64 = 64;
/// The pool rounds a chunk to this before it asks the device.
const POOL_PAGE: u64 = 4096;

/// The device memory a [`WorkloadConfig`] needs ([`WorkloadConfig::memory_needed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryNeed {
    /// Device buffers: `streams * (5 * slots + 1)` (A, B, C, F, D per slot, one X per
    /// stream).
    pub buffers: u64,
    /// Bytes of each buffer (`4 * elements`).
    pub buffer_bytes: u64,
    /// ALLOC_MEMORY calls: the pool chunks the buffers are carved from.
    pub allocations: u64,
    /// Bytes of each allocation as the pool asks for it.
    pub allocation_bytes: u64,
    /// Bytes the pool reserves in all (`allocations * allocation_bytes`).
    pub pool_bytes: u64,
    /// Bytes of device memory that takes, each allocation rounded to the device's alignment.
    pub device_bytes: u64,
}

fn round_to(n: u64, align: u64) -> Option<u64> {
    n.checked_next_multiple_of(align.max(1))
}

impl WorkloadConfig {
    /// Tasks per round: `streams * (3 * slots + 3)`.
    pub fn tasks_per_round(&self) -> u64 {
        (self.streams as u64).saturating_mul((self.slots as u64).saturating_mul(3) + 3)
    }

    /// Rounds the throughput phase runs: `tasks` rounded up to whole rounds (at least one).
    pub fn rounds(&self) -> u64 {
        self.tasks.div_ceil(self.tasks_per_round().max(1)).max(1)
    }

    /// Tasks the throughput phase runs: [`rounds`](Self::rounds) `*`
    /// [`tasks_per_round`](Self::tasks_per_round) (the `tasks` of a complete run's
    /// [`Report`](super::Report)).
    pub fn planned_tasks(&self) -> u64 {
        self.rounds().saturating_mul(self.tasks_per_round())
    }

    /// Streams the run creates: `streams`, plus one for the latency phase unless
    /// `latency_samples` is 0.
    pub fn streams_needed(&self) -> u64 {
        self.streams as u64 + u64::from(self.latency_samples > 0)
    }

    /// The device memory the run allocates on a device whose allocations are rounded to
    /// `mem_align` bytes (GET_INFO's `mem_align`); `None` if the sizes overflow.
    pub fn memory_needed(&self, mem_align: u64) -> Option<MemoryNeed> {
        let buffers = (self.streams as u64).checked_mul((self.slots as u64).checked_mul(5)? + 1)?;
        let buffer_bytes = (self.elements as u64).checked_mul(4)?;
        let block = round_to(buffer_bytes.max(1), POOL_ALIGN)?;
        let (allocations, allocation_bytes) = if block <= POOL_CHUNK {
            (buffers.div_ceil(POOL_CHUNK / block), POOL_CHUNK)
        } else {
            (buffers, round_to(block, POOL_PAGE)?)
        };
        // The run's host copies of A and B must fit the address space too.
        usize::try_from(buffer_bytes.checked_mul(buffers)?).ok()?;
        Some(MemoryNeed {
            buffers,
            buffer_bytes,
            allocations,
            allocation_bytes,
            pool_bytes: allocations.checked_mul(allocation_bytes)?,
            device_bytes: allocations.checked_mul(round_to(allocation_bytes, mem_align)?)?,
        })
    }

    /// Whether the run can start: every count at least 1 (`latency_samples` may be 0: no
    /// latency phase), a timeout, and sizes that do not overflow. The message names the
    /// `davinci-workload` option to change (`--streams` for `streams`).
    ///
    /// # Errors
    /// `EINVAL` (op `"workload"`) saying which value to change.
    pub fn check(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::new(Errno::EINVAL, "workload", msg));
        for (option, value, what) in [
            ("--streams", self.streams as u64, "streams"),
            (
                "--slots",
                self.slots as u64,
                "vector jobs per stream per round",
            ),
            ("--elements", self.elements as u64, "elements per vector"),
            ("--batch", self.batch as u64, "descriptors per submit call"),
        ] {
            if value == 0 {
                return bad(format!("{option} 0: give at least 1 ({what})"));
            }
        }
        if self.tasks == 0 {
            return bad(format!(
                "--tasks 0: give at least 1 (the throughput phase runs whole rounds of {} tasks \
                 with these --streams and --slots)",
                self.tasks_per_round()
            ));
        }
        if self.timeout.is_zero() {
            return bad(
                "--timeout-secs 0 would fail every synchronize at once: give at least 1 \
                        (seconds)"
                    .into(),
            );
        }
        if self.memory_needed(1).is_none() {
            return bad(format!(
                "--streams {} x --slots {} x --elements {}: the buffers' total size overflows; \
                 use smaller values",
                self.streams, self.slots, self.elements
            ));
        }
        Ok(())
    }
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            tasks: 200_000,
            streams: 4,
            batch: 32,
            elements: 256,
            slots: 64,
            latency_samples: 2_000,
            timeout: Duration::from_secs(30),
            seed: 0x5eed,
        }
    }
}
