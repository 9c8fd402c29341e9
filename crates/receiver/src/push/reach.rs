//! Where a push may go (issue 28): a logged-in page chooses the Web Push endpoints and the
//! ntfy URL, so without `--allow-private-push` they must be `https` to a public address,
//! never this machine or the networks around it (else the push log is a port scanner).
//!
//! The check is made twice: on the URL when the page sets it (an IP address or `localhost`
//! is judged at once), and on every address the name resolves to when a push is sent. That
//! second check lives in the push agent's resolver: ureq connects only to the addresses its
//! resolver returns, so the addresses checked are the ones connected to, and a second DNS
//! answer cannot swap them. The agent never uses a proxy (ureq would read `HTTP_PROXY` and
//! friends from the environment and hand it the target and its token).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

/// Why a target was refused; carried through ureq as the source of an I/O error so that
/// [`refusal`] can tell it from a network failure (a refusal is never tried again).
#[derive(Debug)]
pub(crate) struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The refusal inside a ureq error, if it is one.
pub(crate) fn refusal(e: &ureq::Error) -> Option<&Refused> {
    match e {
        ureq::Error::Io(io) => io.get_ref()?.downcast_ref::<Refused>(),
        _ => None,
    }
}

const HOW_TO_ALLOW: &str = "sp-receiver --allow-private-push allows it";

/// What kind of address `ip` is when it is not a public unicast one.
pub fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) => non_public_v4(a),
        IpAddr::V6(a) => non_public_v6(a),
    }
}

fn non_public_v4(a: Ipv4Addr) -> Option<&'static str> {
    let [b0, b1, b2, _] = a.octets();
    Some(if a.is_loopback() {
        "loopback"
    } else if b0 == 0 {
        "unspecified"
    } else if a.is_private() {
        "private"
    } else if a.is_link_local() {
        "link-local"
    } else if b0 == 100 && (b1 & 0xc0) == 64 {
        "shared (CGNAT)"
    } else if a.is_broadcast() || b0 >= 240 || (b0 == 192 && b1 == 0 && b2 == 0) {
        "reserved"
    } else if a.is_multicast() {
        "multicast"
    } else if a.is_documentation() || (b0 == 198 && (b1 & 0xfe) == 18) {
        "documentation or benchmarking"
    } else {
        return None;
    })
}

fn non_public_v6(a: Ipv6Addr) -> Option<&'static str> {
    let s = a.segments();
    // An IPv4 address written as IPv6 (mapped, NAT64, 6to4) is judged as that address.
    if let Some(v4) = a.to_ipv4_mapped() {
        return non_public_v4(v4);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return non_public_v4(Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7])));
    }
    if s[0] == 0x2002 {
        return non_public_v4(Ipv4Addr::from((u32::from(s[1]) << 16) | u32::from(s[2])));
    }
    Some(if a.is_loopback() {
        "loopback"
    } else if a.is_unspecified() {
        "unspecified"
    } else if (s[0] & 0xfe00) == 0xfc00 {
        "unique local (ULA)"
    } else if (s[0] & 0xffc0) == 0xfe80 || (s[0] & 0xffc0) == 0xfec0 {
        "link-local"
    } else if a.is_multicast() {
        "multicast"
    } else if s[0] == 0x2001 && s[1] == 0x0db8 {
        "documentation"
    } else if s[..5] == [0, 0, 0, 0, 0] || s[..4] == [0x100, 0, 0, 0] || s[..3] == [0x64, 0xff9b, 1]
    {
        // The old IPv4-compatible form, the discard prefix, NAT64 for local use.
        "reserved"
    } else {
        return None;
    })
}

