//! librdkafka settings: the user's pass-through `[kafka]` table first, then
//! the settings dedupd's correctness depends on, which the user cannot turn off.

use rdkafka::ClientConfig;

use crate::config::Resolved;

/// Base settings for any client of this daemon.
pub fn base(cfg: &Resolved, client_id: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.settings.kafka.brokers);
    c.set("client.id", client_id);
    for (k, v) in cfg.settings.kafka.client_settings() {
        c.set(k, v);
    }
    c
}

/// A group consumer that never auto-commits (positions come from snapshots
/// and explicit commits) and rebalances cooperatively.
pub fn group_consumer(cfg: &Resolved, group: &str, client_id: &str) -> ClientConfig {
    let mut c = base(cfg, client_id);
    c.set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky");
    // The broker answers a fetch as soon as data arrives or after this long:
    // librdkafka's 500 ms default would add up to half a second per stage.
    if c.get("fetch.wait.max.ms").is_none() {
        c.set("fetch.wait.max.ms", "20");
    }
    // A partition whose prefetched records reach `queued.min.messages` is
    // fetched again after this long: librdkafka's 1 s default stalls a
    // consumer that bounds its prefetch (the router does) for a second at a time.
    if c.get("fetch.queue.backoff.ms").is_none() {
        c.set("fetch.queue.backoff.ms", "10");
    }
    // Bounded memory: librdkafka's prefetch queue may otherwise hold 64 MiB
    // (its default) before it stops fetching. 16 MiB is still hundreds of
    // thousands of small records, several fetches ahead.
    if c.get("queued.max.messages.kbytes").is_none() {
        c.set("queued.max.messages.kbytes", "16384");
    }
    // Statistics feed the consumer-lag gauge.
    if c.get("statistics.interval.ms").is_none() {
        c.set("statistics.interval.ms", "2000");
    }
    c
}

/// A consumer for reading partitions by assignment (checkpoints, the last
/// output record); it never joins a group or commits.
pub fn reader(cfg: &Resolved, client_id: &str) -> ClientConfig {
    let mut c = base(cfg, client_id);
    c.set("group.id", format!("{}.reader", cfg.settings.app.id))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest");
    // Restores read to the end of a partition: the broker holds a fetch at
    // the end for up to this long (librdkafka's default: 500 ms per read).
    if c.get("fetch.wait.max.ms").is_none() {
        c.set("fetch.wait.max.ms", "10");
    }
    // Snapshots come in chunks of `checkpoint.chunk_bytes`: fetch many per round trip.
    if c.get("max.partition.fetch.bytes").is_none() {
        c.set("max.partition.fetch.bytes", "16777216");
    }
    c
}

/// An idempotent producer: no duplicates from retries, order kept per partition.
pub fn producer(cfg: &Resolved, client_id: &str) -> ClientConfig {
    let mut c = base(cfg, client_id);
    c.set("enable.idempotence", "true").set("acks", "all");
    // Copies of records the broker already accepted must not be refused by
    // the client's own (1 MB) default: let the broker's limit decide.
    if c.get("message.max.bytes").is_none() {
        c.set("message.max.bytes", "104857600");
    }
    // Bounded memory: librdkafka's default lets a producer queue 1 GiB of
    // records (a snapshot's chunks, or large records). Sends wait (back-pressure)
    // while the queue is full; 100 000 records (librdkafka's default count)
    // or 64 MiB, whichever comes first — but always room for one record of
    // `message.max.bytes`, or a send of one would wait forever.
    if c.get("queue.buffering.max.kbytes").is_none() {
        let largest = c.get("message.max.bytes").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        c.set("queue.buffering.max.kbytes", (largest / 1024 + 1024).max(65536).to_string());
    }
    if c.get("queue.buffering.max.messages").is_none() {
        c.set("queue.buffering.max.messages", "100000");
    }
    c
}
