//! The chaos device (issue 42, item 2): `davinci-pcidev --chaos SEED[,RATE]` answers a fraction
//! `RATE` of admin requests wrongly, on purpose, so that the guest's module can be shown to
//! survive a hostile device: a wrong reply makes calls fail (or loses the device), never the
//! kernel.
//!
//! Each answered request draws from a PRNG seeded with `SEED` (`fastrand`'s wyrand, which is a
//! pure function of the seed): with probability `RATE` one mutation [`Class`] is picked among
//! those that apply to the request's kind and applied to the encoded completion, or scheduled
//! for the end of the device's pass (interrupt floods, notification words, the heartbeat,
//! BAR2's header). The same seed and the same sequence of requests give the same mutations
//! ([`Chaos::on_reply`] is a function of its state and its input); under a real guest the
//! sequence depends on timing, so a failing run is reproduced from its seed *and* the log: every
//! mutation is logged with the request's number, kind and what was changed (the first
//! [`LOG_FULL`] in full, then one in [`LOG_EVERY`]), with a count per class every
//! [`SUMMARY_EVERY`] requests and at exit.
//!
//! Nothing here may panic on anything the guest sends: every offset is checked, every range is
//! drawn through [`Chaos::pick`], which tolerates empty ranges.
#![forbid(unsafe_code)]

mod class;
mod mutate;

pub use class::Class;
use mutate::{get_u32, get_u64};

use std::collections::BTreeMap;
use std::time::Instant;

use davinci_hwif::admin::{ADMIN_ENTRY_SIZE, ARG_CAPACITY, ARG_OFFSET};
use davinci_hwif::layout::Bar2Layout;
use davinci_hwif::AdminKind;
use davinci_uapi::DRIVER_CMD_LIST_CLIENTS;

/// Mutations logged in full before the log thins out.
pub const LOG_FULL: u64 = 300;
/// After [`LOG_FULL`], one mutation in this many is logged.
pub const LOG_EVERY: u64 = 50;
/// A summary line every this many requests answered.
pub const SUMMARY_EVERY: u64 = 2000;
/// The default fraction of replies mutated.
pub const DEFAULT_RATE: f64 = 0.05;

const REVOKE_OFFSET: usize = ARG_OFFSET + ARG_CAPACITY;
const REVOKE_SIZE: usize = 24;

/// `--chaos SEED[,RATE]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChaosConfig {
    /// The PRNG's seed.
    pub seed: u64,
    /// The fraction of replies mutated, 0 to 1.
    pub rate: f64,
    /// The classes drawn: bit `i` for [`Class::ALL`]`[i]` (all of them by default; a run
    /// aimed at one path names its classes).
    pub classes: u64,
}

/// Every class's bit.
pub const ALL_CLASSES: u64 = (1 << Class::ALL.len()) - 1;

impl ChaosConfig {
    /// Parses `SEED[,RATE[,CLASS+CLASS...]]` (SEED decimal or 0x-hex; RATE a fraction in
    /// 0..=1; the classes by their log names, all by default).
    ///
    /// # Errors
    /// What is wrong.
    pub fn parse(s: &str) -> Result<ChaosConfig, String> {
        let mut parts = s.splitn(3, ',');
        let seed = parts.next().unwrap_or("");
        let (rate, names) = (parts.next(), parts.next());
        let mut classes = ALL_CLASSES;
        if let Some(names) = names {
            classes = 0;
            for n in names.split('+') {
                let i = Class::ALL
                    .iter()
                    .position(|c| c.name() == n.trim())
                    .ok_or_else(|| format!("--chaos '{s}': no class '{n}' (see the log names)"))?;
                classes |= 1 << i;
            }
        }
        let seed = seed.trim();
        let seed = match seed.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => seed.parse(),
        }
        .map_err(|_| format!("--chaos '{s}': SEED must be a number (decimal or 0x-hex)"))?;
        let rate = match rate {
            None => DEFAULT_RATE,
            Some(r) => r
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| format!("--chaos '{s}': RATE must be a fraction from 0 to 1"))?,
        };
        Ok(ChaosConfig {
            seed,
            rate,
            classes,
        })
    }
}

