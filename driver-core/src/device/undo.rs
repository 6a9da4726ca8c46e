//! Undoing a create whose reply could not reach the caller: a host that copies the reply out
//! after [`DeviceCore::ioctl`] returned (the kernel module's `copy_to_user`) and fails to
//! destroys what was created, so the object does not outlive a handle nobody learned
//! (docs/abi.md 1.4: a failed call creates nothing).

use davinci_uapi::{
    AllocMemoryArgs, CreateContextArgs, CreateEventArgs, CreateStreamArgs, ImportMemoryArgs, Wire,
    DRIVER_CMD_ALLOC_MEMORY, DRIVER_CMD_CREATE_CONTEXT, DRIVER_CMD_CREATE_EVENT,
    DRIVER_CMD_CREATE_STREAM, DRIVER_CMD_IMPORT_MEMORY,
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
        match request {
            DRIVER_CMD_CREATE_CONTEXT => match CreateContextArgs::from_bytes(arg) {
                Some(a) => self.destroy_context(client, a.handle),
                None => Ok(()),
            },
            DRIVER_CMD_CREATE_STREAM => match CreateStreamArgs::from_bytes(arg) {
                Some(a) => self.destroy_stream(client, a.handle),
                None => Ok(()),
            },
            DRIVER_CMD_CREATE_EVENT => match CreateEventArgs::from_bytes(arg) {
                Some(a) => self.destroy_event(client, a.handle),
                None => Ok(()),
            },
            DRIVER_CMD_ALLOC_MEMORY => match AllocMemoryArgs::from_bytes(arg) {
                Some(a) => self.free_memory(client, a.handle),
                None => Ok(()),
            },
            DRIVER_CMD_IMPORT_MEMORY => match ImportMemoryArgs::from_bytes(arg) {
                Some(a) => self.free_memory(client, a.handle),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }
}
