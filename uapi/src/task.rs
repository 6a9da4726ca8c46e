//! Task descriptors (command-ring slots, 64 bytes) and event records (event-ring slots,
//! 32 bytes). Memory is named by device virtual addresses (`dev_addr` from `ALLOC_MEMORY`),
//! never by physical addresses; the device checks every address against the submitting
//! client's own allocations.

use crate::layout::{abi_struct, ConstGroup};

/// A device virtual address: what `ALLOC_MEMORY` returns in `dev_addr` and what descriptors
/// name memory by. A type of its own so the descriptor constructors cannot take a length,
/// a count or a `user_data` where an address belongs (or the other way round); on the wire
/// it is the plain `__u64` of the descriptor's field.
///
/// `addr + n` is the address `n` bytes further (wrapping, like the device's own arithmetic:
/// the device checks every range it is given).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DevAddr(pub u64);

impl DevAddr {
    /// The raw value, as the descriptor carries it.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl core::ops::Add<u64> for DevAddr {
    type Output = DevAddr;

    fn add(self, n: u64) -> DevAddr {
        DevAddr(self.0.wrapping_add(n))
    }
}

impl core::fmt::Display for DevAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl core::fmt::LowerHex for DevAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::LowerHex::fmt(&self.0, f)
    }
}

/// Size of a task descriptor.
pub const TASK_DESC_SIZE: usize = 64;
/// Size of an event record.
pub const EVENT_RECORD_SIZE: usize = 32;

/// What a task does. The wire field is `TaskDesc::opcode` (`u8`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// Does nothing; completes with result 0.
    Nop = 0,
    /// Writes a pattern repeatedly over `len` bytes at `dst`: with `dtype` 0 the low 32 bits
    /// of `imm` (`len` a multiple of 4, `dst` 4-byte aligned); with `DAVINCI_DTYPE_U8` its low
    /// 8 bits (any `dst` and `len`); with `DAVINCI_DTYPE_U16` its low 16 bits (`dst` and `len`
    /// 2-byte aligned) (ABI 1.5). Result: bytes written.
    Fill = 1,
    /// Copies `len` bytes from `src0` to `dst` (ranges may overlap; memmove semantics).
    /// Result: bytes copied.
    Copy = 2,
    /// Elementwise `dst[i] = src0[i] + src1[i]` for `len` elements of type `dtype`
    /// (integers wrap; f32 IEEE; f16 and bf16 rounded to nearest even, ABI 1.5). Addresses
    /// aligned to the element's size. Result: elements added.
    Add = 3,
    /// Sets event `handle` (of the stream's context) to at least `imm` and wakes its waiters.
    /// Result: the event's value afterwards.
    EventRecord = 4,
    /// The stream executes nothing further until event `handle` (same context) reaches `imm`.
    /// Result: the event's value when the wait ended.
    EventWait = 5,
    /// Launches kernel `handle` (`DAVINCI_KERNEL_*`, ABI 1.5) over `imm` blocks (0 or 1 for a
    /// built-in kernel) with its parameter block of `len` bytes (exactly the kernel's
    /// `params_size`) at device address `src0`, copied once when the device takes the
    /// descriptor. A device without `DAVINCI_FEAT_KERNELS` fails it with `EBADMSG`
    /// (`HANDLE`, `UNKNOWN`). Result: the launch's units of work run.
    KernelLaunch = 6,
}

impl Opcode {
    /// Every opcode.
    pub const ALL: [Opcode; 7] = [
        Opcode::Nop,
        Opcode::Fill,
        Opcode::Copy,
        Opcode::Add,
        Opcode::EventRecord,
        Opcode::EventWait,
        Opcode::KernelLaunch,
    ];

    /// Decodes a wire value.
    pub const fn from_u8(v: u8) -> Option<Opcode> {
        if (v as usize) < Self::ALL.len() {
            Some(Self::ALL[v as usize])
        } else {
            None
        }
    }
}

