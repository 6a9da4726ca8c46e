//! Who may connect to a device, decided at accept from the peer's credentials, per tenant
//! (the peer's container, else its user: [`Identity::tenant`](crate::peer::Identity), so a
//! rootless container's thousands of uids are one tenant, and each user outside containers
//! one):
//!
//! * at most [`MAX_CONNECTIONS`] connections; non-admins together at most
//!   [`USER_CONNECTIONS`] (`MAX_CONNECTIONS - ADMIN_RESERVED`: the rest are the operators'
//!   whatever tenants hold), not counting the silent ones already closed for a newcomer
//!   (below), which end at once;
//! * one non-admin tenant at most its share of [`USER_CONNECTIONS`]: that over the
//!   device's tenant slots ([`connection_share`]; 72 with the default 4), so a tenant cannot
//!   take the room the device keeps for the others;
//! * connections that have not said HELLO yet (silent): at most
//!   [`MAX_PRE_HELLO_PER_TENANT`] of one tenant and [`MAX_PRE_HELLO`] of all non-admins.
//!   When that pool is full, or the non-admins' room is, a new connection of a tenant below
//!   its bounds takes the place of the oldest silent connection of the tenant that holds the
//!   most silent ones (another tenant's than the newcomer's when several hold as many),
//!   which is closed: silent connections, however many tenants hold them, never refuse
//!   another tenant's connect; only its own bounds and connections that said HELLO do. The
//!   HELLO timeout still closes each silent connection.
//!
//! A [`Ticket`] gives the room back when its connection ends.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use davinci_driver_core::{Tenant, MAX_TENANT_SLOTS};
use davinci_mockd_proto::sockio::SeqPacket;

/// Connections per device, HELLO said or not.
pub const MAX_CONNECTIONS: usize = 320;
/// Connections per device only admins may have.
pub const ADMIN_RESERVED: usize = 32;
/// Connections of non-admins together.
pub const USER_CONNECTIONS: usize = MAX_CONNECTIONS - ADMIN_RESERVED;
/// Connections one non-admin tenant may have open before their HELLO.
pub const MAX_PRE_HELLO_PER_TENANT: usize = 16;
/// Connections all non-admins may have open before their HELLO (a newcomer past it takes a
/// silent one's place: see the module's text).
pub const MAX_PRE_HELLO: usize = 64;

/// One non-admin tenant's share of [`USER_CONNECTIONS`] on a device with `slots` tenant
/// slots (clamped to 1..=[`MAX_TENANT_SLOTS`]).
pub fn connection_share(slots: u32) -> usize {
    USER_CONNECTIONS / slots.clamp(1, MAX_TENANT_SLOTS) as usize
}

/// A [`Tenant`] as a map key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TenantKey(pub(crate) Tenant);

impl Hash for TenantKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        match &self.0 {
            Tenant::User(uid) => (0u8, *uid).hash(h),
            Tenant::Container(id) => (1u8, id).hash(h),
        }
    }
}

/// One tenant's non-admin connections.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    /// Connections counted against its share (silent ones included; closed ones not).
    conns: usize,
    /// Of them, silent ones.
    silent: usize,
}

/// A silent connection of a non-admin, in the pool.
#[derive(Debug)]
struct Silent {
    tenant: TenantKey,
    /// The connection, to close if it is displaced (`None` until it is attached).
    conn: Option<Arc<SeqPacket>>,
}

/// The counts admission decides on.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    /// Connections, closed-for-a-newcomer ones until they end included.
    total: usize,
    /// Non-admin connections, not counting those closed for a newcomer.
    users: usize,
    tenants: HashMap<TenantKey, Held>,
    /// The silent pool, oldest first (by admission number).
    silent: BTreeMap<u64, Silent>,
    next: u64,
}

/// What a non-admin connection was admitted as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    /// In the silent pool, as this number (until it says HELLO or is displaced).
    Silent(u64),
    /// Past its HELLO (or it gave up before it).
    Spoken,
    /// Displaced by a newcomer: counted in `total` only, until it ends.
    Displaced,
}

impl Counts {
    fn held(&mut self, t: TenantKey) -> &mut Held {
        self.tenants.entry(t).or_default()
    }

    fn forget_if_empty(&mut self, t: TenantKey) {
        if self.tenants.get(&t).is_some_and(|h| h.conns == 0) {
            self.tenants.remove(&t);
        }
    }

