//! The replay bounds of a slice: for each topic it writes, how far that
//! topic's partition already holds its records (docs/design.md, invariant 5).
//!
//! A restored slice judges again what it judged before its last snapshot
//! and must write nothing twice. Each record a judgment writes goes to one
//! of several topics — the output, the duplicates, the dead letters, the
//! late copies, the flags — always to partition `slice`, each record with
//! its release position. The idempotent producer keeps the order within a
//! partition, not between partitions: when the process dies, one topic's
//! partition may be acknowledged further than another's (on a cluster their
//! leaders are different brokers). So every topic has a bound of its own,
//! read from its own partition, and a judgment's record for a topic is
//! written again exactly when its position lies beyond that topic's bound.
//! One bound for all topics (the highest) would lose the records of the
//! topics that lagged; the lowest would write the others' again.
//!
//! A bound counts only the records of this application (`dedupd.app`,
//! invariant 8): several applications may write one topic, and another's
//! release positions say nothing of this one's slice log
//! ([`crate::kafka::restore::read_tail`] reads past them).
//!
//! A bound is the *highest* position in the partition's tail, not its last
//! record's: a member that stood still past its session and woke up may
//! still deliver what its producer held, repeating positions below those
//! its successor wrote since.
//!
//! Decisions of `availability.policy` (docs/availability.md) are written
//! while their slice is being restored, ahead of the ordinary outputs of
//! the positions before them, so a partition holds two kinds of record
//! whose positions do not grow together; each kind has its bound ([`Sent`]).

use crate::config::Settings;
use crate::engine::ReleasePos;

/// A topic a slice writes, partition = slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// `output.topic`: distinct records (and `deliver` decisions).
    Output,
    /// `output.duplicates_topic`: dropped copies (and `drop` decisions).
    Duplicates,
    /// `output.dead_letter_topic`: records that cannot be judged.
    DeadLetters,
    /// `output.late_topic`: copies of late records.
    Late,
    /// `flag.topic`: the counting stage's flags.
    Flags,
}

impl Destination {
    pub const ALL: [Destination; 5] =
        [Destination::Output, Destination::Duplicates, Destination::DeadLetters, Destination::Late, Destination::Flags];

    /// The topic, or `None` when the setting is off (empty).
    pub fn topic(self, settings: &Settings) -> Option<&str> {
        let out = &settings.output;
        let topic = match self {
            Destination::Output => &out.topic,
            Destination::Duplicates => &out.duplicates_topic,
            Destination::DeadLetters => &out.dead_letter_topic,
            Destination::Late => &out.late_topic,
            Destination::Flags => &settings.flag.topic,
        };
        Some(topic.as_str()).filter(|t| !t.is_empty())
    }

    /// Whether records that no slice wrote share the partition: the
    /// repartition router dead-letters the input records it cannot read
    /// there, without a release position.
    pub fn shared_with_router(self) -> bool {
        self == Destination::DeadLetters
    }

    fn index(self) -> usize {
        self as usize
    }

    /// How logs name it.
    pub fn name(self) -> &'static str {
        match self {
            Destination::Output => "output",
            Destination::Duplicates => "duplicates",
            Destination::DeadLetters => "dead letters",
            Destination::Late => "late",
            Destination::Flags => "flags",
        }
    }
}

/// What one topic's partition holds of a slice's records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Every ordinary judgment's record up to this release position.
    pub normal: Option<ReleasePos>,
    /// Every `availability.policy` decision's record up to this position
    /// (such records carry header `dedupd.policy`).
    pub policy: Option<ReleasePos>,
}

impl Sent {
    /// The larger of each bound.
    pub fn max(self, other: Sent) -> Sent {
        Sent { normal: self.normal.max(other.normal), policy: self.policy.max(other.policy) }
    }
}

/// The replay bounds of one slice: a [`Sent`] per [`Destination`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayBounds {
    sent: [Sent; Destination::ALL.len()],
    /// The highest bound of all, ordinary or policy: beyond it every
    /// record is written (the record path asks only this, once per judgment).
    top: Option<ReleasePos>,
}

impl ReplayBounds {
    /// What `dest`'s partition holds.
    pub fn get(&self, dest: Destination) -> Sent {
        self.sent[dest.index()]
    }

    /// Raises `dest`'s bounds to at least `sent`.
    pub fn raise(&mut self, dest: Destination, sent: Sent) {
        let s = &mut self.sent[dest.index()];
        *s = s.max(sent);
        self.top = self.top.max(sent.normal).max(sent.policy);
    }

    /// Whether every topic holds nothing at or beyond `pos`: the replay is over.
    pub fn passed(&self, pos: ReleasePos) -> bool {
        self.top.is_none_or(|top| pos > top)
    }

    /// Raises every bound to at least `other`'s.
    pub fn merge(&mut self, other: &ReplayBounds) {
        for dest in Destination::ALL {
            self.raise(dest, other.get(dest));
        }
    }

    /// Whether `dest` holds the record of the ordinary judgment at `pos`.
    pub fn holds(&self, dest: Destination, pos: ReleasePos) -> bool {
        self.get(dest).normal.is_some_and(|y| pos <= y)
    }

