//! `top` without devices: the figures of a frame from two samples made here (rates over a
//! known interval), the sort, the frame as text, the keys, and `top --once` (text and JSON)
//! and its usage errors run against the fake devices of `crate::tests`.

use std::time::{Duration, Instant};

use davinci_ops::discover::Entry;
use davinci_uapi::{ClientUsage, DeviceCounters, DeviceInfo, DeviceSensors, Errno};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::sample::{frame, sort_procs, DevSample, Frame, Sample, Sort, SortKey, Users};
use super::tui::{action, moved, Action};
use super::view::{bar, height_for, proc_widths, size_text, text};
use crate::access::Target;
use crate::error::SmiError;
use crate::exit;
use crate::extras::Extras;
use crate::tests::*;

const CTR: &str = "3f1c2b8e9a7d00112233445566778899";

/// A client of `uid` (in container `ctr` unless empty) with `mem` bytes, `done` tasks
/// completed and `busy_ns` of engine time.
fn client(pid: u32, uid: u32, ctr: &str, mem: u64, done: u64, busy_ns: u64) -> ClientUsage {
    let mut c = usage_of(pid, ctr, mem);
    c.uid = uid;
    c.tasks_completed = done;
    c.busy_ns = busy_ns;
    c
}

/// A device sample taken at `at`: clock `now_ns`, `busy_ns` over one engine.
fn dev_sample(at: Instant, now_ns: u64, busy_ns: u64, clients: Vec<ClientUsage>) -> DevSample {
    let mut extras = Extras::default();
    extras.name = Some("davinci_mock".into());
    extras.health = Some("OK".into());
    extras.sensors = Some(DeviceSensors {
        temperature_mc: 41_400,
        power_mw: 120_500,
        power_limit_mw: 310_000,
        ..DeviceSensors::default()
    });
    DevSample {
        info: DeviceInfo {
            memory_size: 256 << 20,
            memory_used: clients.iter().map(|c| c.memory_bytes).sum(),
            clients: clients.len() as u32,
            share_mode: 1,
            ..DeviceInfo::default()
        },
        extras,
        counters: Some(DeviceCounters {
            now_ns,
            busy_ns,
            engines: 1,
            stream_errors: 2,
            ..DeviceCounters::default()
        }),
        clients,
        at,
    }
}

fn target(id: u32) -> Target {
    Target {
        entry: Entry {
            id: Some(id),
            path: format!("mock:/s/davinci{id}.sock"),
        },
        dev: Ok(Box::new(fake(id, vec![], true, true))),
    }
}

const MEMORY_DESC: Sort = Sort {
    key: SortKey::Memory,
    reverse: false,
};

/// Two tenants on davinci0 over 2 s: a container's process (pid 200: 8 MiB, 600 tasks, half
/// the engine) and a user's (pid 100: 4 MiB, 100 tasks); pid 300 opened in between; davinci1
/// went away.
fn two_tenants() -> (Vec<Target>, Frame) {
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_secs(2);
    let s = 2_000_000_000;
    let first: Sample = vec![
        Ok(dev_sample(
            t0,
            s,
            0,
            vec![
                client(100, 1000, "", 4 << 20, 50, 0),
                client(200, 2000, CTR, 8 << 20, 1000, 0),
            ],
        )),
        Ok(dev_sample(t0, s, 0, vec![])),
    ];
    let second: Sample = vec![
        Ok(dev_sample(
            t1,
            2 * s,
            s * 3 / 4,
            vec![
                client(100, 1000, "", 4 << 20, 150, s / 4),
                ClientUsage {
                    stream_errors: 3,
                    ..client(200, 2000, CTR, 8 << 20, 1600, s / 2)
                },
                client(300, 1000, "", 1 << 20, 7, 0),
            ],
        )),
        Err(SmiError::new(
            Errno::ENODEV,
            "GET_INFO failed: ENODEV: the device went away",
        )),
    ];
    let targets = vec![target(0), target(1)];
    let f = frame(
        &targets,
        Some(&first),
        &second,
        MEMORY_DESC,
        &mut Users::default(),
    );
    (targets, f)
}

