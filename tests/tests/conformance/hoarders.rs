//! Hoarders (issue 41, item 6): an attacker made of several unprivileged uids, each running
//! several `davinci-attacker hoard` processes that open as many clients as they may and take
//! memory, exports, contexts, streams and events until refused, then hold it all. Two of
//! its tenants are containers (cgroups named as docker names them), each of two uids, where
//! the test can make cgroups (the daemon, on a host with a cgroup hierarchy root may write
//! to; the kernel guest, which mounts cgroup2): the kernel module reads the opener's cgroup,
//! the daemon `/proc/<pid>/cgroup`. Every attacker tenant must be held to exactly its share
//! (LIST_CLIENTS through an admin's control open, summed per tenant and per uid), and
//! another unprivileged tenant (`davinci-attacker victim`), a user and then a container,
//! must still open, create one of every object, allocate its whole memory share; its NOP round trips and control calls are timed and printed against
//! issue 41's targets (p99 ≤ 5 ms and ≤ 50 ms), not asserted: speed is measured, never
//! asserted in a test (`hoarders:` lines, docs/security.md "Measured: a noisy neighbour").
//!
//! The attacker is 3 tenants: the device has 4 tenant slots (the default of the daemon and
//! the module), and each of up to 4 tenants is sure of its whole share however many opens
//! and uids the others use (docs/security.md, "Tenants"). A fourth attacker tenant would
//! take the slot the victim needs: that is what the slots are for, not a failure. The same
//! runs in-process on the embedded device with `Device::attach_as_user`.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use davinci_mock_device::MAX_CLIENT_OPENS;
use davinci_shim::{ClientUsage, Control, Device, ExportTo, MockConfig, MockDevice};
use davinci_tests::backend_name;
use davinci_tests::hoard::{take_everything, until_refused, Hoard};
use davinci_tests::mockd::{bin, Mockd};
use serde_json::Value;

use super::isolation::SharedMode;
use super::neighbours::{attack_target, state, LONG};

/// The attacker's uids (a tenant each, or two per container on the daemon) and the victim's.
const UIDS: [u32; 5] = [61_001, 61_002, 61_003, 61_004, 61_005];
pub(super) const VICTIM_UID: u32 = 61_010;
/// `hoard` processes per attacker uid, and the client opens each tries (more than a
/// tenant's 64 over its processes, so every attacker tenant is refused some).
const PROCS_PER_UID: usize = 2;
const OPENS_PER_PROC: usize = 40;
/// The NOP round trip and control-call p99 targets issue 41 states for the victim, in ms
/// (printed beside the figures).
const NOP_P99_MS: f64 = 5.0;
const CONTROL_P99_MS: f64 = 50.0;
/// How long the victim may take for all its calls.
const VICTIM_DONE: Duration = Duration::from_secs(600);

/// Held by the tests that time a victim beside attackers (this file's and neighbours.rs'), so
/// that they never run at once: their figures are about the attack, not about the other
/// test's crowd of processes on the same cores.
pub(super) static TIMING: Mutex<()> = Mutex::new(());

/// A `davinci-attacker` process run as `uid`, and its JSON-line reports.
pub(super) struct Proc {
    child: Child,
    _stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    uid: u32,
}

