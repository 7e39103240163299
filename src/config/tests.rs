use std::collections::BTreeMap;
use std::path::PathBuf;

use super::*;
use crate::features::limits::stage::counting;
use crate::features::provenance::stage::provenance;
use crate::filter::DecayingKind;

#[test]
fn provenance_is_off_by_default_and_checked() {
    use crate::features::provenance::stage::SourceSpec;
    assert!(provenance(&load(&[]).unwrap().stages).is_none());
    let r = load(&[("DEDUPD__PROVENANCE__SOURCE", "json:/pub"), ("DEDUPD__FILTER__SLICES", "4")]).unwrap();
    let p = provenance(&r.stages).unwrap();
    assert_eq!(p.source, SourceSpec::Json("/pub".into()));
    // 100000 keys per source over 4 slices at 1%: 25000 keys, 9.59 bits each, k = 7.
    assert_eq!((p.spec.bits, p.spec.hashes), (239_627, 7));
    assert_eq!(p.spec.keep_ms, r.filter.window_ms + r.order.lateness_ms);
    for (key, value, message) in [
        ("DEDUPD__PROVENANCE__SOURCE", "pub", "invalid setting provenance.source = pub: unknown provenance source"),
        ("DEDUPD__PROVENANCE__INDEX", "btree", "invalid setting provenance.index = btree: expected auto, flat or tree"),
        ("DEDUPD__PROVENANCE__MAX_SOURCES", "0", "invalid setting provenance.max_sources = 0: between 1"),
        ("DEDUPD__PROVENANCE__FPR", "0.7", "invalid setting provenance.fpr = 0.7: between 0 and 0.5"),
        ("DEDUPD__PROVENANCE__TREE_ORDER", "1", "invalid setting provenance.tree_order = 1: between 2 and 64"),
    ] {
        let e = load(&[("DEDUPD__PROVENANCE__SOURCE", "topic"), (key, value)]).unwrap_err().to_string();
        assert!(e.starts_with(message), "{e}");
    }
}

#[test]
fn tiers_are_checked_at_start_up() {
    assert_eq!(load(&[]).unwrap().tier, Tier::Single);
    let leaf = [
        ("DEDUPD__TIER__ROLE", "leaf"),
        ("DEDUPD__TIER__PARENT_TOPIC", "clicks.root"),
        ("DEDUPD__TIER__VERDICT_TOPIC", "clicks.verdicts"),
    ];
    let r = load(&leaf).unwrap();
    assert_eq!(r.tier, Tier::SparseLeaf);
    // A leaf's output is its parent's input.
    assert_eq!(r.settings.output.topic, "clicks.root");
    // The cache expires on the root's tick, whatever its own lateness.
    assert_eq!(r.leaf_cache().unwrap().tick_ms, r.filter.resolve().unwrap().tick_ms);
    assert_eq!(r.leaf_cache().unwrap().lateness_ms, Some(30_000));
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut env = leaf.to_vec();
        env.extend_from_slice(extra);
        rejected(&env)
    };
    for (extra, message) in [
        (&[("DEDUPD__TIER__ROLE", "middle")][..], "invalid setting tier.role = middle: expected single, leaf or root"),
        (&[("DEDUPD__TIER__TREE", "bushy")][..], "invalid setting tier.tree = bushy: expected sparse or dense"),
        (&[("DEDUPD__TIER__PARENT_TOPIC", "")][..], "invalid setting tier.parent_topic = \"\": a Kafka topic name"),
        (&[("DEDUPD__TIER__PARENT_TOPIC", "clicks")][..], "invalid setting tier.parent_topic = clicks: cannot also be"),
        (&[("DEDUPD__TIER__VERDICT_TOPIC", "")][..], "invalid setting tier.verdict_topic = \"\": a Kafka topic name"),
        (
            &[("DEDUPD__TIER__VERDICT_DELAY", "10m")][..],
            "invalid setting tier.verdict_delay = 600000ms: at least 1ms and shorter",
        ),
        // 4-bit timers hold the window (6 ticks of 100 s) and 2 s of lateness, not 9 minutes.
        (
            &[("DEDUPD__TIER__VERDICT_DELAY", "9m"), ("DEDUPD__FILTER__TIMER_BITS", "4")][..],
            "invalid setting tier.verdict_delay = ",
        ),
        (
            &[("DEDUPD__FILTER__KIND", "rsbf")][..],
            "invalid setting filter.kind = rsbf: tier.role = leaf needs the timer filter",
        ),
    ] {
        let e = with(extra);
        assert!(e.starts_with(message), "{extra:?}: {e}");
    }
    // A dense tree needs no verdict topic; a sparse root needs one.
    assert_eq!(load(&[("DEDUPD__TIER__ROLE", "root"), ("DEDUPD__TIER__TREE", "dense")]).unwrap().tier, Tier::DenseRoot);
    assert!(rejected(&[("DEDUPD__TIER__ROLE", "root")]).starts_with("invalid setting tier.verdict_topic"));
}

