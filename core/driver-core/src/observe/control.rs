//! TRACE and READ_EVENTS (the control path), and the events the control path logs.

use davinci_uapi::*;

use super::{decode_event, decode_trace, encode_event, Event, Tracer, Who, TRACE_BUFFERS};
use crate::dispatch::{List, Reply, UserMem};
use crate::error::{ensure, fail, QuotaKind, Result};
use crate::platform::Platform;
use crate::DeviceCore;

/// The trace buffer an admin's DEVICE scope records into; the others are one per tracing
/// client, at most one per tenant.
const DEVICE_BUFFER: usize = 0;

/// Who holds a trace buffer, and whether it records.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TraceSlot {
    /// The client (table handle) that holds it; 0: free. The device buffer: unused.
    pub(crate) owner: u32,
    /// Its owner's tenant (a tenant holds at most one buffer).
    pub(crate) tenant: u32,
    /// Records now.
    pub(crate) recording: bool,
}

/// A client's share of the observation state: its buffer, whether it traces the device, and
/// its quota refusals in the current one-second window (QUOTA_STORM).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ClientObserve {
    /// 1 + its trace buffer's index; 0: none.
    pub(crate) buffer: u8,
    /// It traces the device (an admin's DEVICE scope).
    pub(crate) device: bool,
    /// Start of the refusal window, refusals in it, and whether it was reported.
    pub(crate) window_ns: u64,
    pub(crate) refusals: u32,
    pub(crate) stormed: bool,
}

const WINDOW_NS: u64 = 1_000_000_000;

fn quota_kind_code(k: QuotaKind) -> u32 {
    match k {
        QuotaKind::Memory => QUOTA_KIND_MEMORY,
        QuotaKind::Contexts => QUOTA_KIND_CONTEXTS,
        QuotaKind::Streams => QUOTA_KIND_STREAMS,
        QuotaKind::Events => QUOTA_KIND_EVENTS,
        QuotaKind::Allocations => QUOTA_KIND_ALLOCATIONS,
        QuotaKind::Exports => QUOTA_KIND_EXPORTS,
        QuotaKind::Opens => QUOTA_KIND_OPENS,
    }
}

impl<P: Platform> DeviceCore<P> {
    /// Who `client` is, for its events (the device's own: all 0).
    pub(crate) fn who(&self, client: u32) -> Who {
        self.clients.get(client).map_or(Who::default(), |c| Who {
            client_id: c.client_id,
            pid: c.params.pid,
            uid: c.params.uid,
        })
    }

    /// Logs an event of `client` (0: the device's own) now.
    pub(crate) fn log_event(&self, client: u32, e: Event) {
        let who = if client == 0 {
            Who::default()
        } else {
            self.who(client)
        };
        self.event_log
            .push(encode_event(self.platform.now_ns(), who, e));
    }

