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

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::schemas::Schema;

/// Fetches the registry's answer for one schema id (`GET /schemas/ids/<id>`).
pub trait Fetch: Send + Sync + fmt::Debug {
    /// The answer's JSON text, or the registry's definite answer that there
    /// is none (faults outside the record are waited out, not returned).
    fn fetch(&self, id: u32) -> Result<String, String>;
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
        let got = self.fetch.fetch(id).and_then(|answer| Schema::registry_answer(&answer)).map(Arc::new);
        let known = match &got {
            Ok(s) => Known::Schema(s.clone()),
            Err(why) => Known::Failed { why: why.clone(), at: Instant::now() },
        };
        lock().insert(id, known);
        got
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
        fn fetch(&self, id: u32) -> Result<String, String> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            match id {
                1 => Ok(r#"{"schema":"\"long\""}"#.to_string()),
                2 => Ok(r#"{"schema":"{","schemaType":"AVRO"}"#.to_string()),
                _ => Err("HTTP 404".to_string()),
            }
        }
    }

    #[test]
    fn fetched_once_failures_remembered() {
        let counting = Arc::new(Counting::default());
        let registry = Registry::new(Box::new(counting.clone()), Duration::from_secs(60));
        for _ in 0..3 {
            assert!(matches!(registry.get(1).unwrap().as_ref(), Schema::Avro(_)));
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
}
