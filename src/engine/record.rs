//! Records and what dedupd reads from them: the dedup key and the event time.
//!
//! Extraction never panics and never drops a record silently: anything it
//! cannot read comes back as an [`InvalidRecord`] with a stable reason code
//! (used in dead-letter headers and metric labels) and a human detail.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use super::pointer::{self, Found};
use super::time::{self, TimeUnit};

/// One record as the engine sees it, whatever it came from (a line of
/// stdin, a Kafka message).
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordView<'a> {
    /// The Kafka record key, if any.
    pub key: Option<&'a [u8]>,
    /// The payload (the line, without its line ending, in pipe mode).
    pub payload: &'a [u8],
    /// Kafka headers.
    pub headers: &'a [(&'a str, &'a [u8])],
    /// The record's own timestamp in epoch ms, if any.
    pub timestamp_ms: Option<i64>,
    /// How the payload's fields are read when it is not JSON (Avro or
    /// Protobuf: `engine::formats`); `None`: JSON. Chosen once for an input.
    pub decoder: Option<&'a dyn PayloadDecoder>,
}

/// Reads the `json:` sources of records whose payload is not JSON.
pub trait PayloadDecoder: fmt::Debug + Sync {
    /// [`Extractor::extract`] for such a record (through
    /// [`Extractor::extract_from`] with the decoded fields).
    fn extract<'a>(
        &self,
        ex: &Extractor,
        record: &RecordView<'a>,
        arrival_ms: u64,
    ) -> Result<Extracted<'a>, InvalidRecord>;
}

/// Where the dedup key comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySpec {
    /// The whole payload (`line` in pipe mode, `payload` in the daemon).
    Payload,
    /// The Kafka record key.
    RecordKey,
    /// A field of a JSON payload, by JSON pointer (RFC 6901), e.g. `/click_id`.
    Json(String),
    /// A record header by name.
    Header(String),
    /// Several of the above, their values joined by [`KEY_PART_SEPARATOR`]
    /// in the order given: `json:/user+json:/ad+header:campaign`.
    Composite(Vec<KeySpec>),
}

/// The byte between the parts of a composite key (ASCII unit separator).
pub const KEY_PART_SEPARATOR: u8 = 0x1f;
/// Most parts a composite key may have.
pub const MAX_KEY_PARTS: usize = 7;

/// The prefixes that start a key source (a `+` before one starts a part).
const KEY_SOURCES: [&str; 5] = ["json:", "header:", "record-key", "payload", "line"];

/// Where the event time comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimeSpec {
    /// The Kafka record timestamp.
    RecordTimestamp,
    /// The moment the record was read (pipe mode only: not deterministic).
    Arrival,
    /// A JSON field holding an epoch time in the unit given (a number or a
    /// string of one: `json:/ts:s`; milliseconds by default) or RFC 3339
    /// text; the rule for the unit suffix is in [`time`](mod@super::time).
    Json(String, TimeUnit),
}

fn json_pointer(spec: &str, rest: &str) -> Result<String, String> {
    if rest.is_empty() || rest.starts_with('/') {
        Ok(rest.to_string())
    } else {
        Err(format!("`{spec}`: a JSON pointer starts with `/`, e.g. json:/id or json:/user/id"))
    }
}

impl FromStr for KeySpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        // A `+` starts a part only before a source: a JSON pointer or a
        // header name may hold one.
        let starts: Vec<usize> = s
            .match_indices('+')
            .map(|(i, _)| i)
            .filter(|&i| KEY_SOURCES.iter().any(|p| s[i + 1..].starts_with(p)))
            .collect();
        if starts.is_empty() {
            return KeySpec::single(s);
        }
        let bounds: Vec<usize> = std::iter::once(0).chain(starts.iter().map(|i| i + 1)).collect();
        let parts: Vec<&str> =
            bounds.iter().zip(starts.iter().chain(std::iter::once(&s.len()))).map(|(&a, &b)| &s[a..b]).collect();
        if parts.len() > MAX_KEY_PARTS {
            return Err(format!("`{s}`: a composite key has at most {MAX_KEY_PARTS} parts, this one {}", parts.len()));
        }
        parts.into_iter().map(KeySpec::single).collect::<Result<_, _>>().map(KeySpec::Composite)
    }
}

