//! Quantities as people write them on every davinci command line (`davinci-mockd`,
//! `davinci-smi`, the exporter, the device plugin, the workload) and read them in every
//! report: one grammar for durations ([`parse_duration`], [`parse_duration_between`]) and one
//! for byte sizes ([`parse_size`], [`mib`], [`mib_text`]).
//!
//! Errors are messages for the person who typed the value (`clap`'s `value_parser` shows them
//! as they are); nothing here panics on any input.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::time::Duration;

/// A duration: a number (decimals allowed) with `ms`, `s`, `m` (or `min`) or `h`; a bare
/// number is seconds. `500ms`, `5s`, `1.5m`, `2h`, `3`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (like 500ms, 5s, 1m)"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is out of range"))
}

/// [`parse_duration`], then `min <= d <= max`; the message names both bounds.
pub fn parse_duration_between(s: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < min || d > max {
        return Err(format!(
            "{s:?} must be between {} and {}",
            format_duration(min),
            format_duration(max)
        ));
    }
    Ok(d)
}

/// A duration as [`parse_duration`] reads it back: the largest of `h`, `m`, `s`, `ms` that
/// states it exactly (`1h`, `90s`, `250ms`), else seconds with decimals.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{}s", d.as_secs_f64());
    }
    match ms {
        0 => "0s".to_string(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

/// A size: decimal bytes with an optional `K`, `M`, `G` or `T` suffix (powers of 1024,
/// optionally followed by `i`/`iB`/`B`, any case). `4096`, `256M`, `1GiB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits_end);
    if num.is_empty() {
        return Err(format!("invalid size '{s}': expected a number like 256M"));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid size '{s}': number too large"))?;
    let shift = match suffix.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KI" | "KIB" => 10,
        "M" | "MB" | "MI" | "MIB" => 20,
        "G" | "GB" | "GI" | "GIB" => 30,
        "T" | "TB" | "TI" | "TIB" => 40,
        _ => return Err(format!("invalid size '{s}': unknown suffix '{suffix}'")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("invalid size '{s}': too large"))
}

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

/// Bytes as MiB with one decimal, no unit (a table column headed "MiB"): `1.5`.
pub fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / MIB as f64)
}

/// Bytes as MiB with the unit, whole when exact: `4 MiB`, `1.5 MiB`.
pub fn mib_text(bytes: u64) -> String {
    if bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration(" 3 "), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1min"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("5x").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("99999999999999999999999h")
            .unwrap_err()
            .contains("out of range"));
    }

    #[test]
    fn bounded_durations_name_their_bounds() {
        let (lo, hi) = (Duration::from_millis(100), Duration::from_secs(3600));
        assert_eq!(
            parse_duration_between("5s", lo, hi),
            Ok(Duration::from_secs(5))
        );
        let e = parse_duration_between("2h", lo, hi).unwrap_err();
        assert!(e.contains("between 100ms and 1h"), "{e}");
        assert!(parse_duration_between("0", lo, hi).is_err());
    }

    #[test]
    fn durations_print_as_they_parse() {
        for d in [
            Duration::ZERO,
            Duration::from_millis(250),
            Duration::from_secs(90),
            Duration::from_secs(120),
            Duration::from_secs(7200),
            Duration::from_micros(1500),
        ] {
            assert_eq!(
                parse_duration(&format_duration(d)),
                Ok(d),
                "{}",
                format_duration(d)
            );
        }
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2kb"), Ok(2048));
        assert!(parse_size("M").unwrap_err().contains("expected a number"));
        assert!(parse_size("3X").unwrap_err().contains("unknown suffix"));
        assert!(parse_size("99999999999T")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_size("99999999999999999999").is_err());
    }

    #[test]
    fn mebibytes() {
        assert_eq!(mib(3 * MIB / 2), "1.5");
        assert_eq!(mib(0), "0.0");
        assert_eq!(mib_text(4 * MIB), "4 MiB");
        assert_eq!(mib_text(3 * MIB / 2), "1.5 MiB");
    }
}
