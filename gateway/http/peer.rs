//! Noticing that a client went away while its request is still being served. actix-web keeps running a
//! handler after the peer closes, so the connection's socket is duplicated at accept time and registered
//! with the worker's reactor; a long call (a synchronous upstream job) waits for the peer's close meanwhile.

use std::io::ErrorKind;
use std::os::fd::AsFd;
use tokio::io::Interest;

/// A duplicate of the connection's socket, watched for the peer's close, in the connection's extensions.
pub struct PeerSocket(tokio::net::TcpStream);

/// Registers the socket of a new connection (once: waiting on it then costs a request no system call).
pub fn on_connect(conn: &dyn std::any::Any, extensions: &mut actix_web::dev::Extensions) {
    if let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
        // Without TCP_NODELAY small responses wait for Nagle's algorithm (tens of ms at low rates).
        let _ = tcp.set_nodelay(true);
        // The duplicate shares the original's non-blocking mode, as the reactor requires.
        let registered = tcp
            .as_fd()
            .try_clone_to_owned()
            .and_then(|fd| tokio::net::TcpStream::from_std(std::net::TcpStream::from(fd)));
        if let Ok(socket) = registered {
            extensions.insert(PeerSocket(socket));
        }
    }
}

impl PeerSocket {
    /// Resolves once the peer has closed its side; never resolves while it is there (or cannot be watched).
    pub async fn gone(&self) {
        loop {
            let Ok(ready) = self.0.ready(Interest::READABLE).await else { return std::future::pending().await };
            // The reactor reports the peer's close (EPOLLRDHUP) as read-closed, and keeps it. Anything else
            // readable is the connection's next request, actix-web's to read: forget it and wait on.
            if ready.is_read_closed() {
                return;
            }
            let _ = self.0.try_io(Interest::READABLE, || Err::<(), _>(ErrorKind::WouldBlock.into()));
        }
    }
}
