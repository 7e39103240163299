//! Schemas fetched from a schema registry at first sight of their id, and
//! kept for the run. The network part is the caller's ([`Fetch`]): the
//! engine does no I/O of its own.
//!
//! A record whose schema id is not known yet waits for its fetch; every
//! later record of that id finds the schema in memory. The fetcher fails
//! only on a definite answer (the registry has no such id); a fault outside
//! the record (no connection, a timeout, 5xx) it waits out, so the record
//! waits and its verdict does not depend on when the network failed
//! (invariant 1). A definite failure, or an answer that does not parse,
//! makes that record `bad_schema` with the reason, and is remembered for
//! [`Registry::retry_after`]: the records of that id in the meantime are
//! `bad_schema` at once, without asking the registry again.
//!
//! A schema that refers to others (its answer's `references`: Avro named
//! types, Protobuf imports, registered under other subjects) is read with
//! them, each fetched by subject and version, the ones they refer to as
//! well: at most [`MAX_REFERENCES`] schemas, [`MAX_REFERENCE_DEPTH`]
//! levels deep, no cycle. A reference the registry does not have, or past
//! these bounds, is a definite answer like an unknown id (`bad_schema`).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::schemas::{Answer, Reference, Schema};

/// Most schemas one schema may refer to, directly or through others.
pub const MAX_REFERENCES: usize = 64;

/// Most levels of references (a schema referring to one that refers to
/// another is 2 levels).
pub const MAX_REFERENCE_DEPTH: usize = 16;

/// What is asked of the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked<'a> {
    /// `GET /schemas/ids/<id>`: the schema of a record.
    Id(u32),
    /// `GET /subjects/<subject>/versions/<version>`: a schema another one
    /// refers to.
    Version { subject: &'a str, version: i64 },
}

impl fmt::Display for Asked<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Asked::Id(id) => write!(f, "schema id {id}"),
            Asked::Version { subject, version } => write!(f, "subject {subject:?} version {version}"),
        }
    }
}

/// Fetches the registry's answers.
pub trait Fetch: Send + Sync + fmt::Debug {
    /// The answer's JSON text, or the registry's definite answer that there
    /// is none (faults outside the record are waited out, not returned).
    fn fetch(&self, asked: Asked<'_>) -> Result<String, String>;
}

#[derive(Debug)]
enum Known {
    Schema(Arc<Schema>),
    Failed { why: String, at: Instant },
}

/// Schemas by id, fetched when first needed.
#[derive(Debug)]
pub struct Registry {
    fetch: Box<dyn Fetch>,
    /// How long a failed fetch is remembered before the id is asked again.
    pub retry_after: Duration,
    known: Mutex<HashMap<u32, Known>>,
}

impl Registry {
    pub fn new(fetch: Box<dyn Fetch>, retry_after: Duration) -> Self {
        Registry { fetch, retry_after, known: Mutex::new(HashMap::new()) }
    }

    /// The schema of `id`: from memory, or fetched now.
    pub fn get(&self, id: u32) -> Result<Arc<Schema>, String> {
        let lock = || self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match lock().get(&id) {
            Some(Known::Schema(s)) => return Ok(s.clone()),
            Some(Known::Failed { why, at }) if at.elapsed() < self.retry_after => {
                let left = self.retry_after.saturating_sub(at.elapsed()).as_secs().max(1);
                return Err(format!("{why} (the registry is asked again in {left} s)"));
            }
            _ => {}
        }
        // Fetched without the lock: records of known ids go on meanwhile.
        let got = self.resolve(id).map(Arc::new);
        let known = match &got {
            Ok(s) => Known::Schema(s.clone()),
            Err(why) => Known::Failed { why: why.clone(), at: Instant::now() },
        };
        lock().insert(id, known);
        got
    }

    /// The schema of `id`, with the schemas it refers to.
    fn resolve(&self, id: u32) -> Result<Schema, String> {
        let answer = Answer::parse(&self.fetch.fetch(Asked::Id(id))?)?;
        let mut walk = Walk { fetch: self.fetch.as_ref(), path: Vec::new(), found: Vec::new(), seen: Vec::new() };
        walk.references(&answer.references)?;
        Schema::with_references(&answer, &walk.found)
    }
}

/// The schemas a schema refers to, gathered depth first.
struct Walk<'f> {
    fetch: &'f dyn Fetch,
    /// The references being followed (to see a cycle).
    path: Vec<(String, i64)>,
    /// The answers gathered, by reference name.
    found: Vec<(String, Answer)>,
    /// The subjects and versions fetched (one fetch for a schema referred to twice).
    seen: Vec<(String, i64)>,
}

