//! The settings loader on arbitrary TOML text and environment pairs: a
//! `ConfigError` naming what is wrong, or settings the daemon can start
//! with — never a panic. Accepted settings go through what start-up derives
//! from them.
#![no_main]

use dedupd::config::{ConfigError, Settings};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

/// Setting names, so that environment pairs reach the rules (the
/// dictionary `fuzz/config.dict` does the same for the file's text).
const NAMES: [&str; 36] = [
    "APP__ID",
    "KAFKA__BROKERS",
    "KAFKA__SESSION_TIMEOUT_MS",
    "INPUT__TOPICS",
    "INPUT__KEY",
    "INPUT__TIME",
    "INPUT__MAX_RECORD_BYTES",
    "INPUT__LATENESS",
    "INPUT__MAX_CLOCK_JUMP",
    "INPUT__JUMP_CONFIRMATIONS",
    "FILTER__KIND",
    "FILTER__WINDOW",
    "FILTER__FPR",
    "FILTER__EXPECTED_KEYS",
    "FILTER__HEADROOM",
    "FILTER__EQUAL_TIMERS",
    "FILTER__GROWTH",
    "FILTER__SLICES",
    "FILTER__TIMER_BITS",
    "FILTER__TICK",
    "FILTER__MAX_GENERATIONS",
    "SLICING__MODE",
    "SLICING__ORDER_TOLERANCE",
    "OUTPUT__TOPIC",
    "OUTPUT__DUPLICATES_TOPIC",
    "OUTPUT__DEAD_LETTER_TOPIC",
    "OUTPUT__LATE_TOPIC",
    "CHECKPOINT__TOPIC",
    "CHECKPOINT__INTERVAL",
    "CHECKPOINT__INTERVAL_RECORDS",
    "CHECKPOINT__CHUNK_BYTES",
    "CHECKPOINT__ON_CORRUPT",
    "ADMIN__LISTEN",
    "TOPICS__AUTO_CREATE",
    "TOPICS__REPLICATION_FACTOR",
    "SHUTDOWN__TIMEOUT",
];

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    env: Vec<(u8, &'a str)>,
    /// An environment name of its own (after `DEDUPD__`).
    other: Option<(&'a str, &'a str)>,
    toml: &'a str,
}

fuzz_target!(|input: Input<'_>| {
    let mut env: Vec<(String, String)> = input
        .env
        .iter()
        .map(|&(i, v)| (format!("DEDUPD__{}", NAMES[usize::from(i) % NAMES.len()]), v.to_string()))
        .collect();
    if let Some((name, value)) = input.other {
        env.push((format!("DEDUPD__{name}"), value.to_string()));
    }
    match Settings::load_from_str(input.toml, env) {
        Ok(cfg) => {
            // What `dedupd run` derives at start-up, which it trusts to succeed.
            let params = cfg.filter.resolve().expect("validated settings resolve");
            let _ = params.fingerprint();
            let _ = cfg.settings.kafka.client_settings();
            let _ = (cfg.slice_topic(), cfg.flush_topic());
        }
        Err(ConfigError::Invalid { setting, value: _, rule }) => {
            assert!(!setting.is_empty() && !rule.is_empty());
        }
        Err(ConfigError::Load(why)) => assert!(!why.is_empty()),
    }
});