#[test]
fn rates_come_from_two_samples() {
    let (_, f) = two_tenants();
    assert_eq!(f.interval_s, Some(2.0));
    let pids: Vec<u32> = f.procs.iter().map(|p| p.client.pid).collect();
    assert_eq!(pids, vec![200, 100, 300], "memory, largest first");
    let p = |pid| f.procs.iter().find(|p| p.client.pid == pid).unwrap();
    assert_eq!(p(200).tasks_per_s, Some(300.0));
    assert_eq!(p(100).tasks_per_s, Some(50.0));
    // Opened since the first sample: no rate yet, not its whole count as one.
    assert_eq!((p(300).tasks_per_s, p(300).util), (None, None));
    assert_eq!((p(200).util, p(100).util), (Some(50), Some(25)));
    assert_eq!(p(200).client.container_id(), Some(CTR));
    let dev = f.devices[0].state.as_ref().ok().unwrap();
    assert_eq!((dev.util, dev.stream_errors), (Some(75), Some(2)));
    assert!(f.devices[1].state.is_err());
    assert_eq!(f.exit_code(), exit::PARTIAL);
    // The first frame has no rates at all.
    let targets = vec![target(0)];
    let only = vec![Ok(dev_sample(
        Instant::now(),
        5,
        5,
        vec![client(1, 0, "", 1, 9, 9)],
    ))];
    let f = frame(&targets, None, &only, MEMORY_DESC, &mut Users::default());
    assert_eq!(f.interval_s, None);
    assert_eq!((f.procs[0].tasks_per_s, f.procs[0].util), (None, None));
    assert_eq!(f.devices[0].state.as_ref().ok().unwrap().util, None);
    // A client id reused by another process is not the same client.
    let t0 = Instant::now();
    let a = vec![Ok(dev_sample(t0, 1, 0, vec![client(1, 0, "", 1, 9, 0)]))];
    let mut reused = client(2, 0, "", 1, 20, 0);
    reused.client_id = a[0].as_ref().ok().unwrap().clients[0].client_id;
    let b = vec![Ok(dev_sample(
        t0 + Duration::from_secs(1),
        2,
        0,
        vec![reused],
    ))];
    let f = frame(&targets, Some(&a), &b, MEMORY_DESC, &mut Users::default());
    assert_eq!(f.procs[0].tasks_per_s, None);
}

#[test]
fn every_column_sorts_both_ways_with_a_stable_tie_break() {
    let (_, mut f) = two_tenants();
    let order = |f: &Frame| f.procs.iter().map(|p| p.client.pid).collect::<Vec<_>>();
    for (key, want, reversed) in [
        (SortKey::Memory, [200, 100, 300], [300, 100, 200]),
        (SortKey::Tasks, [200, 100, 300], [300, 100, 200]),
        (SortKey::Util, [200, 100, 300], [300, 100, 200]),
        (SortKey::Pid, [100, 200, 300], [300, 200, 100]),
        // No container first; equal keys by device, then pid, either way.
        (SortKey::Container, [100, 300, 200], [200, 100, 300]),
        (SortKey::Streams, [100, 200, 300], [100, 200, 300]),
    ] {
        f.resort(Sort {
            key,
            reverse: false,
        });
        assert_eq!(order(&f), want, "{key:?}");
        f.resort(Sort { key, reverse: true });
        assert_eq!(order(&f), reversed, "{key:?} reversed");
    }
    // Users by name: uids without a name sort as their numbers.
    sort_procs(
        &mut f.procs,
        Sort {
            key: SortKey::User,
            reverse: false,
        },
    );
    let users: Vec<&str> = f.procs.iter().map(|p| p.user.as_str()).collect();
    let mut sorted = users.clone();
    sorted.sort_unstable();
    assert_eq!(users, sorted);
    // `s`/`>` and `<` walk every column and wrap.
    let mut k = SortKey::Device;
    for _ in 0..SortKey::ALL.len() {
        k = k.step(1);
    }
    assert_eq!(k, SortKey::Device);
    assert_eq!(SortKey::Device.step(-1), SortKey::Streams);
}

