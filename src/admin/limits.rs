//! The bounds of every request the admin endpoint serves.

use std::time::Duration;

/// The bounds of the admin endpoint. [`Limits::default`] is what `dedupd
/// run` uses (docs/security.md); tests shorten them.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest time a client may take to send a request head, counted from
    /// the connection's start or the end of its previous response.
    pub header_read_timeout: Duration,
    /// Longest time a request may take to be answered (503 after it).
    pub request_timeout: Duration,
    /// Longest life of a connection, however busy (a slow reader included).
    pub connection_lifetime: Duration,
    /// Connections served at once; more are closed as soon as accepted.
    pub max_connections: usize,
    /// Connections of one peer address served at once; more of its are
    /// closed as soon as accepted, while other peers are served.
    pub max_connections_per_peer: usize,
    /// Largest request head (request line and headers); larger: 431.
    pub max_header_bytes: usize,
    /// Most header fields in a request; more: 431.
    pub max_headers: usize,
    /// Largest request body; larger: 413.
    pub max_body_bytes: usize,
    /// Key-endpoint requests answered at once (over all key endpoints);
    /// more are answered 503 at once, so lookups, which take the slice
    /// workers' lock, cannot pile up.
    pub key_concurrency: usize,
    /// At shutdown, how long requests in flight may still take.
    pub drain: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // Any client on a network sends a request head within this; a
            // half-sent one holds its slot no longer.
            header_read_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            connection_lifetime: Duration::from_secs(60),
            max_connections: 1024,
            max_connections_per_peer: 256,
            max_header_bytes: 16 << 10,
            max_headers: 64,
            max_body_bytes: 64 << 10,
            key_concurrency: 4,
            drain: Duration::from_secs(2),
        }
    }
}

impl Limits {
    /// The health listener's (`admin.health_listen`): it answers two cheap
    /// requests, so a few slots, a short head and a short life suffice, and
    /// its per-peer cap keeps a peer other than the prober from filling them.
    pub fn health() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(2),
            connection_lifetime: Duration::from_secs(10),
            max_connections: 64,
            max_connections_per_peer: 16,
            max_header_bytes: 8 << 10,
            max_headers: 32,
            max_body_bytes: 1 << 10,
            key_concurrency: 1,
            drain: Duration::from_secs(1),
        }
    }
}
