//! The `davinci-mockd` binary's signals, read from a signalfd: the SIGUSR1 reset line and
//! the shutdown line name who sent the signal (`sender_pid`, `sender_uid`, `si_code`,
//! `sender`), and a reset by the daemon's own `--reset-after` timer says so.
#![forbid(unsafe_code)]

mod support;

use nix::sys::signal::Signal;
use support::{field_u64, Mockd};

#[test]
fn the_reset_and_shutdown_lines_name_the_process_that_sent_the_signal() {
    let mut d = Mockd::start("sig-kill", &["--devices", "2"]);
    let (me, my_uid) = (std::process::id(), nix::unistd::getuid().as_raw());
    d.signal(Signal::SIGUSR1);
    let l = d.wait_for_log("device reset");
    assert_eq!(field_u64(&l, "sender_pid"), Some(u64::from(me)), "{l}");
    assert_eq!(field_u64(&l, "sender_uid"), Some(u64::from(my_uid)), "{l}");
    assert!(
        l.contains("signal=SIGUSR1 sender=kill") && l.contains("si_code=SI_USER"),
        "{l}"
    );
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
    // One line per device, each naming the sender.
    let resets: Vec<_> = log.lines().filter(|l| l.contains("device reset")).collect();
    assert_eq!(resets.len(), 2, "{log}");
    assert!(
        resets
            .iter()
            .all(|l| l.contains(&format!("sender_pid={me} "))),
        "{log}"
    );
    let l = log
        .lines()
        .find(|l| l.contains("shutting down"))
        .unwrap_or_else(|| panic!("no shutdown line:\n{log}"));
    assert!(
        l.contains(&format!(
            "signal=SIGTERM sender=kill sender_pid={me} sender_uid={my_uid} si_code=SI_USER"
        )),
        "{l}"
    );
}

#[test]
fn a_reset_by_the_reset_after_timer_names_the_timer() {
    let mut d = Mockd::start("sig-timer", &["--reset-after", "100ms"]);
    let l = d.wait_for_log("device reset");
    let daemon = d.child.id();
    assert!(l.contains("sender=--reset-after"), "{l}");
    assert_eq!(field_u64(&l, "sender_pid"), Some(u64::from(daemon)), "{l}");
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
}
