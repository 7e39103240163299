//! `dedupd check-config [--print-resolved] FILE`: checks a settings file as
//! `dedupd run` would at start-up, without a broker, and says what the
//! filters will take ([`Sizing`], which `dedupd run` logs at every start).

use std::fmt;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::config::{ChosenBy, REDACTED, Resolved, Settings, SettingsFile, Tier, is_secret_setting};
use crate::filter::FilterChoice;
use crate::units::{format_bytes, format_duration_ms};

#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// Print the settings as resolved (built-in defaults < the file < the
    /// DEDUPD__SECTION__KEY environment), secrets as `[redacted]`, after the
    /// filter's sizing.
    #[arg(long)]
    pub print_resolved: bool,
    /// The settings file to check (environment overrides apply, as for `run`).
    pub config: PathBuf,
}

/// Loads and checks the settings as `dedupd run` does before it talks to a
/// broker: the same errors, with the file named as given on the command
/// line. The topics, partition counts and credentials need the brokers and
/// are checked by `dedupd run` only.
pub fn run(args: CheckConfigArgs) -> anyhow::Result<()> {
    let file = SettingsFile::named(&args.config, ChosenBy::Argument)?;
    let cfg = Settings::load(file.path()).with_context(|| file.to_string())?;
    crate::kafka::clients::check(&cfg)?;
    let sizing = Sizing::of(&cfg);
    if args.print_resolved {
        print!("{}", resolved_toml(&cfg, &file, &sizing));
    } else {
        println!("valid: {file}");
        println!("{sizing}");
        println!("{}", cfg.memory);
        println!("{}", cfg.budget);
    }
    Ok(())
}

/// What the filters take, resolved from the settings: one line, logged at
/// every start of `dedupd run` and printed by `dedupd check-config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// The kind's settings name, or `timer (sparse leaf cache)`.
    pub kind: String,
    /// Filters: one per slice (a sparse leaf: its one cache).
    pub slices: u32,
    /// Per filter: cells (RSBF: bits of its arrays), their width, hashes k
    /// ([`crate::filter::FilterChoice::sizing`]).
    pub cells: u64,
    pub cell_bits: u32,
    pub hashes: u32,
    /// The timer filter's tick in ms.
    pub tick_ms: Option<u64>,
    /// Bytes per filter (timer: while its keys fit one generation).
    pub bytes_per_slice: u64,
    /// Generations a timer filter may grow to as its load rises.
    pub max_generations: Option<u32>,
}

impl Sizing {
    /// The sizing `cfg` resolves to (validated settings: they resolve).
    pub fn of(cfg: &Resolved) -> Sizing {
        let settings = &cfg.settings.filter;
        let (kind, slices, choice) = match cfg.tier {
            Tier::SparseLeaf => {
                let cache = cfg.leaf_cache().expect("validated at load");
                ("timer (sparse leaf cache)".to_string(), 1, FilterChoice::Timer(cache))
            }
            _ => (settings.kind.clone(), settings.slices, cfg.filter_choice().expect("validated at load")),
        };
        // Counting by the dedup key, [limit]'s stage judges and the timer
        // filter is the smallest there is (its memory is not sized here).
        let kind = match crate::features::limits::stage::counting(&cfg.stages) {
            Some(c) if c.count_key.is_none() && cfg.tier != Tier::SparseLeaf => {
                format!("{kind} (idle: [limit] counts by the dedup key and judges instead)")
            }
            _ => kind,
        };
        if cfg.passthrough {
            return Sizing {
                kind,
                slices,
                cells: 0,
                cell_bits: 0,
                hashes: 0,
                tick_ms: None,
                bytes_per_slice: 0,
                max_generations: None,
            };
        }
        let sizing = choice.sizing();
        Sizing {
            kind,
            slices,
            cells: sizing.cells,
            cell_bits: sizing.cell_bits,
            hashes: sizing.hashes,
            tick_ms: sizing.tick_ms,
            bytes_per_slice: sizing.bytes,
            max_generations: sizing.max_parts,
        }
    }

    /// All filters together.
    pub fn total_bytes(&self) -> u64 {
        self.bytes_per_slice.saturating_mul(u64::from(self.slices))
    }
}

