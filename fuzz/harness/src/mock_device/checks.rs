//! What must hold ([`State`]'s checks): no completion of a descriptor marked foreign reports
//! success; a client's checked FILL through its private stream completes cleanly within
//! [`DEADLINE`] and reads back; after every step the accounting adds up and every canary is
//! unchanged.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_uapi::*;

use super::clients::{call, CANARY_LEN, GUARD};
use super::state::{State, FOREIGN};

/// Longest a step waits for the device (a correct device takes microseconds).
pub(super) const DEADLINE: Duration = Duration::from_secs(10);

impl State {
    pub(super) fn check_records(recs: &[EventRecord]) {
        for r in recs {
            if r.user_data & FOREIGN != 0 {
                assert_ne!(
                    r.status, 0,
                    "a descriptor touching another client's memory succeeded: {r:?}"
                );
            }
        }
    }

    pub(super) fn check(&mut self, me: usize) {
        let c = &mut self.clients[me];
        c.checks += 1;
        let pattern = 0x5eed_0000 | c.checks;
        let area = c.guard.dev_addr + CANARY_LEN;
        let d = TaskDesc::fill(
            u64::from(c.checks) << 1,
            DevAddr(area),
            GUARD - CANARY_LEN,
            pattern,
        );
        let mut sub = SubmitTaskArgs {
            stream: c.check.handle,
            desc: d,
            ..Default::default()
        };
        call(&self.dev, c.client, DRIVER_CMD_SUBMIT_TASK, &mut sub)
            .unwrap_or_else(|e| panic!("check: SUBMIT_TASK failed: {e:?}"));
        c.check.pushed += 1;
        c.check.tail = c.check.tail.wrapping_add(1);
        let start = Instant::now();
        let mut recs = Vec::new();
        while recs.is_empty() {
            assert!(
                start.elapsed() < DEADLINE,
                "check: no completion within {DEADLINE:?}"
            );
            let mut w = WaitEventArgs {
                kind: WaitKind::Stream as u32,
                handle: c.check.handle,
                value: c.check.pushed,
                timeout_ns: 100_000_000,
                ..Default::default()
            };
            let _ = call(&self.dev, c.client, DRIVER_CMD_WAIT_EVENT, &mut w);
            recs = c.check.reap();
        }
        assert_eq!(recs.len(), 1, "check: one completion per descriptor");
        assert_eq!(
            (recs[0].user_data, recs[0].status, recs[0].result),
            (d.user_data, 0, GUARD - CANARY_LEN),
            "check: the FILL did not complete cleanly"
        );
        let mut b = vec![0u8; (GUARD - CANARY_LEN) as usize];
        c.guard_map.read(CANARY_LEN, &mut b).expect("check area");
        assert!(
            b.chunks_exact(4)
                .all(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) == pattern),
            "check: the FILL did not read back"
        );
    }

    /// The invariants that hold after every step.
    pub(super) fn invariants(&self) {
        let info = self.dev.info();
        let clients = self.dev.clients();
        assert!(info.memory_used <= info.memory_size);
        let sum: u64 = clients.iter().map(|c| c.memory_bytes).sum();
        assert_eq!(sum, info.memory_used, "client memory does not add up");
        assert_eq!(info.clients as usize, self.clients.len());
        assert_eq!(clients.len(), self.clients.len());
        for c in &self.clients {
            let mut b = vec![0u8; CANARY_LEN as usize];
            c.guard_map.read(0, &mut b).expect("canary");
            assert!(
                b.chunks_exact(4)
                    .all(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) == c.canary),
                "client {}'s canary changed",
                c.client
            );
        }
    }
}
