//! Streams created beside tenants that churn theirs (issue 41): every new stream is served.
//!
//! Issue 41 saw 3 of 1,500 new streams of one tenant never run their first NOP (head 0, no
//! error, deaf to doorbells and NOTIFY) beside a tenant creating and destroying streams: the
//! mock device's `reap` (after DESTROY_STREAM, DESTROY_CONTEXT or a close) took a stream
//! created between its look at the live streams and its pruning of the served ones for a
//! gone one, and no poller served it again. Here several churning clients (opens without the
//! shim: a CREATE_STREAM and a DESTROY_STREAM per turn, some of them closed with their
//! streams still live, as a killed process's are) run beside clients that each create stream
//! after stream and check its first NOP. On mockd, client processes doing work are SIGKILLed
//! meanwhile too.
//!
//! Embedded and mockd. Not the kernel: its streams have no poller table to prune (each runs
//! on the module's worker), and the churners' raw opens need ioctls this suite makes only
//! through the shim there.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use davinci_mock_device::{local_open_params, MockDevice, NoUserMem, Role};
use davinci_mockd_proto::WireRole;
use davinci_shim::{task, Device};
use davinci_tests::mockd::{self, TestClient};
use davinci_tests::model::Rng;
use davinci_tests::raw::RawClient;
use davinci_tests::{backend_name, control_of, second_client};
use davinci_uapi::{
    CreateContextArgs, CreateStreamArgs, HandleArgs, Wire, DRIVER_CMD_CREATE_CONTEXT,
    DRIVER_CMD_CREATE_STREAM, DRIVER_CMD_DESTROY_STREAM,
};

use crate::dev;
use crate::isolation::SharedMode;

/// Clients churning streams; every other one closes its opens with streams still live.
const CHURNERS: usize = 4;
/// Idle streams of one more open, held all along: every reap looks through them and the
/// churners' (before issue 41's fix such a crowd made a lost stream come sooner).
const CROWD: usize = 16;
/// Streams a creator makes (each with its NOP) before it waits for their NOPs.
const BATCH: usize = 8;
/// Streams a churner keeps live at once (it destroys the oldest before creating another).
const LIVE: usize = 3;
/// Clients creating streams and checking each one's first NOP.
const CREATORS: usize = 2;
// Every open here is of one tenant (this process's user), whose share of a shared device's
// stream table is a quarter of it (64): at most CROWD + CHURNERS * LIVE + CREATORS * BATCH
// + 1 (a process being killed) = 45 live at once, which leaves room for the streams of
// closed opens the daemon has not let go of yet.
const _: () = assert!(CROWD + CHURNERS * LIVE + CREATORS * BATCH < 48);

/// How long the creators go on creating.
const RUN: Duration = Duration::from_secs(2);
/// How long a new stream's first NOP may take (it takes microseconds; a stream no poller
/// serves never runs it).
const FIRST_NOP: Duration = Duration::from_secs(10);

/// A churning client's open, without the shim: the embedded device's own open, or a
/// connection of its own to the daemon. Dropping it closes the open with whatever it holds.
enum Open {
    Embedded { dev: MockDevice, client: u32 },
    Mockd(RawClient),
}

impl Open {
    /// A new client of the device `of` is on (in shared mode).
    fn of(of: &Target) -> Open {
        match of {
            Target::Embedded(dev) => {
                let client = dev
                    .open(local_open_params(Role::Client, false))
                    .map_err(|e| e.error)
                    .expect("a churner's open of the embedded device");
                Open::Embedded {
                    dev: dev.clone(),
                    client,
                }
            }
            Target::Mockd { socket, .. } => Open::Mockd(
                RawClient::open(socket, WireRole::Client).expect("a churner's connection"),
            ),
        }
    }

    fn ioctl<A: Wire>(&mut self, what: &str, request: u32, arg: A) -> A {
        let mut bytes = vec![0u8; A::SIZE];
        arg.encode(&mut bytes);
        match self {
            Open::Embedded { dev, client } => {
                if let Err(e) = dev.ioctl(*client, request, &mut bytes, &mut NoUserMem) {
                    panic!("churner: {what}: {e:?}");
                }
                A::decode(&bytes)
            }
            Open::Mockd(c) => c
                .ioctl(request, &arg)
                .unwrap_or_else(|e| panic!("churner: {what}: {e}")),
        }
    }

