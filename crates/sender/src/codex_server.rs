//! Codex's app-server (docs/codex-app-server.md): where `sp codex` keeps it, and a small
//! client for it. Codex 0.171 `app-server --listen unix://PATH` speaks JSON-RPC 2.0 (without
//! the `jsonrpc` field) inside WebSocket text frames over the Unix socket; PATH itself becomes
//! a symlink to the real socket in `/tmp/codex-daemon-<uid>/` (folder 0700, socket 0600).
//! Every wait here has a timeout and every frame a size cap; the server's bytes are parsed,
//! never trusted.
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tungstenite::protocol::WebSocketConfig;
use tungstenite::{Message, WebSocket};

/// The biggest frame or message taken from the server (thread/resume with `excludeTurns`
/// answers in a few kB; Codex itself caps messages at 16 MiB).
const MAX_MESSAGE: usize = 8 << 20;
/// Notifications kept while a request waits for its answer; beyond this the oldest go.
const MAX_BACKLOG: usize = 10_000;
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Our folder inside the state folder (0700): the socket path, the app-server's log, the
/// start lock and sp-sync's attachment report.
pub fn dir() -> PathBuf {
    crate::paths::state_dir().join("codex")
}

/// The path `sp codex` hands to `codex app-server --listen unix://…` and `codex --remote`.
pub fn socket_path() -> PathBuf {
    dir().join("app-server.sock")
}

/// sp-sync's report of which Codex threads it follows (read by `sp doctor`).
pub fn attached_file() -> PathBuf {
    dir().join("attached.json")
}

/// Set by `sp codex` in the environment of the app-server it starts, so our hooks (which run
/// inside it) know the session's approvals reach sp-sync there (its `data.control`).
pub const APP_SERVER_ENV: &str = "SESSIONPIPE_CODEX_APP_SERVER";

/// sp-sync's report is this fresh or it is not believed (it rewrites it every 2 s).
const ATTACHED_FRESH_MS: i64 = 10_000;

/// Whether sp-sync follows this thread now, by its report (a file read: hooks may call it).
pub fn followed(thread: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(attached_file()) else {
        return false;
    };
    if text.len() > 1 << 20 {
        return false;
    }
    let Ok(v) = serde_json::from_str::<Value>(&text) else {
        return false;
    };
    v["connected"] == true
        && v["at_ms"]
            .as_i64()
            .is_some_and(|t| (crate::clock::now_ms() - t).abs() < ATTACHED_FRESH_MS)
        && v["threads"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == thread))
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The real socket behind `path` after checking that only this user can reach it: a socket
/// of ours with mode 0600 or tighter, in a folder of ours with mode 0700 or tighter (both
/// the symlink's folder and the target's). Anything else is refused, never connected to.
pub fn checked_socket(path: &Path) -> Result<PathBuf> {
    let link = std::fs::symlink_metadata(path)
        .with_context(|| format!("no app-server socket at {}", path.display()))?;
    let real = if link.file_type().is_symlink() {
        if link.uid() != euid() {
            bail!("{} is a symlink of another user; refused", path.display());
        }
        std::fs::canonicalize(path)
            .with_context(|| format!("{} points nowhere (stale)", path.display()))?
    } else {
        path.to_path_buf()
    };
    for dir in [path.parent(), real.parent()].into_iter().flatten() {
        let m = std::fs::metadata(dir).with_context(|| format!("{}", dir.display()))?;
        if m.uid() != euid() || m.mode() & 0o077 != 0 {
            bail!(
                "folder {} is not private to this user (uid {}, mode {:o}); refused",
                dir.display(),
                m.uid(),
                m.mode() & 0o7777
            );
        }
    }
    let m = std::fs::metadata(&real).with_context(|| format!("{}", real.display()))?;
    if !m.file_type().is_socket() {
        bail!("{} is not a socket", real.display());
    }
    if m.uid() != euid() || m.mode() & 0o077 != 0 {
        bail!(
            "socket {} is not private to this user (uid {}, mode {:o}); refused",
            real.display(),
            m.uid(),
            m.mode() & 0o7777
        );
    }
    Ok(real)
}

/// A JSON-RPC error the app-server answered (the `failed` ack's detail).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

/// One connection to the app-server, initialized.
pub struct Client {
    ws: WebSocket<UnixStream>,
    next_id: u64,
    /// Notifications and server requests read while waiting for an answer.
    backlog: VecDeque<Value>,
}

impl Client {
    /// Connects (after [`checked_socket`]), upgrades to WebSocket and initializes as
    /// `client_name`.
    pub fn connect(path: &Path, client_name: &str) -> Result<Client> {
        let real = checked_socket(path)?;
        let stream = UnixStream::connect(&real)
            .with_context(|| format!("connecting to {}", real.display()))?;
        stream.set_read_timeout(Some(CONNECT_TIMEOUT))?;
        stream.set_write_timeout(Some(CONNECT_TIMEOUT))?;
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        let (ws, _) =
            tungstenite::client::client_with_config("ws://localhost/", stream, Some(config))
                .map_err(|e| anyhow!("WebSocket upgrade on {}: {e}", real.display()))?;
        let mut c = Client {
            ws,
            next_id: 0,
            backlog: VecDeque::new(),
        };
        c.request(
            "initialize",
            json!({"clientInfo": {"name": client_name, "title": "sessionpipe", "version": env!("CARGO_PKG_VERSION")}}),
            CONNECT_TIMEOUT,
        )?
        .map_err(|e| anyhow!("initialize: {e}"))?;
        c.send(&json!({"method": "initialized"}))?;
        Ok(c)
    }

