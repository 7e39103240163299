//! The admin endpoint's connections: hyper's HTTP/1 server, one task per
//! connection, with the limits that keep slow or hostile clients from
//! starving `/metrics` and `/healthz` (see [`Limits`]): a header-read
//! timeout, a cap on connections in all and on those of one peer.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::{Extension, Router};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::Layer;

use super::{Limits, Peer};

/// After a failed accept (out of file descriptors, say), wait this long
/// before the next: retrying at once would spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `app` on `listener` until `shutdown` completes, then stops
/// accepting and gives the requests in flight up to [`Limits::drain`].
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, shutdown: impl Future<Output = ()>) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        // A client gets this long for each request head, counted from the
        // connection's start or the end of its previous response: a
        // slowloris, or an idle keep-alive connection, is closed after it.
        .header_read_timeout(limits.header_read_timeout)
        // A larger head is answered 431 and the connection closed, before
        // more than this much of it is buffered.
        .max_header_size(limits.max_header_bytes)
        .max_headers(limits.max_headers);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let peers = PeerSlots::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    log::debug!("admin endpoint: accept failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        // Over a limit the connection is closed at once: it holds nothing.
        // The peer's first: one that holds its share takes no more.
        let Some(peer_slot) = peers.take(peer.ip(), limits.max_connections_per_peer) else { continue };
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        // Each request carries where it came from (for the log of deletes).
        let service = Extension(Peer(peer)).layer(app.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service)));
        tokio::spawn(async move {
            // Also bounds a client that reads its responses too slowly; the
            // error (a reset, a timeout) is the client's and is not logged.
            let _ = tokio::time::timeout(limits.connection_lifetime, connection).await;
            drop((slot, peer_slot));
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain, graceful.shutdown()).await.is_err() {
        log::debug!("admin endpoint: requests still open after {:?}: dropped", limits.drain);
    }
}

/// Connections open per peer address: no peer holds more than
/// [`Limits::max_connections_per_peer`] of the slots, so one client holding
/// connections open (half-sent requests, reopened as they close) leaves the
/// others' slots free.
#[derive(Clone, Default)]
struct PeerSlots(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One connection of a peer, counted until dropped.
struct PeerSlot {
    peers: PeerSlots,
    ip: IpAddr,
}

impl PeerSlots {
    /// A slot of `ip`'s, if it holds fewer than `cap`.
    fn take(&self, ip: IpAddr, cap: usize) -> Option<PeerSlot> {
        let mut open = self.0.lock().expect("peer slots lock");
        let n = open.entry(ip).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(PeerSlot { peers: self.clone(), ip })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.0.lock().expect("peer slots lock");
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip); // the map holds only peers with connections open
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// A server of `/` = "hi" with `limits`, on a free loopback port.
    async fn start(
        limits: Limits,
    ) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new().route("/", get(|| async { "hi" }));
        let task = tokio::spawn(serve(listener, app, limits, async {
            let _ = stopped.await;
        }));
        (addr, stop, task)
    }

    /// Everything the server sends until it closes (or 5 s pass).
    async fn read_to_close(s: &mut TcpStream) -> String {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

    #[tokio::test]
    async fn a_head_trickled_byte_by_byte_is_cut_off_at_the_header_timeout() {
        let limits = Limits { header_read_timeout: Duration::from_millis(300), ..Limits::default() };
        let (addr, _stop, _task) = start(limits).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        let mut closed = false;
        for byte in b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ".iter().cycle().take(100) {
            if s.write_all(&[*byte]).await.is_err() {
                closed = true;
                break;
            }
            let mut buf = [0u8; 64];
            if let Ok(r) = tokio::time::timeout(Duration::from_millis(20), s.read(&mut buf)).await {
                closed = matches!(r, Ok(0) | Err(_));
                if closed {
                    break;
                }
            }
        }
        assert!(closed, "still open after {:?} of trickling", started.elapsed());
        assert!(started.elapsed() >= Duration::from_millis(300), "closed before the timeout: {:?}", started.elapsed());
        // Other clients are served.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(GET).await.unwrap();
        assert!(read_to_close(&mut s).await.ends_with("\r\n\r\nhi"));
    }

    #[tokio::test]
    async fn an_oversized_head_is_answered_431() {
        let (addr, _stop, _task) = start(Limits::default()).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let big =
            format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(Limits::default().max_header_bytes));
        s.write_all(big.as_bytes()).await.unwrap();
        let reply = read_to_close(&mut s).await;
        assert!(reply.starts_with("HTTP/1.1 431 "), "{reply}");
    }

    #[tokio::test]
    async fn connections_over_the_limit_are_closed_at_once() {
        let limits = Limits { max_connections: 2, ..Limits::default() };
        let (addr, _stop, _task) = start(limits).await;
        let held = [TcpStream::connect(addr).await.unwrap(), TcpStream::connect(addr).await.unwrap()];
        let mut third = TcpStream::connect(addr).await.unwrap();
        let _ = third.write_all(GET).await;
        assert_eq!(read_to_close(&mut third).await, "", "a third connection was served");
        drop(held);
        // The slots come back once those close.
        served_again_within_5s(addr, "slots not released").await;
    }

    /// Connects until a request is answered again; fails after 5 s with `why`.
    async fn served_again_within_5s(addr: std::net::SocketAddr, why: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let _ = s.write_all(GET).await;
            if read_to_close(&mut s).await.ends_with("hi") {
                break;
            }
            assert!(Instant::now() < deadline, "{why}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_peer_over_its_cap_is_closed_at_once_while_others_are_served() {
        let limits = Limits { max_connections_per_peer: 2, ..Limits::default() };
        let (addr, _stop, _task) = start(limits).await;
        let held = [TcpStream::connect(addr).await.unwrap(), TcpStream::connect(addr).await.unwrap()];
        let mut third = TcpStream::connect(addr).await.unwrap();
        let _ = third.write_all(GET).await;
        assert_eq!(read_to_close(&mut third).await, "", "a third connection of one peer was served");
        // Another peer (another loopback address) is served.
        let other = tokio::net::TcpSocket::new_v4().unwrap();
        other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut other = other.connect(addr).await.unwrap();
        other.write_all(GET).await.unwrap();
        assert!(read_to_close(&mut other).await.ends_with("hi"), "another peer was not served");
        drop(held);
        served_again_within_5s(addr, "the peer's slots were not released").await;
    }

    #[tokio::test]
    async fn shutdown_stops_accepting_and_returns() {
        let (addr, stop, task) = start(Limits::default()).await;
        let idle = TcpStream::connect(addr).await.unwrap();
        stop.send(()).unwrap();
        // An idle connection does not hold the shutdown up to the drain time.
        tokio::time::timeout(Duration::from_secs(1), task).await.expect("serve returned").unwrap();
        drop(idle);
        assert!(TcpStream::connect(addr).await.is_err(), "still accepting");
    }
}
