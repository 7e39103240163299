//! Key and time extraction over arbitrary records, for every kind of key
//! and time source: it must return a key and a time or a typed reason,
//! never panic, and agree with serde_json's own JSON-pointer lookup (the
//! extractor has its own, faster one).
#![no_main]

use dedupd::engine::{Extractor, InvalidReason, KeySpec, RecordView, TimeSpec};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    /// 0: record-key, 1: payload, 2: header:NAME, 3: json:POINTER.
    key_kind: u8,
    key_arg: &'a str,
    /// false: record-timestamp, true: json:POINTER (which may end in a unit: `:s`, `:ns`, ...).
    time_json: bool,
    time_arg: &'a str,
    max_record_bytes: u16,
    key: Option<&'a [u8]>,
    headers: Vec<(&'a str, &'a [u8])>,
    timestamp_ms: Option<i64>,
    payload: &'a [u8],
}

fuzz_target!(|input: Input<'_>| {
    // The specs go through the same parser the settings use.
    let key_text = match input.key_kind % 4 {
        0 => "record-key".to_string(),
        1 => "payload".to_string(),
        2 => format!("header:{}", input.key_arg),
        _ => format!("json:{}", input.key_arg),
    };
    let time_text = if input.time_json { format!("json:{}", input.time_arg) } else { "record-timestamp".to_string() };
    let (key, time) = match (key_text.parse::<KeySpec>(), time_text.parse::<TimeSpec>()) {
        (Ok(k), Ok(t)) => (k, t),
        (Err(e), _) | (_, Err(e)) => {
            assert!(!e.is_empty());
            return;
        }
    };
    let ex = Extractor { key, time, max_record_bytes: usize::from(input.max_record_bytes) };
    let record = RecordView {
        key: input.key,
        payload: input.payload,
        headers: &input.headers,
        timestamp_ms: input.timestamp_ms,
        decoder: None,
    };
    let got = ex.extract(&record, 0);

    // The key counts too (a huge record key is as large a record to hold
    // and copy as a huge payload).
    if input.key.map_or(0, <[u8]>::len).saturating_add(input.payload.len()) > ex.max_record_bytes {
        assert_eq!(got.unwrap_err().reason, InvalidReason::TooLarge);
        return;
    }
    let json_key = match &ex.key {
        KeySpec::Composite(parts) => parts.iter().any(|p| matches!(p, KeySpec::Json(_))),
        key => matches!(key, KeySpec::Json(_)),
    };
    let json: Option<Result<Value, _>> = (json_key || matches!(ex.time, TimeSpec::Json(..)))
        .then(|| serde_json::from_slice::<Value>(input.payload));
    if let Some(Err(_)) = json {
        assert_eq!(got.unwrap_err().reason, InvalidReason::BadJson);
        return;
    }
    let json = json.map(Result::unwrap);

    // The key, as serde_json's pointer lookup reads it; a composite key's
    // parts joined by 0x1f, each required and not empty.
    let single = |spec: &KeySpec| -> Result<Vec<u8>, InvalidReason> {
        match spec {
            KeySpec::Payload => Ok(input.payload.to_vec()),
            KeySpec::RecordKey => input.key.map(<[u8]>::to_vec).ok_or(InvalidReason::MissingKey),
            KeySpec::Header(name) => {
                input.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.to_vec()).ok_or(InvalidReason::MissingKey)
            }
            KeySpec::Json(p) => match json.as_ref().and_then(|j| j.pointer(p)) {
                None | Some(Value::Null) => Err(InvalidReason::MissingKey),
                Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
                Some(other) => Ok(other.to_string().into_bytes()),
            },
            KeySpec::Composite(_) => unreachable!("parts are single sources"),
        }
    };
    let want_key: Result<Vec<u8>, InvalidReason> = match &ex.key {
        KeySpec::Composite(parts) => parts.iter().try_fold(Vec::new(), |mut key, part| {
            let value = single(part)?;
            if value.is_empty() {
                return Err(InvalidReason::EmptyKey);
            }
            if !key.is_empty() {
                key.push(0x1f);
            }
            key.extend_from_slice(&value);
            Ok(key)
        }),
        spec => single(spec),
    };
    let want_key = want_key.and_then(|k| if k.is_empty() { Err(InvalidReason::EmptyKey) } else { Ok(k) });
    let want_key = match want_key {
        Ok(k) => k,
        Err(reason) => {
            let e = got.unwrap_err();
            assert_eq!(e.reason, reason, "{e}");
            assert!(!e.detail.is_empty());
            return;
        }
    };
    let want_time: Result<u64, InvalidReason> = match &ex.time {
        TimeSpec::RecordTimestamp => match input.timestamp_ms {
            Some(t) if t >= 0 => Ok(t as u64),
            Some(_) => Err(InvalidReason::BadTime),
            None => Err(InvalidReason::MissingTime),
        },
        TimeSpec::Arrival => Ok(0),
        TimeSpec::Json(p, _) => match json.as_ref().and_then(|j| j.pointer(p)) {
            None | Some(Value::Null) => Err(InvalidReason::MissingTime),
            Some(Value::Number(_) | Value::String(_)) => Ok(u64::MAX), // any value or BadTime: checked below
            Some(_) => Err(InvalidReason::BadTime),
        },
    };
    match (got, want_time) {
        (Ok(x), Ok(t)) => {
            assert_eq!(x.key.as_ref(), want_key.as_slice());
            if !matches!(ex.time, TimeSpec::Json(..)) {
                assert_eq!(x.time_ms, t);
            }
        }
        (Err(e), Ok(_)) => {
            // Only a number or string that is not an epoch time in the spec's unit (or is out of range).
            assert!(matches!(ex.time, TimeSpec::Json(..)), "{e}");
            assert_eq!(e.reason, InvalidReason::BadTime, "{e}");
        }
        (Err(e), Err(reason)) => assert_eq!(e.reason, reason, "{e}"),
        (Ok(x), Err(reason)) => panic!("extracted {x:?}, expected {reason:?}"),
    }
});
