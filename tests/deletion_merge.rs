//! Issue 16, part 2, on the real broker with real `dedupd` processes:
//! `DELETE /v1/keys/{key}` (and `dedupd keys delete`) lets a re-sent copy
//! through and changes no other verdict; `dedupd checkpoint merge` shrinks
//! the slice count mid-stream without delivering any key again inside its
//! window.

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use support::*;

const TOKEN: &str = "deletion-merge-token-7c1e5a";

/// The records of an output topic by their `seq` field.
fn delivered_seqs(topic: &str) -> BTreeSet<u64> {
    read_all(topic, Duration::from_secs(3))
        .values()
        .flatten()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
            v["seq"].as_u64().unwrap()
        })
        .collect()
}

/// `n` clicks of keys `k0..k{keys}` (each key about n/keys times),
/// `gap_ms` apart from `from_ts`, numbered from `first_seq`, on partition 0.
fn clicks(first_seq: u64, n: u64, keys: u64, from_ts: i64, gap_ms: i64) -> Vec<Rec> {
    (0..n)
        .map(|i| {
            let seq = first_seq + i;
            let key = format!("k{}", (seq * 7919) % keys);
            click(seq, &key, from_ts + i as i64 * gap_ms, 0)
        })
        .collect()
}

fn deletable_env(app: &str, input: &str, slices: u32) -> Vec<(String, String)> {
    let mut env = app_env(app, input, "repartition", slices);
    env.push(("DEDUPD__FILTER__DELETABLE".into(), "true".into()));
    env.push(("DEDUPD__ADMIN__TOKEN".into(), TOKEN.into()));
    env
}

/// Two apps read one input: one gets deletes, the other none. After the
/// deletes, every key is sent again inside the window: the deleted keys'
/// copies are delivered by the first app only, and every other copy gets
/// the same verdict from both.
#[test]
fn delete_lets_a_resent_copy_through_and_changes_nothing_else() {
    let input = unique("del-in");
    create_topic(&input, 1);
    let (with_app, without_app) = (unique("del-with"), unique("del-without"));
    let mut with = Daemon::start("delete-with", &deletable_env(&with_app, &input, 4));
    let mut without = Daemon::start("delete-without", &deletable_env(&without_app, &input, 4));
    with.wait_ready(Duration::from_secs(60));
    without.wait_ready(Duration::from_secs(60));

    // 400 clicks of 300 keys over 4 s: every key once or twice.
    let first = clicks(0, 400, 300, BASE_TS, 10);
    produce(&input, &first);
    wait_processed(&[&with], 400, Duration::from_secs(60));
    wait_processed(&[&without], 400, Duration::from_secs(60));

    let delete = |d: &Daemon, key: &str| {
        let auth = format!("Bearer {TOKEN}");
        http_request(d.admin_port, "DELETE", &format!("/v1/keys/{key}"), &[("Authorization", &auth)]).unwrap()
    };
    // Without the token: refused, nothing deleted.
    let open = http_request(with.admin_port, "DELETE", "/v1/keys/k1", &[]).unwrap();
    assert_eq!(open.code, 401, "{open:?}");
    let answer = delete(&with, "k1");
    assert_eq!(answer.code, 200, "{answer:?}");
    let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["deleted"], true, "{body}");
    // The CLI.
    let cli = Command::new(env!("CARGO_BIN_EXE_dedupd"))
        .args(["keys", "delete", "k2", "--admin", &format!("http://127.0.0.1:{}", with.admin_port)])
        .env("DEDUPD_ADMIN_TOKEN", TOKEN)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&cli.stdout);
    assert!(cli.status.success(), "{said} {}", String::from_utf8_lossy(&cli.stderr));
    assert!(said.contains("\"deleted\": true"), "{said}");
    // A key never sent: 404 with the reason; deleting k1 again: gone already.
    for key in ["never-sent", "k1"] {
        let answer = delete(&with, key);
        assert_eq!(answer.code, 404, "{key}: {answer:?}");
        assert!(answer.body.contains("not in the window"), "{answer:?}");
    }

    // An input record that carries a `dedupd.delete` header of its own (and
    // the Kafka key k7): a record like any other — judged (a copy of k5),
    // not taken for a delete request of k7 and not dropped.
    let mut forged = click(5_000, "k5", BASE_TS + 9_990, 0);
    forged.key = Some(b"k7".to_vec());
    forged.headers.push(("dedupd.delete".into(), Vec::new()));
    produce(&input, &[forged]);
    // Every key again, 10 s later (inside the 60 s window).
    let again = clicks(400, 600, 300, BASE_TS + 10_000, 10);
    produce(&input, &again);
    wait_processed(&[&with], 1001, Duration::from_secs(60));
    wait_processed(&[&without], 1001, Duration::from_secs(60));

    let (got_with, got_without) =
        (delivered_seqs(&format!("{with_app}.out")), delivered_seqs(&format!("{without_app}.out")));
    let key_of = |seq: u64| format!("k{}", (seq * 7919) % 300);
    let first_copy_after = |key: &str| (400..1000).find(|&s| key_of(s) == key).unwrap();
    let expected_extra: BTreeSet<u64> = ["k1", "k2"].iter().map(|k| first_copy_after(k)).collect();
    let extra: BTreeSet<u64> = got_with.difference(&got_without).copied().collect();
    let missing: BTreeSet<u64> = got_without.difference(&got_with).copied().collect();
    assert_eq!(extra, expected_extra, "only the first copy of each deleted key is delivered in addition");
    assert!(missing.is_empty(), "records delivered without the delete but not with it: {missing:?}");
    // The stream itself was deduplicated: each key once in the first part
    // (k7 was not forgotten by the forged record, and the forged copy of k5
    // was not delivered).
    assert_eq!(got_without.len(), 300, "{} distinct keys delivered", got_without.len());
    assert!(!got_with.contains(&5_000) && !got_without.contains(&5_000));

    for d in [&mut with, &mut without] {
        d.terminate(Duration::from_secs(30));
        d.assert_clean_log();
    }
}

