//! Blocking HTTP with a connect timeout and a total timeout on every call.
use std::time::Duration;

pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bodies we read are small JSON; a larger answer is treated as an error.
const BODY_LIMIT: u64 = 16 * 1024 * 1024;

#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
}

/// An answer with any status; transport failures are `Err`.
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

impl Client {
    pub fn new() -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .http_status_as_error(false)
            .user_agent(concat!("sessionpipe-control/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Client { agent }
    }

    pub fn get(&self, url: &str, token: Option<&str>, total: Duration) -> Result<Reply, String> {
        let mut req = self
            .agent
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
        let mut req = self
            .agent
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
