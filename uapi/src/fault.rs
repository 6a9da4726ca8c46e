//! Why a descriptor failed (ABI 1.2, `DAVINCI_FEAT_FAULT_DETAIL`): which operand, what was
//! wrong with it, and a number that says by how much. The device packs it into the `result` of
//! the failed descriptor's event record (`status` < 0), where 1.1 devices wrote 0:
//!
//! ```text
//! bits  0..8   operand (DAVINCI_FAULT_OPERAND_*)
//! bits  8..16  kind    (DAVINCI_FAULT_*)
//! bits 16..32  0
//! bits 32..64  value   (kind-specific: the alignment needed, the bytes past the end)
//! ```

use crate::layout::ConstGroup;

/// Which descriptor field a fault is about.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultOperand {
    /// The descriptor as a whole (or not said).
    None = 0,
    /// `dst`.
    Dst = 1,
    /// `src0`.
    Src0 = 2,
    /// `src1`.
    Src1 = 3,
    /// `len`.
    Len = 4,
    /// `handle`.
    Handle = 5,
    /// `imm`.
    Imm = 6,
    /// `dtype`.
    Dtype = 7,
    /// `opcode`.
    Opcode = 8,
    /// `flags` or a reserved field.
    Reserved = 9,
    /// A kernel's parameter block as a whole, or a scalar in it (an op, a kind, `alpha`,
    /// `eps`, a reserved field of the block) (ABI 1.5).
    Params = 10,
    /// A kernel's operand A (GEMM's A; an elementwise op's `a`; the `src` of a reduction,
    /// softmax or norm) (ABI 1.5).
    A = 11,
    /// A kernel's operand B (GEMM's B; an elementwise op's `b`) (ABI 1.5).
    B = 12,
    /// A kernel's output C (GEMM's C; every other kernel's `dst`) (ABI 1.5).
    C = 13,
    /// A norm's `gamma` (ABI 1.5).
    Gamma = 14,
    /// A norm's `beta` (ABI 1.5).
    Beta = 15,
    /// A kernel's shape: a dimension, `k`, an axis, a row's length (ABI 1.5).
    Shape = 16,
}

impl FaultOperand {
    /// Decodes a wire value.
    pub const fn from_u8(v: u8) -> Option<FaultOperand> {
        Some(match v {
            0 => FaultOperand::None,
            1 => FaultOperand::Dst,
            2 => FaultOperand::Src0,
            3 => FaultOperand::Src1,
            4 => FaultOperand::Len,
            5 => FaultOperand::Handle,
            6 => FaultOperand::Imm,
            7 => FaultOperand::Dtype,
            8 => FaultOperand::Opcode,
            9 => FaultOperand::Reserved,
            10 => FaultOperand::Params,
            11 => FaultOperand::A,
            12 => FaultOperand::B,
            13 => FaultOperand::C,
            14 => FaultOperand::Gamma,
            15 => FaultOperand::Beta,
            16 => FaultOperand::Shape,
            _ => return None,
        })
    }

    /// The field's name in `struct davinci_task_desc`, or the kernel operand's.
    pub const fn name(self) -> &'static str {
        match self {
            FaultOperand::None => "descriptor",
            FaultOperand::Dst => "dst",
            FaultOperand::Src0 => "src0",
            FaultOperand::Src1 => "src1",
            FaultOperand::Len => "len",
            FaultOperand::Handle => "handle",
            FaultOperand::Imm => "imm",
            FaultOperand::Dtype => "dtype",
            FaultOperand::Opcode => "opcode",
            FaultOperand::Reserved => "flags/reserved",
            FaultOperand::Params => "kernel parameters",
            FaultOperand::A => "kernel operand A",
            FaultOperand::B => "kernel operand B",
            FaultOperand::C => "kernel output C",
            FaultOperand::Gamma => "kernel operand gamma",
            FaultOperand::Beta => "kernel operand beta",
            FaultOperand::Shape => "kernel shape",
        }
    }
}

/// What was wrong with the operand.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// Not said.
    Unspecified = 0,
    /// The address range does not start in one of the client's allocations (`EACCES`).
    NotOwned = 1,
    /// The range starts in one of the client's allocations but runs past its end (`ERANGE`);
    /// value: bytes past the end (saturated).
    PastEnd = 2,
    /// The address or length is not aligned (`EINVAL`); value: the alignment needed, bytes.
    Misaligned = 3,
    /// An address or size computation overflows (`ERANGE`).
    Overflow = 4,
    /// A field this opcode does not use, or a reserved one, is not zero (`EBADMSG`).
    NotZero = 5,
    /// An opcode or dtype this ABI does not define, or one this device does not run
    /// (`EBADMSG`).
    Unknown = 6,
    /// No such event in the stream's context (`ENOENT`).
    NoSuchEvent = 7,
    /// The event value waited for will never be reached: the stream that was to record it
    /// stopped (`EIO`).
    Unreachable = 8,
    /// A value outside its range: a leading dimension shorter than its row, an axis past
    /// the shape, a negative or NaN `eps`, dtypes a kernel does not combine (`EINVAL`;
    /// ABI 1.5).
    Invalid = 9,
    /// An output whose elements share memory with each other or with an input it may not
    /// overlap (`EINVAL`; ABI 1.5).
    Overlap = 10,
    /// Past a bound of the device (`E2BIG`); value: the bound, saturated (ABI 1.5).
    TooLarge = 11,
}

