//! The one error every kernel returns: which operand, and what was wrong with it. Nothing in
//! this crate panics on any argument; a kernel validates everything before it writes.

use std::fmt;
use std::ops::Range;

use crate::dtype::DType;

/// The operand (or parameter) an [`Error`] names. The names follow the ABI's
/// `DAVINCI_FAULT_OPERAND_*` where there is one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// GEMM's A, or an elementwise or row kernel's first (or only) input.
    A,
    /// GEMM's B, or an elementwise kernel's second input.
    B,
    /// GEMM's C, or the output of any other kernel.
    C,
    /// A norm's scale.
    Gamma,
    /// A norm's shift.
    Beta,
    /// The shape (dimensions, axis) itself.
    Shape,
    /// A scalar parameter (GEMM's alpha and beta, a norm's eps, the op).
    Params,
    /// The unit of work: the range of rows (or tiles, or output elements) asked for.
    Unit,
}

/// What was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A size or offset does not fit in the address space (`usize`, or `isize` for GEMM's
    /// strides).
    Overflow,
    /// The operand's footprint (`1 + sum((dim_i - 1) * stride_i)` elements) is longer than
    /// its slice.
    TooShort {
        /// Elements the shape and strides reach.
        needed: usize,
        /// Elements the slice has.
        len: usize,
    },
    /// A dtype the kernel does not take here (or not with the other operands' dtypes).
    Dtype(DType),
    /// An output's strides make two of its elements share memory.
    Overlapping,
    /// A leading dimension shorter than its rows (GEMM's C).
    LeadingDim {
        /// The leading dimension given.
        ld: usize,
        /// The least it may be.
        min: usize,
    },
    /// An axis past the shape's dimensions.
    Axis(usize),
    /// A unit outside `0..total`, or with its end before its start.
    Unit {
        /// The range asked for.
        unit: Range<usize>,
        /// How many the launch has.
        total: usize,
    },
    /// A parameter that must be zero (int8 GEMM's alpha and beta) is not.
    NotZero,
    /// A parameter that must be finite or positive (eps) is not.
    Invalid,
    /// An input the op does not take (a unary op given B, a binary op without B).
    Arity,
    /// The f32 copy of a broadcast operand (GEMM's A or B in f16, bf16 with a 0 stride and a
    /// huge `k`) could not be allocated.
    TooLarge,
}

/// A kernel's refusal: `operand` is wrong as `problem` says. Nothing was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// Which operand.
    pub operand: Operand,
    /// What was wrong with it.
    pub problem: Problem,
}

impl Error {
    pub(crate) fn new(operand: Operand, problem: Problem) -> Error {
        Error { operand, problem }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = self.operand;
        match &self.problem {
            Problem::Overflow => write!(f, "{op:?}: a size or offset overflows"),
            Problem::TooShort { needed, len } => {
                write!(f, "{op:?}: needs {needed} elements, the slice has {len}")
            }
            Problem::Dtype(d) => write!(f, "{op:?}: dtype {d:?} is not taken here"),
            Problem::Overlapping => write!(f, "{op:?}: strides make elements share memory"),
            Problem::LeadingDim { ld, min } => {
                write!(f, "{op:?}: leading dimension {ld} is less than {min}")
            }
            Problem::Axis(a) => write!(f, "{op:?}: axis {a} is past the shape"),
            Problem::Unit { unit, total } => {
                write!(f, "{op:?}: unit {unit:?} is not inside 0..{total}")
            }
            Problem::NotZero => write!(f, "{op:?}: must be zero"),
            Problem::Invalid => write!(f, "{op:?}: not a valid value"),
            Problem::Arity => write!(f, "{op:?}: the op does not take this input"),
            Problem::TooLarge => write!(f, "{op:?}: its f32 copy cannot be allocated"),
        }
    }
}

impl std::error::Error for Error {}

/// A kernel's result.
pub type Result<T = ()> = std::result::Result<T, Error>;
