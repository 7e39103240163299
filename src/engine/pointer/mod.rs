//! The values at a few JSON pointers (a key's, or a composite key's parts,
//! and a time's), read in one pass over a document without building it.
//!
//! Parsing a payload into a [`Value`] allocates a map per object and a
//! string per field; the router and the slice worker did that for every
//! record to read a key and a time. Here the document goes through the same
//! serde_json parser — every part of it, so what is not JSON is refused with
//! the same error, and nesting beyond serde_json's recursion limit (128) is
//! refused as before rather than skipped — but only the values the pointers
//! name are kept: a string without escapes borrowed from the payload, any
//! other value built as a [`Value`] (it is small: a key or a time).
//!
//! Same results as `serde_json::from_slice::<Value>` followed by
//! [`Value::pointer`] (tested below against it): with a repeated object key
//! the last one counts, as in a [`Value`].
//!
//! A record's payload first goes through a byte scanner (`scan.rs`) that
//! handles the usual document — object keys down to the values — at a
//! fraction of the walk's cost; whatever it does not handle or finds wrong
//! takes the walk, so every answer and every error is the walk's.

mod scan;

use std::borrow::Cow;
use std::fmt;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{Deserialize, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// A value found at a pointer.
#[derive(Clone, Debug, PartialEq)]
pub enum Found<'de> {
    /// A string (borrowed from the document unless it had escapes).
    Str(Cow<'de, str>),
    /// Bytes (a binary format's `bytes` or `fixed` field; never from JSON).
    Bytes(Cow<'de, [u8]>),
    /// Anything else.
    Other(Value),
}

impl Found<'_> {
    /// As a [`Value`] (for error messages).
    pub fn to_value(&self) -> Value {
        match self {
            Found::Str(s) => Value::String(s.to_string()),
            Found::Bytes(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
            Found::Other(v) => v.clone(),
        }
    }
}

/// Parses `doc` as JSON and returns what each pointer names (`None`: the
/// pointer names nothing). Fails as `serde_json::from_slice::<Value>` would.
pub fn find<'de, const N: usize>(
    doc: &'de [u8],
    pointers: [Option<&str>; N],
) -> Result<[Option<Found<'de>>; N], serde_json::Error> {
    if let Some(found) = scan::find(doc, pointers) {
        return Ok(found);
    }
    let mut found = std::array::from_fn(|_| None);
    let mut de = serde_json::Deserializer::from_slice(doc);
    Walk { rem: pointers, found: &mut found }.deserialize(&mut de)?;
    de.end()?;
    Ok(found)
}

/// The next token of a pointer (`rem` starts with `/`) and what follows it.
fn split(rem: &str) -> (&str, &str) {
    let body = &rem[1..];
    // A byte loop: pointers are short, and a `char` search's set-up costs
    // more than it saves on a record's path.
    match body.bytes().position(|b| b == b'/') {
        Some(i) => (&body[..i], &body[i..]),
        None => (body, ""),
    }
}

/// Whether a pointer token names the object key `key` (`~1` is `/`, `~0` is `~`).
fn token_is(token: &str, key: &str) -> bool {
    if token.contains('~') { token.replace("~1", "/").replace("~0", "~") == key } else { token == key }
}

/// An array index token as [`Value::pointer`] reads it: decimal digits, no
/// sign, no leading zero.
pub fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// One node of the document, with what is left of each pointer that leads
/// into it (`Some("")`: the pointer names this node).
struct Walk<'a, 'p, 'de, const N: usize> {
    rem: [Option<&'p str>; N],
    found: &'a mut [Option<Found<'de>>; N],
}

impl<'de, const N: usize> DeserializeSeed<'de> for Walk<'_, '_, 'de, N> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.rem.iter().all(Option::is_none) {
            return Skip::deserialize(d).map(|_| ());
        }
        if self.rem.contains(&Some("")) {
            // This node is wanted whole; a pointer that goes on below it
            // (rare: a key at `/a` and a time at `/a/b`) looks into it.
            let here = Found::deserialize(d)?;
            for (rem, found) in self.rem.iter().zip(self.found.iter_mut()) {
                *found = match rem {
                    None => continue,
                    Some("") => Some(here.clone()),
                    Some(rest) => match &here {
                        Found::Other(v) => v.pointer(rest).cloned().map(Found::Other),
                        Found::Str(_) | Found::Bytes(_) => None,
                    },
                };
            }
            return Ok(());
        }
        d.deserialize_any(self)
    }
}

