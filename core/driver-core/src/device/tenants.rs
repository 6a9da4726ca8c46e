//! Tenants ([`Tenant`]): the quotas bind a tenant, not an open. The device has
//! `tenant_slots` slots (4 by default, a host's setting: the device plugin's replica count);
//! a tenant takes one with its first client open while one is free and keeps it until its
//! last client open closes. While the device is shared every tenant is held to its share of
//! each table and of memory (the configured [`Quota`](crate::Quota), a slot's fraction by
//! default), and the unused share of every slotted tenant and of every free slot is kept:
//! a tenant without a slot takes only what is left beyond it. So each of up to
//! `tenant_slots` tenants always gets its whole share, however many opens and uids the
//! others use (docs/security.md).

use davinci_uapi::{Errno, ShareMode, TENANT_SLOTTED};

use super::clients::Holding;
use super::entries::{Client, Role};
use super::DeviceCore;
use crate::error::{Error, QuotaHit, QuotaKind, Result};
use crate::limits::{
    MAX_ALLOCATIONS, MAX_CLIENT_OPENS, MAX_CONTEXTS, MAX_EVENTS, MAX_EXPORTS, MAX_STREAMS,
    MAX_TENANT_SETTINGS,
};
use crate::platform::Platform;
use crate::tenant::Tenant;

/// A tenant with at least one open, client or control.
pub(crate) struct TenantEntry {
    pub(crate) key: Tenant,
    /// Client opens of non-admins (they hold the slot), and the other opens (control
    /// opens, admins' client opens).
    pub(crate) clients: u32,
    pub(crate) others: u32,
    /// Whether it holds a slot (only while it has client opens).
    pub(crate) slotted: bool,
    /// When it last came without a slot to take (order of the queue for a freed slot).
    pub(crate) waiting_since: u64,
    /// How many slots it counts for (an operator's setting, [`ShareSetting`]; 1 without).
    pub(crate) shares: u32,
}

/// An operator's setting for one tenant (TENANT_SHARE): the slots it counts for, other than
/// 1. Kept whether or not the tenant has opens, at most [`MAX_TENANT_SETTINGS`].
pub(crate) struct ShareSetting {
    pub(crate) key: Tenant,
    pub(crate) shares: u32,
}

/// What TENANT_SHARE reports of a tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantShare {
    /// The slots it counts for.
    pub shares: u32,
    /// The device's tenant slots.
    pub slots: u32,
    /// Slots no tenant holds now.
    pub free_slots: u32,
    /// `DAVINCI_TENANT_*` of the tenant now (0: it has no open).
    pub tenant_flags: u32,
}

/// What a quota check counts: an object of a table, or bytes of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Held(Holding),
    Memory,
    Opens,
}

impl Kind {
    fn quota_kind(self) -> QuotaKind {
        match self {
            Kind::Held(Holding::Contexts) => QuotaKind::Contexts,
            Kind::Held(Holding::Streams) => QuotaKind::Streams,
            Kind::Held(Holding::Events) => QuotaKind::Events,
            Kind::Held(Holding::Allocations) => QuotaKind::Allocations,
            Kind::Held(Holding::Exports) => QuotaKind::Exports,
            Kind::Memory => QuotaKind::Memory,
            Kind::Opens => QuotaKind::Opens,
        }
    }
}

impl<P: Platform> DeviceCore<P> {
    /// The tenant entry of `key`, made if it has none; `ENOSPC` only if the tenant table is
    /// full, which it cannot be while the client table has room (one per open at most).
    pub(crate) fn tenant_for(&mut self, key: Tenant) -> Result<u32> {
        if let Some(t) = self.tenants.find(|t| t.key == key) {
            return Ok(t);
        }
        let shares = self.setting_of(key);
        self.tenants.insert(
            TenantEntry {
                key,
                clients: 0,
                others: 0,
                slotted: false,
                waiting_since: 0,
                shares,
            },
            "too many tenants on this device",
        )
    }

    /// The slots `key` counts for: the operator's setting, else 1.
    fn setting_of(&self, key: Tenant) -> u32 {
        self.share_settings
            .find(|s| s.key == key)
            .and_then(|h| self.share_settings.get(h))
            .map_or(1, |s| s.shares)
    }

    /// How many tenant slots `key` counts for now (TENANT_SHARE; 1 unless an admin set
    /// it): a host's own per-tenant bounds (the daemon's connections and waits) scale with it.
    pub fn tenant_shares(&self, key: Tenant) -> u32 {
        match self.tenants.find(|e| e.key == key) {
            Some(h) => self.shares_of(h),
            None => self.setting_of(key),
        }
    }

