//! Events: CREATE_EVENT and DESTROY_EVENT. Recording and waiting are the engine's
//! (EVENT_RECORD/EVENT_WAIT descriptors) and dispatch's (WAIT_EVENT).

use super::clients::Holding;
use super::entries::{EventEntry, EventValue};
use super::DeviceCore;
use crate::error::{ensure, fail, Result};
use crate::platform::{Lock, Platform};

impl<P: Platform> DeviceCore<P> {
    /// CREATE_EVENT.
    pub fn create_event(&mut self, client: u32, ctx: u32, flags: u32) -> Result<u32> {
        self.require_client(client)?;
        ensure!(flags == 0, EINVAL, "event flags must be 0");
        self.own_context(client, ctx)?;
        self.within_quota(client, Holding::Events)?;
        let h = self.events.insert(
            EventEntry {
                owner: client,
                ctx,
                state: P::Lock::new(EventValue {
                    value: 0,
                    poisoned: None,
                }),
            },
            "event table is full",
        )?;
        self.client_mut(client)?.events += 1;
        Ok(h)
    }

    /// DESTROY_EVENT. Streams waiting on it complete their wait with `ECANCELED`.
    pub fn destroy_event(&mut self, client: u32, event: u32) -> Result<()> {
        match self.events.get(event) {
            Some(e) if e.owner == client => {}
            _ => fail!(ENOENT, "no such event for this client"),
        }
        self.events.remove(event);
        self.client_mut(client)?.events -= 1;
        self.platform.notify_waiters(client);
        Ok(())
    }
}
