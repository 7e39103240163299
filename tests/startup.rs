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

/// `dedupd ARGS` in the checkout with `env` (and no other dedupd setting
/// from this process's environment): (success, stdout, stderr).
fn dedupd(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_dedupd"));
    command.args(args).current_dir(root());
    for (name, _) in std::env::vars().filter(|(k, _)| k.starts_with("DEDUPD_") && k != "DEDUPD_BROKER_PORT") {
        command.env_remove(name);
    }
    let out = command.envs(env.iter().copied()).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `dedupd check-config FILE` refuses what `dedupd run` refuses, with the
/// daemon's error (but for how the file was named), and says what the
/// filters will take; `--print-resolved` prints settings that load back,
/// without their secrets.
#[test]
fn check_config_gives_the_daemons_errors_and_the_sizing() {
    let dir = temp_dir();
    let file = dir.join("dedupd.toml");
    let path = file.display().to_string();

    // Valid: the sizing of 2 slices for 20 000 keys at 1%.
    std::fs::write(&file, "[filter]\nslices = 2\nexpected_keys = 20000\n").unwrap();
    let (ok, out, err) = dedupd(&["check-config", &path], &[]);
    assert!(ok, "{out}{err}");
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some(format!("valid: reading settings from {path} (named on the command line) and the environment").as_str())
    );
    let sizing = lines.next().unwrap_or_default().to_string();
    assert!(
        sizing.starts_with(
            "filter sizing: timer, 2 slices, each 115072 cells of 8 bits (tick 4762ms), k = 7 hashes; 116352 bytes"
        ),
        "{out}"
    );

    // Invalid: the file, the environment, a setting librdkafka refuses.
    for (text, env, want) in [
        ("[filter]\nfpr = 1.5\n", vec![], "invalid setting filter.fpr = 1.5: must be greater than 0 and less than 1"),
        (
            "",
            vec![("DEDUPD__INPUT__START", "newest")],
            "invalid setting input.start = newest: expected earliest or latest",
        ),
        (
            "",
            vec![("DEDUPD__KAFKA__SECURITY_PROTOCOL", "carrier-pigeon")],
            "invalid setting kafka.security.protocol = carrier-pigeon: librdkafka refuses it",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let (ok, out, checked) = dedupd(&["check-config", &path], &env);
        assert!(!ok && out.is_empty(), "{out}{checked}");
        let (ok, _, ran) = dedupd(&["run", "--config", &path], &env);
        assert!(!ok, "{ran}");
        assert!(checked.contains(want), "{checked}");
        // The same error, the file named as each command was given it.
        let run_error = ran.lines().find(|l| l.starts_with("dedupd: ")).unwrap_or_default();
        assert_eq!(
            checked.trim_end(),
            run_error.replace("(named by --config)", "(named on the command line)"),
            "{ran}"
        );
    }
    let (ok, _, err) = dedupd(&["check-config", "nowhere.toml"], &[]);
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "the settings file {} (named on the command line) does not exist",
            root().join("nowhere.toml").display()
        )),
        "{err}"
    );

    // --print-resolved: the settings, no secret, loading back to the same sizing.
    std::fs::write(&file, "[filter]\nslices = 2\nexpected_keys = 20000\n").unwrap();
    let secrets = [("DEDUPD__KAFKA__SASL_PASSWORD", "pw-S3CRET"), ("DEDUPD_ADMIN_TOKEN", "token-S3CRET-0123456789")];
    let (ok, printed, err) = dedupd(&["check-config", "--print-resolved", &path], &secrets);
    assert!(ok, "{err}");
    assert!(!printed.contains("S3CRET"), "{printed}");
    assert!(printed.contains(&format!("# {sizing}\n")), "{printed}");
    assert!(
        printed.contains("\"sasl.password\" = \"[redacted]\"\n") && printed.contains("\nslices = 2\n"),
        "{printed}"
    );
    let again = dir.join("resolved.toml");
    std::fs::write(&again, printed.replace("token = \"[redacted]\"", "token = \"\"")).unwrap();
    let (ok, out, err) = dedupd(&["check-config", &again.display().to_string()], &[]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().nth(1), Some(sizing.as_str()));
    std::fs::remove_dir_all(&dir).ok();
}