/// A broker that stops answering (SIGSTOP) while deletes are requested:
/// three concurrent requests each answer 202 "written: unknown" after their
/// own 4 s wait — not 503 "not written" (the record stays queued and is
/// delivered later), and not one after another behind a shared lock (the
/// third would wait ~12 s). Once the broker answers again, all three apply.
#[test]
fn deletes_unconfirmed_by_a_silent_broker_answer_202_concurrently_and_apply_later() {
    let dir = std::env::temp_dir().join(unique("dedupd-del-silent"));
    std::fs::create_dir_all(&dir).unwrap();
    let (broker, port) = own_broker(&dir, &[]);
    let mut own = rdkafka::ClientConfig::new();
    own.set("bootstrap.servers", format!("127.0.0.1:{port}"));
    let input = unique("del-silent-in");
    create_topic_on(&own, &input, 1);
    let app = unique("del-silent");
    let mut env = deletable_env(&app, &input, 2);
    env.push(("DEDUPD__KAFKA__BROKERS".into(), format!("127.0.0.1:{port}")));
    let mut d = Daemon::start("delete-silent", &env);
    d.wait_ready(Duration::from_secs(60));
    produce_on(&own, &input, &clicks(0, 100, 50, BASE_TS, 10));
    wait_processed(&[&d], 100, Duration::from_secs(60));

    let signal = |sig: &str| {
        let ok = Command::new("kill").args([sig, &broker.0.id().to_string()]).status().unwrap().success();
        assert!(ok, "kill {sig}");
    };
    signal("-STOP");
    let answers: Vec<Option<HttpAnswer>> = std::thread::scope(|s| {
        let handles: Vec<_> = ["k1", "k2", "k3"]
            .iter()
            .map(|key| {
                let port = d.admin_port;
                s.spawn(move || {
                    let auth = format!("Bearer {TOKEN}");
                    http_request(port, "DELETE", &format!("/v1/keys/{key}"), &[("Authorization", &auth)])
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    signal("-CONT");
    for a in &answers {
        let a = a.as_ref().expect("an answer within the client's 5 s");
        assert_eq!(a.code, 202, "{a:?}");
        let body: serde_json::Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(
            (&body["deleted"], &body["written"]),
            (&serde_json::Value::Null, &serde_json::json!("unknown")),
            "{body}"
        );
        assert!(body["reason"].as_str().unwrap().contains("may still be written and applied"), "{body}");
    }
    // Queued, not lost: the records reach the log and the slices apply them.
    wait_for("three deletes applied", Duration::from_secs(60), || {
        d.log_text().matches(": deleted a key (request at slice offset").count() == 3
    });
    d.terminate(Duration::from_secs(30));
    std::fs::remove_dir_all(&dir).ok();
}

/// A 16-slice daemon judges a stream and stops; `dedupd checkpoint merge`
/// makes 8 slices of its snapshots; an 8-slice daemon goes on with the
/// stream: no key seen before the merge is delivered again inside its
/// window, and new keys are.
#[test]
fn merge_16_to_8_mid_stream_forgets_no_key() {
    merge_16_to_8_mid_stream("timer");
}

/// The same with the cuckoo kind: the old slices' tables stand side by
/// side in the new ones.
#[test]
fn merge_16_to_8_mid_stream_forgets_no_key_cuckoo() {
    merge_16_to_8_mid_stream("cuckoo");
}

fn merge_16_to_8_mid_stream(kind: &str) {
    let input = unique("merge-in");
    create_topic(&input, 1);
    let app = unique("merge");
    let mut env16 = app_env(&app, &input, "repartition", 16);
    env16.push(("DEDUPD__FILTER__KIND".into(), kind.into()));
    let mut before = Daemon::start(&format!("merge-16-{kind}"), &env16);
    before.wait_ready(Duration::from_secs(60));
    // 800 clicks of 500 keys over 8 s.
    produce(&input, &clicks(0, 800, 500, BASE_TS, 10));
    wait_processed(&[&before], 800, Duration::from_secs(60));
    before.terminate(Duration::from_secs(30));
    before.assert_clean_log();

    let merge = |from: &str, to: &str| {
        Command::new(env!("CARGO_BIN_EXE_dedupd"))
            .current_dir(root())
            .args(["checkpoint", "merge", "--config", "config/dedupd.toml", "--from", from, "--to", to])
            .env_remove("DEDUPD_CONFIG")
            .env("DEDUPD__KAFKA__BROKERS", broker())
            .envs(env16.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .unwrap()
    };
    // Growing is refused with the rule, and writes nothing.
    let grow = merge("16", "32");
    assert!(!grow.status.success());
    assert!(String::from_utf8_lossy(&grow.stderr).contains("below the old one"), "{grow:?}");
    let done = merge("16", "8");
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{said}\n{}", String::from_utf8_lossy(&done.stderr));
    assert!(said.contains("slice 3 <- slices [6, 7]"), "{said}");

    let mut env8 = env16.clone();
    env8.retain(|(k, _)| k != "DEDUPD__FILTER__SLICES");
    env8.push(("DEDUPD__FILTER__SLICES".into(), "8".into()));
    let mut after = Daemon::start(&format!("merge-8-{kind}"), &env8);
    after.wait_ready(Duration::from_secs(60));
    // Every old key again 10 s later (inside the 60 s window), and 300 new keys.
    let mut again = clicks(800, 500, 500, BASE_TS + 10_000, 10);
    again.extend((0..300u64).map(|i| click(1300 + i, &format!("new{i}"), BASE_TS + 15_000 + i as i64 * 10, 0)));
    produce(&input, &again);
    wait_processed(&[&after], 1600, Duration::from_secs(60));
    let delivered = delivered_seqs(&format!("{app}.out"));
    let old_again: Vec<u64> = delivered.iter().copied().filter(|s| (800..1300).contains(s)).collect();
    assert!(old_again.is_empty(), "keys seen before the merge delivered again: seqs {old_again:?}");
    let new_keys = delivered.iter().filter(|&&s| s >= 1300).count();
    assert!(new_keys >= 295, "only {new_keys} of 300 new keys delivered");
    assert_eq!(delivered.iter().filter(|&&s| s < 800).count(), 500, "the first part: each key once");
    // The merged slices report the old slices' counts and go on from them.
    let slices = after.slices().unwrap();
    assert_eq!(slices.as_array().unwrap().len(), 8, "{slices}");
    after.terminate(Duration::from_secs(30));
    after.assert_clean_log();
}
