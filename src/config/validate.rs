//! [`Settings::validate`]: every rule, in one pass, and the typed settings
//! it derives ([`Resolved`]). The core sections' rules are here; each
//! feature checks its own settings in its folder (`crate::features`), called
//! from here through the list of features. The two features' sections the
//! core itself runs on are resolved here, before the features' checks: the
//! level (`[tier]`: topics, clients, a leaf's output) and the availability
//! policy (`[availability]`).

use std::net::SocketAddr;

use super::error::{ConfigError, RESERVED_HEADER_RULE, invalid, is_reserved_header};
use super::sections::{CorruptPolicy, InputStart, LogFormat, SliceLogFormat, SlicingMode};
use super::{AvailabilityPolicy, MAX_APP_ID_BYTES, Resolved, Settings};
use crate::engine::{KeySpec, OrderSettings, TimeSpec};
use crate::features::feature::CoreSettings;
use crate::features::tiers::Tier;
use crate::filter::{FilterSpec, Growth, KindName, KindSpec, ParamError};
use crate::units::parse_duration_ms;

/// The longest topic name Kafka allows, in bytes.
const MAX_TOPIC_BYTES: usize = crate::engine::slice::MAX_TOPIC_BYTES;

/// The largest `slicing.max_held`: a slice holding this many records of a
/// few hundred bytes already needs tens of GB.
const MAX_HELD_LIMIT: u64 = 100_000_000;

/// The largest byte budget for held or buffered records.
const MAX_BUDGET_BYTES: u64 = 1 << 40;

