//! Layout metadata of every ABI type, recorded by the macros that define them.
//!
//! The C header generator (`cargo xtask gen-header`) and the C layout test read this, so the
//! header is derived from the very definitions the Rust side compiles, never written by hand.

/// One field of an ABI struct.
#[derive(Debug, Clone, Copy)]
pub struct FieldInfo {
    /// Field name, identical in Rust and C.
    pub name: &'static str,
    /// The Rust type as written (`u32`, `[u8; 60]`, `RingOffsets`, `RingFlags`).
    pub ty: &'static str,
    /// Byte offset within the struct.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// Doc comment lines.
    pub doc: &'static [&'static str],
}

/// One ABI struct.
#[derive(Debug, Clone, Copy)]
pub struct StructInfo {
    /// Rust type name.
    pub rust_name: &'static str,
    /// C struct tag (`struct davinci_...`).
    pub c_name: &'static str,
    /// `size_of`.
    pub size: usize,
    /// `align_of`.
    pub align: usize,
    /// Doc comment lines.
    pub doc: &'static [&'static str],
    /// Fields in declaration order.
    pub fields: &'static [FieldInfo],
}

/// Implemented by every ABI struct (by the `abi_struct!` macro).
pub trait AbiStruct {
    /// Layout metadata.
    const INFO: StructInfo;
}

/// A flag-set type (a `u32` newtype).
#[derive(Debug, Clone, Copy)]
pub struct FlagsInfo {
    /// Rust type name.
    pub rust_name: &'static str,
    /// C macro prefix, e.g. `DAVINCI_RING_F_`.
    pub c_prefix: &'static str,
    /// Doc comment lines.
    pub doc: &'static [&'static str],
    /// `(name, value, doc)` of every defined bit.
    pub bits: &'static [(&'static str, u32, &'static str)],
}

/// A group of related integer constants (an enum on the wire).
#[derive(Debug, Clone, Copy)]
pub struct ConstGroup {
    /// Heading for the group.
    pub title: &'static str,
    /// C macro prefix, e.g. `DAVINCI_OP_`.
    pub c_prefix: &'static str,
    /// `(name, value, doc)` of every constant.
    pub items: &'static [(&'static str, u64, &'static str)],
}

/// All-zero value of an ABI type, usable in `const` context without `unsafe` or zerocopy.
pub trait ZeroInit: Sized {
    /// The all-zero value.
    const ZERO: Self;
}

macro_rules! zero_int {
    ($($t:ty),*) => { $(impl ZeroInit for $t { const ZERO: Self = 0; })* };
}
zero_int!(u8, u16, u32, u64, i32, i64);

impl<T: ZeroInit + Copy, const N: usize> ZeroInit for [T; N] {
    const ZERO: Self = [T::ZERO; N];
}

/// Byte-level codec of an ABI type in native byte order, without `unsafe` and without
/// zerocopy, so the kernel build (nothing but `core`) can decode argument bytes too.
pub trait Wire: Sized {
    /// Encoded size (equals `size_of::<Self>()`).
    const SIZE: usize;
    /// Decodes from `b`; bytes missing from a short `b` read as zero.
    fn decode(b: &[u8]) -> Self;
    /// Encodes into `b`; bytes beyond a short `b` are dropped.
    fn encode(&self, b: &mut [u8]);

    /// Decodes exactly `Self::SIZE` bytes; `None` for any other length.
    fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() == Self::SIZE {
            Some(Self::decode(b))
        } else {
            None
        }
    }
}

macro_rules! wire_int {
    ($($t:ty),*) => { $(
        impl Wire for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            fn decode(b: &[u8]) -> Self {
                let mut raw = [0u8; core::mem::size_of::<$t>()];
                for (d, s) in raw.iter_mut().zip(b) {
                    *d = *s;
                }
                <$t>::from_ne_bytes(raw)
            }
            fn encode(&self, b: &mut [u8]) {
                for (d, s) in b.iter_mut().zip(self.to_ne_bytes()) {
                    *d = s;
                }
            }
        }
    )* };
}
wire_int!(u8, u16, u32, u64, i32, i64);

impl<T: Wire + ZeroInit + Copy, const N: usize> Wire for [T; N] {
    const SIZE: usize = T::SIZE * N;
    fn decode(b: &[u8]) -> Self {
        let mut out = [T::ZERO; N];
        for (i, v) in out.iter_mut().enumerate() {
            *v = T::decode(sub(b, i * T::SIZE, T::SIZE));
        }
        out
    }
    fn encode(&self, b: &mut [u8]) {
        for (i, v) in self.iter().enumerate() {
            v.encode(sub_mut(b, i * T::SIZE, T::SIZE));
        }
    }
}

/// `b[off..off + len]`, clipped to what `b` has (never panics).
pub fn sub(b: &[u8], off: usize, len: usize) -> &[u8] {
    let start = off.min(b.len());
    let end = off.saturating_add(len).min(b.len());
    &b[start..end]
}

/// `&mut b[off..off + len]`, clipped to what `b` has (never panics).
pub fn sub_mut(b: &mut [u8], off: usize, len: usize) -> &mut [u8] {
    let start = off.min(b.len());
    let end = off.saturating_add(len).min(b.len());
    &mut b[start..end]
}

