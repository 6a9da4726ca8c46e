//! The command table: every ioctl's request number (`DRIVER_CMD_*`, `_IOC` encoded with the
//! magic byte and its argument struct), and [`COMMANDS`], the same as data (name, number,
//! direction, argument, who may call it) for dispatch and the C header generator.

use super::device_info::{DeviceInfo, DeviceShareArgs};
use super::observe::{ReadEventsArgs, TraceArgs};
use super::resources::{
    AllocMemoryArgs, CreateContextArgs, CreateEventArgs, CreateStreamArgs, ExportEventArgs,
    ExportMemoryArgs, ExportRangeArgs, HandleArgs, ImportEventArgs, ImportMemoryArgs,
    SubmitTaskArgs, UnexportMemoryArgs, WaitEventArgs,
};
use super::sensors::DeviceSensors;
use super::usage::{
    DeviceCounters, DeviceIdentity, LastError, ListClientsArgs, TenantShareArgs, Usage,
};
use crate::ioctl::{ior, iow, iowr};
use crate::kernels::ListKernelsArgs;

/// The ioctl magic (`type`) byte of every command.
pub const DRIVER_MAGIC: u8 = b'd';

/// `_IOWR('d', 0x01, struct davinci_create_context_args)`.
pub const DRIVER_CMD_CREATE_CONTEXT: u32 = iowr::<CreateContextArgs>(DRIVER_MAGIC, 0x01);
/// `_IOW('d', 0x02, struct davinci_handle_args)`.
pub const DRIVER_CMD_DESTROY_CONTEXT: u32 = iow::<HandleArgs>(DRIVER_MAGIC, 0x02);
/// `_IOWR('d', 0x03, struct davinci_submit_task_args)`.
pub const DRIVER_CMD_SUBMIT_TASK: u32 = iowr::<SubmitTaskArgs>(DRIVER_MAGIC, 0x03);
/// `_IOWR('d', 0x04, struct davinci_alloc_memory_args)`.
pub const DRIVER_CMD_ALLOC_MEMORY: u32 = iowr::<AllocMemoryArgs>(DRIVER_MAGIC, 0x04);
/// `_IOW('d', 0x05, struct davinci_handle_args)`.
pub const DRIVER_CMD_FREE_MEMORY: u32 = iow::<HandleArgs>(DRIVER_MAGIC, 0x05);
/// `_IOWR('d', 0x06, struct davinci_wait_event_args)`.
pub const DRIVER_CMD_WAIT_EVENT: u32 = iowr::<WaitEventArgs>(DRIVER_MAGIC, 0x06);
/// `_IOWR('d', 0x07, struct davinci_create_stream_args)`.
pub const DRIVER_CMD_CREATE_STREAM: u32 = iowr::<CreateStreamArgs>(DRIVER_MAGIC, 0x07);
/// `_IOW('d', 0x08, struct davinci_handle_args)`.
pub const DRIVER_CMD_DESTROY_STREAM: u32 = iow::<HandleArgs>(DRIVER_MAGIC, 0x08);
/// `_IOR('d', 0x09, struct davinci_device_info)`.
pub const DRIVER_CMD_GET_INFO: u32 = ior::<DeviceInfo>(DRIVER_MAGIC, 0x09);
/// `_IOR('d', 0x0a, struct davinci_device_share_args)`.
pub const DRIVER_CMD_QUERY_DEVICE_SHARE: u32 = ior::<DeviceShareArgs>(DRIVER_MAGIC, 0x0a);
/// `_IOW('d', 0x0b, struct davinci_device_share_args)`.
pub const DRIVER_CMD_SET_DEVICE_SHARE: u32 = iow::<DeviceShareArgs>(DRIVER_MAGIC, 0x0b);
/// `_IOWR('d', 0x0c, struct davinci_list_clients_args)`.
pub const DRIVER_CMD_LIST_CLIENTS: u32 = iowr::<ListClientsArgs>(DRIVER_MAGIC, 0x0c);
/// `_IOWR('d', 0x0d, struct davinci_create_event_args)`.
pub const DRIVER_CMD_CREATE_EVENT: u32 = iowr::<CreateEventArgs>(DRIVER_MAGIC, 0x0d);
/// `_IOW('d', 0x0e, struct davinci_handle_args)`.
pub const DRIVER_CMD_DESTROY_EVENT: u32 = iow::<HandleArgs>(DRIVER_MAGIC, 0x0e);
/// `_IOW('d', 0x0f, struct davinci_handle_args)`: wake the device for a stream (the software
/// doorbell, for drivers without `DOORBELL_MMIO` or `DOORBELL_FUTEX`).
pub const DRIVER_CMD_NOTIFY: u32 = iow::<HandleArgs>(DRIVER_MAGIC, 0x0f);
/// `_IOR('d', 0x10, struct davinci_last_error)`: why the last failed command of this open
/// failed (ABI 1.2).
pub const DRIVER_CMD_GET_LAST_ERROR: u32 = ior::<LastError>(DRIVER_MAGIC, 0x10);
/// `_IOR('d', 0x11, struct davinci_device_counters)`: device-wide counters (ABI 1.3).
pub const DRIVER_CMD_GET_COUNTERS: u32 = ior::<DeviceCounters>(DRIVER_MAGIC, 0x11);
/// `_IOWR('d', 0x12, struct davinci_export_memory_args)`: an allocation as a token another
/// client may import (ABI 1.4).
pub const DRIVER_CMD_EXPORT_MEMORY: u32 = iowr::<ExportMemoryArgs>(DRIVER_MAGIC, 0x12);
/// `_IOWR('d', 0x13, struct davinci_import_memory_args)`: the allocation a token names (ABI
/// 1.4).
pub const DRIVER_CMD_IMPORT_MEMORY: u32 = iowr::<ImportMemoryArgs>(DRIVER_MAGIC, 0x13);
/// `_IOR('d', 0x14, struct davinci_device_identity)`: the device's UUID, model, driver and
/// NUMA node (ABI 1.4).
pub const DRIVER_CMD_GET_IDENTITY: u32 = ior::<DeviceIdentity>(DRIVER_MAGIC, 0x14);
/// `_IOR('d', 0x15, struct davinci_usage)`: the caller's own usage against each of its quotas
/// (ABI 1.5).
pub const DRIVER_CMD_GET_USAGE: u32 = ior::<Usage>(DRIVER_MAGIC, 0x15);
/// `_IOWR('d', 0x16, struct davinci_tenant_share_args)`: how many tenant slots a tenant
/// counts for, read or set by an admin (ABI 1.5).
pub const DRIVER_CMD_TENANT_SHARE: u32 = iowr::<TenantShareArgs>(DRIVER_MAGIC, 0x16);
/// `_IOWR('d', 0x17, struct davinci_list_kernels_args)`: the kernels the device runs (ABI
/// 1.5, `DAVINCI_FEAT_KERNELS`; 0 of them on a device without it).
pub const DRIVER_CMD_LIST_KERNELS: u32 = iowr::<ListKernelsArgs>(DRIVER_MAGIC, 0x17);
/// `_IOWR('d', 0x19, struct davinci_export_event_args)`: an event as a token another client
/// may import (ABI 1.5, `DAVINCI_FEAT_SHARED_EVENTS`). (0x18 is LOAD_KERNEL's, reserved.)
pub const DRIVER_CMD_EXPORT_EVENT: u32 = iowr::<ExportEventArgs>(DRIVER_MAGIC, 0x19);
/// `_IOWR('d', 0x1a, struct davinci_import_event_args)`: the event a token names, to wait for
/// (ABI 1.5).
pub const DRIVER_CMD_IMPORT_EVENT: u32 = iowr::<ImportEventArgs>(DRIVER_MAGIC, 0x1a);
/// `_IOWR('d', 0x1b, struct davinci_export_range_args)`: whole pages of an allocation as a
/// token another client may import (ABI 1.5, `DAVINCI_FEAT_EXPORT_LEASE`).
pub const DRIVER_CMD_EXPORT_RANGE: u32 = iowr::<ExportRangeArgs>(DRIVER_MAGIC, 0x1b);
/// `_IOWR('d', 0x1c, struct davinci_unexport_memory_args)`: ends the exports of a range of an
/// allocation, leaving the allocation (ABI 1.5, `DAVINCI_FEAT_EXPORT_LEASE`).
pub const DRIVER_CMD_UNEXPORT_MEMORY: u32 = iowr::<UnexportMemoryArgs>(DRIVER_MAGIC, 0x1c);
/// `_IOR('d', 0x1d, struct davinci_device_sensors)`: the device's temperature, power and
/// voltage now (ABI 1.5, `DAVINCI_FEAT_SENSORS`).
pub const DRIVER_CMD_GET_SENSORS: u32 = ior::<DeviceSensors>(DRIVER_MAGIC, 0x1d);
/// `_IOWR('d', 0x1e, struct davinci_trace_args)`: start, stop or read a per-task trace
/// (ABI 1.5, `DAVINCI_FEAT_TRACE`).
pub const DRIVER_CMD_TRACE: u32 = iowr::<TraceArgs>(DRIVER_MAGIC, 0x1e);
/// `_IOWR('d', 0x1f, struct davinci_read_events_args)`: read the device's event log
/// (ABI 1.5, `DAVINCI_FEAT_DEVICE_EVENTS`).
pub const DRIVER_CMD_READ_EVENTS: u32 = iowr::<ReadEventsArgs>(DRIVER_MAGIC, 0x1f);