    /// Slots no tenant holds (each slotted tenant holds as many as it counts for).
    pub(crate) fn free_slots(&self) -> u32 {
        let held: u32 = self
            .tenants
            .iter()
            .filter(|(_, t)| t.slotted)
            .map(|(_, t)| t.shares)
            .fold(0, u32::saturating_add);
        self.tenant_slots.saturating_sub(held)
    }

    /// Whether a tenant counting for `shares` slots would get them now.
    fn fits(&self, shares: u32) -> bool {
        shares > 0 && shares <= self.free_slots()
    }

    /// The slots tenant `t` counts for (1 for a handle without an entry).
    fn shares_of(&self, t: u32) -> u32 {
        self.tenants.get(t).map_or(1, |e| e.shares)
    }

    /// Gives freed slots to the tenants waiting for them, longest waiting first; one that
    /// needs more slots than are free stops the queue (first come, first served: a tenant
    /// of many slots is not passed over for ever).
    fn promote_waiting(&mut self) {
        loop {
            let next = self
                .tenants
                .iter()
                .filter(|(_, e)| !e.slotted && e.clients > 0 && e.shares > 0)
                .min_by_key(|(_, e)| e.waiting_since)
                .map(|(h, e)| (h, e.shares));
            let Some((h, shares)) = next else { return };
            if !self.fits(shares) {
                return;
            }
            match self.tenants.get_mut(h) {
                Some(e) => e.slotted = true,
                None => return,
            }
        }
    }

    /// Counts an open's arrival in tenant `t` (its entry made by
    /// [`tenant_for`](Self::tenant_for)); a non-admin's client open takes a free slot (an
    /// admin's takes none: operators' own jobs keep no share from the tenants).
    pub(crate) fn tenant_joined(&mut self, t: u32, role: Role, admin: bool) {
        let free = self.fits(self.shares_of(t));
        let now = self.platform.now_ns();
        if let Some(e) = self.tenants.get_mut(t) {
            if role == Role::Client && !admin {
                e.clients += 1;
                if !e.slotted {
                    e.slotted = free;
                    if e.clients == 1 {
                        e.waiting_since = now;
                    }
                }
            } else {
                e.others += 1;
            }
        }
    }

    /// Counts an open of tenant `t` gone: a tenant without client opens gives its slot to
    /// the tenant waiting longest, and one without opens is forgotten.
    pub(crate) fn tenant_left(&mut self, t: u32, role: Role, admin: bool) {
        let Some(e) = self.tenants.get_mut(t) else {
            return;
        };
        if role == Role::Client && !admin {
            e.clients = e.clients.saturating_sub(1);
        } else {
            e.others = e.others.saturating_sub(1);
        }
        let freed = e.clients == 0 && e.slotted;
        if e.clients == 0 {
            e.slotted = false;
        }
        if e.clients == 0 && e.others == 0 {
            self.tenants.remove(t);
        }
        if freed {
            self.promote_waiting();
        }
    }

    /// TENANT_SHARE: what `key` counts for, and with `set` (an admin's, `client`) makes it
    /// count for that many slots from now on. A tenant holding its slots that would count
    /// for more than it holds plus the free slots: `EBUSY` (nothing changes). A tenant set
    /// to fewer keeps what it holds, and gets no more until it is back within its share; one
    /// set to 0 gives its slots up. Freed slots go to the tenants waiting for them.
    pub fn tenant_share(
        &mut self,
        client: u32,
        key: Tenant,
        set: Option<u32>,
    ) -> Result<TenantShare> {
        let Some(c) = self.clients.get(client) else {
            return Err(Error::new(Errno::ENODEV, "client is not attached"));
        };
        if !c.params.admin {
            return Err(Error::new(
                Errno::EPERM,
                "a tenant's share is an admin's setting (the kernel driver: CAP_SYS_ADMIN; davinci-mockd: root, the daemon's own user, --admin-uid or an --admin-group member)",
            ));
        }
        let entry = self.tenants.find(|e| e.key == key);
        if let Some(shares) = set {
            if shares > self.tenant_slots {
                return Err(Error::new(
                    Errno::EINVAL,
                    "shares must be from 0 to the device's tenant slots (TENANT_SHARE reports them in slots)",
                ));
            }
            let setting = self.share_settings.find(|s| s.key == key);
            if setting.is_none() && shares != 1 && self.share_settings.len() >= MAX_TENANT_SETTINGS
            {
                return Err(Error::new(
                    Errno::ENOSPC,
                    "the device keeps at most 64 tenant settings; set one back to 1 first",
                ));
            }
            if let Some(e) = entry.and_then(|h| self.tenants.get(h)) {
                if e.slotted && shares > e.shares && shares - e.shares > self.free_slots() {
                    return Err(Error::new(
                        Errno::EBUSY,
                        "the tenant holds its slots and too few others are free for the new setting; it keeps its share (free slots: TENANT_SHARE's free_slots)",
                    ));
                }
            }
            match (setting, shares) {
                (Some(h), 1) => {
                    self.share_settings.remove(h);
                }
                (Some(h), n) => {
                    if let Some(s) = self.share_settings.get_mut(h) {
                        s.shares = n;
                    }
                }
                (None, 1) => {}
                (None, n) => {
                    self.share_settings
                        .insert(ShareSetting { key, shares: n }, "too many tenant settings")?;
                }
            }
            if let Some(h) = entry {
                let fits = self.fits(shares);
                if let Some(e) = self.tenants.get_mut(h) {
                    e.shares = shares;
                    // A slotted tenant set to more: checked above, the free slots cover it.
                    if shares == 0 {
                        e.slotted = false;
                    } else if !e.slotted && e.clients > 0 {
                        e.slotted = fits;
                    }
                }
            }
            self.promote_waiting();
        }
        let (shares, flags) = match entry.and_then(|h| self.tenants.get(h)) {
            Some(e) => (
                e.shares,
                e.key.kind() | if e.slotted { TENANT_SLOTTED } else { 0 },
            ),
            None => (self.setting_of(key), 0),
        };
        Ok(TenantShare {
            shares,
            slots: self.tenant_slots,
            free_slots: self.free_slots(),
            tenant_flags: flags,
        })
    }