#[test]
fn the_frame_as_text() {
    let (_, f) = two_tenants();
    let out = text(&f, 120, None);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), height_for(&f, false), "{out}");
    assert!(lines
        .iter()
        .all(|l| l.chars().count() <= 120 && l == &l.trim_end()));
    assert!(
        lines[0].starts_with("davinci-smi top  ")
            && lines[0]
                .ends_with("2 device(s), 3 process(es), rates over 2.00 s, sorted by memory ▼"),
        "{out}"
    );
    let dev0 = lines
        .iter()
        .find(|l| l.starts_with("│0   davinci_mock"))
        .unwrap();
    for want in [
        "[||||||  ]  75%",
        "[        ] 13.0 MiB/256.0 MiB",
        "41°C",
        "120.5/310 W",
        "OK",
        "shared",
    ] {
        assert!(dev0.contains(want), "{want:?} in {dev0}");
    }
    let dev1 = lines.iter().find(|l| l.starts_with("│1 ")).unwrap();
    assert!(
        dev1.starts_with("│1   unreachable: mock:/s/davinci1.sock: GET_INFO failed: ENODEV"),
        "{dev1}"
    );
    let head = lines.iter().position(|l| l.contains("PID")).unwrap();
    assert!(lines[head].contains("MEMORY▼"), "{}", lines[head]);
    let row = |i: usize| lines[head + i].split_whitespace().collect::<Vec<_>>();
    assert_eq!(
        row(1),
        [
            "│0",
            "200",
            &Users::default().name(2000),
            "3f1c2b8e9a7d",
            "proc200",
            "8.0",
            "MiB",
            "50%",
            "300.0",
            "2",
            "3",
            "│"
        ]
    );
    assert_eq!(
        row(2),
        [
            "│0",
            "100",
            &Users::default().name(1000),
            "-",
            "proc100",
            "4.0",
            "MiB",
            "25%",
            "50.0",
            "2",
            "0",
            "│"
        ]
    );
    assert_eq!(
        row(3)[1..8],
        [
            "300",
            &Users::default().name(1000),
            "-",
            "proc300",
            "1.0",
            "MiB",
            "-"
        ]
    );
    // A fixed height cuts the processes off.
    let short = text(&f, 120, Some(11));
    assert_eq!(short.lines().count(), 11, "{short}");
    assert!(
        short.contains(" 200 ") && !short.contains(" 300 "),
        "{short}"
    );
    // 80 columns: no bars, the names cut, every heading whole.
    let narrow = text(&f, 80, None);
    assert!(narrow.lines().all(|l| l.chars().count() <= 80), "{narrow}");
    assert!(
        narrow.contains("│0   davinci_mock 75%  13.0 MiB/256.0 MiB  41°C  120.5/310 W  OK"),
        "{narrow}"
    );
    for h in [
        "DEV",
        "PID",
        "USER",
        "PROCESS",
        "MEMORY▼",
        "UTIL",
        "TASKS/S",
        "STREAMS",
        "ERRORS",
    ] {
        assert!(
            narrow.contains(&format!(" {h}")) || narrow.contains(&format!("│{h}")),
            "{h}: {narrow}"
        );
    }
    assert_eq!(proc_widths(118), [3, 8, 10, 12, 15, 11, 5, 10, 8, 6]);
    assert_eq!(proc_widths(78).iter().sum::<u16>() + 9, 78);
    assert_eq!(
        (bar(0.5, 4), bar(2.0, 2), bar(-1.0, 2)),
        ("[||  ]".into(), "[||]".into(), "[  ]".into())
    );
    assert_eq!(
        [size_text(512), size_text(12 << 10), size_text(3 << 29)],
        ["512 B", "12.0 KiB", "1.5 GiB"]
    );
}

#[test]
fn keys() {
    let key = |c| KeyEvent::new(c, KeyModifiers::NONE);
    let s = MEMORY_DESC;
    let by = |key| {
        Action::Sort(Sort {
            key,
            reverse: false,
        })
    };
    assert_eq!(action(key(KeyCode::Char('q')), s), Action::Quit);
    assert_eq!(action(key(KeyCode::Esc), s), Action::Quit);
    assert_eq!(
        action(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL), s),
        Action::Quit
    );
    assert_eq!(action(key(KeyCode::Char('s')), s), by(SortKey::Util));
    assert_eq!(action(key(KeyCode::Char('>')), s), by(SortKey::Util));
    assert_eq!(action(key(KeyCode::Char('<')), s), by(SortKey::Name));
    assert_eq!(action(key(KeyCode::Char('t')), s), by(SortKey::Tasks));
    assert_eq!(action(key(KeyCode::Char('p')), s), by(SortKey::Pid));
    assert_eq!(action(key(KeyCode::Char('u')), s), by(SortKey::Util));
    assert_eq!(action(key(KeyCode::Char('m')), s), by(SortKey::Memory));
    assert_eq!(
        action(key(KeyCode::Char('r')), s),
        Action::Sort(Sort {
            key: SortKey::Memory,
            reverse: true
        })
    );
    assert_eq!(action(key(KeyCode::Char('x')), s), Action::None);
    assert_eq!(moved(None, 1, 0), None);
    assert_eq!(moved(None, 1, 5), Some(0));
    assert_eq!(moved(Some(0), -1, 5), Some(0));
    assert_eq!(moved(Some(3), 10, 5), Some(4));
    assert_eq!(moved(Some(3), isize::MIN, 5), Some(0));
    assert_eq!(moved(Some(0), isize::MAX, 5), Some(4));
    // The table shrank under the selection.
    assert_eq!(moved(Some(9), 0, 3), Some(2));
}

/// Two tenants on davinci0 whose counts grow while `top --once` waits between its samples.
fn busy_world() -> World {
    world(vec![
        (
            A,
            fake(
                0,
                vec![
                    client(100, 1000, "", 4 << 20, 10, 0),
                    client(200, 2000, CTR, 8 << 20, 10, 0),
                ],
                true,
                true,
            ),
        ),
        (B, fake(1, vec![], true, true)),
    ])
}

