//! Client addresses as Kafka sees them.
//!
//! Kafka compares an ACL's host with `InetAddress.getHostAddress()` as an exact string
//! (kafka-security-semantics §6.2 step 5). Java prints IPv4 dotted and IPv6 as eight
//! lower-case hex groups without `::` compression (`0:0:0:0:0:0:0:1`), and a socket accepted
//! from an IPv4 client on a dual-stack listener is an `Inet4Address`. Rust prints IPv6
//! compressed (`::1`), so comparing with Rust's `Display` would not be Kafka's rule.
//!
//! Instead of formatting the client address on every check, each ACL host is resolved once,
//! when the ACL is indexed, to the only address whose Java form equals it (or to "matches no
//! address"); the hot path then compares [`IpAddr`]s.

use std::fmt::Write as _;
use std::net::IpAddr;

/// What an ACL's host string matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum HostMatch {
    /// `*`: every client.
    Any,
    /// The client whose Java host address is exactly the ACL's host string.
    Exact(IpAddr),
    /// No client: a host name, a compressed IPv6 literal, `127.0.0` … Such an ACL still counts
    /// as "an ACL exists for this resource".
    Never,
}

impl HostMatch {
    /// Resolves an ACL's host string.
    pub(crate) fn of(host: &str) -> Self {
        if host == portcullis::acl::WILDCARD_HOST {
            return HostMatch::Any;
        }
        match host.parse::<IpAddr>() {
            Ok(ip) => {
                let ip = normalize(ip);
                if java_host_address(ip) == host {
                    HostMatch::Exact(ip)
                } else {
                    HostMatch::Never
                }
            }
            Err(_) => HostMatch::Never,
        }
    }
}

/// The address Java reports for a client: IPv4-mapped IPv6 addresses are IPv4.
pub fn normalize(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Java's `InetAddress.getHostAddress()` of `ip`, an IPv4-mapped IPv6 address written as IPv4
/// (as `normalize` does): the string an ACL host must equal to match this client.
pub fn java_host_address(ip: IpAddr) -> String {
    match normalize(ip) {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let mut out = String::with_capacity(39);
            for (i, group) in v6.segments().iter().enumerate() {
                if i > 0 {
                    out.push(':');
                }
                // Writing to a String cannot fail.
                let _ = write!(out, "{group:x}");
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_forms() {
        let v6: IpAddr = "::1".parse().unwrap();
        assert_eq!(java_host_address(v6), "0:0:0:0:0:0:0:1");
        let v6: IpAddr = "fe80::AB:1".parse().unwrap();
        assert_eq!(java_host_address(v6), "fe80:0:0:0:0:0:ab:1");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(java_host_address(mapped), "10.0.0.1");
    }

    #[test]
    fn acl_hosts_resolve_to_the_one_matching_address() {
        assert_eq!(HostMatch::of("*"), HostMatch::Any);
        assert_eq!(
            HostMatch::of("127.0.0.1"),
            HostMatch::Exact("127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            HostMatch::of("0:0:0:0:0:0:0:1"),
            HostMatch::Exact("::1".parse().unwrap())
        );
        // Kafka compares strings: these never equal any client's Java host address.
        for never in [
            "::1",
            "127.0.01",
            "localhost",
            "0:0:0:0:0:0:0:01",
            "::ffff:1.2.3.4",
            "",
        ] {
            assert_eq!(HostMatch::of(never), HostMatch::Never, "{never}");
        }
    }
}