    /// What tenant `t` holds of `kind` (its clients' holdings summed; exports by owner).
    pub(crate) fn tenant_holds(&self, t: u32, kind: Kind) -> u64 {
        let of = |c: &Client| -> u64 {
            match kind {
                Kind::Held(Holding::Contexts) => c.contexts.into(),
                Kind::Held(Holding::Streams) => c.streams.into(),
                Kind::Held(Holding::Events) => c.events.into(),
                Kind::Held(Holding::Allocations) => c.allocations.into(),
                Kind::Held(Holding::Exports) => 0,
                Kind::Memory => c.memory,
                Kind::Opens => u64::from(c.params.role == Role::Client),
            }
        };
        if kind == Kind::Held(Holding::Exports) {
            // Memory and event exports alike.
            let ours = |owner: u32| self.clients.get(owner).is_some_and(|c| c.tenant == t);
            let memory = self.exports.iter().filter(|(_, e)| ours(e.owner)).count();
            let events = self
                .event_exports
                .iter()
                .filter(|(_, e)| ours(e.owner))
                .count();
            return (memory + events) as u64;
        }
        self.clients
            .iter()
            .filter(|(_, c)| c.tenant == t)
            .map(|(_, c)| of(c))
            .sum()
    }

    /// Tenant `t`'s share of `kind`: a slot's ([`slot_share`](Self::slot_share)) times the
    /// slots it counts for (a tenant counting for none: one slot's, never kept for it), at
    /// most the whole.
    pub(crate) fn share_of(&self, kind: Kind, t: u32) -> u64 {
        let unit = self.slot_share(kind);
        let whole = match kind {
            Kind::Memory => self.memory.size(),
            Kind::Opens => MAX_CLIENT_OPENS as u64,
            _ => u64::MAX,
        };
        unit.saturating_mul(u64::from(self.shares_of(t).max(1)))
            .min(whole.max(unit))
    }

    /// A slot's share of `kind`: the configured quota (memory: the configured limit, else
    /// the device's memory over the slots; opens: the client opens over the slots).
    pub(crate) fn slot_share(&self, kind: Kind) -> u64 {
        let q = &self.config.quota;
        match kind {
            Kind::Held(Holding::Contexts) => q.contexts.into(),
            Kind::Held(Holding::Streams) => q.streams.into(),
            Kind::Held(Holding::Events) => q.events.into(),
            Kind::Held(Holding::Allocations) => q.allocations.into(),
            Kind::Held(Holding::Exports) => q.exports.into(),
            Kind::Memory => self.tenant_memory_share(),
            // `checked_div`: no panic path (the kernel's objtool refuses one); the slots are
            // never 0 (`set_tenant_slots`).
            Kind::Opens => (MAX_CLIENT_OPENS as u64)
                .checked_div(u64::from(self.tenant_slots))
                .unwrap_or(MAX_CLIENT_OPENS as u64)
                .max(1),
        }
    }

    /// The tenants' memory share while the device is shared: the configured limit, else the
    /// device's memory over the slots.
    pub(crate) fn tenant_memory_share(&self) -> u64 {
        let size = self.memory.size();
        match self.config.client_memory_limit {
            // Whole pages: allocations are, and a device whose pages do not divide by the
            // slots (a PCI device's heap) would otherwise promise a share no allocation fits.
            0 => {
                let page = u64::from(self.config.page_size).max(1);
                let share = size
                    .checked_div(u64::from(self.tenant_slots))
                    .unwrap_or(size);
                (share - share % page).max(page.min(size))
            }
            l => l.min(size),
        }
    }

