//! Provenance.

pub mod stage;