    fn create_context(&mut self) -> u32 {
        let a = CreateContextArgs::default();
        self.ioctl("CREATE_CONTEXT", DRIVER_CMD_CREATE_CONTEXT, a)
            .handle
    }

    fn create_stream(&mut self, ctx: u32) -> u32 {
        let a = CreateStreamArgs {
            ctx,
            cmd_entries: 64,
            event_entries: 64,
            ..CreateStreamArgs::default()
        };
        self.ioctl("CREATE_STREAM", DRIVER_CMD_CREATE_STREAM, a)
            .handle
    }

    fn destroy_stream(&mut self, handle: u32) {
        let a = HandleArgs { handle, pad: 0 };
        self.ioctl("DESTROY_STREAM", DRIVER_CMD_DESTROY_STREAM, a);
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Open::Embedded { dev, client } = self {
            dev.close(*client);
        }
    }
}

/// The device under test, as the churners reach it.
enum Target {
    Embedded(MockDevice),
    Mockd { path: String, socket: PathBuf },
}

/// One churning client until `stop`: turns of one CREATE_STREAM (after a DESTROY_STREAM of
/// its oldest once it holds `LIVE`). A graceful one keeps one open and destroys what it
/// holds at the end; an abrupt one closes each open after a few turns with its streams
/// still live, then opens again. Returns the streams it created.
fn churn(target: &Target, abrupt: bool, seed: u64, stop: &AtomicBool) -> u64 {
    let mut rng = Rng::new(seed);
    let mut created = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut open = Open::of(target);
        let ctx = open.create_context();
        let turns = if abrupt {
            1 + rng.next_u64() % 32
        } else {
            u64::MAX
        };
        let mut live = VecDeque::with_capacity(LIVE);
        let mut turn = 0u64;
        while turn < turns && !stop.load(Ordering::Relaxed) {
            if live.len() == LIVE {
                if let Some(h) = live.pop_front() {
                    open.destroy_stream(h);
                }
            }
            live.push_back(open.create_stream(ctx));
            created += 1;
            turn += 1;
        }
        if !abrupt {
            for h in live {
                open.destroy_stream(h);
            }
        }
        // An abrupt churner's open goes here with its context and streams.
        drop(open);
    }
    created
}

/// mockd: `davinci-testclient spin` processes (a context, a stream, memory, work in flight)
/// SIGKILLed one after another, a few milliseconds into their work, until `stop`. Returns
/// how many were killed.
fn kill_workers(path: &str, seed: u64, stop: &AtomicBool) -> u64 {
    let mut rng = Rng::new(seed);
    let mut killed = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut c = TestClient::start(path, &["spin", "--elems", "256"]);
        let r = c
            .next_report(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("client {}: no report", c.pid));
        assert_eq!(r["event"], "ready", "client {}: {r}", c.pid);
        std::thread::sleep(Duration::from_micros(rng.next_u64() % 10_000));
        c.sigkill();
        assert!(
            c.reap(Duration::from_secs(30)).is_some(),
            "client {} did not die of SIGKILL within 30 s",
            c.pid
        );
        killed += 1;
    }
    killed
}

/// What one creating client saw: streams created, and those whose first NOP did not
/// complete within `FIRST_NOP` (with the first one's error).
#[derive(Default)]
struct Tally {
    created: u64,
    never_ran: u64,
    first: Option<String>,
}

