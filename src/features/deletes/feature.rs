//! How the core plugs deletes in (`features/feature.rs`).

use std::sync::Arc;

use super::board::DeleteBoard;
use super::{endpoint, requests};
use crate::admin::status::Status;
use crate::config::{ConfigError, Settings};
use crate::engine::slice::stage::StageSetup;
use crate::features::feature::{CoreSettings, Feature, KeyAction, WorkerView};
use crate::kafka::KafkaLayerError;

/// The feature as the core plugs it in.
pub struct DeletesFeature;

impl Feature for DeletesFeature {
    fn name(&self) -> &'static str {
        endpoint::NAME
    }

    /// `filter.deletable` against the slicing mode.
    fn check(&self, s: &Settings, core: &CoreSettings) -> Result<Option<Arc<dyn StageSetup>>, ConfigError> {
        super::settings::validate(&s.filter, core.slicing)?;
        Ok(None)
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