/// An element type: of `ADD` and `FILL` (`TaskDesc::dtype`) and of a kernel's operands.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// Unsigned 32-bit, wrapping.
    U32 = 0,
    /// Signed 32-bit, wrapping.
    I32 = 1,
    /// IEEE-754 single precision.
    F32 = 2,
    /// IEEE-754 half precision (ABI 1.5).
    F16 = 3,
    /// bfloat16: single precision's exponent, 8 bits of significand (ABI 1.5).
    Bf16 = 4,
    /// Signed 8-bit, wrapping (ABI 1.5).
    I8 = 5,
    /// Unsigned 8-bit, wrapping (ABI 1.5).
    U8 = 6,
    /// Unsigned 16-bit, wrapping (ABI 1.5).
    U16 = 7,
}

impl Dtype {
    /// Every dtype, in wire order.
    pub const ALL: [Dtype; 8] = [
        Dtype::U32,
        Dtype::I32,
        Dtype::F32,
        Dtype::F16,
        Dtype::Bf16,
        Dtype::I8,
        Dtype::U8,
        Dtype::U16,
    ];

    /// Decodes a wire value.
    pub const fn from_u8(v: u8) -> Option<Dtype> {
        if (v as usize) < Self::ALL.len() {
            Some(Self::ALL[v as usize])
        } else {
            None
        }
    }

    /// Element size in bytes.
    pub const fn size(self) -> u64 {
        match self {
            Dtype::U32 | Dtype::I32 | Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 | Dtype::U16 => 2,
            Dtype::I8 | Dtype::U8 => 1,
        }
    }

    /// A floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::F16 | Dtype::Bf16)
    }

    /// The bit of this dtype in a mask of dtypes (`davinci_kernel_info.dtypes`).
    pub const fn bit(self) -> u64 {
        1 << self as u8
    }
}

abi_struct! {
    /// One task, as the host writes it into a command-ring slot (or passes it to
    /// `SUBMIT_TASK`). Operand meaning depends on `opcode` (`DAVINCI_OP_*`); unused operands
    /// must be zero. The device copies the whole descriptor out of shared memory once and
    /// validates the copy.
    #[c_name = "davinci_task_desc"]
    pub struct TaskDesc {
        /// `DAVINCI_OP_*` (to device).
        pub opcode: u8,
        /// `DAVINCI_DTYPE_*` for `ADD` and `FILL` (0: 32-bit words), else 0 (to device).
        pub dtype: u8,
        /// Reserved task flags, must be 0 (to device).
        pub flags: u16,
        /// Reserved, must be 0 (to device).
        pub reserved0: u32,
        /// Opaque cookie, echoed in the event record (to device).
        pub user_data: u64,
        /// Destination device address (to device).
        pub dst: u64,
        /// First source device address (to device).
        pub src0: u64,
        /// Second source device address (to device).
        pub src1: u64,
        /// Length: bytes for FILL/COPY, elements for ADD, parameter bytes for KERNEL_LAUNCH (to device).
        pub len: u64,
        /// Immediate: FILL pattern (low 32, 16 or 8 bits), EVENT_* value, KERNEL_LAUNCH block count (to device).
        pub imm: u64,
        /// Event handle for EVENT_RECORD / EVENT_WAIT; kernel handle for KERNEL_LAUNCH (to device).
        pub handle: u32,
        /// Reserved, must be 0 (to device).
        pub reserved1: u32,
    }
}

const _: () = {
    assert!(core::mem::size_of::<TaskDesc>() == TASK_DESC_SIZE);
    assert!(core::mem::offset_of!(TaskDesc, user_data) == 8);
    assert!(core::mem::offset_of!(TaskDesc, dst) == 16);
    assert!(core::mem::offset_of!(TaskDesc, imm) == 48);
    assert!(core::mem::offset_of!(TaskDesc, handle) == 56);
};

