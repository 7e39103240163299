//! Lines in, lines out: judged lines go out in input order, each to its
//! sink, and are counted.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::File;
use std::io::{self, BufWriter, Write};

use crate::engine::formats;
use crate::engine::{InvalidRecord, Judged, Outcome};

/// The records of base64 lines (`buf`'s lines ending at `ends`); a line
/// that is not base64 is kept as it is (and read as not in the wire format).
pub(super) fn decode_lines(buf: &[u8], ends: &[usize], decoded: &mut Vec<Vec<u8>>) {
    decoded.clear();
    let mut start = 0;
    for &end in ends {
        let line = strip_line_ending(&buf[start..end]);
        let text = std::str::from_utf8(line).ok().map(str::trim);
        decoded.push(text.and_then(formats::schemas::base64_decode).unwrap_or_else(|| line.to_vec()));
        start = end;
    }
}

/// Where judged lines go.
pub(super) struct Sinks<'a, O: Write, E: Write> {
    pub out: &'a mut O,
    pub duplicates: Option<&'a mut BufWriter<File>>,
    pub invalid: Option<&'a mut BufWriter<File>>,
    pub flags: Option<&'a mut BufWriter<File>>,
    pub stderr: &'a mut E,
}

/// Counts of the run.
#[derive(Default)]
pub(super) struct Tally {
    pub records: u64,
    pub distinct: u64,
    pub duplicates: u64,
    pub late_records: u64,
    pub max_late_ms: u64,
    pub invalid_by_reason: BTreeMap<&'static str, u64>,
}

/// Lines read and not yet written, in input order, with their outcome once
/// judged: judgments come in event-time order, lines go out in input order
/// (a line waits for every line before it to be judged). The lines of a
/// whole lateness wait here, so a line's entry is kept to 16 bytes: the
/// reason of a line judged invalid (a rare one) waits beside it.
#[derive(Default)]
pub(super) struct HeldLines {
    /// The held lines' bytes, back to back; `text[start..]` is live.
    text: Vec<u8>,
    start: usize,
    /// End of each held line in `text`, and its outcome (and whether it
    /// was flagged) once judged.
    lines: VecDeque<(usize, Option<(LineOutcome, bool)>)>,
    /// Why each held line judged invalid is, by position.
    invalid: HashMap<u64, InvalidRecord>,
    /// Position of the first held line.
    first: u64,
}

/// What became of a held line.
#[derive(Clone, Copy)]
enum LineOutcome {
    Distinct,
    Duplicate,
    /// Its reason is in [`HeldLines::invalid`].
    Invalid,
}

impl HeldLines {
    /// Holds the lines of `buf` ending at `ends`.
    pub(super) fn push(&mut self, buf: &[u8], ends: &[usize]) {
        if self.start > 0 && self.start >= self.text.len() / 2 {
            self.text.drain(..self.start);
            for (end, _) in self.lines.iter_mut() {
                *end -= self.start;
            }
            self.start = 0;
        }
        let base = self.text.len();
        self.text.extend_from_slice(&buf[..ends.last().copied().unwrap_or(0)]);
        self.lines.extend(ends.iter().map(|&e| (base + e, None)));
    }

    /// Records the judgments, then writes every line whose turn has come.
    pub(super) fn settle<O: Write, E: Write>(
        &mut self,
        judged: &[Judged],
        tally: &mut Tally,
        sinks: &mut Sinks<'_, O, E>,
    ) -> io::Result<()> {
        for j in judged {
            let flagged = j.count.is_some_and(|c| c.flagged);
            let outcome = match &j.outcome {
                Outcome::Distinct => LineOutcome::Distinct,
                Outcome::Duplicate { .. } => LineOutcome::Duplicate,
                Outcome::Invalid(why) => {
                    self.invalid.insert(j.position, why.clone());
                    LineOutcome::Invalid
                }
            };
            self.lines[(j.position - self.first) as usize].1 = Some((outcome, flagged));
            if let Some(late) = j.late_by_ms {
                tally.late_records += 1;
                tally.max_late_ms = tally.max_late_ms.max(late);
            }
        }
        while let Some(&(end, Some((outcome, flagged)))) = self.lines.front() {
            self.lines.pop_front();
            let line = &self.text[self.start..end];
            self.start = end;
            let position = self.first;
            self.first += 1;
            tally.records += 1;
            if let (true, Some(f)) = (flagged, sinks.flags.as_mut()) {
                f.write_all(line)?;
                if !line.ends_with(b"\n") {
                    f.write_all(b"\n")?;
                }
            }
            match outcome {
                LineOutcome::Distinct => {
                    tally.distinct += 1;
                    sinks.out.write_all(line)?
                }
                LineOutcome::Duplicate => {
                    tally.duplicates += 1;
                    if let Some(d) = sinks.duplicates.as_mut() {
                        d.write_all(line)?;
                    }
                }
                LineOutcome::Invalid => {
                    let why = self.invalid.remove(&position).expect("an invalid line's reason waits beside it");
                    *tally.invalid_by_reason.entry(why.reason.as_str()).or_default() += 1;
                    match sinks.invalid.as_mut() {
                        Some(f) => f.write_all(line)?,
                        None => writeln!(sinks.stderr, "dedupd: invalid record at line {}: {why}", position + 1)?,
                    }
                }
            }
        }
        Ok(())
    }
}

/// The record without its `\n` or `\r\n`.
pub(super) fn strip_line_ending(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}
