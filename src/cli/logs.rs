//! The daemon's log: the `log` crate's records (dedupd's own, and
//! librdkafka's through rdkafka) written to stderr by env_logger, filtered
//! by `RUST_LOG` (default `info`), as text or as JSON lines (`log.format`);
//! and the periodic one-line summary (`log.summary_interval`).
//!
//! Text is env_logger's own format, unchanged: people, the tests and
//! `scripts/demo.sh` read its `[TIME LEVEL TARGET] message` lines. JSON is
//! written here rather than through `tracing-subscriber`: every log line of
//! the process already goes through `log` (rdkafka included), so one
//! formatter covers them all, with the same `RUST_LOG` filter, and no second
//! logging stack.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use log::kv::{self, Key, VisitSource};

use crate::config::LogFormat;
use crate::metrics::{Metrics, Totals};

/// The target of the summary line.
pub const SUMMARY_TARGET: &str = "dedupd::summary";

/// Set once the JSON logger is installed: errors at exit go through it too.
static JSON: AtomicBool = AtomicBool::new(false);

/// Installs the logger. With JSON, a panic is logged as an ERROR line too
/// (instead of the default multi-line text on stderr), so that a log shipper
/// sees it as one record.
pub fn init(format: LogFormat) {
    let mut builder = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if format == LogFormat::Json {
        builder.format(|buf, record| {
            let timestamp = buf.timestamp_millis().to_string();
            writeln!(buf, "{}", json_line(&timestamp, record))
        });
    }
    // A second init (tests calling `run` twice in one process) keeps the first logger.
    if builder.try_init().is_ok() && format == LogFormat::Json {
        JSON.store(true, Ordering::Relaxed);
        std::panic::set_hook(Box::new(|info| {
            let location = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            let payload = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            let thread = std::thread::current().name().unwrap_or("unnamed").to_string();
            log::error!(target: "panic", "thread '{thread}' panicked{location}: {payload}");
        }));
    }
}

/// Reports the error that ends the process: as a JSON ERROR line when the
/// log is JSON, else as `dedupd: error` on stderr.
pub fn report_exit_error(e: &anyhow::Error) {
    if JSON.load(Ordering::Relaxed) {
        log::error!(target: "dedupd", "{e:#}");
    } else {
        eprintln!("dedupd: {e:#}");
    }
}

/// One JSON log line (without the newline): `timestamp`, `level`, `target`,
/// `message`, and `fields` when the record carries key-values.
pub fn json_line(timestamp: &str, record: &log::Record<'_>) -> String {
    let text = |s: &str| serde_json::Value::from(s).to_string();
    let mut line = format!(
        "{{\"timestamp\":{},\"level\":{},\"target\":{},\"message\":{}",
        text(timestamp),
        text(record.level().as_str()),
        text(record.target()),
        text(&record.args().to_string())
    );
    let mut fields = Fields(serde_json::Map::new());
    // Visiting cannot fail: `Fields` accepts every pair.
    let _ = record.key_values().visit(&mut fields);
    if !fields.0.is_empty() {
        let _ = write!(line, ",\"fields\":{}", serde_json::Value::Object(fields.0));
    }
    line.push('}');
    line
}

/// A record's key-values as JSON: numbers and booleans as such, the rest as text.
struct Fields(serde_json::Map<String, serde_json::Value>);

impl<'kvs> VisitSource<'kvs> for Fields {
    fn visit_pair(&mut self, key: Key<'kvs>, value: kv::Value<'kvs>) -> Result<(), kv::Error> {
        let json = if let Some(n) = value.to_u64() {
            n.into()
        } else if let Some(n) = value.to_i64() {
            n.into()
        } else if let Some(b) = value.to_bool() {
            b.into()
        } else if let Some(x) = value.to_f64() {
            serde_json::Number::from_f64(x).map_or(serde_json::Value::Null, serde_json::Value::Number)
        } else {
            value.to_string().into()
        };
        self.0.insert(key.as_str().to_string(), json);
        Ok(())
    }
}

/// What happened between two [`Totals`], and the gauges at the second.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub input: u64,
    pub distinct: u64,
    pub duplicates: u64,
    pub late: u64,
    /// Dead letters by reason, reasons with none left out.
    pub dead_letters: Vec<(String, u64)>,
    pub resends: u64,
    pub lag: i64,
    pub waiting: i64,
    pub slices_owned: i64,
}

