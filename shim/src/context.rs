//! [`Context`] (groups streams and events) and its shared state `ContextInner`, which streams
//! and events hold. Also [`Device::create_context`]. Streams and events add their own
//! constructors ([`Context::create_stream`] in `stream/`, [`Context::create_event`] in
//! `event.rs`), so this module needs neither.
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::Arc;

use davinci_uapi::*;

use crate::device::Device;
use crate::error::Result;
use crate::memory::DeviceBuffer;

/// A context as the driver knows it: destroyed when the last [`Context`], stream or event
/// holding it is gone.
pub(crate) struct ContextInner {
    pub(crate) dev: Device,
    pub(crate) handle: u32,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // Nothing to do on failure: the open's close releases it anyway.
        let _ = self
            .dev
            .call_handle("DESTROY_CONTEXT", DRIVER_CMD_DESTROY_CONTEXT, self.handle);
    }
}

impl Device {
    /// Creates a context (`aclrtCreateContext` / `cuCtxCreate`).
    pub fn create_context(&self) -> Result<Context> {
        let mut a = CreateContextArgs::default();
        self.call("CREATE_CONTEXT", DRIVER_CMD_CREATE_CONTEXT, &mut a)?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                dev: self.clone(),
                handle: a.handle,
            }),
        })
    }
}

/// A context: groups streams and events (events are visible to the streams of their own
/// context only). Streams and events keep their context alive: it is destroyed when the
/// context value and all of them are gone. `Send + Sync`.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("handle", &self.inner.handle)
            .finish()
    }
}

impl Context {
    /// The driver's handle of this context.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.inner.dev
    }

    /// Allocates device memory (memory belongs to the open, not the context; same as
    /// [`Device::alloc`]).
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer> {
        self.inner.dev.alloc(len)
    }
}
