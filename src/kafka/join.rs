//! Says what a group consumer waits for until its first assignment arrives.
//!
//! Joining a consumer group can take a while: a new group waits for the
//! broker's `group.initial.rebalance.delay.ms` (3 s by Kafka's default), and
//! a rebalance for every member to rejoin, for one that died until its
//! session times out (librdkafka's default `session.timeout.ms`: 45 s; the
//! earlier test broker, Tansu, took ~23 s with it even for a new group). A
//! daemon that says nothing meanwhile looks hung, so the wait is logged at
//! INFO when it begins, every [`REPORT_EVERY`] while it lasts, and when the
//! assignment arrives.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::Resolved;

/// How often a consumer still without an assignment says so.
pub const REPORT_EVERY: Duration = Duration::from_secs(5);

/// What to know when the wait is long and `session.timeout.ms` was left at
/// librdkafka's default.
pub const SESSION_TIMEOUT_HINT: &str = "a rebalance waits for every member of the group, for one that died until its \
     session times out (librdkafka's default kafka session.timeout.ms, 45 s; e.g. DEDUPD__KAFKA__SESSION_TIMEOUT_MS=6000)";

/// One group consumer's wait for partitions (the router's, the slice workers').
/// Shared by its poll loop ([`JoinWatch::tick`]) and its rebalance callback
/// ([`JoinWatch::assigned`]), which run on the same thread.
pub struct JoinWatch {
    /// Who waits, as the log names it: "router", "slice workers".
    who: String,
    group: String,
    /// `session.timeout.ms` is librdkafka's default: the hint applies.
    hint: bool,
    state: Mutex<State>,
}

struct State {
    /// When the consumer subscribed; `None` before.
    since: Option<Instant>,
    next_report: Instant,
    assigned: bool,
}

impl JoinWatch {
    pub fn new(cfg: &Resolved, who: &str, group: &str) -> Self {
        let hint = !cfg.settings.kafka.client_settings().iter().any(|(k, _)| k == "session.timeout.ms");
        JoinWatch {
            who: who.to_string(),
            group: group.to_string(),
            hint,
            state: Mutex::new(State { since: None, next_report: Instant::now(), assigned: false }),
        }
    }

    /// The consumer has subscribed to `topics`: the wait begins.
    pub fn joining(&self, topics: &[&str]) {
        let now = Instant::now();
        let mut s = self.state.lock().expect("join lock");
        s.since = Some(now);
        s.next_report = now + REPORT_EVERY;
        log::info!(
            "{}: joining consumer group {} for topics {}, waiting for an assignment",
            self.who,
            self.group,
            topics.join(", ")
        );
    }

    /// Called on every turn of the poll loop: says so every [`REPORT_EVERY`]
    /// while no assignment has arrived.
    pub fn tick(&self, now: Instant) {
        let mut s = self.state.lock().expect("join lock");
        let Some(since) = s.since else { return };
        if s.assigned || now < s.next_report {
            return;
        }
        s.next_report = now + REPORT_EVERY;
        log::info!("{}", self.waiting_line(now.duration_since(since)));
    }

    fn waiting_line(&self, waited: Duration) -> String {
        let hint = if self.hint { format!("; {SESSION_TIMEOUT_HINT}") } else { String::new() };
        format!("{}: still waiting for an assignment after {} s{hint}", self.who, waited.as_secs())
    }

    /// An assignment arrived (from the rebalance callback): `partitions`
    /// as (topic, partition), possibly none.
    pub fn assigned(&self, partitions: &[(&str, i32)]) {
        let mut s = self.state.lock().expect("join lock");
        let after = match (s.assigned, s.since) {
            (false, Some(since)) => format!(" after {:.1} s", since.elapsed().as_secs_f64()),
            _ => String::new(),
        };
        s.assigned = true;
        log::info!("{}: assigned {} (group {}){after}", self.who, describe(partitions), self.group);
    }
}

/// `clicks [0, 1], other [3]`, or `no partitions`.
fn describe(partitions: &[(&str, i32)]) -> String {
    if partitions.is_empty() {
        return "no partitions".into();
    }
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, p) in partitions {
        by_topic.entry(topic).or_default().push(*p);
    }
    by_topic
        .into_iter()
        .map(|(t, mut ps)| {
            ps.sort_unstable();
            format!("{t} {ps:?}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    fn watch(env: &[(&str, &str)]) -> JoinWatch {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        JoinWatch::new(&Settings::load_from(None, env).unwrap(), "router", "dedupd.router")
    }

    #[test]
    fn the_wait_is_reported_with_the_hint_only_when_it_applies() {
        let w = watch(&[]);
        assert_eq!(
            w.waiting_line(Duration::from_millis(10_400)),
            format!("router: still waiting for an assignment after 10 s; {SESSION_TIMEOUT_HINT}")
        );
        let w = watch(&[("DEDUPD__KAFKA__SESSION_TIMEOUT_MS", "6000")]);
        assert_eq!(w.waiting_line(Duration::from_secs(5)), "router: still waiting for an assignment after 5 s");
    }

    #[test]
    fn assignments_are_described_by_topic() {
        assert_eq!(describe(&[]), "no partitions");
        assert_eq!(describe(&[("b", 1), ("a", 2), ("b", 0)]), "a [2], b [0, 1]");
    }
}
