//! Human-friendly units in settings and flags.

/// Parses a duration such as `500ms`, `60s`, `10m`, `2h` or `1d` into
/// milliseconds. A bare number is taken as milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let (value, unit) = number_and_unit(text).ok_or_else(|| {
        format!("`{text}` is not a duration: expected a whole number and a unit, e.g. 500ms, 60s, 10m, 2h, 1d")
    })?;
    let scale = match unit {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => return Err(format!("`{text}` has an unknown unit `{other}`: use ms, s, m, h or d")),
    };
    value.checked_mul(scale).ok_or_else(|| format!("`{text}` is too long a duration"))
}

/// Parses a memory size such as `8MiB`, `512KiB`, `1GiB` or `4096B` into
/// bytes (binary units, as the papers' KB and MB are). A bare number is bytes.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let value: u64 = digits.parse().map_err(|_| {
        format!("`{text}` is not a memory size: expected a whole number and a unit, e.g. 512KiB, 8MiB, 1GiB")
    })?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => return Err(format!("`{text}` has an unknown unit `{other}`: use B, KiB, MiB or GiB")),
    };
    value.checked_mul(scale).ok_or_else(|| format!("`{text}` is too large a memory size"))
}

/// `"10 m"` → `(10, "m")`: the leading whole number and the trimmed rest.
fn number_and_unit(text: &str) -> Option<(u64, &str)> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    Some((digits.parse().ok()?, unit.trim()))
}

/// Formats milliseconds in the largest unit that divides them exactly.
pub fn format_duration_ms(ms: u64) -> String {
    for (scale, unit) in [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s")] {
        if ms != 0 && ms % scale == 0 {
            return format!("{}{unit}", ms / scale);
        }
    }
    format!("{ms}ms")
}

/// A memory size for people: bytes below 1 KiB, else in the largest binary
/// unit it reaches, with one decimal (`1.4 MiB`).
pub fn format_bytes(bytes: u64) -> String {
    let mut unit = "B";
    let mut value = bytes as f64;
    for next in ["KiB", "MiB", "GiB", "TiB"] {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    if unit == "B" { format!("{bytes} B") } else { format!("{value:.1} {unit}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("10m"), Ok(600_000));
        assert_eq!(parse_duration_ms("60s"), Ok(60_000));
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("42"), Ok(42));
        assert_eq!(parse_duration_ms("1d"), Ok(86_400_000));
        assert!(parse_duration_ms("ten minutes").unwrap_err().contains("not a duration"));
        assert!(parse_duration_ms("5y").unwrap_err().contains("unknown unit `y`"));
        assert!(parse_duration_ms("99999999999999999999s").is_err());
        assert_eq!(format_duration_ms(600_000), "10m");
        assert_eq!(format_duration_ms(1_500), "1500ms");
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_bytes("8MiB"), Ok(8 << 20));
        assert_eq!(parse_bytes("512KiB"), Ok(512 << 10));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("8MB").unwrap_err().contains("unknown unit `MB`"));
        assert!(parse_bytes("lots").unwrap_err().contains("not a memory size"));
        assert!(parse_bytes("99999999999GiB").is_err());
        assert_eq!(format_bytes(1000), "1000 B");
        assert_eq!(format_bytes(1024), "1.0 KiB");
        assert_eq!(format_bytes(1_439_816), "1.4 MiB");
        assert_eq!(format_bytes(11_518_528), "11.0 MiB");
        assert_eq!(format_bytes(1_150_000_000), "1.1 GiB");
        assert_eq!(format_bytes(3 << 40), "3.0 TiB");
    }
}
