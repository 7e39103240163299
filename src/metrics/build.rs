//! How the metrics are made: registered in the process's registry, with
//! the histograms' buckets.

use prometheus::{GaugeVec, Histogram, HistogramOpts, IntCounterVec, IntGaugeVec, Opts, Registry};

/// Makes each metric and registers it in the process's registry.
pub(super) struct Builder<'a>(pub(super) &'a Registry);

impl Builder<'_> {
    pub(super) fn register<M: prometheus::core::Collector + Clone + 'static>(&self, m: M) -> M {
        self.0.register(Box::new(m.clone())).expect("unique metric");
        m
    }
    pub(super) fn counter(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.register(IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }
    pub(super) fn int_gauge(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.register(IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }
    pub(super) fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
        self.register(GaugeVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }
    pub(super) fn histogram(&self, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
        self.register(Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("valid metric"))
    }
}

/// Latency buckets from 1 ms to ~2 min.
pub(super) fn seconds_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.001, 2.0, 18).expect("valid buckets")
}

/// Buckets from 0.5 ms to ~4 min, for stages and stalls measured in milliseconds.
pub(super) fn fine_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.0005, 2.0, 20).expect("valid buckets")
}
