//! The C header `uapi/include/davinci/uapi.h`.

use std::fmt::Write as _;

use crate::cfmt::*;
use crate::ctype::*;
use crate::{Abi, GenError, BANNER};

/// The C header `uapi/include/davinci/uapi.h` for `abi`.
///
/// # Errors
/// If the metadata is inconsistent (a field whose C type has another size, a nested struct
/// defined later, a command whose request number does not match its struct, a macro defined
/// twice) or names a type with no C mapping.
pub fn render_header(abi: &Abi<'_>) -> Result<String, GenError> {
    let structs = resolve_all(abi)?;
    check_commands(abi)?;
    collect_defines(abi)?;
    let (major, minor) = abi.version;

    let mut o = String::new();
    let _ = writeln!(o, "{BANNER}");
    o.push_str("/* SPDX-License-Identifier: Apache-2.0 OR MIT */\n");
    let _ = writeln!(
        o,
        "/*\n * davinci device ABI {major}.{minor}: the ioctl commands of /dev/davinciN, their argument\n \
         * structs, the shared ring layout, task descriptors and event records.\n *\n \
         * Specification: docs/abi.md. Source of truth: the davinci-uapi crate (uapi/src);\n \
         * regenerate this file with `cargo xtask gen-header`.\n *\n \
         * Every struct has fixed-width fields only, explicit padding only and user pointers as\n \
         * __u64, so the layout is the same for 32- and 64-bit callers. The layout checks at\n \
         * the end pin every size and offset. Reserved and pad fields the driver reads (to\n \
         * driver) must be zero (EINVAL otherwise); those it writes (from driver), a client\n \
         * ignores: a later minor may give them a meaning.\n */"
    );
    o.push_str("#ifndef DAVINCI_UAPI_H\n#define DAVINCI_UAPI_H\n\n");
    o.push_str("#include <linux/types.h>\n#include <linux/ioctl.h>\n");
    o.push_str(
        "#ifdef __KERNEL__\n#include <linux/stddef.h>\n#else\n#include <stddef.h>\n#endif\n",
    );
    o.push_str(
        "\n/*\n * The data plane needs a 64-bit process: mmap cookies carry their kind at bit 48, past\n \
         * the offset reach of a 32-bit mmap. The struct layouts are the same for 32-bit builds;\n \
         * define DAVINCI_UAPI_LAYOUT_ONLY to include this header there for the layouts alone.\n \
         */\n\
         #if !defined(__KERNEL__) && !defined(DAVINCI_UAPI_LAYOUT_ONLY) && \\\n    \
         defined(__SIZEOF_POINTER__) && __SIZEOF_POINTER__ < 8\n\
         #error \"davinci uapi: the data plane needs a 64-bit process (DAVINCI_UAPI_LAYOUT_ONLY: layouts only)\"\n\
         #endif\n",
    );

    section(&mut o, "Versions, sizes, mmap cookies");
    let rows: Vec<_> = abi
        .scalars
        .iter()
        .map(|(n, v, d)| (format!("DAVINCI_{n}"), c_uint(*v), d.to_string()))
        .collect();
    defines(&mut o, &rows);

    section(&mut o, "Flag bits");
    for (i, f) in abi.flags.iter().enumerate() {
        if i > 0 {
            o.push('\n');
        }
        c_comment(&mut o, "", f.doc);
        let w = f.bits.iter().map(|b| b.0.len()).max().unwrap_or(0) + f.c_prefix.len();
        for (n, v, d) in f.bits {
            let wrapped = wrap(d, 88);
            let lines: Vec<&str> = wrapped.iter().map(String::as_str).collect();
            c_comment(&mut o, "", &lines);
            let _ = writeln!(
                o,
                "#define {:w$} {}",
                format!("{}{n}", f.c_prefix),
                c_flag_value(*v)
            );
        }
    }

    section(&mut o, "Wire constants");
    for (i, g) in abi.const_groups.iter().flat_map(|g| g.iter()).enumerate() {
        if i > 0 {
            o.push('\n');
        }
        c_comment(&mut o, "", &[g.title]);
        let rows: Vec<_> = g
            .items
            .iter()
            .map(|(n, v, d)| (format!("{}{n}", g.c_prefix), c_uint(*v), d.to_string()))
            .collect();
        defines(&mut o, &rows);
    }

    section(&mut o, "Structures");
    for (i, r) in structs.iter().enumerate() {
        if i > 0 {
            o.push('\n');
        }
        let mut doc: Vec<&str> = r.info.doc.to_vec();
        let size_line = format!("{} bytes.", r.info.size);
        doc.push("");
        doc.push(&size_line);
        c_comment(&mut o, "", &doc);
        let _ = writeln!(o, "struct {} {{", r.info.c_name);
        for (f, ct) in r.info.fields.iter().zip(&r.fields) {
            let mut fdoc: Vec<&str> = f.doc.to_vec();
            let bits;
            if let CType::Flags { prefix } = ct {
                bits = format!("Bits: {prefix}*.");
                fdoc.push(&bits);
            }
            c_comment(&mut o, "\t", &fdoc);
            let _ = writeln!(o, "\t{};", ct.decl(f.name));
        }
        o.push_str("};\n");
    }

    section(&mut o, "ioctl commands");
    o.push_str("/* Caller: who may issue the command (docs/abi.md lists its errors). */\n");
    let wn = abi.commands.iter().map(|c| c.name.len()).max().unwrap_or(0) + "DAVINCI_IOCTL_".len();
    let vals: Vec<String> = abi
        .commands
        .iter()
        .map(|c| {
            format!(
                "{}({}, {:#04x}, struct {})",
                ioc_macro(c.dir),
                c_char(abi.magic),
                c.nr,
                c.arg
            )
        })
        .collect();
    let wv = vals.iter().map(String::len).max().unwrap_or(0);
    for (c, v) in abi.commands.iter().zip(&vals) {
        let name = format!("DAVINCI_IOCTL_{}", c.name);
        let _ = writeln!(
            o,
            "#define {name:wn$} {v:wv$} /* caller: {} */",
            caller_text(c.caller)
        );
    }

    section(&mut o, "Helpers");
    o.push_str(HELPERS);

    section(&mut o, "Layout checks");
    o.push_str(
        "/*\n * The sizes and offsets the driver uses (uapi/src). A failure means this compiler\n \
         * lays a struct out differently from the driver: do not use the ABI from this build.\n \
         * (C11 and later; the layout is the same for older C and for C++.)\n */\n",
    );
    o.push_str(
        "#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L\n",
    );
    for r in &structs {
        let c = r.info.c_name;
        let _ = writeln!(
            o,
            "_Static_assert(sizeof(struct {c}) == {}, \"davinci uapi: sizeof(struct {c})\");",
            r.info.size
        );
        for f in r.info.fields {
            let _ = writeln!(
                o,
                "_Static_assert(offsetof(struct {c}, {n}) == {}, \"davinci uapi: offsetof(struct {c}, {n})\");",
                f.offset,
                n = f.name
            );
        }
    }
    o.push_str("#endif /* C11 */\n\n#endif /* DAVINCI_UAPI_H */\n");
    Ok(o)
}

