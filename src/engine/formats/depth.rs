//! How deeply a record nests, measured without recursion before it is
//! decoded.
//!
//! The decoders (apache-avro, prost-reflect) recurse once per nested value.
//! A legal recursive schema (a linked list, `N.next: ["null", "N"]`) lets a
//! record of a few kilobytes nest thousands of levels and overflow the
//! thread's stack: an abort, not an error, and the same record again at
//! every restart. So the nesting is first measured here, with a stack on
//! the heap, and a record deeper than [`MAX_DEPTH`] is refused with its
//! depth (invariant 6: no input makes the daemon abort).
//!
//! A level is a record, an array or a map (Avro; unions and named
//! references are looked through), or a message or group (Protobuf): the
//! top-level record is level 1.

use std::collections::HashMap;

use apache_avro::Schema as S;
use apache_avro::schema::{Name, ResolvedSchema};
use prost_reflect::{Kind, MessageDescriptor};

/// Most levels a record may nest: the default of the Avro SDKs and of
/// Protobuf. apache-avro recurses about three frames per level and prost
/// one, so this fits in any thread's stack with room to spare.
pub const MAX_DEPTH: usize = 100;

/// Why a record is refused before decoding.
pub fn too_deep(depth: usize, exact: bool) -> String {
    let at_least = if exact { "" } else { "at least " };
    format!(
        "nested {at_least}{depth} levels deep: at most {MAX_DEPTH} are read (records, arrays and maps, or messages, \
         inside each other); write such data flatter, or keep it out of this input"
    )
}

/// Values walked per byte of the record (plus a fixed allowance) before
/// the walk gives up: a value of no width (`null`, an empty record) takes
/// no bytes, so this bounds the work on a record that claims a huge count
/// of them or an endless chain of records of records.
const STEPS_PER_BYTE: usize = 64;
const STEPS_FIXED: usize = 1 << 16;

static NULL: S = S::Null;

/// One thing left to read: a value, or the rest of an array's or map's
/// current block.
enum Todo<'s> {
    Value { schema: &'s S, ns: Option<&'s str>, level: usize },
    Items { items: &'s S, ns: Option<&'s str>, level: usize, left: usize, map: bool },
}

/// The bytes of one Avro body, read as apache-avro reads them (including
/// its leniency at the end of the input: a boolean, a string or a union
/// index cut there reads as null).
struct Bytes<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl Bytes<'_> {
    fn long(&mut self) -> Result<i64, String> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&b) = self.bytes.get(self.at) else {
                return Err(format!("the record ends inside a number at byte {}", self.at));
            };
            self.at += 1;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        Err(format!("a number longer than 10 bytes at byte {}", self.at))
    }

    fn skip(&mut self, n: usize) {
        self.at = self.at.saturating_add(n).min(self.bytes.len());
    }

    fn at_end(&self) -> bool {
        self.at >= self.bytes.len()
    }

    /// A length or count, as apache-avro checks it.
    fn len(&mut self) -> Result<usize, String> {
        let n = self.long()?;
        let max = apache_avro::util::max_allocation_bytes(apache_avro::util::DEFAULT_MAX_ALLOCATION_BYTES);
        usize::try_from(n.unsigned_abs())
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("a length or count of {n} at byte {}: at most {max}", self.at))
    }
}

