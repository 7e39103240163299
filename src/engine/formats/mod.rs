//! Record formats other than JSON: Avro and Protobuf in the Confluent wire
//! format (`0x00`, a 4-byte schema id, the body), their schemas by id; and
//! JSON in that wire format (`json_schema`), read as JSON.
//!
//! Keys and times are taken by field path with the syntax of JSON
//! pointers (`json:/user/id`, `json:/ts:s`), so composite keys, RFC 3339
//! times and time units work as they do for JSON. The format is chosen
//! once ([`Format`]); a JSON deployment never comes here.
//!
//! - [`wire`]: the framing and Protobuf's message indexes.
//! - [`schemas`]: schemas by id, from local files or registry answers.
//! - [`registry`]: schemas fetched from a schema registry at first sight, and kept.
//! - [`avro`](mod@avro), [`protobuf`](mod@protobuf): decoding and field lookup.
//! - [`depth`]: how deeply a record nests, measured before it is decoded.
//!
//! A record that is not in the wire format, or whose schema id is unknown,
//! is `bad_schema`; a body that does not decode is `bad_avro` or
//! `bad_protobuf`, as is one nested deeper than [`depth::MAX_DEPTH`]
//! levels; never a panic or a stack overflow.

pub mod avro;
pub mod depth;
pub mod protobuf;
pub mod registry;
pub mod schemas;
pub mod wire;

use std::str::FromStr;

use super::pointer::Found;
use super::record::{
    Extracted, Extractor, FieldSource, InvalidReason, InvalidRecord, JsonPayload, PayloadDecoder, RecordView, invalid,
};
pub use registry::{Asked, Fetch, Registry};
pub use schemas::{Schema, Schemas};

/// How record payloads are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// JSON text (the payload itself; no schema).
    #[default]
    Json,
    /// Avro in the Confluent wire format.
    Avro,
    /// Protobuf in the Confluent wire format.
    Protobuf,
    /// JSON in the Confluent wire format (what a JSON Schema serializer
    /// writes): the body is read as JSON, its schema is not fetched.
    JsonSchema,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "json" => Ok(Format::Json),
            "avro" => Ok(Format::Avro),
            "protobuf" => Ok(Format::Protobuf),
            "json_schema" => Ok(Format::JsonSchema),
            _ => Err(format!("unknown format `{s}`: expected json, avro, protobuf or json_schema")),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::Json => "json",
            Format::Avro => "avro",
            Format::Protobuf => "protobuf",
            Format::JsonSchema => "json_schema",
        })
    }
}

/// Reads Avro or Protobuf records in the wire format with known schemas.
#[derive(Clone, Debug)]
pub struct Decoder {
    pub format: Format,
    /// The schemas given up front (local files), looked up first.
    pub schemas: Schemas,
    /// Where the other ids are fetched from, if anywhere.
    pub registry: Option<std::sync::Arc<Registry>>,
}

/// A decoder as records carry it ([`RecordView::decoder`]).
pub fn payload_decoder(decoder: &Option<std::sync::Arc<Decoder>>) -> Option<&dyn PayloadDecoder> {
    decoder.as_deref().map(|d| d as &dyn PayloadDecoder)
}

/// Caps what the Avro decoder allocates for one length or count read from
/// a record (a string, bytes, an array block) at `bytes`: a few corrupt
/// bytes must not make it reserve gigabytes. Process-wide and set once
/// (later calls change nothing); the daemon and the pipe mode set it to
/// the largest record they read.
pub fn limit_avro_allocations(bytes: usize) {
    apache_avro::util::max_allocation_bytes(bytes.max(1 << 16));
}

impl PayloadDecoder for Decoder {
    fn extract<'a>(
        &self,
        ex: &Extractor,
        record: &RecordView<'a>,
        arrival_ms: u64,
    ) -> Result<Extracted<'a>, InvalidRecord> {
        ex.extract_from(record, arrival_ms, &Binary { decoder: self, payload: record.payload })
    }
}

/// One record's payload, decoded when a field is looked for.
struct Binary<'d, 'a> {
    decoder: &'d Decoder,
    payload: &'a [u8],
}

impl<'a> FieldSource<'a> for Binary<'_, 'a> {
    fn find<const N: usize>(&self, pointers: [Option<&str>; N]) -> Result<[Option<Found<'a>>; N], InvalidRecord> {
        let (id, body) = wire::split(self.payload).map_err(|e| invalid(InvalidReason::BadSchema, e))?;
        if self.decoder.format == Format::JsonSchema {
            // The JSON body answers for itself: fields by pointer, as a
            // plain JSON payload (`bad_json` if it is not JSON).
            return JsonPayload(body).find(pointers);
        }
        let fetched;
        let schema = match (self.decoder.schemas.get(id), &self.decoder.registry) {
            (Some(local), _) => local.as_ref(),
            (None, Some(registry)) => {
                fetched =
                    registry.get(id).map_err(|e| invalid(InvalidReason::BadSchema, format!("schema id {id}: {e}")))?;
                fetched.as_ref()
            }
            (None, None) => {
                let why = format!("schema id {id}: unknown (not among the schemas read)");
                return Err(invalid(InvalidReason::BadSchema, why));
            }
        };
        match (self.decoder.format, schema) {
            (Format::Avro, Schema::Avro(schema, named)) => {
                let bad = |e: String| invalid(InvalidReason::BadAvro, format!("schema id {id}: {e}"));
                depth::avro(schema, named, body).map_err(bad)?;
                let value = avro::decode(schema, named, body).map_err(bad)?;
                Ok(pointers.map(|p| p.and_then(|p| avro::find(&value, p))))
            }
            (Format::Protobuf, Schema::Protobuf(file)) => {
                let bad = |e: String| invalid(InvalidReason::BadProtobuf, format!("schema id {id}: {e}"));
                let (indexes, message) = wire::message_indexes(body).map_err(bad)?;
                let message_type = protobuf::message_type(file, &indexes).map_err(bad)?;
                depth::protobuf(&message_type, message).map_err(bad)?;
                let value = protobuf::decode(message_type, message).map_err(bad)?;
                Ok(pointers.map(|p| p.and_then(|p| protobuf::find(&value, p))))
            }
            (format, schema) => Err(invalid(
                InvalidReason::BadSchema,
                format!("schema id {id} is a {} schema, the input format is {format}", schema.kind()),
            )),
        }
    }
}

#[cfg(test)]
mod tests;
