//! Event times read from a record's fields: numbers in a unit (`json:/ts:s`),
//! or RFC 3339 text, to epoch milliseconds.
//!
//! The unit is a suffix of the time source: `json:/ts` (milliseconds),
//! `json:/ts:s`, `json:/ts:ms`, `json:/ts:us` (or `:µs`), `json:/ts:ns`. A
//! JSON pointer may itself hold `:`, so the rule is: when the text ends in one
//! of these suffixes, that suffix is the unit and the rest the pointer (once:
//! `json:/at:s:ms` reads the field `at:s` in milliseconds). A pointer whose
//! last token ends in `:s`, `:ms`, `:us`, `:µs` or `:ns` is written with its
//! unit after it; every other pointer reads as before.
//!
//! Numbers may have a fraction in every unit (`1700000000.25` seconds); the
//! result is truncated to whole milliseconds. A negative time, or one past
//! what epoch milliseconds hold in 64 bits, is out of range.

use std::fmt;

use serde_json::{Number, Value};

use super::pointer::Found;

/// The unit of an event time written as a number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeUnit {
    Seconds,
    #[default]
    Millis,
    Micros,
    Nanos,
}

/// The suffixes that name a unit, longest first where one ends another.
const SUFFIXES: [(&str, TimeUnit); 5] = [
    (":ms", TimeUnit::Millis),
    (":us", TimeUnit::Micros),
    (":µs", TimeUnit::Micros),
    (":ns", TimeUnit::Nanos),
    (":s", TimeUnit::Seconds),
];

impl TimeUnit {
    /// Splits a time source's pointer text into the pointer and its unit
    /// (milliseconds when no unit suffix ends it).
    pub fn split(text: &str) -> (&str, TimeUnit) {
        SUFFIXES
            .iter()
            .find_map(|(suffix, unit)| text.strip_suffix(suffix).map(|rest| (rest, *unit)))
            .unwrap_or((text, TimeUnit::Millis))
    }

    /// The suffix that names the unit in a time source.
    pub fn suffix(self) -> &'static str {
        match self {
            TimeUnit::Seconds => ":s",
            TimeUnit::Millis => ":ms",
            TimeUnit::Micros => ":us",
            TimeUnit::Nanos => ":ns",
        }
    }

    /// The unit in words, as details and messages say it.
    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "seconds",
            TimeUnit::Millis => "milliseconds",
            TimeUnit::Micros => "microseconds",
            TimeUnit::Nanos => "nanoseconds",
        }
    }

    /// Epoch milliseconds of `n` of this unit (truncated); `None` past `u64`.
    fn whole_ms(self, n: u64) -> Option<u64> {
        match self {
            TimeUnit::Seconds => n.checked_mul(1_000),
            TimeUnit::Millis => Some(n),
            TimeUnit::Micros => Some(n / 1_000),
            TimeUnit::Nanos => Some(n / 1_000_000),
        }
    }

    /// Epoch milliseconds of a fractional `f` of this unit (truncated).
    fn fraction_ms(self, f: f64) -> Result<u64, TimeError> {
        let ms = match self {
            TimeUnit::Seconds => f * 1e3,
            TimeUnit::Millis => f,
            TimeUnit::Micros => f / 1e3,
            TimeUnit::Nanos => f / 1e6,
        };
        if !ms.is_finite() {
            Err(TimeError::NotATime)
        } else if ms < 0.0 {
            Err(TimeError::Negative)
        } else if ms >= 18_446_744_073_709_551_616.0 {
            Err(TimeError::Overflow)
        } else {
            Ok(ms as u64)
        }
    }
}

/// Why a value is not an event time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeError {
    /// Not a number, a string of one, or an RFC 3339 time.
    NotATime,
    /// A time before 1970.
    Negative,
    /// More milliseconds than 64 bits hold.
    Overflow,
}

impl TimeError {
    /// The detail of a `bad_time` record: `value` (an excerpt) at `pointer`.
    pub fn detail(self, value: &str, pointer: &str, unit: TimeUnit) -> String {
        let unit = unit.name();
        match self {
            TimeError::NotATime => format!("`{value}` at `{pointer}` is not epoch {unit} or an RFC 3339 time"),
            TimeError::Negative => format!("`{value}` at `{pointer}` is out of range: a negative time (before 1970)"),
            TimeError::Overflow => {
                format!("`{value}` at `{pointer}` is out of range: as epoch {unit}, past 2^64 - 1 epoch milliseconds")
            }
        }
    }
}

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeError::NotATime => "not a time",
            TimeError::Negative => "a negative time",
            TimeError::Overflow => "out of range",
        })
    }
}

