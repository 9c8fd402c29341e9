//! Blocking HTTP with a connect timeout and a total timeout on every call (DECISIONS 24):
//! no redirect is ever followed (a 3xx is an error for the caller), and proxy variables
//! (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, …) are never used for loopback hosts, so a
//! proxy never sees a loopback sink's token or what it carries. Non-loopback hosts keep
//! ureq's default: the proxy variables apply (sinks there are `https://` only, so a proxy
//! sees a CONNECT to the host, never the request).
use std::time::Duration;

pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bodies we read are small JSON; a larger answer is treated as an error.
const BODY_LIMIT: u64 = 16 * 1024 * 1024;

/// Two agents: one that never uses a proxy (loopback hosts), one that honours the proxy
/// variables as ureq reads them (every other host). Neither follows redirects.
#[derive(Clone)]
pub struct Client {
    direct: ureq::Agent,
    proxied: ureq::Agent,
}

/// An answer with any status but 3xx; transport failures and redirects are `Err`.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub retry_after: Option<String>,
    /// A receiver's word on whether the person is away (`sessionpipe-away: 1|0`, DECISIONS 27).
    pub away: Option<bool>,
    pub body: String,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

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

/// The builder every agent of ours starts from: no redirects, statuses as answers.
pub fn agent_config(connect: Duration) -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
    ureq::Agent::config_builder()
        .timeout_connect(Some(connect))
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("sessionpipe-control/", env!("CARGO_PKG_VERSION")))
}

impl Client {
    pub fn new() -> Client {
        // ureq's default config reads the proxy variables (`Proxy::try_from_env`); the
        // builder starts from that default, so `proxied` keeps them and `direct` drops them.
        Client {
            direct: agent_config(CONNECT_TIMEOUT).proxy(None).build().into(),
            proxied: agent_config(CONNECT_TIMEOUT).build().into(),
        }
    }

    fn agent(&self, url: &str) -> &ureq::Agent {
        if is_loopback_url(url) {
            &self.direct
        } else {
            &self.proxied
        }
    }

    pub fn get(&self, url: &str, token: Option<&str>, total: Duration) -> Result<Reply, String> {
        super::owner::check_loopback_listener(url)?;
        let mut req = self
            .agent(url)
            .get(url)
            .config()
            .timeout_global(Some(total))
            .build()
            .header("accept", "application/json");
        if let Some(t) = token {
            req = req.header("authorization", &format!("Bearer {t}"));
        }
        reply(req.call())
    }

    pub fn post_json(
        &self,
        url: &str,
        token: &str,
        body: &str,
        extra: &[(&str, &str)],
        total: Duration,
    ) -> Result<Reply, String> {
        super::owner::check_loopback_listener(url)?;
        let mut req = self
            .agent(url)
            .post(url)
            .config()
            .timeout_global(Some(total))
            .build()
            .header("content-type", "application/json")
            .header("authorization", &format!("Bearer {token}"))
            .header("sessionpipe-protocol", "1");
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        reply(req.send(body))
    }
}

fn reply(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<Reply, String> {
    // Error texts name the failure, never the request headers, so no token leaks into logs.
    let mut resp = r.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    if (300..400).contains(&status) {
        // Where it pointed is the receiver's text: not repeated into logs or status.
        return Err(format!(
            "answered {status} (a redirect); redirects are never followed"
        ));
    }
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let away = match resp
        .headers()
        .get("sessionpipe-away")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
    {
        Some("1" | "true") => Some(true),
        Some("0" | "false") => Some(false),
        _ => None,
    };
    let body = resp
        .body_mut()
        .with_config()
        .limit(BODY_LIMIT)
        .read_to_string()
        .map_err(|e| format!("reading the body: {e}"))?;
    Ok(Reply {
        status,
        retry_after,
        away,
        body,
    })
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
