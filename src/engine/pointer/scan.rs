//! The fast path of [`super::find`]: a scanner over the document's bytes
//! for what records usually are — object keys down to the values, plain
//! strings and numbers on the way — that keeps the values the pointers name
//! and checks everything else as JSON without building or visiting it.
//!
//! It gives up (`None`) on anything it does not handle *and* on anything
//! that is not JSON; then the serde walk reads the document again, and its
//! answer or error is the one given. So errors are always serde_json's, and
//! the scanner only has to be at least as strict as serde_json: whatever it
//! accepts, serde_json accepts with the same values (tested against it).
//! It gives up on: a pointer with `~` or leading into an array; a pointer
//! that names a node another pointer goes below; keys with escapes; `\u`
//! escapes of surrogates; numbers with an exponent or over 18 integer
//! digits (they could be out of range); nesting deeper than [`MAX_DEPTH`].

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::{Found, split};

/// Deeper documents go to the serde walk (which refuses past 128).
const MAX_DEPTH: u32 = 64;

/// What each pointer names, or `None` to take the serde walk.
pub(super) fn find<'de, const N: usize>(
    doc: &'de [u8],
    pointers: [Option<&str>; N],
) -> Option<[Option<Found<'de>>; N]> {
    if !pointers.iter().flatten().all(|p| p.starts_with('/') && !p.bytes().any(|b| b == b'~')) {
        return None;
    }
    // UTF-8 is checked string by string (`Scan::string`): everything else
    // the scanner takes is ASCII it names byte by byte.
    let mut scan = Scan { doc, at: 0, found: std::array::from_fn(|_| None) };
    scan.value(pointers, 0)?;
    scan.whitespace();
    (scan.at == doc.len()).then_some(scan.found)
}

/// What kind of value [`Scan::value`] took, for building what a pointer
/// found there without reading it again.
enum Taken {
    /// A string without escapes: borrowed from the document.
    PlainString,
    /// A string with escapes, each one [`Scan::escape`] took.
    EscapedString,
    /// Digits alone, and their value.
    Unsigned(u64),
    /// Anything else: read again by serde_json when wanted.
    Other,
}

struct Scan<'de, const N: usize> {
    doc: &'de [u8],
    at: usize,
    found: [Option<Found<'de>>; N],
}

impl<'de, const N: usize> Scan<'de, N> {
    /// One value; `rem` is what is left of each pointer that leads into it
    /// (`Some("")`: it names this value).
    fn value(&mut self, rem: [Option<&str>; N], depth: u32) -> Option<()> {
        self.whitespace();
        let wanted = rem.contains(&Some(""));
        let goes_on = rem.iter().flatten().any(|r| !r.is_empty());
        if wanted && goes_on {
            return None;
        }
        let start = self.at;
        let taken = match *self.doc.get(self.at)? {
            b'{' => self.object(rem, depth + 1).map(|()| Taken::Other)?,
            b'[' if goes_on => return None,
            b'[' => self.array(depth + 1).map(|()| Taken::Other)?,
            b'"' => match self.string()? {
                false => Taken::PlainString,
                true => Taken::EscapedString,
            },
            b't' => self.literal("true").map(|()| Taken::Other)?,
            b'f' => self.literal("false").map(|()| Taken::Other)?,
            b'n' => self.literal("null").map(|()| Taken::Other)?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return None,
        };
        if wanted {
            // SAFETY: a value the scanner took whole is UTF-8: its strings
            // were checked (`string`), and outside them it takes only the
            // ASCII bytes it names (structure, literals, digits, whitespace).
            let span = unsafe { std::str::from_utf8_unchecked(&self.doc[start..self.at]) };
            let here = match taken {
                Taken::PlainString => Found::Str(Cow::Borrowed(&span[1..span.len() - 1])),
                Taken::EscapedString => Found::Str(Cow::Owned(unescape(&span[1..span.len() - 1])?)),
                // What serde_json makes of digits alone (no sign, no fraction).
                Taken::Unsigned(n) => Found::Other(Value::from(n)),
                Taken::Other => Found::deserialize(&mut serde_json::Deserializer::from_str(span)).ok()?,
            };
            let last = rem.iter().rposition(|r| *r == Some(""))?;
            for (i, rem) in rem.iter().enumerate().take(last) {
                if *rem == Some("") {
                    self.found[i] = Some(here.clone());
                }
            }
            self.found[last] = Some(here);
        }
        Some(())
    }