impl<'de, const N: usize> Visitor<'de> for Walk<'_, '_, 'de, N> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let mut child = [None; N];
            for (i, rem) in self.rem.iter().enumerate() {
                if let Some(rem) = rem.filter(|r| r.starts_with('/')) {
                    let (token, rest) = split(rem);
                    if token_is(token, &key.0) {
                        // A repeated key: the last one counts, as in a `Value`.
                        self.found[i] = None;
                        child[i] = Some(rest);
                    }
                }
            }
            map.next_value_seed(Walk { rem: child, found: self.found })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        loop {
            let mut child = [None; N];
            for (i, rem) in self.rem.iter().enumerate() {
                if let Some(rem) = rem.filter(|r| r.starts_with('/')) {
                    let (token, rest) = split(rem);
                    if array_index(token) == Some(index) {
                        child[i] = Some(rest);
                    }
                }
            }
            if seq.next_element_seed(Walk { rem: child, found: self.found })?.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    // Scalars: no pointer goes on below them.
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// An object key, borrowed when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Found<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Found<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Found<'de>, E> {
                Ok(Found::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Found<'de>, E> {
                Ok(Found::Str(Cow::Owned(s.to_owned())))
            }
            fn visit_bool<E>(self, b: bool) -> Result<Found<'de>, E> {
                Ok(Found::Other(Value::Bool(b)))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Found<'de>, E> {
                Ok(Found::Other(Value::from(n)))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Found<'de>, E> {
                Ok(Found::Other(Value::from(n)))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Found<'de>, E> {
                Ok(Found::Other(Value::from(n)))
            }
            fn visit_unit<E>(self) -> Result<Found<'de>, E> {
                Ok(Found::Other(Value::Null))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Found<'de>, A::Error> {
                Value::deserialize(MapAccessDeserializer::new(map)).map(Found::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Found<'de>, A::Error> {
                Value::deserialize(SeqAccessDeserializer::new(seq)).map(Found::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// Any value, parsed and checked (strings for UTF-8, nesting against the
/// recursion limit, as a [`Value`] would be) and not kept.
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Skip)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = Skip;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Skip)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What `find` must equal: the whole document as a `Value`, then `pointer`.
    fn reference(doc: &[u8], pointers: [Option<&str>; 2]) -> Result<[Option<Value>; 2], String> {
        let v: Value = serde_json::from_slice(doc).map_err(|e| e.to_string())?;
        Ok(pointers.map(|p| p.and_then(|p| v.pointer(p).cloned())))
    }

    fn ours(doc: &[u8], pointers: [Option<&str>; 2]) -> Result<[Option<Value>; 2], String> {
        find(doc, pointers).map(|f| f.map(|f| f.map(|f| f.to_value()))).map_err(|e| e.to_string())
    }

    const POINTERS: &[&str] = &[
        "",
        "/",
        "//",
        "/id",
        "/a",
        "/a/b",
        "/a/b/0",
        "/a/b/1/c",
        "/a/b/2/1",
        "/a/b/01",
        "/a/b/+1",
        "/a/b/3",
        "/a/b/-",
        "/a/~0",
        "/a/~1",
        "/a/m~0n",
        "/a/",
        "/0",
        "/01",
        "/+1",
        "/id/0",
        "id",
        "/missing",
        "/a/b/1/c/x",
        "/a/~2",
    ];

    #[test]
    fn the_same_as_value_pointer() {
        let doc =
            br#"{"id":"x","a":{"b":[10,{"c":"d"},[1,2]],"~":1,"/":2,"m~n":3,"":4},"0":5,"01":6,"+1":7,"":{"":8}}"#;
        for p in POINTERS {
            for q in POINTERS {
                assert_eq!(ours(doc, [Some(p), Some(q)]), reference(doc, [Some(p), Some(q)]), "`{p}` and `{q}`");
            }
        }
        // A repeated key: the last one counts.
        let doc = br#"{"id":{"x":1},"id":"y","ts":2,"ts":{"n":3}}"#;
        assert_eq!(ours(doc, [Some("/id"), Some("/ts/n")]), reference(doc, [Some("/id"), Some("/ts/n")]));
        assert_eq!(ours(doc, [Some("/id/x"), Some("/ts")]), reference(doc, [Some("/id/x"), Some("/ts")]));
        // Escaped keys and strings.
        let doc = br#"{"i\u0064":"\u00e9\n","ts":"1"}"#;
        assert_eq!(ours(doc, [Some("/id"), Some("/ts")]), reference(doc, [Some("/id"), Some("/ts")]));
    }

    #[test]
    fn refuses_what_a_value_refuses_with_the_same_error() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let bad_utf8 = b"{\"id\":\"a\",\"x\":\"\xff\"}".to_vec();
        for doc in [
            b"not json".to_vec(),
            Vec::new(),
            b"{\"id\":1} trailing".to_vec(),
            b"{\"id\":1,}".to_vec(),
            bad_utf8,
            deep.into_bytes(),
            b"[".repeat(100_000),
        ] {
            let want = reference(&doc, [Some("/id"), None]);
            assert!(want.is_err());
            assert_eq!(ours(&doc, [Some("/id"), None]), want);
        }
    }

    #[test]
    fn a_plain_string_is_borrowed() {
        let found = find(br#"{"id":"abc","ts":5}"#, [Some("/id"), Some("/ts")]).unwrap();
        assert!(matches!(&found[0], Some(Found::Str(Cow::Borrowed("abc")))));
        assert_eq!(found[1], Some(Found::Other(Value::from(5u64))));
    }

    pub(super) fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (0.0f64..1e6).prop_map(Value::from),
            "[a-c~/]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-c~/0-2]{0,2}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_document_any_pointers(doc in json(), p in "(/[a-c~0-2]{0,2}){0,3}", q in "(/[a-c~0-2]{0,2}){0,3}") {
            let text = doc.to_string().into_bytes();
            prop_assert_eq!(ours(&text, [Some(&p), Some(&q)]), reference(&text, [Some(&p), Some(&q)]));
        }
    }
}