/// Epoch milliseconds of a found value: a number of `unit` (a fraction is
/// truncated), a string of one, or an RFC 3339 time string (its own unit).
pub fn epoch_ms(v: &Found<'_>, unit: TimeUnit) -> Result<u64, TimeError> {
    match v {
        Found::Other(Value::Number(n)) => number_ms(n, unit),
        Found::Str(s) => text_ms(s, unit),
        Found::Other(_) | Found::Bytes(_) => Err(TimeError::NotATime),
    }
}

/// Epoch milliseconds of a JSON number of `unit`.
pub fn number_ms(n: &Number, unit: TimeUnit) -> Result<u64, TimeError> {
    if let Some(u) = n.as_u64() {
        unit.whole_ms(u).ok_or(TimeError::Overflow)
    } else if n.is_i64() {
        Err(TimeError::Negative)
    } else {
        n.as_f64().ok_or(TimeError::NotATime).and_then(|f| unit.fraction_ms(f))
    }
}

/// Epoch milliseconds of text: digits (with a fraction) of `unit`, or an
/// RFC 3339 time.
pub fn text_ms(s: &str, unit: TimeUnit) -> Result<u64, TimeError> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return match t.parse::<u64>() {
            Ok(n) => unit.whole_ms(n).ok_or(TimeError::Overflow),
            Err(_) => Err(TimeError::Overflow),
        };
    }
    if let Some((whole, fraction)) = t.split_once('.') {
        let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        if digits(whole) && digits(fraction) {
            return t.parse::<f64>().map_err(|_| TimeError::NotATime).and_then(|f| unit.fraction_ms(f));
        }
    }
    super::rfc3339::epoch_ms(s).ok_or(TimeError::NotATime)
}

/// Epoch milliseconds of an integer of `unit` (times read from binary
/// formats: Avro `long`, Protobuf `int64`); negative is before 1970.
pub fn integer_ms(n: i128, unit: TimeUnit) -> Result<u64, TimeError> {
    let n = u64::try_from(n).map_err(|_| if n < 0 { TimeError::Negative } else { TimeError::Overflow })?;
    unit.whole_ms(n).ok_or(TimeError::Overflow)
}