impl TaskDesc {
    const fn base(opcode: Opcode, user_data: u64) -> Self {
        Self {
            opcode: opcode as u8,
            dtype: 0,
            flags: 0,
            reserved0: 0,
            user_data,
            dst: 0,
            src0: 0,
            src1: 0,
            len: 0,
            imm: 0,
            handle: 0,
            reserved1: 0,
        }
    }

    /// The same descriptor with `user_data` set (what its completion carries back).
    pub const fn with_user_data(mut self, user_data: u64) -> Self {
        self.user_data = user_data;
        self
    }

    /// `NOP`.
    pub const fn nop(user_data: u64) -> Self {
        Self::base(Opcode::Nop, user_data)
    }

    /// `FILL` `len` bytes at `dst` with `pattern`.
    pub const fn fill(user_data: u64, dst: DevAddr, len: u64, pattern: u32) -> Self {
        let mut d = Self::base(Opcode::Fill, user_data);
        d.dst = dst.0;
        d.len = len;
        d.imm = pattern as u64;
        d
    }

    /// `COPY` `len` bytes from `src` to `dst` (destination first, as `memcpy`).
    pub const fn copy(user_data: u64, dst: DevAddr, src: DevAddr, len: u64) -> Self {
        let mut d = Self::base(Opcode::Copy, user_data);
        d.dst = dst.0;
        d.src0 = src.0;
        d.len = len;
        d
    }

    /// `ADD` `count` elements of `dtype`: `dst = a + b` (destination first).
    pub const fn add(
        user_data: u64,
        dtype: Dtype,
        dst: DevAddr,
        a: DevAddr,
        b: DevAddr,
        count: u64,
    ) -> Self {
        let mut d = Self::base(Opcode::Add, user_data);
        d.dtype = dtype as u8;
        d.dst = dst.0;
        d.src0 = a.0;
        d.src1 = b.0;
        d.len = count;
        d
    }

    /// `EVENT_RECORD`: set `event` to at least `value`.
    pub const fn event_record(user_data: u64, event: u32, value: u64) -> Self {
        let mut d = Self::base(Opcode::EventRecord, user_data);
        d.handle = event;
        d.imm = value;
        d
    }

    /// `EVENT_WAIT`: wait until `event` reaches `value`.
    pub const fn event_wait(user_data: u64, event: u32, value: u64) -> Self {
        let mut d = Self::base(Opcode::EventWait, user_data);
        d.handle = event;
        d.imm = value;
        d
    }

    /// `FILL` `len` bytes at `dst` with a pattern of `dtype`'s width (`U8`, `U16`; `U32` is
    /// [`fill`](Self::fill)): the low bits of `pattern` (ABI 1.5).
    pub const fn fill_as(
        user_data: u64,
        dtype: Dtype,
        dst: DevAddr,
        len: u64,
        pattern: u32,
    ) -> Self {
        let mut d = Self::fill(user_data, dst, len, pattern);
        d.dtype = dtype as u8;
        d
    }

    /// `KERNEL_LAUNCH` of `kernel` with its parameter block at `params` (`params_len` bytes).
    pub const fn kernel_launch(
        user_data: u64,
        kernel: u32,
        blocks: u64,
        params: DevAddr,
        params_len: u64,
    ) -> Self {
        let mut d = Self::base(Opcode::KernelLaunch, user_data);
        d.handle = kernel;
        d.imm = blocks;
        d.src0 = params.0;
        d.len = params_len;
        d
    }
}

