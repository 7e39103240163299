//! Shared mode.

pub mod read_order;
pub mod reader;