/// One creating client: for `RUN` (or until a stream failed, `failed`), creates `BATCH`
/// streams with a NOP each, then waits for their NOPs (all within `FIRST_NOP`) and drops
/// them.
fn create_and_check(dev: &Device, who: usize, failed: &AtomicBool) -> Tally {
    let ctx = dev.create_context().expect("a creator's context");
    let mut t = Tally::default();
    let until = Instant::now() + RUN;
    while Instant::now() < until && !failed.load(Ordering::Relaxed) {
        let mut batch = Vec::with_capacity(BATCH);
        for _ in 0..BATCH {
            let mut s = ctx
                .create_stream()
                .unwrap_or_else(|e| panic!("creator {who}: stream {}: {e}", t.created));
            t.created += 1;
            s.submit(&task::nop().with_user_data(t.created))
                .unwrap_or_else(|e| panic!("creator {who}: stream {:#x}: {e}", s.handle()));
            batch.push(s);
        }
        let deadline = Instant::now() + FIRST_NOP;
        for mut s in batch {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(e) = s.synchronize(left) {
                t.never_ran += 1;
                failed.store(true, Ordering::Relaxed);
                t.first
                    .get_or_insert_with(|| format!("creator {who}, stream {:#x}: {e}", s.handle()));
            }
        }
    }
    t
}

/// Every stream a client creates beside clients churning theirs (creating and destroying
/// in a tight loop, some closing their opens with streams live, and on mockd client
/// processes SIGKILLed mid-work) runs its first NOP (issue 41: 3 of 1,500 never did).
#[test]
fn new_streams_beside_churning_tenants_all_run() {
    let name = backend_name();
    if name != "embedded" && name != "mockd" {
        eprintln!(
            "churn: not run against {name}: the race it looks for is in the mock device's \
             poller table (see the module docs)"
        );
        return;
    }
    let first = dev();
    let _shared = SharedMode::enable(control_of(&first).expect("control open"));
    let target = match first.mock_device() {
        Some(m) => Target::Embedded(m.clone()),
        None => {
            let path = mockd::shared_path(first.info().device_id).expect("the daemon's device");
            let socket = PathBuf::from(path.strip_prefix("mock:").expect("a mock: path"));
            Target::Mockd { path, socket }
        }
    };
    let creators: Vec<Device> = (0..CREATORS)
        .map(|_| second_client(&first).expect("a creator's open"))
        .collect();
    // The crowd: idle streams of one more open, all along.
    let mut crowd = Open::of(&target);
    let crowd_ctx = crowd.create_context();
    for _ in 0..CROWD {
        crowd.create_stream(crowd_ctx);
    }
    let stop = AtomicBool::new(false);
    let failed = AtomicBool::new(false);
    let churned = AtomicU64::new(0);
    let t0 = Instant::now();
    let (tallies, killed) = std::thread::scope(|sc| {
        for i in 0..CHURNERS {
            let (target, stop, churned) = (&target, &stop, &churned);
            sc.spawn(move || {
                let n = churn(target, i % 2 == 1, 41 + i as u64, stop);
                churned.fetch_add(n, Ordering::Relaxed);
            });
        }
        let killer = match &target {
            Target::Mockd { path, .. } => {
                let stop = &stop;
                Some(sc.spawn(move || kill_workers(path, 4141, stop)))
            }
            Target::Embedded(_) => None,
        };
        let running: Vec<_> = creators
            .iter()
            .enumerate()
            .map(|(who, d)| {
                let failed = &failed;
                sc.spawn(move || create_and_check(d, who, failed))
            })
            .collect();
        let tallies: Vec<_> = running.into_iter().map(|h| h.join()).collect();
        stop.store(true, Ordering::Relaxed);
        let killed = killer.map(|k| k.join());
        (tallies, killed)
    });
    let mut all = Tally::default();
    for t in tallies {
        let t = t.unwrap_or_else(|p| std::panic::resume_unwind(p));
        all.created += t.created;
        all.never_ran += t.never_ran;
        all.first = all.first.or(t.first);
    }
    let killed = match killed {
        Some(k) => k.unwrap_or_else(|p| std::panic::resume_unwind(p)),
        None => 0,
    };
    let churned = churned.load(Ordering::Relaxed);
    eprintln!(
        "churn: {} new streams checked beside {churned} churned and {killed} killed clients \
         on {name} in {:.1} s",
        all.created,
        t0.elapsed().as_secs_f64()
    );
    assert!(all.created > 0 && churned > 0, "nothing was tried");
    assert_eq!(
        all.never_ran,
        0,
        "{} of {} new streams never ran their first NOP within {FIRST_NOP:?} beside clients \
         churning theirs ({churned} streams churned, {killed} clients killed); first: {}",
        all.never_ran,
        all.created,
        all.first.unwrap_or_default()
    );
}
