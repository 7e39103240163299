//! Real text for test and benchmark streams: the sentences of the Brown Corpus, fetched by
//! `scripts/text_corpus.sh` into `target/corpus/brown.txt` (one distinct sentence per line).
//!
//! Synthetic keys (hex ids, [`super::workload::headline`]) are short and uniform; real keys
//! have the lengths, common prefixes and byte distribution of text, which is what a feed
//! deduplicated by title or body gives the hash functions.

use std::path::PathBuf;

/// The corpus's sentences, in corpus order.
pub struct TextCorpus {
    lines: Vec<String>,
}

impl TextCorpus {
    /// Where the corpus is read from: `DEDUPD_TEXT_CORPUS` if set, else
    /// `target/corpus/brown.txt` under the crate's directory.
    pub fn path() -> PathBuf {
        match std::env::var_os("DEDUPD_TEXT_CORPUS") {
            Some(p) => PathBuf::from(p),
            None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/corpus/brown.txt"),
        }
    }

    /// Reads the corpus; the error says how to fetch it.
    pub fn load() -> Result<TextCorpus, String> {
        let path = Self::path();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read the text corpus {}: {e}; run scripts/text_corpus.sh", path.display()))?;
        let lines: Vec<String> = text.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect();
        if lines.len() < 1000 {
            return Err(format!(
                "the text corpus {} holds {} sentences, expected tens of thousands",
                path.display(),
                lines.len()
            ));
        }
        Ok(TextCorpus { lines })
    }

    /// Distinct sentences in the corpus.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Always false: [`TextCorpus::load`] refuses a small corpus.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The key of the `id`-th distinct key of a stream (ids from 1 up, as
    /// [`super::workload::Stream`] numbers new keys): the corpus's sentences in order, then,
    /// once they are used up, each sentence again with the round appended (" (2)", " (3)"),
    /// so that every id has its own text.
    pub fn key(&self, id: u64) -> String {
        let n = self.lines.len() as u64;
        let i = id.saturating_sub(1);
        let (round, at) = (i / n, (i % n) as usize);
        if round == 0 { self.lines[at].clone() } else { format!("{} ({})", self.lines[at], round + 1) }
    }
}
