//! Host callbacks on a [`Stream`] (`cudaLaunchHostFunc`, `aclrtLaunchCallback`): a host
//! function that runs when the stream reaches a point, in order with its completions.
#![forbid(unsafe_code)]

use davinci_uapi::TaskDesc;

use super::{Stream, TaskId};
use crate::error::Result;
use crate::task::Task;

impl Stream {
    /// Runs `f` on the host once the stream reaches this point (`cudaLaunchHostFunc`,
    /// `aclrtLaunchCallback`): a NOP task is queued (its completion, `user_data` 0, is
    /// returned by `poll` like any other) and `f` runs when that completion is taken off the
    /// event ring, after every earlier task of the stream completed.
    ///
    /// Poll-driven: `f` runs on the thread that reaps the stream ([`poll`](Self::poll),
    /// [`synchronize`](Self::synchronize), or a submit waiting for room), inside that call and
    /// before the completions after it are handed out. It runs exactly once: with `Ok(())`
    /// when reached, or with the reason it never will be (`ECANCELED` when the stream is
    /// dropped first, the NOP's own error if it failed). It must not block on this stream
    /// (the stream is borrowed by the reaping call) and should be short. Returns the NOP's id.
    ///
    /// Unlike `cudaLaunchHostFunc`, the device does not wait for the callback: the tasks
    /// after it run meanwhile. To hold device work until the host has done something, have a
    /// stream wait for an event ([`Stream::wait_recorded`]) that the host records on another
    /// stream when ready.
    ///
    /// ```
    /// # fn main() -> davinci_shim::Result<()> {
    /// # #[cfg(feature = "embedded")] {
    /// use davinci_shim::{task, Device};
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    /// let dev = Device::embedded()?;
    /// let mut s = dev.create_context()?.create_stream()?;
    /// let buf = dev.alloc(4096)?;
    /// let (tx, rx) = mpsc::channel();
    /// s.submit(&task::fill(&buf, 1)?)?;
    /// s.launch_host_func(move |reached| tx.send(reached.is_ok()).unwrap())?;
    /// s.synchronize(Duration::from_secs(5))?; // reaps the NOP: the callback runs here
    /// assert_eq!(rx.try_recv(), Ok(true));
    /// # }
    /// # Ok(()) }
    /// ```
    pub fn launch_host_func(
        &mut self,
        f: impl FnOnce(Result<()>) + Send + 'static,
    ) -> Result<TaskId> {
        let id = self.submit(&Task::bare(TaskDesc::nop(0)))?;
        self.pending.callback_last(Box::new(f));
        Ok(id)
    }
}
