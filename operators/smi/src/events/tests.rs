//! `events` against fake devices: the table, the JSON document, the filters, `--follow`
//! (new events once, lost ones, a restarted device, a device gone and back) and the
//! command-line checks.

use davinci_shim::EventBatch;
use davinci_uapi::{DeviceEvent, Errno};

use super::render::age_text;
use crate::exit;
use crate::tests::*;

fn ev(seq: u64, code: u32, time_ns: u64) -> DeviceEvent {
    DeviceEvent {
        seq,
        time_ns,
        code,
        ..DeviceEvent::default()
    }
}

/// A client's event: client 7, pid 4242, uid 1000, stream 0x21.
fn client_ev(seq: u64, code: u32, time_ns: u64, detail: u32, value: u64) -> DeviceEvent {
    DeviceEvent {
        client_id: 7,
        pid: 4242,
        uid: 1000,
        stream: 0x21,
        detail,
        value,
        ..ev(seq, code, time_ns)
    }
}

/// The whole log as READ_EVENTS from 0 gives it: `oldest` the first seq held.
fn log(events: Vec<DeviceEvent>, oldest: u64, now_ns: u64) -> EventBatch {
    let cursor = events.last().map_or(oldest, |e| e.seq + 1);
    EventBatch {
        events,
        cursor,
        lost: oldest,
        now_ns,
    }
}

const S: u64 = 1_000_000_000;

/// Device 0 with a start, a stopped stream and a hung task; device 1 without an event log.
fn logged() -> World {
    let w = two();
    w.opener.devs[A].state.borrow_mut().events = Some(log(
        vec![
            ev(0, 4, S),
            client_ev(1, 1, 5 * S, Errno::EFAULT.code() as u32, (2 << 32) | 17),
            client_ev(2, 2, 9 * S, 0, 3),
        ],
        0,
        10 * S,
    ));
    w
}

#[test]
fn the_table_names_and_describes_every_event() {
    let w = logged();
    let (code, out, err) = smi(&w, &args(&BOTH, &["events"]));
    // Device 1's driver has no event log: a partial result.
    assert_eq!(code, exit::PARTIAL, "{out}{err}");
    assert!(
        err.contains("device 1: READ_EVENTS failed: ENOTTY")
            && err.contains("READ_EVENTS is ABI 1.5"),
        "{err}"
    );
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("| 0 ")).collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(rows[0].contains("device_started (4)") && rows[0].contains("| 9.0s "));
    assert!(rows[1].contains("stream_stopped (1)"), "{}", rows[1]);
    assert!(
        rows[1].contains("| 7 ") && rows[1].contains("| 4242 ") && rows[1].contains("| 1000 "),
        "{}",
        rows[1]
    );
    assert!(
        rows[1].contains(
            "stream 0x21 stopped in the error state: EFAULT at command-ring index 17 (fault past_end)"
        ),
        "{}",
        rows[1]
    );
    assert!(rows[2].contains("hung_task (2)") && rows[2].contains("| 1.0s "));
    // The device's own event has no client.
    assert!(rows[0].contains("| -  "), "{}", rows[0]);
    assert!(!out.contains("no longer held"), "{out}");
}

#[test]
fn json_has_every_field_a_name_and_a_description() {
    let w = logged();
    let (code, out, _) = smi(&w, &args(&BOTH, &["events", "--json"]));
    assert_eq!(code, exit::PARTIAL);
    let v = doc(&out);
    assert_eq!(v["command"], "events");
    assert_eq!(v["exit_code"], exit::PARTIAL);
    let d0 = &v["devices"][0];
    assert_eq!(d0["health"], "ok");
    assert_eq!(d0["cursor"], 3);
    assert_eq!(d0["now_ns"], 10 * S);
    assert_eq!(d0["lost"], 0);
    let e = &d0["events"][1];
    for (k, want) in [
        ("seq", serde_json::json!(1)),
        ("time_ns", serde_json::json!(5 * S)),
        ("age_ns", serde_json::json!(5 * S)),
        ("code", serde_json::json!(1)),
        ("name", serde_json::json!("stream_stopped")),
        (
            "meaning",
            serde_json::json!("a stream stopped in the error state"),
        ),
        ("client_id", serde_json::json!(7)),
        ("pid", serde_json::json!(4242)),
        ("uid", serde_json::json!(1000)),
        ("stream", serde_json::json!(0x21)),
        ("detail", serde_json::json!(Errno::EFAULT.code())),
        ("value", serde_json::json!((2u64 << 32) | 17)),
    ] {
        assert_eq!(e[k], want, "{k}: {e}");
    }
    assert!(e["description"]
        .as_str()
        .unwrap()
        .starts_with("stream 0x21 stopped"));
    // The wall time: 5 s before the read (the document's timestamp, within a second).
    let t = e["time"].as_str().unwrap();
    assert!(t.ends_with('Z') && t.len() == 24, "{t}");
    let d1 = &v["devices"][1];
    assert_eq!(d1["health"], "unreachable");
    assert_eq!(d1["error"]["errno"], "ENOTTY");
    assert_eq!(d1["events"], serde_json::json!([]));
}