abi_struct! {
    /// One completion, as the device writes it into an event-ring slot. Every descriptor the
    /// device takes produces exactly one record, in stream order.
    #[c_name = "davinci_event_record"]
    pub struct EventRecord {
        /// The descriptor's `user_data` (from device).
        pub user_data: u64,
        /// 0 on success, else a negative errno (`-EACCES`, `-EBADMSG`, ...) (from device).
        pub status: i32,
        /// The descriptor's opcode (from device).
        pub opcode: u8,
        /// Reserved: ignore it, a later minor may use it (from device).
        pub pad: [u8; 3],
        /// Opcode-specific result (bytes, elements, event value); for a failed descriptor, a
        /// packed fault or 0: bits 0..8 `DAVINCI_FAULT_OPERAND_*` (which operand), bits 8..16
        /// `DAVINCI_FAULT_*` (what was wrong), bits 32..64 its value (from device).
        pub result: u64,
        /// Device time of completion, nanoseconds on the device's monotonic clock (from device).
        pub timestamp_ns: u64,
    }
}

const _: () = assert!(core::mem::size_of::<EventRecord>() == EVENT_RECORD_SIZE);

/// Wire constants of this module, for the C header.
pub const CONSTS: &[ConstGroup] = &[
    ConstGroup {
        title: "Task opcodes (davinci_task_desc.opcode)",
        c_prefix: "DAVINCI_OP_",
        items: &[
            ("NOP", Opcode::Nop as u64, "do nothing"),
            (
                "FILL",
                Opcode::Fill as u64,
                "fill len bytes at dst with the 32-bit pattern imm",
            ),
            (
                "COPY",
                Opcode::Copy as u64,
                "copy len bytes from src0 to dst",
            ),
            (
                "ADD",
                Opcode::Add as u64,
                "dst[i] = src0[i] + src1[i], len elements of dtype",
            ),
            (
                "EVENT_RECORD",
                Opcode::EventRecord as u64,
                "set event handle to at least imm",
            ),
            (
                "EVENT_WAIT",
                Opcode::EventWait as u64,
                "wait until event handle reaches imm",
            ),
            (
                "KERNEL_LAUNCH",
                Opcode::KernelLaunch as u64,
                "launch kernel handle with the parameter block at src0",
            ),
        ],
    },
    ConstGroup {
        title: "Element types (davinci_task_desc.dtype of ADD and FILL, kernel operands)",
        c_prefix: "DAVINCI_DTYPE_",
        items: &[
            ("U32", Dtype::U32 as u64, "unsigned 32-bit, wrapping"),
            ("I32", Dtype::I32 as u64, "signed 32-bit, wrapping"),
            ("F32", Dtype::F32 as u64, "IEEE-754 single"),
            ("F16", Dtype::F16 as u64, "IEEE-754 half (ABI 1.5)"),
            ("BF16", Dtype::Bf16 as u64, "bfloat16 (ABI 1.5)"),
            ("I8", Dtype::I8 as u64, "signed 8-bit, wrapping (ABI 1.5)"),
            ("U8", Dtype::U8 as u64, "unsigned 8-bit, wrapping (ABI 1.5)"),
            (
                "U16",
                Dtype::U16 as u64,
                "unsigned 16-bit, wrapping (ABI 1.5)",
            ),
        ],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcode_decode() {
        for op in Opcode::ALL {
            assert_eq!(Opcode::from_u8(op as u8), Some(op));
        }
        assert_eq!(Opcode::from_u8(7), None);
        assert_eq!(Opcode::from_u8(255), None);
        assert_eq!(Dtype::from_u8(8), None);
        for d in Dtype::ALL {
            assert_eq!(Dtype::from_u8(d as u8), Some(d));
        }
    }

    #[test]
    fn constructors_fill_the_right_fields() {
        let d = TaskDesc::add(9, Dtype::F32, DevAddr(1), DevAddr(2), DevAddr(3), 4);
        assert_eq!(
            (d.opcode, d.dtype, d.dst, d.src0, d.src1, d.len, d.user_data),
            (3, 2, 1, 2, 3, 4, 9)
        );
        let e = TaskDesc::event_wait(1, 5, 7);
        assert_eq!((e.opcode, e.handle, e.imm), (5, 5, 7));
    }
}
