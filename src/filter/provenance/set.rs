//! What one slice keeps for provenance: for each time generation, one Bloom
//! filter per source that delivered a record in it, in a [`FlatBloofi`] or
//! a [`Bloofi`] tree. A generation spans `generation_ms` of event time (the
//! window) and is deleted — its filters removed, their slots reused — once
//! the clock is `keep_ms` (window + lateness) past its end: by then none of
//! its records can be inside the window of a record still to come.
//!
//! No false negatives: a source that delivered key K in a generation still
//! kept has K's k bits set in its filter there, and every index answers
//! exactly the filters holding all k bits. The exception is the cap: a
//! source seen while `max_sources` others are live is not recorded (and is
//! counted in [`Provenance::dropped`]).
//!
//! Source names map to ids (`u32`); an id is freed, for reuse, when the last
//! generation holding its source is deleted. Deterministic: the state
//! follows from the records recorded, in order.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use super::bits::{MAX_HASHES, positions_array};
use super::{Bits, Bloofi, FlatBloofi, SourceIndex};
use crate::filter::KeyHash;
use crate::filter::envelope::{Reader, SnapshotError, put_u32, put_u64};

/// Which index a generation uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexChoice {
    /// Flat-Bloofi below [`AUTO_TREE_FROM`] live sources, Bloofi from there.
    Auto,
    Flat,
    Tree,
}

/// With `index = "auto"`, a new generation uses the Bloofi tree when at least
/// this many sources are live. `dedupd-lab bloofi` (docs/provenance.md), in
/// the paper's setting on this machine: Flat-Bloofi answers faster up to
/// 5,000 filters, Bloofi from 10,000. Per-source filters of a live stream
/// hold more keys and overlap more than the paper's disjoint ones, which
/// weakens the tree's pruning, so the switch sits at the top of that range.
pub const AUTO_TREE_FROM: usize = 10_000;

/// The shape of a slice's provenance state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvenanceSpec {
    /// Bits per source filter (`m`).
    pub bits: usize,
    /// Bits set per key (`k`).
    pub hashes: u32,
    /// Event time one generation spans (the window).
    pub generation_ms: u64,
    /// How long after its end a generation is kept (window + lateness).
    pub keep_ms: u64,
    /// Most sources live at once; records of further sources are not recorded.
    pub max_sources: usize,
    pub index: IndexChoice,
    /// Bloofi order `d`.
    pub tree_order: usize,
}

#[derive(Clone, Debug)]
enum AnyIndex {
    Flat(FlatBloofi),
    Tree(Bloofi),
}

impl AnyIndex {
    fn get(&self) -> &dyn SourceIndex {
        match self {
            AnyIndex::Flat(f) => f,
            AnyIndex::Tree(t) => t,
        }
    }

    fn get_mut(&mut self) -> &mut dyn SourceIndex {
        match self {
            AnyIndex::Flat(f) => f,
            AnyIndex::Tree(t) => t,
        }
    }
}

#[derive(Clone, Debug)]
struct Generation {
    /// `time / generation_ms` of its records.
    number: u64,
    index: AnyIndex,
    /// Its sources and the bits set in each one's filter.
    ones: BTreeMap<u32, u64>,
}

/// The answer to "which sources may have delivered K".
#[derive(Clone, Debug, PartialEq)]
pub struct SourceAnswer {
    /// Sorted by name.
    pub sources: Vec<Arc<str>>,
    /// The probability that a live source which did not deliver K is listed,
    /// averaged over the live sources: per source `1 − Π(1 − (ones/m)^k)`
    /// over the generations holding it.
    pub estimated_fpr: f64,
}

#[derive(Clone, Debug)]
pub struct Provenance {
    spec: ProvenanceSpec,
    /// Id → source name (`None`: free).
    names: Vec<Option<Arc<str>>>,
    by_name: HashMap<Arc<str>, u32>,
    /// Id → generations holding it.
    refs: Vec<u32>,
    /// Free ids, lowest reused first.
    free: BTreeSet<u32>,
    /// Ascending by number.
    generations: VecDeque<Generation>,
    clock_ms: Option<u64>,
    dropped: u64,
}

