//! Schemas by id: read from local files, parsed once, kept for the run.
//!
//! A directory holds one file per schema id: `<id>.avsc` (an Avro schema),
//! `<id>.proto` (Protobuf `.proto` text) or `<id>.json` (the Schema
//! Registry's answer to `GET /schemas/ids/<id>`: `{"schema": …,
//! "schemaType": "AVRO" | "PROTOBUF"}`; a Protobuf schema there is `.proto`
//! text or, as confluent-kafka's Python serializer registers it, a base64
//! `FileDescriptorProto`). A schema that refers to others (Avro named
//! types, Protobuf imports: the answer's `references`) is read with the
//! schemas it refers to ([`Schema::with_references`]), which the registry
//! client fetches ([`super::registry`]); in a local directory such a schema
//! is refused with the reason. Google's well-known types
//! (`google/protobuf/*.proto`) are always importable.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use prost_reflect::FileDescriptor;
use prost_reflect::prost::Message;

/// A parsed schema.
#[derive(Clone, Debug)]
pub enum Schema {
    /// The writer's schema, and the named types it refers to in other
    /// schemas (schema references; empty for a schema of its own).
    Avro(apache_avro::Schema, Vec<apache_avro::Schema>),
    /// The file whose messages the records' message indexes name.
    Protobuf(FileDescriptor),
}

impl Schema {
    /// An Avro schema from its JSON text. Arrays and maps of items that
    /// take no bytes (`null`, a record of such) are refused: a record of a
    /// few bytes could claim billions of them.
    pub fn avro(text: &str) -> Result<Schema, String> {
        Schema::avro_with(text, &[])
    }

    /// An Avro schema that may use the named types the `referenced`
    /// schemas (JSON texts) define.
    fn avro_with(text: &str, referenced: &[&str]) -> Result<Schema, String> {
        let (schema, named) = if referenced.is_empty() {
            (apache_avro::Schema::parse_str(text).map_err(|e| format!("not an Avro schema: {e}"))?, Vec::new())
        } else {
            apache_avro::Schema::parse_str_with_list(text, referenced)
                .map_err(|e| format!("not an Avro schema with the schemas it refers to: {e}"))?
        };
        for s in std::iter::once(&schema).chain(&named) {
            if let Some(at) = zero_width_items(s, 0) {
                return Err(format!(
                    "{at} has items that take no bytes (null, or a record of only such fields): dedupd refuses \
                     such schemas, where a record of a few bytes could claim billions of items"
                ));
            }
        }
        Ok(Schema::Avro(schema, named))
    }

    /// A Protobuf schema from `.proto` text, or from a base64
    /// `FileDescriptorProto` (what the Python serializer registers).
    pub fn protobuf(text: &str) -> Result<Schema, String> {
        Schema::protobuf_with(text, &[])
    }

    /// A Protobuf schema that may import the `referenced` files (each by
    /// the name it is imported as, and its text in either form).
    fn protobuf_with(text: &str, referenced: &[(&str, &str)]) -> Result<Schema, String> {
        let main = proto_file(SCHEMA_FILE, text)?;
        let name = main.name().to_string();
        let mut files = ProtoFiles(HashMap::new());
        for &(import, text) in referenced {
            let file = proto_file(import, text).map_err(|e| format!("the imported {import}: {e}"))?;
            let mut proto = file.file_descriptor_proto().clone();
            proto.name = Some(import.to_string());
            files.0.entry(import.to_string()).or_insert(proto);
        }
        files.0.insert(name.clone(), main.file_descriptor_proto().clone());
        let mut resolver = protox::file::ChainFileResolver::new();
        resolver.add(files);
        resolver.add(protox::file::GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.include_imports(true);
        compiler.open_file(&name).map_err(|e| format!("the schema does not resolve: {e}"))?;
        let file = compiler.descriptor_pool().get_file_by_name(&name);
        file.map(Schema::Protobuf).ok_or_else(|| "the schema compiled to nothing".to_string())
    }

    /// A schema from the registry's JSON answer for one id, if it refers
    /// to no other schema (local files: references are resolved only from
    /// a registry).
    pub fn registry_answer(json: &str) -> Result<Schema, String> {
        let answer = Answer::parse(json)?;
        if let Some(r) = answer.references.first() {
            return Err(format!(
                "refers to other schemas ({} in subject {} and {} more): dedupd resolves schema references only \
                 from a schema registry (input.schema_registry)",
                r.name,
                r.subject,
                answer.references.len() - 1
            ));
        }
        Schema::with_references(&answer, &[])
    }

    /// The schema of a registry answer, with the answers of the schemas it
    /// refers to (directly or through others), each by its reference's
    /// name: an Avro named type or a Protobuf import path.
    pub fn with_references(answer: &Answer, referenced: &[(String, Answer)]) -> Result<Schema, String> {
        let kind = answer.kind()?;
        if let Some((name, other)) = referenced.iter().find(|(_, r)| r.kind() != Ok(kind)) {
            return Err(format!(
                "the {kind} schema refers to {name}, a {} schema",
                other.schema_type.as_deref().unwrap_or("AVRO")
            ));
        }
        match kind {
            "AVRO" => {
                let texts: Vec<&str> = referenced.iter().map(|(_, r)| r.schema.as_str()).collect();
                Schema::avro_with(&answer.schema, &texts)
            }
            _ => {
                let files: Vec<(&str, &str)> =
                    referenced.iter().map(|(name, r)| (name.as_str(), r.schema.as_str())).collect();
                Schema::protobuf_with(&answer.schema, &files)
            }
        }
    }

    /// What kind of schema this is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Schema::Avro(..) => "Avro",
            Schema::Protobuf(_) => "Protobuf",
        }
    }
}

