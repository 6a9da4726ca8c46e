//! The whole device's timeline, for an operator (`davinci-smi trace`): an admin's control
//! open records every client's tasks (TRACE, scope DEVICE) for a while, and the [`Trace`]
//! names each stream's track by its client (id, process name, pid, user), as LIST_CLIENTS
//! reports them. No host spans: the operator's process submits nothing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use davinci_uapi::{Errno, Features};

use super::hook::{now_ns, Shared};
use super::Trace;
use crate::error::{Error, Result};
use crate::observe::{trace_op, TraceScope};
use crate::Control;

/// How often the device's buffer is read while recording: at the device's fastest (a few
/// million records a second into 1,024 slots) some are lost anyway, counted in
/// [`Trace::lost`].
const READ_EVERY: Duration = Duration::from_millis(2);

impl Control {
    /// Records every client's tasks on this device for `duration` (TRACE, scope DEVICE:
    /// admin only), reading the device's buffer every 2 ms; `progress` is called after each
    /// read with the time elapsed and the records so far. The [`Trace`] exports as Chrome
    /// trace-event JSON like a client's, one track per stream named by its client.
    ///
    /// # Errors
    /// `EPERM` for a non-admin, `ENOTTY` from a device without `Features::TRACE`, the TRACE
    /// calls' errors. The device's trace is stopped whatever happens.
    pub fn trace_device(
        &self,
        duration: Duration,
        mut progress: impl FnMut(Duration, usize),
    ) -> Result<Trace> {
        const OP: &str = "Control::trace_device";
        let info = self.info()?;
        if !info.features.contains(Features::TRACE) {
            return Err(Error::new(
                Errno::ENOTTY,
                OP,
                format!("{self} keeps no traces (no Features::TRACE: a driver older than ABI 1.5)"),
            ));
        }
        let shared = Shared::default();
        let started_ns = now_ns();
        let cursor = trace_op(&*self.backend, TraceScope::Device, true).map_err(|e| e.in_op(OP))?;
        *shared.cursor.lock().unwrap_or_else(|p| p.into_inner()) = cursor;
        let mut clients = BTreeMap::new();
        let recorded = (|| {
            let start = Instant::now();
            loop {
                shared.read_from(&*self.backend, TraceScope::Device)?;
                // Who the clients are, while they are attached.
                for c in self.clients()? {
                    clients.insert(c.client_id, describe(&c));
                }
                let elapsed = start.elapsed();
                progress(elapsed, shared.lock().records.len());
                if elapsed >= duration {
                    return Ok(());
                }
                std::thread::sleep(READ_EVERY.min(duration - elapsed));
            }
        })();
        let stopped = trace_op(&*self.backend, TraceScope::Device, false)
            .and_then(|_| shared.read_from(&*self.backend, TraceScope::Device));
        recorded.and(stopped).map_err(|e| e.in_op(OP))?;
        let st = std::mem::take(&mut *shared.lock());
        let mut trace = Trace::of(self.to_string(), info.device_id, st, started_ns, now_ns());
        trace.clients = clients;
        Ok(trace)
    }
}

/// `client 7 (python3, pid 1234, uid 1000)`: what a track name says of its client.
fn describe(c: &davinci_uapi::ClientUsage) -> String {
    let comm = c.comm();
    let mut s = format!(
        "client {} ({comm}, pid {}, uid {}",
        c.client_id, c.pid, c.uid
    );
    if let Some(id) = c.container_id() {
        let short: String = id.chars().take(12).collect();
        s.push_str(&format!(", container {short}"));
    }
    s.push(')');
    s
}

/// A handle of an open that does not keep it open ([`Device::downgrade`](crate::Device::downgrade)):
/// what a profiler keeps of the devices a program opened, to trace those still open.
#[derive(Debug, Clone)]
pub struct WeakDevice(std::sync::Weak<crate::device::DeviceInner>);

impl WeakDevice {
    /// The open, if anything still holds it.
    pub fn upgrade(&self) -> Option<crate::Device> {
        self.0.upgrade().map(|inner| crate::Device { inner })
    }
}

impl crate::Device {
    /// A [`WeakDevice`] of this open.
    pub fn downgrade(&self) -> WeakDevice {
        WeakDevice(std::sync::Arc::downgrade(&self.inner))
    }
}
