//! The `davinci-mockd` binary's audit log under a flood: refused SET_DEVICE_SHARE calls and
//! open/close cycles write a burst of lines per uid, then at most one a second, and the
//! lines plus the "similar records suppressed" counts (`suppressed=N`, the pending ones
//! written at stop) add up to every record; an admin's accepted change is always logged.
#![forbid(unsafe_code)]

mod support;

use std::time::Instant;

use davinci_mockd::daemon::{AUDIT_BURST, AUDIT_INTERVAL};
use davinci_mockd_proto::{Kind, WireRole};
use davinci_uapi::{DeviceInfo, Errno, Wire, DRIVER_CMD_GET_INFO, DRIVER_CMD_SET_DEVICE_SHARE};
use support::{field_u64, lines_with, share_arg, Mockd, Raw};

/// The most lines one (kind, uid) may write in `secs` seconds: the burst, one per interval
/// after it, and one more for an interval that began before the first record.
fn most_lines(secs: f64) -> u64 {
    u64::from(AUDIT_BURST) + (secs / AUDIT_INTERVAL.as_secs_f64()).ceil() as u64 + 1
}

/// Lines of `record` (`message`) in `log`, and the suppressed counts its "suppressed" lines
/// carry (`record=name`).
fn written_and_suppressed(log: &str, message: &str, name: &str) -> (u64, u64) {
    let written = lines_with(log, &[message]).len() as u64;
    let suppressed = lines_with(
        log,
        &["similar records suppressed", &format!("record={name}")],
    )
    .iter()
    .map(|l| field_u64(l, "suppressed").unwrap_or_else(|| panic!("no count: {l}")))
    .sum();
    (written, suppressed)
}

#[test]
fn a_flood_of_refused_sharing_changes_writes_a_burst_and_counts_the_rest() {
    const CALLS: u64 = 3000;
    // Nobody is an admin: every call is refused with EPERM.
    let mut d = Mockd::start("audit-share", &["--no-root-admin", "--no-owner-admin"]);
    let (mut c, r) = Raw::open(&d.socket(0), WireRole::Control);
    assert_eq!(r.errno, 0, "{}", r.msg);
    let t0 = Instant::now();
    let mut refuse = || {
        let (r, _) = c.call(Kind::Ioctl, DRIVER_CMD_SET_DEVICE_SHARE, share_arg(1));
        assert_eq!(r.errno, Errno::EPERM.code(), "{}", r.msg);
    };
    for _ in 0..CALLS - 1 {
        refuse();
    }
    // One more once an interval has passed: written, after the count of those before it.
    std::thread::sleep(AUDIT_INTERVAL + std::time::Duration::from_millis(50));
    refuse();
    let secs = t0.elapsed().as_secs_f64();
    drop(c);
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");

    let (written, suppressed) =
        written_and_suppressed(&log, "device sharing change refused", "share-refused");
    assert_eq!(
        written + suppressed,
        CALLS,
        "every refusal is a line or counted in one:\n{log}"
    );
    assert!(
        (u64::from(AUDIT_BURST)..=most_lines(secs)).contains(&written),
        "{written} lines in {secs:.1} s:\n{log}"
    );
    // The count is structured, says what it counts, and comes before the next line
    // written, not only at stop.
    let counts = lines_with(
        &log,
        &["similar records suppressed", "record=share-refused"],
    );
    let l = counts[0];
    let refusals = lines_with(&log, &["device sharing change refused"]);
    let (at_count, at_last) = (
        log.find(l).unwrap(),
        log.find(refusals[refusals.len() - 1]).unwrap(),
    );
    assert!(at_count < at_last, "{log}");
    let n = field_u64(l, "suppressed").unwrap();
    assert!(
        l.contains(&format!("{n} similar records suppressed")),
        "{l}"
    );
    assert!(l.contains("WARN") && l.contains("device=davinci0"), "{l}");
    let me = nix::unistd::getuid().as_raw();
    assert_eq!(field_u64(l, "uid"), Some(u64::from(me)), "{l}");
    // The whole log stays small: a few lines of start and stop besides these.
    assert!(
        log.lines().count() as u64 <= 2 * most_lines(secs) + 10,
        "{}",
        log.lines().count()
    );
}

#[test]
fn opens_and_closes_are_rate_limited_but_accepted_sharing_changes_never_are() {
    const CYCLES: u64 = 300;
    const CHANGES: u64 = 40;
    // The daemon's own user (this test's) is an admin.
    let mut d = Mockd::start("audit-open", &[]);
    let t0 = Instant::now();
    let mut first = 0;
    for i in 0..CYCLES {
        let (mut c, r) = Raw::open(&d.socket(0), WireRole::Client);
        assert_eq!(r.errno, 0, "{}", r.msg);
        if i == 0 {
            let (r, _) = c.call(Kind::Ioctl, DRIVER_CMD_GET_INFO, vec![0; DeviceInfo::SIZE]);
            assert_eq!(r.errno, 0, "{}", r.msg);
            first = DeviceInfo::decode(&r.arg).caller_id;
            assert_ne!(first, 0);
        }
        // CLOSE is answered after its line is logged.
        let (r, _) = c.call(Kind::Close, 0, Vec::new());
        assert_eq!(r.errno, 0, "{}", r.msg);
    }
    let (mut admin, r) = Raw::open(&d.socket(0), WireRole::Control);
    assert_eq!(r.errno, 0, "{}", r.msg);
    for i in 0..CHANGES {
        let (r, _) = admin.call(
            Kind::Ioctl,
            DRIVER_CMD_SET_DEVICE_SHARE,
            share_arg((i % 2) as u32),
        );
        assert_eq!(r.errno, 0, "{}", r.msg);
    }
    let secs = t0.elapsed().as_secs_f64();
    drop(admin);
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");

    for (message, name) in [
        ("client opened", "client-opened"),
        ("client closed", "client-closed"),
    ] {
        let (written, suppressed) = written_and_suppressed(&log, message, name);
        assert_eq!(written + suppressed, CYCLES, "{name}:\n{log}");
        assert!(
            written <= most_lines(secs) && suppressed > 0,
            "{name}: {written} lines in {secs:.1} s:\n{log}"
        );
        // The lines name a client by the id LIST_CLIENTS and GET_INFO report for it.
        let named = lines_with(&log, &[message])
            .into_iter()
            .filter(|l| field_u64(l, "client_id") == Some(u64::from(first)));
        assert_eq!(named.count(), 1, "{name} of client_id {first}:\n{log}");
    }
    let set = lines_with(&log, &["device sharing set device="]);
    assert_eq!(set.len() as u64, CHANGES, "every accepted change:\n{log}");
    assert!(lines_with(&log, &["record=share-"]).is_empty(), "{log}");
}
