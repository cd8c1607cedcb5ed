//! Noticing that a client went away while its request is still being served. actix-web keeps running a
//! handler after the peer closes, so the connection's socket is duplicated at accept time and registered
//! with the worker's reactor; a long call (a synchronous upstream job) waits for the peer's close meanwhile.

use actix_web::rt::net::TcpStream;
use std::os::fd::{AsFd, OwnedFd};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A duplicate of the connection's socket, watched for the peer's close, in the connection's extensions.
/// Registered for reading only: the reactor then hears nothing of it when the socket turns writable (each
/// time the peer acknowledges a response), only when the peer sends or closes.
pub struct PeerSocket(AsyncFd<OwnedFd>);

type TlsStream = actix_tls::accept::rustls_0_23::TlsStream<TcpStream>;

/// The TCP socket under a new connection, plain or TLS.
fn socket_of(conn: &dyn std::any::Any) -> Option<&TcpStream> {
    conn.downcast_ref::<TcpStream>().or_else(|| conn.downcast_ref::<TlsStream>().map(|tls| tls.get_ref().0))
}

/// Registers the socket of a new connection (once: waiting on it then costs a request no system call).
pub fn on_connect(conn: &dyn std::any::Any, extensions: &mut actix_web::dev::Extensions) {
    set_nodelay(conn, extensions);
    // The duplicate shares the original's non-blocking mode, as the reactor requires.
    if let Some(socket) = socket_of(conn).and_then(|tcp| tcp.as_fd().try_clone_to_owned().and_then(watch_reads).ok()) {
        extensions.insert(PeerSocket(socket));
    }
}

/// Without TCP_NODELAY small responses wait for Nagle's algorithm (tens of ms at low rates).
pub fn set_nodelay(conn: &dyn std::any::Any, _: &mut actix_web::dev::Extensions) {
    if let Some(tcp) = socket_of(conn) {
        let _ = tcp.set_nodelay(true);
    }
}

/// Registers `fd` with the reactor for reading only. tokio deprecated its safe constructors because an
/// arbitrary `AsRawFd` may close its descriptor while registered (the unsafe one remains); an `OwnedFd`
/// cannot, so this use is sound, and `unsafe` is forbidden in this crate.
#[allow(deprecated)]
fn watch_reads(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    AsyncFd::with_interest(fd, Interest::READABLE)
}

impl PeerSocket {
    /// Resolves once the peer has closed its side; never resolves while it is there (or cannot be watched).
    pub async fn gone(&self) {
        loop {
            let Ok(mut ready) = self.0.readable().await else { return std::future::pending().await };
            // The reactor reports the peer's close (EPOLLRDHUP) as read-closed, and keeps it. Anything else
            // readable is the connection's next request, actix-web's to read: forget it and wait on.
            if ready.ready().is_read_closed() {
                return;
            }
            ready.clear_ready();
        }
    }
}
