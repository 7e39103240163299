//! Frequency limits and flags.

pub mod counting;
pub mod stage;