    /// An object (at `{`), each value with the pointers its key leads on.
    fn object(&mut self, rem: [Option<&str>; N], depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        self.whitespace();
        if self.eat(b'}') {
            return Some(());
        }
        // Each pointer's next token, split once for all the keys.
        let steps = rem.map(|r| r.filter(|r| !r.is_empty()).map(split));
        loop {
            self.whitespace();
            let key_start = self.at + 1;
            if self.doc.get(self.at) != Some(&b'"') || self.string()? {
                return None;
            }
            let key = &self.doc[key_start..self.at - 1];
            self.whitespace();
            if !self.eat(b':') {
                return None;
            }
            let mut child = [None; N];
            for (i, step) in steps.iter().enumerate() {
                if let Some((token, rest)) = step
                    && same_bytes(token.as_bytes(), key)
                {
                    // A repeated key: the last one counts, as in a `Value`.
                    self.found[i] = None;
                    child[i] = Some(*rest);
                }
            }
            self.value(child, depth)?;
            self.whitespace();
            match *self.doc.get(self.at)? {
                b',' => self.at += 1,
                b'}' => return self.eat(b'}').then_some(()),
                _ => return None,
            }
        }
    }

    /// An array (at `[`) no pointer leads into.
    fn array(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        self.whitespace();
        if self.eat(b']') {
            return Some(());
        }
        loop {
            self.value([None; N], depth)?;
            self.whitespace();
            match *self.doc.get(self.at)? {
                b',' => self.at += 1,
                b']' => return self.eat(b']').then_some(()),
                _ => return None,
            }
        }
    }

    /// A string (at `"`), its UTF-8 checked; whether it had escapes.
    fn string(&mut self) -> Option<bool> {
        self.at += 1;
        let start = self.at;
        let (mut escaped, mut non_ascii) = (false, false);
        loop {
            let rest = &self.doc[self.at..];
            let (i, high) = string_stop(rest)?;
            non_ascii |= high;
            self.at += i;
            match rest[i] {
                b'"' => {
                    if non_ascii {
                        std::str::from_utf8(&self.doc[start..self.at]).ok()?;
                    }
                    self.at += 1;
                    return Some(escaped);
                }
                b'\\' => {
                    escaped = true;
                    self.escape()?;
                }
                _ => return None,
            }
        }
    }

    /// An escape (at `\`): the one-letter ones, and `\u` of anything but a
    /// surrogate (whose pairing rules are serde_json's to apply).
    fn escape(&mut self) -> Option<()> {
        match *self.doc.get(self.at + 1)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 2,
            b'u' => {
                let hex = self.doc.get(self.at + 2..self.at + 6)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                let unit = u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                if (0xD800..=0xDFFF).contains(&unit) {
                    return None;
                }
                self.at += 6;
            }
            _ => return None,
        }
        Some(())
    }

    /// A number without an exponent and with at most 18 integer digits;
    /// its value read on the way when it is digits alone (a time in
    /// milliseconds usually is), which spares reading them again.
    fn number(&mut self) -> Option<Taken> {
        let negative = self.eat(b'-');
        let (digits, value) = self.digits();
        if digits == 0 || digits > 18 || (digits > 1 && self.doc[self.at - digits] == b'0') {
            return None;
        }
        let fraction = self.eat(b'.');
        if fraction && self.digits().0 == 0 {
            return None;
        }
        match self.doc.get(self.at) {
            Some(b'e' | b'E') => None,
            _ if negative || fraction => Some(Taken::Other),
            _ => Some(Taken::Unsigned(value)),
        }
    }

    /// The decimal digits here: how many, and their value (wrapped past
    /// `u64`; `number` takes no more than 18 integer digits, which fit).
    fn digits(&mut self) -> (usize, u64) {
        let start = self.at;
        let mut value = 0u64;
        while let Some(&b) = self.doc.get(self.at)
            && b.is_ascii_digit()
        {
            value = value.wrapping_mul(10).wrapping_add(u64::from(b - b'0'));
            self.at += 1;
        }
        (self.at - start, value)
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        self.doc[self.at..].starts_with(word.as_bytes()).then(|| self.at += word.len())
    }

    fn eat(&mut self, byte: u8) -> bool {
        let here = self.doc.get(self.at) == Some(&byte);
        self.at += usize::from(here);
        here
    }

    fn whitespace(&mut self) {
        self.at += self.doc[self.at..].iter().take_while(|b| matches!(b, b' ' | b'\n' | b'\t' | b'\r')).count();
    }
}

