//! The origin (scheme, host, port) of a URL, and which hosts are loopback (DECISIONS 24).
/// `scheme`, lower-case `host` (IPv6 without brackets) and port (the scheme's default when
/// absent) of an absolute http(s) URL; `None` when it is not one or carries a user part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{}", self.scheme, self.host, self.port)
        } else {
            write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
        }
    }
}

pub fn origin_of(url: &str) -> Option<Origin> {
    let uri: ureq::http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = uri.authority()?;
    if authority.as_str().contains('@') {
        return None;
    }
    let host = authority.host();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .trim_end_matches('.')
        .to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    Some(Origin {
        scheme,
        host,
        port: authority.port_u16().unwrap_or(default_port),
    })
}

/// 127.0.0.0/8, ::1 (also as an IPv4-mapped address) and `localhost`.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .trim_end_matches('.');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(std::net::IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => false,
    }
}

/// Whether a URL goes to a loopback host (then no proxy is ever used for it).
pub fn is_loopback_url(url: &str) -> bool {
    origin_of(url).is_some_and(|o| is_loopback_host(&o.host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_the_ones_rule_24_names() {
        for url in [
            "http://127.0.0.1:8787/x",
            "http://127.1.2.3/",
            "http://localhost:9",
            "http://LOCALHOST./",
            "http://[::1]:9/c",
            "http://[::ffff:127.0.0.1]:9/",
        ] {
            assert!(is_loopback_url(url), "{url}");
        }
        for url in [
            "https://example.com/",
            "http://10.0.0.1/",
            "http://127.0.0.1.evil.example/",
            "http://localhost.evil.example/",
            "http://127.0.0.1:9@evil.example/",
            "http://[::2]/",
            "not a url",
        ] {
            assert!(!is_loopback_url(url), "{url}");
        }
    }

    #[test]
    fn origins_compare_scheme_host_and_port() {
        let o = |u| origin_of(u).unwrap();
        assert_eq!(o("https://R.example/x"), o("https://r.example:443/y?z"));
        assert_eq!(o("http://127.0.0.1/"), o("http://127.0.0.1:80"));
        assert_ne!(o("http://127.0.0.1:9/"), o("http://127.0.0.2:9/"));
        assert_ne!(o("http://127.0.0.1:9/"), o("https://127.0.0.1:9/"));
        assert_ne!(o("http://127.0.0.1:9/"), o("http://127.0.0.1:10/"));
        assert!(origin_of("http://a@b/").is_none());
        assert!(origin_of("ftp://b/").is_none());
        assert_eq!(o("http://[::1]:9/").to_string(), "http://[::1]:9");
    }
}