impl fmt::Display for Sizing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, slices) = (&self.kind, self.slices);
        if self.bytes_per_slice == 0 {
            return write!(f, "filter sizing: {kind}, {slices} slices, no filter memory (no deduplication)");
        }
        write!(f, "filter sizing: {kind}, {slices} slices, each {} cells of {} bits", self.cells, self.cell_bits)?;
        if let Some(tick) = self.tick_ms {
            write!(f, " (tick {})", format_duration_ms(tick))?;
        }
        write!(
            f,
            ", k = {} hashes; {} bytes ({}) per slice",
            self.hashes,
            self.bytes_per_slice,
            format_bytes(self.bytes_per_slice)
        )?;
        if self.max_generations.is_some() {
            f.write_str(" in one generation")?;
        }
        write!(f, ", {} bytes ({}) in all", self.total_bytes(), format_bytes(self.total_bytes()))?;
        if let Some(max) = self.max_generations.filter(|&m| m > 1) {
            write!(f, "; a slice whose keys outgrow its generation adds more, up to {max}")?;
        }
        Ok(())
    }
}

/// The settings of `cfg` as a settings file (TOML) that loads back to them,
/// secrets as [`REDACTED`], under comment lines naming the file and the sizing.
pub fn resolved_toml(cfg: &Resolved, file: &SettingsFile, sizing: &Sizing) -> String {
    let mut out = format!(
        "# dedupd check-config: valid; {file}\n# {sizing}\n# {}\n# The settings as resolved (built-in defaults < the file < \
         the environment), durations in milliseconds, sizes in bytes; secrets are shown as {REDACTED}.\n",
        cfg.memory
    );
    for line in cfg.budget.to_string().lines() {
        out.push_str(&format!("# {line}\n"));
    }
    let text = serde_json::to_string(&cfg.settings).expect("settings serialise");
    let Node::Table(sections) = serde_json::from_str(&text).expect("settings serialise to a JSON object") else {
        unreachable!("settings serialise to a JSON object");
    };
    for (section, node) in sections {
        out.push_str(&format!("\n[{section}]\n"));
        if section == "kafka" {
            // librdkafka's dotted names, as written in a settings file.
            let kafka = &cfg.settings.kafka;
            out.push_str(&format!("brokers = {}\n", toml_string(&kafka.brokers)));
            for (name, value) in kafka.client_settings() {
                let value = if is_secret_setting(&name) { REDACTED.to_string() } else { value };
                out.push_str(&format!("{} = {}\n", toml_key(&name), toml_string(&value)));
            }
            continue;
        }
        let Node::Table(entries) = node else { continue };
        for (key, value) in entries {
            out.push_str(&format!("{} = {}\n", toml_key(&key), toml_value(&value)));
        }
    }
    out
}

/// A JSON value with its objects' keys in the order written (serde_json's
/// own map sorts them): the settings in the order of their structs.
enum Node {
    Leaf(serde_json::Value),
    Table(Vec<(String, Node)>),
}