#[test]
fn counting_is_off_by_default_and_checked() {
    assert!(counting(&load(&[]).unwrap().stages).is_none());
    let r = load(&[
        ("DEDUPD__LIMIT__MAX_PER_WINDOW", "3"),
        ("DEDUPD__LIMIT__COUNT_KEY", "json:/ip"),
        ("DEDUPD__FLAG__THRESHOLD", "10"),
        ("DEDUPD__FLAG__TOPIC", "clicks.flags"),
    ])
    .unwrap();
    let c = counting(&r.stages).unwrap();
    assert_eq!((c.spec.max_per_window, c.spec.flag_threshold), (Some(3), Some(10)));
    assert_eq!(c.count_key, Some(KeySpec::Json("/ip".into())));
    assert_eq!(c.spec.window_ms, r.filter.window_ms);
    assert_eq!(Some(r.filter.expected_keys), r.settings.filter.expected_keys, "a separate count key keeps the filter");
    // Counting by the dedup key: the idle timer filter is the smallest.
    let r = load(&[("DEDUPD__LIMIT__MAX_PER_WINDOW", "3")]).unwrap();
    assert_eq!(r.filter.expected_keys, u64::from(r.settings.filter.slices));
    r.filter.resolve().unwrap();
    let flag = [("DEDUPD__FLAG__THRESHOLD", "5"), ("DEDUPD__FLAG__TOPIC", "f")];
    for (env, message) in [
        (&[("DEDUPD__FLAG__THRESHOLD", "5")][..], "invalid setting flag.threshold = 5: needs flag.topic"),
        (&[("DEDUPD__FLAG__TOPIC", "f")][..], "invalid setting flag.topic = f: needs flag.threshold"),
        (&[("DEDUPD__LIMIT__COUNT_KEY", "json:/ip")][..], "invalid setting limit.count_key = json:/ip: needs"),
        (
            &[("DEDUPD__LIMIT__MAX_PER_WINDOW", "1"), ("DEDUPD__LIMIT__COUNT_KEY", "ip")][..],
            "invalid setting limit.count_key = ip: unknown key source",
        ),
        (
            &[("DEDUPD__LIMIT__MAX_PER_WINDOW", "300")][..],
            "invalid setting limit.max_per_window = 300: must be at most 255, the largest count of 8-bit counters",
        ),
        (
            &[flag[0], flag[1], ("DEDUPD__LIMIT__COUNTER_BITS", "4"), ("DEDUPD__FLAG__THRESHOLD", "16")][..],
            "invalid setting flag.threshold = 16: must be at most 15",
        ),
        (&[flag[0], flag[1], ("DEDUPD__LIMIT__SUBWINDOWS", "4")][..], "invalid setting limit.subwindows = 4"),
        (&[flag[0], flag[1], ("DEDUPD__LIMIT__ESTIMATOR", "cm")][..], "invalid setting limit.estimator = cm"),
        (&[flag[0], flag[1], ("DEDUPD__LIMIT__COUNTERS", "tiny")][..], "invalid setting limit.counters = tiny"),
        (&flag[..], "invalid setting flag.threshold = 5: with limit.count_key = \"\""),
        (
            &[("DEDUPD__FILTER__DELETABLE", "true"), ("DEDUPD__SLICING__MODE", "input-partitions")][..],
            "invalid setting filter.deletable = true: deletes need slicing.mode",
        ),
        (
            &[("DEDUPD__PROVENANCE__SOURCE", "topic"), ("DEDUPD__FILTER__KIND", "passthrough")][..],
            "invalid setting provenance.source = topic: filter.kind = \"passthrough\"",
        ),
        (&[flag[0], flag[1], ("DEDUPD__FILTER__KIND", "rsbf")][..], "invalid setting filter.kind = rsbf"),
        (&[flag[0], flag[1], ("DEDUPD__FILTER__DELETABLE", "true")][..], "invalid setting filter.deletable"),
        (&[flag[0], ("DEDUPD__FLAG__TOPIC", "dedupd.distinct")][..], "invalid setting flag.topic = dedupd.distinct"),
        (&[flag[0], ("DEDUPD__FLAG__TOPIC", "no way")][..], "invalid setting flag.topic = \"no way\""),
    ] {
        let e = rejected(env);
        assert!(e.starts_with(message), "{e}");
    }
}

fn load(env: &[(&str, &str)]) -> Result<Resolved, ConfigError> {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    Settings::load_from(Some(Path::new("config/dedupd.toml")), env)
}

fn rejected(env: &[(&str, &str)]) -> String {
    load(env).unwrap_err().to_string()
}

#[test]
fn the_availability_policy_is_checked_at_start_up() {
    assert_eq!(load(&[]).unwrap().availability, AvailabilityPolicy::Wait);
    let deliver = load(&[("DEDUPD__AVAILABILITY__POLICY", "deliver")]).unwrap();
    assert_eq!(deliver.availability, AvailabilityPolicy::Deliver);
    let e = rejected(&[("DEDUPD__AVAILABILITY__POLICY", "skip")]);
    assert!(e.contains("availability.policy") && e.contains("skip") && e.contains("wait, deliver or drop"), "{e}");
    // drop needs somewhere to put what it drops.
    let e = rejected(&[("DEDUPD__AVAILABILITY__POLICY", "drop"), ("DEDUPD__OUTPUT__DUPLICATES_TOPIC", "")]);
    assert!(e.contains("availability.policy") && e.contains("output.duplicates_topic"), "{e}");
    let dropping =
        load(&[("DEDUPD__AVAILABILITY__POLICY", "drop"), ("DEDUPD__OUTPUT__DUPLICATES_TOPIC", "clicks.dups")]).unwrap();
    assert_eq!(dropping.availability, AvailabilityPolicy::Drop);
}

#[test]
fn shared_mode_takes_one_slice_and_waits_for_restores() {
    let shared = [("DEDUPD__SLICING__MODE", "shared"), ("DEDUPD__FILTER__SLICES", "1")];
    let r = load(&shared).unwrap();
    assert_eq!(r.slicing, SlicingMode::Shared);
    assert_eq!(r.slice_topic(), "dedupd.slices");
    let e = rejected(&[("DEDUPD__SLICING__MODE", "shared"), ("DEDUPD__FILTER__SLICES", "8")]);
    assert!(e.contains("filter.slices = 8") && e.contains("exactly 1"), "{e}");
    let e = rejected(&[shared[0], shared[1], ("DEDUPD__AVAILABILITY__POLICY", "deliver")]);
    assert!(e.contains("availability.policy = deliver") && e.contains("wait with"), "{e}");
    let e = rejected(&[("DEDUPD__SLICING__MODE", "sharded")]);
    assert!(e.contains("repartition, input-partitions or shared"), "{e}");
}

#[test]
fn the_slice_log_format_is_checked_at_start_up() {
    let format = |env: &[(&str, &str)]| load(env).unwrap().slice_log_format;
    assert_eq!(format(&[]), SliceLogFormat::Batches, "the default: empty, batches where it can run");
    let default_elsewhere = [("DEDUPD__SLICING__MODE", "input-partitions")];
    assert_eq!(format(&default_elsewhere), SliceLogFormat::Records);
    assert_eq!(format(&[("DEDUPD__SLICING__LOG_FORMAT", "")]), SliceLogFormat::Batches, "empty: where it can run");
    let batches = ("DEDUPD__SLICING__LOG_FORMAT", "batches");
    assert_eq!(format(&[batches]), SliceLogFormat::Batches);
    assert_eq!(format(&[("DEDUPD__SLICING__LOG_FORMAT", "records")]), SliceLogFormat::Records);
    // Empty, it falls back to records where batches cannot run.
    let empty = ("DEDUPD__SLICING__LOG_FORMAT", "");
    assert_eq!(format(&[empty, ("DEDUPD__SLICING__MODE", "input-partitions")]), SliceLogFormat::Records);
    assert_eq!(format(&[empty, ("DEDUPD__AVAILABILITY__POLICY", "deliver")]), SliceLogFormat::Records);
    let shared = [empty, ("DEDUPD__SLICING__MODE", "shared"), ("DEDUPD__FILTER__SLICES", "1")];
    assert_eq!(format(&shared), SliceLogFormat::Records);
    let e = rejected(&[("DEDUPD__SLICING__LOG_FORMAT", "frames")]);
    assert!(
        e.contains("slicing.log_format = frames: expected records, batches or empty (batches where it can run)"),
        "{e}"
    );
    let e = rejected(&[batches, ("DEDUPD__SLICING__MODE", "input-partitions")]);
    assert!(e.contains("slicing.log_format = batches: only with slicing.mode = \"repartition\""), "{e}");
    let e = rejected(&[batches, ("DEDUPD__AVAILABILITY__POLICY", "deliver")]);
    assert!(e.contains("slicing.log_format = batches: only with availability.policy = \"wait\""), "{e}");
}

