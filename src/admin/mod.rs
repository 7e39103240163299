//! The HTTP admin endpoint, one port (`admin.listen`), one [`router`],
//! and optionally a health port (`admin.health_listen`, [`health_router`]:
//! `/healthz` and `/readyz` alone, with slots of their own):
//!
//! - open to anyone who reaches the port, revealing no keys: `/metrics`
//!   (Prometheus text), `/healthz`, `/readyz` (ready once every assigned
//!   slice is restored, and not while no broker answers), `/v1/slices`
//!   (JSON per slice);
//! - the key endpoints, which reveal whether a key was seen (or, later,
//!   change keys): `/v1/lookup`. They answer 404 unless
//!   `admin.key_endpoints` allows them, and then only with the bearer token
//!   ([`access`]). The features' key endpoints — each one's `/v1/<name>`
//!   ([`FeatureLookup`]) and the routes a feature brings (`DELETE
//!   /v1/keys/{key}`, answered by a [`KeyActionFn`]) — go into `key_routes`.
//!
//! The limits ([`Limits`]) are tower layers here and hyper settings in
//! [`server`]; docs/security.md lists them.
//!
//! Files: `answer.rs` (plain-text and JSON answers), `request.rs` (the key
//! a request names), `status.rs` (what the slice workers share with the
//! endpoint), `limits.rs` ([`Limits`]), `routes.rs` (the routes and
//! handlers), `access.rs` (the bearer token), `server.rs` (the HTTP server).

pub mod access;
pub mod answer;
mod limits;
pub mod request;
mod routes;
pub mod server;
pub mod status;

use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;

use crate::config::KeyEndpoints;
use crate::metrics::Metrics;
use access::Access;
pub use answer::{json, text};
pub use limits::Limits;
pub use request::Peer;
pub use routes::{health_router, router};
pub use status::{
    BROKER_SILENCE_NOT_READY, Busy, FeatureLookup, HeldBy, KeyActionFn, LOOKUP_WAIT, LookupFn,
    REGISTRY_OUTAGE_NOT_READY, SliceStatus, Status, lock_within,
};

/// A running admin endpoint: the admin port, and the health port if set.
pub struct Admin {
    servers: Vec<(tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
}

impl Admin {
    /// Serves [`router`] on `listener` with the default [`Limits`], and
    /// [`health_router`] on `health` (if any) with [`Limits::health`].
    pub fn start(
        listener: TcpListener,
        health: Option<TcpListener>,
        status: Arc<Status>,
        metrics: Arc<Metrics>,
        key_endpoints: &KeyEndpoints,
    ) -> Admin {
        let limits = Limits::default();
        let app = router(status.clone(), metrics.clone(), Access::from(key_endpoints), limits);
        let mut servers = vec![Self::serve(listener, app, limits)];
        if let Some(health) = health {
            let limits = Limits::health();
            servers.push(Self::serve(health, health_router(status, metrics, limits), limits));
        }
        Admin { servers }
    }

    fn serve(
        listener: TcpListener,
        app: Router,
        limits: Limits,
    ) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server::serve(listener, app, limits, async {
            let _ = stopped.await;
        }));
        (stop, task)
    }

    /// Stops accepting, lets the requests in flight finish (at most
    /// [`Limits::drain`]) and returns.
    pub async fn stop(self) {
        let mut tasks = Vec::new();
        for (stop, task) in self.servers {
            let _ = stop.send(());
            tasks.push(task);
        }
        for task in tasks {
            let _ = task.await;
        }
    }
}

#[cfg(test)]
mod tests;