/// `top --once` on the fakes: the wait between the samples adds 100 tasks to each client.
fn once(w: &World, extra: &[&str]) -> (i32, String, String) {
    let dev = w.opener.devs[A].clone();
    let mut slept = Vec::new();
    let r = smi_sleeping(
        w,
        &args(&args(&BOTH, &["top", "--once"]), extra),
        &mut |d| {
            slept.push(d);
            for c in &mut dev.state.borrow_mut().clients {
                c.tasks_completed += 100;
            }
            std::thread::sleep(Duration::from_millis(20));
        },
    );
    assert_eq!(slept.len(), 1, "one wait between two samples");
    r
}

#[test]
fn once_prints_one_frame_of_text_or_json() {
    let w = busy_world();
    let (code, out, err) = once(&w, &["--interval", "250ms", "--width", "100"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("davinci-smi top  "), "{out}");
    assert!(out.lines().all(|l| l.chars().count() <= 100));
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("│0") && l.contains("proc"))
        .collect();
    assert!(
        rows[0].contains(" 200 ") && rows[1].contains(" 100 "),
        "{out}"
    );
    let w = busy_world();
    let (code, out, err) = once(&w, &["--json", "--sort", "pid"]);
    assert_eq!(code, 0, "{err}");
    let v = doc(&out);
    assert_eq!(v["command"], "top");
    assert_eq!(v["sort"]["column"], "pid");
    assert_eq!(v["sort"]["descending"], false);
    assert_eq!(v["devices"].as_array().unwrap().len(), 2);
    assert_eq!(v["devices"][0]["memory"]["used_bytes"], 12 << 20);
    let p = v["processes"].as_array().unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(
        (p[0]["pid"].as_u64(), p[1]["pid"].as_u64()),
        (Some(100), Some(200))
    );
    assert_eq!(p[1]["container_id"], CTR);
    assert_eq!(p[1]["tenant"], format!("container:{CTR}"));
    assert_eq!(p[1]["memory_bytes"], 8 << 20);
    assert_eq!(p[1]["tasks_completed"], 110);
    assert_eq!(p[1]["errors"], 0);
    for p in p {
        // 100 tasks over at least the 20 ms the fake waited.
        let r = p["tasks_per_second"].as_f64().unwrap();
        assert!(r > 0.0 && r <= 100.0 / 0.020, "{r}");
    }
    // A device that went away: the others are shown, the exit status says partial.
    w.opener.devs[B].state.borrow_mut().down = true;
    let (code, out, err) = once(&w, &[]);
    assert_eq!(code, exit::PARTIAL, "{out}");
    assert!(
        err.contains("davinci-smi: device 1: GET_INFO failed: ENODEV"),
        "{err}"
    );
    let (_, out, _) = once(&w, &["--json"]);
    let v = doc(&out);
    assert_eq!(v["exit_code"], exit::PARTIAL);
    assert_eq!(v["devices"][1]["health"], "unreachable");
    assert_eq!(v["processes"].as_array().unwrap().len(), 2);
}

#[test]
fn usage_errors() {
    let w = two();
    for (a, what) in [
        (
            &["--loop", "1", "top", "--once"][..],
            "do not apply to `top`",
        ),
        (
            &["--query", "pid", "top", "--once"],
            "do not apply to `top`",
        ),
        (
            &["top", "--once", "--interval", "5ms"],
            "must be between 10ms and 1h",
        ),
        (&["top", "--once", "--interval", "x"], "is not a duration"),
        (&["top", "--width", "100"], "--once"),
        (
            &["top", "--once", "--sort", "colour"],
            "invalid value 'colour'",
        ),
        (&["top", "--once", "-i", "7"], "no device with id 7"),
    ] {
        let (code, out, err) = smi(&w, &args(&BOTH, a));
        let want = if what.starts_with("no device") {
            exit::NOT_FOUND
        } else {
            exit::USAGE
        };
        assert_eq!((code, out.as_str()), (want, ""), "{a:?}: {err}");
        assert!(err.contains(what), "{a:?}: {err}");
    }
    let msg = assert_json_usage_error(&w, &args(&BOTH, &["top", "--json"]));
    assert!(msg.contains("needs --once"), "{msg}");
    let (code, out, _) = smi(&w, &["top", "--once", "--json"]);
    assert_eq!(code, exit::NOT_FOUND);
    assert_eq!(doc(&out)["error"]["errno"], "ENODEV");
    let (code, out, _) = smi(&w, &["top", "--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Keys: q or Esc quit") && out.contains("--once"),
        "{out}"
    );
}
