//! Avro bodies: decoded with the writer's schema, then the values at field
//! paths (`/user/id`: record fields by name, map entries by key, array
//! elements by index; unions are looked through).

use std::borrow::Cow;

use apache_avro::types::Value as Avro;
use serde_json::Value;

use super::super::pointer::{Found, array_index};

/// The record a body decodes to; `named`: the schemas of the named types
/// `schema` refers to (schema references).
pub fn decode(schema: &apache_avro::Schema, named: &[apache_avro::Schema], body: &[u8]) -> Result<Avro, String> {
    let mut reader = body;
    let value = if named.is_empty() {
        apache_avro::from_avro_datum(schema, &mut reader, None)
    } else {
        let all = named.iter().chain(std::iter::once(schema)).collect();
        apache_avro::from_avro_datum_schemata(schema, all, &mut reader, None)
    }
    .map_err(|e| e.to_string())?;
    if !reader.is_empty() {
        return Err(format!("{} bytes left after the record", reader.len()));
    }
    Ok(value)
}

/// The value at `path` (a JSON pointer: `/a/b`, `~1` for `/`, `~0` for `~`).
pub fn find<'a>(root: &Avro, path: &str) -> Option<Found<'a>> {
    let mut at = root;
    if !path.is_empty() {
        for token in path[1..].split('/') {
            let token: Cow<'_, str> =
                if token.contains('~') { token.replace("~1", "/").replace("~0", "~").into() } else { token.into() };
            at = child(unwrap_union(at), &token)?;
        }
    }
    leaf(unwrap_union(at))
}

fn unwrap_union(v: &Avro) -> &Avro {
    match v {
        Avro::Union(_, inner) => unwrap_union(inner),
        other => other,
    }
}

fn child<'v>(v: &'v Avro, token: &str) -> Option<&'v Avro> {
    match v {
        Avro::Record(fields) => fields.iter().find(|(name, _)| name == token).map(|(_, v)| v),
        Avro::Map(entries) => entries.get(token),
        Avro::Array(items) => items.get(array_index(token)?),
        _ => None,
    }
}

/// A found value as the key and time code reads it: strings and enum
/// symbols as text, bytes as bytes, numbers as numbers (logical times as
/// their number, in their own unit), anything else as compact JSON.
fn leaf<'a>(v: &Avro) -> Option<Found<'a>> {
    Some(match v {
        Avro::Null => return None,
        Avro::String(s) | Avro::Enum(_, s) => Found::Str(Cow::Owned(s.clone())),
        Avro::Bytes(b) | Avro::Fixed(_, b) => Found::Bytes(Cow::Owned(b.clone())),
        Avro::Boolean(b) => Found::Other(Value::Bool(*b)),
        Avro::Int(n) | Avro::Date(n) | Avro::TimeMillis(n) => Found::Other(Value::from(*n)),
        Avro::Long(n)
        | Avro::TimeMicros(n)
        | Avro::TimestampMillis(n)
        | Avro::TimestampMicros(n)
        | Avro::TimestampNanos(n)
        | Avro::LocalTimestampMillis(n)
        | Avro::LocalTimestampMicros(n)
        | Avro::LocalTimestampNanos(n) => Found::Other(Value::from(*n)),
        Avro::Float(f) => Found::Other(Value::from(f64::from(*f))),
        Avro::Double(f) => Found::Other(Value::from(*f)),
        Avro::Uuid(u) => Found::Str(Cow::Owned(u.to_string())),
        other => Found::Other(Value::try_from(other.clone()).ok()?),
    })
}