impl Settings {
    /// Gives each topic setting left empty that has a name derived from
    /// `app.id` that name (`<app.id>.distinct`, `<app.id>.dead-letter`,
    /// `<app.id>.checkpoints`): what it writes belongs to one application
    /// (invariant 8). A derived name too long for Kafka names `app.id`.
    fn derive_topics(&mut self) -> Result<(), ConfigError> {
        let id = self.app.id.clone();
        for (setting, suffix, topic) in self.derived_topics() {
            if !topic.is_empty() {
                continue;
            }
            *topic = format!("{id}{suffix}");
            if topic.len() > MAX_TOPIC_BYTES {
                return Err(invalid(
                    "app.id",
                    format!("{id:?}"),
                    format!(
                        "at most {} characters while {setting} is empty (its default, \"<app.id>{suffix}\", is a \
                         Kafka topic name of at most {MAX_TOPIC_BYTES})",
                        MAX_TOPIC_BYTES - suffix.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks every rule and derives the typed settings. The sections are
    /// checked in this order, and the first broken rule is the error.
    pub fn validate(mut self) -> Result<Resolved, ConfigError> {
        self.check_app_id()?;
        self.derive_topics()?;
        let s = &self;
        let input_start = s.check_brokers_and_topics()?;
        let (key, time) = s.key_and_time()?;
        let kind = KindName::parse(&s.filter.kind)
            .ok_or_else(|| invalid("filter.kind", &s.filter.kind, format!("expected {}", KindName::EXPECTED)))?;
        let passthrough = kind == KindName::Passthrough;
        let growth: Growth = s.filter.growth.parse().map_err(|e| invalid("filter.growth", &s.filter.growth, e))?;
        let slicing = match s.slicing.mode.as_str() {
            "repartition" => SlicingMode::Repartition,
            "input-partitions" => SlicingMode::InputPartitions,
            "shared" => SlicingMode::Shared,
            other => return Err(invalid("slicing.mode", other, "expected repartition, input-partitions or shared")),
        };
        let (order_tolerance_ms, order) = s.order_and_budgets(slicing)?;
        let (filter, kind) = s.filter_spec(growth, kind)?;
        let on_corrupt = s.checkpoint_policy()?;
        let availability = s.availability.validate(slicing, &s.output)?;
        let slice_log_format = s.slice_log_format(slicing, availability)?;
        let (admin_listen, health_listen) = s.listeners()?;
        let key_endpoints = s.admin.key_endpoints()?;
        let log_format = s.replication_and_log()?;
        let tier = s.tier.resolve(&s.filter, &s.input.topics, kind.name() != KindName::Timer)?;
        super::roles::check(s, slicing, tier)?;
        let stages = crate::features::check(s, &CoreSettings { slicing, passthrough, tier, availability })?;
        let filter = if stages.judges_instead() { smallest_filter(filter, s.filter.slices) } else { filter };
        s.tier.check_leaf_cache(tier, &filter)?;
        let limit = crate::memory::process_limit(s.memory.limit);
        let (filter, kind, memory) =
            crate::memory::check(filter, kind, s.filter.slices, s.filter.max_memory, limit.clone())
                .map_err(|e| invalid(e.setting, e.value, e.rule))?;
        let clients = super::memory::clients(slicing, tier, s.filter.deletable);
        let budget = crate::memory::budget::divide(&super::memory::demand(s, limit, &memory, &stages, clients))
            .map_err(|e| invalid(e.setting, e.value, e.rule))?;
        let mut settings = self;
        if matches!(tier, Tier::SparseLeaf | Tier::DenseLeaf) {
            // A leaf's output is its parent's input.
            settings.output.topic = settings.tier.parent_topic.clone();
        }
        let decoder = super::formats::input_decoder(&settings.input)?;
        if decoder.is_some() && tier == Tier::SparseLeaf {
            return Err(invalid("input.format", &settings.input.format, "a sparse leaf ([tier]) reads JSON payloads"));
        }
        Ok(Resolved {
            decoder,
            input_start,
            tier,
            stages,
            key,
            time,
            filter,
            kind,
            slicing,
            on_corrupt,
            availability,
            admin_listen,
            health_listen,
            key_endpoints,
            passthrough,
            order_tolerance_ms,
            order,
            log_format,
            slice_log_format,
            memory,
            budget,
            settings,
        })
    }

    /// `[app]`: the id prefixes topic names, so it must leave room for them.
    fn check_app_id(&self) -> Result<(), ConfigError> {
        if self.app.id.is_empty()
            || self.app.id.len() > MAX_APP_ID_BYTES
            || !self.app.id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(invalid(
                "app.id",
                format!("{:?}", self.app.id),
                format!(
                    "1 to {MAX_APP_ID_BYTES} of [a-zA-Z0-9._-] (it prefixes topic names: <app.id>.flushes is a \
                     Kafka topic name of at most {MAX_TOPIC_BYTES})"
                ),
            ));
        }
        Ok(())
    }

    /// `[kafka]` and every topic name: the brokers, the input topics and
    /// where reading starts, the client's authentication, the topics written.
    fn check_brokers_and_topics(&self) -> Result<InputStart, ConfigError> {
        let s = self;
        if s.kafka.brokers.trim().is_empty() {
            return Err(invalid("kafka.brokers", "\"\"", "at least one host:port"));
        }
        if s.input.topics.is_empty() {
            return Err(invalid("input.topics", "[]", "at least one topic"));
        }
        for t in &s.input.topics {
            topic_name("input.topics", t, false)?;
        }
        let input_start = match s.input.start.as_str() {
            "earliest" => InputStart::Earliest,
            "latest" => InputStart::Latest,
            other => return Err(invalid("input.start", other, "expected earliest or latest")),
        };
        // The group consumers that read the input set auto.offset.reset
        // from input.start: a [kafka] value saying otherwise would be
        // silently overridden.
        if let Some((_, reset)) = s.kafka.client_settings().into_iter().find(|(k, _)| k == "auto.offset.reset")
            && InputStart::of_offset_reset(&reset) != Some(input_start)
        {
            return Err(invalid(
                "kafka.auto.offset.reset",
                &reset,
                format!(
                    "contradicts input.start = {} (where dedupd starts reading an input partition it has no \
                     position in): set input.start (earliest or latest) and remove kafka.auto.offset.reset",
                    input_start.as_str()
                ),
            ));
        }
        s.kafka.check_auth()?;
        topic_name("output.topic", &s.output.topic, false)?;
        topic_name("output.duplicates_topic", &s.output.duplicates_topic, true)?;
        topic_name("output.dead_letter_topic", &s.output.dead_letter_topic, false)?;
        topic_name("output.late_topic", &s.output.late_topic, true)?;
        topic_name("flag.topic", &s.flag.topic, true)?;
        topic_name("checkpoint.topic", &s.checkpoint.topic, false)?;
        Ok(input_start)
    }

    /// `[input]`: the dedup key, the record time, the record size limit.
    fn key_and_time(&self) -> Result<(KeySpec, TimeSpec), ConfigError> {
        let s = self;
        let key: KeySpec = s.input.key.parse().map_err(|e| invalid("input.key", &s.input.key, e))?;
        if key.header_names().into_iter().any(is_reserved_header) {
            return Err(invalid("input.key", &s.input.key, RESERVED_HEADER_RULE));
        }
        let time: TimeSpec = s.input.time.parse().map_err(|e| invalid("input.time", &s.input.time, e))?;
        if time == TimeSpec::Arrival {
            return Err(invalid(
                "input.time",
                "arrival",
                "the daemon reads time from records (record-timestamp or json:/pointer) so that restarts replay identically",
            ));
        }
        if s.input.max_record_bytes == 0 {
            return Err(invalid("input.max_record_bytes", 0, "at least 1"));
        }
        Ok((key, time))
    }

    /// `slicing.log_format`: `batches` in repartition mode only (the other
    /// modes' slice logs hold the input, or read orders), and with
    /// `availability.policy = "wait"` (a policy range decides records by
    /// slice-log offset, which a batch does not have per record). Empty:
    /// `batches` where it can run, `records` elsewhere, so that it makes
    /// no other valid setting fail; only a `batches` written out is refused
    /// where it cannot run. Empty is the default.
    fn slice_log_format(
        &self,
        slicing: SlicingMode,
        availability: AvailabilityPolicy,
    ) -> Result<SliceLogFormat, ConfigError> {
        let s = &self.slicing;
        let format = match s.log_format.as_str() {
            "" if slicing == SlicingMode::Repartition && availability == AvailabilityPolicy::Wait => {
                SliceLogFormat::Batches
            }
            "" | "records" => SliceLogFormat::Records,
            "batches" => SliceLogFormat::Batches,
            other => {
                return Err(invalid(
                    "slicing.log_format",
                    other,
                    "expected records, batches or empty (batches where it can run)",
                ));
            }
        };
        if format == SliceLogFormat::Batches && slicing != SlicingMode::Repartition {
            return Err(invalid("slicing.log_format", "batches", "only with slicing.mode = \"repartition\""));
        }
        if format == SliceLogFormat::Batches && availability != AvailabilityPolicy::Wait {
            return Err(invalid(
                "slicing.log_format",
                "batches",
                "only with availability.policy = \"wait\" (deliver and drop decide by slice-log offsets, which a \
                 batch does not have per record)",
            ));
        }
        Ok(format)
    }

    /// `[slicing]` and the event-time settings of `[input]`: the router's
    /// order tolerance within the lateness, the held and buffered budgets,
    /// the clock-jump guard, the topics of input-partition slicing.
    fn order_and_budgets(&self, slicing: SlicingMode) -> Result<(u64, OrderSettings), ConfigError> {
        let s = self;
        let order_tolerance_ms = parse_duration_ms(&s.slicing.order_tolerance).map_err(|e| {
            invalid(
                "slicing.order_tolerance",
                &s.slicing.order_tolerance,
                format!("a duration such as 1s or 0ms ({e})"),
            )
        })?;
        if s.input.lateness >= s.filter.window {
            return Err(invalid(
                "input.lateness",
                format!("{}ms", s.input.lateness),
                format!("shorter than filter.window ({} ms)", s.filter.window),
            ));
        }
        if order_tolerance_ms > s.input.lateness {
            return Err(invalid(
                "slicing.order_tolerance",
                &s.slicing.order_tolerance,
                format!(
                    "at most input.lateness ({} ms): the router may send records this much out of order, and the \
                     slices put back in order only what is within the lateness",
                    s.input.lateness
                ),
            ));
        }
        // One record always fits: a budget below it would flush at every record.
        for (setting, value) in [
            ("slicing.max_held_bytes", s.slicing.max_held_bytes),
            ("slicing.max_buffered_bytes", s.slicing.max_buffered_bytes),
        ] {
            let Some(value) = value else { continue };
            if !(s.input.max_record_bytes as u64..=MAX_BUDGET_BYTES).contains(&value) {
                return Err(invalid(
                    setting,
                    format!("{value}B"),
                    format!(
                        "between input.max_record_bytes ({}B: one record must fit) and 1TiB",
                        s.input.max_record_bytes
                    ),
                ));
            }
        }
        if !(1..=MAX_HELD_LIMIT).contains(&s.slicing.max_held) {
            return Err(invalid(
                "slicing.max_held",
                s.slicing.max_held,
                format!("between 1 and {MAX_HELD_LIMIT} (every held record is kept in memory whole)"),
            ));
        }
        let max_clock_jump_ms = s.input.max_clock_jump.unwrap_or(s.filter.window);
        if max_clock_jump_ms == 0 {
            return Err(invalid("input.max_clock_jump", "0ms", "at least 1ms (empty: the filter window)"));
        }
        if s.input.jump_confirmations == 0 {
            return Err(invalid("input.jump_confirmations", 0, "at least 1"));
        }
        let order = OrderSettings {
            lateness_ms: s.input.lateness,
            max_clock_jump_ms,
            jump_confirmations: s.input.jump_confirmations,
        };
        if slicing == SlicingMode::InputPartitions && s.input.topics.len() != 1 {
            return Err(invalid(
                "input.topics",
                format!("{:?}", s.input.topics),
                "input-partitions slicing takes exactly one topic (its partitions are the slices)",
            ));
        }
        Ok((order_tolerance_ms, order))
    }

    /// `[filter]`: the timer filter's sizing, and the kind's settings (a
    /// kind judging instead of the timer filter leaves it at its smallest).
    fn filter_spec(&self, growth: Growth, kind: KindName) -> Result<(FilterSpec, KindSpec), ConfigError> {
        let s = self;
        let expected_keys = match s.filter.expected_keys {
            Some(n) => n,
            // The other kinds shrink the timer spec to nothing.
            None if !kind.needs_estimate() => u64::from(s.filter.slices.max(1)),
            None => return Err(invalid("filter.expected_keys", "", KindName::ESTIMATE_RULE)),
        };
        let filter = FilterSpec {
            window_ms: s.filter.window,
            fpr: s.filter.fpr,
            expected_keys,
            headroom: s.filter.headroom,
            equal_timers: s.filter.equal_timers,
            growth,
            slices: s.filter.slices,
            timer_bits: s.filter.timer_bits,
            tick_ms: s.filter.tick,
            max_generations: s.filter.max_generations,
            lateness_ms: Some(s.input.lateness),
            deletable: s.filter.deletable,
            sized_growth: s.filter.sized_growth,
            ..FilterSpec::default()
        };
        let named = |e: ParamError| {
            let name = match e.setting {
                "expected" => "filter.expected_keys".to_string(),
                "lateness" => "input.lateness".to_string(),
                other => format!("filter.{other}"),
            };
            invalid(&name, e.value, e.rule)
        };
        filter.resolve().map_err(named)?;
        kind.settings_spec(filter, s.filter.expected_keys, s.filter.memory, s.filter.seed).map_err(named)
    }

    /// `[checkpoint]`: the interval, the chunk size, what a corrupt
    /// checkpoint does at start-up.
    fn checkpoint_policy(&self) -> Result<CorruptPolicy, ConfigError> {
        let s = self;
        if s.checkpoint.interval == 0 {
            return Err(invalid("checkpoint.interval", "0ms", "at least 1ms"));
        }
        if !(1024..=16 << 20).contains(&s.checkpoint.chunk_bytes) {
            return Err(invalid("checkpoint.chunk_bytes", s.checkpoint.chunk_bytes, "between 1024 and 16777216"));
        }
        match s.checkpoint.on_corrupt.as_str() {
            "cold-start" => Ok(CorruptPolicy::ColdStart),
            "fail" => Ok(CorruptPolicy::Fail),
            other => Err(invalid("checkpoint.on_corrupt", other, "expected cold-start or fail")),
        }
    }

    /// `[admin]`: the admin address and the health port, on different ports.
    fn listeners(&self) -> Result<(SocketAddr, Option<SocketAddr>), ConfigError> {
        let s = self;
        let admin_listen: SocketAddr = s
            .admin
            .listen
            .parse()
            .map_err(|_| invalid("admin.listen", &s.admin.listen, "an address such as 127.0.0.1:9464"))?;
        let health_listen = match s.admin.health_listen.as_str() {
            "" => None,
            text => Some(
                text.parse::<SocketAddr>()
                    .map_err(|_| invalid("admin.health_listen", text, "empty, or an address such as 0.0.0.0:9465"))?,
            ),
        };
        if let Some(health) = health_listen
            && health.port() != 0
            && health.port() == admin_listen.port()
        {
            return Err(invalid(
                "admin.health_listen",
                &s.admin.health_listen,
                format!("a port other than admin.listen's ({admin_listen}): the health port has slots of its own"),
            ));
        }
        Ok((admin_listen, health_listen))
    }

    /// `[topics]` and `[log]`: the replication factor of the topics dedupd
    /// creates, the log format.
    fn replication_and_log(&self) -> Result<LogFormat, ConfigError> {
        let s = self;
        if !(s.topics.replication_factor == -1 || (1..=i32::from(i16::MAX)).contains(&s.topics.replication_factor)) {
            return Err(invalid(
                "topics.replication_factor",
                s.topics.replication_factor,
                "-1 (the broker's default.replication.factor) or 1 to 32767",
            ));
        }
        match s.log.format.as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(invalid("log.format", other, "expected text or json")),
        }
    }
}

/// The timer filter the slices run beside a stage that judges instead of
/// it: empty, so the smallest one (as for the count kinds) over `slices`.
fn smallest_filter(filter: FilterSpec, slices: u32) -> FilterSpec {
    FilterSpec {
        expected_keys: u64::from(slices),
        total_cells: None,
        growth: Growth::None,
        max_generations: 1,
        ..filter
    }
}

/// A Kafka topic name: 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`; an
/// `optional` one may be empty (the output it names is off).
fn topic_name(setting: &str, name: &str, optional: bool) -> Result<(), ConfigError> {
    if name.is_empty() && optional {
        return Ok(());
    }
    let legal = !name.is_empty()
        && name.len() <= 249
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && name != "."
        && name != "..";
    if legal {
        Ok(())
    } else {
        Err(invalid(setting, format!("{name:?}"), "a Kafka topic name: 1 to 249 of [a-zA-Z0-9._-]"))
    }
}