impl Summary {
    pub fn between(before: &Totals, now: &Totals) -> Summary {
        let dead_letters = now
            .dead_letters
            .iter()
            .map(|(reason, n)| {
                (reason.clone(), n.saturating_sub(before.dead_letters.get(reason).copied().unwrap_or(0)))
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        Summary {
            input: now.input.saturating_sub(before.input),
            distinct: now.distinct.saturating_sub(before.distinct),
            duplicates: now.duplicates.saturating_sub(before.duplicates),
            late: now.late.saturating_sub(before.late),
            dead_letters,
            resends: now.resends.saturating_sub(before.resends),
            lag: now.lag,
            waiting: now.waiting,
            slices_owned: now.slices_owned,
        }
    }

    pub fn dead_letters_total(&self) -> u64 {
        self.dead_letters.iter().map(|(_, n)| n).sum()
    }

    /// Nothing happened and nothing is behind: an idle daemon says nothing.
    pub fn is_idle(&self) -> bool {
        let counts = [self.input, self.distinct, self.duplicates, self.late, self.dead_letters_total(), self.resends];
        counts.iter().all(|&n| n == 0) && self.lag <= 0
    }

    /// The summary line for an interval of `seconds`.
    pub fn line(&self, seconds: u64) -> String {
        let by_reason = if self.dead_letters.is_empty() {
            String::new()
        } else {
            let each: Vec<String> = self.dead_letters.iter().map(|(r, n)| format!("{r} {n}")).collect();
            format!(" ({})", each.join(", "))
        };
        format!(
            "last {seconds} s: {} records in, {} distinct, {} duplicates, {} late, {} dead letters{by_reason}, {} \
             re-sends; now lag {}, waiting {}, slices owned {}",
            self.input,
            self.distinct,
            self.duplicates,
            self.late,
            self.dead_letters_total(),
            self.resends,
            self.lag,
            self.waiting,
            self.slices_owned
        )
    }
}

/// Logs a [`Summary`] every `every` unless it is idle (nothing when `every`
/// is zero). Its values are also the line's key-values (`fields` in JSON).
pub async fn summarize(metrics: Arc<Metrics>, every: Duration) {
    if every.is_zero() {
        return;
    }
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut before = metrics.totals();
    loop {
        tick.tick().await;
        let now = metrics.totals();
        let s = Summary::between(&before, &now);
        if !s.is_idle() {
            log::info!(
                target: SUMMARY_TARGET,
                records_in = s.input,
                distinct = s.distinct,
                duplicates = s.duplicates,
                late = s.late,
                dead_letters = s.dead_letters_total(),
                resends = s.resends,
                lag = s.lag,
                waiting = s.waiting,
                slices_owned = s.slices_owned,
                interval_s = every.as_secs();
                "{}",
                s.line(every.as_secs())
            );
        }
        before = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_carry_the_record_and_its_fields() {
        let line = json_line(
            "2026-01-02T03:04:05.678Z",
            &log::Record::builder()
                .level(log::Level::Warn)
                .target("dedupd::x")
                .args(format_args!("a \"quoted\"\nline"))
                .build(),
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["timestamp"], "2026-01-02T03:04:05.678Z");
        assert_eq!(v["level"], "WARN");
        assert_eq!(v["target"], "dedupd::x");
        assert_eq!(v["message"], "a \"quoted\"\nline");
        assert!(v.get("fields").is_none());
        assert!(!line.contains('\n'), "one line: {line}");

        let kvs: [(&str, kv::Value<'_>); 4] =
            [("n", 3u64.into()), ("neg", (-2i64).into()), ("ok", true.into()), ("who", "slice 1".into())];
        let record = log::Record::builder()
            .level(log::Level::Info)
            .target(SUMMARY_TARGET)
            .args(format_args!("summary"))
            .key_values(&kvs)
            .build();
        let v: serde_json::Value = serde_json::from_str(&json_line("t", &record)).unwrap();
        assert_eq!(v["fields"], serde_json::json!({"n": 3, "neg": -2, "ok": true, "who": "slice 1"}));
    }

    #[test]
    fn the_summary_says_what_happened_and_nothing_when_idle() {
        let before = Totals { input: 10, distinct: 5, lag: 0, ..Totals::default() };
        assert!(Summary::between(&before, &before).is_idle(), "idle: nothing to say");
        let mut now = before.clone();
        now.input = 110;
        now.distinct = 75;
        now.duplicates = 20;
        now.late = 1;
        now.dead_letters.insert("bad_json".into(), 4);
        now.dead_letters.insert("time_jump".into(), 1);
        now.dead_letters.insert("too_large".into(), 0);
        now.waiting = 3;
        now.slices_owned = 8;
        let s = Summary::between(&before, &now);
        assert!(!s.is_idle());
        assert_eq!(
            s.line(60),
            "last 60 s: 100 records in, 70 distinct, 20 duplicates, 1 late, 5 dead letters (bad_json 4, time_jump 1), \
             0 re-sends; now lag 0, waiting 3, slices owned 8"
        );
        // Behind with nothing processed (stuck): said every interval.
        let stuck = Totals { lag: 500, ..before.clone() };
        let s = Summary::between(&before, &stuck);
        assert!(!s.is_idle() && s.line(60).contains("now lag 500"));
    }
}
