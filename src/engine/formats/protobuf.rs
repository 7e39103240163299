//! Protobuf bodies: the message the record's message indexes name, decoded
//! dynamically (prost-reflect), then the values at field paths (`/user/id`:
//! fields by name, repeated fields by index, map entries by key).
//!
//! A field that is not set is missing (`missing_key`, `missing_time`), as an
//! absent JSON field is: in proto3 a scalar holding its default value (`""`,
//! `0`) is not set on the wire either.

use std::borrow::Cow;

use prost_reflect::{DynamicMessage, FileDescriptor, MapKey, MessageDescriptor, Value as Proto};
use serde_json::Value;

use super::super::pointer::{Found, array_index};

/// The message type of `indexes` in `file` (`[1, 0]`: the first message
/// nested in the file's second message).
pub fn message_type(file: &FileDescriptor, indexes: &[usize]) -> Result<MessageDescriptor, String> {
    let (first, nested) = indexes.split_first().ok_or("no message index")?;
    let mut message = file
        .messages()
        .nth(*first)
        .ok_or_else(|| format!("message index {indexes:?}: the schema has no such message"))?;
    for &i in nested {
        let child = message.child_messages().nth(i);
        message = child.ok_or_else(|| format!("message index {indexes:?}: the schema has no such message"))?;
    }
    Ok(message)
}

/// The message a body decodes to.
pub fn decode(message: MessageDescriptor, body: &[u8]) -> Result<DynamicMessage, String> {
    let name = message.full_name().to_string();
    DynamicMessage::decode(message, body).map_err(|e| format!("not a {name}: {e}"))
}

/// The value at `path` (a JSON pointer of field names).
pub fn find<'a>(root: &DynamicMessage, path: &str) -> Option<Found<'a>> {
    if path.is_empty() {
        return Some(message_json(root));
    }
    let tokens: Vec<Cow<'_, str>> = path[1..]
        .split('/')
        .map(|t| if t.contains('~') { t.replace("~1", "/").replace("~0", "~").into() } else { t.into() })
        .collect();
    let (first, rest) = tokens.split_first()?;
    if !root.has_field_by_name(first) {
        return None;
    }
    let mut at = root.get_field_by_name(first)?.into_owned();
    for token in rest {
        at = match at {
            Proto::Message(m) => {
                if !m.has_field_by_name(token) {
                    return None;
                }
                m.get_field_by_name(token)?.into_owned()
            }
            Proto::List(items) => items.into_iter().nth(array_index(token)?)?,
            Proto::Map(entries) => entries.into_iter().find(|(k, _)| map_key_is(k, token)).map(|(_, v)| v)?,
            _ => return None,
        };
    }
    leaf(at)
}

fn map_key_is(key: &MapKey, token: &str) -> bool {
    match key {
        MapKey::String(s) => s == token,
        MapKey::Bool(b) => token == if *b { "true" } else { "false" },
        MapKey::I32(n) => token.parse() == Ok(*n),
        MapKey::I64(n) => token.parse() == Ok(*n),
        MapKey::U32(n) => token.parse() == Ok(*n),
        MapKey::U64(n) => token.parse() == Ok(*n),
    }
}

/// A found value as the key and time code reads it: strings as text, bytes
/// as bytes, numbers as numbers, enums by number, messages and lists as
/// JSON (protobuf's JSON mapping).
fn leaf<'a>(v: Proto) -> Option<Found<'a>> {
    Some(match v {
        Proto::String(s) => Found::Str(Cow::Owned(s)),
        Proto::Bytes(b) => Found::Bytes(Cow::Owned(b.to_vec())),
        Proto::Bool(b) => Found::Other(Value::Bool(b)),
        Proto::I32(n) | Proto::EnumNumber(n) => Found::Other(Value::from(n)),
        Proto::I64(n) => Found::Other(Value::from(n)),
        Proto::U32(n) => Found::Other(Value::from(n)),
        Proto::U64(n) => Found::Other(Value::from(n)),
        Proto::F32(f) => Found::Other(Value::from(f64::from(f))),
        Proto::F64(f) => Found::Other(Value::from(f)),
        Proto::Message(m) => message_json(&m),
        Proto::List(items) => {
            Found::Other(Value::Array(items.into_iter().filter_map(leaf).map(|f| f.to_value()).collect()))
        }
        Proto::Map(entries) => Found::Other(Value::Object(
            entries.into_iter().filter_map(|(k, v)| Some((map_key_text(&k), leaf(v)?.to_value()))).collect(),
        )),
    })
}

fn map_key_text(key: &MapKey) -> String {
    match key {
        MapKey::String(s) => s.clone(),
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
    }
}

/// A whole message as compact JSON of its set fields, by field name.
fn message_json<'a>(m: &DynamicMessage) -> Found<'a> {
    let fields = m
        .fields()
        .filter_map(|(field, value)| Some((field.name().to_string(), leaf(value.clone())?.to_value())))
        .collect();
    Found::Other(Value::Object(fields))
}
