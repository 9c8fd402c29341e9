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
        // A URL we cannot read goes direct: at worst it fails, it never shows a proxy a token.
        match spwire::url::parse_origin(url) {
            Ok(o) if !o.is_loopback() => &self.proxied,
            _ => &self.direct,
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

    /// A GET of bytes (a start's attached file, DECISIONS 39): the status and at most
    /// `limit + 1` bytes, so a caller sees a body longer than it allows without reading it all.
    pub fn get_limited(
        &self,
        url: &str,
        token: &str,
        limit: u64,
        total: Duration,
    ) -> Result<(u16, Vec<u8>), String> {
        use std::io::Read;
        super::owner::check_loopback_listener(url)?;
        let mut resp = self
            .agent(url)
            .get(url)
            .config()
            .timeout_global(Some(total))
            .build()
            .header("authorization", &format!("Bearer {token}"))
            .call()
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        if (300..400).contains(&status) {
            return Err(format!(
                "answered {status} (a redirect); redirects are never followed"
            ));
        }
        let mut body = Vec::new();
        resp.body_mut()
            .with_config()
            .limit(limit.saturating_add(2))
            .reader()
            .take(limit.saturating_add(1))
            .read_to_end(&mut body)
            .map_err(|e| format!("reading the body: {e}"))?;
        Ok((status, body))
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
