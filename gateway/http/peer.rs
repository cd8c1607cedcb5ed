//! Noticing that a client went away while its request is still being served. actix-web keeps running a
//! handler after the peer closes, so the connection's socket is duplicated at accept time and peeked while
//! a long call (a synchronous upstream job) is in flight.

use std::os::fd::AsFd;
use std::time::Duration;

/// A duplicate of the connection's socket, in the connection's extensions.
pub struct PeerSocket(std::net::TcpStream);

/// Registers the socket of a new connection.
pub fn on_connect(conn: &dyn std::any::Any, extensions: &mut actix_web::dev::Extensions) {
    if let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
        // Without TCP_NODELAY small responses wait for Nagle's algorithm (tens of ms at low rates).
        let _ = tcp.set_nodelay(true);
        if let Ok(fd) = tcp.as_fd().try_clone_to_owned() {
            extensions.insert(PeerSocket(std::net::TcpStream::from(fd)));
        }
    }
}

impl PeerSocket {
    /// The peer closed its side (a read would see end of file).
    fn closed(&self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.0.peek(&mut byte), Ok(0))
    }

    /// Resolves once the peer has gone; never resolves while it is there.
    pub async fn gone(&self) {
        while !self.closed() {
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