impl FaultKind {
    /// Decodes a wire value.
    pub const fn from_u8(v: u8) -> Option<FaultKind> {
        Some(match v {
            0 => FaultKind::Unspecified,
            1 => FaultKind::NotOwned,
            2 => FaultKind::PastEnd,
            3 => FaultKind::Misaligned,
            4 => FaultKind::Overflow,
            5 => FaultKind::NotZero,
            6 => FaultKind::Unknown,
            7 => FaultKind::NoSuchEvent,
            8 => FaultKind::Unreachable,
            9 => FaultKind::Invalid,
            10 => FaultKind::Overlap,
            11 => FaultKind::TooLarge,
            _ => return None,
        })
    }
}

/// Why a descriptor failed: operand, kind and a kind-specific value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fault {
    /// Which field.
    pub operand: FaultOperand,
    /// What was wrong with it.
    pub kind: FaultKind,
    /// Kind-specific: the alignment needed (`Misaligned`), the bytes past the end
    /// (`PastEnd`, saturated at `u32::MAX`), the bound (`TooLarge`); otherwise 0.
    pub value: u32,
}

impl Fault {
    /// A fault with no value.
    pub const fn new(operand: FaultOperand, kind: FaultKind) -> Fault {
        Fault {
            operand,
            kind,
            value: 0,
        }
    }

    /// A fault with a value.
    pub const fn with_value(operand: FaultOperand, kind: FaultKind, value: u32) -> Fault {
        Fault {
            operand,
            kind,
            value,
        }
    }

    /// The packed form, for `EventRecord::result`.
    pub const fn encode(self) -> u64 {
        (self.operand as u64) | ((self.kind as u64) << 8) | ((self.value as u64) << 32)
    }

    /// Unpacks a failed record's `result`: `None` for 0 (a device that says nothing, e.g. a
    /// 1.1 device) or a value this ABI does not define.
    pub const fn decode(result: u64) -> Option<Fault> {
        if result == 0 || (result >> 16) & 0xffff != 0 {
            return None;
        }
        let (Some(operand), Some(kind)) = (
            FaultOperand::from_u8(result as u8),
            FaultKind::from_u8((result >> 8) as u8),
        ) else {
            return None;
        };
        Some(Fault {
            operand,
            kind,
            value: (result >> 32) as u32,
        })
    }
}

/// For messages: `src1: runs 64 bytes past the end of its allocation`.
impl core::fmt::Display for Fault {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let op = self.operand.name();
        match self.kind {
            FaultKind::Unspecified => write!(f, "{op}"),
            FaultKind::NotOwned => write!(
                f,
                "{op}: the address is not in any of this client's allocations"
            ),
            FaultKind::PastEnd if self.value == u32::MAX => write!(
                f,
                "{op}: the range runs 4 GiB or more past the end of its allocation"
            ),
            FaultKind::PastEnd => write!(
                f,
                "{op}: the range runs {} bytes past the end of its allocation",
                self.value
            ),
            FaultKind::Misaligned => {
                write!(f, "{op}: must be a multiple of {} bytes", self.value)
            }
            FaultKind::Overflow => write!(f, "{op}: address + length overflows"),
            FaultKind::NotZero => write!(f, "{op}: must be 0 for this opcode"),
            FaultKind::Unknown => write!(f, "{op}: not a value this device runs"),
            FaultKind::NoSuchEvent => write!(f, "{op}: no such event in the stream's context"),
            FaultKind::Unreachable => write!(
                f,
                "{op}: the event will not reach this value (the stream that was to record it stopped)"
            ),
            FaultKind::Invalid => write!(f, "{op}: a value outside its range"),
            FaultKind::Overlap => write!(
                f,
                "{op}: elements share memory with each other or with an input"
            ),
            FaultKind::TooLarge => write!(f, "{op}: past the device's bound of {}", self.value),
        }
    }
}