impl Walk<'_> {
    fn references(&mut self, references: &[Reference]) -> Result<(), String> {
        for r in references {
            let at = (r.subject.clone(), r.version);
            let what =
                || format!("the reference {} ({})", r.name, Asked::Version { subject: &r.subject, version: r.version });
            if self.path.contains(&at) {
                return Err(format!("{}: a cycle of references", what()));
            }
            if self.seen.contains(&at) {
                continue;
            }
            if self.path.len() >= MAX_REFERENCE_DEPTH {
                return Err(format!("{}: references nested more than {MAX_REFERENCE_DEPTH} levels", what()));
            }
            if self.seen.len() >= MAX_REFERENCES {
                return Err(format!("{}: more than {MAX_REFERENCES} schemas referred to", what()));
            }
            self.seen.push(at.clone());
            let text = self.fetch.fetch(Asked::Version { subject: &r.subject, version: r.version });
            let answer = text.and_then(|t| Answer::parse(&t)).map_err(|e| format!("{}: {e}", what()))?;
            self.path.push(at);
            self.references(&answer.references)?;
            self.path.pop();
            self.found.push((r.name.clone(), answer));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug, Default)]
    struct Counting {
        asked: AtomicUsize,
    }

    impl Fetch for Arc<Counting> {
        fn fetch(&self, asked: Asked<'_>) -> Result<String, String> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            match asked {
                Asked::Id(1) => Ok(r#"{"schema":"\"long\""}"#.to_string()),
                Asked::Id(2) => Ok(r#"{"schema":"{","schemaType":"AVRO"}"#.to_string()),
                _ => Err("HTTP 404".to_string()),
            }
        }
    }

    #[test]
    fn fetched_once_failures_remembered() {
        let counting = Arc::new(Counting::default());
        let registry = Registry::new(Box::new(counting.clone()), Duration::from_secs(60));
        for _ in 0..3 {
            assert!(matches!(registry.get(1).unwrap().as_ref(), Schema::Avro(..)));
        }
        assert_eq!(counting.asked.load(Ordering::SeqCst), 1);
        assert_eq!(registry.get(9).unwrap_err(), "HTTP 404");
        let again = registry.get(9).unwrap_err();
        assert!(again.starts_with("HTTP 404 (the registry is asked again in "), "{again}");
        assert!(registry.get(2).unwrap_err().contains("not an Avro schema"));
        assert_eq!(counting.asked.load(Ordering::SeqCst), 3);
        let soon = Registry::new(Box::new(counting.clone()), Duration::ZERO);
        let _ = soon.get(9);
        let _ = soon.get(9);
        assert_eq!(counting.asked.load(Ordering::SeqCst), 5, "asked again once the interval is over");
    }

    /// A registry of answers by id and by subject and version, counting the requests.
    #[derive(Debug, Default)]
    struct Answers {
        by_id: HashMap<u32, String>,
        by_version: HashMap<(String, i64), String>,
        asked: AtomicUsize,
    }

    impl Fetch for Arc<Answers> {
        fn fetch(&self, asked: Asked<'_>) -> Result<String, String> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            let got = match asked {
                Asked::Id(id) => self.by_id.get(&id),
                Asked::Version { subject, version } => self.by_version.get(&(subject.to_string(), version)),
            };
            got.cloned().ok_or_else(|| format!("HTTP 404 for {asked}"))
        }
    }

    fn answer(schema: &str, kind: &str, refs: &[(&str, &str, i64)]) -> String {
        let refs: Vec<_> = refs
            .iter()
            .map(|(name, subject, version)| serde_json::json!({"name": name, "subject": subject, "version": version}))
            .collect();
        serde_json::json!({"schema": schema, "schemaType": kind, "references": refs}).to_string()
    }

    #[test]
    fn avro_references_are_resolved_through_levels() {
        let mut answers = Answers::default();
        let country = r#"{"type":"enum","name":"Country","namespace":"ref","symbols":["DE","FR"]}"#;
        let user = r#"{"type":"record","name":"User","namespace":"ref","fields":[
            {"name":"id","type":"string"},{"name":"country","type":"ref.Country"}]}"#;
        let click = r#"{"type":"record","name":"Click","namespace":"ref","fields":[
            {"name":"user","type":"ref.User"},{"name":"from","type":"ref.Country"},{"name":"n","type":"long"}]}"#;
        answers.by_version.insert(("country".into(), 1), answer(country, "AVRO", &[]));
        answers.by_version.insert(("user".into(), 3), answer(user, "AVRO", &[("ref.Country", "country", 1)]));
        let refs = [("ref.User", "user", 3), ("ref.Country", "country", 1)];
        answers.by_id.insert(1, answer(click, "AVRO", &refs));
        let answers = Arc::new(answers);
        let registry = Registry::new(Box::new(answers.clone()), Duration::from_secs(60));
        let schema = registry.get(1).unwrap();
        assert_eq!(answers.asked.load(Ordering::SeqCst), 3, "the country schema fetched once");
        let Schema::Avro(main, named) = schema.as_ref() else { panic!("{schema:?}") };
        let body = [4, b'u', b'1', 2, 0, 14]; // user {id "u1", country FR}, from DE, n 7
        assert_eq!(super::super::depth::avro(main, named, &body), Ok(2));
        let value = super::super::avro::decode(main, named, &body).unwrap();
        let text = |p| match super::super::avro::find(&value, p) {
            Some(super::super::Found::Str(s)) => s.into_owned(),
            other => panic!("{other:?}"),
        };
        assert_eq!((text("/user/id"), text("/user/country"), text("/from")), ("u1".into(), "FR".into(), "DE".into()));
        assert!(super::super::avro::decode(main, named, &body[..5]).is_err());
    }

    #[test]
    fn protobuf_imports_are_resolved() {
        let mut answers = Answers::default();
        let ad = "syntax = \"proto3\"; package ads; message Ad { int64 id = 1; }";
        let click = "syntax = \"proto3\"; package clicks; import \"ads/ad.proto\"; \
                     import \"google/protobuf/timestamp.proto\"; \
                     message Click { string user = 1; ads.Ad ad = 2; google.protobuf.Timestamp at = 3; }";
        answers.by_version.insert(("ads/ad.proto".into(), 1), answer(ad, "PROTOBUF", &[]));
        answers.by_id.insert(1, answer(click, "PROTOBUF", &[("ads/ad.proto", "ads/ad.proto", 1)]));
        answers.by_id.insert(2, answer(click, "PROTOBUF", &[]));
        let registry = Registry::new(Box::new(Arc::new(answers)), Duration::from_secs(60));
        let Schema::Protobuf(file) = registry.get(1).unwrap().as_ref().clone() else { panic!() };
        let message = super::super::protobuf::message_type(&file, &[0]).unwrap();
        assert_eq!(message.get_field_by_name("ad").unwrap().kind().as_message().unwrap().full_name(), "ads.Ad");
        assert!(registry.get(2).unwrap_err().contains("ads/ad.proto"), "an import not referenced does not resolve");
    }

    #[test]
    fn references_fail_closed() {
        let mut answers = Answers::default();
        let named = |n: &str| format!(r#"{{"type":"fixed","name":"{n}","size":1}}"#);
        let record = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"A"}]}"#;
        // A missing reference: a definite answer, remembered like an unknown id.
        answers.by_id.insert(1, answer(record, "AVRO", &[("A", "a", 1)]));
        // A cycle: a refers to b, b to a.
        answers.by_version.insert(("a".into(), 2), answer(&named("A"), "AVRO", &[("B", "b", 1)]));
        answers.by_version.insert(("b".into(), 1), answer(&named("B"), "AVRO", &[("A", "a", 2)]));
        answers.by_id.insert(2, answer(record, "AVRO", &[("A", "a", 2)]));
        // A chain deeper than the limit: c0 refers to c1, ... up to c20.
        for level in 0..20 {
            let next = format!("c{}", level + 1);
            answers.by_version.insert((format!("c{level}"), 1), answer(&named("A"), "AVRO", &[(&next, &next, 1)]));
        }
        answers.by_id.insert(3, answer(record, "AVRO", &[("A", "c0", 1)]));
        // Too many: 100 references side by side.
        let many: Vec<(String, String)> = (0..100).map(|i| (format!("N{i}"), format!("n{i}"))).collect();
        for (name, subject) in &many {
            answers.by_version.insert((subject.clone(), 1), answer(&named(name), "AVRO", &[]));
        }
        let refs: Vec<(&str, &str, i64)> = many.iter().map(|(n, s)| (n.as_str(), s.as_str(), 1)).collect();
        answers.by_id.insert(4, answer(record, "AVRO", &refs));
        // A Protobuf file where an Avro schema is referred to.
        answers.by_version.insert(("p".into(), 1), answer("syntax = \"proto3\";", "PROTOBUF", &[]));
        answers.by_id.insert(5, answer(record, "AVRO", &[("A", "p", 1)]));
        // References in a local file are refused with the reason.
        let local = Schema::registry_answer(&answer(record, "AVRO", &[("A", "a", 1)])).unwrap_err();
        assert!(local.contains("only from a schema registry"), "{local}");
        let answers = Arc::new(answers);
        let registry = Registry::new(Box::new(answers.clone()), Duration::from_secs(60));
        let err = |id| registry.get(id).unwrap_err();
        assert_eq!(err(1), "the reference A (subject \"a\" version 1): HTTP 404 for subject \"a\" version 1");
        assert!(err(2).ends_with("(subject \"a\" version 2): a cycle of references"), "{}", err(2));
        assert!(err(3).ends_with("references nested more than 16 levels"), "{}", err(3));
        let before = answers.asked.load(Ordering::SeqCst);
        assert!(err(4).ends_with("more than 64 schemas referred to"), "{}", err(4));
        assert_eq!(answers.asked.load(Ordering::SeqCst) - before, 65, "the id and 64 references, no more");
        assert!(err(4).contains("(the registry is asked again in "), "remembered");
        assert_eq!(answers.asked.load(Ordering::SeqCst) - before, 65, "not asked again");
        assert_eq!(err(5), "the AVRO schema refers to A, a PROTOBUF schema");
    }
}