    /// What is free of `kind` on the device.
    fn free_of(&self, kind: Kind) -> u64 {
        let (cap, used) = match kind {
            Kind::Held(Holding::Contexts) => (MAX_CONTEXTS, self.contexts.len()),
            Kind::Held(Holding::Streams) => (MAX_STREAMS, self.streams.len()),
            Kind::Held(Holding::Events) => (MAX_EVENTS, self.events.len()),
            Kind::Held(Holding::Allocations) => (MAX_ALLOCATIONS, self.allocations.len()),
            Kind::Held(Holding::Exports) => {
                (MAX_EXPORTS, self.exports.len() + self.event_exports.len())
            }
            Kind::Opens => (MAX_CLIENT_OPENS, self.client_count() as usize),
            Kind::Memory => return self.memory.size().saturating_sub(self.memory.used()),
        };
        cap.saturating_sub(used) as u64
    }

    /// What is kept of `kind` for the tenants with a slot other than `but` (the unused part
    /// of each one's share) and for the free slots (a whole share each). Of the client
    /// opens one per free slot is kept: a tenant without a slot may open (and wait for a
    /// slot), so a tenant is sure of its first open while a slot is free, not of its 64th.
    fn kept_of(&self, kind: Kind, but: u32) -> u64 {
        if kind == Kind::Opens {
            return u64::from(self.free_slots());
        }
        let mut kept = u64::from(self.free_slots()).saturating_mul(self.slot_share(kind));
        for (h, e) in self.tenants.iter() {
            if e.slotted && h != but {
                let share = self.share_of(kind, h);
                kept = kept.saturating_add(share.saturating_sub(self.tenant_holds(h, kind)));
            }
        }
        kept
    }

    /// What tenant `t` may hold of `kind` now: its share, and for a tenant without a slot
    /// (none free) no more than what is not kept for the others.
    pub(crate) fn tenant_limit_now(&self, t: u32, kind: Kind) -> u64 {
        let share = self.share_of(kind, t);
        // A tenant without its slots while enough are free takes them with its next client
        // open.
        let slotted =
            self.tenants.get(t).is_some_and(|e| e.slotted) || self.fits(self.shares_of(t));
        if slotted {
            return share;
        }
        let spare = self.free_of(kind).saturating_sub(self.kept_of(kind, t));
        share.min(self.tenant_holds(t, kind).saturating_add(spare))
    }

    /// `Ok` if open `client`'s tenant may take `asked` more of `kind`; else the quota's
    /// refusal with its numbers (the tenant's holdings and its limit now). Only while the
    /// device is shared, except for opens ([`check_room`](Self::check_room) asks for them
    /// with the tenant the open would join).
    /// An admin's open is held to its tenant's share but not to the floor kept for the
    /// slotted tenants (`admin`).
    pub(crate) fn tenant_within(&self, t: u32, kind: Kind, asked: u64, admin: bool) -> Result<()> {
        if self.share == ShareMode::Exclusive && kind != Kind::Opens {
            return Ok(());
        }
        let held = self.tenant_holds(t, kind);
        let share = self.share_of(kind, t);
        let limit = if admin {
            share
        } else {
            self.tenant_limit_now(t, kind)
        };
        if held.checked_add(asked).is_some_and(|n| n <= limit) {
            return Ok(());
        }
        let (errno, msg) = match (kind, limit < share) {
            (Kind::Memory, false) => (Errno::ENOMEM, "this tenant (the client's container, else its user) holds its share of device memory on a shared device"),
            (Kind::Memory, true) => (Errno::ENOMEM, "every tenant slot of this shared device is taken and their shares of memory are kept for them; this tenant has no slot (the operator sets how many: --tenant-slots, tenant_slots)"),
            (Kind::Opens, false) => (Errno::ENOSPC, "this tenant (the client's container, else its user) has as many client opens of the device as its share; close one"),
            (_, true) => (Errno::ENOSPC, "every tenant slot of this shared device is taken and their shares are kept for them; this tenant has no slot (the operator sets how many: --tenant-slots, tenant_slots)"),
            (Kind::Held(Holding::Exports), false) => (Errno::ENOSPC, "this tenant (the client's container, else its user) holds its share of exports on a shared device (free an exported allocation first)"),
            (_, false) => (Errno::ENOSPC, "this tenant (the client's container, else its user) holds its share of this table on a shared device"),
        };
        Err(Error::quota(
            errno,
            msg,
            QuotaHit {
                kind: kind.quota_kind(),
                asked,
                held,
                limit,
                shared: self.share == ShareMode::Shared,
            },
        ))
    }
}
