//! Tiers.

pub mod io;
pub mod verdicts;