#[test]
fn the_shipped_file_is_valid_and_matches_the_design() {
    let r = load(&[]).unwrap();
    let s = &r.settings;
    assert_eq!(s.app.id, "dedupd");
    assert_eq!(s.input.topics, vec!["clicks"]);
    assert_eq!(r.key, KeySpec::Json("/click_id".into()));
    assert_eq!(s.filter.window, 600_000);
    assert_eq!(s.filter.slices, 8);
    assert_eq!(r.slicing, SlicingMode::Repartition);
    assert_eq!(r.slice_topic(), "dedupd.slices");
    assert_eq!(s.checkpoint.interval, 30_000);
}

/// Two applications left on the default checkpoint settings do not
/// share a checkpoint topic.
#[test]
fn the_checkpoint_topic_defaults_to_the_applications_own() {
    assert_eq!(load(&[]).unwrap().settings.checkpoint.topic, "dedupd.checkpoints");
    let other = load(&[("DEDUPD__APP__ID", "fraud-b")]).unwrap();
    assert_eq!(other.settings.checkpoint.topic, "fraud-b.checkpoints");
    let explicit = load(&[("DEDUPD__APP__ID", "fraud-b"), ("DEDUPD__CHECKPOINT__TOPIC", "shared.cp")]).unwrap();
    assert_eq!(explicit.settings.checkpoint.topic, "shared.cp");
    // The default is a topic name too: an app id too long for it is refused by name.
    let dlq = ("DEDUPD__OUTPUT__DEAD_LETTER_TOPIC", "d");
    let e = rejected(&[("DEDUPD__APP__ID", &"a".repeat(238)), dlq]);
    assert!(e.contains("app.id") && e.contains("at most 237") && e.contains("checkpoint.topic"), "{e}");
    assert!(load(&[("DEDUPD__APP__ID", &"a".repeat(237))]).is_ok());
    assert!(load(&[("DEDUPD__APP__ID", &"a".repeat(238)), ("DEDUPD__CHECKPOINT__TOPIC", "x"), dlq]).is_ok());
}

/// Two applications left on the default output settings write topics of
/// their own: `<app.id>.distinct` and `<app.id>.dead-letter`.
#[test]
fn the_output_and_dead_letter_topics_default_to_the_applications_own() {
    let r = load(&[]).unwrap();
    assert_eq!(
        (r.settings.output.topic.as_str(), r.settings.output.dead_letter_topic.as_str()),
        ("dedupd.distinct", "dedupd.dead-letter")
    );
    let other = load(&[("DEDUPD__APP__ID", "fraud-b")]).unwrap();
    assert_eq!(other.settings.output.topic, "fraud-b.distinct");
    assert_eq!(other.settings.output.dead_letter_topic, "fraud-b.dead-letter");
    let explicit =
        load(&[("DEDUPD__OUTPUT__TOPIC", "clicks.distinct"), ("DEDUPD__OUTPUT__DEAD_LETTER_TOPIC", "clicks.dlq")])
            .unwrap();
    assert_eq!(explicit.settings.output.topic, "clicks.distinct");
    assert_eq!(explicit.settings.output.dead_letter_topic, "clicks.dlq");
    // Derived names are Kafka topic names: the error names app.id and the setting left empty.
    let e = rejected(&[("DEDUPD__APP__ID", &"a".repeat(238))]);
    assert!(e.contains("app.id") && e.contains("at most 237") && e.contains("output.dead_letter_topic"), "{e}");
    let set = [("DEDUPD__OUTPUT__DEAD_LETTER_TOPIC", "d"), ("DEDUPD__CHECKPOINT__TOPIC", "c")];
    let e = rejected(&[&set[..], &[("DEDUPD__APP__ID", &"a".repeat(241))]].concat());
    assert!(e.contains("app.id") && e.contains("at most 240") && e.contains("output.topic"), "{e}");
    let all = [&set[..], &[("DEDUPD__OUTPUT__TOPIC", "o")]].concat();
    assert!(load(&[&all[..], &[("DEDUPD__APP__ID", &"a".repeat(241))]].concat()).is_ok());
    let e = rejected(&[&all[..], &[("DEDUPD__APP__ID", &"a".repeat(242))]].concat());
    assert!(e.starts_with("invalid setting app.id = ") && e.contains("1 to 241"), "{e}");
}

/// A topic named for two roles is refused at start-up, naming both
/// settings, the topic and the rule.
#[test]
fn a_topic_in_two_roles_is_refused() {
    for (env, setting, also) in [
        (
            &[("DEDUPD__OUTPUT__DUPLICATES_TOPIC", "dedupd.dead-letter")][..],
            "output.dead_letter_topic = dedupd.dead-letter",
            "the duplicates topic (output.duplicates_topic)",
        ),
        (
            &[("DEDUPD__OUTPUT__DEAD_LETTER_TOPIC", "dedupd.distinct")][..],
            "output.dead_letter_topic = dedupd.distinct",
            "the output topic (output.topic)",
        ),
        (
            &[("DEDUPD__OUTPUT__LATE_TOPIC", "dedupd.distinct")][..],
            "output.late_topic = dedupd.distinct",
            "the output topic (output.topic)",
        ),
        (
            &[("DEDUPD__CHECKPOINT__TOPIC", "dedupd.dead-letter")][..],
            "checkpoint.topic = dedupd.dead-letter",
            "the dead-letter topic (output.dead_letter_topic)",
        ),
        (
            &[("DEDUPD__OUTPUT__TOPIC", "dedupd.slices")][..],
            "output.topic = dedupd.slices",
            "the slice log (<app.id>.slices)",
        ),
        (
            &[("DEDUPD__OUTPUT__DUPLICATES_TOPIC", "dedupd.flushes")][..],
            "output.duplicates_topic = dedupd.flushes",
            "the flush log (<app.id>.flushes)",
        ),
        (
            &[("DEDUPD__INPUT__TOPICS", "dedupd.distinct")][..],
            "input.topics = dedupd.distinct",
            "the output topic (output.topic)",
        ),
        (
            &[("DEDUPD__INPUT__TOPICS", "clicks,x.ckpt"), ("DEDUPD__CHECKPOINT__TOPIC", "x.ckpt")][..],
            "input.topics = x.ckpt",
            "the checkpoint topic (checkpoint.topic)",
        ),
        (
            &[("DEDUPD__FLAG__THRESHOLD", "5"), ("DEDUPD__FLAG__TOPIC", "dedupd.distinct")][..],
            "flag.topic = dedupd.distinct",
            "the output topic (output.topic)",
        ),
    ] {
        let e = rejected(env);
        assert!(e.starts_with(&format!("invalid setting {setting}: ")), "{e}");
        assert!(e.contains(&format!("is also {also}; each topic has one role")), "{e}");
    }
    // The slice log is the input in input-partitions mode: not two roles.
    assert!(load(&[("DEDUPD__SLICING__MODE", "input-partitions"), ("DEDUPD__INPUT__TOPICS", "dedupd.slices")]).is_ok());
    // An input topic listed twice is one role.
    assert!(load(&[("DEDUPD__INPUT__TOPICS", "a,a")]).is_ok());
    // Optional topics left empty are no role.
    assert!(load(&[("DEDUPD__OUTPUT__DUPLICATES_TOPIC", ""), ("DEDUPD__OUTPUT__LATE_TOPIC", "")]).is_ok());
}

