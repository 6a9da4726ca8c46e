//! The whole mock device, stateful: a real [`MockDevice`] (memfds, its poller thread, the
//! reader-writer lock: control path exclusive, pollers shared) in shared mode with up to
//! [`MAX_CLIENTS`] clients at a time, and an arbitrary sequence of what clients do: opens and
//! closes, ioctls (structured, and raw request numbers with any bytes, through a
//! [`UserMem`](davinci_mock_device::UserMem) that faults outside a small buffer), mmaps of any
//! cookie, streams created and destroyed, descriptors written into a stream's command ring
//! through the client's own mapping (valid ones, hostile ones aimed at another client's
//! memory or anywhere, raw slot bytes), hostile ring-header words, doorbell kicks (the futex
//! word, as the shim rings it) and NOTIFY, SUBMIT_TASK, reaping the event ring, bounded
//! waits.
//!
//! Every client owns a `work` allocation (its descriptors' target) and a `guard` allocation
//! that none of its own descriptors writes: half canary (filled once through its own mapping),
//! half checked by [`Op::Check`] (a FILL through a private stream, awaited with a deadline,
//! read back through its own mapping).
//!
//! Asserts: no panic; after every step the accounting adds up (`memory_used` = the clients'
//! memory, at most the device's; GET_INFO's `clients` = the clients attached), every client's
//! canary reads back unchanged through its own mapping (no other client's descriptor, nor
//! anything else, changed it); a completion record whose descriptor touched another client's
//! memory never reports success; mmaps resolve only for the caller's own objects;
//! [`Op::Check`] completes with status 0 within its deadline and reads back exactly; after
//! every client is closed: memory used 0, no clients, `MockDevice::workers()` 0 (polled with
//! a deadline, never a sleep).
//!
//! The parts: `input` (the ops), `clients` (a client's allocations, streams and mappings),
//! `state` (the harness's state, descriptors from ops), `actions` (each op applied),
//! `checks` (the assertions after each step); [`run`] here.
#![forbid(unsafe_code)]

mod actions;
mod checks;
mod clients;
mod input;
mod state;

use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use davinci_mock_device::{local_open_params, MockConfig, MockDevice, Role};
use davinci_uapi::*;

pub use clients::MAX_CLIENTS;
pub use input::{Desc, Op, Target};

use checks::DEADLINE;
use clients::{call, User};
use state::State;

const MAX_OPS: usize = 64;

/// One input.
pub fn run(data: &[u8]) {
    let Ok(ops) = <Vec<Op>>::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let dev = MockDevice::new(MockConfig {
        memory_size: 16 << 20,
        pollers: 1,
        // An idle poller sleeps soon (the host side of the harness is single-threaded).
        idle_spin: Duration::from_micros(50),
        ..MockConfig::default()
    });
    // Shared, so several clients attach (through an admin control open, as davinci-smi does).
    let ctl = dev
        .open(local_open_params(Role::Control, true))
        .expect("control open");
    let mut share = DeviceShareArgs {
        mode: ShareMode::Shared as u32,
        ..Default::default()
    };
    call(&dev, ctl, DRIVER_CMD_SET_DEVICE_SHARE, &mut share).expect("shared mode");
    dev.close(ctl);
    let mut st = State {
        dev,
        clients: Vec::new(),
        opened: 0,
        user: User {
            mem: vec![0; 65536],
        },
        seq: 0,
    };
    st.open();
    for op in ops.into_iter().take(MAX_OPS) {
        st.step(op);
        st.invariants();
    }
    // Every client's check runs once more (the device still serves everyone), then all close.
    for me in 0..st.clients.len() {
        st.check(me);
    }
    st.invariants();
    let clients: Vec<u32> = st.clients.iter().map(|c| c.client).collect();
    for client in clients {
        st.dev.close(client);
    }
    let info = st.dev.info();
    assert_eq!(info.memory_used, 0, "memory left after every client closed");
    assert_eq!(info.clients, 0);
    let start = Instant::now();
    while st.dev.workers() != 0 {
        assert!(
            start.elapsed() < DEADLINE,
            "{} streams still served after every client closed",
            st.dev.workers()
        );
        std::thread::yield_now();
    }
    // The clients' mappings of their memory outlive them, but a closed client's allocations
    // are truncated to nothing (issue 41: a stale mapping dies of SIGBUS, as on the kernel;
    // conformance `a_revoked_exports_stale_mappings_die_of_sigbus_on_both_sides`), so the
    // harness no longer reads them here.
}
