//! Which network addresses are internal: private, loopback, link-local, carrier-NAT, multicast, or an
//! IPv6 form of one (mapped, NAT64, 6to4). A webhook endpoint at one would let a client reach the gateway's
//! own network.

use std::net::{IpAddr, SocketAddr};

/// The first of `addresses` that is not a public internet address.
pub fn first_internal(addresses: &[SocketAddr]) -> Option<IpAddr> {
    addresses.iter().map(SocketAddr::ip).find(|ip| internal(*ip))
}

/// Whether `ip` is not a public internet address (or is an IPv6 form of one that is not).
pub fn internal(ip: IpAddr) -> bool {
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
