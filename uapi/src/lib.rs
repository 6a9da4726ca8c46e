//! The davinci device ABI, shared by user space (shim, mock daemon, CLI), the kernel module
//! and C runtimes (through the generated `include/davinci/uapi.h`).
//!
//! * [`ioctl`]: `_IOC` encoding; [`args`]: commands (`DRIVER_CMD_*`) and their argument structs.
//! * [`rings`]: the shared ring layout; [`task`]: task descriptors and event records.
//! * [`mmap`]: mmap offset cookies; [`errno`]: what each errno means; [`ABI_VERSION_MAJOR`].
//! * [`layout`]: layout metadata the C header generator reads.
//!
//! `no_std`, no `unsafe`, and with `--no-default-features` nothing but `core`: the kernel
//! module compiles this very crate. The default features add zerocopy derives and bitflags.
//!
//! Versioning: a client refuses a driver whose `abi_major` differs from
//! [`ABI_VERSION_MAJOR`]; minors add commands, feature bits or reserved-field meanings without
//! changing any existing layout.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod args;
pub mod errno;
pub mod fault;
pub mod ioctl;
pub mod kernels;
pub mod layout;
pub mod mmap;
pub mod rings;
pub mod task;

pub use args::*;
pub use errno::Errno;
pub use fault::{Fault, FaultKind, FaultOperand};
pub use kernels::{
    ElementwiseParams, EwOp, GemmParams, KernelId, KernelInfo, ListKernelsArgs, NormKind,
    NormParams, ReduceOp, ReduceParams, SoftmaxParams,
};
pub use layout::{AbiStruct, Wire, ZeroInit};
pub use mmap::{decode_mmap_offset, mmap_offset, MmapKind, DOORBELL_SIZE};
pub use rings::{RingFlags, RingHeader, RingMapping, RingOffsets};
pub use task::{DevAddr, Dtype, EventRecord, Opcode, TaskDesc};

/// ABI major version: layouts and semantics of existing commands. A mismatch is fatal.
pub const ABI_VERSION_MAJOR: u16 = 1;
/// ABI minor version: backwards-compatible additions.
pub const ABI_VERSION_MINOR: u16 = 5;

/// Whether a client built against this crate may talk to a driver reporting `driver_major`.
pub const fn abi_compatible(driver_major: u16) -> bool {
    driver_major == ABI_VERSION_MAJOR
}

/// Every ABI struct, in header order.
pub const STRUCTS: &[layout::StructInfo] = &[
    <RingHeader as AbiStruct>::INFO,
    <RingOffsets as AbiStruct>::INFO,
    <RingMapping as AbiStruct>::INFO,
    <TaskDesc as AbiStruct>::INFO,
    <EventRecord as AbiStruct>::INFO,
    <HandleArgs as AbiStruct>::INFO,
    <CreateContextArgs as AbiStruct>::INFO,
    <SubmitTaskArgs as AbiStruct>::INFO,
    <AllocMemoryArgs as AbiStruct>::INFO,
    <WaitEventArgs as AbiStruct>::INFO,
    <CreateStreamArgs as AbiStruct>::INFO,
    <CreateEventArgs as AbiStruct>::INFO,
    <DeviceInfo as AbiStruct>::INFO,
    <DeviceShareArgs as AbiStruct>::INFO,
    <ListClientsArgs as AbiStruct>::INFO,
    <ClientUsage as AbiStruct>::INFO,
    <LastError as AbiStruct>::INFO,
    <DeviceCounters as AbiStruct>::INFO,
    <ExportMemoryArgs as AbiStruct>::INFO,
    <ImportMemoryArgs as AbiStruct>::INFO,
    <ExportEventArgs as AbiStruct>::INFO,
    <ImportEventArgs as AbiStruct>::INFO,
    <ExportRangeArgs as AbiStruct>::INFO,
    <UnexportMemoryArgs as AbiStruct>::INFO,
    <DeviceIdentity as AbiStruct>::INFO,
    <Usage as AbiStruct>::INFO,
    <DeviceSensors as AbiStruct>::INFO,
    <TraceArgs as AbiStruct>::INFO,
    <TraceRecord as AbiStruct>::INFO,
    <ReadEventsArgs as AbiStruct>::INFO,
    <DeviceEvent as AbiStruct>::INFO,
    <TenantShareArgs as AbiStruct>::INFO,
    <ListKernelsArgs as AbiStruct>::INFO,
    <KernelInfo as AbiStruct>::INFO,
    <GemmParams as AbiStruct>::INFO,
    <ElementwiseParams as AbiStruct>::INFO,
    <ReduceParams as AbiStruct>::INFO,
    <SoftmaxParams as AbiStruct>::INFO,
    <NormParams as AbiStruct>::INFO,
];

