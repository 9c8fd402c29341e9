//! Plain HTTP requests to a receiver: every status is an answer (no error for 4xx/5xx), no
//! redirects followed, and the answer kept whole (status, headers, body text).
use serde_json::Value;
use std::time::Duration;

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(40)))
        .build()
        .into()
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub text: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn finish_resp(mut r: ureq::http::Response<ureq::Body>) -> Resp {
    let status = r.status().as_u16();
    let headers = r
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let text = r.body_mut().read_to_string().unwrap_or_default();
    Resp {
        status,
        headers,
        text,
    }
}

pub fn get(url: &str, headers: &[(&str, &str)]) -> Resp {
    let mut req = agent().get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    finish_resp(req.call().unwrap_or_else(|e| panic!("GET {url}: {e}")))
}

pub fn post(url: &str, headers: &[(&str, &str)], content_type: &str, body: &str) -> Resp {
    let mut req = agent().post(url).header("content-type", content_type);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    finish_resp(req.send(body).unwrap_or_else(|e| panic!("POST {url}: {e}")))
}

/// The page's API as a logged-in page calls it (`Authorization: Bearer <login>`): a GET, or
/// a POST of `body` as JSON. The status, and the answer as JSON (`null` when it is not).
pub fn page_call(base: &str, login: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let url = format!("{base}{path}");
    let auth = format!("Bearer {login}");
    let r = match body {
        None => get(&url, &[("authorization", &auth)]),
        Some(b) => post(
            &url,
            &[("authorization", &auth)],
            "application/json",
            &b.to_string(),
        ),
    };
    (
        r.status,
        serde_json::from_str(&r.text).unwrap_or(Value::Null),
    )
}