/// Wire constants of this module, for the C header.
pub const CONSTS: &[ConstGroup] = &[
    ConstGroup {
        title: "Fault operands (bits 0..8 of a failed event record's result, ABI 1.2)",
        c_prefix: "DAVINCI_FAULT_OPERAND_",
        items: &[
            (
                "NONE",
                FaultOperand::None as u64,
                "the descriptor as a whole",
            ),
            ("DST", FaultOperand::Dst as u64, "dst"),
            ("SRC0", FaultOperand::Src0 as u64, "src0"),
            ("SRC1", FaultOperand::Src1 as u64, "src1"),
            ("LEN", FaultOperand::Len as u64, "len"),
            ("HANDLE", FaultOperand::Handle as u64, "handle"),
            ("IMM", FaultOperand::Imm as u64, "imm"),
            ("DTYPE", FaultOperand::Dtype as u64, "dtype"),
            ("OPCODE", FaultOperand::Opcode as u64, "opcode"),
            (
                "RESERVED",
                FaultOperand::Reserved as u64,
                "flags or a reserved field",
            ),
            (
                "PARAMS",
                FaultOperand::Params as u64,
                "a kernel's parameter block or a scalar in it (1.5)",
            ),
            ("A", FaultOperand::A as u64, "a kernel's operand A (1.5)"),
            ("B", FaultOperand::B as u64, "a kernel's operand B (1.5)"),
            ("C", FaultOperand::C as u64, "a kernel's output C (1.5)"),
            ("GAMMA", FaultOperand::Gamma as u64, "a norm's gamma (1.5)"),
            ("BETA", FaultOperand::Beta as u64, "a norm's beta (1.5)"),
            (
                "SHAPE",
                FaultOperand::Shape as u64,
                "a kernel's dimension, k, axis or row (1.5)",
            ),
        ],
    },
    ConstGroup {
        title: "Fault kinds (bits 8..16 of a failed event record's result, ABI 1.2)",
        c_prefix: "DAVINCI_FAULT_",
        items: &[
            ("UNSPECIFIED", FaultKind::Unspecified as u64, "not said"),
            (
                "NOT_OWNED",
                FaultKind::NotOwned as u64,
                "address not in one of the client's allocations (EACCES)",
            ),
            (
                "PAST_END",
                FaultKind::PastEnd as u64,
                "range runs past its allocation's end (ERANGE); value: bytes past",
            ),
            (
                "MISALIGNED",
                FaultKind::Misaligned as u64,
                "not aligned (EINVAL); value: alignment needed",
            ),
            (
                "OVERFLOW",
                FaultKind::Overflow as u64,
                "address or size computation overflows (ERANGE)",
            ),
            (
                "NOT_ZERO",
                FaultKind::NotZero as u64,
                "unused or reserved field not zero (EBADMSG)",
            ),
            (
                "UNKNOWN",
                FaultKind::Unknown as u64,
                "opcode or dtype not run here (EBADMSG)",
            ),
            (
                "NO_SUCH_EVENT",
                FaultKind::NoSuchEvent as u64,
                "no such event in the context (ENOENT)",
            ),
            (
                "UNREACHABLE",
                FaultKind::Unreachable as u64,
                "event value never reached: its recorder stopped (EIO)",
            ),
            (
                "INVALID",
                FaultKind::Invalid as u64,
                "value outside its range (EINVAL, 1.5)",
            ),
            (
                "OVERLAP",
                FaultKind::Overlap as u64,
                "output elements share memory (EINVAL, 1.5)",
            ),
            (
                "TOO_LARGE",
                FaultKind::TooLarge as u64,
                "past a device bound (E2BIG, 1.5); value: the bound",
            ),
        ],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_what_it_does_not_define() {
        let f = Fault::with_value(FaultOperand::Src1, FaultKind::PastEnd, 64);
        assert_eq!(f.encode(), 3 | (2 << 8) | (64 << 32));
        assert_eq!(Fault::decode(f.encode()), Some(f));
        for op in 0..=16u8 {
            for kind in 0..=11u8 {
                let r = u64::from(op) | (u64::from(kind) << 8) | (7 << 32);
                if r & 0xffff != 0 {
                    let d = Fault::decode(r).unwrap();
                    assert_eq!(d.encode(), r);
                }
            }
        }
        assert_eq!(Fault::decode(0), None, "1.1 devices write 0");
        assert_eq!(Fault::decode(17), None, "unknown operand");
        assert_eq!(Fault::decode(12 << 8), None, "unknown kind");
        assert_eq!(Fault::decode(1 | (1 << 16)), None, "bits 16..32 must be 0");
    }

    #[test]
    fn messages_name_the_operand_and_the_number() {
        extern crate std;
        use std::string::ToString;
        let s = Fault::with_value(FaultOperand::Src1, FaultKind::PastEnd, 64).to_string();
        assert_eq!(
            s,
            "src1: the range runs 64 bytes past the end of its allocation"
        );
        let s = Fault::with_value(FaultOperand::Dst, FaultKind::Misaligned, 4).to_string();
        assert_eq!(s, "dst: must be a multiple of 4 bytes");
    }
}
