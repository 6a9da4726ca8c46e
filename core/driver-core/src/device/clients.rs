//! Clients: attaching an open file (exclusive mode refuses a second client, naming the
//! holder), detaching it with everything it held, and what each client uses (LIST_CLIENTS).

use davinci_uapi::{ClientUsage, Errno, ShareMode, Usage, TENANT_SLOTTED};

use super::entries::{Client, OpenParams, Role, StreamState};
use super::tenants::Kind;
use super::DeviceCore;
use crate::error::{ensure, Error, QuotaHit, QuotaKind, Result};
use crate::limits::{
    Quota, CONTAINER_LEN, MAX_CLIENT_OPENS, MAX_CONTROL_OPENS_PER_TENANT, MAX_USER_CONTROL_OPENS,
};
use crate::platform::{Lock, Platform};

/// What a client holds, for [`DeviceCore::within_quota`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holding {
    Contexts,
    Streams,
    Events,
    Allocations,
    Exports,
}

/// Why an open failed; on `EBUSY` also who holds the device.
#[derive(Debug, Clone, Copy)]
pub struct OpenError {
    /// The errno and message.
    pub error: Error,
    /// The exclusive holder, when `error` is `EBUSY`.
    pub holder: Option<ClientUsage>,
}

fn container_str(c: &[u8; CONTAINER_LEN]) -> [u8; 64] {
    let mut out = [0u8; 64];
    out.copy_from_slice(c);
    out
}

impl<P: Platform> DeviceCore<P> {
    /// Attached clients (control opens excluded).
    pub fn client_count(&self) -> u32 {
        self.clients
            .iter()
            .filter(|(_, c)| c.params.role == Role::Client)
            .count() as u32
    }

    /// The usage report of open `client` (its entry `c`).
    pub(crate) fn usage(&self, client: u32, c: &Client) -> ClientUsage {
        // Live streams' counters (each read under its lock) on top of the destroyed ones'.
        let (mut submitted, mut completed, mut queued) = (c.submitted, c.completed, 0u64);
        let (mut busy_ns, mut stream_errors) = (c.busy_ns, c.stream_errors);
        for (_, s) in self.streams.iter().filter(|(_, s)| s.owner == client) {
            let _ = s.run.with(|e| {
                submitted += e.submitted;
                completed += e.completed;
                busy_ns += e.busy_ns;
                stream_errors += e.errors;
                if e.state == StreamState::Running {
                    queued += u64::from(e.cmd.queued());
                }
            });
        }
        ClientUsage {
            client_id: c.client_id,
            pid: c.params.pid,
            uid: c.params.uid,
            tenant_kind: c.params.tenant.kind(),
            contexts: c.contexts,
            streams: c.streams,
            events: c.events,
            allocations: c.allocations,
            memory_bytes: c.memory,
            tasks_submitted: submitted,
            tasks_completed: completed,
            container: container_str(&c.params.container),
            tasks_queued: queued,
            comm: c.params.comm,
            busy_ns,
            stream_errors,
        }
    }

