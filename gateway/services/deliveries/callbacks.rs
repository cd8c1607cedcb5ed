//! Where a delivery may go: `http` or `https`, and (unless the config allows it) never a private,
//! loopback, link-local or otherwise internal address, which would let a client reach the gateway's own
//! network. A host name is resolved, and refused if any of its addresses is such a one.

use crate::domain::addresses::first_internal;
use std::net::{IpAddr, SocketAddr};

/// Why an endpoint is refused, for the client.
pub type Refused = String;

/// Checks `url` as a delivery endpoint.
pub async fn check(url: &str, allow_private: bool) -> Result<(), Refused> {
    let uri: http::Uri = url.parse().map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("http" | "https") => {}
        _ => return Err(format!("`{url}` must be an http or https URL.")),
    }
    let host = uri.host().filter(|h| !h.is_empty()).ok_or_else(|| format!("`{url}` names no host."))?;
    if allow_private {
        return Ok(());
    }
    let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 });
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addresses = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => resolve(bare, port).await.map_err(|e| format!("The host of `{url}` does not resolve: {e}"))?,
    };
    match first_internal(&addresses) {
        Some(ip) => Err(format!("`{url}` resolves to {ip}, a private, loopback or link-local address.")),
        None => Ok(()),
    }
}

/// Longest a submission waits for its endpoint's host to resolve.
const RESOLVE_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

pub async fn resolve(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    let resolved = tokio::time::timeout(RESOLVE_WITHIN, tokio::net::lookup_host((host, port))).await;
    let resolved = resolved.map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer within 5 s"))?;
    Ok(resolved?.collect())
}