/// Something the device does at the end of its pass (it owns the server and BAR2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassAct {
    /// Raise `vector` `times` times.
    Flood {
        /// The vector.
        vector: u16,
        /// How many times.
        times: u32,
    },
    /// Store these `(word index, value)` into the notification words, then raise vector 1.
    Notify(Vec<(u32, u32)>),
    /// Add 1 to every notification word, then raise vector 1.
    NotifyBumpAll,
    /// Subtract this from the heartbeat word.
    HeartbeatRewind(u32),
    /// Write these `(offset, byte)` into BAR2's header (the device restores the header after
    /// [`Chaos::header_restore_due`]).
    HeaderGarbage(Vec<(u64, u8)>),
    /// Push this completion with no request behind it, then raise vector 0.
    Unsolicited(Box<[u8; ADMIN_ENTRY_SIZE]>),
}

/// Extra completions around a mutated one.
#[derive(Debug, Default)]
pub struct Extra {
    /// Pushed before the request's completion.
    pub before: Option<Box<[u8; ADMIN_ENTRY_SIZE]>>,
    /// Pushed after it.
    pub after: Option<Box<[u8; ADMIN_ENTRY_SIZE]>>,
}

/// The chaos layer's state.
pub struct Chaos {
    config: ChaosConfig,
    rng: fastrand::Rng,
    layout: Bar2Layout,
    /// Requests answered.
    requests: u64,
    /// Mutations made.
    mutations: u64,
    counts: BTreeMap<Class, u64>,
    /// Recent tags (for stale completions).
    tags: [u64; 8],
    /// Client ids seen in completions (for wrong ones).
    clients: [u32; 8],
    pending: Vec<PassAct>,
    stall_until: Option<Instant>,
    restore_header_at: Option<Instant>,
    logged: u64,
}

/// The admin kind a request is, for [`Chaos::on_reply`].
pub fn kind_of(op: &davinci_hwif::AdminOp) -> (AdminKind, u32) {
    use davinci_hwif::AdminOp;
    match op {
        AdminOp::Open(_) => (AdminKind::Open, 0),
        AdminOp::Close => (AdminKind::Close, 0),
        AdminOp::Ioctl { request, .. } => (AdminKind::Ioctl, *request),
        AdminOp::MmapTarget { .. } => (AdminKind::MmapTarget, 0),
        AdminOp::WaitAgain { .. } => (AdminKind::WaitAgain, 0),
        AdminOp::Undo { request, .. } => (AdminKind::Undo, *request),
        AdminOp::Inject { .. } => (AdminKind::Inject, 0),
    }
}

fn kind_name(kind: Option<AdminKind>) -> &'static str {
    match kind {
        Some(AdminKind::Open) => "OPEN",
        Some(AdminKind::Close) => "CLOSE",
        Some(AdminKind::Ioctl) => "IOCTL",
        Some(AdminKind::MmapTarget) => "MMAP_TARGET",
        Some(AdminKind::WaitAgain) => "WAIT_AGAIN",
        Some(AdminKind::Undo) => "UNDO",
        Some(AdminKind::Inject) => "INJECT",
        None => "malformed",
    }
}

