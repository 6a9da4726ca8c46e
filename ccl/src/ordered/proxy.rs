//! The proxy thread of a stream-ordered communicator: each call once the caller's stream
//! reached it, then the done event's value, in order.

use std::sync::mpsc::Receiver;

use davinci_shim::{Errno, Error, Event, HostMapping, Result, Stream};

use super::{Job, Kind, Shared};
use crate::comm::{Bytes, Comm, DEFAULT_TIMEOUT};

/// A host view lent to the proxy: its bytes, through the view's mapping.
pub(super) struct View(pub(super) HostMapping);

impl Bytes for View {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.0.read(offset, out)
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.0.write(offset, data)
    }
    fn host_view(&self) -> Option<HostMapping> {
        Some(self.0.clone())
    }
}

/// The proxy: each call once its inputs are ready, then its done value, in order.
pub(super) fn proxy(
    mut comm: Comm,
    stream: &mut Stream,
    done: &Event,
    shared: &Shared,
    rx: Receiver<Job>,
) {
    for job in rx {
        let failed = shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .error
            .is_some();
        // After a failure the communicator's ranks no longer agree: later calls are skipped
        // (their streams still go on), the first error stands.
        let r = if failed {
            Ok(())
        } else {
            job.ready
                .synchronize(DEFAULT_TIMEOUT)
                .and_then(|()| run(&mut comm, stream, &job))
        };
        let recorded = done.record(stream).map(|rec| rec.value());
        if failed {
            // A skipped call did not synchronize the proxy's stream: reap its records here.
            let _ = stream.synchronize(DEFAULT_TIMEOUT);
        }
        let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = r {
            st.error.get_or_insert(e);
        }
        match recorded {
            Ok(v) if v == job.value => {}
            Ok(v) => {
                st.error.get_or_insert(Error::new(
                    Errno::EIO,
                    "ccl stream-ordered",
                    format!(
                        "the done event recorded {v}, the call expected {}",
                        job.value
                    ),
                ));
            }
            Err(e) => {
                st.error.get_or_insert(e);
            }
        }
        st.done = job.value;
        shared.changed.notify_all();
    }
    let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    st.gone = true;
    shared.changed.notify_all();
}

fn run(comm: &mut Comm, stream: &mut Stream, job: &Job) -> Result<()> {
    let none = || Error::new(Errno::EINVAL, "ccl stream-ordered", "a buffer is missing");
    let s = job.send.as_ref().map(|v| v as &dyn Bytes);
    let r = job.recv.as_ref().map(|v| v as &dyn Bytes);
    let c = job.count;
    match job.kind {
        Kind::AllReduce(ty, op) => {
            comm.all_reduce(s.ok_or_else(none)?, r.ok_or_else(none)?, c, ty, op, stream)
        }
        Kind::AllGather(ty) => {
            comm.all_gather(s.ok_or_else(none)?, r.ok_or_else(none)?, c, ty, stream)
        }
        Kind::ReduceScatter(ty, op) => {
            comm.reduce_scatter(s.ok_or_else(none)?, r.ok_or_else(none)?, c, ty, op, stream)
        }
        Kind::Broadcast(ty, root) => comm.broadcast(
            s.ok_or_else(none)?,
            r.ok_or_else(none)?,
            c,
            ty,
            root,
            stream,
        ),
        Kind::Reduce(ty, op, root) => comm.reduce(
            s.ok_or_else(none)?,
            r.ok_or_else(none)?,
            c,
            ty,
            op,
            root,
            stream,
        ),
        Kind::Send(ty, peer) => comm.send(s.ok_or_else(none)?, c, ty, peer, stream),
        Kind::Recv(ty, peer) => comm.recv(r.ok_or_else(none)?, c, ty, peer, stream),
        Kind::Group => comm.group(stream, |g| {
            for o in &job.group {
                if o.send {
                    g.send(&o.buf, o.count, o.ty, o.peer)?;
                } else {
                    g.recv(&o.buf, o.count, o.ty, o.peer)?;
                }
            }
            Ok(())
        }),
    }
}
