//! The metrics of the Kafka side: the slice workers' consumer and group,
//! the router, the output producer and the records' latency to it.

use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use super::STAGES;
use super::build::{Builder, fine_buckets, seconds_buckets};

/// The slice workers: the slices owned, their group, and their consumer of the
/// slice log.
pub struct SliceMetrics {
    pub slices_owned: IntGauge,
    pub rebalances: IntCounterVec,
    pub broker_silence: prometheus::Gauge,
    pub consumer_lag: IntGaugeVec,
    /// Bytes librdkafka has fetched ahead for the slice consumer.
    pub consumer_queue_bytes: IntGauge,
    /// Gaps in a slice's partition of the slice log, by what came of them.
    pub slice_log_gaps: IntCounterVec,
}

impl SliceMetrics {
    pub(super) fn new(b: &Builder<'_>) -> Self {
        let m = SliceMetrics {
            slices_owned: b
                .register(IntGauge::new("dedupd_slices_owned", "Slices this process owns.").expect("valid metric")),
            rebalances: b.counter("dedupd_rebalances_total", "Group rebalance events of the slice workers.", &["kind"]),
            broker_silence: b.register(
                prometheus::Gauge::new(
                    "dedupd_broker_silence_seconds",
                    "Seconds since the slice consumer last received anything from a broker.",
                )
                .expect("valid metric"),
            ),
            consumer_lag: b.int_gauge("dedupd_consumer_lag", "Records of the slice log not yet processed.", &["slice"]),
            consumer_queue_bytes: b.register(
                IntGauge::new(
                    "dedupd_consumer_queue_bytes",
                    "Bytes librdkafka has fetched ahead for the slice consumer.",
                )
                .expect("valid metric"),
            ),
            slice_log_gaps: b.counter(
                "dedupd_slice_log_gaps_total",
                "Records of the slice log read past offsets not read yet: waited (the slice read its partition \
                 again until they came) or skipped (still missing after 30 s).",
                &["slice", "outcome"],
            ),
        };
        m.slices_owned.set(0);
        m.consumer_queue_bytes.set(0);
        // Every bounded label value exists from the start (as for dead letters).
        for kind in ["assign", "revoke"] {
            m.rebalances.with_label_values(&[kind]);
        }
        m
    }
}

/// The router (repartition and shared mode): what it holds, pauses, restarts
/// and its producer.
pub struct RouterMetrics {
    /// Input records the router holds to send them in event-time order.
    pub router_buffered: IntGauge,
    /// Bytes of the input records the router holds.
    pub router_buffered_bytes: IntGauge,
    /// Input partitions paused because their lane held `slicing.max_buffered_bytes`.
    pub router_byte_pauses: IntCounter,
    /// Router starts after its producer failed.
    pub router_restarts: IntCounter,
    /// Slice records in the router's producer queue, not yet acknowledged.
    pub router_producer_queue: IntGauge,
}

impl RouterMetrics {
    pub(super) fn new(b: &Builder<'_>) -> Self {
        let m = RouterMetrics {
            router_buffered: b.register(
                IntGauge::new(
                    "dedupd_router_buffered_records",
                    "Input records the router holds to send them in event-time order.",
                )
                .expect("valid metric"),
            ),
            router_buffered_bytes: b.register(
                IntGauge::new(
                    "dedupd_router_buffered_bytes",
                    "Bytes (keys and values) of the input records the router holds.",
                )
                .expect("valid metric"),
            ),
            router_byte_pauses: b.register(
                IntCounter::new(
                    "dedupd_router_byte_pauses_total",
                    "Input partitions paused because the router held slicing.max_buffered_bytes of their records.",
                )
                .expect("valid metric"),
            ),
            router_restarts: b.register(
                IntCounter::new(
                    "dedupd_router_restarts_total",
                    "Times the router started again, with a new producer, after its producer failed.",
                )
                .expect("valid metric"),
            ),
            router_producer_queue: b.register(
                IntGauge::new(
                    "dedupd_router_producer_queue_messages",
                    "Slice records in the router's producer queue, not yet acknowledged.",
                )
                .expect("valid metric"),
            ),
        };
        m.router_buffered.set(0);
        m.router_buffered_bytes.set(0);
        m.router_producer_queue.set(0);
        m
    }
}

/// The output producer, and the latency of records from their timestamp to each
/// stage and to the output.
pub struct OutputMetrics {
    pub producer_queue: IntGauge,
    pub end_to_end_latency: Histogram,
    /// Record timestamp → each stage of the pipeline (`STAGES`).
    pub stage_latency: HistogramVec,
}

impl OutputMetrics {
    pub(super) fn new(b: &Builder<'_>) -> Self {
        let m = OutputMetrics {
            producer_queue: b.register(
                IntGauge::new("dedupd_producer_queue_messages", "Messages in the output producer's queue.")
                    .expect("valid metric"),
            ),
            end_to_end_latency: b.histogram(
                "dedupd_end_to_end_latency_seconds",
                "Record timestamp to output acknowledged by the broker.",
                seconds_buckets(),
            ),
            stage_latency: b.register(
                HistogramVec::new(
                    HistogramOpts::new(
                        "dedupd_stage_latency_seconds",
                        "Record timestamp to each stage: router_received, router_sent, router_acked, slice_received.",
                    )
                    .buckets(fine_buckets()),
                    &["stage"],
                )
                .expect("valid metric"),
            ),
        };
        m.producer_queue.set(0);
        for stage in STAGES {
            m.stage_latency.with_label_values(&[stage]);
        }
        m
    }
}