impl<'de> serde::Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Node>()? {
                    entries.push((key, value));
                }
                Ok(Node::Table(entries))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<serde_json::Value>()? {
                    items.push(item);
                }
                Ok(Node::Leaf(serde_json::Value::Array(items)))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Leaf(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Leaf(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Leaf(v.into()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Leaf(v.into()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Leaf(v.into()))
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Leaf(serde_json::Value::Null))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// A TOML key: bare when it can be, else quoted.
fn toml_key(key: &str) -> String {
    if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        key.to_string()
    } else {
        toml_string(key)
    }
}

/// A TOML basic string (JSON's escapes are TOML's).
fn toml_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// A setting's value in TOML. `null` (an optional duration left to its
/// default) is written as the empty string the settings file uses for it.
fn toml_value(value: &Node) -> String {
    match value {
        Node::Leaf(serde_json::Value::Null) => "\"\"".to_string(),
        Node::Leaf(serde_json::Value::Array(items)) => {
            let items: Vec<String> = items.iter().map(|v| toml_value(&Node::Leaf(v.clone()))).collect();
            format!("[{}]", items.join(", "))
        }
        Node::Leaf(serde_json::Value::Object(_)) => unreachable!("objects are read as tables"),
        Node::Leaf(leaf) => leaf.to_string(),
        Node::Table(entries) => {
            let items: Vec<String> =
                entries.iter().map(|(k, v)| format!("{} = {}", toml_key(k), toml_value(v))).collect();
            format!("{{ {} }}", items.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(env: &[(&str, &str)]) -> Resolved {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Settings::load_from(Some(std::path::Path::new("config/dedupd.toml")), env).unwrap()
    }

    /// The default settings: 1 000 000 keys at 1% over 8 slices (the
    /// figures of docs/capacity.md's table).
    #[test]
    fn the_default_sizing() {
        let sizing = Sizing::of(&load(&[]));
        assert_eq!((sizing.slices, sizing.cells, sizing.cell_bits, sizing.hashes), (8, 1_437_760, 8, 7));
        // The cells, and a histogram (4 bytes) and an alive flag (1 byte) per timer value (period 255 + 1).
        assert_eq!(sizing.bytes_per_slice, 1_437_760 + 256 * 5);
        assert_eq!(
            sizing.to_string(),
            "filter sizing: timer, 8 slices, each 1437760 cells of 8 bits (tick 4762ms), k = 7 hashes; 1439040 bytes \
             (1.4 MiB) per slice in one generation, 11512320 bytes (11.0 MiB) in all; a slice whose keys outgrow its \
             generation adds more, up to 12"
        );
    }

    #[test]
    fn decaying_kinds_and_passthrough() {
        let rsbf = Sizing::of(&load(&[("DEDUPD__FILTER__KIND", "rsbf"), ("DEDUPD__FILTER__MEMORY", "8MiB")]));
        assert_eq!((rsbf.kind.as_str(), rsbf.slices, rsbf.cell_bits, rsbf.tick_ms), ("rsbf", 8, 1, None));
        // Each slice's share, 1 MiB, less what rounding its arrays to whole words leaves.
        assert!(rsbf.bytes_per_slice <= 1 << 20 && rsbf.bytes_per_slice + 64 * 8 > 1 << 20, "{rsbf:?}");
        assert_eq!(rsbf.total_bytes(), rsbf.bytes_per_slice * 8);
        assert!(rsbf.to_string().starts_with("filter sizing: rsbf, 8 slices, each "), "{rsbf}");
        assert!(!rsbf.to_string().contains("generation"), "{rsbf}");
        let counted = Sizing::of(&load(&[("DEDUPD__LIMIT__MAX_PER_WINDOW", "3")]));
        assert!(
            counted.to_string().starts_with("filter sizing: timer (idle: [limit] counts by the dedup key"),
            "{counted}"
        );
        assert!(counted.cells <= 128, "{counted:?}");
        let none = Sizing::of(&load(&[("DEDUPD__FILTER__KIND", "passthrough")]));
        assert_eq!(none.to_string(), "filter sizing: passthrough, 8 slices, no filter memory (no deduplication)");
    }

    /// What `--print-resolved` prints loads back to the same settings, and
    /// shows no secret.
    #[test]
    fn the_resolved_settings_load_back_without_secrets() {
        let cfg = load(&[
            ("DEDUPD__FILTER__WINDOW", "5m"),
            ("DEDUPD__INPUT__TOPICS", "a,b"),
            ("DEDUPD__KAFKA__SESSION_TIMEOUT_MS", "6000"),
            ("DEDUPD__KAFKA__SASL_PASSWORD", "pw-S3CRET"),
            ("DEDUPD_ADMIN_TOKEN", "tok-S3CRET-0123456789"),
        ]);
        let file = SettingsFile::named(std::path::Path::new("config/dedupd.toml"), ChosenBy::Argument).unwrap();
        let text = resolved_toml(&cfg, &file, &Sizing::of(&cfg));
        assert!(!text.contains("S3CRET"), "{text}");
        assert!(
            text.contains("\"sasl.password\" = \"[redacted]\"\n") && text.contains("token = \"[redacted]\"\n"),
            "{text}"
        );
        assert!(text.contains("\n[filter]\nkind = \"timer\"\nwindow = 300000\n"), "{text}");
        assert!(text.contains("topics = [\"a\", \"b\"]\n") && text.contains("tick = \"\"\n"), "{text}");
        assert!(text.starts_with("# dedupd check-config: valid; reading settings from "), "{text}");
        assert!(text.contains(&format!("# {}\n", Sizing::of(&cfg))), "{text}");
        // Loaded back (the redacted token put back), it is the same settings.
        let text = text.replace("token = \"[redacted]\"", "token = \"tok-S3CRET-0123456789\"");
        let back = Settings::load_from_str(&text, Vec::new()).unwrap();
        assert_eq!(format!("{:?}", back.settings), format!("{:?}", cfg.settings));
        assert_eq!(resolved_toml(&back, &file, &Sizing::of(&back)), resolved_toml(&cfg, &file, &Sizing::of(&cfg)));
    }
}