/// dedupd removes `dedupd.*` headers from input records, so none can be
/// where the key or the source is read.
#[test]
fn reserved_headers_are_not_read_from_input() {
    let e = rejected(&[("DEDUPD__INPUT__KEY", "header:dedupd.policy")]);
    assert!(e.contains("input.key") && e.contains("\"dedupd.\""), "{e}");
    assert_eq!(load(&[("DEDUPD__INPUT__KEY", "header:click")]).unwrap().key, KeySpec::Header("click".into()));
    // Nor any part of a composite key.
    let e = rejected(&[("DEDUPD__INPUT__KEY", "json:/id+header:dedupd.release")]);
    assert!(e.contains("input.key") && e.contains("\"dedupd.\""), "{e}");
    let e = rejected(&[("DEDUPD__PROVENANCE__SOURCE", "header:dedupd.source")]);
    assert!(e.contains("provenance.source") && e.contains("\"dedupd.\""), "{e}");
}

#[test]
fn environment_overrides_the_file() {
    let r = load(&[
        ("DEDUPD__KAFKA__BROKERS", "127.0.0.1:19092"),
        ("DEDUPD__INPUT__TOPICS", "a,b"),
        ("DEDUPD__FILTER__SLICES", "3"),
        ("DEDUPD__FILTER__WINDOW", "90s"),
        ("DEDUPD__KAFKA__SESSION_TIMEOUT_MS", "6000"),
        ("DEDUPD__KAFKA__SASL_PASSWORD", "007"),
        ("OTHER__FILTER__SLICES", "99"),
    ])
    .unwrap();
    assert_eq!(r.settings.kafka.brokers, "127.0.0.1:19092");
    assert_eq!(r.settings.input.topics, vec!["a", "b"]);
    assert_eq!(r.settings.filter.slices, 3);
    assert_eq!(r.settings.filter.window, 90_000);
    let kafka = r.settings.kafka.client_settings();
    assert!(kafka.contains(&("session.timeout.ms".into(), "6000".into())));
    assert!(kafka.contains(&("sasl.password".into(), "007".into())), "secrets stay text: {kafka:?}");
}

#[test]
fn errors_name_setting_value_and_rule() {
    assert_eq!(
        rejected(&[("DEDUPD__FILTER__FPR", "1.5")]),
        "invalid setting filter.fpr = 1.5: must be greater than 0 and less than 1"
    );
    assert!(
        rejected(&[("DEDUPD__FILTER__EXPECTED_KEYS", "0")]).starts_with("invalid setting filter.expected_keys = 0")
    );
    assert!(rejected(&[("DEDUPD__SLICING__MODE", "hash")]).contains("slicing.mode = hash: expected repartition"));
    assert!(rejected(&[("DEDUPD__INPUT__KEY", "json:id")]).contains("input.key = json:id"));
    assert!(rejected(&[("DEDUPD__INPUT__TIME", "arrival")]).contains("input.time = arrival"));
    assert!(rejected(&[("DEDUPD__INPUT__TIME", "json:ts:s")]).starts_with("invalid setting input.time = json:ts:s"));
    let seconds = load(&[("DEDUPD__INPUT__TIME", "json:/ts:s")]).expect("a time in seconds");
    assert_eq!(seconds.time, TimeSpec::Json("/ts".into(), crate::engine::TimeUnit::Seconds));
    assert!(rejected(&[("DEDUPD__OUTPUT__TOPIC", "bad topic")]).contains("output.topic"));
    assert!(rejected(&[("DEDUPD__ADMIN__LISTEN", "nowhere")]).contains("admin.listen = nowhere"));
    assert!(rejected(&[("DEDUPD__FILTER__WINDOW", "soon")]).contains("soon"));
    assert!(rejected(&[("DEDUPD__CHECKPOINT__ON_CORRUPT", "ignore")]).contains("checkpoint.on_corrupt"));
    let two = rejected(&[("DEDUPD__SLICING__MODE", "input-partitions"), ("DEDUPD__INPUT__TOPICS", "a,b")]);
    assert!(two.contains("exactly one topic"), "{two}");
    assert!(rejected(&[("DEDUPD__INPUT__TOPICS", "dedupd.distinct")]).contains("is also the output topic"));
    assert!(
        rejected(&[("DEDUPD__SLICING__ORDER_TOLERANCE", "later")])
            .starts_with("invalid setting slicing.order_tolerance = later: a duration"),
    );
    assert!(
        rejected(&[("DEDUPD__SLICING__ORDER_TOLERANCE", "3s")])
            .starts_with("invalid setting slicing.order_tolerance = 3s: at most input.lateness (2000 ms)"),
    );
    assert_eq!(load(&[("DEDUPD__SLICING__ORDER_TOLERANCE", "1s")]).unwrap().order_tolerance_ms, 1000);
    assert!(
        rejected(&[("DEDUPD__SLICING__MAX_HELD", "0")])
            .starts_with("invalid setting slicing.max_held = 0: between 1 and 100000000"),
    );
    assert_eq!(load(&[("DEDUPD__SLICING__MAX_HELD", "5000")]).unwrap().settings.slicing.max_held, 5000);
    assert_eq!(
        rejected(&[("DEDUPD__INPUT__LATENESS", "10m")]),
        "invalid setting input.lateness = 600000ms: shorter than filter.window (600000 ms)"
    );
    assert!(rejected(&[("DEDUPD__INPUT__JUMP_CONFIRMATIONS", "0")]).contains("input.jump_confirmations = 0"));
    assert!(rejected(&[("DEDUPD__INPUT__MAX_CLOCK_JUMP", "0s")]).contains("input.max_clock_jump = 0ms"));
    let r = load(&[("DEDUPD__INPUT__LATENESS", "500ms")]).unwrap();
    assert_eq!(r.order, OrderSettings { lateness_ms: 500, max_clock_jump_ms: 600_000, jump_confirmations: 16 });
    assert_eq!(r.flush_topic(), "dedupd.flushes");
}