/// Command numbers kept for commands no host implements yet: `0x18`, LOAD_KERNEL (loadable
/// kernels on hardware, docs/abi.md 6.1). The table skips them.
pub const RESERVED_NRS: &[u8] = &[0x18];

/// Direction of an ioctl's argument, as the C macro names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// `_IOR`: the driver writes the argument.
    Read,
    /// `_IOW`: the driver reads the argument.
    Write,
    /// `_IOWR`: both.
    ReadWrite,
}

/// Who may issue a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// Any open file, including a control (operator) open.
    Any,
    /// An attached client (not a control open).
    Client,
    /// An admin (uid 0 or the configured admin group) on any open.
    Admin,
}

/// One command of the ABI.
#[derive(Debug, Clone, Copy)]
pub struct Command {
    /// Name without prefix (`CREATE_CONTEXT`).
    pub name: &'static str,
    /// Command number (`_IOC_NR`).
    pub nr: u8,
    /// Argument direction.
    pub dir: Dir,
    /// C struct tag of the argument.
    pub arg: &'static str,
    /// Argument size.
    pub size: usize,
    /// The full request number.
    pub request: u32,
    /// Who may call it.
    pub caller: Caller,
}

macro_rules! commands {
    ($( $name:ident = $nr:literal, $dir:ident, $ty:ty, $caller:ident, $req:ident; )*) => {
        /// Every command, in number order.
        pub const COMMANDS: &[Command] = &[
            $( Command {
                name: stringify!($name),
                nr: $nr,
                dir: Dir::$dir,
                arg: <$ty as crate::layout::AbiStruct>::INFO.c_name,
                size: core::mem::size_of::<$ty>(),
                request: $req,
                caller: Caller::$caller,
            }, )*
        ];
    };
}

