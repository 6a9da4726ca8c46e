//! Raw descriptors for the conformance suite. The suite hands the device descriptors the
//! shim's safe builders would refuse (addresses that belong to nobody or to another client,
//! foreign event handles, reserved bits), because what the device does with them is what it
//! tests; it submits them through [`SubmitDescs`], the one place the suite uses the shim's
//! `unsafe` raw door.
//!
//! The rule that makes it sound, which every test using it keeps: a buffer a raw descriptor
//! names is dropped only after the task's completion was reaped (the test synchronized or
//! polled the stream) or its stream was dropped (a test that leaves tasks queued declares
//! the buffers before the stream, so they outlive it: Rust drops in reverse order).
//! Addresses that name no buffer of the test's process are always safe: the device faults
//! the task.

#![allow(unsafe_code)]

use davinci_shim::{Result, Stream, TaskDesc, TaskId};

/// Raw submits on a [`Stream`] for tests (see the module docs for the rule they keep).
pub trait SubmitDescs {
    /// [`Stream::submit_raw`].
    fn submit_desc(&mut self, desc: &TaskDesc) -> Result<TaskId>;
    /// [`Stream::submit_raw_batch`].
    fn submit_descs(&mut self, descs: &[TaskDesc]) -> Result<TaskId>;
    /// [`Stream::try_submit_raw_batch`].
    fn try_submit_descs(&mut self, descs: &[TaskDesc]) -> Result<usize>;
    /// [`Stream::submit_slow_raw`].
    fn submit_desc_slow(&mut self, desc: &TaskDesc) -> Result<TaskId>;
}

impl SubmitDescs for Stream {
    fn submit_desc(&mut self, desc: &TaskDesc) -> Result<TaskId> {
        // SAFETY: the suite's rule (module docs): what `desc` names outlives this stream.
        unsafe { self.submit_raw(desc) }
    }

    fn submit_descs(&mut self, descs: &[TaskDesc]) -> Result<TaskId> {
        // SAFETY: the suite's rule (module docs): what `descs` name outlives this stream.
        unsafe { self.submit_raw_batch(descs) }
    }

    fn try_submit_descs(&mut self, descs: &[TaskDesc]) -> Result<usize> {
        // SAFETY: the suite's rule (module docs): what `descs` name outlives this stream.
        unsafe { self.try_submit_raw_batch(descs) }
    }

    fn submit_desc_slow(&mut self, desc: &TaskDesc) -> Result<TaskId> {
        // SAFETY: the suite's rule (module docs): what `desc` names outlives this stream.
        unsafe { self.submit_slow_raw(desc) }
    }
}