/// The registry's answer for a schema (`GET /schemas/ids/<id>`, `GET
/// /subjects/<subject>/versions/<version>`): its text, its type (Avro if
/// none), and the schemas it refers to.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub schema: String,
    #[serde(default)]
    pub schema_type: Option<String>,
    #[serde(default)]
    pub references: Vec<Reference>,
}

/// One schema reference: the name it is used by (an Avro type's full name,
/// a Protobuf import path), and where the registry keeps it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct Reference {
    pub name: String,
    pub subject: String,
    pub version: i64,
}

impl Answer {
    pub fn parse(json: &str) -> Result<Answer, String> {
        serde_json::from_str(json).map_err(|e| format!("not a schema registry answer: {e}"))
    }

    /// `AVRO` or `PROTOBUF`, or why not.
    fn kind(&self) -> Result<&'static str, String> {
        match self.schema_type.as_deref().unwrap_or("AVRO") {
            "AVRO" => Ok("AVRO"),
            "PROTOBUF" => Ok("PROTOBUF"),
            other => Err(format!("schemaType {other}: dedupd reads AVRO and PROTOBUF")),
        }
    }
}

/// Where in `schema` an array or map has items of no width, if anywhere.
fn zero_width_items(schema: &apache_avro::Schema, depth: usize) -> Option<String> {
    use apache_avro::Schema as S;
    if depth > 64 {
        return None;
    }
    match schema {
        S::Array(a) if zero_width(&a.items, 0) => Some("an array".into()),
        S::Map(m) if zero_width(&m.types, 0) => Some("a map".into()),
        S::Array(a) => zero_width_items(&a.items, depth + 1),
        S::Map(m) => zero_width_items(&m.types, depth + 1),
        S::Union(u) => u.variants().iter().find_map(|v| zero_width_items(v, depth + 1)),
        S::Record(r) => r.fields.iter().find_map(|f| {
            zero_width_items(&f.schema, depth + 1).map(|at| format!("{at} (field {} of {})", f.name, r.name.name))
        }),
        _ => None,
    }
}

/// Whether values of `schema` may take no bytes.
fn zero_width(schema: &apache_avro::Schema, depth: usize) -> bool {
    use apache_avro::Schema as S;
    match schema {
        S::Null => true,
        S::Fixed(f) => f.size == 0,
        S::Record(r) => depth < 64 && r.fields.iter().all(|f| zero_width(&f.schema, depth + 1)),
        _ => false,
    }
}

/// The name a schema given as `.proto` text is compiled under.
const SCHEMA_FILE: &str = "schema.proto";

/// One file of a Protobuf schema: `.proto` text (parsed, named `name`), or
/// a base64 `FileDescriptorProto` (under its own name, `name` if it has none).
fn proto_file(name: &str, text: &str) -> Result<protox::file::File, String> {
    let trimmed = text.trim();
    let base64ish =
        !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    if base64ish && let Some(bytes) = base64_decode(trimmed) {
        let mut proto = prost_reflect::prost_types::FileDescriptorProto::decode(bytes.as_slice())
            .map_err(|e| format!("not a serialized FileDescriptorProto: {e}"))?;
        if proto.name().is_empty() {
            proto.name = Some(name.to_string());
        }
        return Ok(protox::file::File::from_file_descriptor_proto(proto));
    }
    protox::file::File::from_source(name, text).map_err(|e| format!("not a .proto file: {e}"))
}