/// `dedupd run` logs the filter's sizing once per start, as `dedupd
/// check-config` prints it, and the slices then hold what it says.
#[test]
fn the_daemon_logs_its_sizing_once() {
    let input = unique("clicks-sizing");
    create_topic(&input, 2);
    let app = unique("sizing");
    let env = app_env(&app, &input, "input-partitions", 2);
    let mut daemon = Daemon::start("sizing", &env);
    daemon.wait_ready(Duration::from_secs(60));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (ok, out, err) = dedupd(&["check-config", "config/dedupd.toml"], &env);
    assert!(ok, "{err}");
    let sizing = out.lines().nth(1).unwrap().to_string();
    let log = daemon.log_text();
    let logged: Vec<&str> = log.lines().filter(|l| l.contains("filter sizing: ")).collect();
    assert_eq!(logged.len(), 1, "{log}");
    assert!(logged[0].ends_with(&sizing), "{} vs\n{sizing}", logged[0]);
    // "... ; N bytes (...) per slice in one generation": what each new slice holds.
    let per_slice: u64 = sizing.split("; ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    wait_for("both slices restored", Duration::from_secs(60), || {
        daemon.slices().and_then(|s| s.as_array().map(Vec::len)) == Some(2)
    });
    let slices = daemon.slices().unwrap();
    let memory: Vec<u64> = slices.as_array().unwrap().iter().map(|s| s["memory_bytes"].as_u64().unwrap()).collect();
    assert_eq!(memory, vec![per_slice; 2], "{slices}");
    assert!(daemon.terminate(Duration::from_secs(30)).success());
    daemon.assert_clean_log();
}

/// A cluster where topics are made by hand: with `topics.auto_create =
/// false` the daemon refuses to start without its topics, naming `dedupd
/// topics`; the topics made from `dedupd topics --json` (names, partitions,
/// configs) by an admin client let it run and deliver.
#[test]
fn topics_made_from_dedupd_topics_json_run_the_daemon_without_auto_create() {
    let input = unique("clicks-by-hand");
    create_topic(&input, 2);
    let app = unique("by-hand");
    let mut env = app_env(&app, &input, "repartition", 2);
    env.push(("DEDUPD__TOPICS__AUTO_CREATE".into(), "false".into()));
    let mut refused = Daemon::start("by-hand-missing", &env);
    assert!(!refused.wait_exit(Duration::from_secs(60), "dedupd started without its topics").success());
    assert!(refused.log_text().contains("topics.auto_create = false"), "{}", refused.log_text());
    assert!(refused.log_text().contains("`dedupd topics` lists each"), "{}", refused.log_text());

    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (ok, stdout, stderr) = dedupd(&["topics", "--json", "config/dedupd.toml"], &pairs);
    assert!(ok, "{stderr}");
    let needs: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let topics = needs["topics"].as_array().unwrap();
    let names: Vec<&str> = topics.iter().map(|t| t["name"].as_str().unwrap()).collect();
    for own in [".out", ".dlq", ".ckpt", ".flushes", ".slices"] {
        assert!(names.contains(&format!("{app}{own}").as_str()), "{own} missing from {names:?}");
    }
    assert!(needs["acls"].as_array().unwrap().iter().any(|a| a["name"] == input.as_str()), "{stdout}");
    for t in topics {
        let configs: Vec<(&str, &str)> =
            t["configs"].as_object().unwrap().iter().map(|(k, v)| (k.as_str(), v.as_str().unwrap())).collect();
        create_topic_with(t["name"].as_str().unwrap(), t["partitions"].as_i64().unwrap() as i32, &configs);
    }

    let mut daemon = Daemon::start("by-hand", &env);
    daemon.wait_ready(Duration::from_secs(60));
    let records: Vec<Rec> =
        (0..100).map(|i| click(i, &format!("k{}", i % 50), BASE_TS + i as i64, (i % 2) as i32)).collect();
    produce(&input, &records);
    wait_processed(&[&daemon], 100, Duration::from_secs(60));
    assert_eq!(output_seqs(&local_broker(), &app), (0..50).collect::<Vec<_>>(), "the first copy of each key");
    assert!(!daemon.log_text().contains("created topic"), "it created none:\n{}", daemon.log_text());
    assert!(daemon.terminate(Duration::from_secs(40)).success(), "{}", daemon.log_text());
}