commands! {
    CREATE_CONTEXT = 0x01, ReadWrite, CreateContextArgs, Client, DRIVER_CMD_CREATE_CONTEXT;
    DESTROY_CONTEXT = 0x02, Write, HandleArgs, Client, DRIVER_CMD_DESTROY_CONTEXT;
    SUBMIT_TASK = 0x03, ReadWrite, SubmitTaskArgs, Client, DRIVER_CMD_SUBMIT_TASK;
    ALLOC_MEMORY = 0x04, ReadWrite, AllocMemoryArgs, Client, DRIVER_CMD_ALLOC_MEMORY;
    FREE_MEMORY = 0x05, Write, HandleArgs, Client, DRIVER_CMD_FREE_MEMORY;
    WAIT_EVENT = 0x06, ReadWrite, WaitEventArgs, Client, DRIVER_CMD_WAIT_EVENT;
    CREATE_STREAM = 0x07, ReadWrite, CreateStreamArgs, Client, DRIVER_CMD_CREATE_STREAM;
    DESTROY_STREAM = 0x08, Write, HandleArgs, Client, DRIVER_CMD_DESTROY_STREAM;
    GET_INFO = 0x09, Read, DeviceInfo, Any, DRIVER_CMD_GET_INFO;
    QUERY_DEVICE_SHARE = 0x0a, Read, DeviceShareArgs, Any, DRIVER_CMD_QUERY_DEVICE_SHARE;
    SET_DEVICE_SHARE = 0x0b, Write, DeviceShareArgs, Admin, DRIVER_CMD_SET_DEVICE_SHARE;
    LIST_CLIENTS = 0x0c, ReadWrite, ListClientsArgs, Any, DRIVER_CMD_LIST_CLIENTS;
    CREATE_EVENT = 0x0d, ReadWrite, CreateEventArgs, Client, DRIVER_CMD_CREATE_EVENT;
    DESTROY_EVENT = 0x0e, Write, HandleArgs, Client, DRIVER_CMD_DESTROY_EVENT;
    NOTIFY = 0x0f, Write, HandleArgs, Client, DRIVER_CMD_NOTIFY;
    GET_LAST_ERROR = 0x10, Read, LastError, Any, DRIVER_CMD_GET_LAST_ERROR;
    GET_COUNTERS = 0x11, Read, DeviceCounters, Any, DRIVER_CMD_GET_COUNTERS;
    EXPORT_MEMORY = 0x12, ReadWrite, ExportMemoryArgs, Client, DRIVER_CMD_EXPORT_MEMORY;
    IMPORT_MEMORY = 0x13, ReadWrite, ImportMemoryArgs, Client, DRIVER_CMD_IMPORT_MEMORY;
    GET_IDENTITY = 0x14, Read, DeviceIdentity, Any, DRIVER_CMD_GET_IDENTITY;
    GET_USAGE = 0x15, Read, Usage, Client, DRIVER_CMD_GET_USAGE;
    TENANT_SHARE = 0x16, ReadWrite, TenantShareArgs, Admin, DRIVER_CMD_TENANT_SHARE;
    LIST_KERNELS = 0x17, ReadWrite, ListKernelsArgs, Any, DRIVER_CMD_LIST_KERNELS;
    EXPORT_EVENT = 0x19, ReadWrite, ExportEventArgs, Client, DRIVER_CMD_EXPORT_EVENT;
    IMPORT_EVENT = 0x1a, ReadWrite, ImportEventArgs, Client, DRIVER_CMD_IMPORT_EVENT;
    EXPORT_RANGE = 0x1b, ReadWrite, ExportRangeArgs, Client, DRIVER_CMD_EXPORT_RANGE;
    UNEXPORT_MEMORY = 0x1c, ReadWrite, UnexportMemoryArgs, Client, DRIVER_CMD_UNEXPORT_MEMORY;
    GET_SENSORS = 0x1d, Read, DeviceSensors, Any, DRIVER_CMD_GET_SENSORS;
    TRACE = 0x1e, ReadWrite, TraceArgs, Any, DRIVER_CMD_TRACE;
    READ_EVENTS = 0x1f, ReadWrite, ReadEventsArgs, Any, DRIVER_CMD_READ_EVENTS;
}

