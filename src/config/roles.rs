//! One topic, one role: the rule that no topic dedupd reads or writes is
//! named for two of its roles (docs/design.md, invariant 8).
//!
//! Restore tells its records apart by the topic they are in: the replay
//! bound of a topic is read from its partition, the flush log and the slice
//! log are read whole, a dead-letter topic takes the router's records beside
//! the slices'. A topic in two roles mixes them: an output equal to the
//! dead-letter topic, say, stops every restore at the first router dead
//! letter, and an input equal to the output judges the outputs again.

use super::error::{ConfigError, invalid};
use super::sections::SlicingMode;
use super::{Settings, Tier};

/// The rule every error of [`check`] names.
pub(super) const ONE_ROLE_RULE: &str = "each topic has one role: the input, output, duplicates, late, flag, \
     dead-letter, checkpoint, slice-log (<app.id>.slices), flush-log (<app.id>.flushes), tier parent and verdict \
     topics must all differ";

/// A topic named for one role.
struct Role {
    /// The setting that names it (`app.id` for the internal topics).
    setting: &'static str,
    /// What the topic is for, as the error names it.
    role: &'static str,
    topic: String,
}

/// Refuses settings that name one topic for two roles. `slicing` and
/// `tier` are the resolved mode and level: in input-partitions mode the
/// slice log is the input, and a leaf's output is `tier.parent_topic`.
pub(super) fn check(s: &Settings, slicing: SlicingMode, tier: Tier) -> Result<(), ConfigError> {
    let roles = roles(s, slicing, tier);
    for (i, later) in roles.iter().enumerate() {
        // An input topic listed twice is read once: not two roles.
        let Some(earlier) = roles[..i].iter().find(|r| r.topic == later.topic && r.role != later.role) else {
            continue;
        };
        let also = match earlier.setting {
            "app.id" => format!("the {}", earlier.role),
            setting => format!("the {} ({setting})", earlier.role),
        };
        let value = if later.setting == "app.id" { &s.app.id } else { &later.topic };
        return Err(invalid(
            later.setting,
            value,
            format!("the {} {} is also {also}; {ONE_ROLE_RULE}", later.role, later.topic),
        ));
    }
    Ok(())
}

/// Every topic the settings name, internal ones first (so that an error
/// names the setting the user wrote), inputs last; optional ones only when set.
fn roles(s: &Settings, slicing: SlicingMode, tier: Tier) -> Vec<Role> {
    let mut roles = Vec::new();
    let mut add = |setting: &'static str, role: &'static str, topic: String| {
        if !topic.is_empty() {
            roles.push(Role { setting, role, topic });
        }
    };
    let id = &s.app.id;
    if slicing != SlicingMode::InputPartitions {
        add("app.id", "slice log (<app.id>.slices)", format!("{id}.slices"));
    }
    add("app.id", "flush log (<app.id>.flushes)", format!("{id}.flushes"));
    if matches!(tier, Tier::SparseLeaf | Tier::DenseLeaf) {
        add("tier.parent_topic", "tier parent topic (this leaf's output)", s.tier.parent_topic.clone());
    } else {
        add("output.topic", "output topic", s.output.topic.clone());
    }
    add("output.duplicates_topic", "duplicates topic", s.output.duplicates_topic.clone());
    add("output.late_topic", "late topic", s.output.late_topic.clone());
    add("flag.topic", "flag topic", s.flag.topic.clone());
    add("output.dead_letter_topic", "dead-letter topic", s.output.dead_letter_topic.clone());
    add("checkpoint.topic", "checkpoint topic", s.checkpoint.topic.clone());
    if matches!(tier, Tier::SparseLeaf | Tier::SparseRoot) {
        add("tier.verdict_topic", "verdict topic", s.tier.verdict_topic.clone());
    }
    for t in &s.input.topics {
        add("input.topics", "input topic", t.clone());
    }
    roles
}
