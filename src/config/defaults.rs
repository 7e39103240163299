//! The built-in defaults: the lowest layer, under the settings file and
//! the environment.

/// The built-in defaults: the lowest layer.
pub(super) const DEFAULTS: &str = r#"
[app]
id = "dedupd"
[kafka]
brokers = "localhost:9092"
[input]
topics = ["clicks"]
start = "earliest"
key = "record-key"
time = "record-timestamp"
max_record_bytes = 1048576
lateness = "2s"
max_clock_jump = ""
jump_confirmations = 16
format = "json"
schemas = ""
schema_registry = ""
schema_registry_user = ""
schema_registry_password = ""
schema_registry_token = ""
schema_registry_ca_file = ""
schema_registry_cert_file = ""
schema_registry_key_file = ""
[filter]
kind = "timer"
window = "10m"
fpr = 0.01
expected_keys = 1000000
headroom = 0.2
equal_timers = 0
growth = "density"
slices = 8
timer_bits = 8
tick = ""
max_generations = 12
memory = "8MiB"
seed = 25481510381
deletable = false
sized_growth = true
max_memory = ""
[slicing]
mode = "repartition"
log_format = ""
order_tolerance = "0ms"
max_held = 200000
max_held_bytes = ""
max_buffered_bytes = ""
[memory]
limit = ""
[output]
topic = ""
duplicates_topic = ""
dead_letter_topic = ""
late_topic = ""
[checkpoint]
topic = ""
interval = "30s"
interval_records = 1000000
chunk_bytes = 524288
on_corrupt = "cold-start"
[admin]
listen = "127.0.0.1:9464"
health_listen = ""
token = ""
token_file = ""
key_endpoints = "auto"
[topics]
auto_create = true
replication_factor = -1
[shutdown]
timeout = "30s"
[log]
format = "text"
summary_interval = "60s"
"#;

/// A loader holding the built-in defaults, the lowest layer.
pub(super) fn defaults() -> config::ConfigBuilder<config::builder::DefaultState> {
    config::Config::builder().add_source(config::File::from_str(DEFAULTS, config::FileFormat::Toml))
}