/// The C header for the current ABI. Panics only if `davinci_uapi`'s own metadata is
/// inconsistent (a bug there, caught by every test of this crate).
pub fn c_header() -> String {
    match render_header(&Abi::current()) {
        Ok(h) => h,
        Err(e) => panic!("davinci_uapi metadata cannot be rendered as C: {e}"),
    }
}

// ---------------------------------------------------------------------------------------------

/// Small inline helpers for C clients: the wrapping index comparisons of the ring protocol
/// written without implementation-defined conversions, and the one place each sign
/// convention of an errno is undone (docs/abi.md section 7).
const HELPERS: &str = "\
/*
 * Ring indices and completion counts are free-running __u32 values that wrap. Compare them
 * with these (an unsigned difference below 2^31), never by casting to a signed type.
 */
#if defined(__cplusplus) || (defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L)
#define DAVINCI_INLINE static inline
#else
#define DAVINCI_INLINE static __inline__
#endif

/* Non-zero if count `cur` has reached `target` (cur is target or later, wrapping). */
DAVINCI_INLINE int davinci_reached(__u32 cur, __u32 target)
{
	return (__u32)(cur - target) < 0x80000000u;
}

/* Entries between `head` and `tail` (wrapping); more than the ring's entries is corruption. */
DAVINCI_INLINE __u32 davinci_ring_used(__u32 tail, __u32 head)
{
	return (__u32)(tail - head);
}

/*
 * The positive errno of an event record (0 on success). `status` is a negative errno in a
 * record, while WAIT_EVENT's `status` and a ring's `error` are positive errnos already.
 * A value no driver writes (below -4095) reads as EPROTO (71).
 */
DAVINCI_INLINE int davinci_record_errno(const struct davinci_event_record *r)
{
	__s32 s = (__s32)r->status;

	if (s >= 0)
		return 0;
	if (s < -4095)
		return 71;
	return -s;
}
";
