//! Where a delivery may go: `http` or `https`, and (unless the config allows it) never a private,
//! loopback, link-local or otherwise internal address, which would let a client reach the gateway's own
//! network. A host name is resolved, and refused if any of its addresses is such a one.

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

async fn resolve(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    let resolved = tokio::time::timeout(RESOLVE_WITHIN, tokio::net::lookup_host((host, port))).await;
    let resolved = resolved.map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer within 5 s"))?;
    Ok(resolved?.collect())
}

/// The first of `addresses` that is not a public internet address.
fn first_internal(addresses: &[SocketAddr]) -> Option<IpAddr> {
    addresses.iter().map(SocketAddr::ip).find(|ip| internal(*ip))
}

/// Whether `ip` is not a public internet address (or is an IPv6 form of one that is not).
fn internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [first, second, ..] = v4.octets();
            v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_multicast()
                || first == 0
                // 100.64.0.0/10, carrier-grade NAT.
                || (first == 100 && (second & 0xc0) == 64)
        }
        IpAddr::V6(v6) => {
            let segments = v6.segments();
            let embedded = |high: u16, low: u16| {
                internal(IpAddr::V4(std::net::Ipv4Addr::from((u32::from(high) << 16) | u32::from(low))))
            };
            match segments {
                // IPv4-mapped and IPv4-compatible: the IPv4 address is what is reached.
                _ if v6.to_ipv4().is_some() && !v6.is_loopback() && !v6.is_unspecified() => {
                    v6.to_ipv4().is_none_or(|v4| internal(IpAddr::V4(v4)))
                }
                // NAT64 (64:ff9b::/96) reaches its embedded IPv4 address; local-use NAT64 is internal.
                [0x64, 0xff9b, 0, 0, 0, 0, high, low] => embedded(high, low),
                [0x64, 0xff9b, 1, ..] => true,
                // 6to4 (2002::/16) reaches its embedded IPv4 address.
                [0x2002, high, low, ..] => embedded(high, low),
                [first, ..] => {
                    v6.is_loopback()
                        || v6.is_unspecified()
                        || v6.is_multicast()
                        // fc00::/7 unique local, fe80::/10 link-local, fec0::/10 site-local.
                        || (first & 0xfe00) == 0xfc00
                        || (first & 0xffc0) == 0xfe80
                        || (first & 0xffc0) == 0xfec0
                }
            }
        }
    }
}

/// Resolves the hosts deliveries go to, refusing internal addresses as [`check`] does, at the moment of
/// connecting: a name that resolved to a public address when it was checked cannot be pointed inside
/// afterwards (DNS rebinding).
pub struct GuardedResolver {
    pub allow_private: bool,
}

impl actix_tls::connect::Resolve for GuardedResolver {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> futures_util::future::LocalBoxFuture<'a, Result<Vec<SocketAddr>, Box<dyn std::error::Error>>> {
        Box::pin(async move {
            let addresses = resolve(host, port).await?;
            if !self.allow_private
                && let Some(ip) = first_internal(&addresses)
            {
                return Err(format!("{host} resolves to {ip}, an internal address").into());
            }
            Ok(addresses)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_told_apart_from_public_ones() {
        for internal_ip in [
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "127.0.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ] {
            assert!(internal(internal_ip.parse().unwrap()), "{internal_ip}");
        }
        for public in ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "64:ff9b::808:808", "2002:808:808::1"] {
            assert!(!internal(public.parse().unwrap()), "{public}");
        }
    }
}
