//! Formatting helpers for the generated C: literals, comments, aligned `#define` rows, and
//! the set of every `#define` the header emits.

use std::fmt::Write as _;

use davinci_uapi::args::{Caller, Dir};

use crate::{err, Abi, GenError};

pub(crate) fn ioc_macro(dir: Dir) -> &'static str {
    match dir {
        Dir::Read => "_IOR",
        Dir::Write => "_IOW",
        Dir::ReadWrite => "_IOWR",
    }
}

pub(crate) fn caller_text(caller: Caller) -> &'static str {
    match caller {
        Caller::Any => "any open (client or control)",
        Caller::Client => "client open",
        Caller::Admin => "admin (kernel: CAP_SYS_ADMIN; davinci-mockd: its admins), any open",
    }
}

/// A C integer literal with the smallest fitting unsigned suffix.
pub(crate) fn c_uint(v: u64) -> String {
    if v <= u64::from(u32::MAX) {
        format!("{v}U")
    } else {
        format!("{v}ULL")
    }
}

pub(crate) fn c_flag_value(v: u32) -> String {
    if v.is_power_of_two() {
        format!("(1U << {})", v.trailing_zeros())
    } else {
        format!("{v:#x}U")
    }
}

pub(crate) fn c_char(b: u8) -> String {
    if b.is_ascii_graphic() && b != b'\'' && b != b'\\' {
        format!("'{}'", char::from(b))
    } else {
        format!("{b:#04x}")
    }
}

/// Text safe inside a C block comment.
pub(crate) fn comment_safe(s: &str) -> String {
    s.trim().replace("*/", "* /").replace("/*", "/ *")
}

/// Emits doc lines as a C comment at `indent`.
pub(crate) fn c_comment(out: &mut String, indent: &str, lines: &[&str]) {
    let lines: Vec<String> = lines.iter().map(|l| comment_safe(l)).collect();
    match lines.as_slice() {
        [] => {}
        [one] => {
            let _ = writeln!(out, "{indent}/* {one} */");
        }
        many => {
            let _ = writeln!(out, "{indent}/*");
            for l in many {
                if l.is_empty() {
                    let _ = writeln!(out, "{indent} *");
                } else {
                    let _ = writeln!(out, "{indent} * {l}");
                }
            }
            let _ = writeln!(out, "{indent} */");
        }
    }
}

/// Splits `text` into lines of at most `width` characters at spaces.
pub(crate) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        if !cur.is_empty() && cur.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

/// `#define NAME VALUE /* doc */` rows with aligned columns.
pub(crate) fn defines(out: &mut String, rows: &[(String, String, String)]) {
    let wn = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let wv = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    for (name, value, doc) in rows {
        let doc = comment_safe(doc);
        if doc.is_empty() {
            let _ = writeln!(out, "#define {name:wn$} {value}");
        } else {
            let _ = writeln!(out, "#define {name:wn$} {value:wv$} /* {doc} */");
        }
    }
}

pub(crate) fn section(out: &mut String, title: &str) {
    let _ = writeln!(
        out,
        "\n/* {} {title} {} */\n",
        "-".repeat(4),
        "-".repeat(72usize.saturating_sub(title.len()))
    );
}

/// Every `#define` name the header emits with its value, for uniqueness and the check program.
pub(crate) struct Defines {
    /// `(macro, value)` of scalars, constants and flag bits.
    pub(crate) values: Vec<(String, u64)>,
}

pub(crate) fn collect_defines(abi: &Abi<'_>) -> Result<Defines, GenError> {
    let mut values: Vec<(String, u64)> = Vec::new();
    for (name, value, _) in abi.scalars {
        values.push((format!("DAVINCI_{name}"), *value));
    }
    for f in abi.flags {
        for (name, value, _) in f.bits {
            values.push((format!("{}{name}", f.c_prefix), u64::from(*value)));
        }
    }
    for group in abi.const_groups.iter().flat_map(|g| g.iter()) {
        for (name, value, _) in group.items {
            values.push((format!("{}{name}", group.c_prefix), *value));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let names = values.iter().map(|v| v.0.clone()).chain(
        abi.commands
            .iter()
            .map(|c| format!("DAVINCI_IOCTL_{}", c.name)),
    );
    for n in names {
        if !seen.insert(n.clone()) {
            return err(format!("macro {n} would be defined twice"));
        }
    }
    Ok(Defines { values })
}
