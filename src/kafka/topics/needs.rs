//! What an application needs of its Kafka cluster, from its settings alone:
//! the topics dedupd writes (name, partitions, configs) and the ACLs of its
//! principal. `dedupd run` creates the missing topics from this list (with
//! `topics.auto_create`); `dedupd topics` prints it for clusters where
//! topics and ACLs are made by hand or by a pipeline.

use serde::Serialize;

use crate::config::{Resolved, SlicingMode, Tier};
use crate::kafka::clients;

/// A topic dedupd writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopicNeed {
    pub name: String,
    /// At least this many: slice `s` writes partition `s`.
    pub partitions: usize,
    /// Topic configs it is created with.
    pub configs: Vec<(&'static str, String)>,
    /// What dedupd keeps there.
    pub role: &'static str,
}

/// An ACL the application's principal needs (literal resource names).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AclNeed {
    /// `topic`, `group` or `cluster`.
    pub resource: &'static str,
    pub name: String,
    pub operations: Vec<&'static str>,
    pub why: &'static str,
}

/// The topics dedupd writes, with the partitions and configs it creates them
/// with. Every one takes the largest record its producers send: a broker's
/// default `max.message.bytes` (Kafka's ~1 MB) would refuse a copy of a
/// larger input record on its way to the slice, output or dead-letter
/// topic, and a checkpoint chunk of more than 1 MB.
pub fn topics(cfg: &Resolved) -> Vec<TopicNeed> {
    let s = &cfg.settings;
    let slices = s.filter.slices as usize;
    let largest = clients::largest_record(cfg);
    let need = |name: &str, partitions: usize, role: &'static str, extra: &[(&'static str, &str)]| {
        let mut configs = vec![("max.message.bytes", largest.clone())];
        configs.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        TopicNeed { name: name.to_string(), partitions, configs, role }
    };
    let mut topics = vec![
        need(&s.output.topic, slices, "distinct records, partition = slice", &[]),
        need(&s.output.dead_letter_topic, slices, "records that cannot be read, with the reason", &[]),
        need(&s.checkpoint.topic, slices, "slice snapshots", &[("cleanup.policy", "compact")]),
        need(&cfg.flush_topic(), slices, "idle flushes and policy ranges, replayed on restore", &[]),
    ];
    for (topic, role) in [
        (&s.output.duplicates_topic, "duplicates, partition = slice"),
        (&s.output.late_topic, "copies of late records"),
        (&s.flag.topic, "flagged records"),
    ] {
        if !topic.is_empty() {
            topics.push(need(topic, slices, role, &[]));
        }
    }
    if cfg.slicing != SlicingMode::InputPartitions {
        topics.push(need(&cfg.slice_topic(), slices, "the slice log the routers write", &[]));
    }
    // A sparse tree's verdicts: any partition count works (slice s writes s mod partitions).
    if matches!(cfg.tier, Tier::SparseLeaf | Tier::SparseRoot) {
        topics.push(need(&s.tier.verdict_topic, 1, "the root's verdicts for the leaves", &[]));
    }
    topics
}

/// The ACLs of the application's principal: read its input; read, write and
/// describe (and create, with `topics.auto_create`) the topics it writes;
/// its consumer groups; idempotent writes and the broker's configs.
pub fn acls(cfg: &Resolved) -> Vec<AclNeed> {
    let s = &cfg.settings;
    let mut acls: Vec<AclNeed> = s
        .input
        .topics
        .iter()
        .map(|t| AclNeed { resource: "topic", name: t.clone(), operations: vec!["Read", "Describe"], why: "the input" })
        .collect();
    let mut own = vec!["Read", "Write", "Describe", "DescribeConfigs"];
    if s.topics.auto_create {
        own.push("Create");
    }
    for t in topics(cfg) {
        acls.push(AclNeed {
            resource: "topic",
            name: t.name,
            operations: own.clone(),
            why: "written by dedupd, read back on restore; its limits read at start-up",
        });
    }
    let app = &s.app.id;
    acls.push(AclNeed {
        resource: "group",
        name: app.clone(),
        operations: vec!["Read", "Describe"],
        why: "the slice consumers",
    });
    if cfg.slicing != SlicingMode::InputPartitions {
        acls.push(AclNeed {
            resource: "group",
            name: format!("{app}.router"),
            operations: vec!["Read", "Describe"],
            why: "the routers, which commit their input positions",
        });
    }
    acls.push(AclNeed {
        resource: "cluster",
        name: "kafka-cluster".into(),
        operations: vec!["IdempotentWrite", "DescribeConfigs"],
        why: "idempotent producers (brokers before Kafka 2.8); the broker's message.max.bytes",
    });
    acls
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(env: &[(&str, &str)]) -> Resolved {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        crate::config::Settings::load_from(None, env).unwrap()
    }

    #[test]
    fn every_topic_the_mode_writes_is_listed_with_its_partitions() {
        let cfg = load(&[("DEDUPD__APP__ID", "billing"), ("DEDUPD__OUTPUT__DUPLICATES_TOPIC", "billing.dups")]);
        let all = topics(&cfg);
        let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "billing.distinct",
                "billing.dead-letter",
                "billing.checkpoints",
                "billing.flushes",
                "billing.dups",
                "billing.slices"
            ]
        );
        assert!(all.iter().all(|t| t.partitions == 8), "one partition per slice");
        let checkpoints = all.iter().find(|t| t.name == "billing.checkpoints").unwrap();
        assert!(checkpoints.configs.contains(&("cleanup.policy", "compact".to_string())));
        let input_partitions = load(&[("DEDUPD__SLICING__MODE", "input-partitions")]);
        assert!(topics(&input_partitions).iter().all(|t| !t.name.ends_with(".slices")), "no slice log");
    }

    #[test]
    fn the_principal_reads_its_input_and_owns_its_topics_and_groups() {
        let cfg = load(&[("DEDUPD__APP__ID", "billing"), ("DEDUPD__INPUT__TOPICS", "clicks")]);
        let all = acls(&cfg);
        let input = all.iter().find(|a| a.name == "clicks").unwrap();
        assert_eq!(input.operations, ["Read", "Describe"]);
        let out = all.iter().find(|a| a.name == "billing.distinct").unwrap();
        assert!(out.operations.contains(&"Write") && out.operations.contains(&"Create"), "{out:?}");
        let groups: Vec<&str> = all.iter().filter(|a| a.resource == "group").map(|a| a.name.as_str()).collect();
        assert_eq!(groups, ["billing", "billing.router"]);
        let by_hand = load(&[("DEDUPD__TOPICS__AUTO_CREATE", "false")]);
        assert!(acls(&by_hand).iter().all(|a| !a.operations.contains(&"Create")), "no Create without auto_create");
    }
}
