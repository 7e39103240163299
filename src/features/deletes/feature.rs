//! How the core plugs deletes in (`features/feature.rs`).

use std::sync::Arc;

use super::board::DeleteBoard;
use super::{endpoint, requests};
use crate::admin::status::Status;
use crate::features::feature::{Feature, KeyAction, WorkerView};
use crate::kafka::KafkaLayerError;

/// The feature as the core plugs it in.
pub struct DeletesFeature;

impl Feature for DeletesFeature {
    fn name(&self) -> &'static str {
        endpoint::NAME
    }

    fn admin_routes(&self) -> Option<axum::Router<Arc<Status>>> {
        Some(endpoint::routes())
    }

    /// The request's answer waits on the board the slice posts to.
    fn key_action(&self, worker: &WorkerView<'_>) -> Result<Option<KeyAction>, KafkaLayerError> {
        let board = Arc::new(DeleteBoard::default());
        let answer = requests::delete_fn(worker, board.clone())?;
        let applied = Arc::new(move |slice, offset, outcome| requests::posted(&board, slice, offset, outcome));
        Ok(Some(KeyAction { answer, applied }))
    }
}