/// The text of a string's body (between its quotes) whose escapes
/// [`Scan::escape`] took: the one-letter ones and `\u` of anything but a
/// surrogate. Decoded here rather than by serde_json, which would read the
/// whole string again (a key quoting a sentence has escapes).
fn unescape(body: &str) -> Option<String> {
    let mut text = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(at) = rest.find('\\') {
        text.push_str(&rest[..at]);
        let letter = *rest.as_bytes().get(at + 1)?;
        let (ch, len) = match letter {
            b'"' => ('"', 2),
            b'\\' => ('\\', 2),
            b'/' => ('/', 2),
            b'b' => ('\u{8}', 2),
            b'f' => ('\u{c}', 2),
            b'n' => ('\n', 2),
            b'r' => ('\r', 2),
            b't' => ('\t', 2),
            b'u' => (char::from_u32(u32::from_str_radix(rest.get(at + 2..at + 6)?, 16).ok()?)?, 6),
            _ => return None,
        };
        text.push(ch);
        rest = &rest[at + len..];
    }
    text.push_str(rest);
    Some(text)
}

/// Whether two object keys are equal, byte by byte: keys are short, and a
/// call to `memcmp` per key and pointer cost more than the comparison.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// The index of the first byte that ends a string's plain run — `"`, `\\`
/// or a control character (which JSON does not allow in a string) — and
/// whether a byte before it is not ASCII (only then does the string's UTF-8
/// need checking). Sixteen bytes at a time with SSE2 (part of every x86-64
/// processor): a key quoting a sentence is a hundred bytes and more, and
/// this loop was the scanner's largest entry; the rest eight at a time.
#[cfg(target_arch = "x86_64")]
fn string_stop(bytes: &[u8]) -> Option<(usize, bool)> {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    let (mut at, mut high) = (0, 0);
    while at + 16 <= bytes.len() {
        // SAFETY: SSE2 is baseline on x86-64; the load is unaligned and
        // reads `bytes[at..at + 16]`, inside the slice.
        let (stops, highs) = unsafe {
            let v = _mm_loadu_si128(bytes.as_ptr().add(at).cast());
            let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
            let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
            // A byte at most 0x1F, unsigned: the larger of it and 0x1F is 0x1F.
            let control = _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8(0x1F)), _mm_set1_epi8(0x1F));
            (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control)), _mm_movemask_epi8(v))
        };
        if stops != 0 {
            let i = stops.trailing_zeros();
            return Some((at + i as usize, high != 0 || highs & ((1 << i) - 1) != 0));
        }
        high |= highs;
        at += 16;
    }
    let (i, rest_high) = string_stop_words(&bytes[at..])?;
    Some((at + i, high != 0 || rest_high))
}

#[cfg(not(target_arch = "x86_64"))]
fn string_stop(bytes: &[u8]) -> Option<(usize, bool)> {
    string_stop_words(bytes)
}

