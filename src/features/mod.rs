//! One folder per feature: its settings and their validation, its stage
//! (deterministic, called by the slice) and its Kafka part.

pub mod deletes;
pub mod limits;
pub mod provenance;
pub mod shared;
pub mod tiers;