    /// What the data path records a pass of `stream` (owned by `owner`) into.
    pub(crate) fn tracer(&self, owner: u32, stream: u32) -> Tracer<'_> {
        let c = self.clients.get(owner);
        let own = c
            .map_or(0, |c| c.observe.buffer as usize)
            .checked_sub(1)
            .filter(|&b| self.trace_slots.get(b).is_some_and(|s| s.recording))
            .and_then(|b| self.platform.trace_logs().get(b));
        let device = self
            .platform
            .trace_logs()
            .get(DEVICE_BUFFER)
            .filter(|_| self.trace_slots[DEVICE_BUFFER].recording);
        Tracer {
            own,
            device,
            log: &self.event_log,
            who: c.map_or(Who::default(), |c| Who {
                client_id: c.client_id,
                pid: c.params.pid,
                uid: c.params.uid,
            }),
            stream,
        }
    }

    /// A request of `client` was refused by its quota: counted in a one-second window; the
    /// `QUOTA_STORM_REFUSALS`th refusal in a window logs one QUOTA_STORM.
    pub(crate) fn note_refusal(&mut self, client: u32, kind: QuotaKind) {
        let now = self.platform.now_ns();
        let Some(c) = self.clients.get_mut(client) else {
            return;
        };
        let o = &mut c.observe;
        if now.saturating_sub(o.window_ns) >= WINDOW_NS {
            *o = ClientObserve {
                window_ns: now,
                refusals: 0,
                stormed: false,
                ..*o
            };
        }
        o.refusals = o.refusals.saturating_add(1);
        if o.refusals >= QUOTA_STORM_REFUSALS && !o.stormed {
            o.stormed = true;
            let value = u64::from(o.refusals);
            self.log_event(
                client,
                Event {
                    code: DEVICE_EVENT_QUOTA_STORM,
                    detail: quota_kind_code(kind),
                    value,
                    ..Event::default()
                },
            );
        }
    }

    /// The trace and event state of a closing `client` goes.
    pub(crate) fn observe_close(&mut self, client: u32) {
        let Some(c) = self.clients.get(client) else {
            return;
        };
        let o = c.observe;
        if let Some(b) = (o.buffer as usize).checked_sub(1) {
            self.trace_slots[b] = TraceSlot::default();
        }
        if o.device {
            self.device_tracers = self.device_tracers.saturating_sub(1);
            self.trace_slots[DEVICE_BUFFER].recording = self.device_tracers > 0;
        }
    }

    /// TRACE and READ_EVENTS.
    pub(crate) fn observe(
        &mut self,
        client: u32,
        request: u32,
        arg: &mut [u8],
        user: &mut dyn UserMem,
    ) -> Result<Reply> {
        if request == DRIVER_CMD_TRACE {
            let mut a = TraceArgs::from_bytes(arg).ok_or_else(bad_size)?;
            self.trace(client, &mut a, user)?;
            a.encode(arg);
        } else {
            let mut a = ReadEventsArgs::from_bytes(arg).ok_or_else(bad_size)?;
            self.read_events(client, &mut a, user)?;
            a.encode(arg);
        }
        Ok(Reply::Done)
    }

    fn trace(&mut self, client: u32, a: &mut TraceArgs, user: &mut dyn UserMem) -> Result<()> {
        ensure!(a.pad == 0, EINVAL, "pad must be 0");
        let Some(c) = self.clients.get(client) else {
            fail!(ENODEV, "client is not attached");
        };
        let (admin, tenant, o) = (c.params.admin, c.tenant, c.observe);
        a.now_ns = self.platform.now_ns();
        let device = match a.scope {
            TRACE_SCOPE_CLIENT => {
                self.require_client(client)?;
                false
            }
            TRACE_SCOPE_DEVICE => {
                ensure!(
                    admin,
                    EPERM,
                    "tracing the whole device needs an admin (the kernel driver: CAP_SYS_ADMIN; davinci-mockd: root, the daemon's own user, --admin-uid or an --admin-group member); trace your own streams with scope CLIENT"
                );
                true
            }
            _ => fail!(
                EINVAL,
                "scope must be 1 (CLIENT: own streams) or 2 (DEVICE: admin)"
            ),
        };
        if a.op != TRACE_OP_READ {
            ensure!(
                a.buf == 0 && a.capacity == 0 && a.entry_size == 0,
                EINVAL,
                "buf, capacity and entry_size must be 0 unless op is READ (3)"
            );
        }
        let own = (o.buffer as usize).checked_sub(1);
        ensure!(
            self.platform.trace_logs().len() >= TRACE_BUFFERS,
            ENOTTY,
            "this device's host keeps no trace buffers (GET_INFO has no DAVINCI_FEAT_TRACE)"
        );
        match a.op {
            TRACE_OP_START if device => {
                if !o.device {
                    if self.device_tracers == 0 && !self.trace_slots[DEVICE_BUFFER].recording {
                        self.platform.trace_logs()[DEVICE_BUFFER].restart();
                    }
                    self.device_tracers += 1;
                    self.client_mut(client)?.observe.device = true;
                }
                self.trace_slots[DEVICE_BUFFER].recording = true;
                a.cursor = self.platform.trace_logs()[DEVICE_BUFFER].next();
            }
            TRACE_OP_START => {
                let b = match own {
                    Some(b) => b,
                    None => {
                        // The tenant's buffer: taken over if its open stopped tracing (its
                        // records go), refused while that open records.
                        if let Some(b) = (1..TRACE_BUFFERS).find(|&b| {
                            let s = self.trace_slots[b];
                            s.owner != 0 && s.tenant == tenant
                        }) {
                            ensure!(
                                !self.trace_slots[b].recording,
                                EBUSY,
                                "another open of this tenant is tracing (one trace buffer per tenant): stop that trace or trace from that open"
                            );
                            let prev = self.trace_slots[b].owner;
                            if let Some(p) = self.clients.get_mut(prev) {
                                p.observe.buffer = 0;
                            }
                            self.trace_slots[b].owner = 0;
                        }
                        let Some(b) = (1..TRACE_BUFFERS).find(|&b| self.trace_slots[b].owner == 0)
                        else {
                            fail!(
                                ENOSPC,
                                "every trace buffer of the device is in use (DAVINCI_TRACE_BUFFERS_MAX, one per tracing tenant)"
                            );
                        };
                        self.platform.trace_logs()[b].restart();
                        self.trace_slots[b] = TraceSlot {
                            owner: client,
                            tenant,
                            recording: false,
                        };
                        self.client_mut(client)?.observe.buffer = b as u8 + 1;
                        b
                    }
                };
                self.trace_slots[b].recording = true;
                a.cursor = self.platform.trace_logs()[b].next();
            }
            TRACE_OP_STOP if device => {
                if o.device {
                    self.client_mut(client)?.observe.device = false;
                    self.device_tracers = self.device_tracers.saturating_sub(1);
                    self.trace_slots[DEVICE_BUFFER].recording = self.device_tracers > 0;
                }
                a.cursor = self.platform.trace_logs()[DEVICE_BUFFER].next();
            }
            TRACE_OP_STOP => {
                if let Some(b) = own {
                    self.trace_slots[b].recording = false;
                    a.cursor = self.platform.trace_logs()[b].next();
                }
            }
            TRACE_OP_READ => {
                let b = if device {
                    DEVICE_BUFFER
                } else {
                    match own {
                        Some(b) => b,
                        None => fail!(ENOENT, "this open has no trace: START one first"),
                    }
                };
                let log = &self.platform.trace_logs()[b];
                let list = List::new(a.buf, a.capacity, a.entry_size)?;
                let (next, oldest) = (log.next(), log.oldest());
                let from = a.cursor.max(oldest).min(next);
                a.lost = from.saturating_sub(a.cursor);
                let mut at = from;
                let mut lost = 0u64;
                let records = core::iter::from_fn(|| {
                    while at < next {
                        let seq = at;
                        at += 1;
                        match log.get(seq) {
                            Some(w) => return Some(decode_trace(seq, w)),
                            None => lost += 1,
                        }
                    }
                    None
                })
                .take(a.capacity as usize);
                a.count = list.write(user, records)?.min(a.capacity);
                // Past the last record written (or the end, with room to spare).
                a.cursor = at;
                a.lost += lost;
            }
            _ => fail!(EINVAL, "op must be 1 (START), 2 (STOP) or 3 (READ)"),
        }
        Ok(())
    }

    fn read_events(
        &mut self,
        client: u32,
        a: &mut ReadEventsArgs,
        user: &mut dyn UserMem,
    ) -> Result<()> {
        ensure!(a.pad == 0, EINVAL, "pad must be 0");
        let Some(c) = self.clients.get(client) else {
            fail!(ENODEV, "client is not attached");
        };
        let (admin, uid) = (c.params.admin, c.params.uid);
        let list = List::new(a.buf, a.capacity, a.entry_size)?;
        a.now_ns = self.platform.now_ns();
        let log = &self.event_log;
        let (next, oldest) = (log.next(), log.oldest());
        let from = a.cursor.max(oldest).min(next);
        a.lost = from.saturating_sub(a.cursor);
        let mut at = from;
        let mut lost = 0u64;
        let capacity = a.capacity as usize;
        let mut taken = 0usize;
        let events = core::iter::from_fn(|| {
            while at < next && taken < capacity {
                let seq = at;
                at += 1;
                match log.get(seq).map(|w| decode_event(seq, w)) {
                    // The device's own events, and a user's own clients' (LIST_CLIENTS' rule).
                    Some(e) if admin || e.client_id == 0 || e.uid == uid => {
                        taken += 1;
                        return Some(e);
                    }
                    Some(_) => {}
                    None => lost += 1,
                }
            }
            None
        });
        a.count = list.write(user, events)?.min(a.capacity);
        a.cursor = if capacity == 0 { next } else { at };
        a.lost += lost;
        Ok(())
    }
}

fn bad_size() -> crate::Error {
    crate::Error::new(Errno::ENOTTY, "argument size does not match the command")
}
