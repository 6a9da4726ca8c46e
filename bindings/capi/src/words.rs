//! C's own words in the messages `davinci_last_error()` returns: the shim's texts name Rust
//! items (`Stream::submit`, "create a new one (Context::create_stream)"), print ranges as Rust
//! `Debug` (`Included(0)..Excluded(8)`) and keep std's " (os error 104)"; a C caller reads
//! the C function (`davinci_stream_create`), `[0, 8)`, and no suffix.

/// Rust items the shim's texts name, and what a C caller calls them. Longer names first
/// where one begins another.
const RUST_TO_C: &[(&str, &str)] = &[
    ("Control::attach(&MockDevice)", "davinci_device_attach"),
    ("Context::create_stream", "davinci_stream_create"),
    ("Context::create_event", "davinci_event_create"),
    ("Device::create_context", "davinci_context_create"),
    ("Device::set_share_mode", "davinci_device_set_share_mode"),
    ("Device::from_env", "davinci_device_open"),
    ("Device::open", "davinci_device_open"),
    ("Device::attach", "davinci_device_attach"),
    ("Device::import", "davinci_device_import"),
    ("Device::alloc", "davinci_buffer_alloc"),
    ("Device::synchronize", "davinci_device_synchronize"),
    ("Device::usage", "davinci_device_get_usage"),
    ("Stream::submit_batch", "davinci_stream_submit_batch"),
    ("Stream::submit_raw", "davinci_stream_submit_raw"),
    ("Stream::try_submit", "davinci_stream_submit"),
    ("Stream::submit", "davinci_stream_submit"),
    ("Stream::synchronize", "davinci_stream_synchronize"),
    ("Stream::poll", "davinci_stream_poll"),
    ("Stream::wait_event", "davinci_stream_wait_event"),
    ("Stream::wait_recorded", "davinci_stream_wait_record"),
    (
        "Stream::launch_host_func",
        "davinci_stream_launch_host_func",
    ),
    ("Event::record", "davinci_event_record"),
    ("Event::synchronize_value", "davinci_event_synchronize"),
    ("Event::synchronize", "davinci_event_synchronize"),
    ("Event::query", "davinci_event_query"),
    ("Recorded::synchronize", "davinci_record_synchronize"),
    ("Recorded::query", "davinci_record_query"),
    ("Recorded::elapsed", "davinci_record_elapsed_ns"),
    ("MemPool::with_options", "davinci_pool_create"),
    ("MemPool::alloc", "davinci_pool_alloc"),
    ("MemPool::trim", "davinci_pool_trim"),
    ("PoolBuffer::write", "davinci_buffer_write"),
    ("PoolBuffer::read", "davinci_buffer_read"),
    ("DeviceBuffer::write", "davinci_buffer_write"),
    ("DeviceBuffer::read", "davinci_buffer_read"),
    ("DeviceBuffer::export", "davinci_buffer_export"),
    ("Region::range", "davinci_region"),
    ("Task::from_desc", "davinci_task_from_desc"),
    ("task::fill", "davinci_task_fill"),
    ("task::copy", "davinci_task_copy"),
    ("task::add", "davinci_task_add"),
    ("task::nop", "davinci_task_nop"),
    // Rust's word for what C calls destroying a handle.
    ("drop it and create", "destroy it and create"),
];

/// `text` in C's words: the Rust items above by their C names, any other `Path::item` by
/// its last part, Rust range bounds as `[start, end)`, no " (os error N)".
pub(crate) fn c_words(text: &str) -> String {
    let mut s = text.to_string();
    for (rust, c) in RUST_TO_C {
        if s.contains(rust) {
            s = s.replace(rust, c);
        }
    }
    let s = ranges(&s);
    let s = strip_os_error(&s);
    last_parts(&s)
}

/// A range bound as Rust's `Debug` prints it at the start of `s`: (the bound's text for an
/// interval, bytes taken). `start` says which side it is on.
fn bound(s: &str, start: bool) -> Option<(String, usize)> {
    if s.starts_with("Unbounded") {
        let text = if start { "[0" } else { "end)" };
        return Some((text.to_string(), "Unbounded".len()));
    }
    let (kind, rest) = if let Some(r) = s.strip_prefix("Included(") {
        (true, r)
    } else {
        (false, s.strip_prefix("Excluded(")?)
    };
    let close = rest.find(')')?;
    let n = &rest[..close];
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let text = match (start, kind) {
        (true, true) => format!("[{n}"),
        (true, false) => format!("({n}"),
        (false, true) => format!("{n}]"),
        (false, false) => format!("{n})"),
    };
    Some((text, "Included(".len() + close + 1))
}

/// `Included(a)..Excluded(b)` (any bounds) as `[a, b)`.
fn ranges(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        let range = bound(rest, true).and_then(|(a, n)| {
            let after = rest[n..].strip_prefix("..")?;
            let (b, m) = bound(after, false)?;
            Some((format!("{a}, {b}"), n + 2 + m))
        });
        if let Some((text, n)) = range {
            out.push_str(&text);
            i += n;
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Without std's " (os error N)" suffixes (the errno's name is in the message already).
fn strip_os_error(s: &str) -> String {
    let mut out = s.to_string();
    while let Some(at) = out.find(" (os error ") {
        let rest = &out[at + " (os error ".len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || !rest[digits..].starts_with(')') {
            break;
        }
        out.replace_range(at..at + " (os error ".len() + digits + 1, "");
    }
    out
}

/// Any `path::item` left, as `item`.
fn last_parts(s: &str) -> String {
    let mut out = s.to_string();
    while let Some(at) = out.find("::") {
        let start = out[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |p| p + 1);
        out.replace_range(start..at + 2, "");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::c_words;

    #[test]
    fn rust_items_become_c_functions() {
        assert_eq!(
            c_words("drop it and create a new one (Context::create_stream): the context"),
            "destroy it and create a new one (davinci_stream_create): the context"
        );
        assert_eq!(
            c_words("PoolBuffer::write failed: ERANGE: bytes"),
            "davinci_buffer_write failed: ERANGE: bytes"
        );
        assert_eq!(c_words("as task::add says"), "as davinci_task_add says");
        assert_eq!(c_words("see Foo::bar and a::b::c"), "see bar and c");
        assert_eq!(c_words("no paths: a: b"), "no paths: a: b");
    }

    #[test]
    fn ranges_are_intervals() {
        assert_eq!(
            c_words("byte range Included(0)..Excluded(1000000000) does not lie"),
            "byte range [0, 1000000000) does not lie"
        );
        assert_eq!(c_words("Excluded(3)..Included(9)"), "(3, 9]");
        assert_eq!(c_words("Unbounded..Unbounded"), "[0, end)");
        assert_eq!(
            c_words("Included(x)..Excluded(1)"),
            "Included(x)..Excluded(1)"
        );
        assert_eq!(c_words("Included(4) alone"), "Included(4) alone");
    }

    #[test]
    fn no_os_error_suffix() {
        assert_eq!(
            c_words("reading the reply: Connection reset by peer (os error 104): gone"),
            "reading the reply: Connection reset by peer: gone"
        );
        assert_eq!(c_words("x (os error y)"), "x (os error y)");
        assert_eq!(c_words("é (os error 5)ü"), "éü");
    }
}
