//! A stand-in receiver on loopback that answers each request as the test says (tiny_http).
#![allow(dead_code)]
use std::thread::JoinHandle;

/// One request the stand-in took.
pub struct Request {
    pub method: String,
    /// The path with its query.
    pub url: String,
    pub auth: Option<String>,
    pub body: String,
}

impl Request {
    /// Whether it carries `Authorization: Bearer <token>`.
    pub fn bearer(&self, token: &str) -> bool {
        self.auth.as_deref() == Some(&format!("Bearer {token}"))
    }
}

/// Serves on 127.0.0.1 until the test ends: `answer` (made knowing the port) gives each
/// request's status and JSON text; a 204 goes without a body. Returns the port.
pub fn serve<F>(answer: impl FnOnce(u16) -> F) -> (u16, JoinHandle<()>)
where
    F: FnMut(&Request) -> (u16, String) + Send + 'static,
{
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    let mut answer = answer(port);
    let thread = std::thread::spawn(move || {
        for mut rq in server.incoming_requests() {
            let mut body = String::new();
            let _ = rq.as_reader().read_to_string(&mut body);
            let request = Request {
                method: rq.method().to_string(),
                url: rq.url().to_string(),
                auth: rq
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("authorization"))
                    .map(|h| h.value.to_string()),
                body,
            };
            let (status, text) = answer(&request);
            let text = if status == 204 { String::new() } else { text };
            let json = "content-type: application/json".parse::<tiny_http::Header>();
            let resp = tiny_http::Response::from_string(text)
                .with_status_code(status)
                .with_header(json.unwrap());
            let _ = rq.respond(resp);
        }
    });
    (port, thread)
}