impl Proc {
    /// Starts `davinci-attacker MODE --device PATH --gate --opens OPENS` as `uid`:`gid`,
    /// moves it into `cgroup` (if any) while it waits at its gate, then lets it go.
    pub(super) fn start(
        mode: &str,
        opens: usize,
        path: &str,
        uid: u32,
        gid: u32,
        cgroup: Option<&Cgroup>,
    ) -> Proc {
        let opens = opens.to_string();
        let mut child = Command::new(bin("davinci-attacker"))
            .args([mode, "--device", path, "--gate", "--opens", &opens])
            .uid(uid)
            .gid(gid)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start davinci-attacker");
        if let Some(cg) = cgroup {
            std::fs::write(cg.dir.join("cgroup.procs"), child.id().to_string())
                .unwrap_or_else(|e| panic!("move {} into {}: {e}", child.id(), cg.dir.display()));
        }
        let mut stdin = child.stdin.take();
        if let Some(s) = stdin.as_mut() {
            s.write_all(b"go\n").expect("open the attacker's gate");
        }
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            }
        });
        Proc {
            child,
            _stdin: stdin,
            lines,
            uid,
        }
    }

    /// Its next report, which must be `event`.
    pub(super) fn report(&self, event: &str) -> Value {
        self.report_within(event, LONG)
    }

    /// [`report`](Self::report) with its own deadline.
    fn report_within(&self, event: &str, within: Duration) -> Value {
        let v = self
            .lines
            .recv_timeout(within)
            .unwrap_or_else(|_| panic!("uid {}: no {event:?} report within {within:?}", self.uid));
        assert_eq!(v["event"], event, "uid {}: {v}", self.uid);
        v
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A cgroup named as docker names a container's (`docker-<64 hex>.scope`): its processes
/// are that container's, one tenant whatever their uids. Removed on drop (its processes
/// gone first).
pub(super) struct Cgroup {
    dir: PathBuf,
    pub(super) id: String,
}

impl Cgroup {
    /// A new one (its id this process's and a count) in the first cgroup hierarchy that lets
    /// root make one: a v1 `pids` hierarchy (hosts with v1 cgroups), else the cgroup2 mount
    /// at `/sys/fs/cgroup` (the kernel guest mounts one). `None` if none does.
    pub(super) fn make() -> Option<Cgroup> {
        static N: AtomicU32 = AtomicU32::new(1);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let id = format!("{:08x}{n:056x}", std::process::id());
        ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
            .iter()
            .map(|base| PathBuf::from(base).join(format!("docker-{id}.scope")))
            .find(|dir| std::fs::create_dir(dir).is_ok() && dir.join("cgroup.procs").exists())
            .map(|dir| Cgroup { dir, id })
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..500 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// What one tenant (or uid) holds, summed over its clients in LIST_CLIENTS.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sum {
    pub(super) opens: u32,
    pub(super) contexts: u32,
    pub(super) streams: u32,
    pub(super) events: u32,
    pub(super) allocations: u32,
    pub(super) memory: u64,
}

impl Sum {
    fn add(&mut self, c: &ClientUsage) {
        self.opens += 1;
        self.contexts += c.contexts;
        self.streams += c.streams;
        self.events += c.events;
        self.allocations += c.allocations;
        self.memory += c.memory_bytes;
    }
}

/// The tenant a client is: its container, else its user.
pub(super) fn tenant_of(c: &ClientUsage) -> String {
    match c.container_id() {
        Some(id) if c.tenant_kind == davinci_uapi::TENANT_CONTAINER => format!("container:{id}"),
        _ => format!("user:{}", c.uid),
    }
}

/// LIST_CLIENTS summed per tenant and per uid.
pub(super) fn sums(ctl: &Control) -> (BTreeMap<String, Sum>, BTreeMap<u32, Sum>) {
    let (mut tenants, mut uids) = (BTreeMap::new(), BTreeMap::new());
    for c in ctl.clients().expect("LIST_CLIENTS") {
        tenants
            .entry(tenant_of(&c))
            .or_insert_with(Sum::default)
            .add(&c);
        uids.entry(c.uid).or_insert_with(Sum::default).add(&c);
    }
    (tenants, uids)
}

/// A tenant's share (GET_USAGE's limits of a tenant with a slot), and of client opens.
#[derive(Debug, Clone, Copy)]
pub(super) struct Share {
    pub(super) tables: Sum,
    pub(super) exports: u32,
}

impl Share {
    /// The share in a `davinci-attacker` report (`hoard`, `hold`) of a tenant with a slot
    /// (its GET_USAGE limits); the client opens' from the slots (the device's memory over a
    /// memory share).
    pub(super) fn of_report(r: &Value, ctl: &Control) -> Share {
        assert_eq!(
            r["tenant"]["slotted"], true,
            "a share from a tenant with a slot: {r}"
        );
        let memory = pair(r, "memory").1;
        let slots = (ctl.info().expect("GET_INFO").memory_size / memory.max(1)) as usize;
        Share {
            tables: Sum {
                opens: (MAX_CLIENT_OPENS / slots.max(1)) as u32,
                contexts: pair(r, "contexts").1 as u32,
                streams: pair(r, "streams").1 as u32,
                events: pair(r, "events").1 as u32,
                allocations: pair(r, "allocations").1 as u32,
                memory,
            },
            exports: pair(r, "exports").1 as u32,
        }
    }
}

/// Waits (at most [`LONG`]) until LIST_CLIENTS lists no client of `uid`: a process's opens
/// close when it dies (on the daemon, once the daemon has seen its connections end).
pub(super) fn wait_gone(ctl: &Control, uid: u32) {
    let t0 = Instant::now();
    while ctl
        .clients()
        .expect("LIST_CLIENTS")
        .iter()
        .any(|c| c.uid == uid)
    {
        assert!(
            t0.elapsed() < LONG,
            "uid {uid}'s clients outlived its processes"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Asserts that every attacker tenant holds exactly its share of every table and of the
/// opens, and its memory within a page per allocation (the hoarders' allocation size is
/// the memory share over the allocation quota, rounded down to a page), and that no uid
/// holds more than a share.
pub(super) fn assert_held_to_their_shares(
    ctl: &Control,
    attackers: &[String],
    share: &Share,
    page: u64,
) {
    let (tenants, uids) = sums(ctl);
    let s = share.tables;
    for key in attackers {
        let t = tenants
            .get(key)
            .unwrap_or_else(|| panic!("attacker tenant {key} not in LIST_CLIENTS: {tenants:?}"));
        assert_eq!(
            (t.opens, t.contexts, t.streams, t.events, t.allocations),
            (s.opens, s.contexts, s.streams, s.events, s.allocations),
            "attacker tenant {key}: opens, contexts, streams, events, allocations held, \
             against its share"
        );
        assert!(
            t.memory <= s.memory && t.memory + u64::from(t.allocations) * page >= s.memory,
            "attacker tenant {key} holds {} bytes, its share {}",
            t.memory,
            s.memory
        );
    }
    for (uid, u) in &uids {
        assert!(
            u.opens <= s.opens
                && u.contexts <= s.contexts
                && u.streams <= s.streams
                && u.events <= s.events
                && u.allocations <= s.allocations
                && u.memory <= s.memory,
            "uid {uid} holds {u:?}, over a tenant's share {s:?}"
        );
    }
}

/// Runs `davinci-attacker victim` as another unprivileged uid (group `gid`), in `cgroup` (a
/// container) if given, else as a user, beside `attacker`, and asserts that it opened as
/// that kind of tenant, got the slot kept for it, created one of every object and allocated
/// its whole memory share (within a page). Its round-trip and control-call figures are
/// printed against issue 41's targets, not asserted. Its report.
pub(super) fn victim_beside(
    attacker: &str,
    path: &str,
    gid: u32,
    cgroup: Option<&Cgroup>,
) -> Value {
    let ms = |v: &Value, k: &str| v[k][1].as_f64().unwrap_or(f64::MAX);
    let v = victim_once(attacker, path, gid, cgroup);
    let within = ms(&v, "nop_ms") <= NOP_P99_MS && ms(&v, "control_ms") <= CONTROL_P99_MS;
    eprintln!(
        "hoarders: beside {attacker}: the victim ({}) NOP p99 {:.2} ms, control p99 {:.2} ms \
         ({} issue 41's targets of {NOP_P99_MS} and {CONTROL_P99_MS} ms; printed, not \
         asserted)",
        v["tenant"].as_str().unwrap_or("?"),
        ms(&v, "nop_ms"),
        ms(&v, "control_ms"),
        if within { "within" } else { "over" }
    );
    v
}

/// One run of the victim, checked but for its figures.
fn victim_once(attacker: &str, path: &str, gid: u32, cgroup: Option<&Cgroup>) -> Value {
    let victim = Proc::start("victim", 1, path, VICTIM_UID, gid, cgroup);
    // Its 600 timed calls beside an attacker: under QEMU's emulation (the PCI device's every
    // call a round trip to the emulated device) a control call can take 300 ms.
    let v = victim.report_within("done", VICTIM_DONE);
    let kind = if cgroup.is_some() {
        "container"
    } else {
        "user"
    };
    assert_eq!(
        v["tenant"], kind,
        "beside {attacker}: the victim's tenant (GET_USAGE): {v}"
    );
    assert_eq!(
        v["slotted"], true,
        "beside {attacker}: the victim has a slot: {v}"
    );
    let page = v["page"].as_u64().unwrap_or(4096);
    let (held, limit) = (v["memory"][0].as_u64(), v["memory"][1].as_u64());
    assert!(
        held.zip(limit)
            .is_some_and(|(h, l)| l > 0 && h <= l && h + page > l),
        "beside {attacker}: the victim allocated its whole memory share: {v}"
    );
    let own = &v["own"];
    assert!(
        (0..5).all(|k| own[k].as_u64() >= Some(1)),
        "beside {attacker}: the victim holds one of every object: {v}"
    );
    v
}

/// `[held, limit]` of a report's tenant usage.
pub(super) fn pair(v: &Value, what: &str) -> (u64, u64) {
    let p = &v["tenant"][what];
    (p[0].as_u64().unwrap_or(0), p[1].as_u64().unwrap_or(0))
}

#[test]
fn hoarding_neighbours_of_many_uids_leave_another_tenant_its_whole_share() {
    let Some((daemon, path, gid)) = attack_target(
        "hoarders",
        "the attackers are other processes; \
         a_tenants_share_outlasts_hoarding_neighbours_in_process runs there",
    ) else {
        return;
    };
    let _timing = TIMING.lock().unwrap_or_else(PoisonError::into_inner);
    let backend = backend_name();
    let shared = SharedMode::enable(Control::open(&path).expect("control open"));
    let ctl = &shared.ctl;
    let base = state(ctl);
    let base_proc = daemon.as_ref().map(Mockd::stats);
    // Two of the three attacker tenants are containers of two uids each, and the second
    // victim is a container, where this test can make cgroups.
    let cgroups: Vec<Cgroup> = (0..3).filter_map(|_| Cgroup::make()).collect();
    let plan: Vec<(&[u32], Option<&Cgroup>)> = if cgroups.len() == 3 {
        vec![
            (&UIDS[0..2], Some(&cgroups[0])),
            (&UIDS[2..3], None),
            (&UIDS[3..5], Some(&cgroups[1])),
        ]
    } else {
        eprintln!(
            "hoarders: no cgroup hierarchy to make containers in (a v1 pids hierarchy, or \
             cgroup2 at /sys/fs/cgroup): the attacker tenants are users only, and the victim \
             runs only as a user"
        );
        vec![
            (&UIDS[0..1], None),
            (&UIDS[1..2], None),
            (&UIDS[2..3], None),
        ]
    };
    let attackers: Vec<String> = plan
        .iter()
        .map(|(uids, cg)| match cg {
            Some(c) => format!("container:{}", c.id),
            None => format!("user:{}", uids[0]),
        })
        .collect();
    let mut procs = Vec::new();
    for (uids, cg) in &plan {
        for &uid in *uids {
            for _ in 0..PROCS_PER_UID {
                procs.push(Proc::start("hoard", OPENS_PER_PROC, &path, uid, gid, *cg));
            }
        }
    }
    let reports: Vec<Value> = procs.iter().map(|p| p.report("ready")).collect();

    // The shares: a slotted attacker tenant's limits (each has a slot: 3 of 4).
    let r = reports
        .iter()
        .find(|r| r["opens"].as_u64() > Some(0))
        .expect("some hoarder opened");
    for r in reports.iter().filter(|r| r["opens"].as_u64() > Some(0)) {
        assert_eq!(
            r["tenant"]["slotted"], true,
            "an attacker tenant without a slot: {r}"
        );
    }
    let share = Share::of_report(r, ctl);
    let memory = share.tables.memory;
    let info = ctl.info().expect("GET_INFO");
    let page = u64::from(info.mem_align.max(4096));
    assert_held_to_their_shares(ctl, &attackers, &share, page);
    // Every client of a container's uids is that container's in LIST_CLIENTS.
    for c in ctl.clients().expect("LIST_CLIENTS") {
        if let Some((_, Some(cg))) = plan.iter().find(|(uids, _)| uids.contains(&c.uid)) {
            assert_eq!(
                (c.tenant_kind, c.container_id()),
                (davinci_uapi::TENANT_CONTAINER, Some(cg.id.as_str())),
                "a client of uid {} in container {}: {c:?}",
                c.uid,
                cg.id
            );
        }
    }
    let (tenants, _) = sums(ctl);
    let mut i = 0;
    for ((uids, cg), key) in plan.iter().zip(&attackers) {
        let n = uids.len() * PROCS_PER_UID;
        let mine = &reports[i..i + n];
        i += n;
        // GET_USAGE names the tenant's kind, and its figures are the tenant's, whichever of
        // its uids asks: the last of its hoarders to report saw all the others' holdings,
        // the sums LIST_CLIENTS gives (one share: asserted above).
        let kind = if cg.is_some() { "container" } else { "user" };
        for r in mine.iter().filter(|r| r["opens"].as_u64() > Some(0)) {
            assert_eq!(r["tenant"]["kind"], kind, "attacker tenant {key}: {r}");
        }
        let t = tenants[key];
        let most = |what: &str| mine.iter().map(|r| pair(r, what).0).max();
        assert_eq!(
            (most("contexts"), most("memory")),
            (Some(u64::from(t.contexts)), Some(t.memory)),
            "attacker tenant {key}: the contexts and memory its hoarders' GET_USAGE saw \
             the tenant hold, against LIST_CLIENTS' sums"
        );
        // What its processes hold, each its own part, adds up to one share.
        let own = |what: &str| mine.iter().map(|r| r[what].as_u64().unwrap_or(0)).sum();
        assert_eq!(
            (own("contexts"), own("exports")),
            (u64::from(share.tables.contexts), u64::from(share.exports)),
            "attacker tenant {key}'s contexts and exports, over its {n} processes"
        );
    }

    // The victim, another unprivileged tenant, beside them all: a user, then a container.
    let v = victim_beside("the hoarders", &path, gid, None);
    assert_eq!(
        v["memory"][1].as_u64(),
        Some(memory),
        "the victim's memory share: {v}"
    );
    let ms = |v: &Value, k: &str, i: usize| v[k][i].as_f64().unwrap_or(f64::MAX);
    // The hoarders still hold their shares after the victim came and went.
    assert_held_to_their_shares(ctl, &attackers, &share, page);
    let in_container = cgroups.get(2).map(|cg| {
        // Its slot back first (the daemon sees a connection end after the process does).
        wait_gone(ctl, VICTIM_UID);
        let v = victim_beside("the hoarders", &path, gid, Some(cg));
        assert_eq!(
            v["memory"][1].as_u64(),
            Some(memory),
            "the container victim's memory share: {v}"
        );
        assert_held_to_their_shares(ctl, &attackers, &share, page);
        v
    });

    drop(procs);
    let t0 = Instant::now();
    loop {
        let now = state(ctl);
        let proc_back = match (&daemon, base_proc) {
            (Some(d), Some(p0)) => d.stats() == p0,
            _ => true,
        };
        if now == base && proc_back {
            break;
        }
        assert!(
            t0.elapsed() < LONG,
            "after the hoarders died: {now:?} (baseline {base:?})"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!(
        "hoarders: {backend}: {} processes of {} uids in {} tenants ({} containers), each at its \
         share ({:?}, exports {}); victim (uid {VICTIM_UID}): one of every object and its \
         {} MiB; NOP round trip p50 {:.2} ms p99 {:.2} ms max {:.2} ms; control (create + \
         destroy context) p50 {:.2} ms p99 {:.2} ms max {:.2} ms; {}; baseline {:.0} ms after \
         SIGKILL",
        reports.len(),
        plan.iter().map(|(u, _)| u.len()).sum::<usize>(),
        plan.len(),
        plan.iter().filter(|(_, c)| c.is_some()).count(),
        share.tables,
        share.exports,
        memory >> 20,
        ms(&v, "nop_ms", 0),
        ms(&v, "nop_ms", 1),
        ms(&v, "nop_ms", 2),
        ms(&v, "control_ms", 0),
        ms(&v, "control_ms", 1),
        ms(&v, "control_ms", 2),
        match &in_container {
            Some(c) => format!(
                "the same in a container: its share and one of every object, NOP p99 {:.2} ms, \
                 control p99 {:.2} ms",
                ms(c, "nop_ms", 1),
                ms(c, "control_ms", 1)
            ),
            None => "no container victim (no cgroups)".to_string(),
        },
        t0.elapsed().as_secs_f64() * 1e3,
    );
    drop(shared);
    drop(cgroups);
}

/// `davinci-attacker hoard`'s work, as up to 40 clients of user `uid` of the in-process
/// device.
fn hoard(mock: &MockDevice, uid: u32) -> Option<Hoard> {
    let devs = until_refused("opens", |i| {
        (i < 40).then(|| Device::attach_as_user(mock, uid))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    if devs.is_empty() {
        return None;
    }
    Some(take_everything(devs).unwrap_or_else(|e| panic!("{e}")))
}

/// The embedded device's hoarders: three users (tenants) with two sets of opens each, in
/// this process (`Device::attach_as_user`); then a fourth user opens, creates one of every
/// object and allocates its whole memory share.
#[test]
fn a_tenants_share_outlasts_hoarding_neighbours_in_process() {
    if backend_name() != "embedded" {
        eprintln!(
            "hoarders: the in-process hoarders are the embedded backend's; \
             hoarding_neighbours_of_many_uids_leave_another_tenant_its_whole_share runs here"
        );
        return;
    }
    let mock = MockDevice::new(MockConfig::default());
    let shared = SharedMode::enable(Control::attach(&mock).expect("control open"));
    let ctl = &shared.ctl;
    let mut hoards = Vec::new();
    for &uid in &UIDS[..3] {
        for _ in 0..PROCS_PER_UID {
            hoards.push(hoard(&mock, uid));
        }
    }
    let first = &hoards[0].as_ref().expect("the first hoarder opened").devs[0];
    let u = first.usage().expect("GET_USAGE");
    assert!(u.slotted, "an attacker tenant has a slot: {u:?}");
    let info = ctl.info().expect("GET_INFO");
    let slots = (info.memory_size / u.memory.limit.max(1)) as usize;
    let share = Share {
        tables: Sum {
            opens: (MAX_CLIENT_OPENS / slots.max(1)) as u32,
            contexts: u.contexts.limit,
            streams: u.streams.limit,
            events: u.events.limit,
            allocations: u.allocations.limit,
            memory: u.memory.limit,
        },
        exports: u.exports.limit,
    };
    let page = u64::from(info.mem_align.max(4096));
    let attackers: Vec<String> = UIDS[..3].iter().map(|u| format!("user:{u}")).collect();
    assert_held_to_their_shares(ctl, &attackers, &share, page);
    for (k, key) in attackers.iter().enumerate() {
        let exports: usize = hoards[k * PROCS_PER_UID..(k + 1) * PROCS_PER_UID]
            .iter()
            .map(|h| h.as_ref().map_or(0, |h| h.exports.len()))
            .sum();
        assert_eq!(
            exports, share.exports as usize,
            "attacker tenant {key}'s exports"
        );
    }

    let victim = Device::attach_as_user(&mock, VICTIM_UID).expect("the victim's open");
    let ctx = victim.create_context().expect("the victim's context");
    let mut s = ctx.create_stream().expect("the victim's stream");
    let ev = ctx.create_event().expect("the victim's event");
    ev.record(&mut s).expect("the victim's record");
    s.synchronize(LONG).expect("the victim's record runs");
    let one = victim
        .alloc(page as usize)
        .expect("the victim's allocation");
    one.export(ExportTo::SameUser).expect("the victim's export");
    let room = victim.usage().expect("GET_USAGE").memory.room() / page * page;
    let rest = victim
        .alloc(room as usize)
        .expect("the rest of the victim's memory share, in one allocation");
    let v = victim.usage().expect("GET_USAGE");
    assert!(v.slotted, "the victim has the slot kept for it: {v:?}");
    assert_eq!(v.memory.limit, share.tables.memory, "{v:?}");
    assert!(
        v.memory.held <= v.memory.limit && v.memory.held + page > v.memory.limit,
        "the victim holds its whole memory share: {v:?}"
    );
    let mut rtt: Vec<Duration> = (0..300u64)
        .map(|i| {
            let t0 = Instant::now();
            s.submit(&davinci_shim::task::nop().with_user_data(i))
                .expect("the victim's NOP");
            s.synchronize(LONG).expect("the victim's NOP runs");
            t0.elapsed()
        })
        .collect();
    rtt.sort();
    assert_held_to_their_shares(ctl, &attackers, &share, page);
    eprintln!(
        "hoarders: embedded: 3 users with {} opens in all, each at its share ({:?}); the \
         victim: one of every object and its {} MiB; NOP round trip p99 {:.3} ms",
        hoards
            .iter()
            .map(|h| h.as_ref().map_or(0, |h| h.devs.len()))
            .sum::<usize>(),
        share.tables,
        share.tables.memory >> 20,
        rtt[296].as_secs_f64() * 1e3
    );
    drop((rest, one, ev, s, ctx, victim, hoards));
}
