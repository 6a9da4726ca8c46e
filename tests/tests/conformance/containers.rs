//! Containers as tenants (issue 41, item 6): a tenant is the client's container (the
//! container id its cgroup names) else its user (docs/security.md, "Tenants"). Each test
//! makes cgroups named as docker names a container's and runs `davinci-attacker` processes
//! of other uids in them (conformance/hoarders.rs' `Proc` and `Cgroup`):
//!
//! * two uids in one container are one tenant: GET_USAGE and LIST_CLIENTS say CONTAINER,
//!   the holdings of both are summed against one share, and together they get no more than
//!   it, while the same uid outside the container is another tenant with a share of its own;
//! * a tenant arriving when every slot is taken (by containers and users holding nothing but
//!   an open) gets only the spare (none of the memory and contexts kept for the slotted
//!   tenants, though the device is all but empty), keeps waiting while a container with a
//!   slot still has a uid open, and gets the slot freed when a slotted tenant leaves, and
//!   with it its whole share.
//!
//! A victim container beside hoarding containers is conformance/hoarders.rs'. They run where
//! other processes reach the device and this one may make cgroups: the daemon (its own, on a
//! host with a cgroup hierarchy root may write to; it reads `/proc/<pid>/cgroup`) and the
//! kernel module in QEMU (the guest mounts cgroup2; the module reads the opener's cgroup).
//! Elsewhere they say why and pass.
#![forbid(unsafe_code)]

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use davinci_shim::Control;
use davinci_tests::mockd::Mockd;
use serde_json::Value;

use super::hoarders::{pair, sums, tenant_of, wait_gone, Cgroup, Proc, Share, TIMING};
use super::isolation::SharedMode;
use super::neighbours::{attack_target, state, LONG};

/// The client opens each `davinci-attacker hoard` process here makes: a few, so that a
/// tenant's processes stay well within its share of opens.
const OPENS: usize = 8;

/// Where these tests run: the attack target (the daemon or none, the device's path, the group
/// that may open it) and the cgroups asked for; `None` (said) where either cannot be had.
fn target(test: &str, cgroups: usize) -> Option<(Option<Mockd>, String, u32, Vec<Cgroup>)> {
    let (daemon, path, gid) = attack_target(
        test,
        "a container is a cgroup of other processes, which cannot reach this process's device",
    )?;
    let made: Vec<Cgroup> = (0..cgroups).filter_map(|_| Cgroup::make()).collect();
    if made.len() < cgroups {
        eprintln!(
            "{test}: skipped: no cgroup hierarchy this process may make a container's cgroup in \
             (a v1 pids hierarchy at /sys/fs/cgroup/pids, or cgroup2 mounted at /sys/fs/cgroup)"
        );
        return None;
    }
    Some((daemon, path, gid, made))
}