impl Provenance {
    /// # Panics
    /// If `spec.hashes` is above [`MAX_HASHES`] (the settings keep it at most 30).
    pub fn new(spec: ProvenanceSpec) -> Self {
        assert!(spec.hashes as usize <= MAX_HASHES, "provenance hashes {} above {MAX_HASHES}", spec.hashes);
        Provenance {
            spec,
            names: Vec::new(),
            by_name: HashMap::new(),
            refs: Vec::new(),
            free: BTreeSet::new(),
            generations: VecDeque::new(),
            clock_ms: None,
            dropped: 0,
        }
    }

    pub fn spec(&self) -> &ProvenanceSpec {
        &self.spec
    }

    /// Records not recorded because their source came while `max_sources`
    /// others were live.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    pub fn live_sources(&self) -> usize {
        self.by_name.len()
    }

    pub fn generations(&self) -> usize {
        self.generations.len()
    }

    pub fn memory_bytes(&self) -> usize {
        self.generations.iter().map(|g| g.index.get().memory_bytes() + g.ones.len() * 16).sum::<usize>()
            + self.by_name.keys().map(|n| n.len() + 32).sum::<usize>()
    }

    fn expired(&self, number: u64, clock_ms: u64) -> bool {
        (number + 1).saturating_mul(self.spec.generation_ms).saturating_add(self.spec.keep_ms) <= clock_ms
    }

    /// Records that `source` delivered the key at `time_ms`. False if it was
    /// not recorded: the source was over the cap (counted), or the time is
    /// older than anything kept.
    pub fn record(&mut self, hash: &KeyHash, source: &str, time_ms: u64) -> bool {
        let clock = self.clock_ms.map_or(time_ms, |c| c.max(time_ms));
        self.clock_ms = Some(clock);
        self.expire(clock);
        let number = time_ms / self.spec.generation_ms;
        if self.expired(number, clock) {
            return false;
        }
        let id = match self.by_name.get(source) {
            Some(&id) => id,
            None if self.by_name.len() >= self.spec.max_sources => {
                self.dropped += 1;
                return false;
            }
            None => self.name_id(source.into()),
        };
        let at = self.generation_at(number);
        let m = self.spec.bits;
        let g = &mut self.generations[at];
        if !g.ones.contains_key(&id) {
            g.index.get_mut().insert(id, &Bits::new(m));
            g.ones.insert(id, 0);
            self.refs[id as usize] += 1;
        }
        let p = positions_array(hash, m, self.spec.hashes);
        let newly = g.index.get_mut().add_key(id, &p[..self.spec.hashes as usize]);
        *g.ones.get_mut(&id).expect("just added") += u64::from(newly);
        true
    }

    /// A new id for `name` (the lowest free one).
    fn name_id(&mut self, name: Arc<str>) -> u32 {
        let id = match self.free.pop_first() {
            Some(id) => id,
            None => {
                self.names.push(None);
                self.refs.push(0);
                (self.names.len() - 1) as u32
            }
        };
        self.names[id as usize] = Some(name.clone());
        self.by_name.insert(name, id);
        id
    }

    /// The position of generation `number`, created if missing.
    fn generation_at(&mut self, number: u64) -> usize {
        let at = self.generations.partition_point(|g| g.number < number);
        if self.generations.get(at).is_none_or(|g| g.number != number) {
            let tree = match self.spec.index {
                IndexChoice::Flat => false,
                IndexChoice::Tree => true,
                IndexChoice::Auto => self.by_name.len() >= AUTO_TREE_FROM,
            };
            let index = if tree {
                AnyIndex::Tree(Bloofi::new(self.spec.bits, self.spec.tree_order, true))
            } else {
                AnyIndex::Flat(FlatBloofi::new(self.spec.bits))
            };
            self.generations.insert(at, Generation { number, index, ones: BTreeMap::new() });
        }
        at
    }

    /// Deletes the generations the clock has left behind, and frees the
    /// ids no kept generation holds.
    fn expire(&mut self, clock_ms: u64) {
        while self.generations.front().is_some_and(|g| self.expired(g.number, clock_ms)) {
            let g = self.generations.pop_front().expect("front exists");
            for id in g.ones.keys() {
                let refs = &mut self.refs[*id as usize];
                *refs -= 1;
                if *refs == 0 {
                    let name = self.names[*id as usize].take().expect("a live id has a name");
                    self.by_name.remove(&name);
                    self.free.insert(*id);
                }
            }
        }
    }

    /// The ids of the sources that may have delivered the key, ascending.
    fn ids(&self, hash: &KeyHash) -> Vec<u32> {
        let p = positions_array(hash, self.spec.bits, self.spec.hashes);
        let mut out = Vec::new();
        for g in &self.generations {
            g.index.get().query(&p[..self.spec.hashes as usize], &mut out);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    fn name(&self, id: u32) -> Arc<str> {
        self.names[id as usize].clone().expect("a listed id is live")
    }

    /// Which sources may have delivered the key inside what is kept.
    pub fn query(&self, hash: &KeyHash) -> SourceAnswer {
        let mut sources: Vec<Arc<str>> = self.ids(hash).into_iter().map(|id| self.name(id)).collect();
        sources.sort_unstable();
        SourceAnswer { sources, estimated_fpr: self.estimated_fpr() }
    }

    /// The one source that may have delivered the key, if exactly one may
    /// have: then it did (no false negatives), so it is known for sure.
    pub fn only_source(&self, hash: &KeyHash) -> Option<Arc<str>> {
        match self.ids(hash)[..] {
            [id] => Some(self.name(id)),
            _ => None,
        }
    }

    /// See [`SourceAnswer::estimated_fpr`].
    pub fn estimated_fpr(&self) -> f64 {
        let k = self.spec.hashes as i32;
        let m = self.spec.bits as f64;
        let mut miss: BTreeMap<u32, f64> = BTreeMap::new();
        for g in &self.generations {
            for (&id, &ones) in &g.ones {
                *miss.entry(id).or_insert(1.0) *= 1.0 - (ones as f64 / m).powi(k);
            }
        }
        if miss.is_empty() {
            return 0.0;
        }
        miss.values().map(|keep| 1.0 - keep).sum::<f64>() / miss.len() as f64
    }

    /// Appends the state: parameters, clock, cap counter, names, and every
    /// generation's filters (the indexes are rebuilt from them).
    pub fn encode(&self, w: &mut Vec<u8>) {
        put_u64(w, self.spec.bits as u64);
        put_u32(w, self.spec.hashes);
        put_u64(w, self.spec.generation_ms);
        put_u64(w, self.clock_ms.unwrap_or(u64::MAX));
        put_u64(w, self.dropped);
        put_u32(w, self.names.len() as u32);
        for name in &self.names {
            let name = name.as_deref().unwrap_or("");
            put_u32(w, name.len() as u32);
            w.extend_from_slice(name.as_bytes());
        }
        put_u32(w, self.generations.len() as u32);
        for g in &self.generations {
            put_u64(w, g.number);
            w.push(u8::from(matches!(g.index, AnyIndex::Tree(_))));
            put_u32(w, g.ones.len() as u32);
            for &id in g.ones.keys() {
                put_u32(w, id);
                for &word in g.index.get().filter(id).expect("a member has a filter").words() {
                    put_u64(w, word);
                }
            }
        }
    }

    /// Reads what [`Self::encode`] wrote, checked against `spec`.
    pub fn decode(r: &mut Reader<'_>, spec: ProvenanceSpec) -> Result<Self, SnapshotError> {
        let malformed = |what: &str| SnapshotError::Malformed(format!("provenance: {what}"));
        for (parameter, got, want) in [
            ("provenance.bits", r.u64()?, spec.bits as u64),
            ("provenance.hashes", u64::from(r.u32()?), u64::from(spec.hashes)),
            ("filter.window (provenance generation)", r.u64()?, spec.generation_ms),
        ] {
            if got != want {
                return Err(SnapshotError::ParameterMismatch {
                    parameter,
                    snapshot: got.to_string(),
                    configured: want.to_string(),
                });
            }
        }
        let mut p = Provenance::new(spec);
        let clock = r.u64()?;
        p.clock_ms = (clock != u64::MAX).then_some(clock);
        p.dropped = r.u64()?;
        for id in 0..r.u32()? {
            let len = r.u32()? as usize;
            let name = std::str::from_utf8(r.take(len)?).map_err(|_| malformed("a source name is not UTF-8"))?;
            p.refs.push(0);
            if name.is_empty() {
                p.names.push(None);
                p.free.insert(id);
            } else {
                let name: Arc<str> = name.into();
                p.names.push(Some(name.clone()));
                if p.by_name.insert(name, id).is_some() {
                    return Err(malformed("a source name appears twice"));
                }
            }
        }
        let words = p.spec.bits.div_ceil(64);
        for _ in 0..r.u32()? {
            let number = r.u64()?;
            let tree = match r.u8()? {
                0 => false,
                1 => true,
                other => return Err(malformed(&format!("index kind {other}"))),
            };
            if p.generations.back().is_some_and(|g| g.number >= number) {
                return Err(malformed("generations out of order"));
            }
            let mut index = if tree {
                AnyIndex::Tree(Bloofi::new(p.spec.bits, p.spec.tree_order, true))
            } else {
                AnyIndex::Flat(FlatBloofi::new(p.spec.bits))
            };
            let mut ones = BTreeMap::new();
            for _ in 0..r.u32()? {
                let id = r.u32()?;
                if p.names.get(id as usize).is_none_or(Option::is_none) || ones.contains_key(&id) {
                    return Err(malformed(&format!("generation {number} holds unknown or repeated source id {id}")));
                }
                let raw = r.take(words * 8)?;
                let bits = Bits::from_words(
                    raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect(),
                    p.spec.bits,
                )
                .ok_or_else(|| malformed("a filter has bits past m"))?;
                index.get_mut().insert(id, &bits);
                ones.insert(id, bits.ones());
                p.refs[id as usize] += 1;
            }
            p.generations.push_back(Generation { number, index, ones });
        }
        if p.by_name.values().any(|&id| p.refs[id as usize] == 0) {
            return Err(malformed("a named source is in no generation"));
        }
        Ok(p)
    }

    /// Everything the state means, independent of how the indexes are laid
    /// out (a restored tree is built in another order, with the same answers).
    fn content(&self) -> impl PartialEq + '_ {
        let filters = |g: &Generation| -> Vec<(u32, Option<Bits>)> {
            g.ones.keys().map(|&id| (id, g.index.get().filter(id))).collect()
        };
        let gens: Vec<_> = self.generations.iter().map(|g| (g.number, filters(g))).collect();
        (&self.spec, &self.names, self.clock_ms, self.dropped, gens)
    }
}

