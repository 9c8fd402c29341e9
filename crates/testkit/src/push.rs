//! The far end of a Web Push or ntfy notification: a push service on loopback that hands each
//! request to the test, and a device as a browser makes one (its own P-256 key and auth
//! secret) that decrypts what arrives (aes128gcm, RFC 8291).
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// One request the fake service got.
pub struct Got {
    pub path: String,
    /// Header names lower-cased.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

/// A push service (or ntfy server) on loopback: hands each request to the test and answers
/// with the next status the test queued (201 when none).
pub struct FakeService {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    pub got: mpsc::Receiver<Got>,
    /// The statuses to answer with next, in order.
    pub statuses: Arc<Mutex<Vec<u16>>>,
}

impl FakeService {
    pub fn start() -> FakeService {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!("http://{}", server.server_addr().to_ip().unwrap());
        let (tx, got) = mpsc::channel();
        let statuses = Arc::new(Mutex::new(Vec::<u16>::new()));
        let st = statuses.clone();
        std::thread::spawn(move || {
            for mut rq in server.incoming_requests() {
                let mut body = Vec::new();
                let _ = std::io::Read::read_to_end(rq.as_reader(), &mut body);
                let headers = rq
                    .headers()
                    .iter()
                    .map(|h| {
                        (
                            h.field.as_str().as_str().to_ascii_lowercase(),
                            h.value.as_str().to_owned(),
                        )
                    })
                    .collect();
                let path = rq.url().to_owned();
                let status = {
                    let mut s = st.lock().unwrap();
                    if s.is_empty() {
                        201
                    } else {
                        s.remove(0)
                    }
                };
                let _ = tx.send(Got {
                    path,
                    headers,
                    body,
                });
                let _ = rq.respond(tiny_http::Response::empty(status));
            }
        });
        FakeService { url, got, statuses }
    }

    /// The next request; fails the test when none comes within 20 s.
    #[track_caller]
    pub fn next(&self) -> Got {
        self.got
            .recv_timeout(Duration::from_secs(20))
            .expect("the receiver pushed within 20 s")
    }
}

/// A device as a browser makes one: its own key pair and auth secret.
pub struct Device {
    secret: p256::SecretKey,
    auth: [u8; 16],
}

impl Device {
    /// A device whose keys follow from `seed` (each seed another device).
    pub fn new(seed: u8) -> Device {
        Device {
            secret: p256::SecretKey::from_slice(&[seed; 32]).unwrap(),
            auth: [seed ^ 0x5a; 16],
        }
    }

    /// The subscription the browser hands the page for `endpoint`.
    pub fn subscription(&self, endpoint: &str) -> Value {
        json!({"endpoint": endpoint, "keys": {
            "p256dh": URL_SAFE_NO_PAD.encode(self.secret.public_key().to_sec1_bytes()),
            "auth": URL_SAFE_NO_PAD.encode(self.auth)}})
    }

    /// The JSON payload of a push sent to this device.
    pub fn decrypt(&self, body: &[u8]) -> Value {
        let auth = web_push_native::Auth::clone_from_slice(&self.auth);
        let plain =
            web_push_native::decrypt(body.to_vec(), &self.secret, &auth).expect("aes128gcm");
        serde_json::from_slice(&plain).unwrap()
    }
}