#[test]
fn kafka_settings_pass_through_with_dotted_names() {
    let dir = std::env::temp_dir().join(format!("dedupd-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("k.toml");
    std::fs::write(
        &file,
        "[kafka]\nbrokers = \"b:1\"\n\"session.timeout.ms\" = 6000\n\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanisms\" = \"PLAIN\"\n",
    )
    .unwrap();
    let r = Settings::load_from(Some(&file), Vec::new()).unwrap();
    let mut got = r.settings.kafka.client_settings();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("sasl.mechanisms".to_string(), "PLAIN".to_string()),
            ("security.protocol".into(), "SASL_SSL".into()),
            ("session.timeout.ms".into(), "6000".into())
        ]
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_settings_file_is_searched_for_in_order() {
    let dir = std::env::temp_dir().join(format!("dedupd-locate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (flag, env, first, second) =
        (dir.join("flag.toml"), dir.join("env.toml"), dir.join("first.toml"), dir.join("second.toml"));
    let missing = dir.join("missing.toml");
    for f in [&flag, &env, &second] {
        std::fs::write(f, "[app]\nid = \"x\"\n").unwrap();
    }
    let search = vec![first.clone(), second.clone()];
    let found = |path: &Path, by: ChosenBy| SettingsFile::Found { path: path.to_path_buf(), by };
    let locate = |f: Option<&Path>, e: Option<&Path>| SettingsFile::locate(f, e.map(Path::as_os_str), &search);

    // --config first, then DEDUPD_CONFIG, then the search path in order.
    assert_eq!(locate(Some(&flag), Some(&env)).unwrap(), found(&flag, ChosenBy::Flag));
    assert_eq!(locate(None, Some(&env)).unwrap(), found(&env, ChosenBy::Env));
    assert_eq!(locate(None, None).unwrap(), found(&second, ChosenBy::Search));
    assert_eq!(locate(None, Some(Path::new(""))).unwrap(), found(&second, ChosenBy::Search), "empty = unset");
    std::fs::write(&first, "").unwrap();
    assert_eq!(locate(None, None).unwrap(), found(&first, ChosenBy::Search));
    assert!(
        locate(None, None)
            .unwrap()
            .to_string()
            .starts_with(&format!("reading settings from {} (found on the search path)", first.display()))
    );

    // A file named explicitly must exist; nothing falls back silently.
    let e = locate(Some(&missing), Some(&env)).unwrap_err().to_string();
    assert!(
        e.contains(&missing.display().to_string()) && e.contains("--config") && e.contains("does not exist"),
        "{e}"
    );
    let e = locate(None, Some(&missing)).unwrap_err().to_string();
    assert!(e.contains(&missing.display().to_string()) && e.contains("DEDUPD_CONFIG"), "{e}");

    // None anywhere: defaults and the environment, saying where it looked.
    let nowhere = vec![PathBuf::from("no/such/dedupd.toml"), missing.clone()];
    let none = SettingsFile::locate(None, None, &nowhere).unwrap();
    assert_eq!(none.path(), None);
    let line = none.to_string();
    let cwd = std::env::current_dir().unwrap();
    assert!(line.starts_with("no settings file found (looked in --config, DEDUPD_CONFIG, "), "{line}");
    assert!(line.contains(&cwd.join("no/such/dedupd.toml").display().to_string()), "{line}");
    assert!(line.contains(&missing.display().to_string()), "{line}");
    assert!(line.ends_with("using built-in defaults and the environment"), "{line}");
    let r = Settings::load_from(none.path(), vec![("DEDUPD__APP__ID".into(), "env-only".into())]).unwrap();
    assert_eq!(r.settings.app.id, "env-only");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_search_path_is_the_working_directory_then_etc() {
    assert_eq!(SEARCH_PATH, ["config/dedupd.toml", "/etc/dedupd/dedupd.toml"]);
}

#[test]
fn log_settings() {
    let r = load(&[]).unwrap();
    assert_eq!((r.log_format, r.settings.log.summary_interval), (LogFormat::Text, 60_000));
    let r = load(&[("DEDUPD__LOG__FORMAT", "json"), ("DEDUPD__LOG__SUMMARY_INTERVAL", "0s")]).unwrap();
    assert_eq!((r.log_format, r.settings.log.summary_interval), (LogFormat::Json, 0));
    assert_eq!(
        rejected(&[("DEDUPD__LOG__FORMAT", "yaml")]),
        "invalid setting log.format = yaml: expected text or json"
    );
    assert!(rejected(&[("DEDUPD__LOG__SUMMARY_INTERVAL", "often")]).contains("often"));
}

/// Every setting the structs accept, as `section.key`: the built-in
/// defaults alone (no file, no environment, not validated) deserialised
/// into [`Settings`] and serialised back to JSON (the structs derive
/// `Serialize` in test builds), every leaf of that tree. The keys are the
/// structs' fields, whatever `DEFAULTS` lists: a field with
/// `#[serde(default)]` that `DEFAULTS` leaves out is there too, and one
/// without a default that `DEFAULTS` leaves out fails the load, naming it.
/// `Option` fields serialise as `null` into JSON (TOML would drop them),
/// so they are leaves like any other; the same goes for an optional
/// sub-table, whose own keys are then not seen. `[kafka]`'s pass-through
/// map is empty in the defaults, so only its own field (`brokers`) shows.
fn accepted_settings() -> BTreeMap<String, serde_json::Value> {
    let settings: Settings = defaults()
        .build()
        .and_then(|c| c.try_deserialize())
        .unwrap_or_else(|e| panic!("the built-in defaults (DEFAULTS) do not load: {e}"));
    leaves(&serde_json::to_value(&settings).unwrap())
}

/// The leaves of `value` by their dotted paths (`filter.window`); tables
/// are walked into, everything else (arrays, `null`) is a leaf.
fn leaves(value: &serde_json::Value) -> BTreeMap<String, serde_json::Value> {
    fn walk(path: &str, value: &serde_json::Value, out: &mut BTreeMap<String, serde_json::Value>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, inner) in map {
                    walk(&if path.is_empty() { key.clone() } else { format!("{path}.{key}") }, inner, out);
                }
            }
            leaf => {
                out.insert(path.to_string(), leaf.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", value, &mut out);
    out
}

/// What config/dedupd.toml says about one setting.
struct Entry {
    /// The line right above its `key = ...` line is a comment.
    comment_above: bool,
    /// The comment lines of its paragraph (since the previous blank line or
    /// section header) before its line.
    paragraph: Vec<String>,
}

/// The settings config/dedupd.toml sets, read as TOML by the settings
/// loader (commented-out lines are examples, not entries), and what its
/// lines say about each `section.key`.
fn documented_settings(text: &str) -> (BTreeMap<String, serde_json::Value>, BTreeMap<String, Entry>) {
    let parsed: serde_json::Value = config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .build()
        .and_then(|c| c.try_deserialize())
        .unwrap_or_else(|e| panic!("config/dedupd.toml is not valid TOML: {e}"));
    let mut entries = BTreeMap::new();
    let (mut section, mut paragraph, mut comment_above) = (String::new(), Vec::new(), false);
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            (section, paragraph) = (name.to_string(), Vec::new());
        } else if line.is_empty() {
            paragraph.clear();
        } else if let Some(comment) = line.strip_prefix('#') {
            paragraph.push(comment.trim().to_string());
        } else if let Some((key, _)) = line.split_once('=') {
            entries.insert(format!("{section}.{}", key.trim()), Entry { comment_above, paragraph: paragraph.clone() });
        }
        comment_above = line.starts_with('#');
    }
    (leaves(&parsed), entries)
}

/// config/dedupd.toml, the reference of the settings, cannot drift from
/// the structs: it sets every setting they accept, each with a comment,
/// and no setting they do not accept (`deny_unknown_fields` refuses
/// those too when the file is loaded, but not in `[kafka]`, which passes
/// any key to librdkafka: the file shows those only as comments).
#[test]
fn config_dedupd_toml_documents_every_setting() {
    let accepted = accepted_settings();
    // 68 settings in 16 sections today; `Option` fields (`filter.tick`) are there as `null`.
    assert!(accepted.len() > 60 && accepted.get("filter.tick") == Some(&serde_json::Value::Null), "{accepted:?}");
    let text = std::fs::read_to_string("config/dedupd.toml").unwrap();
    let (documented, entries) = documented_settings(&text);
    let undocumented: Vec<&String> = accepted.keys().filter(|k| !documented.contains_key(*k)).collect();
    assert!(
        undocumented.is_empty(),
        "settings dedupd accepts that config/dedupd.toml does not document: {undocumented:?}; add each to \
             its section there as `key = <default>` under a comment saying what it does"
    );
    let unknown: Vec<&String> = documented.keys().filter(|k| !accepted.contains_key(*k)).collect();
    assert!(
        unknown.is_empty(),
        "config/dedupd.toml sets {unknown:?}, which dedupd does not accept (librdkafka pass-through \
             settings in [kafka] go there only as commented-out examples)"
    );
    for setting in documented.keys() {
        let key = setting.rsplit('.').next().unwrap();
        let Some(entry) = entries.get(setting) else {
            panic!("config/dedupd.toml: {setting} is not written as a `{key} = ...` line under its [section]");
        };
        // A comment right above it, or one in its paragraph that names it
        // (`max_clock_jump` and `jump_confirmations` share one).
        assert!(
            entry.comment_above || entry.paragraph.iter().any(|c| c.contains(key)),
            "config/dedupd.toml: {setting} has no comment saying what it does"
        );
    }
    // And the file loads as it stands: no unknown key, no invalid value.
    load(&[]).unwrap();
}

/// `input.start`, and a librdkafka `auto.offset.reset` that says
/// otherwise (in any of its spellings) refused naming both.
#[test]
fn input_start_is_checked_against_auto_offset_reset() {
    assert_eq!(load(&[]).unwrap().input_start, InputStart::Earliest);
    assert_eq!(load(&[("DEDUPD__INPUT__START", "latest")]).unwrap().input_start, InputStart::Latest);
    assert_eq!(
        rejected(&[("DEDUPD__INPUT__START", "newest")]),
        "invalid setting input.start = newest: expected earliest or latest"
    );
    for (start, reset) in [("earliest", "earliest"), ("earliest", "smallest"), ("latest", "latest"), ("latest", "end")]
    {
        let r = load(&[("DEDUPD__INPUT__START", start), ("DEDUPD__KAFKA__AUTO_OFFSET_RESET", reset)]).unwrap();
        assert_eq!(r.input_start.as_str(), start);
    }
    let rule = "(where dedupd starts reading an input partition it has no position in): set input.start \
                    (earliest or latest) and remove kafka.auto.offset.reset";
    assert_eq!(
        rejected(&[("DEDUPD__KAFKA__AUTO_OFFSET_RESET", "latest")]),
        format!("invalid setting kafka.auto.offset.reset = latest: contradicts input.start = earliest {rule}")
    );
    assert_eq!(
        rejected(&[("DEDUPD__INPUT__START", "latest"), ("DEDUPD__KAFKA__AUTO_OFFSET_RESET", "error")]),
        format!("invalid setting kafka.auto.offset.reset = error: contradicts input.start = latest {rule}")
    );
    // Written in the file as librdkafka's dotted name.
    let file = "[input]\nstart = \"latest\"\n[kafka]\n\"auto.offset.reset\" = \"smallest\"\n";
    let e = Settings::load_from_str(file, Vec::new()).unwrap_err().to_string();
    assert!(
        e.starts_with("invalid setting kafka.auto.offset.reset = smallest: contradicts input.start = latest"),
        "{e}"
    );
}

#[test]
fn the_replication_factor_is_the_brokers_unless_set() {
    assert_eq!(load(&[]).unwrap().settings.topics.replication_factor, -1);
    assert_eq!(load(&[("DEDUPD__TOPICS__REPLICATION_FACTOR", "3")]).unwrap().settings.topics.replication_factor, 3);
    for bad in ["0", "-2", "32768"] {
        assert_eq!(
            rejected(&[("DEDUPD__TOPICS__REPLICATION_FACTOR", bad)]),
            format!(
                "invalid setting topics.replication_factor = {bad}: -1 (the broker's default.replication.factor) \
                     or 1 to 32767"
            )
        );
    }
}

#[test]
fn unknown_settings_are_refused() {
    let e = rejected(&[("DEDUPD__FILTER__WINDOWS", "1m")]);
    assert!(e.contains("windows"), "{e}");
}

const TOKEN: &str = "0070123456789abcdef";

#[test]
fn key_endpoints_are_off_until_a_token_is_set() {
    assert_eq!(load(&[]).unwrap().key_endpoints, KeyEndpoints::Off);
    // Environment text stays text: a token of digits keeps its leading zeros.
    let r = load(&[("DEDUPD__ADMIN__TOKEN", TOKEN)]).unwrap();
    assert_eq!(r.key_endpoints, KeyEndpoints::Token(Secret::new(TOKEN)));
    let r = load(&[("DEDUPD__ADMIN__TOKEN", TOKEN), ("DEDUPD__ADMIN__KEY_ENDPOINTS", "token")]).unwrap();
    assert_eq!(r.key_endpoints, KeyEndpoints::Token(Secret::new(TOKEN)));
    let r = load(&[("DEDUPD__ADMIN__TOKEN", TOKEN), ("DEDUPD__ADMIN__KEY_ENDPOINTS", "off")]).unwrap();
    assert_eq!(r.key_endpoints, KeyEndpoints::Off);
    assert_eq!(
        rejected(&[("DEDUPD__ADMIN__KEY_ENDPOINTS", "token")]),
        "invalid setting admin.key_endpoints = token: needs a bearer token: set admin.token_file (or admin.token)"
    );
    assert_eq!(
        rejected(&[("DEDUPD__ADMIN__KEY_ENDPOINTS", "open")]),
        "invalid setting admin.key_endpoints = open: expected auto, off or token"
    );
}

/// `DEDUPD_ADMIN_TOKEN` (what `dedupd keys` reads) is `admin.token` as
/// much as `DEDUPD__ADMIN__TOKEN`; both set to different tokens stops
/// the start naming both variables, never a token.
#[test]
fn the_admin_token_variable_is_read_too() {
    let r = load(&[("DEDUPD_ADMIN_TOKEN", TOKEN)]).unwrap();
    assert_eq!(r.key_endpoints, KeyEndpoints::Token(Secret::new(TOKEN)));
    assert_eq!(r.settings.admin.token, Secret::new(TOKEN));
    let r = load(&[("DEDUPD_ADMIN_TOKEN", TOKEN), ("DEDUPD__ADMIN__TOKEN", TOKEN)]).unwrap();
    assert_eq!(r.key_endpoints, KeyEndpoints::Token(Secret::new(TOKEN)));
    // Empty is unset.
    let r = load(&[("DEDUPD_ADMIN_TOKEN", ""), ("DEDUPD__ADMIN__TOKEN", TOKEN)]).unwrap();
    assert_eq!(r.key_endpoints, KeyEndpoints::Token(Secret::new(TOKEN)));
    assert_eq!(load(&[("DEDUPD_ADMIN_TOKEN", "")]).unwrap().key_endpoints, KeyEndpoints::Off);
    let other = "1110123456789abcdef";
    let e = rejected(&[("DEDUPD_ADMIN_TOKEN", TOKEN), ("DEDUPD__ADMIN__TOKEN", other)]);
    assert_eq!(
        e,
        "invalid setting admin.token = [redacted]: DEDUPD_ADMIN_TOKEN and DEDUPD__ADMIN__TOKEN are both set, to \
             different tokens: set one of them (DEDUPD_ADMIN_TOKEN, the variable `dedupd keys` reads too)"
    );
    assert!(!e.contains("0123456789"), "{e}");
    // The same rules as admin.token's.
    assert!(rejected(&[("DEDUPD_ADMIN_TOKEN", "short")]).starts_with("invalid setting admin.token = [redacted] (5"));
}

#[test]
fn a_bad_token_is_refused_without_showing_it() {
    for bad in ["short-0007", "has a space in it, 0007", "tab\there-0007-0007-0007"] {
        let e = rejected(&[("DEDUPD__ADMIN__TOKEN", bad)]);
        assert_eq!(
            e,
            format!(
                "invalid setting admin.token = [redacted] ({} bytes): 16 to 4096 visible ASCII characters (no \
                     spaces or control characters)",
                bad.len()
            )
        );
        assert!(!e.contains("0007"), "{e}");
    }
}

#[test]
fn the_token_file_is_read_at_start_up() {
    let dir = std::env::temp_dir().join(format!("dedupd-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    let path = file.display().to_string();
    let with_file = |extra: &[(&str, &str)]| {
        let mut env = vec![("DEDUPD__ADMIN__TOKEN_FILE", path.as_str())];
        env.extend_from_slice(extra);
        load(&env)
    };

    // A trailing newline (as `echo` and editors write) is not part of the token.
    std::fs::write(&file, format!("{TOKEN}\r\n")).unwrap();
    assert_eq!(with_file(&[]).unwrap().key_endpoints, KeyEndpoints::Token(Secret::new(TOKEN)));
    std::fs::write(&file, format!("{TOKEN} \n")).unwrap();
    let e = with_file(&[]).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "invalid setting admin.token_file = {path}: the token in it ([redacted] (20 bytes)): 16 to"
        )),
        "{e}"
    );
    assert!(!e.contains(TOKEN), "{e}");

    let e = with_file(&[("DEDUPD__ADMIN__TOKEN", TOKEN)]).unwrap_err().to_string();
    assert_eq!(
        e,
        format!("invalid setting admin.token = [redacted]: set admin.token or admin.token_file ({path}), not both")
    );

    std::fs::remove_dir_all(&dir).ok();
    let e = with_file(&[]).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("invalid setting admin.token_file = {path}: a readable file with the token (")),
        "{e}"
    );
}

/// The decaying kinds: an equal share of `filter.memory` per slice, the
/// seed, the kind and its parameters in the fingerprint; a budget too
/// small for a slice is refused naming setting, value and rule.
#[test]
fn decaying_kinds_are_resolved_and_validated() {
    let r = load(&[
        ("DEDUPD__FILTER__KIND", "rsbf"),
        ("DEDUPD__FILTER__MEMORY", "2MiB"),
        ("DEDUPD__FILTER__SEED", "7"),
        ("DEDUPD__FILTER__FPR", "0.1"),
    ])
    .unwrap();
    let crate::filter::KindSpec::Decaying(decaying) = &r.kind else { panic!("{:?}", r.kind) };
    // 2 MiB over 8 slices, in bits.
    assert_eq!((decaying.kind, decaying.memory_bits, decaying.seed), (DecayingKind::Rsbf, (2 << 20) / 8 * 8, 7));
    let choice = r.filter_choice().unwrap();
    assert_eq!(choice.decaying(), Some(decaying));
    assert!(choice.fingerprint().starts_with("kind=rsbf,"), "{}", choice.fingerprint());
    // The idle timer filter is the smallest there is.
    let params = choice.params();
    assert!(params.cells <= 64 * 2, "{params:?}");
    assert_eq!(load(&[]).unwrap().settings.filter.seed, crate::filter::decaying::DEFAULT_RNG_SEED);
    let stable = load(&[("DEDUPD__FILTER__KIND", "stable"), ("DEDUPD__FILTER__FPR", "0.1")]).unwrap();
    assert!(stable.filter_choice().unwrap().fingerprint().starts_with("kind=stable,"));

    assert_eq!(
        rejected(&[("DEDUPD__FILTER__KIND", "rsbf"), ("DEDUPD__FILTER__MEMORY", "100B")]),
        "invalid setting filter.memory = 100B: each of the 8 slices gets 12B (96 bits), which must give each of \
             the k = 6 rsbf arrays at least 64 bits (with filter.fpr = 0.01)"
    );
    assert!(rejected(&[("DEDUPD__FILTER__KIND", "bloom")]).contains("filter.kind = bloom: expected timer, "));
    let e = rejected(&[("DEDUPD__FILTER__KIND", "rsbf"), ("DEDUPD__FILTER__MEMORY", "16000000000GiB")]);
    assert!(e.starts_with("invalid setting filter.memory = 17179869184000000000B: at most 1TiB per slice"), "{e}");
    let e = rejected(&[("DEDUPD__FILTER__KIND", "stable"), ("DEDUPD__FILTER__MEMORY", "lots")]);
    assert!(e.contains("filter.memory") && e.contains("`lots` is not a memory size"), "{e}");
    assert_eq!(
        rejected(&[("DEDUPD__FILTER__KIND", "stable"), ("DEDUPD__FILTER__DELETABLE", "true")]),
        "invalid setting filter.deletable = true: only the timer kind can delete keys, not filter.kind = stable"
    );
}

#[test]
fn secrets_do_not_show_in_debug_output() {
    let r = load(&[
        ("DEDUPD__ADMIN__TOKEN", TOKEN),
        ("DEDUPD__KAFKA__SASL_PASSWORD", "pw-0007"),
        ("DEDUPD__KAFKA__SSL_KEY_PEM", "pem-0007"),
        ("DEDUPD__KAFKA__SASL_OAUTHBEARER_CLIENT_SECRET", "oauth-0007"),
        ("DEDUPD__KAFKA__SASL_USERNAME", "dedupd-user"),
    ])
    .unwrap();
    let shown = format!("{r:?} {r:#?} {}", Secret::new(TOKEN));
    for secret in [TOKEN, "pw-0007", "pem-0007", "oauth-0007"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(shown.contains("dedupd-user") && shown.contains("\"sasl.password\": \"[redacted]\""), "{shown}");
    for name in ["sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem", "sasl.oauthbearer.config"]
    {
        assert!(is_secret_setting(name), "{name}");
    }
    for name in ["sasl.username", "security.protocol", "ssl.ca.location", "session.timeout.ms"] {
        assert!(!is_secret_setting(name), "{name}");
    }
}

/// Every SASL mechanism docs/security.md lists is accepted (by the rules
/// and by librdkafka's own configuration check); GSSAPI, Kerberos settings,
/// OIDC and OAUTHBEARER without a token source are refused naming the
/// setting, the value, the reason and what to use instead.
#[test]
fn sasl_settings_are_checked_against_what_is_built() {
    let sasl = |extra: &[(&'static str, &'static str)]| {
        let mut env = vec![("DEDUPD__KAFKA__SECURITY_PROTOCOL", "SASL_SSL")];
        env.extend_from_slice(extra);
        env
    };
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "scram-sha-512"] {
        let r = load(&sasl(&[("DEDUPD__KAFKA__SASL_MECHANISMS", mechanism)])).unwrap();
        crate::kafka::clients::check(&r).unwrap();
    }
    let unsecured = [
        ("DEDUPD__KAFKA__SASL_MECHANISMS", "OAUTHBEARER"),
        ("DEDUPD__KAFKA__ENABLE_SASL_OAUTHBEARER_UNSECURE_JWT", "true"),
    ];
    crate::kafka::clients::check(&load(&sasl(&unsecured)).unwrap()).unwrap();
    // Without SASL no mechanism is needed.
    load(&[("DEDUPD__KAFKA__SECURITY_PROTOCOL", "ssl")]).unwrap();

    let instead = "use SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN (over SASL_SSL)";
    let gssapi =
        format!("GSSAPI (Kerberos) is not built in: this build's librdkafka has no Cyrus SASL library; {instead}");
    assert_eq!(
        rejected(&sasl(&[("DEDUPD__KAFKA__SASL_MECHANISMS", "GSSAPI")])),
        format!("invalid setting kafka.sasl.mechanisms = GSSAPI: {gssapi}")
    );
    // librdkafka's alias, and its default when SASL has no mechanism.
    assert_eq!(
        rejected(&[("DEDUPD__KAFKA__SASL_MECHANISM", "gssapi")]),
        format!("invalid setting kafka.sasl.mechanism = gssapi: {gssapi}")
    );
    assert_eq!(
        rejected(&sasl(&[])),
        format!(
            "invalid setting kafka.sasl.mechanisms = (unset: librdkafka's default, GSSAPI): security.protocol = \
             sasl_ssl needs a mechanism, and {gssapi}"
        )
    );
    assert_eq!(
        rejected(&sasl(&[
            ("DEDUPD__KAFKA__SASL_MECHANISMS", "PLAIN"),
            ("DEDUPD__KAFKA__SASL_KERBEROS_KEYTAB", "k.tab")
        ])),
        format!("invalid setting kafka.sasl.kerberos.keytab = k.tab: {gssapi}")
    );
    assert_eq!(
        rejected(&sasl(&[("DEDUPD__KAFKA__SASL_MECHANISMS", "SCRAM-SHA-1")])),
        "invalid setting kafka.sasl.mechanisms = SCRAM-SHA-1: one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, \
         OAUTHBEARER (one mechanism; GSSAPI is not built in)"
    );
    assert_eq!(
        rejected(&sasl(&[
            ("DEDUPD__KAFKA__SASL_MECHANISMS", "OAUTHBEARER"),
            ("DEDUPD__KAFKA__SASL_OAUTHBEARER_METHOD", "oidc"),
        ])),
        format!(
            "invalid setting kafka.sasl.oauthbearer.method = oidc: OIDC is not built in: this build's librdkafka \
             has no libcurl to fetch tokens with; {instead}"
        )
    );
    let e = rejected(&sasl(&[("DEDUPD__KAFKA__SASL_MECHANISMS", "OAUTHBEARER")]));
    assert!(
        e.starts_with(
            "invalid setting kafka.sasl.mechanisms = OAUTHBEARER: this build has no OAUTHBEARER token source"
        ) && e.contains("enable.sasl.oauthbearer.unsecure.jwt = true")
            && e.ends_with(instead),
        "{e}"
    );
    // Written in the file as librdkafka's dotted names.
    let file = "[kafka]\n\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanisms\" = \"GSSAPI\"\n";
    let e = Settings::load_from_str(file, Vec::new()).unwrap_err().to_string();
    assert!(e.starts_with("invalid setting kafka.sasl.mechanisms = GSSAPI: GSSAPI (Kerberos) is not built in"), "{e}");
}

/// config/dedupd.toml writes every setting at its built-in default (the
/// core sections' in `defaults.rs`, a feature's section's in its folder),
/// but for the example it gives of the dedup key.
#[test]
fn config_dedupd_toml_writes_the_built_in_defaults() {
    let built_in: Settings = defaults().build().and_then(|c| c.try_deserialize()).unwrap();
    let text = std::fs::read_to_string("config/dedupd.toml").unwrap();
    let shipped: Settings = defaults()
        .add_source(config::File::from_str(&text, config::FileFormat::Toml))
        .build()
        .and_then(|c| c.try_deserialize())
        .unwrap();
    let (built_in, mut shipped) =
        (leaves(&serde_json::to_value(&built_in).unwrap()), leaves(&serde_json::to_value(&shipped).unwrap()));
    assert_eq!(shipped.insert("input.key".into(), built_in["input.key"].clone()), Some("json:/click_id".into()));
    let differ: Vec<_> = built_in.iter().filter(|(k, v)| shipped.get(*k) != Some(v)).collect();
    assert!(differ.is_empty(), "config/dedupd.toml writes other values than the built-in defaults: {differ:?}");
}