impl PartialEq for Provenance {
    fn eq(&self, other: &Self) -> bool {
        self.content() == other.content()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::envelope::{begin, open, seal_in_place};

    fn spec(index: IndexChoice, max_sources: usize) -> ProvenanceSpec {
        ProvenanceSpec {
            // ~100 keys per source filter: about half the bits set, so
            // wrongly listed sources are common enough to measure.
            bits: 300,
            hashes: 4,
            generation_ms: 1_000,
            keep_ms: 1_000,
            max_sources,
            index,
            tree_order: 2,
        }
    }

    fn h(key: u64) -> KeyHash {
        KeyHash::of(3, &key.to_le_bytes())
    }

    fn round_trip(p: &Provenance) -> Provenance {
        let mut w = begin(*b"PROVTEST", 1, 64);
        p.encode(&mut w);
        w.extend_from_slice(&[0; 8]);
        seal_in_place(&mut w);
        let mut r = open(&w, *b"PROVTEST", 1).unwrap();
        let back = Provenance::decode(&mut r, p.spec.clone()).unwrap();
        r.finish().unwrap();
        back
    }

    /// Every source that delivered a key in a kept generation is listed,
    /// by either index; generations expire and free their ids; the state
    /// survives a snapshot; the estimate tracks the measured share of
    /// wrongly listed sources.
    #[test]
    fn lists_every_source_expires_and_round_trips() {
        for index in [IndexChoice::Flat, IndexChoice::Tree] {
            let mut p = Provenance::new(spec(index, 1_000));
            let mut truth: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
            let mut rng = crate::filter::random::Rng::new(9);
            for i in 0..3_000u64 {
                let key = rng.below(400);
                let source = format!("s{}", rng.below(30));
                assert!(p.record(&h(key), &source, 500 + i / 3));
                truth.entry(key).or_default().insert(source);
            }
            // Times 500..1500: generations 0 and 1, both kept at clock 1499.
            assert_eq!(p.generations(), 2);
            let (mut wrong, mut negatives) = (0usize, 0usize);
            for (key, want) in &truth {
                let got: BTreeSet<String> = p.query(&h(*key)).sources.iter().map(|s| s.to_string()).collect();
                assert!(got.is_superset(want), "key {key}: {want:?} not all in {got:?}");
                wrong += got.difference(want).count();
                negatives += 30 - want.len();
            }
            let share = wrong as f64 / negatives as f64;
            let est = p.estimated_fpr();
            assert!(share > 0.0 && share <= 1.5 * est && share >= est / 1.5, "share {share}, estimate {est}");
            assert_eq!(round_trip(&p), p);
            // Clock 3500: generation 1 ends at 2000, kept until 3000: both gone.
            assert!(p.record(&h(1), "late-comer", 3_500));
            assert_eq!((p.generations(), p.live_sources()), (1, 1));
            assert_eq!(p.estimated_fpr(), p.query(&h(1)).estimated_fpr);
            assert_eq!(p.query(&h(1)).sources, vec![Arc::from("late-comer")]);
            assert_eq!(p.only_source(&h(1)).as_deref(), Some("late-comer"));
            p.record(&h(1), "second", 3_501);
            assert_eq!(p.only_source(&h(1)), None, "two sources: the first is not known");
            assert_eq!(p.names.iter().flatten().count(), 2, "expired ids are freed");
            assert!(!p.record(&h(1), "s1", 100), "older than anything kept");
            assert_eq!(round_trip(&p), p);
        }
    }

    #[test]
    fn the_cap_drops_and_counts() {
        let mut p = Provenance::new(spec(IndexChoice::Auto, 3));
        for s in ["a", "b", "c", "d", "a", "e"] {
            p.record(&h(1), s, 10);
        }
        assert_eq!(p.dropped(), 2);
        let sources: Vec<String> = p.query(&h(1)).sources.iter().map(|s| s.to_string()).collect();
        assert_eq!(sources, ["a", "b", "c"]);
    }

    #[test]
    fn a_snapshot_with_other_parameters_is_refused() {
        let mut p = Provenance::new(spec(IndexChoice::Flat, 10));
        p.record(&h(1), "a", 10);
        let mut w = Vec::new();
        p.encode(&mut w);
        let mut r = Reader::over(&w);
        let other = ProvenanceSpec { bits: 400, ..spec(IndexChoice::Flat, 10) };
        assert!(matches!(Provenance::decode(&mut r, other), Err(SnapshotError::ParameterMismatch { .. })));
        let mut r = Reader::over(&w[..w.len() - 3]);
        assert!(Provenance::decode(&mut r, spec(IndexChoice::Flat, 10)).is_err());
    }
}
