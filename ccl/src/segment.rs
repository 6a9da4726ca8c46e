//! A communicator's shared segment: a file in `/dev/shm` named by the unique id, mapped by
//! every rank (through `davinci-shm`, the tree's one home for shared mappings): a header
//! (who joined, the barrier's words, an abort flag) and one staging slot per rank, which its
//! rank writes and every rank reads between barriers.

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use davinci_shim::{Errno, Error, Result};
use davinci_shm::{futex_wait, futex_wake, SharedMapping};

/// Bytes before the first slot.
const HEADER: usize = 4096;
const MAGIC: u32 = 0xdcc1_0002;
// Header words.
const W_MAGIC: u64 = 0;
const W_NRANKS: u64 = 4;
const W_SLOT_KIB: u64 = 8;
const W_JOINED: u64 = 12;
const W_ARRIVED: u64 = 16;
const W_GENERATION: u64 = 20;
const W_ABORTED: u64 = 24;
/// One word per rank from here: the process id of the rank once it joined.
const W_RANKS: u64 = 64;
/// Each rank's outbox (point-to-point), `OUTBOX_STRIDE` bytes per rank from here: its slot
/// holds a chunk for `dest` while `posted` is ahead of `taken`.
const W_OUTBOX: u64 = 512;
const OUTBOX_STRIDE: u64 = 32;

const _: () = assert!(
    W_RANKS + 4 * MAX_RANKS as u64 <= W_OUTBOX
        && W_OUTBOX + OUTBOX_STRIDE * MAX_RANKS as u64 <= HEADER as u64
);

/// A word of a rank's outbox (`Segment::outbox`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outbox {
    /// Chunks the rank posted (counts up).
    Posted = 0,
    /// Chunks its receivers took (counts up to `Posted`).
    Taken = 4,
    /// The rank the posted chunk is for.
    Dest = 8,
    /// The posted chunk's bytes.
    Len = 12,
    /// The whole message's bytes (what the receiver checks its count against).
    Total = 16,
    /// The rank's doorbell: bumped by whoever changes what it waits for.
    Bell = 20,
}

/// Most ranks in one communicator.
pub const MAX_RANKS: usize = 64;

pub(crate) struct Segment {
    map: SharedMapping,
    path: PathBuf,
    nranks: usize,
    slot: usize,
    timeout: Duration,
    _file: File,
}

fn fail(errno: Errno, op: &'static str, msg: String) -> Error {
    Error::new(errno, op, msg)
}

/// Where segments live: `/dev/shm` (memory), else the temporary directory.
fn dir() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

impl Segment {
    /// Joins (creating it if this rank is the first) the segment of unique id `name` as
    /// `rank` of `nranks`, with slots of `slot` bytes; waits up to `timeout` for every rank.
    pub(crate) fn join(
        name: &str,
        nranks: usize,
        rank: usize,
        slot: usize,
        timeout: Duration,
    ) -> Result<Segment> {
        const OP: &str = "ccl init";
        if nranks == 0 || nranks > MAX_RANKS || rank >= nranks {
            return Err(fail(
                Errno::EINVAL,
                OP,
                format!("rank {rank} of {nranks}: ranks are 0..nranks, nranks 1 to {MAX_RANKS}"),
            ));
        }
        let path = dir().join(format!("davinci-ccl-{name}"));
        let io = |what: &str, e: std::io::Error| {
            let errno = e
                .raw_os_error()
                .and_then(Errno::from_code)
                .unwrap_or(Errno::EIO);
            fail(errno, OP, format!("{what} {}: {e}", path.display()))
        };
        // The ranks' own user only (the staging slots hold their data), never through a
        // symlink, and a file someone else made under the name is refused.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
            .map_err(|e| io("cannot open the communicator's segment", e))?;
        let meta = file
            .metadata()
            .map_err(|e| io("cannot stat the communicator's segment", e))?;
        if meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o077 != 0 {
            return Err(fail(
                Errno::EPERM,
                OP,
                format!(
                    "{} belongs to another user or is open to others: not this \
                     communicator's segment",
                    path.display()
                ),
            ));
        }
        let len = HEADER + nranks * slot;
        // Every rank sets the same length: whoever comes first makes it, the rest find it.
        file.set_len(len as u64)
            .map_err(|e| io("cannot size the communicator's segment", e))?;
        let map = SharedMapping::map(file.as_fd(), 0, len)
            .map_err(|e| io("cannot map the communicator's segment", e))?;
        let seg = Segment {
            map,
            path,
            nranks,
            slot,
            timeout,
            _file: file,
        };
        let claim = |w: u64, v: u32| {
            let word = seg.word(w);
            match word.compare_exchange(0, v, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => Ok(()),
                Err(found) if found == v => Ok(()),
                Err(found) => Err(found),
            }
        };
        claim(W_MAGIC, MAGIC).map_err(|_| {
            fail(
                Errno::EINVAL,
                OP,
                "the unique id names something else (not a communicator)".into(),
            )
        })?;
        claim(W_NRANKS, nranks as u32).map_err(|n| {
            fail(
                Errno::EINVAL,
                OP,
                format!("the unique id's communicator has {n} ranks, this rank says {nranks}"),
            )
        })?;
        claim(W_SLOT_KIB, (slot >> 10) as u32).map_err(|_| {
            fail(
                Errno::EINVAL,
                OP,
                "the ranks disagree on the slot size".into(),
            )
        })?;
        if seg
            .word(W_RANKS + 4 * rank as u64)
            .swap(std::process::id().max(1), Ordering::AcqRel)
            != 0
        {
            return Err(fail(
                Errno::EBUSY,
                OP,
                format!("rank {rank} joined this communicator already (each rank once)"),
            ));
        }
        seg.word(W_JOINED).fetch_add(1, Ordering::AcqRel);
        let joined = seg.barrier();
        // Everyone is in (or it failed): nobody needs the name any more.
        let _ = std::fs::remove_file(&seg.path);
        joined.map(|()| seg)
    }

