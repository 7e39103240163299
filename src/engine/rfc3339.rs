//! Event times written as RFC 3339 text (`2024-05-01T12:00:00.250Z`,
//! `…+02:00`), read without a date-time crate: the record path needs only
//! epoch milliseconds from the one layout RFC 3339 allows.

/// Epoch milliseconds of an RFC 3339 time, `YYYY-MM-DDTHH:MM:SS[.fraction]`
/// then `Z` or `±HH:MM` (`T` and `Z` in either case, or a space for `T`);
/// the fraction is truncated to milliseconds. `None` for anything else, a
/// day that does not exist, or a time before 1970.
pub fn epoch_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let digits = b.get(r)?;
        digits.iter().all(u8::is_ascii_digit).then(|| digits.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let separators = [(4, b"-"), (7, b"-"), (13, b":"), (16, b":")];
    if b.len() < 20 || separators.iter().any(|(i, c)| b[*i] != c[0]) || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let mut at = 19;
    let mut millis = 0;
    if b[at] == b'.' {
        let digits = b[at + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        millis = (0..3).fold(0, |m, i| m * 10 + if i < digits { i64::from(b[at + 1 + i] - b'0') } else { 0 });
        at += 1 + digits;
    }
    let offset_minutes = match b.get(at..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), ..] if b.len() == at + 6 && b[at + 3] == b':' => {
            let (h, m) = (num(at + 1..at + 3)?, num(at + 4..at + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            if *sign == b'+' { h * 60 + m } else { -(h * 60 + m) }
        }
        _ => return None,
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let valid = (1..=12).contains(&month)
        && day >= 1
        && day <= days_in_month[(month - 1).clamp(0, 11) as usize]
        && hour < 24
        && minute < 60
        && second < 61;
    if !valid {
        return None;
    }
    // Days since the epoch of a civil date (proleptic Gregorian), after
    // Howard Hinnant's `days_from_civil`.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = ((days * 24 + hour) * 60 + minute - offset_minutes) * 60_000 + second * 1_000 + millis;
    u64::try_from(ms).ok()
}