/// A file resolver with the files of one schema, by name.
struct ProtoFiles(HashMap<String, prost_reflect::prost_types::FileDescriptorProto>);

impl protox::file::FileResolver for ProtoFiles {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        match self.0.get(name) {
            Some(proto) => Ok(protox::file::File::from_file_descriptor_proto(proto.clone())),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// Standard base64 (with padding) as bytes; `None` if it is not.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    };
    let body = text.trim_end_matches('=');
    if text.len() % 4 != 0 || text.len() - body.len() > 2 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for chunk in body.as_bytes().chunks(4) {
        let n = chunk.iter().try_fold(0u32, |n, &c| Some(n << 6 | value(c)?))? << (6 * (4 - chunk.len()));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    Some(out)
}

/// Schemas by id, parsed once.
#[derive(Clone, Debug, Default)]
pub struct Schemas {
    by_id: HashMap<u32, Arc<Schema>>,
}

impl Schemas {
    /// Every `<id>.avsc`, `<id>.proto` and `<id>.json` of `dir`; a file
    /// that does not parse fails, naming it (other files are ignored).
    pub fn from_dir(dir: &Path) -> Result<Schemas, String> {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut schemas = Schemas::default();
        for entry in entries {
            let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
            let (Some(stem), Some(ext)) = (path.file_stem().and_then(|s| s.to_str()), path.extension()) else {
                continue;
            };
            let Ok(id) = stem.parse::<u32>() else { continue };
            let parse = match ext.to_str() {
                Some("avsc") => Schema::avro,
                Some("proto") => Schema::protobuf,
                Some("json") => Schema::registry_answer,
                _ => continue,
            };
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let schema = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            if schemas.by_id.insert(id, Arc::new(schema)).is_some() {
                return Err(format!("{}: a second schema with id {id}", path.display()));
            }
        }
        Ok(schemas)
    }

    /// Adds (or replaces) the schema of `id`.
    pub fn insert(&mut self, id: u32, schema: Schema) {
        self.by_id.insert(id, Arc::new(schema));
    }

    /// The schema of `id`.
    pub fn get(&self, id: u32) -> Option<&Arc<Schema>> {
        self.by_id.get(&id)
    }

    /// How many schemas are known.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no schema is known.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        assert_eq!(base64_decode("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(base64_decode("aGVsbG8h"), Some(b"hello!".to_vec()));
        assert_eq!(base64_decode("aGk="), Some(b"hi".to_vec()));
        assert_eq!(base64_decode(""), Some(Vec::new()));
        assert_eq!(base64_decode("aGk"), None);
        assert_eq!(base64_decode("a*k="), None);
    }

    #[test]
    fn refusals_say_what() {
        assert!(Schema::avro("{").unwrap_err().contains("not an Avro schema"));
        let nulls = r#"{"type":"record","name":"R","fields":[{"name":"n","type":{"type":"array","items":"null"}}]}"#;
        assert!(Schema::avro(nulls).unwrap_err().contains("an array (field n of R) has items that take no bytes"));
        let empty = r#"{"type":"map","values":{"type":"record","name":"E","fields":[]}}"#;
        assert!(Schema::avro(empty).unwrap_err().starts_with("a map has items"));
        assert!(Schema::avro(r#"{"type":"array","items":["null","long"]}"#).is_ok(), "a union's index takes a byte");
        assert!(Schema::protobuf("message {").unwrap_err().contains("not a .proto file"));
        assert!(Schema::registry_answer(r#"{"schema":"{}","schemaType":"JSON"}"#).unwrap_err().contains("JSON"));
        assert!(Schema::registry_answer("[]").unwrap_err().contains("not a schema registry answer"));
        let imports = "syntax = \"proto3\"; import \"google/protobuf/timestamp.proto\"; \
                       message M { google.protobuf.Timestamp at = 1; }";
        assert!(Schema::protobuf(imports).is_ok(), "{:?}", Schema::protobuf(imports).err());
        let unknown = "syntax = \"proto3\"; import \"other.proto\"; message M { Other o = 1; }";
        assert!(Schema::protobuf(unknown).is_err());
    }
}