    /// Whether `dest` holds the record of the policy decision at `pos`.
    /// The ordinary bound counts too: a position an ordinary judgment of
    /// the original run has passed was not decided by the policy then.
    pub fn holds_decision(&self, dest: Destination, pos: ReleasePos) -> bool {
        let sent = self.get(dest);
        sent.policy.is_some_and(|y| pos <= y) || sent.normal.is_some_and(|y| pos <= y)
    }

    /// The highest ordinary bound of all topics: up to there the slice
    /// replays judgments that some topic holds already.
    pub fn highest(&self) -> Option<ReleasePos> {
        self.sent.iter().filter_map(|s| s.normal).max()
    }

    /// Every bound, ordinary and policy (what an idle flush must not overtake).
    pub fn all(&self) -> impl Iterator<Item = ReleasePos> + '_ {
        self.sent.iter().flat_map(|s| [s.normal, s.policy]).flatten()
    }

    /// What a policy decision written to `dest` names in
    /// `dedupd.policy.after`: the ordinary judgments that partition holds
    /// before it — its bound, or the last judgment made (`judged`) if that
    /// is later (it was written there, in order, before this record).
    pub fn policy_after(&self, dest: Destination, judged: Option<ReleasePos>) -> Option<ReleasePos> {
        self.get(dest).normal.max(judged)
    }
}

/// The bounds a topic has, as logs show them: `output 179/0, dead letters
/// 177/0 (policy 180/0)`; empty when no topic holds anything.
impl std::fmt::Display for ReplayBounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for dest in Destination::ALL {
            let Sent { normal, policy } = self.get(dest);
            if normal.is_none() && policy.is_none() {
                continue;
            }
            f.write_str(if first { "" } else { ", " })?;
            first = false;
            write!(f, "{}", dest.name())?;
            if let Some(y) = normal {
                write!(f, " {y}")?;
            }
            if let Some(y) = policy {
                write!(f, " (policy {y})")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(after: u64) -> ReleasePos {
        ReleasePos { after, flush: false, rank: 0 }
    }

    #[test]
    fn each_topic_replays_up_to_its_own_bound() {
        let mut b = ReplayBounds::default();
        // The duplicates partition was acknowledged further than the output's.
        b.raise(Destination::Output, Sent { normal: Some(at(100)), policy: None });
        b.raise(Destination::Duplicates, Sent { normal: Some(at(150)), policy: None });
        assert!(b.holds(Destination::Output, at(100)));
        assert!(!b.holds(Destination::Output, at(101)), "a distinct record after the output's bound is written");
        assert!(b.holds(Destination::Duplicates, at(150)));
        assert!(!b.holds(Destination::DeadLetters, at(0)), "a topic with nothing holds nothing");
        assert_eq!(b.highest(), Some(at(150)));
        assert!(!b.passed(at(150)) && b.passed(at(151)));
        assert!(ReplayBounds::default().passed(at(0)));
    }

    #[test]
    fn raising_keeps_the_highest_and_policy_bounds_apart() {
        let mut b = ReplayBounds::default();
        b.raise(Destination::Output, Sent { normal: Some(at(9)), policy: Some(at(40)) });
        b.raise(Destination::Output, Sent { normal: Some(at(7)), policy: None });
        assert_eq!(b.get(Destination::Output), Sent { normal: Some(at(9)), policy: Some(at(40)) });
        // Ordinary judgments between 9 and 40 were not written: the policy
        // decided later positions first.
        assert!(!b.holds(Destination::Output, at(20)));
        assert!(b.holds_decision(Destination::Output, at(20)));
        assert!(b.holds_decision(Destination::Output, at(5)));
        assert!(!b.holds_decision(Destination::Output, at(41)));
        assert_eq!(b.highest(), Some(at(9)));
        assert_eq!(b.all().max(), Some(at(40)));
        assert!(!b.passed(at(40)) && b.passed(at(41)), "policy bounds count too");
        let mut other = ReplayBounds::default();
        other.raise(Destination::Flags, Sent { normal: Some(at(3)), policy: None });
        b.merge(&other);
        assert!(b.holds(Destination::Flags, at(3)));
        assert_eq!(b.get(Destination::Output).normal, Some(at(9)));
    }

    #[test]
    fn a_policy_record_names_what_its_own_partition_holds() {
        let mut b = ReplayBounds::default();
        b.raise(Destination::Output, Sent { normal: Some(at(100)), policy: None });
        b.raise(Destination::Duplicates, Sent { normal: Some(at(150)), policy: None });
        assert_eq!(b.policy_after(Destination::Output, None), Some(at(100)));
        assert_eq!(b.policy_after(Destination::Output, Some(at(120))), Some(at(120)));
        assert_eq!(b.policy_after(Destination::Duplicates, Some(at(120))), Some(at(150)));
        assert_eq!(b.policy_after(Destination::Late, None), None);
        assert_eq!(b.to_string(), "output 100/0, duplicates 150/0");
        assert_eq!(ReplayBounds::default().to_string(), "");
    }
}