impl KeySpec {
    /// One source (not composite).
    fn single(s: &str) -> Result<Self, String> {
        match s {
            "line" | "payload" => Ok(KeySpec::Payload),
            "record-key" => Ok(KeySpec::RecordKey),
            _ if s.starts_with("json:") => json_pointer(s, &s[5..]).map(KeySpec::Json),
            _ if s.starts_with("header:") && s.len() > 7 => Ok(KeySpec::Header(s[7..].to_string())),
            _ => Err(format!(
                "unknown key source `{s}`: expected line, payload, record-key, json:/pointer or header:NAME, \
                 or several joined by + (json:/user+json:/ad)"
            )),
        }
    }

    /// The headers the key (or a part of it) is read from.
    pub fn header_names(&self) -> Vec<&str> {
        match self {
            KeySpec::Header(name) => vec![name.as_str()],
            KeySpec::Composite(parts) => parts.iter().flat_map(KeySpec::header_names).collect(),
            _ => Vec::new(),
        }
    }

    /// Whether the key is (or has a part) read from a record header.
    pub fn reads_headers(&self) -> bool {
        !self.header_names().is_empty()
    }
}

impl FromStr for TimeSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "record-timestamp" => Ok(TimeSpec::RecordTimestamp),
            "arrival" => Ok(TimeSpec::Arrival),
            _ if s.starts_with("json:") => {
                let (pointer, unit) = TimeUnit::split(&s[5..]);
                json_pointer(s, pointer).map(|p| TimeSpec::Json(p, unit))
            }
            _ => Err(format!(
                "unknown time source `{s}`: expected record-timestamp, arrival or json:/pointer, with a unit \
                 for numbers as json:/pointer:s (also :ms, the default, :us or :µs, :ns)"
            )),
        }
    }
}

/// Why a record could not be read. The codes are stable: they appear in
/// dead-letter headers, stats and metric labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InvalidReason {
    BadJson,
    MissingKey,
    EmptyKey,
    MissingTime,
    BadTime,
    TooLarge,
    /// The time is too far ahead of the largest time seen (and no following
    /// records confirmed the jump): it would expire the window at once.
    TimeJump,
    /// A slice-log record framed as the router frames its copies that does
    /// not read as one (a stamp naming a topic longer than Kafka allows, a
    /// cut frame): forged by another writer of the slice log, or damaged.
    BadFrame,
    /// A record in the Confluent wire format whose schema is unknown, could
    /// not be fetched or read, or that is not in the wire format at all.
    BadSchema,
    /// An Avro body that does not decode with its schema.
    BadAvro,
    /// A Protobuf body (or its message indexes) that does not decode with
    /// its schema.
    BadProtobuf,
}

impl InvalidReason {
    pub const ALL: [InvalidReason; 11] = [
        InvalidReason::BadJson,
        InvalidReason::MissingKey,
        InvalidReason::EmptyKey,
        InvalidReason::MissingTime,
        InvalidReason::BadTime,
        InvalidReason::TooLarge,
        InvalidReason::TimeJump,
        InvalidReason::BadFrame,
        InvalidReason::BadSchema,
        InvalidReason::BadAvro,
        InvalidReason::BadProtobuf,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InvalidReason::BadJson => "bad_json",
            InvalidReason::MissingKey => "missing_key",
            InvalidReason::EmptyKey => "empty_key",
            InvalidReason::MissingTime => "missing_time",
            InvalidReason::BadTime => "bad_time",
            InvalidReason::TooLarge => "too_large",
            InvalidReason::TimeJump => "time_jump",
            InvalidReason::BadFrame => "bad_frame",
            InvalidReason::BadSchema => "bad_schema",
            InvalidReason::BadAvro => "bad_avro",
            InvalidReason::BadProtobuf => "bad_protobuf",
        }
    }
}

/// A record the engine could not read, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidRecord {
    pub reason: InvalidReason,
    pub detail: String,
}

impl fmt::Display for InvalidRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason.as_str(), self.detail)
    }
}

