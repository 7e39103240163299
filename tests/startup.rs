//! Starting `dedupd run`: from any directory, with no settings file and only
//! the environment, it says which settings it uses and what it waits for
//! while it joins its consumer groups, and stops cleanly on SIGTERM even
//! before its partitions are assigned.

mod support;

use std::path::Path;
use std::time::Duration;

use rdkafka::consumer::Consumer;

use support::*;

/// A new, empty working directory (canonical: the daemon's messages show its real path).
fn temp_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique("dedupd-cwd"));
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

#[test]
fn runs_from_any_directory_on_the_environment_alone() {
    // A working directory without config/dedupd.toml.
    let dir = temp_dir();
    // A broker of its own that holds a new group's first rebalance for 12 s
    // (Kafka's group.initial.rebalance.delay.ms; 3 s by default): with
    // session.timeout.ms left at librdkafka's default, the wait is reported
    // every 5 s, with the hint.
    let (_broker, port) = own_broker(&dir, &["--group-initial-rebalance-delay", "12s"]);
    let mut client = rdkafka::ClientConfig::new();
    client.set("bootstrap.servers", format!("127.0.0.1:{port}"));
    let input = unique("clicks-envonly");
    create_topic_on(&client, &input, 2);
    let app = unique("envonly");
    let mut env = app_env(&app, &input, "repartition", 2);
    env.push(("DEDUPD__KAFKA__BROKERS".into(), format!("127.0.0.1:{port}")));
    let mut daemon = Daemon::spawn("envonly", &dir, &["run"], &env);

    let etc = Path::new("/etc/dedupd/dedupd.toml");
    let settings_line = if etc.exists() {
        format!("reading settings from {} (found on the search path)", etc.display())
    } else {
        format!(
            "no settings file found (looked in --config, DEDUPD_CONFIG, {}, {}); using built-in defaults and the \
             environment",
            dir.join("config/dedupd.toml").display(),
            etc.display()
        )
    };
    daemon.wait_log(&settings_line, Duration::from_secs(30));
    daemon.wait_log(
        &format!("router: joining consumer group {app}.router for topics {input}, waiting for an assignment"),
        Duration::from_secs(60),
    );
    daemon.wait_log(
        &format!("slice workers: joining consumer group {app} for topics {app}.slices, waiting for an assignment"),
        Duration::from_secs(60),
    );
    daemon.wait_log(
        "still waiting for an assignment after 5 s; a rebalance waits for every member of the group, for one that \
         died until its session times out (librdkafka's default kafka session.timeout.ms, 45 s; e.g. \
         DEDUPD__KAFKA__SESSION_TIMEOUT_MS=6000)",
        Duration::from_secs(30),
    );

    let status = daemon.terminate(Duration::from_secs(40));
    assert!(status.success(), "SIGTERM while joining: {status}\n{}", daemon.log_text());
    let log = daemon.log_text();
    assert!(log.contains("stopped cleanly"), "{log}");
    // Stopping mid-join is not a clean run: each consumer's LeaveGroup waits
    // behind its JoinGroup, which the broker holds until the rebalance ends,
    // and librdkafka gives up on it after 5 s with a REQTMOUT warning. Nothing
    // else may be logged at WARN or ERROR.
    let unexpected: Vec<&str> =
        warnings_and_errors(&log).into_iter().filter(|l| !l.contains("REQTMOUT [thrd:GroupCoordinator]")).collect();
    assert!(unexpected.is_empty(), "WARN/ERROR lines:\n{}", unexpected.join("\n"));
    std::fs::remove_dir_all(&dir).ok();
}

/// The topics dedupd creates take the broker's default replication factor
/// (CreateTopics with -1) unless `topics.replication_factor` sets one. The
/// test broker accepts -1 and creates them with its default, 1; asked for 2,
/// it keeps 2 (it accepts more replicas than it has brokers, and lists
/// itself twice).
#[test]
fn created_topics_take_the_brokers_default_replication_factor() {
    let input = unique("clicks-replication");
    create_topic(&input, 2);
    for (factor, replicas, said) in
        [(None, 1, "the broker's default replication factor".to_string()), (Some(2), 2, "replication factor 2".into())]
    {
        let app = unique("replication");
        let mut env = app_env(&app, &input, "repartition", 2);
        if let Some(f) = factor {
            env.push(("DEDUPD__TOPICS__REPLICATION_FACTOR".into(), f.to_string()));
        }
        let mut daemon = Daemon::start("replication", &env);
        for topic in [format!("{app}.out"), format!("{app}.ckpt"), format!("{app}.slices")] {
            daemon.wait_log(&format!("created topic {topic} (2 partitions, {said})"), Duration::from_secs(60));
            let md = reader().fetch_metadata(Some(&topic), Duration::from_secs(10)).unwrap();
            let t = md.topics().iter().find(|t| t.name() == topic).unwrap();
            assert_eq!(t.partitions().len(), 2, "{topic}");
            for p in t.partitions() {
                assert_eq!(p.replicas().len(), replicas, "{topic}/{}: replicas {:?}", p.id(), p.replicas());
            }
        }
        assert!(daemon.terminate(Duration::from_secs(40)).success(), "{}", daemon.log_text());
        daemon.assert_clean_log();
    }
}

#[test]
fn a_missing_settings_file_named_explicitly_is_an_error() {
    let dir = temp_dir();
    for (args, env, named_by) in [
        (vec!["run", "--config", "nowhere.toml"], vec![], "--config"),
        (vec!["run"], vec![("DEDUPD_CONFIG".to_string(), "nowhere.toml".to_string())], "DEDUPD_CONFIG"),
    ] {
        let mut daemon = Daemon::spawn("missing-config", &dir, &args, &env);
        let status = daemon.child.wait().unwrap();
        let log = daemon.log_text();
        assert!(!status.success(), "{log}");
        let want =
            format!("the settings file {} (named by {named_by}) does not exist", dir.join("nowhere.toml").display());
        assert!(log.contains(&want), "{log}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_log_check_finds_warnings_and_errors() {
    let log = "[2026-01-01T00:00:00Z INFO  dedupd::cli::run] admin endpoint\n\
               [2026-01-01T00:00:00Z WARN  librdkafka] librdkafka: CONFWARN x\n\
               a continuation line with WARN in it\n\
               [2026-01-01T00:00:01Z ERROR rdkafka::client] librdkafka: Global error: y\n";
    assert_eq!(
        warnings_and_errors(log),
        vec![
            "[2026-01-01T00:00:00Z WARN  librdkafka] librdkafka: CONFWARN x",
            "[2026-01-01T00:00:01Z ERROR rdkafka::client] librdkafka: Global error: y"
        ]
    );
}