/// The Avro body's nesting depth if it is at most [`MAX_DEPTH`], else why it
/// is refused. A malformed body may pass: the decoder then says why, and it
/// never reads deeper than this walk did (it reads the same bytes the same
/// way, and stops where this walk stops, or sooner).
pub fn avro(schema: &S, named: &[S], body: &[u8]) -> Result<usize, String> {
    let resolved = ResolvedSchema::try_from(named.iter().chain(std::iter::once(schema)).collect::<Vec<_>>())
        .map_err(|e| e.to_string())?;
    let names = resolved.get_names();
    let mut bytes = Bytes { bytes: body, at: 0 };
    let mut todo = vec![Todo::Value { schema, ns: None, level: 0 }];
    let mut deepest = 0;
    let budget = body.len().saturating_mul(STEPS_PER_BYTE).saturating_add(STEPS_FIXED);
    // Past the limit the walk goes on only to tell the depth: a real chain
    // takes a byte per level (a union index, a count), so one deeper than
    // the body is long is an endless chain of records, cut here.
    let measured = body.len() + 2 * MAX_DEPTH;
    for _ in 0..budget {
        let Some(next) = todo.pop() else {
            return if deepest > MAX_DEPTH { Err(too_deep(deepest, true)) } else { Ok(deepest) };
        };
        if let Err(e) = avro_step(next, names, &mut bytes, &mut todo) {
            // Deeper than the limit and then malformed: the depth is the news.
            return Err(if deepest > MAX_DEPTH { too_deep(deepest, false) } else { e });
        }
        deepest = deepest.max(todo.last().map_or(0, Todo::level));
        if deepest > measured {
            return Err(too_deep(deepest, false));
        }
    }
    Err(if deepest > MAX_DEPTH {
        too_deep(deepest, false)
    } else {
        format!("more values than its {} bytes can hold (empty records or nulls by the million)", body.len())
    })
}

/// Reads one value, or the next item of an array or map.
fn avro_step<'s>(
    next: Todo<'s>,
    names: &'s HashMap<Name, &'s S>,
    bytes: &mut Bytes<'_>,
    todo: &mut Vec<Todo<'s>>,
) -> Result<(), String> {
    match next {
        Todo::Value { schema, ns, level } => avro_value(schema, ns, level, names, bytes, todo),
        Todo::Items { items, ns, level, left, map } => {
            let left = if left == 0 { bytes.len()? } else { left };
            if left > 0 {
                if map {
                    let key = bytes.len()?;
                    bytes.skip(key);
                }
                todo.push(Todo::Items { items, ns, level, left: left - 1, map });
                todo.push(Todo::Value { schema: items, ns, level });
            }
            Ok(())
        }
    }
}

impl Todo<'_> {
    /// The level of the value this reads (a record's fields are one below it).
    fn level(&self) -> usize {
        match self {
            Todo::Value { level, .. } | Todo::Items { level, .. } => *level,
        }
    }
}

/// Reads one Avro value of `schema` at `level`: a scalar whole, a
/// container by pushing what it holds (one level further) on `todo`.
fn avro_value<'s>(
    schema: &'s S,
    ns: Option<&'s str>,
    level: usize,
    names: &'s HashMap<Name, &'s S>,
    bytes: &mut Bytes<'_>,
    todo: &mut Vec<Todo<'s>>,
) -> Result<(), String> {
    match schema {
        S::Null => {}
        // Cut at the end: null, as apache-avro reads it.
        S::Boolean => bytes.skip(1),
        S::Int | S::Long | S::Enum(_) | S::Date | S::TimeMillis | S::TimeMicros => drop(bytes.long()?),
        S::TimestampMillis | S::TimestampMicros | S::TimestampNanos => drop(bytes.long()?),
        S::LocalTimestampMillis | S::LocalTimestampMicros | S::LocalTimestampNanos => drop(bytes.long()?),
        S::Float => bytes.skip(4),
        S::Double => bytes.skip(8),
        S::Duration => bytes.skip(12),
        S::Fixed(f) => bytes.skip(f.size),
        S::Bytes | S::String | S::Uuid | S::BigDecimal => {
            let n = bytes.len()?;
            bytes.skip(n);
        }
        S::Decimal(d) => todo.push(Todo::Value { schema: &d.inner, ns, level }),
        S::Union(u) => {
            if bytes.at_end() {
                return Ok(()); // apache-avro reads a union cut here as null.
            }
            let index = bytes.long()?;
            if let Some(variant) = usize::try_from(index).ok().and_then(|i| u.variants().get(i)) {
                todo.push(Todo::Value { schema: variant, ns, level });
            }
        }
        S::Array(a) => todo.push(Todo::Items { items: &a.items, ns, level: level + 1, left: 0, map: false }),
        S::Map(m) => todo.push(Todo::Items { items: &m.types, ns, level: level + 1, left: 0, map: true }),
        S::Record(r) => {
            let ns = r.name.namespace.as_deref().or(ns.filter(|ns| !ns.is_empty()));
            for field in r.fields.iter().rev() {
                todo.push(Todo::Value { schema: &field.schema, ns, level: level + 1 });
            }
            if r.fields.is_empty() {
                // Still a level: an empty record holds no field to show it.
                todo.push(Todo::Value { schema: &NULL, ns, level: level + 1 });
            }
        }
        S::Ref { name } => {
            let full = name.fully_qualified_name(&ns.map(str::to_string));
            if let Some((full, &resolved)) = names.get_key_value(&full) {
                todo.push(Todo::Value { schema: resolved, ns: full.namespace.as_deref(), level });
            }
        }
    }
    Ok(())
}