pub(crate) fn invalid(reason: InvalidReason, detail: impl Into<String>) -> InvalidRecord {
    InvalidRecord { reason, detail: detail.into() }
}

impl InvalidRecord {
    /// A record whose time is `ahead_ms` ahead of the largest time seen, a
    /// jump no following record confirmed.
    pub fn time_jump(time_ms: u64, ahead_ms: u64, max_clock_jump_ms: u64) -> Self {
        invalid(
            InvalidReason::TimeJump,
            format!(
                "time {time_ms} is {ahead_ms} ms ahead of the largest time seen (more than max_clock_jump = \
                 {max_clock_jump_ms} ms) and the records after it did not confirm the jump"
            ),
        )
    }
}

/// The key and time of a readable record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extracted<'a> {
    pub key: Cow<'a, [u8]>,
    pub time_ms: u64,
}

/// Reads keys and times as configured.
#[derive(Clone, Debug)]
pub struct Extractor {
    pub key: KeySpec,
    pub time: TimeSpec,
    /// Records (key plus payload) longer than this are refused as `too_large`.
    pub max_record_bytes: usize,
}

/// Where the values that `json:` sources name come from: a JSON payload, or
/// a record decoded from another format (`engine::formats`).
pub trait FieldSource<'a> {
    /// The values at `pointers` (`None`: the pointer names nothing); called
    /// at most once per record, and only when a pointer is given.
    fn find<const N: usize>(&self, pointers: [Option<&str>; N]) -> Result<[Option<Found<'a>>; N], InvalidRecord>;
}

/// A JSON payload.
pub(crate) struct JsonPayload<'a>(pub(crate) &'a [u8]);

impl<'a> FieldSource<'a> for JsonPayload<'a> {
    #[inline]
    fn find<const N: usize>(&self, pointers: [Option<&str>; N]) -> Result<[Option<Found<'a>>; N], InvalidRecord> {
        pointer::find(self.0, pointers)
            .map_err(|e| invalid(InvalidReason::BadJson, format!("payload is not JSON: {e}")))
    }
}

impl Extractor {
    /// Extracts the key and time of `record`; `arrival_ms` is used by
    /// [`TimeSpec::Arrival`].
    #[inline]
    pub fn extract<'a>(&self, record: &RecordView<'a>, arrival_ms: u64) -> Result<Extracted<'a>, InvalidRecord> {
        if let Some(decoder) = record.decoder {
            return decoder.extract(self, record, arrival_ms);
        }
        self.extract_from(record, arrival_ms, &JsonPayload(record.payload))
    }

    /// [`Extractor::extract`] with the `json:` sources' values read from
    /// `fields` instead of the payload as JSON.
    #[inline]
    pub fn extract_from<'a, S: FieldSource<'a>>(
        &self,
        record: &RecordView<'a>,
        arrival_ms: u64,
        fields: &S,
    ) -> Result<Extracted<'a>, InvalidRecord> {
        // The key counts too: with `record-key` a huge key is as large a
        // record to hold for the watermark and to copy as a huge payload.
        let key_bytes = record.key.map_or(0, <[u8]>::len);
        let size = key_bytes.saturating_add(record.payload.len());
        if size > self.max_record_bytes {
            let parts = if key_bytes > 0 {
                format!(" (key {key_bytes} + payload {})", record.payload.len())
            } else {
                String::new()
            };
            return Err(invalid(
                InvalidReason::TooLarge,
                format!("{size} bytes{parts}, the limit is {}", self.max_record_bytes),
            ));
        }
        let time_pointer = match &self.time {
            TimeSpec::Json(p, _) => Some(p.as_str()),
            _ => None,
        };
        let (key, json_time) = match &self.key {
            KeySpec::Composite(parts) => composite_key(parts, record, fields, time_pointer)?,
            single => {
                let key_pointer = match single {
                    KeySpec::Json(p) => Some(p.as_str()),
                    _ => None,
                };
                let [json_key, json_time] = find_fields(fields, [key_pointer, time_pointer])?;
                (key_part(single, record, json_key)?, json_time)
            }
        };
        if key.is_empty() {
            return Err(invalid(InvalidReason::EmptyKey, "the key is empty"));
        }

        let time_ms = match &self.time {
            TimeSpec::Arrival => arrival_ms,
            TimeSpec::RecordTimestamp => match record.timestamp_ms {
                Some(t) if t >= 0 => t as u64,
                Some(t) => return Err(invalid(InvalidReason::BadTime, format!("negative record timestamp {t}"))),
                None => return Err(invalid(InvalidReason::MissingTime, "the record has no timestamp")),
            },
            TimeSpec::Json(pointer, unit) => match json_time {
                None | Some(Found::Other(Value::Null)) => {
                    return Err(invalid(InvalidReason::MissingTime, format!("no value at JSON pointer `{pointer}`")));
                }
                Some(found) => time::epoch_ms(&found, *unit).map_err(|e| {
                    invalid(InvalidReason::BadTime, e.detail(&excerpt(&found.to_value()), pointer, *unit))
                })?,
            },
        };
        Ok(Extracted { key, time_ms })
    }
}

