//! A tenant's text made safe to show: the one escaping every operators' tool applies to the
//! strings a tenant chose (process names, container ids) and to paths, in tables, CSV, JSON,
//! label values and logs.
//!
//! Printed raw, such a string can take over whoever reads it: `ESC[2J` clears the operator's
//! terminal, a newline forges a table row or a CSV record, and a Unicode bidi control
//! (U+202E RIGHT-TO-LEFT OVERRIDE, U+2066..U+2069 isolates) reorders what follows it on the
//! screen, so `evil\u{202e}gpj.exe` reads as `evilexe.jpg` and one tenant's row can seem to
//! name another's. Invisible format characters (U+200B ZERO WIDTH SPACE, U+FEFF) make two
//! different names look the same. So [`printable`] shows every such character as its Rust
//! escape (`\u{1b}`, `\n`, `\u{202e}`), and [`printable_bytes`] also shows a byte that is not
//! UTF-8 as `\xNN` rather than dropping it (a name that is not UTF-8 is not an empty name).
//!
//! The output is plain text without any character [`needs_escape`] says, and escaping it
//! again changes nothing (a backslash is left as it is), so a value escaped where it is read
//! can be passed through a second tool's escaping unchanged.
#![forbid(unsafe_code)]

use std::fmt::Write as _;

/// Whether `c` is shown escaped by [`printable`]: the control characters (C0, DEL, C1), the
/// line and paragraph separators (U+2028, U+2029), and the format characters (Unicode
/// category Cf) among them every bidi control: U+061C, U+200E, U+200F, U+202A..U+202E,
/// U+2066..U+2069, and the invisible ones (U+00AD, U+200B..U+200D, U+2060..U+2064, U+FEFF,
/// the tags U+E0001, U+E0020..U+E007F).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            u32::from(c),
            0x00AD
                | 0x0600..=0x0605
                | 0x061C
                | 0x06DD
                | 0x070F
                | 0x0890..=0x0891
                | 0x08E2
                | 0x180E
                | 0x200B..=0x200F
                | 0x2028..=0x202E
                | 0x2060..=0x2064
                | 0x2066..=0x206F
                | 0xFEFF
                | 0xFFF9..=0xFFFB
                | 0x110BD
                | 0x110CD
                | 0x13430..=0x1343F
                | 0x1BCA0..=0x1BCA3
                | 0x1D173..=0x1D17A
                | 0xE0001
                | 0xE0020..=0xE007F
        )
}

/// `s` safe to print on a terminal, in a table cell, a CSV field, a JSON value or a label
/// value: each character [`needs_escape`] names becomes its Rust escape (`\u{1b}`, `\n`,
/// `\t`, `\u{202e}`); everything else is kept.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_printable(&mut out, s);
    out
}

fn push_printable(out: &mut String, s: &str) {
    for c in s.chars() {
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
}

/// Bytes that should be UTF-8 (a `comm`, a container id, a file's contents) as
/// [`printable`] text: the UTF-8 parts escaped as [`printable`] does, and each byte that is
/// not UTF-8 as `\xNN` (two lowercase hex digits).
pub fn printable_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        push_printable(&mut out, chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// A NUL-padded text field of the ABI (`comm`, `container`): its bytes up to the first NUL
/// (all of them if there is none), as [`printable_bytes`] shows them.
pub fn printable_field(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    printable_bytes(field.get(..end).unwrap_or(&[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_and_format_characters_are_escaped() {
        assert_eq!(printable("evil\x1b[2J\nrow\t"), "evil\\u{1b}[2J\\nrow\\t");
        assert_eq!(printable("a\u{7f}b\u{85}"), "a\\u{7f}b\\u{85}");
        assert_eq!(printable("evil\u{202e}gpj.exe"), "evil\\u{202e}gpj.exe");
        for c in [
            '\u{061C}',
            '\u{200E}',
            '\u{200F}',
            '\u{202A}',
            '\u{202B}',
            '\u{202C}',
            '\u{202D}',
            '\u{202E}',
            '\u{2066}',
            '\u{2067}',
            '\u{2068}',
            '\u{2069}',
            '\u{200B}',
            '\u{200C}',
            '\u{200D}',
            '\u{FEFF}',
            '\u{2028}',
            '\u{2029}',
            '\u{00AD}',
            '\u{E0041}',
        ] {
            let shown = printable(&format!("x{c}y"));
            assert_eq!(shown, format!("x\\u{{{:x}}}y", u32::from(c)), "{c:?}");
            assert!(!shown.contains(c), "{c:?}");
        }
    }

    #[test]
    fn ordinary_text_is_kept_as_is() {
        for s in [
            "python3",
            "torch_worker-7",
            "d3b07384d113",
            "/dev/davinci0",
            "训练进程",
            "café",
            "مرحبا",
            "a\\u{1b}b",
            "",
        ] {
            assert_eq!(printable(s), s);
            assert_eq!(printable_bytes(s.as_bytes()), s);
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_are_shown_not_dropped() {
        assert_eq!(printable_bytes(b"\xffevil"), "\\xffevil");
        assert_eq!(printable_bytes(b"ok\xc3(\x80"), "ok\\xc3(\\x80");
        assert_eq!(printable_bytes(b"\xe2\x80\xae!"), "\\u{202e}!");
        let mut comm = [0u8; 16];
        comm[..5].copy_from_slice(b"\xfe\xfftop");
        assert_eq!(printable_field(&comm), "\\xfe\\xfftop");
        assert_eq!(printable_field(b"no-nul-at-all"), "no-nul-at-all");
        assert_eq!(printable_field(&[0u8; 16]), "");
    }

    #[test]
    fn escaping_twice_changes_nothing() {
        for s in [
            &b"evil\x1b[2J\nrow"[..],
            b"\xff\xfe\xe2\x80\xae",
            "x\u{2066}y\u{FEFF}".as_bytes(),
        ] {
            let once = printable_bytes(s);
            assert_eq!(printable(&once), once);
            assert_eq!(printable_bytes(once.as_bytes()), once);
            assert!(once.chars().all(|c| !needs_escape(c)), "{once}");
        }
    }
}
