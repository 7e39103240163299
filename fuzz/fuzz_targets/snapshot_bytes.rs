//! The snapshot decoders on arbitrary bytes (the corpus is seeded with real
//! encodings by `seeds`): a typed error or a state that works, never a
//! panic. Both the slice envelope (what the daemon restores) and the filter
//! snapshot on its own, each against the parameters of every sample.
#![no_main]

use dedupd::engine::slice;
use dedupd::filter::timer::snapshot;
use dedupd_fuzz::{exercise, exercise_filter, samples};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    for s in samples() {
        if let Ok(state) = slice::decode(bytes, s.slice, &s.params.clone().into(), s.order) {
            exercise(state, &s.params, s.order);
        }
        if let Ok(filter) = snapshot::decode(bytes, &s.params) {
            exercise_filter(filter);
        }
    }
});