    /// Admits a connection of `tenant` (an admin or not) on a device with `slots` tenant
    /// slots: its pool number for a non-admin (`None` for an admin), and the silent
    /// connection it displaced, to be closed; or why it is refused.
    #[allow(clippy::type_complexity)]
    fn admit(
        &mut self,
        tenant: TenantKey,
        admin: bool,
        share: usize,
    ) -> Result<(Option<u64>, Option<Option<Arc<SeqPacket>>>), &'static str> {
        if admin {
            if self.total >= MAX_CONNECTIONS {
                return Err("too many connections to this device");
            }
            self.total += 1;
            return Ok((None, None));
        }
        let held = self.tenants.get(&tenant).copied().unwrap_or_default();
        if held.conns >= share {
            return Err(
                "this tenant (its container, else its user) holds its share of this device's \
                 connections (the non-admins' over the tenant slots)",
            );
        }
        if held.silent >= MAX_PRE_HELLO_PER_TENANT {
            return Err(
                "this tenant (its container, else its user) has too many connections that have \
                 not said HELLO",
            );
        }
        if self.total >= MAX_CONNECTIONS {
            return Err("too many connections to this device");
        }
        let mut displaced = None;
        if self.silent.len() >= MAX_PRE_HELLO || self.users >= USER_CONNECTIONS {
            let Some(n) = self.victim(tenant) else {
                return Err(
                    "too many connections of non-admin users to this device (the rest are \
                     kept for the operators)",
                );
            };
            displaced = Some(self.displace(n));
        }
        self.next += 1;
        let n = self.next;
        self.silent.insert(n, Silent { tenant, conn: None });
        let h = self.held(tenant);
        h.conns += 1;
        h.silent += 1;
        self.users += 1;
        self.total += 1;
        Ok((Some(n), displaced))
    }

    /// The silent connection a newcomer of `tenant` displaces: the oldest of the tenant
    /// holding the most silent ones, another than `tenant` on a tie.
    fn victim(&self, tenant: TenantKey) -> Option<u64> {
        let rank = |t: &TenantKey| {
            let silent = self.tenants.get(t).map_or(0, |h| h.silent);
            (silent, *t != tenant)
        };
        let most = self.silent.values().map(|s| rank(&s.tenant)).max()?;
        // The pool is in admission order: the first of that rank is the oldest.
        self.silent
            .iter()
            .find(|(_, s)| rank(&s.tenant) == most)
            .map(|(n, _)| *n)
    }

    /// Takes silent connection `n` out of the pool and the non-admins' counts (it stays in
    /// `total` until it ends): its connection, to be closed.
    fn displace(&mut self, n: u64) -> Option<Arc<SeqPacket>> {
        let s = self.silent.remove(&n)?;
        let h = self.held(s.tenant);
        h.conns -= 1;
        h.silent -= 1;
        self.forget_if_empty(s.tenant);
        self.users -= 1;
        s.conn
    }

    /// Silent connection `n` said HELLO (or gave up before it): whether it was still in the
    /// pool (not displaced).
    fn hello_done(&mut self, n: u64) -> bool {
        let Some(s) = self.silent.remove(&n) else {
            return false;
        };
        self.held(s.tenant).silent -= 1;
        true
    }

    /// A connection ended.
    fn leave(&mut self, tenant: TenantKey, room: Option<Room>) {
        self.total = self.total.saturating_sub(1);
        match room {
            None | Some(Room::Displaced) => {}
            Some(Room::Silent(n)) => {
                if self.hello_done(n) {
                    self.leave_user(tenant);
                }
            }
            Some(Room::Spoken) => self.leave_user(tenant),
        }
    }

    fn leave_user(&mut self, tenant: TenantKey) {
        self.users = self.users.saturating_sub(1);
        if let Some(h) = self.tenants.get_mut(&tenant) {
            h.conns = h.conns.saturating_sub(1);
        }
        self.forget_if_empty(tenant);
    }
}

/// A device's admission counts, shared by its acceptor and connections.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    counts: Mutex<Counts>,
}

impl Gate {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a connection of `tenant` on a device with `slots` tenant slots: its ticket
    /// (to [`attach`](Ticket::attach) the connection to), or why it is refused. A silent
    /// connection it displaces is closed now (its thread sees the end).
    pub(crate) fn admit(
        self: &Arc<Self>,
        tenant: Tenant,
        admin: bool,
        slots: u32,
        shares: u32,
    ) -> Result<Ticket, &'static str> {
        let share = connection_share(slots)
            .saturating_mul(shares.max(1) as usize)
            .min(USER_CONNECTIONS);
        let tenant = TenantKey(tenant);
        let (n, displaced) = self.counts().admit(tenant, admin, share)?;
        if let Some(Some(conn)) = displaced {
            conn.shutdown();
        }
        Ok(Ticket {
            gate: self.clone(),
            tenant,
            room: n.map(Room::Silent),
        })
    }

    /// Connections now.
    #[cfg(test)]
    fn total(&self) -> usize {
        self.counts().total
    }
}

/// One admitted connection's room, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    gate: Arc<Gate>,
    tenant: TenantKey,
    /// `None` for an admin's connection.
    room: Option<Room>,
}

impl Ticket {
    /// The connection this ticket admitted, closed if a newcomer displaces it before its
    /// HELLO (at once if that happened already).
    pub(crate) fn attach(&self, conn: &Arc<SeqPacket>) {
        if let Some(Room::Silent(n)) = self.room {
            match self.gate.counts().silent.get_mut(&n) {
                Some(s) => s.conn = Some(conn.clone()),
                None => conn.shutdown(),
            }
        }
    }

    /// The connection's first frame came (or its wait for it ended): whether it keeps its
    /// room (false: a newcomer displaced it while it was silent; it is closed).
    pub(crate) fn hello_done(&mut self) -> bool {
        match self.room {
            Some(Room::Silent(n)) => {
                let kept = self.gate.counts().hello_done(n);
                self.room = Some(if kept { Room::Spoken } else { Room::Displaced });
                kept
            }
            Some(Room::Displaced) => false,
            None | Some(Room::Spoken) => true,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.gate.counts().leave(self.tenant, self.room);
    }
}

#[cfg(test)]
mod tests;