#[test]
fn codes_and_since_filter_and_unknown_codes_show_by_number() {
    let w = logged();
    {
        let mut s = w.opener.devs[A].state.borrow_mut();
        let b = s.events.as_mut().unwrap();
        b.events.push(client_ev(3, 42, 9 * S, 1, 2));
        b.cursor = 4;
    }
    let one = ["--device", A];
    let names = |a: &[&str]| -> Vec<(u64, serde_json::Value)> {
        let (code, out, err) = smi(&w, &args(&one, a));
        assert_eq!(code, 0, "{a:?}: {out}{err}");
        doc(&out)["devices"][0]["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["seq"].as_u64().unwrap(), e["name"].clone()))
            .collect()
    };
    assert_eq!(
        names(&["events", "--json", "--code", "hung_task,1"]),
        [(1, "stream_stopped".into()), (2, "hung_task".into())]
    );
    assert_eq!(
        names(&["events", "--json", "--code", "HUNG_TASK", "--code", "4"]),
        [(0, "device_started".into()), (2, "hung_task".into())]
    );
    assert_eq!(
        names(&["events", "--json", "--since", "2"]),
        [(2, "hung_task".into()), (3, serde_json::Value::Null)]
    );
    let (_, out, _) = smi(&w, &args(&one, &["events", "--code", "42"]));
    assert!(out.contains("| code 42 "), "{out}");
    assert!(
        out.contains("event code 42 (stream 0x21, detail 1, value 2)"),
        "{out}"
    );
    // Nothing matches.
    let (code, out, _) = smi(&w, &args(&one, &["events", "--code", "quota_storm"]));
    assert_eq!((code, out.as_str()), (0, "No events.\n"));
}

#[test]
fn events_the_log_no_longer_holds_are_counted() {
    let w = two();
    w.opener.devs[A].state.borrow_mut().events = Some(log(vec![ev(300, 3, S)], 300, 2 * S));
    let (code, out, _) = smi(&w, &["--device", A, "events"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("device 0: 300 earlier events no longer held (the log keeps the last 256)"),
        "{out}"
    );
    // --since 290: ten of the wanted ones are gone.
    let (_, out, _) = smi(&w, &["--device", A, "events", "--since", "290", "--json"]);
    assert_eq!(doc(&out)["devices"][0]["lost"], 10);
}

#[test]
fn follow_prints_each_event_once_and_says_what_happened_to_the_log() {
    let w = logged();
    let state = std::rc::Rc::clone(&w.opener.devs[A].state);
    let mut round = 0;
    let mut sleeps = Vec::new();
    let (code, out, err) = smi_sleeping(
        &w,
        &[
            "--device",
            A,
            "events",
            "--follow",
            "--interval",
            "100ms",
            "--count",
            "5",
        ],
        &mut |d| {
            sleeps.push(d);
            round += 1;
            let mut s = state.borrow_mut();
            match round {
                // A new event.
                1 => {
                    s.events = Some(log(
                        vec![ev(0, 4, S), client_ev(3, 7, 11 * S, 2, 0)],
                        0,
                        12 * S,
                    ))
                }
                // The log dropped 4 before it was read.
                2 => s.events = Some(log(vec![client_ev(5, 6, 13 * S, 1, 0x40)], 5, 14 * S)),
                // The daemon went away ...
                3 => s.down = true,
                // ... and came back: a new log.
                _ => {
                    s.down = false;
                    s.events = Some(log(vec![ev(0, 4, S / 2)], 0, S));
                }
            }
        },
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(sleeps, vec![std::time::Duration::from_millis(100); 4]);
    let seqs: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("Z  "))
        .map(|l| l.split_whitespace().nth(3).unwrap())
        .collect();
    assert_eq!(
        seqs,
        [
            "device_started",
            "stream_stopped",
            "hung_task",
            "injected_fault",
            "import_revoked",
            "device_started"
        ],
        "{out}"
    );
    assert!(out.starts_with("TIME (UTC)"), "{out}");
    assert!(out.contains("device 0: 1 event lost"), "{out}");
    assert!(out.contains("device 0: answers again"), "{out}");
    assert!(
        out.contains("device 0: the device restarted: its event log begins again"),
        "{out}"
    );
    assert!(
        out.contains("the imported memory 0x40 was revoked"),
        "{out}"
    );
    // The error once, on stderr.
    assert_eq!(err.matches("ENODEV").count(), 1, "{err}");
}

#[test]
fn follow_json_is_a_document_per_read_with_news() {
    let w = logged();
    let state = std::rc::Rc::clone(&w.opener.devs[A].state);
    let mut round = 0;
    let (code, out, _) = smi_sleeping(
        &w,
        &[
            "--device",
            A,
            "events",
            "-f",
            "--json",
            "--count",
            "4",
            "--code",
            "hung_task",
        ],
        &mut |_| {
            round += 1;
            if round == 2 {
                let mut s = state.borrow_mut();
                let b = s.events.as_mut().unwrap();
                b.events.push(client_ev(3, 1, 11 * S, 5, 0));
                b.events.push(client_ev(4, 2, 11 * S, 0, 9));
                b.cursor = 5;
            }
        },
    );
    assert_eq!(code, 0);
    let docs: Vec<serde_json::Value> = out.lines().map(doc).collect();
    // The first read (every device), then the read with a new hung task; none for the reads
    // with nothing new, nor for the stream_stopped --code leaves out.
    assert_eq!(docs.len(), 2, "{out}");
    let seqs = |d: &serde_json::Value| -> Vec<u64> {
        d["devices"][0]["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(seqs(&docs[0]), [2]);
    assert_eq!(seqs(&docs[1]), [4]);
    assert_eq!(docs[1]["devices"][0]["events"][0]["value"], 9);
}

#[test]
fn command_line_checks() {
    let w = logged();
    for (a, want) in [
        (&["events", "--interval", "1s"][..], "--follow"),
        (&["events", "--count", "2"], "--follow"),
        (&["events", "--code", "hung"], "not an event code"),
        (&["events", "--code", "0"], "codes start at 1"),
        (&["events", "-f", "--interval", "1ms"], "1ms"),
        (&["--loop", "1", "events"], "events --follow"),
    ] {
        let (code, out, err) = smi(&w, &args(&["--device", A], a));
        assert_eq!(code, exit::USAGE, "{a:?}: {out}{err}");
        assert!(err.contains(want), "{a:?}: {err}");
        let msg = assert_json_usage_error(&w, &args(&["--device", A, "--json"], a));
        assert!(msg.contains(want), "{a:?}: {msg}");
    }
    let (code, out, _) = smi(&w, &["events", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("2 hung_task"), "{out}");
    assert!(out.contains("anyone else sees the device's own"), "{out}");
    // No device: the command fails as a whole.
    let (code, out, _) = smi(&w, &["--device", "mock:/nope.sock", "events", "--json"]);
    assert_eq!(code, exit::NOT_FOUND);
    assert_eq!(doc(&out)["command"], "events");
}

#[test]
fn ages_read_as_people_say_them() {
    assert_eq!(age_text(850_000_000), "850ms");
    assert_eq!(age_text(12_500_000_000), "12.5s");
    assert_eq!(age_text(245 * S), "4m05s");
    assert_eq!(age_text((3 * 3600 + 7 * 60) * S), "3h07m");
    assert_eq!(age_text((2 * 86_400 + 4 * 3600) * S), "2d04h");
}