impl Chaos {
    /// A chaos layer for a BAR2 of `layout`.
    pub fn new(config: ChaosConfig, layout: Bar2Layout) -> Chaos {
        Chaos {
            config,
            rng: fastrand::Rng::with_seed(config.seed),
            layout,
            requests: 0,
            mutations: 0,
            counts: BTreeMap::new(),
            tags: [0; 8],
            clients: [0; 8],
            pending: Vec::new(),
            stall_until: None,
            restore_header_at: None,
            logged: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> ChaosConfig {
        self.config
    }

    /// A number in `lo..=hi` (`lo` when the range is empty).
    fn pick(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            self.rng.u64(lo..=hi)
        }
    }

    fn pick_usize(&mut self, lo: usize, hi: usize) -> usize {
        self.pick(lo as u64, hi as u64) as usize
    }

    fn one_of<T: Copy>(&mut self, xs: &[T]) -> Option<T> {
        if xs.is_empty() {
            None
        } else {
            xs.get(self.rng.usize(..xs.len())).copied()
        }
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// Mutations made so far, per class.
    pub fn counts(&self) -> &BTreeMap<Class, u64> {
        &self.counts
    }

    /// The classes that apply to a request of `kind` (`None`: malformed).
    pub fn classes_for(kind: Option<AdminKind>, request: u32, mask: u64) -> Vec<Class> {
        let mut v: Vec<Class> = Class::ANY.to_vec();
        if kind == Some(AdminKind::MmapTarget) {
            v.extend_from_slice(&Class::MMAP);
            // Its reply is what the fault path sizes PTEs from: weigh it up.
            v.extend_from_slice(&Class::MMAP);
        }
        if kind == Some(AdminKind::Ioctl) && request == DRIVER_CMD_LIST_CLIENTS {
            v.push(Class::ListCount);
            v.push(Class::ListCount);
        }
        v.push(Class::Unsolicited);
        v.retain(|c| {
            Class::ALL
                .iter()
                .position(|x| x == c)
                .is_some_and(|i| mask & (1 << i) != 0)
        });
        v
    }

    /// Called for every completion the device is about to post: draws whether to mutate it
    /// (the rate) and, if so, mutates `slot` in place and/or returns extra completions; a
    /// pass-level mutation is queued for [`take_pass_acts`](Self::take_pass_acts).
    pub fn on_reply(
        &mut self,
        kind: Option<AdminKind>,
        request: u32,
        slot: &mut [u8; ADMIN_ENTRY_SIZE],
    ) -> Extra {
        self.requests += 1;
        let tag = get_u64(slot, 0);
        let client = get_u32(slot, 16);
        let i = (self.requests % 8) as usize;
        if let Some(t) = self.tags.get_mut(i) {
            *t = tag;
        }
        if client != 0 {
            if let Some(c) = self.clients.get_mut(i) {
                *c = client;
            }
        }
        let mut extra = Extra::default();
        if self.rng.f64() < self.config.rate {
            let classes = Self::classes_for(kind, request, self.config.classes);
            if let Some(class) = self.one_of(&classes) {
                let what = self.apply(class, kind, slot, &mut extra);
                self.note(class, kind, request, tag, &what);
            }
        }
        if self.requests.is_multiple_of(SUMMARY_EVERY) {
            eprintln!("{}", self.summary());
        }
        extra
    }

    fn note(&mut self, class: Class, kind: Option<AdminKind>, request: u32, tag: u64, what: &str) {
        self.mutations += 1;
        *self.counts.entry(class).or_insert(0) += 1;
        let n = self.mutations;
        if n <= LOG_FULL || n.is_multiple_of(LOG_EVERY) {
            self.logged += 1;
            let req = if request != 0 {
                format!(" {request:#010x}")
            } else {
                String::new()
            };
            eprintln!(
                "davinci-pcidev: chaos seed {} mutation {n} at request {} ({}{req}, tag {tag}): {class}: {what}",
                self.config.seed,
                self.requests,
                kind_name(kind),
            );
            if n == LOG_FULL {
                eprintln!(
                    "davinci-pcidev: chaos: {LOG_FULL} mutations logged; from now on one in {LOG_EVERY} (counts every {SUMMARY_EVERY} requests and at exit)"
                );
            }
        }
    }

    /// The pass-level mutations due now (taken).
    pub fn take_pass_acts(&mut self) -> Vec<PassAct> {
        std::mem::take(&mut self.pending)
    }

    /// Whether the heartbeat stands still now.
    pub fn heartbeat_stalled(&mut self, now: Instant) -> bool {
        match self.stall_until {
            Some(u) if now < u => true,
            Some(_) => {
                self.stall_until = None;
                false
            }
            None => false,
        }
    }

    /// Whether BAR2's header garbage is due to be restored now (once).
    pub fn header_restore_due(&mut self, now: Instant) -> bool {
        match self.restore_header_at {
            Some(u) if now >= u => {
                self.restore_header_at = None;
                true
            }
            _ => false,
        }
    }

    /// A line with the counts so far.
    pub fn summary(&self) -> String {
        let per: Vec<String> = self
            .counts
            .iter()
            .map(|(c, n)| format!("{c}={n}"))
            .collect();
        format!(
            "davinci-pcidev: chaos seed {} rate {}: {} requests answered, {} mutated: {}",
            self.config.seed,
            self.config.rate,
            self.requests,
            self.mutations,
            if per.is_empty() {
                "none".to_string()
            } else {
                per.join(" ")
            }
        )
    }
}

#[cfg(test)]
mod tests;
