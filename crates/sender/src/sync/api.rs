//! Delivery through a harness's server API (DECISIONS 15): OpenCode has no blocking hooks, so
//! sp-sync sends its messages at once through the server its plugin reported:
//!
//! | kind | request | when |
//! |---|---|---|
//! | prompt | `POST /session/:id/prompt_async` `{parts:[{type:"text",text}]}` | the session is idle |
//! | cancel | `POST /session/:id/abort` (answers `true`) | at once |
//! | permission.answer | `POST /permission/:requestID/reply` `{reply:"once"\|"reject", message?}` | at once; never `always` |
//! | … with `interrupt` (deny & stop) | the reject, then `POST /session/:id/abort` | at once |
//! | … with `scope: "session"` | the reply, plus our grant: the plugin's next identical prompt is answered from it, sp-event leaving the reply in the store for sp-sync (`api_grant_replies`) | at once |
//!
//! The ack is `delivered` when the API answered success and `failed` with its error otherwise;
//! a prompt's `delivered` (mode `api`, after its `taken`) waits for the session's next idle
//! and carries the turn's answer, read with `GET /session/:id/message` (DECISIONS 38).
//! A server that just opened its port can hang requests (~2 s), so nothing is sent in the first
//! moments after a server URL is first reported, and every call has a total timeout.
//! `OPENCODE_SERVER_PASSWORD` (and `OPENCODE_SERVER_USERNAME`, default `opencode`) in
//! sp-sync's environment turn on HTTP Basic auth, as they do for the server.
use super::Shared;
use crate::clock::now_ms;
use crate::store::{ApiGrantReply, ApiMessage, ApiSession, NewGrant, SessionRef, Store};
use crate::wire::control::{Decision, Outcome, Scope};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::Duration;

/// The harnesses delivered through a server API.
const HARNESSES: &[&str] = &["opencode"];
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Every call ends within this, answered or not.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// A server URL reported less than this long ago is not called yet (OpenCode's startup race).
const WARMUP_MS: i64 = 2_500;
/// With nothing to do, look again this often (a warm-up ends, an idle arrives).
const IDLE_WAIT: Duration = Duration::from_millis(500);

/// One OpenCode server call's failure, as the ack's detail says it.
type CallError = String;

struct Api {
    /// For loopback servers (the usual case): never through a proxy (DECISIONS 24).
    direct: ureq::Agent,
    proxied: ureq::Agent,
    auth: Option<String>,
}

impl Api {
    fn new() -> Api {
        // No redirects (a 3xx is an error, acked `failed`), no proxy for loopback.
        let config =
            || super::http::agent_config(CONNECT_TIMEOUT).timeout_global(Some(CALL_TIMEOUT));
        let direct: ureq::Agent = config().proxy(None).build().into();
        let proxied: ureq::Agent = config().build().into();
        let auth = std::env::var("OPENCODE_SERVER_PASSWORD")
            .ok()
            .filter(|p| !p.is_empty())
            .map(|p| {
                let user =
                    std::env::var("OPENCODE_SERVER_USERNAME").unwrap_or_else(|_| "opencode".into());
                format!("Basic {}", base64(format!("{user}:{p}").as_bytes()))
            });
        Api {
            direct,
            proxied,
            auth,
        }
    }

    /// POSTs JSON to `path` of the session's server; the answer's body on a 2xx.
    fn post(&self, s: &ApiSession, path: &str, body: &Value) -> Result<String, CallError> {
        self.call(s, path, "", Some(body))
    }

    /// POSTs `body` (GETs without one) to `path` of the session's server, `query` appended
    /// after its directory; the answer's body on a 2xx, at most 1 MiB.
    fn call(
        &self,
        s: &ApiSession,
        path: &str,
        query: &str,
        body: Option<&Value>,
    ) -> Result<String, CallError> {
        let base = s
            .base_url
            .as_deref()
            .ok_or("no OpenCode server URL was reported for this session")?;
        let mut url = format!("{base}{path}?");
        if let Some(d) = s.directory.as_deref() {
            url.push_str("directory=");
            url.push_str(&percent_encode(d));
        }
        url.push_str(query);
        let url = url.trim_end_matches('?').to_string();
        let agent = if spwire::url::is_loopback_url(&url) {
            &self.direct
        } else {
            &self.proxied
        };
        let sent = match body {
            Some(body) => {
                let mut req = agent
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("accept", "application/json");
                if let Some(a) = &self.auth {
                    req = req.header("authorization", a);
                }
                req.send(body.to_string())
            }
            None => {
                let mut req = agent.get(&url).header("accept", "application/json");
                if let Some(a) = &self.auth {
                    req = req.header("authorization", a);
                }
                req.call()
            }
        };
        let mut resp = sent.map_err(|e| format!("OpenCode at {base}: {e}"))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_string()
            .unwrap_or_default();
        if (200..300).contains(&status) {
            Ok(text)
        } else {
            let text = spwire::text::truncate(text.trim(), 300);
            let method = if body.is_some() { "POST" } else { "GET" };
            Err(format!(
                "OpenCode answered {status} to {method} {path}: {text}"
            ))
        }
    }

