//! Rust type strings (as the ABI macros recorded them) to C types, checked against the
//! recorded sizes; the commands checked against their argument structs.

use davinci_uapi::args::Dir;
use davinci_uapi::ioctl;
use davinci_uapi::layout::StructInfo;

use crate::cfmt::*;
use crate::{err, Abi, GenError};

/// A field type as C sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CType {
    /// `__u8` .. `__s64`.
    Int {
        c: &'static str,
        size: usize,
        signed: bool,
    },
    /// A flag-set newtype: a `__u32` holding `prefix*` bits.
    Flags { prefix: String },
    /// A nested ABI struct.
    Struct { c_name: String, size: usize },
    /// `elem name[len]`.
    Array { elem: Box<CType>, len: usize },
}

impl CType {
    pub(crate) fn size(&self) -> usize {
        match self {
            CType::Int { size, .. } => *size,
            CType::Flags { .. } => 4,
            CType::Struct { size, .. } => *size,
            CType::Array { elem, len } => elem.size() * len,
        }
    }

    /// `__u32 name`, `struct x name`, `__u8 name[60]`.
    pub(crate) fn decl(&self, name: &str) -> String {
        match self {
            CType::Int { c, .. } => format!("{c} {name}"),
            CType::Flags { .. } => format!("__u32 {name}"),
            CType::Struct { c_name, .. } => format!("struct {c_name} {name}"),
            CType::Array { elem, len } => format!("{}[{len}]", elem.decl(name)),
        }
    }

    /// Signedness of an integer field (flags are unsigned); `None` for structs.
    pub(crate) fn signed(&self) -> Option<bool> {
        match self {
            CType::Int { signed, .. } => Some(*signed),
            CType::Flags { .. } => Some(false),
            CType::Struct { .. } | CType::Array { .. } => None,
        }
    }
}

pub(crate) fn int_type(ty: &str) -> Option<CType> {
    let (c, size, signed) = match ty {
        "u8" => ("__u8", 1, false),
        "u16" => ("__u16", 2, false),
        "u32" => ("__u32", 4, false),
        "u64" => ("__u64", 8, false),
        "i8" => ("__s8", 1, true),
        "i16" => ("__s16", 2, true),
        "i32" => ("__s32", 4, true),
        "i64" => ("__s64", 8, true),
        _ => return None,
    };
    Some(CType::Int { c, size, signed })
}

/// Maps a Rust type string (as `stringify!` wrote it) to C. `defined` holds the structs already
/// emitted, so a nested struct must come earlier in header order.
pub(crate) fn resolve(abi: &Abi<'_>, ty: &str, defined: &[&str]) -> Result<CType, GenError> {
    let ty = ty.trim();
    if let Some(inner) = ty.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        let Some((elem, len)) = inner.rsplit_once(';') else {
            return err(format!("array type `{ty}` has no `; N`"));
        };
        let len: usize = match len.trim().parse() {
            Ok(n) => n,
            Err(_) => return err(format!("array length in `{ty}` is not a literal number")),
        };
        let elem = resolve(abi, elem, defined)?;
        if matches!(elem, CType::Array { .. }) {
            return err(format!("nested array `{ty}` is not supported"));
        }
        return Ok(CType::Array {
            elem: Box::new(elem),
            len,
        });
    }
    // `crate::rings::RingFlags` and `RingFlags` name the same type.
    let last = ty.rsplit("::").next().unwrap_or(ty).trim();
    if let Some(t) = int_type(last) {
        return Ok(t);
    }
    if let Some(f) = abi.flags.iter().find(|f| f.rust_name == last) {
        return Ok(CType::Flags {
            prefix: f.c_prefix.to_string(),
        });
    }
    if let Some(s) = abi.structs.iter().find(|s| s.rust_name == last) {
        if !defined.contains(&s.c_name) {
            return err(format!(
                "struct {} is used before it is defined: move {} earlier in STRUCTS",
                s.c_name, s.rust_name
            ));
        }
        return Ok(CType::Struct {
            c_name: s.c_name.to_string(),
            size: s.size,
        });
    }
    err(format!(
        "no C mapping for Rust type `{ty}` (not an integer, flag set or ABI struct)"
    ))
}

/// One struct with every field's C type resolved and checked against the recorded sizes.
pub(crate) struct Resolved<'a> {
    pub(crate) info: &'a StructInfo,
    pub(crate) fields: Vec<CType>,
}

pub(crate) fn resolve_all<'a>(abi: &'a Abi<'a>) -> Result<Vec<Resolved<'a>>, GenError> {
    let mut defined: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for s in abi.structs {
        if defined.contains(&s.c_name) {
            return err(format!("struct {} is listed twice", s.c_name));
        }
        let mut fields = Vec::new();
        for f in s.fields {
            let ct = resolve(abi, f.ty, &defined)
                .map_err(|e| GenError(format!("{}.{}: {e}", s.c_name, f.name)))?;
            if ct.size() != f.size {
                return err(format!(
                    "{}.{}: C type `{}` has {} bytes, the Rust field has {}",
                    s.c_name,
                    f.name,
                    ct.decl(f.name),
                    ct.size(),
                    f.size
                ));
            }
            let end = f.offset.checked_add(f.size);
            if end.is_none_or(|end| end > s.size) {
                return err(format!("{}.{} lies outside the struct", s.c_name, f.name));
            }
            fields.push(ct);
        }
        defined.push(s.c_name);
        out.push(Resolved { info: s, fields });
    }
    Ok(out)
}

pub(crate) fn check_commands(abi: &Abi<'_>) -> Result<(), GenError> {
    for c in abi.commands {
        let Some(s) = abi.structs.iter().find(|s| s.c_name == c.arg) else {
            return err(format!(
                "command {}: argument struct {} is not in STRUCTS",
                c.name, c.arg
            ));
        };
        if s.size != c.size {
            return err(format!(
                "command {}: size {} but struct {} has {}",
                c.name, c.size, c.arg, s.size
            ));
        }
        let dir = match c.dir {
            Dir::Read => ioctl::IOC_READ,
            Dir::Write => ioctl::IOC_WRITE,
            Dir::ReadWrite => ioctl::IOC_READ | ioctl::IOC_WRITE,
        };
        if c.size > ioctl::IOC_SIZE_MAX || ioctl::ioc(dir, abi.magic, c.nr, c.size) != c.request {
            return err(format!(
                "command {}: request {:#010x} is not {}({:?}, {:#04x}, struct {})",
                c.name,
                c.request,
                ioc_macro(c.dir),
                char::from(abi.magic),
                c.nr,
                c.arg
            ));
        }
    }
    Ok(())
}
