//! Key deletes.

pub mod requests;
