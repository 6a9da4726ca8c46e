//! Names from /proc, client groups across restarts, utilization between scrapes.

use super::*;
use crate::collect::{Failure, Reading};
use davinci_uapi::{ClientUsage, Errno};

struct Comm;

impl Names for Comm {
    fn name(&self, _pid: u32, comm: &str) -> String {
        format!("{comm}-full")
    }
}

fn client(id: u32, pid: u32, container: &str, comm: &str, done: u64) -> ClientUsage {
    ClientUsage {
        client_id: id,
        pid,
        memory_bytes: 1 << 20,
        tasks_submitted: done,
        tasks_completed: done,
        busy_ns: done * 1000,
        contexts: 1,
        container: ClientUsage::container_field(container),
        comm: ClientUsage::comm_field(comm),
        ..Default::default()
    }
}

fn sample(clients: Vec<ClientUsage>, busy_ns: u64, now_ns: u64) -> Sample {
    let mut r = Reading::default();
    r.info.features = Features::LIST_CLIENTS | Features::COUNTERS | Features::IDENTITY;
    r.clients = Some(clients);
    r.counters = Some(DeviceCounters {
        busy_ns,
        now_ns,
        engines: 2,
        clients_opened: 10,
        ..Default::default()
    });
    Sample {
        device: "0".into(),
        path: "mock:/x/davinci0.sock".into(),
        pods: Vec::new(),
        identity: None,
        outcome: Ok(r),
    }
}

fn derived(s: &Sample) -> &Derived {
    &s.outcome.as_ref().unwrap().derived
}

#[test]
fn full_names_extend_only_what_the_kernel_cut() {
    let comm = "inference-serve"; // 15 bytes
    assert_eq!(
        full_name(comm, b"/opt/bin/inference-server-v2\0--port\08080\0").as_deref(),
        Some("inference-server-v2")
    );
    // argv[0] that does not start with comm (a renamed process, a script): comm.
    assert_eq!(full_name(comm, b"/usr/bin/python3\0serve.py\0"), None);
    assert_eq!(full_name(comm, b"inference-serve\0"), None);
    assert_eq!(full_name(comm, b""), None);
    assert_eq!(full_name("", b"anything\0"), None);
    // Bounded, cut at a character boundary; not UTF-8 is shown as \xNN, not refused.
    let long = format!("{comm}{}\0", "é".repeat(200));
    let n = full_name(comm, long.as_bytes()).unwrap();
    assert!(n.len() <= MAX_NAME && n.starts_with(comm), "{n}");
    let bad = [comm.as_bytes(), b"\xff\xfe\0"].concat();
    assert_eq!(
        full_name(comm, &bad).as_deref(),
        Some(r"inference-serve\xff\xfe")
    );
}

#[test]
fn proc_names_read_this_process_full_name() {
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
    let comm = comm.trim_end();
    let argv0 = std::env::args().next().unwrap();
    let base = argv0.rsplit('/').next().unwrap();
    // The test binary is davinci_exporter-<hash>: longer than the kernel's 15 bytes.
    assert!(base.len() > 15 && comm.len() == 15, "{base} {comm}");
    assert_eq!(ProcNames.name(std::process::id(), comm), base);
    // A pid whose comm is not the driver's (another pid namespace): the driver's comm.
    assert_eq!(
        ProcNames.name(std::process::id(), "someone-else-xx"),
        "someone-else-xx"
    );
    assert_eq!(ProcNames.name(std::process::id(), "short"), "short");
    assert_eq!(ProcNames.name(u32::MAX, comm), comm);
}

#[test]
fn groups_add_up_and_their_counters_survive_restarts() {
    let mut h = History::default();
    let mut s = vec![sample(
        vec![
            client(1, 11, "c1", "worker", 100),
            client(2, 12, "c1", "worker", 50),
            client(3, 13, "", "python3", 7),
        ],
        0,
        1_000_000_000,
    )];
    h.update(&mut s, &Comm);
    let d = derived(&s[0]);
    assert_eq!(d.names, ["worker-full", "worker-full", "python3-full"]);
    assert_eq!(d.groups.len(), 2);
    let w = &d.groups[0];
    assert_eq!(
        (w.container_id.as_str(), w.process.as_str()),
        ("c1", "worker-full")
    );
    assert_eq!(w.clients, 2);
    assert_eq!(w.memory_bytes, 2 << 20);
    assert_eq!(w.totals.tasks_completed, 150);
    assert_eq!(w.totals.busy_ns, 150_000);
    assert!(w.has_busy);
    // Worker 1 restarts (new client id and pid, its counters from 0); worker 2 goes on.
    let mut s = vec![sample(
        vec![
            client(2, 12, "c1", "worker", 60),
            client(9, 19, "c1", "worker", 5),
            client(3, 13, "", "python3", 8),
        ],
        0,
        2_000_000_000,
    )];
    h.update(&mut s, &Comm);
    let w = &derived(&s[0]).groups[0];
    assert_eq!(w.clients, 2);
    assert_eq!(w.memory_bytes, 2 << 20);
    assert_eq!(
        w.totals.tasks_completed,
        100 + 60 + 5,
        "the restart did not drop it"
    );
    // Everyone of the group goes away, then one comes back: it still does not drop.
    let mut s = vec![sample(
        vec![client(3, 13, "", "python3", 9)],
        0,
        3_000_000_000,
    )];
    h.update(&mut s, &Comm);
    assert_eq!(
        derived(&s[0]).groups.len(),
        1,
        "a group with no client has no series"
    );
    let mut s = vec![sample(
        vec![
            client(20, 30, "c1", "worker", 1),
            client(3, 13, "", "python3", 9),
        ],
        0,
        4_000_000_000,
    )];
    h.update(&mut s, &Comm);
    assert_eq!(derived(&s[0]).groups[0].totals.tasks_completed, 166);
    // The device restarts (its clock goes back): what it remembered is forgotten.
    let mut s = vec![sample(vec![client(1, 40, "c1", "worker", 2)], 0, 10)];
    h.update(&mut s, &Comm);
    assert_eq!(derived(&s[0]).groups[0].totals.tasks_completed, 2);
}

