//! Repartition mode's first stage: input records → `<app>.slices`,
//! partition `H_S(key)`, unchanged (key, payload, timestamp, headers) plus a
//! `dedupd.source` stamp with the input topic/partition/offset.
//!
//! Input offsets are committed only after the slice records are
//! acknowledged (store offsets only after delivery), so a crash re-sends
//! records rather than losing them; the slice workers catch the re-sent
//! copies exactly by their stamps. Records whose key or time cannot be read
//! go to the dead-letter topic here, since they cannot be given a slice.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::Producer;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::slices::{OutputProducer, produce_copy};
use super::{Context, KafkaLayerError, clients, headers};
use crate::config::Resolved;
use crate::engine::{Extractor, RecordView, SourceRef};
use crate::filter::KeyHash;
use crate::metrics::Metrics;

const COMMIT_EVERY: Duration = Duration::from_millis(500);
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// What the router needs.
pub struct RouterDeps {
    pub cfg: Resolved,
    pub extractor: Extractor,
    pub slices: u32,
    pub seed: u64,
    pub producer: OutputProducer,
    pub metrics: Arc<Metrics>,
}

/// Next offsets to commit, per input partition.
type Pending = BTreeMap<(String, i32), i64>;

struct RouterContext {
    deps: Arc<RouterDeps>,
    pending: Arc<Mutex<Pending>>,
}

impl ClientContext for RouterContext {}

impl ConsumerContext for RouterContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            // Hand over cleanly: everything routed so far is delivered and committed.
            let revoked: Vec<(String, i32)> =
                tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
            if let Err(e) = commit(&self.deps, consumer, &self.pending, Some(&revoked)) {
                log::warn!("router: committing before a rebalance: {e}");
            }
        }
    }
}

/// Flushes the producer, then commits the pending offsets (of `only`, if given).
fn commit<C: ConsumerContext>(
    deps: &RouterDeps,
    consumer: &BaseConsumer<C>,
    pending: &Mutex<Pending>,
    only: Option<&[(String, i32)]>,
) -> Result<(), KafkaLayerError> {
    deps.producer.flush(FLUSH_TIMEOUT).context(|| "router: flushing slice records".into())?;
    if let Some(f) = deps.producer.context().failure() {
        return Err(KafkaLayerError::Topology(format!("router: {f}")));
    }
    let mut pending = pending.lock().expect("pending lock");
    let mut tpl = TopicPartitionList::new();
    pending.retain(|(topic, partition), next| {
        let chosen = only.is_none_or(|o| o.iter().any(|(t, p)| t == topic && p == partition));
        if chosen {
            let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(*next));
        }
        !chosen
    });
    if tpl.count() > 0 {
        consumer.commit(&tpl, CommitMode::Sync).context(|| "router: committing input offsets".into())?;
    }
    Ok(())
}

/// The router loop; returns when `stop` is set (after a final commit) or on a fatal error.
pub fn run(deps: Arc<RouterDeps>, stop: Arc<AtomicBool>) -> Result<(), KafkaLayerError> {
    let pending = Arc::new(Mutex::new(Pending::new()));
    let id = &deps.cfg.settings.app.id;
    let consumer: BaseConsumer<RouterContext> =
        clients::group_consumer(&deps.cfg, &format!("{id}.router"), &format!("{id}-router"))
            .create_with_context(RouterContext { deps: deps.clone(), pending: pending.clone() })
            .context(|| "creating the router consumer".into())?;
    let topics: Vec<&str> = deps.cfg.settings.input.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).context(|| format!("subscribing to {topics:?}"))?;
    log::info!("router: reading {topics:?} into {}", deps.cfg.slice_topic());
    let slice_topic = deps.cfg.slice_topic();
    let dead_letters = &deps.cfg.settings.output.dead_letter_topic;
    let mut last_commit = Instant::now();
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(msg)) => {
                deps.metrics.input_records.with_label_values(&[msg.topic()]).inc();
                let header_list: Vec<(&str, &[u8])> = msg
                    .headers()
                    .map(|h| h.iter().map(|h| (h.key, h.value.unwrap_or_default())).collect())
                    .unwrap_or_default();
                let view = RecordView {
                    key: msg.key(),
                    payload: msg.payload().unwrap_or_default(),
                    headers: &header_list,
                    timestamp_ms: msg.timestamp().to_millis(),
                };
                let stamp = SourceRef::stamp(msg.topic(), msg.partition(), msg.offset());
                let sent = match deps.extractor.extract(&view, 0) {
                    Ok(x) => {
                        let slice = KeyHash::of(deps.seed, &x.key).slice(deps.slices);
                        produce_copy(
                            &deps.producer,
                            &slice_topic,
                            slice as i32,
                            &msg,
                            &[(headers::SOURCE, stamp.as_bytes())],
                        )
                    }
                    Err(why) => {
                        deps.metrics.dead_letters.with_label_values(&[why.reason.as_str()]).inc();
                        let partition = msg.partition().rem_euclid(deps.slices as i32);
                        produce_copy(
                            &deps.producer,
                            dead_letters,
                            partition,
                            &msg,
                            &[
                                (headers::REASON, why.reason.as_str().as_bytes()),
                                (headers::DETAIL, why.detail.as_bytes()),
                                (headers::SOURCE, stamp.as_bytes()),
                            ],
                        )
                    }
                };
                if let Err(e) = sent {
                    break Err(e);
                }
                pending
                    .lock()
                    .expect("pending lock")
                    .insert((msg.topic().to_string(), msg.partition()), msg.offset() + 1);
            }
            Some(Err(e)) => log::warn!("router: consuming: {e}"),
            None => {}
        }
        if last_commit.elapsed() >= COMMIT_EVERY {
            last_commit = Instant::now();
            if let Err(e) = commit(&deps, &consumer, &pending, None) {
                break Err(e);
            }
        }
    };
    if result.is_ok() {
        commit(&deps, &consumer, &pending, None)?;
    }
    drop(consumer);
    result
}