/// Waits (at most [`LONG`]) until the device and, for the daemon, its threads and
/// descriptors are back at `base`, `base_proc`.
fn back_to(
    ctl: &Control,
    daemon: &Option<Mockd>,
    base: (u32, u64, [u32; 4], usize),
    base_proc: Option<davinci_tests::mockd::ProcStats>,
) {
    let t0 = Instant::now();
    loop {
        let now = state(ctl);
        let proc_back = match (daemon, base_proc) {
            (Some(d), Some(p0)) => d.stats() == p0,
            _ => true,
        };
        if now == base && proc_back {
            return;
        }
        assert!(
            t0.elapsed() < LONG,
            "after the tenants left: {now:?} (baseline {base:?})"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What a `hoard` report says it took itself, of `what`.
fn took(r: &Value, what: &str) -> u64 {
    r[what].as_u64().unwrap_or(0)
}

/// Asserts a `hoard` report's tenant took its whole share (of the tables; of memory within
/// a page per allocation, the hoarder's allocation size being rounded down to a page).
fn at_its_share(r: &Value, share: &Share, page: u64, who: &str) {
    let s = &share.tables;
    let tenant: Vec<u64> = ["contexts", "streams", "events", "allocations", "exports"]
        .iter()
        .map(|k| pair(r, k).0)
        .collect();
    assert_eq!(
        tenant,
        [
            s.contexts,
            s.streams,
            s.events,
            s.allocations,
            share.exports
        ]
        .map(u64::from),
        "{who}: the tenant's contexts, streams, events, allocations and exports (GET_USAGE) \
         against its share: {r}"
    );
    let (memory, limit) = pair(r, "memory");
    assert!(
        limit == s.memory && memory <= limit && memory + s.allocations as u64 * page >= limit,
        "{who}: the tenant's memory (GET_USAGE) against its share {}: {r}",
        s.memory
    );
}

#[test]
fn two_uids_in_one_container_are_one_tenant_held_to_one_share() {
    let Some((daemon, path, gid, cgroups)) = target("containers", 1) else {
        return;
    };
    let cg = &cgroups[0];
    let _timing = TIMING.lock().unwrap_or_else(PoisonError::into_inner);
    let shared = SharedMode::enable(Control::open(&path).expect("control open"));
    let ctl = &shared.ctl;
    let base = state(ctl);
    let base_proc = daemon.as_ref().map(Mockd::stats);
    let page = u64::from(ctl.info().expect("GET_INFO").mem_align.max(4096));
    let (uid_a, uid_b) = (61_031, 61_032);
    let key = format!("container:{}", cg.id);

    // The container's first uid takes all it may.
    let first = Proc::start("hoard", OPENS, &path, uid_a, gid, Some(cg));
    let a = first.report("ready");
    assert_eq!(
        (&a["opens"], &a["tenant"]["kind"], &a["tenant"]["slotted"]),
        (
            &Value::from(OPENS),
            &Value::from("container"),
            &Value::from(true)
        ),
        "uid {uid_a} in the container: its opens and its tenant (GET_USAGE): {a}"
    );
    let share = Share::of_report(&a, ctl);
    at_its_share(&a, &share, page, "the container's first uid");

    // Its second uid: another user, the same tenant. It opens (the tenant's share of opens
    // has room) but gets nothing more: GET_USAGE shows the first uid's holdings as its
    // tenant's, against the one share.
    let second = Proc::start("hoard", OPENS, &path, uid_b, gid, Some(cg));
    let b = second.report("ready");
    assert_eq!(
        (&b["opens"], &b["tenant"]["kind"], &b["tenant"]["slotted"]),
        (
            &Value::from(OPENS),
            &Value::from("container"),
            &Value::from(true)
        ),
        "uid {uid_b} in the container: its opens and its tenant (GET_USAGE): {b}"
    );
    let own: Vec<u64> = [
        "memory",
        "allocations",
        "exports",
        "contexts",
        "streams",
        "events",
    ]
    .iter()
    .map(|k| took(&b, k))
    .collect();
    assert_eq!(
        own, [0; 6],
        "uid {uid_b} in the container took memory, allocations, exports, contexts, streams or \
         events beyond the share its container's other uid holds: {b}"
    );
    at_its_share(&b, &share, page, "the container's second uid");
    for k in ["memory", "contexts", "events"] {
        assert_eq!(
            pair(&b, k),
            pair(&a, k),
            "{k}: the second uid's GET_USAGE sees the first's holdings as its tenant's"
        );
    }

    // LIST_CLIENTS: every open of both uids is the container's; summed, one share.
    let clients = ctl.clients().expect("LIST_CLIENTS");
    for uid in [uid_a, uid_b] {
        let mine: Vec<_> = clients.iter().filter(|c| c.uid == uid).collect();
        assert_eq!(mine.len(), OPENS, "uid {uid}'s opens in LIST_CLIENTS");
        for c in mine {
            assert_eq!(
                (c.tenant_kind, c.container_id()),
                (davinci_uapi::TENANT_CONTAINER, Some(cg.id.as_str())),
                "a client of uid {uid} in the container: {c:?}"
            );
        }
    }
    let (tenants, _) = sums(ctl);
    let t = tenants[&key];
    let s = share.tables;
    assert_eq!(
        (t.opens, t.contexts, t.streams, t.events, t.allocations),
        (
            2 * OPENS as u32,
            s.contexts,
            s.streams,
            s.events,
            s.allocations
        ),
        "the container's opens, contexts, streams, events and allocations in LIST_CLIENTS, \
         summed over its two uids, against one share"
    );
    assert!(
        t.memory <= s.memory && t.memory + u64::from(t.allocations) * page >= s.memory,
        "the container's memory in LIST_CLIENTS, summed over its two uids ({}), against one \
         share ({})",
        t.memory,
        s.memory
    );

    // The first uid outside the container is another tenant, its user, with its own share.
    let outside = Proc::start("hoard", OPENS, &path, uid_a, gid, None);
    let o = outside.report("ready");
    assert_eq!(
        (&o["tenant"]["kind"], &o["tenant"]["slotted"]),
        (&Value::from("user"), &Value::from(true)),
        "uid {uid_a} outside the container: {o}"
    );
    at_its_share(&o, &share, page, "the first uid outside the container");
    let (tenants, _) = sums(ctl);
    assert_eq!(
        (
            tenants[&key].contexts,
            tenants[&format!("user:{uid_a}")].contexts
        ),
        (s.contexts, s.contexts),
        "LIST_CLIENTS: the container and uid {uid_a} outside it hold a share each"
    );
    eprintln!(
        "containers: uids {uid_a} and {uid_b} in one container: one tenant (CONTAINER), {} \
         opens, one share between them ({:?}, exports {}); uid {uid_a} outside it: a user \
         tenant with a share of its own",
        t.opens, share.tables, share.exports
    );

    drop((first, second, outside));
    back_to(ctl, &daemon, base, base_proc);
    drop(shared);
    drop(cgroups);
}

#[test]
fn a_tenant_beyond_the_slots_gets_only_the_spare_then_a_freed_slot() {
    // Three containers: two hold slots, one comes late.
    let Some((daemon, path, gid, cgroups)) = target("containers", 3) else {
        return;
    };
    let (c1, c2, late) = (&cgroups[0], &cgroups[1], &cgroups[2]);
    let _timing = TIMING.lock().unwrap_or_else(PoisonError::into_inner);
    let shared = SharedMode::enable(Control::open(&path).expect("control open"));
    let ctl = &shared.ctl;
    let base = state(ctl);
    let base_proc = daemon.as_ref().map(Mockd::stats);
    let page = u64::from(ctl.info().expect("GET_INFO").mem_align.max(4096));

    // Every slot taken (4, the default) by tenants that hold one open and nothing else: a
    // container of one uid, a container of two, two users.
    let holders_plan: [(u32, Option<&Cgroup>, &str); 5] = [
        (61_041, Some(c1), "container"),
        (61_042, Some(c2), "container"),
        (61_043, Some(c2), "container"),
        (61_044, None, "user"),
        (61_045, None, "user"),
    ];
    let mut holders: Vec<Option<Proc>> = Vec::new();
    let mut share = None;
    for (uid, cg, kind) in holders_plan {
        let p = Proc::start("hold", 1, &path, uid, gid, cg);
        let r = p.report("ready");
        assert_eq!(
            (&r["tenant"]["kind"], &r["tenant"]["slotted"]),
            (&Value::from(kind), &Value::from(true)),
            "holder uid {uid}: its tenant takes a slot: {r}"
        );
        share.get_or_insert_with(|| Share::of_report(&r, ctl));
        holders.push(Some(p));
    }
    let share = share.expect("a holder's share");
    let s = share.tables;
    let late_key = format!("container:{}", late.id);

    // The late tenant, a container of two uids, hoards: it opens (the opens beyond the free
    // slots' shares are not kept) but gets only the spare of the rest: with the shares
    // filling the device (the defaults) none of its memory or contexts, though the slotted
    // tenants hold none of theirs.
    let mut late_procs = Vec::new();
    for uid in [61_046, 61_047] {
        let p = Proc::start("hoard", OPENS, &path, uid, gid, Some(late));
        let r = p.report("ready");
        assert_eq!(
            (&r["opens"], &r["tenant"]["kind"], &r["tenant"]["slotted"]),
            (
                &Value::from(OPENS),
                &Value::from("container"),
                &Value::from(false)
            ),
            "late uid {uid}: it opens, a container tenant without a slot: {r}"
        );
        let (contexts, memory) = (pair(&r, "contexts"), pair(&r, "memory"));
        // The spare: what the shares, each whole pages, leave of the device's memory: less
        // than a page per slot (4 by default).
        assert!(
            contexts == (0, 0) && memory.0 == 0 && memory.1 < 4 * page,
            "late uid {uid}: its tenant may hold no contexts and less than a page per slot of \
             memory (GET_USAGE [held, limit now]: contexts {contexts:?}, memory {memory:?}): {r}"
        );
        for k in [
            "memory",
            "allocations",
            "exports",
            "contexts",
            "streams",
            "events",
        ] {
            let (held, limit) = pair(&r, k);
            assert!(
                held <= limit && took(&r, k) <= held,
                "late uid {uid}: {k}: it took {}, its tenant holds {held}, beyond the spare \
                 ({limit}): {r}",
                took(&r, k)
            );
        }
        late_procs.push(p);
    }
    let (tenants, _) = sums(ctl);
    let t = tenants
        .get(&late_key)
        .unwrap_or_else(|| panic!("the late tenant not in LIST_CLIENTS: {tenants:?}"));
    assert_eq!(
        (t.opens, t.contexts, t.memory),
        (2 * OPENS as u32, 0, 0),
        "the late tenant in LIST_CLIENTS: opens, contexts, memory"
    );

    // One uid of the two-uid container leaves: its container keeps its slot (its other uid
    // still has an open), so the late tenant still has none.
    holders[1] = None;
    wait_gone(ctl, 61_042);
    let waiting = Proc::start("hold", 1, &path, 61_047, gid, Some(late));
    let r = waiting.report("ready");
    assert_eq!(
        r["tenant"]["slotted"], false,
        "the late tenant got a slot while every slotted container still has an open: {r}"
    );

    // A slotted user leaves: its slot goes to the tenant waiting for one, the late
    // container, whose next open takes its whole share.
    holders[3] = None;
    wait_gone(ctl, 61_044);
    let after = Proc::start("hoard", OPENS, &path, 61_046, gid, Some(late));
    let r = after.report("ready");
    assert_eq!(
        (&r["tenant"]["kind"], &r["tenant"]["slotted"]),
        (&Value::from("container"), &Value::from(true)),
        "the late tenant after a slotted tenant left: {r}"
    );
    at_its_share(&r, &share, page, "the late tenant with the freed slot");
    let (tenants, _) = sums(ctl);
    let t = tenants[&late_key];
    assert_eq!(
        (t.contexts, t.streams, t.events, t.allocations),
        (s.contexts, s.streams, s.events, s.allocations),
        "the late tenant in LIST_CLIENTS, with the freed slot, against its share"
    );
    for c in ctl.clients().expect("LIST_CLIENTS") {
        if c.uid == 61_046 || c.uid == 61_047 {
            assert_eq!(tenant_of(&c), late_key, "a late client: {c:?}");
        }
    }
    eprintln!(
        "containers: every slot taken by 4 tenants holding one open each (2 containers, one of \
         2 uids, and 2 users): a late container of 2 uids opened {} clients and got nothing \
         else; still no slot after one uid of the two-uid container left; a user left and the \
         late container took its whole share ({:?}, exports {})",
        2 * OPENS,
        share.tables,
        share.exports
    );

    drop((after, waiting, late_procs, holders));
    back_to(ctl, &daemon, base, base_proc);
    drop(shared);
    drop(cgroups);
}