    /// Usage of every attached client (control opens excluded), in table order.
    pub fn clients(&self) -> impl Iterator<Item = ClientUsage> + '_ {
        self.clients
            .iter()
            .filter(|(_, c)| c.params.role == Role::Client)
            .map(|(client, c)| self.usage(client, c))
    }

    /// The clients open `client` (a client or a control open) may see (LIST_CLIENTS,
    /// docs/abi.md 3): every client for an admin, the clients of the caller's own user for
    /// anyone else; none for an unknown open.
    pub fn clients_seen_by(&self, client: u32) -> impl Iterator<Item = ClientUsage> + '_ {
        let viewer = self
            .clients
            .get(client)
            .map(|c| (c.params.admin, c.params.uid));
        self.clients
            .iter()
            .filter(move |(_, c)| {
                c.params.role == Role::Client
                    && matches!(viewer, Some((admin, uid)) if admin || uid == c.params.uid)
            })
            .map(|(client, c)| self.usage(client, c))
    }

    /// Usage of open `client`.
    pub fn client_usage(&self, client: u32) -> Option<ClientUsage> {
        self.clients.get(client).map(|c| self.usage(client, c))
    }

    /// Attaches an open file: its `client`, the handle of its entry in the client table, which
    /// every later call names it by. In exclusive mode a second client gets `EBUSY` naming
    /// the holder.
    #[allow(clippy::result_large_err)] // No heap here; the holder is returned by value on purpose.
    pub fn open(&mut self, params: OpenParams) -> core::result::Result<u32, OpenError> {
        let role_is_client = params.role == Role::Client;
        if params.role == Role::Client && self.share == ShareMode::Exclusive {
            if let Some((client, holder)) = self
                .clients
                .iter()
                .find(|(_, c)| c.params.role == Role::Client)
            {
                return Err(OpenError {
                    error: Error::new(
                        Errno::EBUSY,
                        "device is in exclusive mode and held by another client",
                    ),
                    holder: Some(self.usage(client, holder)),
                });
            }
        }
        let fail = |error| OpenError {
            error,
            holder: None,
        };
        let t = self.tenant_for(params.tenant).map_err(fail)?;
        let forget = |d: &mut Self| {
            if d.tenants.get(t).is_some_and(|e| e.clients + e.others == 0) {
                d.tenants.remove(t);
            }
        };
        if let Err(e) = self.check_room(&params, t) {
            forget(self);
            return Err(fail(e));
        }
        let client_id = self.client_ids.apply(self.next_client_id);
        let entry = Client {
            client_id,
            params,
            tenant: t,
            contexts: 0,
            streams: 0,
            events: 0,
            allocations: 0,
            memory: 0,
            submitted: 0,
            completed: 0,
            busy_ns: 0,
            last_error: None,
            failures: 0,
            observe: crate::observe::control::ClientObserve::default(),
            stream_errors: 0,
        };
        let client = match self
            .clients
            .insert(entry, "too many open files on this device")
        {
            Ok(c) => c,
            Err(e) => {
                forget(self);
                return Err(fail(e));
            }
        };
        self.tenant_joined(t, params.role, params.admin);
        self.next_client_id = self.next_client_id.wrapping_add(1).max(1);
        if role_is_client {
            self.clients_opened += 1;
        }
        Ok(client)
    }

    /// `ENOSPC` unless `client`'s tenant may hold one more of `kind` while the device is
    /// shared (its share, and for a tenant without a slot no more than the others' shares
    /// leave: `tenants`); an exclusive device's one client may fill every table. With the
    /// numbers ([`QuotaHit`](crate::QuotaHit)).
    pub(crate) fn within_quota(&self, client: u32, kind: Holding) -> Result<()> {
        let Some(c) = self.clients.get(client) else {
            return Err(Error::new(Errno::ENODEV, "client is not attached"));
        };
        self.tenant_within(c.tenant, Kind::Held(kind), 1, c.params.admin)
    }

    /// `ENOMEM` unless `client`'s tenant may hold `bytes` more of device memory (as
    /// [`within_quota`](Self::within_quota)).
    pub(crate) fn within_memory(&self, client: u32, bytes: u64) -> Result<()> {
        let Some(c) = self.clients.get(client) else {
            return Err(Error::new(Errno::ENODEV, "client is not attached"));
        };
        if self.share == ShareMode::Exclusive {
            let (held, limit) = (c.memory, self.client_limit());
            if held.checked_add(bytes).is_none_or(|t| t > limit) {
                return Err(Error::quota(
                    Errno::ENOMEM,
                    "allocation would exceed the device's memory",
                    QuotaHit {
                        kind: QuotaKind::Memory,
                        asked: bytes,
                        held,
                        limit,
                        shared: false,
                    },
                ));
            }
            return Ok(());
        }
        self.tenant_within(c.tenant, Kind::Memory, bytes, c.params.admin)
    }

    /// Exports `client` holds, of memory and of events.
    pub(crate) fn exports_of(&self, client: u32) -> u32 {
        let memory = self
            .exports
            .iter()
            .filter(|(_, e)| e.owner == client)
            .count();
        let events = self
            .event_exports
            .iter()
            .filter(|(_, e)| e.owner == client)
            .count();
        (memory + events) as u32
    }

    /// GET_USAGE (ABI 1.5): what `client` and its tenant hold against the tenant's limits
    /// now.
    pub fn own_usage(&self, client: u32) -> Result<Usage> {
        let Some(c) = self.clients.get(client) else {
            return Err(Error::new(Errno::ENODEV, "client is not attached"));
        };
        let t = c.tenant;
        let shared = self.share == ShareMode::Shared;
        let limit = |k: Kind, whole: u64| {
            if shared {
                self.tenant_limit_now(t, k)
            } else {
                whole
            }
        };
        let n = |k: Kind| self.tenant_holds(t, k) as u32;
        let q = Quota::NONE;
        let count = |k: Holding, whole: u32| limit(Kind::Held(k), whole.into()) as u32;
        let slotted = self.tenants.get(t).is_some_and(|e| e.slotted);
        Ok(Usage {
            memory_bytes: c.memory,
            memory_limit: limit(Kind::Memory, self.client_limit()),
            contexts: c.contexts,
            quota_contexts: count(Holding::Contexts, q.contexts),
            streams: c.streams,
            quota_streams: count(Holding::Streams, q.streams),
            events: c.events,
            quota_events: count(Holding::Events, q.events),
            allocations: c.allocations,
            quota_allocations: count(Holding::Allocations, q.allocations),
            exports: self.exports_of(client),
            quota_exports: count(Holding::Exports, q.exports),
            share_mode: self.share as u32,
            client_id: c.client_id,
            tenant_memory_bytes: self.tenant_holds(t, Kind::Memory),
            tenant_contexts: n(Kind::Held(Holding::Contexts)),
            tenant_streams: n(Kind::Held(Holding::Streams)),
            tenant_events: n(Kind::Held(Holding::Events)),
            tenant_allocations: n(Kind::Held(Holding::Allocations)),
            tenant_exports: n(Kind::Held(Holding::Exports)),
            tenant_flags: c.params.tenant.kind() | if slotted { TENANT_SLOTTED } else { 0 },
        })
    }

    /// Whether `params` may open: client opens take at most [`MAX_CLIENT_OPENS`] slots, a
    /// non-admin tenant at most its share of them (with the floor every tenant's share has,
    /// `tenants`); non-admins' control opens at most [`MAX_USER_CONTROL_OPENS`] (and
    /// [`MAX_CONTROL_OPENS_PER_TENANT`] per tenant), so the rest of the table is always
    /// there for the operators' tools run by admins. `t` is the tenant the open joins.
    fn check_room(&self, params: &OpenParams, t: u32) -> Result<()> {
        let count = |f: &dyn Fn(&Client) -> bool| self.clients.iter().filter(|(_, c)| f(c)).count();
        match params.role {
            Role::Client => {
                ensure!(
                    count(&|c| c.params.role == Role::Client) < MAX_CLIENT_OPENS,
                    ENOSPC,
                    "the device has as many client opens as it takes (256); the remaining \
                     slots are kept for operators' control opens"
                );
                if !params.admin {
                    self.tenant_within(t, Kind::Opens, 1, false)?;
                }
            }
            Role::Control if !params.admin => {
                let user = |c: &Client| c.params.role == Role::Control && !c.params.admin;
                ensure!(
                    count(&|c| user(c) && c.tenant == t) < MAX_CONTROL_OPENS_PER_TENANT,
                    ENOSPC,
                    "this tenant (the container, else the user) has as many control opens of \
                     the device as a non-admin tenant may (8); close one"
                );
                ensure!(
                    count(&user) < MAX_USER_CONTROL_OPENS,
                    ENOSPC,
                    "non-admin users hold as many control opens as they may (32); the \
                     remaining slots are kept for admins"
                );
            }
            Role::Control => {}
        }
        Ok(())
    }
    /// Detaches an open file and releases everything it held (streams, events, contexts,
    /// memory). Unknown handles are ignored.
    pub fn close(&mut self, client: u32) {
        if self.clients.get(client).is_none() {
            return;
        }
        while let Some(ctx) = self.contexts.find(|c| c.owner == client) {
            let _ = self.destroy_context(client, ctx);
        }
        // Imports first, then its own allocations, leases too: a closed client's memory is
        // reclaimed whole, whoever imported it.
        while let Some(a) = self
            .allocations
            .find(|a| a.owner == client && a.origin != 0)
        {
            self.drop_import(a);
        }
        while let Some(a) = self.allocations.find(|a| a.owner == client) {
            self.drop_allocation(a);
        }
        self.observe_close(client);
        if let Some(c) = self.clients.remove(client) {
            self.tenant_left(c.tenant, c.params.role, c.params.admin);
        }
        // Waiters of this client (other threads of the same open) must notice.
        self.platform.notify_waiters(client);
    }

    pub(crate) fn client_mut(&mut self, client: u32) -> Result<&mut Client> {
        match self.clients.get_mut(client) {
            Some(c) => Ok(c),
            None => Err(Error::new(Errno::ENODEV, "client is not attached")),
        }
    }

    pub(crate) fn require_client(&self, client: u32) -> Result<()> {
        match self.clients.get(client) {
            Some(c) if c.params.role == Role::Client => Ok(()),
            Some(_) => Err(Error::new(
                Errno::EPERM,
                "a control (read-only) open cannot own device resources",
            )),
            None => Err(Error::new(Errno::ENODEV, "client is not attached")),
        }
    }
}