/// Defines a `#[repr(C)]` ABI struct, records its layout for the generator and asserts that it
/// has no implicit padding (the sum of the field sizes must equal its size).
macro_rules! abi_struct {
    (
        $(#[doc = $sdoc:literal])*
        #[c_name = $cname:literal]
        pub struct $name:ident {
            $( $(#[doc = $fdoc:literal])* pub $field:ident : $fty:ty, )*
        }
    ) => {
        $(#[doc = $sdoc])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[cfg_attr(
            feature = "zerocopy",
            derive(
                zerocopy::FromBytes,
                zerocopy::IntoBytes,
                zerocopy::KnownLayout,
                zerocopy::Immutable
            )
        )]
        pub struct $name {
            $( $(#[doc = $fdoc])* pub $field: $fty, )*
        }

        impl $crate::layout::ZeroInit for $name {
            const ZERO: Self = Self { $( $field: <$fty as $crate::layout::ZeroInit>::ZERO, )* };
        }

        impl Default for $name {
            fn default() -> Self {
                <Self as $crate::layout::ZeroInit>::ZERO
            }
        }

        impl $crate::layout::Wire for $name {
            const SIZE: usize = core::mem::size_of::<$name>();
            fn decode(b: &[u8]) -> Self {
                Self { $( $field: <$fty as $crate::layout::Wire>::decode($crate::layout::sub(
                    b,
                    core::mem::offset_of!($name, $field),
                    core::mem::size_of::<$fty>(),
                )), )* }
            }
            fn encode(&self, b: &mut [u8]) {
                $( <$fty as $crate::layout::Wire>::encode(&self.$field, $crate::layout::sub_mut(
                    b,
                    core::mem::offset_of!($name, $field),
                    core::mem::size_of::<$fty>(),
                )); )*
            }
        }

        impl $crate::layout::AbiStruct for $name {
            const INFO: $crate::layout::StructInfo = $crate::layout::StructInfo {
                rust_name: stringify!($name),
                c_name: $cname,
                size: core::mem::size_of::<$name>(),
                align: core::mem::align_of::<$name>(),
                doc: &[$($sdoc),*],
                fields: &[
                    $( $crate::layout::FieldInfo {
                        name: stringify!($field),
                        ty: stringify!($fty),
                        offset: core::mem::offset_of!($name, $field),
                        size: core::mem::size_of::<$fty>(),
                        doc: &[$($fdoc),*],
                    }, )*
                ],
            };
        }

        // No implicit padding: every byte of the struct belongs to a named field.
        const _: () = assert!(
            core::mem::size_of::<$name>() == 0 $( + core::mem::size_of::<$fty>() )*,
            concat!("implicit padding in ", stringify!($name))
        );
    };
}

/// Defines a `u32` flag-set newtype: with the `bitflags` feature through `bitflags!`, without it
/// as plain associated consts with the same names and the few methods the kernel side needs.
macro_rules! abi_flags {
    (
        $(#[doc = $sdoc:literal])*
        #[c_prefix = $prefix:literal]
        pub struct $name:ident: u32 {
            $( $(#[doc = $fdoc:literal])* const $flag:ident = $value:expr; )*
        }
    ) => {
        $(#[doc = $sdoc])*
        #[repr(transparent)]
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        #[cfg_attr(
            feature = "zerocopy",
            derive(
                zerocopy::FromBytes,
                zerocopy::IntoBytes,
                zerocopy::KnownLayout,
                zerocopy::Immutable
            )
        )]
        pub struct $name(u32);

        #[cfg(feature = "bitflags")]
        bitflags::bitflags! {
            impl $name: u32 {
                $( $(#[doc = $fdoc])* const $flag = $value; )*
            }
        }

        #[cfg(feature = "bitflags")]
        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(concat!(stringify!($name), "("))?;
                bitflags::parser::to_writer(self, &mut *f)?;
                f.write_str(")")
            }
        }

        #[cfg(not(feature = "bitflags"))]
        impl $name {
            $( $(#[doc = $fdoc])* pub const $flag: Self = Self($value); )*

            /// The empty set.
            pub const fn empty() -> Self {
                Self(0)
            }
            /// Every defined bit.
            pub const fn all() -> Self {
                Self(0 $( | $value )*)
            }
            /// The raw bits.
            pub const fn bits(&self) -> u32 {
                self.0
            }
            /// Keeps every bit, defined or not.
            pub const fn from_bits_retain(bits: u32) -> Self {
                Self(bits)
            }
            /// `None` if an undefined bit is set.
            pub const fn from_bits(bits: u32) -> Option<Self> {
                if bits & !Self::all().0 == 0 {
                    Some(Self(bits))
                } else {
                    None
                }
            }
            /// Whether every bit of `other` is set.
            pub const fn contains(&self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }
            /// Whether any bit of `other` is set.
            pub const fn intersects(&self, other: Self) -> bool {
                self.0 & other.0 != 0
            }
            /// Whether no bit is set.
            pub const fn is_empty(&self) -> bool {
                self.0 == 0
            }
        }

        #[cfg(not(feature = "bitflags"))]
        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.0)
            }
        }

        impl $crate::layout::ZeroInit for $name {
            const ZERO: Self = Self(0);
        }

        impl $crate::layout::Wire for $name {
            const SIZE: usize = 4;
            fn decode(b: &[u8]) -> Self {
                Self(<u32 as $crate::layout::Wire>::decode(b))
            }
            fn encode(&self, b: &mut [u8]) {
                <u32 as $crate::layout::Wire>::encode(&self.0, b)
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self(0)
            }
        }

        impl $name {
            /// Layout metadata for the C header.
            pub const INFO: $crate::layout::FlagsInfo = $crate::layout::FlagsInfo {
                rust_name: stringify!($name),
                c_prefix: $prefix,
                doc: &[$($sdoc),*],
                bits: &[ $( (stringify!($flag), $value, concat!("" $(, $fdoc)*)), )* ],
            };
        }

        const _: () = assert!(core::mem::size_of::<$name>() == 4);
    };
}

pub(crate) use abi_flags;
pub(crate) use abi_struct;
