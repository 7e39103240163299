//! The topics dedupd owns: created when missing, checked when present.
//!
//! Slice topic (repartition mode), checkpoint, dead-letter, output and
//! duplicates topics all need at least one partition per slice, because
//! slice `s` writes partition `s` of each (that is what makes "the last
//! output record of partition s" meaningful on restore). An output topic
//! with fewer partitions than slices is refused, never silently widened.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::Consumer;

use super::clients::{self, PlainContext, Reader};
use super::{Context, KafkaLayerError};
use crate::config::{Resolved, SlicingMode};

pub mod needs;

const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// Partitions of `topic`, or `None` if it does not exist.
pub fn partition_count(consumer: &Reader, topic: &str) -> Result<Option<usize>, KafkaLayerError> {
    let md = consumer.fetch_metadata(Some(topic), METADATA_TIMEOUT).inspect_err(|_| {
        // rdkafka hands a client's log lines and error events over only when
        // it is polled: serve them now, so that a connection failure behind
        // this error (a refused certificate, a wrong password) is known to
        // its message (clients::with_connection_failure). Nothing is
        // assigned to this client, so no record is consumed. A poll returns
        // at each error event; it returns None once 50 ms pass without one.
        for _ in 0..1000 {
            if consumer.poll(Duration::from_millis(50)).is_none() {
                break;
            }
        }
    });
    let md = md.context(|| format!("metadata of {topic}"))?;
    Ok(md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.partitions().len()))
}

/// Creates the topics dedupd owns and checks the layout; returns the number
/// of slices (the partitions of the slice topic).
pub async fn ensure(cfg: &Resolved) -> Result<u32, KafkaLayerError> {
    let s = &cfg.settings;
    let slices = s.filter.slices as usize;
    let probe: Reader = clients::reader(cfg, &format!("{}-topics", s.app.id))
        .create_with_context(PlainContext)
        .context(|| "creating a metadata client".into())?;

    if cfg.slicing == SlicingMode::InputPartitions {
        let input = &s.input.topics[0];
        match partition_count(&probe, input)? {
            None => return Err(KafkaLayerError::Topics(format!("the input topic {input} does not exist"))),
            Some(n) if n != slices => {
                return Err(KafkaLayerError::Topics(format!(
                    "invalid setting filter.slices = {slices}: with slicing.mode = input-partitions it must equal the \
                     partitions of the input topic {input} ({n})"
                )));
            }
            Some(_) => {}
        }
    }

    let wanted = needs::topics(cfg);
    let mut missing = Vec::new();
    for needs::TopicNeed { name: topic, partitions: need, configs: config, .. } in &wanted {
        match partition_count(&probe, topic)? {
            Some(have) if have < *need => {
                return Err(KafkaLayerError::Topics(format!(
                    "topic {topic} has {have} partitions but {need} slices need at least {need}: slice s writes \
                     partition s. Add partitions to it (kafka-topics --alter --partitions {need}) or lower filter.slices"
                )));
            }
            Some(_) => {}
            None => missing.push((topic.clone(), *need, config.clone())),
        }
    }
    if missing.is_empty() {
        return Ok(slices as u32);
    }
    if !s.topics.auto_create {
        let names: Vec<&str> = missing.iter().map(|m| m.0.as_str()).collect();
        return Err(KafkaLayerError::Topics(format!(
            "missing topics {names:?} and topics.auto_create = false: create them with at least {slices} partitions \
             (`dedupd topics` lists each with its configs)"
        )));
    }
    let admin: AdminClient<PlainContext> = clients::base(cfg, &format!("{}-admin", s.app.id), clients::Role::Producer)
        .create_with_context(PlainContext)
        .context(|| "creating an admin client".into())?;
    let new: Vec<NewTopic> = missing
        .iter()
        .map(|(t, n, config)| {
            let mut nt = NewTopic::new(t, *n as i32, TopicReplication::Fixed(s.topics.replication_factor));
            for (k, v) in config {
                nt = nt.set(k, v.as_str());
            }
            nt
        })
        .collect();
    let results = admin
        .create_topics(&new, &AdminOptions::new().operation_timeout(Some(METADATA_TIMEOUT)))
        .await
        .context(|| "creating topics".into())?;
    // -1 asks the broker for its default.replication.factor (CreateTopics v4,
    // Kafka 2.4 on).
    let replication = match s.topics.replication_factor {
        -1 => "the broker's default replication factor".to_string(),
        n => format!("replication factor {n}"),
    };
    for r in results {
        match r {
            Ok(name) => {
                let partitions = missing.iter().find(|m| m.0 == name).map_or(0, |m| m.1);
                log::info!("created topic {name} ({partitions} partitions, {replication})");
            }
            // Another member of the group created it first.
            Err((name, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => log::info!("topic {name} exists"),
            Err((name, code)) => {
                return Err(KafkaLayerError::Topics(format!("cannot create topic {name}: {code}")));
            }
        }
    }
    // Wait until the metadata shows them, so the consumers do not race the creation.
    for (topic, need, _) in &missing {
        let deadline = std::time::Instant::now() + METADATA_TIMEOUT;
        while partition_count(&probe, topic)? < Some(*need) {
            if std::time::Instant::now() > deadline {
                return Err(KafkaLayerError::Timeout(format!("topic {topic} did not appear after creation")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(slices as u32)
}