/// [`string_stop`] eight bytes at a time: a word with none of the stops is
/// passed over whole (each test is exact on whether any byte matches;
/// which one is found bytewise).
fn string_stop_words(bytes: &[u8]) -> Option<(usize, bool)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |w: u64| w.wrapping_sub(ONES) & !w;
    let (mut at, mut high) = (0, 0);
    for word in bytes.chunks_exact(8) {
        let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let hits = zero_byte(w ^ (ONES * u64::from(b'"')))
            | zero_byte(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w);
        if hits & HIGHS != 0 {
            break;
        }
        high |= w;
        at += 8;
    }
    let i = bytes[at..].iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
    Some((at + i, high & HIGHS != 0 || !bytes[at..at + i].is_ascii()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The walk's answer: the whole document as a `Value`, then `pointer`.
    fn reference(doc: &[u8], pointers: [Option<&str>; 2]) -> Option<[Option<Value>; 2]> {
        let v: Value = serde_json::from_slice(doc).ok()?;
        Some(pointers.map(|p| p.and_then(|p| v.pointer(p).cloned())))
    }

    fn scanned(doc: &[u8], pointers: [Option<&str>; 2]) -> Option<[Option<Value>; 2]> {
        find(doc, pointers).map(|f| f.map(|f| f.map(|f| f.to_value())))
    }

    proptest! {
        /// Sixteen and eight bytes at a time find the byte a bytewise search
        /// finds, and see a byte that is not ASCII before it as bytewise.
        #[test]
        fn a_string_ends_where_a_bytewise_search_says(
            bytes in proptest::collection::vec(prop_oneof![Just(b'"'), Just(b'\\'), 0u8..0x20, 0x20u8..=0xFF, Just(b'a')], 0..40),
            plain in 0usize..40,
        ) {
            // A plain run first, so that the stop falls in any word or block.
            let mut doc = vec![b'x'; plain];
            doc.extend(bytes);
            let bytewise = doc.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20);
            let bytewise = bytewise.map(|i| (i, !doc[..i].is_ascii()));
            prop_assert_eq!(string_stop(&doc), bytewise);
            prop_assert_eq!(string_stop_words(&doc), bytewise);
        }
    }

    /// What records usually are takes the fast path, with the walk's values.
    #[test]
    fn the_usual_record_is_scanned() {
        for doc in [
            &br#"{"id":"the jury","seq":184467,"ts":1780000123456}"#[..],
            br#" { "user" : { "id" : "a\"b\u00e9", "tags" : [1, -0.5, true, null, {}] }, "ts" : "2026-01-01T00:00:00Z" } "#,
            br#"{"ts":1,"id":{"x":[1,2]},"id":{"y":"z"}}"#,
            br#"{"id":"\"q\" \\ \/ \b\f\n\r\t \u00e9\u20AC\u0000 end","ts":-1.5}"#,
        ] {
            let p = [Some("/id"), Some("/ts")];
            let q = [Some("/user/id"), Some("/ts")];
            for p in [p, q] {
                assert_eq!(scanned(doc, p), reference(doc, p), "{}", String::from_utf8_lossy(doc));
                assert!(scanned(doc, p).is_some(), "{}", String::from_utf8_lossy(doc));
            }
        }
        let found = find(br#"{"id":"abc","ts":5}"#, [Some("/id"), Some("/ts")]).unwrap();
        assert!(matches!(&found[0], Some(Found::Str(Cow::Borrowed("abc")))));
    }

    /// What is not JSON, or beyond the scanner, is never answered by it.
    #[test]
    fn gives_up_on_what_it_does_not_handle() {
        for doc in [
            &br#"{"id":1,}"#[..],
            br#"{"id":01}"#,
            br#"{"id":1e3}"#,
            br#"{"id":"\ud800"}"#,
            br#"{"i\u0064":1}"#,
            br#"{"id":"a	b"}"#,
            br#"{"id":tru}"#,
            br#"{"id":1} x"#,
            b"{\"id\":\"\xff\"}",
            b"{\"\xff\":1,\"id\":2}",
            b"{\"id\":\"\xc3\"}",
            b"{\"id\":2}\xc3\xa9",
            br#"{"id":12345678901234567890}"#,
        ] {
            assert_eq!(scanned(doc, [Some("/id"), None]), None, "{}", String::from_utf8_lossy(doc));
        }
        let deep = format!("{}1{}", "[".repeat(70), "]".repeat(70));
        assert_eq!(scanned(deep.as_bytes(), [Some("/id"), None]), None);
        assert_eq!(scanned(br#"{"a":[1]}"#, [Some("/a/0"), None]), None);
        assert_eq!(scanned(br#"{"a":{"b":1}}"#, [Some("/a"), Some("/a/b")]), None);
    }

    /// Pieces of JSON, some of them wrong, to string together.
    const PIECES: &[&[u8]] = &[
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"\"id\"",
        b"\"ts\"",
        b"\"a\\nb\"",
        b"\"\\u00e9\"",
        b"\"\\ud83d\"",
        b"\"\xc3\xa9\"",
        b"\"\xff\"",
        b"\xc3",
        b"\"",
        b"\\",
        b"-",
        b"0",
        b"17",
        b".5",
        b"e3",
        b"true",
        b"nul",
        b"null",
        b" ",
        b"\t",
        b"\x01",
    ];

    /// Whatever the scanner answers, serde_json answers the same: among
    /// many near-JSON documents, it accepts nothing serde_json refuses and
    /// answers a good share of those serde_json accepts.
    #[test]
    fn answers_only_as_serde_json_does() {
        let mut rng = crate::filter::random::Rng::new(7);
        let (mut valid, mut scanned_valid) = (0, 0);
        for _ in 0..200_000 {
            let len = rng.next_u64() % 14;
            let doc: Vec<u8> =
                (0..len).flat_map(|_| PIECES[(rng.next_u64() % PIECES.len() as u64) as usize].to_vec()).collect();
            let want = reference(&doc, [Some("/id"), Some("/ts")]);
            let ours = scanned(&doc, [Some("/id"), Some("/ts")]);
            if ours.is_some() {
                assert_eq!(ours, want, "{}", String::from_utf8_lossy(&doc));
            }
            valid += usize::from(want.is_some());
            scanned_valid += usize::from(ours.is_some());
        }
        assert!(valid > 1_000 && scanned_valid * 2 > valid, "{scanned_valid} of {valid} valid documents scanned");
    }

    proptest! {
        #[test]
        fn valid_documents_are_scanned_alike(doc in super::super::tests::json(), p in "(/[a-c0-2]{0,2}){1,3}", q in "(/[a-c0-2]{0,2}){1,3}") {
            let text = doc.to_string().into_bytes();
            if let Some(ours) = scanned(&text, [Some(&p), Some(&q)]) {
                prop_assert_eq!(Some(ours), reference(&text, [Some(&p), Some(&q)]));
            }
        }
    }
}
