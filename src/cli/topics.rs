//! `dedupd topics [--json] FILE`: what an application needs of its cluster —
//! the topics it writes (name, partitions, configs) and the ACLs of its
//! principal — from its settings alone, without a broker
//! ([`crate::kafka::topics::needs`]). For clusters with auto-create off.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use serde_json::{Value, json};

use crate::config::{ChosenBy, Resolved, Settings, SettingsFile};
use crate::kafka::topics::needs::{self, AclNeed, TopicNeed};

#[derive(Debug, Args)]
pub struct TopicsArgs {
    /// Print JSON (`topics` and `acls`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// The settings file (environment overrides apply, as for `run`).
    pub config: PathBuf,
}

pub fn run(args: TopicsArgs) -> anyhow::Result<()> {
    let file = SettingsFile::named(&args.config, ChosenBy::Argument)?;
    let cfg = Settings::load(file.path()).with_context(|| file.to_string())?;
    let (topics, acls) = (needs::topics(&cfg), needs::acls(&cfg));
    let text = match args.json {
        true => format!("{}\n", serde_json::to_string_pretty(&as_json(&cfg, &topics, &acls))?),
        false => as_text(&cfg, &topics, &acls),
    };
    // A reader that stops early (`| head`) is not an error.
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn as_json(cfg: &Resolved, topics: &[TopicNeed], acls: &[AclNeed]) -> Value {
    json!({
        "app": cfg.settings.app.id,
        "input": cfg.settings.input.topics,
        "replication_factor": cfg.settings.topics.replication_factor,
        "topics": topics.iter().map(|t| json!({
            "name": t.name,
            "partitions": t.partitions,
            "configs": t.configs.iter().map(|(k, v)| (k.to_string(), Value::from(v.as_str()))).collect::<serde_json::Map<_, _>>(),
            "role": t.role,
        })).collect::<Vec<_>>(),
        "acls": acls.iter().map(|a| json!({
            "resource": a.resource,
            "name": a.name,
            "pattern": "literal",
            "operations": a.operations,
            "why": a.why,
        })).collect::<Vec<_>>(),
    })
}

fn as_text(cfg: &Resolved, topics: &[TopicNeed], acls: &[AclNeed]) -> String {
    let s = &cfg.settings;
    let mut out = format!(
        "topics application {} writes (slice s writes partition s of each; at least these partitions):\n",
        s.app.id
    );
    for t in topics {
        let configs: Vec<String> = t.configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&format!(
            "  {:<32} {:>4} partitions  {:<48} {}\n",
            t.name,
            t.partitions,
            configs.join(","),
            t.role
        ));
    }
    out.push_str("ACLs of its principal (literal names):\n");
    for a in acls {
        out.push_str(&format!("  {:<8} {:<32} {:<50} {}\n", a.resource, a.name, a.operations.join(","), a.why));
    }
    out
}
