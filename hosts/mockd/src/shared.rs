//! What every thread serving one `davinci-mockd` device shares: the device, its name, the
//! admin policy, the HELLO timeout, the lock around sharing changes, the live
//! connections (for shutdown and the connection limit), the blocking waits in flight, the
//! rate-limited audit log and the thread that answers refused connections. The acceptor (`daemon`) creates it;
//! each connection (`conn`) reads it.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use davinci_mock_device::MockDevice;
use davinci_mockd_proto::sockio::SeqPacket;

use crate::audit::AuditLog;
use crate::gate::Gate;
use crate::peer::AdminPolicy;
use crate::refuse::Refuser;
use crate::waits::Waits;

/// Blocking WAIT_EVENTs one connection may have in flight; more are refused with `EBUSY`:
/// driver-core's bound on an open's blocked waits, the same on every host.
pub const MAX_WAITS_PER_CONN: usize = davinci_driver_core::MAX_BLOCKED_WAITS_PER_CLIENT as usize;

/// What every thread serving one device shares.
pub(crate) struct Shared {
    pub(crate) dev: MockDevice,
    /// `davinciN`, for logs and messages.
    pub(crate) name: String,
    pub(crate) admin: AdminPolicy,
    pub(crate) hello_timeout: std::time::Duration,
    /// Held across a sharing change and the reads of the mode around it, so the audit log's
    /// "from" and "to" are exact.
    pub(crate) share_lock: Mutex<()>,
    pub(crate) stopping: AtomicBool,
    pub(crate) conns: Mutex<HashMap<u64, Arc<SeqPacket>>>,
    pub(crate) next_conn: AtomicU64,
    /// Who may connect (`crate::gate`).
    pub(crate) gate: Arc<Gate>,
    /// Blocking waits in flight, served by one thread ([`crate::waits`]).
    pub(crate) waits: Arc<Waits>,
    /// Opens, closes and refused sharing changes, rate-limited ([`crate::audit`]).
    pub(crate) audit: AuditLog,
    /// Answers refused connections off the accept loop ([`crate::refuse`]).
    pub(crate) refuser: Refuser,
}

impl Shared {
    pub(crate) fn new(
        dev: MockDevice,
        name: String,
        admin: AdminPolicy,
        hello_timeout: std::time::Duration,
    ) -> std::io::Result<Shared> {
        let waits = Arc::new(Waits::new(dev.clone(), name.clone()));
        let audit = AuditLog::new(name.clone());
        let refuser = Refuser::start(&name)?;
        Ok(Shared {
            dev,
            name,
            admin,
            hello_timeout,
            share_lock: Mutex::new(()),
            stopping: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            gate: Arc::default(),
            waits,
            audit,
            refuser,
        })
    }

    pub(crate) fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<SeqPacket>>> {
        self.conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