    fn word(&self, offset: u64) -> &AtomicU32 {
        // The header's words are 4-byte aligned and inside the mapping, always.
        match self.map.word(offset) {
            Ok(w) => w,
            Err(_) => unreachable!("header word {offset} outside the segment"),
        }
    }

    /// Whether every rank joined from this process (after the join barrier, every rank
    /// reads the same words and so decides alike; a process of another pid namespace with
    /// the same id only makes the direct path find buffers missing, and every rank then
    /// falls back together).
    pub(crate) fn one_process(&self) -> bool {
        let me = std::process::id().max(1);
        (0..self.nranks).all(|r| self.word(W_RANKS + 4 * r as u64).load(Ordering::Acquire) == me)
    }

    /// Word `w` of `rank`'s outbox.
    pub(crate) fn outbox(&self, rank: usize, w: Outbox) -> &AtomicU32 {
        self.word(W_OUTBOX + OUTBOX_STRIDE * rank as u64 + w as u64)
    }

    /// Rings `rank`'s doorbell (it re-checks what it waits for).
    pub(crate) fn ring(&self, rank: usize) {
        let bell = self.outbox(rank, Outbox::Bell);
        bell.fetch_add(1, Ordering::Release);
        futex_wake(bell);
    }

    /// Whether a rank aborted the communicator.
    pub(crate) fn aborted(&self) -> bool {
        self.word(W_ABORTED).load(Ordering::Acquire) != 0
    }

    /// Aborts the communicator: every rank's waits end with `ECANCELED`.
    pub(crate) fn abort(&self) {
        self.word(W_ABORTED).store(1, Ordering::Release);
        futex_wake(self.word(W_GENERATION));
        for r in 0..self.nranks {
            self.ring(r);
        }
    }

    /// The timeout of every wait.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Bytes of a slot.
    pub(crate) fn slot(&self) -> usize {
        self.slot
    }

    /// The mapping, for copies straight between it and a buffer's host view.
    pub(crate) fn map(&self) -> &SharedMapping {
        &self.map
    }

    /// Where byte `offset` of `rank`'s slot is in the mapping.
    pub(crate) fn at(&self, rank: usize, offset: usize) -> u64 {
        debug_assert!(offset <= self.slot);
        (HEADER + rank * self.slot + offset) as u64
    }

    /// Writes `data` into `rank`'s slot at `offset`.
    pub(crate) fn write(&self, rank: usize, offset: usize, data: &[u8]) {
        debug_assert!(offset + data.len() <= self.slot);
        let at = self.at(rank, offset);
        // In bounds by construction (callers stay inside a slot).
        let _ = self.map.write(at, data);
    }

    /// Reads `out.len()` bytes of `rank`'s slot at `offset`.
    pub(crate) fn read(&self, rank: usize, offset: usize, out: &mut [u8]) {
        debug_assert!(offset + out.len() <= self.slot);
        let at = self.at(rank, offset);
        let _ = self.map.read(at, out);
    }

    /// Waits until every rank arrived here. `ETIMEDOUT` (and the communicator aborted for
    /// all) if one does not within the timeout: a rank died, or called another collective.
    pub(crate) fn barrier(&self) -> Result<()> {
        const OP: &str = "ccl barrier";
        let (arrived, gen) = (self.word(W_ARRIVED), self.word(W_GENERATION));
        let g = gen.load(Ordering::Acquire);
        if arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.nranks as u32 {
            arrived.store(0, Ordering::Relaxed);
            gen.store(g.wrapping_add(1), Ordering::Release);
            futex_wake(gen);
            return Ok(());
        }
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if gen.load(Ordering::Acquire) != g {
                return Ok(());
            }
            if self.word(W_ABORTED).load(Ordering::Acquire) != 0 {
                return Err(fail(
                    Errno::ECANCELED,
                    OP,
                    "the communicator was aborted (a rank timed out waiting for the others)".into(),
                ));
            }
            let waited = start.elapsed();
            if waited >= self.timeout {
                self.word(W_ABORTED).store(1, Ordering::Release);
                futex_wake(gen);
                let joined = self.word(W_JOINED).load(Ordering::Acquire);
                return Err(fail(
                    Errno::ETIMEDOUT,
                    OP,
                    format!(
                        "waited {:?} for the other ranks ({joined} of {} joined): a rank died, \
                         or called another collective",
                        self.timeout, self.nranks
                    ),
                ));
            }
            if spins < 64 {
                spins += 1;
                std::thread::yield_now();
            } else {
                futex_wait(
                    gen,
                    g,
                    (self.timeout - waited).min(Duration::from_millis(100)),
                );
            }
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // Normally gone after init; a failed init may leave it.
        let _ = std::fs::remove_file(&self.path);
    }
}