    fn send(&mut self, v: &Value) -> Result<()> {
        self.ws
            .send(Message::text(v.to_string()))
            .map_err(|e| anyhow!("sending to the app-server: {e}"))
    }

    /// Reads one JSON message, waiting at most `wait`. `None` on timeout.
    fn read(&mut self, wait: Duration) -> Result<Option<Value>> {
        let wait = wait.max(Duration::from_millis(1));
        self.ws.get_mut().set_read_timeout(Some(wait))?;
        let until = Instant::now() + wait;
        loop {
            match self.ws.read() {
                Ok(Message::Text(t)) => match serde_json::from_str::<Value>(t.as_str()) {
                    Ok(v) if v.is_object() => return Ok(Some(v)),
                    _ => crate::logging::debug("app-server sent a frame that is no JSON object"),
                },
                Ok(Message::Close(_)) => bail!("the app-server closed the connection"),
                Ok(_) => {} // ping (answered by tungstenite), pong, binary: nothing for us
                Err(tungstenite::Error::Io(e))
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    return Ok(None)
                }
                Err(e) => bail!("reading from the app-server: {e}"),
            }
            if Instant::now() >= until {
                return Ok(None);
            }
        }
    }

    /// Sends a request and waits for its answer; notifications meanwhile go to the backlog.
    /// The outer error is the connection's; the inner one the app-server's answer.
    pub fn request(
        &mut self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<std::result::Result<Value, RpcError>> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"id": id, "method": method, "params": params}))?;
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("no answer to {method} within {timeout:?}");
            }
            let Some(v) = self.read(left)? else { continue };
            let is_answer =
                v.get("method").is_none() && v.get("id").and_then(Value::as_u64) == Some(id);
            if !is_answer {
                if self.backlog.len() >= MAX_BACKLOG {
                    self.backlog.pop_front();
                }
                self.backlog.push_back(v);
                continue;
            }
            if let Some(e) = v.get("error") {
                return Ok(Err(RpcError {
                    code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: spwire::text::truncate(
                        e.get("message").and_then(Value::as_str).unwrap_or("error"),
                        400,
                    ),
                }));
            }
            return Ok(Ok(v.get("result").cloned().unwrap_or(Value::Null)));
        }
    }

    /// The next notification or server request, waiting at most `wait`.
    pub fn next_message(&mut self, wait: Duration) -> Result<Option<Value>> {
        if let Some(v) = self.backlog.pop_front() {
            return Ok(Some(v));
        }
        self.read(wait)
    }

    /// Answers a server request (an approval) with `result`.
    pub fn respond(&mut self, id: &Value, result: Value) -> Result<()> {
        self.send(&json!({"id": id, "result": result}))
    }
}

/// Whether an app-server answers at `path` (connect, upgrade, initialize).
pub fn probe(path: &Path) -> Result<()> {
    Client::connect(path, "sessionpipe-probe").map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn only_a_private_socket_in_private_folders_is_accepted() {
        let tmp = tempfile::tempdir().unwrap();
        let theirs = tmp.path().join("daemon");
        let ours = tmp.path().join("ours");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::create_dir(&ours).unwrap();
        chmod(&theirs, 0o700);
        chmod(&ours, 0o700);
        let real = theirs.join("s");
        let _l = UnixListener::bind(&real).unwrap();
        chmod(&real, 0o600);
        let link = ours.join("app-server.sock");
        std::os::unix::fs::symlink(&real, &link).unwrap();

        assert_eq!(checked_socket(&link).unwrap(), real.canonicalize().unwrap());
        assert_eq!(checked_socket(&real).unwrap(), real);

        chmod(&real, 0o666);
        let e = format!("{:#}", checked_socket(&link).unwrap_err());
        assert!(
            e.contains("is not private to this user") && e.contains("666"),
            "{e}"
        );
        chmod(&real, 0o600);

        chmod(&theirs, 0o755);
        let e = format!("{:#}", checked_socket(&link).unwrap_err());
        assert!(e.contains("folder") && e.contains("755"), "{e}");
        chmod(&theirs, 0o700);

        chmod(&ours, 0o711);
        assert!(
            checked_socket(&link).is_err(),
            "our own folder must be private too"
        );
        chmod(&ours, 0o700);

        // Not a socket, or nothing there: refused with the reason.
        let plain = theirs.join("plain");
        std::fs::write(&plain, b"x").unwrap();
        chmod(&plain, 0o600);
        let e = format!("{:#}", checked_socket(&plain).unwrap_err());
        assert!(e.contains("is not a socket"), "{e}");
        std::fs::remove_file(&real).unwrap();
        let e = format!("{:#}", checked_socket(&link).unwrap_err());
        assert!(e.contains("points nowhere"), "{e}");
    }
}