    /// A call whose success answer is `true` (abort, permission reply).
    fn post_true(&self, s: &ApiSession, path: &str, body: &Value) -> Result<(), CallError> {
        let text = self.post(s, path, body)?;
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Bool(false)) => Err(format!("OpenCode answered false to POST {path}")),
            _ => Ok(()),
        }
    }
}

/// The API sender thread: delivers whenever something may have changed (a poll stored a
/// message, a hook reported idle), until sp-sync stops.
pub(crate) fn api_loop(shared: &Shared) {
    let mut store = match shared.open_store() {
        Ok(s) => s,
        Err(e) => {
            crate::logging::error(&format!("api delivery: {e:#}"));
            return;
        }
    };
    let api = Api::new();
    let mut seen = 0u64;
    while !shared.stopping() {
        if let Err(e) = pass_with(&api, &mut store) {
            crate::logging::warn(&format!("api delivery: {e:#}"));
        }
        shared.wait_work(&mut seen, IDLE_WAIT);
    }
}

/// One delivery pass (sp-sync --once).
pub(crate) fn pass(store: &mut Store) {
    if let Err(e) = pass_with(&Api::new(), store) {
        crate::logging::warn(&format!("api delivery: {e:#}"));
    }
}

fn pass_with(api: &Api, store: &mut Store) -> anyhow::Result<()> {
    for r in store.api_grant_replies()? {
        grant_reply(api, store, &r)?;
    }
    let pid = std::process::id();
    for harness in HARNESSES {
        for s in store.api_turns_done(harness)? {
            turn_done(api, store, &s)?;
        }
    }
    let mut prompted = HashSet::new();
    for harness in HARNESSES {
        for m in store.api_queued(harness)? {
            let s = &m.session;
            if let Some(why) = unreachable(s) {
                if store.api_claim(&m.id, pid)? {
                    store.api_finish(std::slice::from_ref(&m.id), Outcome::Failed, &why)?;
                    crate::logging::warn(&format!("{}: {} {} failed: {why}", s.key, m.kind, m.id));
                }
                continue;
            }
            if s.since_ms.is_some_and(|t| now_ms() - t < WARMUP_MS) {
                continue;
            }
            match m.kind.as_str() {
                "cancel" => cancel(api, store, &m, pid)?,
                "permission.answer" => answer(api, store, &m, pid)?,
                "prompt" if s.idle != Some(false) && prompted.insert(s.key.clone()) => {
                    prompt(api, store, s, pid)?
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Why the session's server cannot be called at all, if so.
fn unreachable(s: &ApiSession) -> Option<String> {
    let Some(base) = s.base_url.as_deref() else {
        return Some(format!(
            "no {} server URL was reported for this session (is the sessionpipe plugin installed?)",
            s.harness
        ));
    };
    if let Err(e) = crate::config::check_url(base) {
        return Some(format!("{} server URL refused: {e:#}", s.harness));
    }
    None
}

fn ack_detail(r: &Result<(), CallError>, ok: &str) -> (Outcome, String) {
    match r {
        Ok(()) => (Outcome::Delivered, ok.to_string()),
        Err(e) => (Outcome::Failed, spwire::text::truncate(e, 500)),
    }
}

fn cancel(api: &Api, store: &mut Store, m: &ApiMessage, pid: u32) -> anyhow::Result<()> {
    if !store.api_claim(&m.id, pid)? {
        return Ok(());
    }
    let s = &m.session;
    let r = api.post_true(s, &format!("/session/{}/abort", s.session_id), &json!({}));
    let (outcome, detail) = ack_detail(&r, "opencode POST /session/:id/abort");
    if r.is_ok() {
        // So the idle that follows reports the turn ended `interrupt`, not finished.
        store.mark_stopped(&s.key)?;
    }
    store.api_finish(std::slice::from_ref(&m.id), outcome, &detail)?;
    crate::logging::info(&format!(
        "{}: cancel {} {}: {detail}",
        s.key,
        m.id,
        outcome.as_str()
    ));
    Ok(())
}

fn answer(api: &Api, store: &mut Store, m: &ApiMessage, pid: u32) -> anyhow::Result<()> {
    let s = &m.session;
    let Some(attention) = m.attention_id.as_deref() else {
        return Ok(());
    };
    // What a grant for the session keeps: the prompt as the person saw it (read while open).
    let shown = store.api_attention_call(&s.key, attention)?;
    // The same claim the waiting hooks use: only a valid, unexpired answer naming exactly this
    // attention of this session, and only while the attention is open.
    let Some(claimed) = store.claim_answer(&s.key, attention, pid)? else {
        return Ok(());
    };
    let stop = claimed.decision == Decision::Deny && claimed.rich.interrupt;
    let body = match claimed.decision {
        Decision::Allow => json!({ "reply": "once" }),
        // A reject with a message is feedback OpenCode hands the model, which it then calls
        // again; deny & stop rejects without one, so the loop ends there.
        Decision::Deny if stop => json!({ "reply": "reject" }),
        Decision::Deny => match claimed.note.as_deref().filter(|n| !n.trim().is_empty()) {
            Some(note) => json!({ "reply": "reject", "message": note }),
            None => json!({ "reply": "reject" }),
        },
    };
    if stop {
        // Before the reject: the idle that follows reports the turn ended `interrupt`.
        store.mark_stopped(&s.key)?;
    }
    let r = api.post_true(s, &format!("/permission/{attention}/reply"), &body);
    let (outcome, mut detail) = ack_detail(&r, "opencode POST /permission/:id/reply");
    if outcome == Outcome::Delivered {
        let session = SessionRef {
            harness: s.harness.clone(),
            session_id: s.session_id.clone(),
            cwd: None,
            event: "permission.reply".into(),
            permission_mode: None,
        };
        // DECISIONS 30 `interrupt` (deny & stop): after the reject the session is aborted.
        if stop {
            let r = api.post_true(s, &format!("/session/{}/abort", s.session_id), &json!({}));
            match r {
                Ok(()) => {
                    detail.push_str(" (reject), then POST /session/:id/abort: the turn ends");
                }
                Err(e) => detail.push_str(&format!(
                    " (reject); the abort failed, the turn goes on: {}",
                    spwire::text::truncate(&e, 300)
                )),
            }
        }
        match (claimed.scope == Scope::Session, shown) {
            (true, Some((tool, Some(message)))) => {
                let call = crate::harness::opencode::grant_call(
                    tool.as_deref().unwrap_or("permission"),
                    &message,
                );
                let folder = store.grant_folder(&session);
                let grant = NewGrant {
                    session_key: &s.key,
                    folder: folder.as_deref(),
                    tool: &call.tool,
                    input: &call.input,
                    summary: &message,
                    decision: claimed.decision,
                    answer: None,
                    who: &claimed.sink,
                    message_id: &claimed.id,
                    until_ms: None,
                };
                store.confirm_answer_with_grant(&session, attention, &claimed, &detail, &grant)?;
            }
            _ => store.confirm_answer(&session, attention, &claimed, &detail)?,
        }
    } else {
        // OpenCode still asks in its TUI; the attention stays open for another answer.
        store.api_finish(std::slice::from_ref(&claimed.id), outcome, &detail)?;
    }
    crate::logging::info(&format!(
        "{}: {} {} for {attention} {}: {detail}",
        s.key,
        claimed.decision.as_str(),
        claimed.id,
        outcome.as_str()
    ));
    Ok(())
}

/// A permission prompt a grant of the session answers (the permission hook left it): `once`
/// or `reject` to its request, never `always`, and no attention announced. When the server
/// does not take it, the prompt is announced as the hook would have (the person is asked).
fn grant_reply(api: &Api, store: &mut Store, r: &ApiGrantReply) -> anyhow::Result<()> {
    let s = &r.session;
    let sent = match unreachable(s) {
        Some(why) => Err(why),
        // A server that just opened its port can hang requests: later.
        None if s.since_ms.is_some_and(|t| now_ms() - t < WARMUP_MS) => return Ok(()),
        None => {
            let body = match r.decision {
                Decision::Allow => json!({ "reply": "once" }),
                Decision::Deny => json!({ "reply": "reject",
                    "message": format!("Denied by the person through sessionpipe for this session (grant {}).", r.grant_id) }),
            };
            api.post_true(s, &format!("/permission/{}/reply", r.request_id), &body)
        }
    };
    let session = SessionRef {
        harness: s.harness.clone(),
        session_id: s.session_id.clone(),
        cwd: r.cwd.clone(),
        event: r.hook_event.clone(),
        permission_mode: None,
    };
    store.api_grant_reply_done(r)?;
    match sent {
        Ok(()) => {
            store.grant_used(r.grant_id, &session)?;
            crate::logging::info(&format!(
                "{}: {} {} from grant {} through the server API, no attention announced",
                s.key,
                r.request_id,
                r.decision.as_str(),
                r.grant_id
            ));
        }
        Err(why) => {
            let open_for = crate::store::API_ATTENTION_OPEN.as_millis() as i64;
            store.open_attention_shown(
                &session,
                (
                    &r.request_id,
                    r.tool.as_deref(),
                    r.message.as_deref(),
                    r.input.as_ref(),
                ),
                now_ms() + open_for,
                r.hook_pid,
            )?;
            crate::logging::warn(&format!(
                "{}: grant {} not used for {}: {why}; asking as usual",
                s.key, r.grant_id, r.request_id
            ));
        }
    }
    Ok(())
}

fn prompt(api: &Api, store: &mut Store, s: &ApiSession, pid: u32) -> anyhow::Result<()> {
    let claims = store.api_take_prompts(&s.key, pid)?;
    if claims.is_empty() {
        return Ok(());
    }
    let text = crate::harness::compose_reason(&claims);
    let body = json!({ "parts": [{ "type": "text", "text": text }] });
    let r = api
        .post(s, &format!("/session/{}/prompt_async", s.session_id), &body)
        .map(|_| ());
    let (outcome, detail) = ack_detail(&r, "opencode POST /session/:id/prompt_async");
    let ids: Vec<String> = claims.into_iter().map(|c| c.id).collect();
    if outcome == Outcome::Delivered {
        store.api_mark_busy(&s.key)?;
        // DECISIONS 38: its final ack waits for the session's next idle ([`turn_done`]).
        store.deliver_for_turn(&s.key, &ids, &detail, true)?;
    } else {
        store.api_finish(&ids, outcome, &detail)?;
    }
    crate::logging::info(&format!(
        "{}: {} prompt(s) {}: {detail}",
        s.key,
        ids.len(),
        outcome.as_str()
    ));
    Ok(())
}

/// The session is idle again after prompts went in through its API: each is acked `delivered`,
/// mode `api`, with the turn's answer as `reply` (redacted, capped): the text of the session's
/// assistant messages after its last user message. Without it (the server does not answer),
/// delivered without a reply.
fn turn_done(api: &Api, store: &mut Store, s: &ApiSession) -> anyhow::Result<()> {
    let path = format!("/session/{}/message", s.session_id);
    let reply = match api.call(s, &path, "&limit=20", None) {
        Ok(body) => turn_reply(&body),
        Err(e) => {
            crate::logging::warn(&format!("{}: the turn's reply is unknown: {e}", s.key));
            None
        }
    };
    let reply = reply.map(|r| crate::wire::control::ack_reply(&r));
    let n = store.turn_ended_as(&s.key, "api", reply.as_deref())?;
    crate::logging::info(&format!(
        "{}: the turn of {n} prompt(s) ended ({})",
        s.key,
        if reply.is_some() {
            "with its reply"
        } else {
            "no reply found"
        }
    ));
    Ok(())
}

/// The text parts of the assistant messages after the last user message in OpenCode's
/// `GET /session/:id/message` answer (`[{info: {role}, parts: [{type, text}]}]`).
fn turn_reply(body: &str) -> Option<String> {
    let messages: Vec<Value> = serde_json::from_str(body).ok()?;
    let last_user = messages
        .iter()
        .rposition(|m| m.pointer("/info/role").and_then(Value::as_str) == Some("user"));
    let text: Vec<&str> = messages[last_user.map_or(0, |i| i + 1)..]
        .iter()
        .filter(|m| m.pointer("/info/role").and_then(Value::as_str) == Some("assistant"))
        .flat_map(|m| m["parts"].as_array().into_iter().flatten())
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    (!text.is_empty()).then(|| text.join("\n\n"))
}

/// RFC 3986: everything but the unreserved characters is percent-encoded.
const NOT_UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn percent_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, NOT_UNRESERVED).to_string()
}

fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn encodings() {
        assert_eq!(base64(b"opencode:secret"), "b3BlbmNvZGU6c2VjcmV0");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(
            percent_encode("/home/me/my proj"),
            "%2Fhome%2Fme%2Fmy%20proj"
        );
    }

    #[test]
    fn the_turns_reply_is_the_assistants_text_after_the_last_user_message() {
        let msgs = json!([
            {"info": {"role": "assistant"}, "parts": [{"type": "text", "text": "old"}]},
            {"info": {"role": "user"}, "parts": [{"type": "text", "text": "q"}]},
            {"info": {"role": "assistant"}, "parts": [{"type": "reasoning", "text": "hmm"},
                {"type": "text", "text": "one"}]},
            {"info": {"role": "assistant"}, "parts": [{"type": "tool"}, {"type": "text", "text": "two"}]}
        ]);
        assert_eq!(turn_reply(&msgs.to_string()).as_deref(), Some("one\n\ntwo"));
        // Nothing said since the user's message, or no list at all: no reply.
        let none = json!([{"info": {"role": "user"}, "parts": [{"type": "text", "text": "q"}]}]);
        assert_eq!(turn_reply(&none.to_string()), None);
        assert_eq!(turn_reply("true"), None);
    }
}
