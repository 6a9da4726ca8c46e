//! One name per idea (issue 40): two ideas follow an open from `open()` to LIST_CLIENTS, and
//! each has one word in the code of every crate and of the kernel module:
//!
//! * `client`: an open's handle in the device's client table (driver-core's `clients`,
//!   a control open's too), what a host passes to every call and a resource names as its
//!   `owner`;
//! * `client_id`: the id the device reports for a client (LIST_CLIENTS, GET_USAGE, GET_INFO,
//!   the holder of an exclusive device, an export's grant, the daemon's audit log).
//!
//! The spellings those ideas had before ([`RETIRED`]) fail the check where they appear in
//! code (comments and string literals are left alone: they may quote an ABI field). The ABI
//! keeps its field names: GET_INFO's `caller_id` and EXPORT_MEMORY's `client` (a client id)
//! may be read and written as fields (`info.caller_id`, `DeviceInfo { caller_id: x, .. }`)
//! and declared only in [`ABI_FIELD_FILES`]; their docs say which word the code uses.

use std::path::{Path, PathBuf};

use super::Finding;

/// Where a retired word is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Everywhere in code.
    Anywhere,
    /// Anywhere but as the ABI field of that name: a field access (`.word`, `->word`), a
    /// field given a value in a struct literal (`word: value`), or the field's declaration
    /// (`word: type`) in one of [`ABI_FIELD_FILES`].
    NotAbiField,
    /// As a parameter, field or binding of type `u32` (`word: u32`): the open's handle.
    U32Binding,
}

/// A spelling an idea had before it got its one word.
#[derive(Debug, Clone, Copy)]
pub struct Retired {
    /// The retired identifier.
    pub word: &'static str,
    /// Where it is wrong.
    pub rule: Rule,
    /// The word to use instead.
    pub instead: &'static str,
    /// What it named.
    pub idea: &'static str,
}

const SLOT: &str = "an open's handle in the device's client table";
const ID: &str = "the id the device reports for a client";

/// The retired spellings.
pub const RETIRED: &[Retired] = &[
    Retired {
        word: "holder_handle",
        rule: Rule::Anywhere,
        instead: "client",
        idea: SLOT,
    },
    Retired {
        word: "client_handle",
        rule: Rule::Anywhere,
        instead: "client",
        idea: SLOT,
    },
    Retired {
        word: "open_handle",
        rule: Rule::Anywhere,
        instead: "client",
        idea: SLOT,
    },
    Retired {
        word: "client_slot",
        rule: Rule::Anywhere,
        instead: "client",
        idea: SLOT,
    },
    Retired {
        word: "open",
        rule: Rule::U32Binding,
        instead: "client",
        idea: SLOT,
    },
    Retired {
        word: "caller_id",
        rule: Rule::NotAbiField,
        instead: "client_id",
        idea: ID,
    },
    Retired {
        word: "holder_id",
        rule: Rule::Anywhere,
        instead: "client_id",
        idea: ID,
    },
];

/// The files that declare ABI fields named by a retired word (GET_INFO's `caller_id`, and
/// libdavinci's copy of GET_INFO).
pub const ABI_FIELD_FILES: &[&str] = &["uapi/src/args/device_info.rs", "bindings/capi/src/info.rs"];

/// What a type may start with, after `word:`; anything else is a value (a struct literal).
const TYPE_WORDS: &[&str] = &[
    "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize", "bool",
    "Option", "Vec", "c_uint", "c_int", "c_ulong", "__u32", "__u64", "dyn", "impl", "mut", "Self",
];

