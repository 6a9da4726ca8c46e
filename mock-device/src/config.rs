//! What a mock device is made with: [`MockConfig`] (its id, memory, pollers and their
//! timing, an injected fault) and [`local_open_params`], the open parameters of the calling
//! process.
#![forbid(unsafe_code)]

use std::time::Duration;

use davinci_driver_core::{InjectRule, OpenParams, Quota, Role, CONTAINER_LEN};

/// Configuration of a mock device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MockConfig {
    /// N of the device name (`davinciN`).
    pub device_id: u32,
    /// Device memory in bytes. Backed sparsely: only pages written cost memory.
    pub memory_size: u64,
    /// Per-client memory limit in bytes (0 = the whole device).
    pub client_memory_limit: u64,
    /// Poller threads that serve the device's streams (like io_uring's SQPOLL threads): each
    /// stream is served by one, the least loaded when it was created. More start only when
    /// every poller serves `FUTEX_WAITV_MAX - 1` streams.
    pub pollers: usize,
    /// Descriptors a poller runs per stream per pass (and per lock acquisition).
    pub run_budget: u32,
    /// Longest a poller sleeps on its doorbell before it looks at the ring anyway (a safety
    /// net; the doorbell protocol does not rely on it).
    pub doorbell_timeout: Duration,
    /// Longest a poller with an event-blocked stream sleeps before it looks again (also a safety net).
    pub event_timeout: Duration,
    /// How long an idle poller keeps looking (spinning, then yielding) before it arms
    /// NEED_WAKEUP and sleeps: while it looks, the host rings no doorbell (like SQPOLL's
    /// `sq_thread_idle`). Longer = fewer doorbells and more CPU burnt while idle. The spin
    /// ends early when the poller is preempted while it looks (its involuntary context
    /// switches grow): then another runnable thread (perhaps the host it waits for) needs the
    /// core, and spinning would only delay it.
    pub idle_spin: Duration,
    /// A fault the streams it selects are armed with from their creation ([`InjectRule`]:
    /// an [`Inject`](crate::Inject) converts to a rule for every stream; `None`: a healthy device). For
    /// testing a runtime's error handling; [`MockDevice::inject`](crate::MockDevice::inject)
    /// changes it later, per stream or for the device.
    pub inject: Option<InjectRule>,
    /// What one client may hold of each table while the device is shared
    /// ([`Quota::FAIR`] by default).
    pub quota: Quota,
}

impl MockConfig {
    /// Most poller threads the device runs at once: `pollers`, or as many as its most
    /// streams need when each serves `FUTEX_WAITV_MAX - 1` of them.
    pub fn most_pollers(&self) -> usize {
        let per = davinci_shm::FUTEX_WAITV_MAX - 1;
        self.pollers
            .max(1)
            .max(davinci_driver_core::MAX_STREAMS.div_ceil(per))
    }
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            device_id: 0,
            memory_size: 256 << 20,
            client_memory_limit: 0,
            pollers: 1,
            run_budget: 64,
            doorbell_timeout: Duration::from_millis(50),
            event_timeout: Duration::from_millis(50),
            idle_spin: Duration::from_millis(2),
            inject: None,
            quota: Quota::FAIR,
        }
    }
}

/// OpenParams for the calling process: pid, uid, admin if uid 0 or `admin` is set, no
/// container.
pub fn local_open_params(role: Role, admin: bool) -> OpenParams {
    let uid = nix::unistd::getuid().as_raw();
    OpenParams {
        role,
        pid: std::process::id(),
        uid,
        admin: admin || uid == 0,
        container: [0; CONTAINER_LEN],
        comm: match std::fs::read_to_string("/proc/self/comm") {
            Ok(s) => davinci_uapi::ClientUsage::comm_field(s.trim_end_matches('\n')),
            Err(_) => [0; 16],
        },
    }
}