/// The values at `pointers` in the record's fields (none looked for when no
/// pointer is given: the payload need not be JSON, or decode).
fn find_fields<'a, S: FieldSource<'a>, const N: usize>(
    fields: &S,
    pointers: [Option<&str>; N],
) -> Result<[Option<Found<'a>>; N], InvalidRecord> {
    if pointers.iter().all(Option::is_none) {
        return Ok(std::array::from_fn(|_| None));
    }
    fields.find(pointers)
}

/// The value of the single key source `spec` (`json_key`: what its JSON
/// pointer found).
fn key_part<'a>(
    spec: &KeySpec,
    record: &RecordView<'a>,
    json_key: Option<Found<'a>>,
) -> Result<Cow<'a, [u8]>, InvalidRecord> {
    Ok(match spec {
        KeySpec::Payload => Cow::Borrowed(record.payload),
        KeySpec::RecordKey => {
            Cow::Borrowed(record.key.ok_or_else(|| invalid(InvalidReason::MissingKey, "the record has no key"))?)
        }
        KeySpec::Header(name) => Cow::Borrowed(
            record
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| *v)
                .ok_or_else(|| invalid(InvalidReason::MissingKey, format!("no header `{name}`")))?,
        ),
        KeySpec::Json(pointer) => match json_key {
            None | Some(Found::Other(Value::Null)) => {
                return Err(invalid(InvalidReason::MissingKey, format!("no value at JSON pointer `{pointer}`")));
            }
            Some(Found::Str(Cow::Borrowed(s))) => Cow::Borrowed(s.as_bytes()),
            Some(Found::Str(Cow::Owned(s))) => Cow::Owned(s.into_bytes()),
            Some(Found::Bytes(b)) => b,
            // Numbers, booleans, arrays and objects: their compact JSON text.
            Some(Found::Other(other)) => Cow::Owned(other.to_string().into_bytes()),
        },
        KeySpec::Composite(_) => unreachable!("a composite key's parts are single sources (FromStr)"),
    })
}

/// A composite key: its parts' values joined by [`KEY_PART_SEPARATOR`],
/// each part required and not empty; and what the time's pointer found
/// (in the same pass over the payload).
fn composite_key<'a, S: FieldSource<'a>>(
    parts: &[KeySpec],
    record: &RecordView<'a>,
    fields: &S,
    time_pointer: Option<&str>,
) -> Result<(Cow<'a, [u8]>, Option<Found<'a>>), InvalidRecord> {
    let mut pointers = [None; MAX_KEY_PARTS + 1];
    for (slot, part) in pointers.iter_mut().zip(parts) {
        if let KeySpec::Json(p) = part {
            *slot = Some(p.as_str());
        }
    }
    pointers[MAX_KEY_PARTS] = time_pointer;
    let mut found = find_fields(fields, pointers)?;
    let mut key = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let value = key_part(part, record, found[i].take())?;
        if value.is_empty() {
            return Err(invalid(InvalidReason::EmptyKey, format!("key part {} is empty", i + 1)));
        }
        if i > 0 {
            key.push(KEY_PART_SEPARATOR);
        }
        key.extend_from_slice(&value);
    }
    Ok((Cow::Owned(key), found[MAX_KEY_PARTS].take()))
}