/// `text` with the contents of comments and of string and character literals blanked
/// (spaces), line for line, so what is left is code: Rust (nested block comments, raw
/// strings, lifetimes) and C.
pub fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            continue;
        }
        let prev_ident = i > 0 && ident(chars[i - 1]);
        if !prev_ident && (c == 'r' || (c == 'b' && next == Some('r'))) {
            // A raw string: r"..", r#".."#, br"..".
            let mut j = if c == 'b' { i + 2 } else { i + 1 };
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) == Some(&'"') {
                for &k in &chars[i..=j] {
                    out.push(k);
                }
                i = j + 1;
                while i < chars.len() {
                    let closes =
                        chars[i] == '"' && (1..=hashes).all(|h| chars.get(i + h) == Some(&'#'));
                    if closes {
                        for &k in &chars[i..=i + hashes] {
                            out.push(k);
                        }
                        i += hashes + 1;
                        break;
                    }
                    out.push(blank(chars[i]));
                    i += 1;
                }
                continue;
            }
        }
        if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() {
                match chars[i] {
                    '\\' => {
                        out.push(' ');
                        if let Some(&e) = chars.get(i + 1) {
                            out.push(blank(e));
                        }
                        i += 2;
                    }
                    '"' => {
                        out.push('"');
                        i += 1;
                        break;
                    }
                    other => {
                        out.push(blank(other));
                        i += 1;
                    }
                }
            }
            continue;
        }
        if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}'); otherwise a lifetime or label.
            let end = if next == Some('\\') {
                (i + 2..chars.len().min(i + 12)).find(|&k| chars[k] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            if let Some(end) = end {
                out.push('\'');
                for _ in i + 1..end {
                    out.push(' ');
                }
                out.push('\'');
                i = end + 1;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// Whether what follows `word` on its line (`rest`) gives it a type: `: u32`, `: &T`, ...
fn typed(rest: &str) -> Option<&str> {
    let after = rest.trim_start().strip_prefix(':')?;
    if after.starts_with(':') {
        return None;
    }
    let after = after.trim_start();
    if after.starts_with('&') || after.starts_with('[') || after.starts_with('(') {
        return Some(after);
    }
    let word: String = after
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    TYPE_WORDS.contains(&word.as_str()).then_some(after)
}

/// Whether `word: value` follows (a field given a value in a struct literal).
fn given_a_value(rest: &str) -> bool {
    let Some(after) = rest.trim_start().strip_prefix(':') else {
        return false;
    };
    !after.starts_with(':') && typed(rest).is_none()
}

/// The retired names in the code of `text` (the file `path`, relative to the root, with `/`).
pub fn findings_in(path: &str, text: &str) -> Vec<Finding> {
    let code = code_only(text);
    let abi_file = ABI_FIELD_FILES.contains(&path);
    let mut bad = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let starts = (bytes[i].is_ascii_alphabetic() || bytes[i] == b'_')
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
            if !starts {
                i += 1;
                continue;
            }
            let end = (i..bytes.len())
                .find(|&k| !(bytes[k].is_ascii_alphanumeric() || bytes[k] == b'_'))
                .unwrap_or(bytes.len());
            let word = &line[i..end];
            let (before, rest) = (line[..i].trim_end(), &line[end..]);
            if let Some(r) = RETIRED.iter().find(|r| r.word == word) {
                let wrong = match r.rule {
                    Rule::Anywhere => true,
                    Rule::U32Binding => typed(rest).is_some_and(|t| {
                        let t = t.trim_start_matches('&').trim_start();
                        let t = t.strip_prefix("mut ").unwrap_or(t).trim_start();
                        t.starts_with("u32") && !t[3..].starts_with(|c: char| c.is_alphanumeric())
                    }),
                    Rule::NotAbiField => {
                        let field = (before.ends_with('.') && !before.ends_with(".."))
                            || before.ends_with("->");
                        let declared = abi_file && typed(rest).is_some();
                        !(field || given_a_value(rest) || declared)
                    }
                };
                if wrong {
                    let keep = if r.rule == Rule::NotAbiField {
                        format!(
                            " (the ABI field keeps its name: only `.{}` and `{}: value`)",
                            r.word, r.word
                        )
                    } else {
                        String::new()
                    };
                    bad.push(Finding(format!(
                        "{path}:{}: `{}` is a retired name for {}: call it `{}`{keep} \
                         (scripts/xtask/src/tree/names.rs)",
                        n + 1,
                        r.word,
                        r.idea,
                        r.instead
                    )));
                }
            }
            i = end;
        }
    }
    bad
}

/// The files checked: `.rs` files under `dirs` (the members' folders, tests and examples
/// included), and `.rs`, `.c` and `.h` files under the kernel module's `kmod-rust/src`;
/// `target` and hidden folders left out. Sorted, relative to `root`.
pub fn files(root: &Path, dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = dirs.to_vec();
    dirs.push("kmod-rust/src".into());
    let mut out: Vec<PathBuf> = super::files_below(root, &dirs)
        .into_iter()
        .filter_map(|(p, _)| {
            let rel = p.strip_prefix(root).ok()?.to_path_buf();
            let name = rel.file_name()?.to_string_lossy().into_owned();
            let kmod = rel.starts_with("kmod-rust/src");
            (name.ends_with(".rs") || (kmod && (name.ends_with(".c") || name.ends_with(".h"))))
                .then_some(rel)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Every retired name in `files` (relative to `root`).
pub fn check(root: &Path, files: &[PathBuf]) -> Vec<Finding> {
    let mut bad = Vec::new();
    for f in files {
        let rel = f.display().to_string().replace('\\', "/");
        match std::fs::read_to_string(root.join(f)) {
            Ok(text) => bad.extend(findings_in(&rel, &text)),
            Err(e) => bad.push(Finding(format!("{rel}: cannot read: {e}"))),
        }
    }
    bad
}
