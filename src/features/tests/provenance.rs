//! Provenance in a slice across a snapshot.

use std::collections::{BTreeMap, BTreeSet};

use super::{extractor, order, params};
use crate::engine::RecordView;
use crate::engine::slice::{Judgment, SliceRecord, SliceState, decode, decode_full, encode};
use crate::features::provenance::stage::{FIRST_SOURCE, ProvenanceSetup, SliceProvenance, SourceSpec};
use crate::filter::KeyHash;
use crate::filter::provenance::{IndexChoice, ProvenanceSpec};

/// The first source a judgment names (`dedupd.first_source`).
fn first_source(j: &Judgment) -> Option<&str> {
    j.notes.duplicate_header.as_ref().filter(|(name, _)| *name == FIRST_SOURCE).map(|(_, v)| &**v)
}

/// With provenance on, records held for the watermark keep their source
/// across a snapshot: the restored slice's provenance and judgments
/// (first sources included) are the uninterrupted one's; every source
/// of a key is listed; a snapshot read without provenance drops it.
#[test]
fn provenance_survives_a_snapshot_with_held_records() {
    let setup = ProvenanceSetup {
        source: SourceSpec::Header("src".into()),
        spec: ProvenanceSpec {
            bits: 4_096,
            hashes: 5,
            generation_ms: 1_000,
            keep_ms: 1_300,
            max_sources: 100,
            index: IndexChoice::Tree,
            tree_order: 2,
        },
        input_topic: "in".into(),
    };
    let with = |setup: &ProvenanceSetup| super::stage_setups(None, Some(setup.clone()));
    let ex = extractor();
    let mut rng = crate::testkit::workload::Rng::new(8);
    let keys: Vec<[u8; 8]> = (0..2_000u64).map(|_| rng.below(300).to_le_bytes()).collect();
    let sources: Vec<String> = (0..2_000).map(|_| format!("s{}", rng.below(12))).collect();
    let times: Vec<i64> = (0..2_000i64).map(|i| 10_000 + i / 4 + rng.below(200) as i64).collect();
    let feed = |s: &mut SliceState, range: std::ops::Range<usize>| {
        let mut out = Vec::new();
        for i in range {
            let headers = [("src", sources[i].as_bytes())];
            let record = RecordView {
                key: Some(&keys[i]),
                headers: &headers,
                timestamp_ms: Some(times[i]),
                ..Default::default()
            };
            s.process(&SliceRecord { offset: i as u64, record, source: None, reading: None }, &ex, &mut out);
        }
        out
    };
    let fresh = || {
        let mut s = SliceState::new(2, params(), 0, order(300));
        s.set_stages(&with(&setup));
        s
    };
    let mut whole = fresh();
    let expected = feed(&mut whole, 0..2_000);
    let mut first = fresh();
    let mut got = feed(&mut first, 0..1_100);
    assert!(
        !first.stages.get::<SliceProvenance>().unwrap().pending.is_empty(),
        "some records are held with their source"
    );
    let bytes = encode(&first);
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 3, "with provenance: version 3");
    let mut restored = decode_full(&bytes, 2, &params(), order(300), &with(&setup)).unwrap();
    let reread = restored
        .unfilled
        .clone()
        .iter()
        .map(|&(o, _)| {
            let r = RecordView {
                key: Some(&keys[o as usize]),
                timestamp_ms: Some(times[o as usize]),
                ..Default::default()
            };
            let (t, h) = restored.held_entry(&r, &ex).unwrap();
            (o, t, h)
        })
        .collect();
    restored.refill(reread).unwrap();
    assert_eq!(restored, first);
    got.extend(feed(&mut restored, 1_100..2_000));
    assert_eq!(got, expected);
    assert_eq!(restored, whole);
    // The first sources named are right: the first copy in time order
    // (ties by offset) of each key judged a duplicate.
    let mut by_time: Vec<usize> = (0..2_000).collect();
    by_time.sort_by_key(|&i| (times[i], i));
    let mut first_of = BTreeMap::new();
    for &i in &by_time {
        first_of.entry(keys[i]).or_insert(&sources[i]);
    }
    let named: Vec<&Judgment> = expected.iter().filter(|j| first_source(j).is_some()).collect();
    assert!(named.len() > 100, "{} first sources named", named.len());
    for j in named {
        assert_eq!(first_source(j), Some(first_of[&keys[j.offset as usize]].as_str()), "{j:?}");
    }
    // Every source of a key judged in the kept generations is listed.
    let p = &whole.stages.get::<SliceProvenance>().unwrap().sources;
    let judged: BTreeSet<u64> = expected.iter().map(|j| j.offset).collect();
    for i in (0..2_000).filter(|&i| judged.contains(&(i as u64)) && times[i] >= 11_000) {
        let listed = p.query(&KeyHash::of(params().params().seed, &keys[i])).sources;
        assert!(listed.iter().any(|s| **s == *sources[i]), "record {i}: {} not in {listed:?}", sources[i]);
    }
    // Provenance turned off: the section is skipped; resized: it starts
    // empty and the rest of the slice is restored.
    assert!(decode(&bytes, 2, &params(), order(300)).unwrap().stages.get::<SliceProvenance>().is_none());
    let resized = ProvenanceSetup { spec: ProvenanceSpec { bits: 2_048, ..setup.spec.clone() }, ..setup.clone() };
    let back = decode_full(&bytes, 2, &params(), order(300), &with(&resized)).unwrap();
    assert_eq!(back.stages.get::<SliceProvenance>().unwrap().sources.live_sources(), 0);
    assert_eq!(back.filter, first.filter);
}
