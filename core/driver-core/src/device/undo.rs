//! Undoing a create whose reply could not reach the caller: a host that copies the reply out
//! after [`DeviceCore::ioctl`] returned (the kernel module's `copy_to_user`) and fails to
//! destroys what was created, so the object does not outlive a handle nobody learned
//! (docs/abi.md 1.4: a failed call creates nothing).

use davinci_uapi::{
    undo_of, DRIVER_CMD_DESTROY_CONTEXT, DRIVER_CMD_DESTROY_EVENT, DRIVER_CMD_DESTROY_STREAM,
    DRIVER_CMD_FREE_MEMORY,
};

use super::DeviceCore;
use crate::error::Result;
use crate::platform::Platform;

impl<P: Platform> DeviceCore<P> {
    /// Destroys what request `request` of `client` created, given the reply bytes
    /// [`ioctl`](Self::ioctl) wrote into `arg`: the context, stream, event or allocation it
    /// names. A request that creates nothing is left alone (`Ok`). The host calls it when it
    /// could not deliver the reply, so the client cannot know the handle.
    pub fn undo_create(&mut self, client: u32, request: u32, arg: &[u8]) -> Result<()> {
        // The one table of what undoes what (uapi's `undo_of`), as every host uses it.
        let Some((undo, handle)) = undo_of(request, arg) else {
            return Ok(());
        };
        match undo {
            DRIVER_CMD_DESTROY_CONTEXT => self.destroy_context(client, handle),
            DRIVER_CMD_DESTROY_STREAM => self.destroy_stream(client, handle),
            DRIVER_CMD_DESTROY_EVENT => self.destroy_event(client, handle),
            DRIVER_CMD_FREE_MEMORY => self.free_memory(client, handle),
            _ => Ok(()),
        }
    }
}