/// One message (or group) being read: where it ends, its type if known.
struct Frame {
    end: usize,
    message: Option<MessageDescriptor>,
    /// The field number that closes it, for a group.
    group: Option<u32>,
}

/// The Protobuf message's nesting depth if it is at most [`MAX_DEPTH`], else
/// why it is refused. A malformed message passes: prost then says why (its
/// own limit, 100 nested messages, stays the backstop).
pub fn protobuf(message: &MessageDescriptor, body: &[u8]) -> Result<usize, String> {
    let mut stack = vec![Frame { end: body.len(), message: Some(message.clone()), group: None }];
    let (mut at, mut deepest, mut whole) = (0, 1, false);
    loop {
        let Some(top) = stack.last() else {
            whole = true;
            break;
        };
        if top.group.is_none() && at >= top.end {
            stack.pop();
            continue;
        }
        let Some(key) = varint(body, &mut at) else { break };
        let (number, wire) = (u32::try_from(key >> 3).unwrap_or(0), key & 7);
        let field = top.message.as_ref().and_then(|m| m.get_field(number));
        let nested = field.and_then(|f| if let Kind::Message(m) = f.kind() { Some(m) } else { None });
        match wire {
            0 if varint(body, &mut at).is_some() => {}
            1 => at += 8,
            5 => at += 4,
            2 => {
                let Some(len) = varint(body, &mut at).and_then(|n| usize::try_from(n).ok()) else { break };
                let end = at.saturating_add(len);
                if end > top.end {
                    break;
                }
                match nested {
                    Some(m) => stack.push(Frame { end, message: Some(m), group: None }),
                    None => at = end,
                }
            }
            3 => {
                let end = top.end;
                stack.push(Frame { end, message: nested, group: Some(number) });
            }
            4 if top.group == Some(number) => drop(stack.pop()),
            _ => break,
        }
        deepest = deepest.max(stack.len());
    }
    if deepest > MAX_DEPTH { Err(too_deep(deepest, whole)) } else { Ok(deepest) }
}