/// Most characters of a value quoted in a detail: the detail travels in a
/// dead-letter header and on stderr, and a hostile record may hold a value of
/// megabytes where a time should be.
const EXCERPT_CHARS: usize = 64;

/// `v` as compact JSON, cut to [`EXCERPT_CHARS`] with its full length said.
fn excerpt(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(EXCERPT_CHARS) {
        None => text,
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_extractor() -> Extractor {
        Extractor { key: "json:/id".parse().unwrap(), time: "json:/ts".parse().unwrap(), max_record_bytes: 100 }
    }

    fn extract(payload: &str) -> Result<(Vec<u8>, u64), InvalidReason> {
        let rec = RecordView { payload: payload.as_bytes(), ..RecordView::default() };
        json_extractor().extract(&rec, 0).map(|e| (e.key.into_owned(), e.time_ms)).map_err(|e| e.reason)
    }

    #[test]
    fn json_keys_and_times() {
        assert_eq!(extract(r#"{"id":"a b","ts":12}"#), Ok((b"a b".to_vec(), 12)));
        assert_eq!(extract(r#"{"id":42,"ts":12.9}"#), Ok((b"42".to_vec(), 12)));
        assert_eq!(extract(r#"{"id":{"x":1},"ts":"77"}"#), Ok((br#"{"x":1}"#.to_vec(), 77)));
        assert_eq!(extract(r#"{"id":"\u00e9","ts":1}"#), Ok(("é".as_bytes().to_vec(), 1)));
    }

    #[test]
    fn unreadable_records_say_why() {
        assert_eq!(extract("not json"), Err(InvalidReason::BadJson));
        assert_eq!(extract(""), Err(InvalidReason::BadJson));
        assert_eq!(extract(r#"{"ts":1}"#), Err(InvalidReason::MissingKey));
        assert_eq!(extract(r#"{"id":null,"ts":1}"#), Err(InvalidReason::MissingKey));
        assert_eq!(extract(r#"{"id":"","ts":1}"#), Err(InvalidReason::EmptyKey));
        assert_eq!(extract(r#"{"id":"a"}"#), Err(InvalidReason::MissingTime));
        assert_eq!(extract(r#"{"id":"a","ts":-5}"#), Err(InvalidReason::BadTime));
        assert_eq!(extract(r#"{"id":"a","ts":"soon"}"#), Err(InvalidReason::BadTime));
        assert_eq!(extract(&format!(r#"{{"id":"{}","ts":1}}"#, "x".repeat(200))), Err(InvalidReason::TooLarge));
    }

    /// Nesting deeper than serde_json's recursion limit (128) is an error,
    /// not a stack overflow; shallower nesting is read.
    #[test]
    fn deep_nesting_is_refused_not_a_crash() {
        let ex = Extractor { max_record_bytes: 1 << 20, ..json_extractor() };
        let reason = |text: String| {
            let rec = RecordView { payload: text.as_bytes(), ..RecordView::default() };
            ex.extract(&rec, 0).map(|_| ()).map_err(|e| (e.reason, e.detail))
        };
        for deep in
            ["[".repeat(100_000), "{\"a\":".repeat(100_000), format!("{}{}", "[".repeat(100_000), "]".repeat(100_000))]
        {
            let (why, detail) = reason(deep).unwrap_err();
            assert_eq!(why, InvalidReason::BadJson);
            assert!(detail.contains("recursion limit exceeded"), "{detail}");
        }
        let nested = format!(r#"{{"id":"a","ts":1,"x":{}1{}}}"#, "[".repeat(100), "]".repeat(100));
        assert_eq!(reason(nested), Ok(()));
    }

    #[test]
    fn details_quote_at_most_an_excerpt() {
        let big = format!(r#"{{"id":"a","ts":[{}0]}}"#, "0,".repeat(40_000));
        let rec = RecordView { payload: big.as_bytes(), ..RecordView::default() };
        let ex = Extractor { max_record_bytes: 1 << 20, ..json_extractor() };
        let e = ex.extract(&rec, 0).unwrap_err();
        assert_eq!(e.reason, InvalidReason::BadTime);
        assert!(e.detail.len() < 200, "{}", e.detail);
        assert!(e.detail.contains("… (80003 bytes)"), "{}", e.detail);
    }

    #[test]
    fn the_key_counts_toward_the_record_size() {
        let ex = Extractor { key: KeySpec::RecordKey, time: TimeSpec::RecordTimestamp, max_record_bytes: 10 };
        let key = [7u8; 8];
        let rec = |payload: &'static [u8]| RecordView {
            key: Some(&key),
            payload,
            timestamp_ms: Some(1),
            ..RecordView::default()
        };
        assert!(ex.extract(&rec(b"12"), 0).is_ok());
        let e = ex.extract(&rec(b"123"), 0).unwrap_err();
        assert_eq!(e.reason, InvalidReason::TooLarge);
        assert_eq!(e.detail, "11 bytes (key 8 + payload 3), the limit is 10");
    }

    #[test]
    fn composite_keys_join_their_parts() {
        let headers = [("campaign", &b"c7"[..]), ("x", &b""[..])];
        let payload = br#"{"user":"u1","ad":{"id":42},"ts":"2023-11-14T22:13:20.123Z","a+b":"p"}"#;
        let rec = RecordView { key: Some(b"k"), payload, headers: &headers, timestamp_ms: Some(5), decoder: None };
        let ex = |key: &str| {
            let spec: KeySpec = key.parse().unwrap();
            Extractor { key: spec, time: "json:/ts".parse().unwrap(), max_record_bytes: 1000 }.extract(&rec, 0)
        };
        let got = ex("json:/user+json:/ad/id+header:campaign+record-key").unwrap();
        assert_eq!(got.key.as_ref(), b"u1\x1f42\x1fc7\x1fk");
        assert_eq!(got.time_ms, 1_700_000_000_123);
        // A `+` inside a pointer is the pointer's, not a new part.
        assert_eq!(ex("json:/a+b").unwrap().key.as_ref(), b"p");
        assert_eq!(ex("json:/a+b+json:/user").unwrap().key.as_ref(), b"p\x1fu1");
        assert_eq!(ex("json:/user+json:/nope").unwrap_err().reason, InvalidReason::MissingKey);
        let empty = ex("json:/user+header:x").unwrap_err();
        assert_eq!((empty.reason, empty.detail.as_str()), (InvalidReason::EmptyKey, "key part 2 is empty"));
        assert!(ex("json:/user+header:campaign").is_ok());
        let too_many = ["json:/user"; MAX_KEY_PARTS + 1].join("+");
        assert!(too_many.parse::<KeySpec>().unwrap_err().contains("at most 7 parts"));
        assert!("json:/user+nope".parse::<KeySpec>().is_ok(), "nope is part of the header-less pointer");
        assert!("json:/user+json:x".parse::<KeySpec>().unwrap_err().contains("starts with `/`"));
        assert!("header:a+header:b".parse::<KeySpec>().unwrap().reads_headers());
        assert!(!"json:/a+record-key".parse::<KeySpec>().unwrap().reads_headers());
    }

    #[test]
    fn other_sources() {
        let headers = [("click", &b"c-1"[..])];
        let rec =
            RecordView { key: Some(b"k"), payload: b"p", headers: &headers, timestamp_ms: Some(5), decoder: None };
        let ex = |key: &str, time: &str| {
            Extractor { key: key.parse().unwrap(), time: time.parse().unwrap(), max_record_bytes: 10 }.extract(&rec, 99)
        };
        assert_eq!(ex("record-key", "record-timestamp").unwrap(), Extracted { key: Cow::Borrowed(b"k"), time_ms: 5 });
        assert_eq!(ex("line", "arrival").unwrap().time_ms, 99);
        assert_eq!(ex("header:click", "arrival").unwrap().key.as_ref(), b"c-1");
        assert_eq!(ex("header:other", "arrival").unwrap_err().reason, InvalidReason::MissingKey);
        assert!("json:id".parse::<KeySpec>().unwrap_err().contains("starts with `/`"));
        assert!("lines".parse::<KeySpec>().is_err());
    }
}
