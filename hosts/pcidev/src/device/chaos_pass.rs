//! The chaos device's end of a pass (`--chaos`, [`crate::chaos`]): what the chaos layer
//! queued that needs the server or BAR2.
#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;

use davinci_hwif::bytes::bytes_to_words;
use davinci_hwif::layout::{
    DeviceState, HEARTBEAT_OFFSET, NOTIFY_OFFSET, NOTIFY_WORDS, STATE_OFFSET,
};
use davinci_hwif::{VECTOR_ADMIN, VECTOR_DATA};

use std::collections::BTreeSet;

use davinci_driver_core::DeviceCore;

use super::PciDevice;
use crate::chaos::{Chaos, PassAct};
use crate::platform::Bar2Platform;

impl PciDevice {
    /// The chaos layer's summary line (`None` for an honest device).
    pub fn chaos_summary(&self) -> Option<String> {
        self.chaos.as_ref().map(Chaos::summary)
    }

    /// The chaos layer's end-of-pass mutations: floods, notification words, the heartbeat,
    /// BAR2's header (and putting it back), unsolicited completions.
    pub(super) fn chaos_pass(&mut self) {
        let Some(c) = self.chaos.as_mut() else {
            return;
        };
        let acts = c.take_pass_acts();
        let restore = c.header_restore_due(std::time::Instant::now());
        let m = self.bar2.mapping();
        if restore {
            // The header as written at start, but the live heartbeat and state words.
            let mut keep = [0u8; 8];
            let _ = m.read(STATE_OFFSET, &mut keep);
            let mut h = self.header;
            if let Some(d) = h.get_mut(STATE_OFFSET as usize..STATE_OFFSET as usize + 8) {
                d.copy_from_slice(&keep);
            }
            // The state: Ready, unless the device failed for real.
            let state = if self.admin.is_some() {
                DeviceState::Ready
            } else {
                DeviceState::Failed
            };
            if let Some(d) = h.get_mut(STATE_OFFSET as usize..STATE_OFFSET as usize + 4) {
                d.copy_from_slice(&state.word().to_le_bytes());
            }
            let _ = m.write(0, &h);
        }
        for act in acts {
            match act {
                PassAct::Flood { vector, times } => {
                    for _ in 0..times {
                        self.raise(vector);
                    }
                }
                PassAct::Notify(words) => {
                    for (i, v) in words {
                        let at = NOTIFY_OFFSET + u64::from(i % NOTIFY_WORDS) * 4;
                        if let Ok(w) = self.bar2.mapping().word(at) {
                            w.store(v, Ordering::Release);
                        }
                    }
                    self.raise(VECTOR_DATA);
                }
                PassAct::NotifyBumpAll => {
                    for i in 0..NOTIFY_WORDS {
                        let at = NOTIFY_OFFSET + u64::from(i) * 4;
                        if let Ok(w) = self.bar2.mapping().word(at) {
                            w.fetch_add(1, Ordering::Release);
                        }
                    }
                    self.raise(VECTOR_DATA);
                }
                PassAct::HeartbeatRewind(by) => {
                    if let Ok(w) = self.bar2.mapping().word(HEARTBEAT_OFFSET) {
                        w.fetch_sub(by, Ordering::Relaxed);
                    }
                }
                PassAct::HeaderGarbage(bytes) => {
                    for (at, b) in bytes {
                        let _ = self.bar2.mapping().write(at, &[b]);
                    }
                }
                PassAct::Unsolicited(slot) => {
                    let Some(a) = self.admin.as_mut() else {
                        continue;
                    };
                    if matches!(a.cq.free(), Ok(f) if f > 0) {
                        let _ = a.cq.push(&bytes_to_words(&slot[..]));
                        a.cq.publish();
                        self.raise(VECTOR_ADMIN);
                    }
                }
            }
        }
    }
}

/// The chaos device's revival: a guest that lost it re-probes and writes `reset` to the
/// module's inject parameter (an INJECT); every client it had is nobody's now (the module
/// forgot them without a CLOSE), so they are closed. Nothing when `on` (chaos) is false.
pub(super) fn revival(
    on: bool,
    core: &mut DeviceCore<Bar2Platform>,
    clients: &mut BTreeSet<u32>,
    op: &davinci_hwif::AdminOp,
) {
    if !on
        || !matches!(op, davinci_hwif::AdminOp::Inject { .. })
        || op.inject_text().trim() != "reset"
    {
        return;
    }
    let n = clients.len();
    for client in std::mem::take(clients) {
        core.close(client);
        core.platform_mut().forget_client(client);
    }
    eprintln!("davinci-pcidev: chaos: INJECT reset (the guest re-probed): closed {n} clients");
}