/// Epoch milliseconds of a float of `unit` (Avro `double`, Protobuf `double`).
pub fn float_ms(f: f64, unit: TimeUnit) -> Result<u64, TimeError> {
    unit.fraction_ms(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Extractor, InvalidReason, KeySpec, RecordView, TimeSpec};
    use std::borrow::Cow;

    fn num(text: &str, unit: TimeUnit) -> Result<u64, TimeError> {
        let v: Value = serde_json::from_str(text).unwrap();
        epoch_ms(&Found::Other(v), unit)
    }

    fn string(text: &str, unit: TimeUnit) -> Result<u64, TimeError> {
        epoch_ms(&Found::Str(Cow::Borrowed(text)), unit)
    }

    #[test]
    fn units_split_off_the_end_once() {
        use TimeUnit::*;
        assert_eq!(TimeUnit::split("/ts"), ("/ts", Millis));
        assert_eq!(TimeUnit::split("/ts:s"), ("/ts", Seconds));
        assert_eq!(TimeUnit::split("/ts:ms"), ("/ts", Millis));
        assert_eq!(TimeUnit::split("/ts:us"), ("/ts", Micros));
        assert_eq!(TimeUnit::split("/ts:µs"), ("/ts", Micros));
        assert_eq!(TimeUnit::split("/ts:ns"), ("/ts", Nanos));
        assert_eq!(TimeUnit::split("/at:s:ms"), ("/at:s", Millis), "a pointer ending in a unit takes one after it");
        assert_eq!(TimeUnit::split("/a:b/ts"), ("/a:b/ts", Millis), "other colons are the pointer's");
        assert_eq!(TimeUnit::split("/ts:S"), ("/ts:S", Millis), "units are lower case");
        assert_eq!(TimeUnit::split(":s"), ("", Seconds));
        for unit in [Seconds, Millis, Micros, Nanos] {
            assert_eq!(TimeUnit::split(&format!("/x{}", unit.suffix())), ("/x", unit));
        }
    }

    #[test]
    fn numbers_in_each_unit() {
        use TimeUnit::*;
        assert_eq!(num("1700000000", Seconds), Ok(1_700_000_000_000));
        assert_eq!(num("1700000000.123456", Seconds), Ok(1_700_000_000_123));
        assert_eq!(num("1700000000123", Millis), Ok(1_700_000_000_123));
        assert_eq!(num("1700000000123.9", Millis), Ok(1_700_000_000_123));
        assert_eq!(num("1700000000123456", Micros), Ok(1_700_000_000_123));
        assert_eq!(num("1700000000123456789", Nanos), Ok(1_700_000_000_123));
        assert_eq!(num("1.7e18", Nanos), Ok(1_700_000_000_000));
        assert_eq!(num("0", Seconds), Ok(0));
        assert_eq!(string("1700000000", Seconds), Ok(1_700_000_000_000));
        assert_eq!(string(" 1700000000.5 ", Seconds), Ok(1_700_000_000_500));
        assert_eq!(string("1700000000123456", Micros), Ok(1_700_000_000_123));
        // RFC 3339 text carries its own unit.
        assert_eq!(string("2023-11-14T22:13:20.123Z", Seconds), Ok(1_700_000_000_123));
        assert_eq!(string("2023-11-14T22:13:20.123Z", Nanos), Ok(1_700_000_000_123));
    }

    #[test]
    fn out_of_range_and_not_times() {
        use TimeUnit::*;
        assert_eq!(num("-1", Seconds), Err(TimeError::Negative));
        assert_eq!(num("-0.5", Millis), Err(TimeError::Negative));
        assert_eq!(num("18446744073709551615", Millis), Ok(u64::MAX));
        assert_eq!(num("18446744073709551615", Seconds), Err(TimeError::Overflow));
        assert_eq!(num("18446744073709552", Seconds), Err(TimeError::Overflow));
        assert_eq!(num("1e300", Seconds), Err(TimeError::Overflow));
        assert_eq!(num("2e19", Millis), Err(TimeError::Overflow));
        assert_eq!(string("99999999999999999999999", Nanos), Err(TimeError::Overflow));
        assert_eq!(string("1e3", Seconds), Err(TimeError::NotATime));
        assert_eq!(string("-5", Seconds), Err(TimeError::NotATime));
        assert_eq!(string(".5", Seconds), Err(TimeError::NotATime));
        assert_eq!(string("5.", Seconds), Err(TimeError::NotATime));
        assert_eq!(string("inf", Seconds), Err(TimeError::NotATime));
        assert_eq!(string("", Seconds), Err(TimeError::NotATime));
        assert_eq!(epoch_ms(&Found::Other(Value::Bool(true)), Seconds), Err(TimeError::NotATime));
        assert_eq!(integer_ms(-1, Nanos), Err(TimeError::Negative));
        assert_eq!(integer_ms(i128::from(u64::MAX) + 1, Nanos), Err(TimeError::Overflow));
        assert_eq!(integer_ms(1_700_000_000, Seconds), Ok(1_700_000_000_000));
        assert_eq!(float_ms(f64::NAN, Seconds), Err(TimeError::NotATime));
        assert_eq!(float_ms(1.5, Seconds), Ok(1_500));
        let detail = TimeError::Overflow.detail("1e300", "/ts", Seconds);
        assert_eq!(detail, "`1e300` at `/ts` is out of range: as epoch seconds, past 2^64 - 1 epoch milliseconds");
    }

    #[test]
    fn times_in_a_unit() {
        let time = |spec: &str, ts: &str| {
            let payload = format!(r#"{{"id":"a","ts":{ts},"at:s":{ts}}}"#);
            let rec = RecordView { payload: payload.as_bytes(), ..RecordView::default() };
            let ex = Extractor { time: spec.parse().unwrap(), max_record_bytes: 1000, key: KeySpec::Payload };
            ex.extract(&rec, 0).map(|e| e.time_ms).map_err(|e| (e.reason, e.detail))
        };
        assert_eq!(time("json:/ts:s", "1700000000"), Ok(1_700_000_000_000));
        assert_eq!(time("json:/ts:s", "1700000000.25"), Ok(1_700_000_000_250));
        assert_eq!(time("json:/ts:s", r#""1700000000""#), Ok(1_700_000_000_000));
        assert_eq!(time("json:/ts:ms", "1700000000123"), Ok(1_700_000_000_123));
        assert_eq!(time("json:/ts:us", "1700000000123456"), Ok(1_700_000_000_123));
        assert_eq!(time("json:/ts:µs", "1700000000123456"), Ok(1_700_000_000_123));
        assert_eq!(time("json:/ts:ns", "1700000000123456789"), Ok(1_700_000_000_123));
        assert_eq!(time("json:/ts:ns", r#""2023-11-14T22:13:20.123Z""#), Ok(1_700_000_000_123));
        assert_eq!(time("json:/at:s:s", "7"), Ok(7_000), "the field `at:s`, in seconds");
        let (reason, detail) = time("json:/ts:s", "18446744073709552").unwrap_err();
        assert_eq!(reason, InvalidReason::BadTime);
        assert_eq!(
            detail,
            "`18446744073709552` at `/ts` is out of range: as epoch seconds, past 2^64 - 1 epoch milliseconds"
        );
        let (reason, detail) = time("json:/ts:us", "-3").unwrap_err();
        assert_eq!(reason, InvalidReason::BadTime);
        assert!(detail.contains("out of range: a negative time"), "{detail}");
        let (_, detail) = time("json:/ts:s", r#""soon""#).unwrap_err();
        assert_eq!(detail, r#"`"soon"` at `/ts` is not epoch seconds or an RFC 3339 time"#);
        assert_eq!("json:/ts:s".parse::<TimeSpec>(), Ok(TimeSpec::Json("/ts".into(), TimeUnit::Seconds)));
        assert_eq!("json:/ts".parse::<TimeSpec>(), Ok(TimeSpec::Json("/ts".into(), TimeUnit::Millis)));
        assert!("json:ts:s".parse::<TimeSpec>().unwrap_err().contains("starts with `/`"));
        assert!("epoch:/ts".parse::<TimeSpec>().unwrap_err().contains("json:/pointer:s"));
    }

    #[test]
    fn times_as_rfc3339_strings() {
        let time = |ts: &str| {
            let payload = format!(r#"{{"id":"a","ts":{ts}}}"#);
            let rec = RecordView { payload: payload.as_bytes(), ..RecordView::default() };
            Extractor { key: KeySpec::Payload, time: "json:/ts".parse().unwrap(), max_record_bytes: 100 }
                .extract(&rec, 0)
                .map(|e| e.time_ms)
                .map_err(|e| (e.reason, e.detail))
        };
        assert_eq!(time(r#""2023-11-14T22:13:20Z""#), Ok(1_700_000_000_000));
        assert_eq!(time(r#""2023-11-14T22:13:20.5Z""#), Ok(1_700_000_000_500));
        assert_eq!(time(r#""2023-11-14t22:13:20.123456789z""#), Ok(1_700_000_000_123));
        assert_eq!(time(r#""2023-11-15T00:13:20.000+02:00""#), Ok(1_700_000_000_000));
        assert_eq!(time(r#""2023-11-14 17:43:20-04:30""#), Ok(1_700_000_000_000));
        assert_eq!(time(r#""2000-02-29T00:00:00Z""#), Ok(951_782_400_000));
        assert_eq!(time(r#""1970-01-01T00:00:00Z""#), Ok(0));
        assert_eq!(time(r#""1700000000123""#), Ok(1_700_000_000_123), "digits are still epoch milliseconds");
        for bad in [
            r#""1969-12-31T23:59:59Z""#,
            r#""2023-02-29T00:00:00Z""#,
            r#""2023-11-14T22:13:20""#,
            r#""2023-11-14T24:00:00Z""#,
            r#""2023-11-14""#,
            r#""2023-11-14T22:13:20.Z""#,
        ] {
            let (reason, detail) = time(bad).unwrap_err();
            assert_eq!(reason, InvalidReason::BadTime, "{bad}");
            assert!(detail.contains("is not epoch milliseconds or an RFC 3339 time"), "{detail}");
        }
    }
}