/// A varint at `at` (advancing it), if there is a whole one.
fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let b = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A linked list: `N { id: string, next: ["null", N] }`.
    const LIST: &str = r#"{"type":"record","name":"N","namespace":"t","fields":[
        {"name":"id","type":"string"},{"name":"next","type":["null","N"]}]}"#;

    /// A list `levels` records long, each id `x`.
    pub(crate) fn avro_list(levels: usize) -> Vec<u8> {
        let mut body = [2u8, b'x', 2].repeat(levels);
        *body.last_mut().unwrap() = 0;
        body
    }

    /// `message N { string id = 1; N next = 2; }` nested `levels` deep.
    pub(crate) fn protobuf_list(levels: usize) -> Vec<u8> {
        let mut body = vec![0x0a, 1, b'x'];
        for _ in 1..levels {
            let mut outer = vec![0x0a, 1, b'x', 0x12];
            let mut len = body.len();
            while len >= 0x80 {
                outer.push((len as u8) | 0x80);
                len >>= 7;
            }
            outer.push(len as u8);
            outer.extend_from_slice(&body);
            body = outer;
        }
        body
    }

    fn list_message() -> MessageDescriptor {
        let file = match super::super::Schema::protobuf("syntax = \"proto3\"; message N { string id = 1; N next = 2; }")
        {
            Ok(super::super::Schema::Protobuf(file)) => file,
            other => panic!("{other:?}"),
        };
        file.messages().next().unwrap()
    }

    #[test]
    fn avro_lists_are_measured() {
        let schema = S::parse_str(LIST).unwrap();
        for levels in [1, 2, 50, MAX_DEPTH] {
            assert_eq!(avro(&schema, &[], &avro_list(levels)), Ok(levels), "{levels}");
        }
        // What passes, apache-avro decodes in a quarter of a worker thread's
        // stack (optimized, as tests and releases are built: about 4 KB a
        // level; an unoptimized build takes 70 KB, hence the daemon's 16 MiB threads).
        let decoded = std::thread::Builder::new()
            .stack_size(512 << 10)
            .spawn(move || super::super::avro::decode(&schema, &[], &avro_list(MAX_DEPTH)).is_ok())
            .unwrap()
            .join();
        assert_eq!(decoded.ok(), Some(true));
        let schema = S::parse_str(LIST).unwrap();
        for levels in [MAX_DEPTH + 1, 2_000, 100_000] {
            let err = avro(&schema, &[], &avro_list(levels)).unwrap_err();
            assert!(err.starts_with(&format!("nested {levels} levels deep: at most 100")), "{err}");
        }
        // Cut short, or with a union index that is not in the union: passes
        // here, the decoder refuses it (no deeper than this walk went).
        let cut = &avro_list(3_000)[..450];
        assert!(avro(&schema, &[], cut).unwrap_err().starts_with("nested at least 151 levels deep"));
        assert!(avro(&schema, &[], &avro_list(50)[..60]).unwrap_err().contains("ends inside a number"));
        assert_eq!(avro(&schema, &[], &[2, b'x', 8]), Ok(1));
        assert!(super::super::avro::decode(&schema, &[], &[2, b'x', 8]).is_err());
        // Arrays and maps are levels too.
        let arrays =
            S::parse_str(r#"{"type":"record","name":"A","fields":[{"name":"a","type":{"type":"array","items":"A"}}]}"#)
                .unwrap();
        let mut deep = vec![2u8; 150];
        deep.extend(std::iter::repeat_n(0u8, 151));
        let err = avro(&arrays, &[], &deep).unwrap_err();
        assert!(err.starts_with("nested 302 levels deep"), "{err}");
    }

    #[test]
    fn avro_endless_chains_are_cut() {
        // A record that holds itself: no value ends, yet every level is empty.
        let endless = S::parse_str(r#"{"type":"record","name":"E","fields":[{"name":"e","type":"E"}]}"#).unwrap();
        let err = avro(&endless, &[], &[]).unwrap_err();
        assert!(err.starts_with("nested at least 20"), "{err}");
        // A count of a billion empty records in a few bytes.
        let empties = S::parse_str(r#"{"type":"array","items":{"type":"record","name":"Z","fields":[]}}"#).unwrap();
        let err = avro(&empties, &[], &[0x80, 0xda, 0xc4, 0x09]).unwrap_err();
        assert!(err.contains("more values than its 4 bytes can hold"), "{err}");
    }

    #[test]
    fn protobuf_lists_are_measured() {
        let message = list_message();
        for levels in [1, 2, MAX_DEPTH] {
            assert_eq!(protobuf(&message, &protobuf_list(levels)), Ok(levels), "{levels}");
            super::super::protobuf::decode(message.clone(), &protobuf_list(levels)).unwrap();
        }
        for levels in [MAX_DEPTH + 1, 2_000, 100_000] {
            let err = protobuf(&message, &protobuf_list(levels)).unwrap_err();
            assert!(err.starts_with(&format!("nested {levels} levels deep: at most 100")), "{err}");
        }
        // Cut short: the outermost length is already wrong, prost says why.
        assert_eq!(protobuf(&message, &protobuf_list(300)[..900]), Ok(1));
        // Groups nest too (unknown field 3, start group … end group).
        let groups = [[0x1b].repeat(150), [0x1c].repeat(150)].concat();
        assert!(protobuf(&message, &groups).unwrap_err().starts_with("nested 151 levels deep"));
        assert_eq!(protobuf(&message, &[0x0a, 5]), Ok(1), "malformed: prost says why");
    }
}
