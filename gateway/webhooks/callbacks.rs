//! Where a delivery may go: `http` or `https`, and (unless the config allows it) never a private,
//! loopback, link-local or otherwise internal address, which would let a client reach the gateway's own
//! network. A host name is resolved, and refused if any of its addresses is such a one.

use std::net::IpAddr;

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
    let addresses: Vec<IpAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| format!("The host of `{url}` does not resolve: {e}"))?
            .map(|a| a.ip())
            .collect(),
    };
    match addresses.into_iter().find(|ip| internal(*ip)) {
        Some(ip) => Err(format!("`{url}` resolves to {ip}, a private, loopback or link-local address.")),
        None => Ok(()),
    }
}

/// Whether `ip` is not a public internet address.
fn internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                // 100.64.0.0/10, carrier-grade NAT.
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => internal(IpAddr::V4(v4)),
            None => {
                let first = v6.segments()[0];
                v6.is_loopback()
                    || v6.is_unspecified()
                    // fc00::/7 unique local, fe80::/10 link-local.
                    || (first & 0xfe00) == 0xfc00
                    || (first & 0xffc0) == 0xfe80
            }
        },
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
        for public in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(!internal(public.parse().unwrap()), "{public}");
        }
    }
}
