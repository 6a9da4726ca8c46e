//! Events: CREATE_EVENT and DESTROY_EVENT, and events shared between clients (ABI 1.5):
//! EXPORT_EVENT names one of a client's events by a token with a grant (as EXPORT_MEMORY
//! does), IMPORT_EVENT gives a granted client a handle of its own to wait on: its streams'
//! EVENT_WAIT descriptors and its WAIT_EVENT calls read the exporter's value; only the
//! exporter records it. The exporter's DESTROY_EVENT (or close) revokes every import: waits on
//! it end with `ECANCELED`, now and later. Recording and waiting are the engine's
//! (EVENT_RECORD/EVENT_WAIT descriptors) and dispatch's (WAIT_EVENT).

use davinci_uapi::{ExportEventArgs, ImportEventArgs, EXPORT_OWN_UID};

use super::clients::Holding;
use super::entries::{EventEntry, EventExportEntry, EventImport, EventValue};
use super::DeviceCore;
use crate::error::{ensure, fail, Result};
use crate::limits::MAX_IMPORTERS;
use crate::platform::{Lock, Platform};

impl<P: Platform> DeviceCore<P> {
    /// CREATE_EVENT.
    pub fn create_event(&mut self, client: u32, ctx: u32, flags: u32) -> Result<u32> {
        self.require_client(client)?;
        ensure!(flags == 0, EINVAL, "event flags must be 0");
        self.own_context(client, ctx)?;
        self.within_quota(client, Holding::Events)?;
        let h = self
            .events
            .insert(new_event(client, ctx, None), "event table is full")?;
        self.client_mut(client)?.events += 1;
        Ok(h)
    }

    /// DESTROY_EVENT. Streams waiting on it complete their wait with `ECANCELED`; of an
    /// exported event, so do the waits on its imports (their clients are woken); of an
    /// import, the import ends (the exporter's event goes on).
    pub fn destroy_event(&mut self, client: u32, event: u32) -> Result<()> {
        match self.events.get(event) {
            Some(e) if e.owner == client => {}
            _ => fail!(ENOENT, "no such event for this client"),
        }
        let Some(e) = self.events.remove(event) else {
            fail!(ENOENT, "no such event for this client");
        };
        if let Some(i) = e.import {
            let origin = self.events.get(i.origin).map_or(0, |o| o.export);
            if let Some(x) = self.event_exports.get_mut(origin) {
                for h in x.imports.iter_mut().filter(|h| **h == event) {
                    *h = 0;
                }
            }
        }
        if let Some(x) = self.event_exports.remove(e.export) {
            // Every importer's waiters and blocked streams look again: the import is revoked.
            for h in x.imports.into_iter().filter(|&h| h != 0) {
                if let Some(owner) = self.events.get(h).map(|i| i.owner) {
                    self.platform.notify_waiters(owner);
                    self.log_event(
                        owner,
                        crate::observe::Event {
                            code: davinci_uapi::DEVICE_EVENT_IMPORT_REVOKED,
                            detail: 2,
                            value: u64::from(h),
                            ..Default::default()
                        },
                    );
                }
            }
        }
        self.client_mut(client)?.events -= 1;
        self.platform.notify_waiters(client);
        Ok(())
    }