/// Every flag-set type.
pub const FLAGS: &[layout::FlagsInfo] = &[RingFlags::INFO, Features::INFO];

/// Every group of wire constants.
pub const CONST_GROUPS: &[&[layout::ConstGroup]] =
    &[task::CONSTS, fault::CONSTS, args::CONSTS, kernels::CONSTS];

/// Scalar constants for the C header: `(name without DAVINCI_, value, doc)`.
pub const SCALARS: &[(&str, u64, &str)] = &[
    (
        "ABI_VERSION_MAJOR",
        ABI_VERSION_MAJOR as u64,
        "ABI major version",
    ),
    (
        "ABI_VERSION_MINOR",
        ABI_VERSION_MINOR as u64,
        "ABI minor version",
    ),
    ("IOCTL_MAGIC", DRIVER_MAGIC as u64, "ioctl type byte ('d')"),
    (
        "WAIT_FOREVER",
        args::WAIT_FOREVER,
        "WAIT_EVENT timeout_ns without limit",
    ),
    (
        "LAST_ERROR_MESSAGE_LEN",
        args::LAST_ERROR_MESSAGE_LEN as u64,
        "bytes of davinci_last_error.message, the NUL included",
    ),
    (
        "KERNEL_NAME_LEN",
        kernels::KERNEL_NAME_LEN as u64,
        "bytes of davinci_kernel_info.name, the NUL included",
    ),
    (
        "KERNEL_PARAMS_VERSION",
        kernels::PARAMS_VERSION as u64,
        "layout version of the built-in kernels' parameter blocks",
    ),
    (
        "KERNEL_LOADED_BASE",
        kernels::KERNEL_LOADED_BASE as u64,
        "kernel handles from here up: loaded kernels (reserved)",
    ),
    ("KERNEL_MAX_K", kernels::KERNEL_MAX_K, "most k of a GEMM"),
    (
        "KERNEL_MAX_ROW",
        kernels::KERNEL_MAX_ROW,
        "most elements along a reduced axis or a softmax/norm row",
    ),
    (
        "RING_HEADER_SIZE",
        rings::RING_HEADER_SIZE as u64,
        "bytes before slot 0",
    ),
    (
        "RING_MIN_ENTRIES",
        rings::RING_MIN_ENTRIES as u64,
        "smallest ring depth",
    ),
    (
        "RING_MAX_ENTRIES",
        rings::RING_MAX_ENTRIES as u64,
        "hard bound on ring depth",
    ),
    (
        "TASK_DESC_SIZE",
        task::TASK_DESC_SIZE as u64,
        "bytes per command slot",
    ),
    (
        "EVENT_RECORD_SIZE",
        task::EVENT_RECORD_SIZE as u64,
        "bytes per event slot",
    ),
    (
        "MMAP_KIND_SHIFT",
        mmap::MMAP_KIND_SHIFT as u64,
        "mmap cookie: kind shift",
    ),
    (
        "MMAP_HANDLE_SHIFT",
        mmap::MMAP_HANDLE_SHIFT as u64,
        "mmap cookie: handle shift",
    ),
    (
        "MMAP_KIND_CMD_RING",
        MmapKind::CmdRing as u64,
        "mmap cookie kind: command ring",
    ),
    (
        "MMAP_KIND_EVENT_RING",
        MmapKind::EventRing as u64,
        "mmap cookie kind: event ring",
    ),
    (
        "MMAP_KIND_DOORBELL",
        MmapKind::Doorbell as u64,
        "mmap cookie kind: doorbell page",
    ),
    (
        "MMAP_KIND_MEMORY",
        MmapKind::Memory as u64,
        "mmap cookie kind: allocation host view",
    ),
    (
        "DOORBELL_SIZE",
        mmap::DOORBELL_SIZE,
        "bytes of the doorbell mapping",
    ),
    (
        "DOORBELL_REG_OFFSET",
        mmap::DOORBELL_REG_OFFSET,
        "offset of the futex doorbell word (DOORBELL_FUTEX only)",
    ),
];