/// The command with this request number, if any.
pub fn command_by_request(request: u32) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.request == request)
}

/// What undoes a create whose reply never reached the caller (docs/abi.md 1.4: a failed call
/// creates nothing): the request that destroys the handle `request` created, for the requests
/// that create a handle of the caller's (CREATE_CONTEXT, CREATE_STREAM, CREATE_EVENT,
/// ALLOC_MEMORY, IMPORT_MEMORY, IMPORT_EVENT). `None` for any other (an export is no handle
/// of the caller's: it goes with its allocation or event). The one list every host's undo
/// follows.
pub const fn undo_request(request: u32) -> Option<u32> {
    match request {
        DRIVER_CMD_CREATE_CONTEXT => Some(DRIVER_CMD_DESTROY_CONTEXT),
        DRIVER_CMD_CREATE_STREAM => Some(DRIVER_CMD_DESTROY_STREAM),
        DRIVER_CMD_CREATE_EVENT | DRIVER_CMD_IMPORT_EVENT => Some(DRIVER_CMD_DESTROY_EVENT),
        DRIVER_CMD_ALLOC_MEMORY | DRIVER_CMD_IMPORT_MEMORY => Some(DRIVER_CMD_FREE_MEMORY),
        _ => None,
    }
}

/// The undo of `request` ([`undo_request`]) and the handle its reply `reply` names: `None`
/// for a request that creates no handle, a reply of another size, or handle 0 (no handle).
pub fn undo_of(request: u32, reply: &[u8]) -> Option<(u32, u32)> {
    use crate::layout::Wire;
    let undo = undo_request(request)?;
    let handle = match request {
        DRIVER_CMD_CREATE_CONTEXT => CreateContextArgs::from_bytes(reply)?.handle,
        DRIVER_CMD_CREATE_STREAM => CreateStreamArgs::from_bytes(reply)?.handle,
        DRIVER_CMD_CREATE_EVENT => CreateEventArgs::from_bytes(reply)?.handle,
        DRIVER_CMD_ALLOC_MEMORY => AllocMemoryArgs::from_bytes(reply)?.handle,
        DRIVER_CMD_IMPORT_MEMORY => ImportMemoryArgs::from_bytes(reply)?.handle,
        DRIVER_CMD_IMPORT_EVENT => ImportEventArgs::from_bytes(reply)?.handle,
        _ => return None,
    };
    (handle != 0).then_some((undo, handle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_unique_and_ordered() {
        // Numbers from 1 up, skipping only the reserved ones.
        let mut want = 1u8;
        for c in COMMANDS {
            while RESERVED_NRS.contains(&want) {
                want += 1;
            }
            assert_eq!(c.nr, want, "{} out of order", c.name);
            want += 1;
            assert_eq!(crate::ioctl::ioc_nr(c.request), c.nr);
            assert_eq!(crate::ioctl::ioc_type(c.request), DRIVER_MAGIC);
            assert_eq!(crate::ioctl::ioc_size(c.request), c.size);
            assert_eq!(command_by_request(c.request).map(|f| f.name), Some(c.name));
        }
        assert!(command_by_request(0).is_none());
    }
}