/// Checks a Web Push endpoint or ntfy URL before it is kept or used: `https` with a host,
/// and no private, loopback or other non-public address (an IP address or `localhost`)
/// unless `allow_private`, which also allows `http`, but only to such an address.
pub fn check_url(url: &str, allow_private: bool) -> Result<(), String> {
    let https = || "must be an https URL".to_owned();
    let Ok(uri) = url.parse::<http::Uri>() else {
        return Err(https());
    };
    let host = uri.host().unwrap_or_default();
    if host.is_empty() {
        return Err(https());
    }
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok();
    let kind = match literal {
        Some(ip) => non_public(ip),
        None => {
            let h = host.trim_end_matches('.').to_ascii_lowercase();
            (h == "localhost" || h.ends_with(".localhost")).then_some("loopback")
        }
    };
    match (uri.scheme_str(), kind) {
        (Some("https"), None) => Ok(()),
        (Some("https" | "http"), Some(_)) if allow_private => Ok(()),
        (Some("https"), Some(kind)) => Err(format!(
            "must be an https URL to a public address: {host} is a {kind} address ({HOW_TO_ALLOW})"
        )),
        (Some("http"), Some(kind)) => Err(format!(
            "must be an https URL to a public address: {host} is a {kind} address, and http is not encrypted ({HOW_TO_ALLOW})"
        )),
        (Some("http"), None) if !allow_private => Err(format!(
            "{} (http only to a private address, with sp-receiver --allow-private-push)",
            https()
        )),
        _ => Err(https()),
    }
}

/// The resolver of the push agent: every address a name resolves to must be public (unless
/// `allow_private`), or the push is refused before any connection is made.
#[derive(Debug, Default)]
struct CheckedResolver {
    allow_private: bool,
    inner: DefaultResolver,
}

impl Resolver for CheckedResolver {
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let addrs = self.inner.resolve(uri, config, timeout)?;
        if !self.allow_private {
            let host = uri.host().unwrap_or_default();
            for a in &addrs {
                if let Some(kind) = non_public(a.ip()) {
                    let why = format!(
                        "{host} resolves to {}, a {kind} address ({HOW_TO_ALLOW})",
                        a.ip()
                    );
                    return Err(ureq::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        Refused(why),
                    )));
                }
            }
        }
        Ok(addrs)
    }
}

/// The agent every push is sent with: no proxy, no redirects, connect and total timeouts,
/// and the resolver above.
pub(crate) fn agent(
    allow_private: bool,
    connect: std::time::Duration,
    total: std::time::Duration,
) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .timeout_connect(Some(connect))
        .timeout_global(Some(total))
        .build();
    ureq::Agent::with_parts(
        config,
        DefaultConnector::default(),
        CheckedResolver {
            allow_private,
            ..CheckedResolver::default()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_unicast_addresses_are_public() {
        for (ip, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.200.0.9", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "shared (CGNAT)"),
            ("100.127.255.255", "shared (CGNAT)"),
            ("255.255.255.255", "reserved"),
            ("224.0.0.1", "multicast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00::1", "unique local (ULA)"),
            ("fc00::1", "unique local (ULA)"),
            ("fe80::1", "link-local"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("2002:7f00:1::", "loopback"),
            ("ff02::1", "multicast"),
        ] {
            assert_eq!(non_public(ip.parse().unwrap()), Some(kind), "{ip}");
        }
        for ip in [
            "1.1.1.1",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
        ] {
            assert_eq!(non_public(ip.parse().unwrap()), None, "{ip}");
        }
    }

    #[test]
    fn urls_must_be_https_to_a_public_address_unless_allowed() {
        assert_eq!(check_url("https://ntfy.sh/topic", false), Ok(()));
        assert_eq!(check_url("https://1.1.1.1/topic", false), Ok(()));
        for url in [
            "http://127.0.0.1:8080/t",
            "https://127.0.0.1:8080/t",
            "https://localhost/t",
            "https://[::1]:9/t",
            "https://10.0.0.5/t",
            "https://[fd12::1]/t",
            "https://100.100.1.1/t",
            "http://ntfy.sh/t",
        ] {
            let e = check_url(url, false).unwrap_err();
            assert!(e.contains("--allow-private-push"), "{url}: {e}");
        }
        for url in [
            "http://127.0.0.1:8080/t",
            "https://localhost/t",
            "http://[::1]:9/t",
            "http://192.168.1.20/t",
        ] {
            assert_eq!(check_url(url, true), Ok(()), "{url}");
        }
        // The flag allows private targets, not http to the world.
        for url in [
            "http://ntfy.sh/t",
            "http://1.1.1.1/t",
            "ftp://ntfy.sh/t",
            "/t",
        ] {
            assert_eq!(
                check_url(url, true),
                Err("must be an https URL".into()),
                "{url}"
            );
        }
    }
}