#[test]
fn utilization_is_measured_between_two_scrapes() {
    let mut h = History::default();
    let mut s = vec![sample(vec![], 5_000_000_000, 10_000_000_000)];
    h.update(&mut s, &Comm);
    assert_eq!(
        derived(&s[0]).utilization,
        None,
        "one scrape is not an interval"
    );
    // 0.5 s busy over 1 s with 2 engines: a quarter.
    let mut s = vec![sample(vec![], 5_500_000_000, 11_000_000_000)];
    h.update(&mut s, &Comm);
    assert_eq!(derived(&s[0]).utilization, Some(0.25));
    // More busy time than the engines have (a driver's rounding): at most 1.
    let mut s = vec![sample(vec![], 9_500_000_000, 12_000_000_000)];
    h.update(&mut s, &Comm);
    assert_eq!(derived(&s[0]).utilization, Some(1.0));
    // No time passed: no value rather than a division by zero.
    let mut s = vec![sample(vec![], 9_500_000_000, 12_000_000_000)];
    h.update(&mut s, &Comm);
    assert_eq!(derived(&s[0]).utilization, None);
    // A restart (the clock went back): none, then measured again from there.
    let mut s = vec![sample(vec![], 1_000, 2_000)];
    h.update(&mut s, &Comm);
    assert_eq!(derived(&s[0]).utilization, None);
    let mut s = vec![sample(vec![], 1_000, 1_000_002_000)];
    h.update(&mut s, &Comm);
    assert_eq!(derived(&s[0]).utilization, Some(0.0));
    // A down device keeps its memory; a device no longer discovered loses it.
    let mut down = vec![Sample {
        outcome: Err(Failure {
            errno: Some(Errno::ENODEV),
            message: "gone".into(),
        }),
        ..sample(vec![], 0, 0)
    }];
    h.update(&mut down, &Comm);
    assert_eq!(h.devices.len(), 1);
    h.update(&mut [], &Comm);
    assert!(h.devices.is_empty());
}

#[test]
fn a_driver_before_1_4_has_groups_without_busy_time_and_no_utilization() {
    let mut h = History::default();
    for now in [1, 2] {
        let mut s = vec![sample(vec![client(1, 11, "", "a", 3)], 0, now)];
        if let Ok(r) = &mut s[0].outcome {
            r.info.features = Features::LIST_CLIENTS | Features::COUNTERS;
        }
        h.update(&mut s, &Comm);
        assert_eq!(derived(&s[0]).utilization, None);
        assert!(!derived(&s[0]).groups[0].has_busy);
    }
}

#[test]
fn a_device_that_goes_down_keeps_its_identity_labels_until_it_is_gone() {
    let mut h = History::default();
    let mut up = vec![sample(vec![], 0, 1)];
    if let Ok(r) = &mut up[0].outcome {
        let mut id = davinci_uapi::DeviceIdentity {
            uuid: [0x11; 16],
            ..Default::default()
        };
        id.model = davinci_uapi::DeviceIdentity::text_field("M\x1b1");
        r.identity = Some(id);
    }
    h.update(&mut up, &Comm);
    let id = up[0].identity.clone().expect("identity labels");
    assert_eq!(id.uuid, "11111111-1111-1111-1111-111111111111");
    assert_eq!(
        id.model, "M?1",
        "the model as the ABI's text field keeps it"
    );
    let down = || Sample {
        outcome: Err(Failure {
            errno: Some(Errno::ETIMEDOUT),
            message: "no answer".into(),
        }),
        ..sample(vec![], 0, 0)
    };
    let mut d = vec![down()];
    h.update(&mut d, &Comm);
    assert_eq!(d[0].identity.as_ref(), Some(&id), "down: the same labels");
    // Up again with GET_IDENTITY failing: still the labels it had.
    let mut again = vec![sample(vec![], 0, 2)];
    h.update(&mut again, &Comm);
    assert_eq!(again[0].identity.as_ref(), Some(&id));
    // Not discovered any more: forgotten; down at once when it comes back: no labels.
    h.update(&mut [], &Comm);
    let mut d = vec![down()];
    h.update(&mut d, &Comm);
    assert_eq!(d[0].identity, None);
}