    /// EXPORT_EVENT: `args.handle`, `uid`, `client` (the importer's `client_id`) and `flags`
    /// in, `token` out.
    pub fn export_event(&mut self, client: u32, args: &mut ExportEventArgs) -> Result<()> {
        self.require_client(client)?;
        ensure!(args.flags == 0, EINVAL, "event export flags must be 0");
        let own_uid = self.client_mut(client)?.params.uid;
        let uid = if args.uid == EXPORT_OWN_UID {
            own_uid
        } else {
            args.uid
        };
        let (imported, export) = match self.events.get(args.handle) {
            Some(e) if e.owner == client => (e.import.is_some(), (e.export, e.export_serial)),
            _ => fail!(ENOENT, "no such event for this client"),
        };
        ensure!(
            !imported,
            EINVAL,
            "an imported event cannot be exported again (its owner exports it)"
        );
        if let Some(x) = self.event_exports.get(export.0) {
            ensure!(
                x.uid == uid && x.client_id == args.client,
                EBUSY,
                "the event is exported already, to another user or client (one export per \
                 event: destroy it, or export another event)"
            );
            args.token = token(args.handle, export.1);
            return Ok(());
        }
        // An event export is an export: the tenant's export quota and the device's count
        // take it with the memory exports.
        self.within_quota(client, Holding::Exports)?;
        let x = self.event_exports.insert(
            EventExportEntry {
                owner: client,
                uid,
                client_id: args.client,
                imports: [0; MAX_IMPORTERS],
            },
            "event export table is full (at most 256 exported events on a device: destroy \
             some)",
        )?;
        self.export_serial = self.export_serial.wrapping_add(1).max(1);
        let serial = self.export_serials.apply(self.export_serial);
        if let Some(e) = self.events.get_mut(args.handle) {
            e.export = x;
            e.export_serial = serial;
        }
        args.token = token(args.handle, serial);
        Ok(())
    }

    /// IMPORT_EVENT: `args.token`, `ctx` and `flags` in, `handle` out.
    pub fn import_event(&mut self, client: u32, args: &mut ImportEventArgs) -> Result<()> {
        self.require_client(client)?;
        ensure!(
            args.flags == 0 && args.pad == 0,
            EINVAL,
            "event import flags and pad must be 0"
        );
        self.own_context(client, args.ctx)?;
        let (uid, client_id) = {
            let c = self.client_mut(client)?;
            (c.params.uid, c.client_id)
        };
        let origin = args.token as u32;
        let serial = (args.token >> 32) as u32;
        // One answer for "no such token" and "not yours", as for memory.
        let grant = self
            .events
            .get(origin)
            .filter(|e| e.export_serial != 0 && e.export_serial == serial)
            .and_then(|e| Some((e.owner, e.export, self.event_exports.get(e.export)?)));
        let (owner, export, free_slot, again) = match grant {
            Some((owner, export, x))
                if x.uid == uid && (x.client_id == 0 || x.client_id == client_id) =>
            {
                let again = x
                    .imports
                    .iter()
                    .any(|&h| h != 0 && self.events.get(h).is_some_and(|i| i.owner == client));
                (owner, export, x.imports.contains(&0), again)
            }
            _ => fail!(
                ENOENT,
                "no event export with this token for this client (unknown, destroyed, or \
                 granted to another user or client)"
            ),
        };
        ensure!(
            owner != client,
            EINVAL,
            "the token names an event of this client: use its own handle"
        );
        ensure!(
            !again,
            EBUSY,
            "this client imported the event already: use that handle"
        );
        ensure!(
            free_slot,
            ENOSPC,
            "the event export has as many imports as it may (8): one must be destroyed first"
        );
        self.within_quota(client, Holding::Events)?;
        let h = self.events.insert(
            new_event(client, args.ctx, Some(EventImport { origin, serial })),
            "event table is full",
        )?;
        if let Some(slot) = self
            .event_exports
            .get_mut(export)
            .and_then(|x| x.imports.iter_mut().find(|s| **s == 0))
        {
            *slot = h;
        }
        self.client_mut(client)?.events += 1;
        args.handle = h;
        Ok(())
    }
}

/// A new event of `owner` in `ctx` at value 0: its own, or an import of another's.
fn new_event<P: Platform>(owner: u32, ctx: u32, import: Option<EventImport>) -> EventEntry<P> {
    EventEntry {
        owner,
        ctx,
        state: P::Lock::new(EventValue {
            value: 0,
            poisoned: None,
        }),
        import,
        export: 0,
        export_serial: 0,
    }
}

/// An event export's token: its serial above the event's handle (as memory's).
fn token(event: u32, serial: u32) -> u64 {
    (u64::from(serial) << 32) | u64::from(event)
}
