//! Contexts: a client's groups of streams and events. Destroying one destroys its streams and
//! events.

use davinci_uapi::Errno;

use super::clients::Holding;
use super::entries::ContextEntry;
use super::DeviceCore;
use crate::error::{Error, Result};
use crate::platform::Platform;

impl<P: Platform> DeviceCore<P> {
    /// CREATE_CONTEXT.
    pub fn create_context(&mut self, client: u32) -> Result<u32> {
        self.require_client(client)?;
        self.within_quota(client, Holding::Contexts)?;
        let h = self
            .contexts
            .insert(ContextEntry { owner: client }, "context table is full")?;
        self.client_mut(client)?.contexts += 1;
        Ok(h)
    }

    pub(crate) fn own_context(&self, client: u32, ctx: u32) -> Result<()> {
        match self.contexts.get(ctx) {
            Some(c) if c.owner == client => Ok(()),
            _ => Err(Error::new(Errno::ENOENT, "no such context for this client")),
        }
    }

    /// DESTROY_CONTEXT: also destroys the context's streams and events.
    pub fn destroy_context(&mut self, client: u32, ctx: u32) -> Result<()> {
        self.own_context(client, ctx)?;
        while let Some(s) = self.streams.find(|s| s.ctx == ctx && s.owner == client) {
            self.destroy_stream(client, s)?;
        }
        while let Some(e) = self.events.find(|e| e.ctx == ctx && e.owner == client) {
            self.destroy_event(client, e)?;
        }
        self.contexts.remove(ctx);
        self.client_mut(client)?.contexts -= 1;
        Ok(())
    }
}
