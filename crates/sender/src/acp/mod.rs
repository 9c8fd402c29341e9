//! sp-acp (DECISIONS 29): a transparent stdio proxy an ACP client (an editor) launches in
//! place of the agent. Every frame passes through unchanged and in order, both ways; the
//! proxy only reads the few frames that matter to sessionpipe:
//!
//! | frame | what the proxy does |
//! |---|---|
//! | `initialize` result | notes `agentInfo.name` and how a message joins a running turn (Harn's `session/inject`, the `_session/steering` extension, Harn 0.10's `session/prompt` `delivery: "steer"`, or claude-agent-acp's `promptQueueing`) |
//! | `session/new` result, `session/load` result | the session becomes live in the store (harness `acp`; its `session.started` names the agent and what the session honours, [`agent`]) |
//! | `session/prompt` request / result | the session is busy until the result (its `stopReason`) |
//! | `session/request_permission` | `attention.needed` (its id: the `toolCallId` and a digest of the input, DECISIONS 32); a remote answer that comes first answers the agent |
//! | the editor's response to a permission the proxy answered | swallowed |
//! | responses to the proxy's own requests (`sp-acp-N` ids) | swallowed |
//!
//! Frames go through on the forwarding threads; everything that touches the store happens
//! on one controller thread ([`control`]), fed by a bounded queue, so a slow or broken store
//! never delays or breaks a frame.
pub mod agent;
mod control;
pub mod elicit;
pub mod frame;
pub mod options;
pub mod wire;

use frame::{Sink, Verdict};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};

/// The harness name of every ACP session in the store (see `harness::route`).
pub const HARNESS: &str = "acp";
/// Events waiting for the controller; past this the forwarders drop them (and log), never wait.
const QUEUE_BOUND: usize = 4096;
/// At most this many requests of each kind are tracked; more are forwarded untracked.
pub(crate) const TRACK_MAX: usize = 10_000;
/// At most this many grants for the session (DECISIONS 30 `scope: "session"`) per session; an
/// answer that would need one more is acked `unsupported` and the prompt stays open.
pub const GRANTS_MAX: usize = 256;
/// Prefix of the ids of the proxy's own requests to the agent.
pub const OWN_ID_PREFIX: &str = "sp-acp-";

pub const HELP: &str = "\
sp-acp: a transparent stdio proxy between an ACP client (an editor) and an ACP agent

USAGE:
  sp-acp -- AGENT [ARGS...]

The editor runs sp-acp in place of the agent, e.g. in Zed's settings.json:
  \"agent_servers\": { \"OpenCode (sessionpipe)\": { \"command\": \"sp-acp\", \"args\": [\"--\", \"opencode\", \"acp\"] } }
(`sp hooks print acp` prints that snippet with the full path.)

Every frame passes through unchanged. Sessions become live sessions of harness `acp` in the
sessionpipe store, permission requests are announced to the receivers, and their answers,
cancels and prompts reach the agent. The agent's stderr and exit status pass through; a
failure of sp-acp itself is logged and never stops the session.
";

/// What the editor asked that the proxy waits to see answered.
#[derive(Debug, Clone)]
enum ClientReq {
    Initialize,
    New { cwd: Option<String> },
    Load { sid: String, cwd: Option<String> },
    Prompt { sid: String },
    SetMode { sid: String, mode: String },
}

/// A `session/request_permission` of the agent that nobody has answered yet.
#[derive(Debug, Clone)]
pub(crate) struct Perm {
    /// The request's id exactly as the agent sent it.
    pub id: Value,
    pub sid: String,
    pub attention: String,
    /// The options as offered.
    pub options: Vec<options::PermOption>,
    /// What a grant for the session must match: the tool and its exact input ([`grant_key`]).
    pub grant: String,
    /// Set when the request is an `elicitation/create` (rule 41): what it asks.
    pub elicit: Option<Arc<elicit::Elicit>>,
}

/// A request the proxy sent to the agent itself.
#[derive(Debug, Clone)]
pub(crate) enum Own {
    Prompt {
        sid: String,
        /// The phone's messages it carries.
        ids: Vec<String>,
    },
    Inject {
        sid: String,
        ids: Vec<String>,
        /// The method and mode it went as, for the ack ("session/inject mode steer").
        how: &'static str,
        /// A `session/prompt` the agent queues into the running turn (Claude Agent's
        /// `promptQueueing`): it counts as a prompt in flight until its response, which may
        /// carry the rest of the turn.
        queued: bool,
    },
    /// A `_session/steering` request; its answer says whether the text joined the turn.
    Steering {
        sid: String,
        ids: Vec<String>,
        text: String,
    },
}

impl Own {
    pub fn sid(&self) -> &str {
        match self {
            Own::Prompt { sid, .. } | Own::Inject { sid, .. } | Own::Steering { sid, .. } => sid,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Sess {
    /// Prompts in flight (the editor's and the proxy's).
    pub prompts: u32,
    /// The agent's text of the running turn (`agent_message_chunk`s), taken when it ends.
    pub text: String,
}

/// The most of a turn's text kept (bytes). The reply is redacted whole and then cut to
/// 20,000 characters; this leaves room for what redaction shortens.
pub(crate) const TURN_TEXT_MAX: usize = 256 * 1024;

#[derive(Debug, Default)]
pub(crate) struct State {
    client_requests: HashMap<String, ClientReq>,
    pub perms: HashMap<String, Perm>,
    /// Agent requests the proxy answered: the editor's later response is swallowed.
    pub answered: HashSet<String>,
    pub own: HashMap<String, Own>,
    pub sessions: HashMap<String, Sess>,
    pub inject: bool,
    /// Harn 0.10's way into a running turn (it has no `session/inject`): `session/prompt`
    /// with `delivery: "steer"`.
    pub delivery_steer: bool,
    /// `agentCapabilities._meta.claudeCode.promptQueueing` (claude-agent-acp): a
    /// `session/prompt` sent while a turn runs joins that turn at its next tool boundary.
    pub prompt_queueing: bool,
    /// `_meta.steering.supported`: the agent takes `_session/steering` into a running turn.
    pub steering: bool,
    pub agent_name: Option<String>,
    /// Grants for the session (DECISIONS 30): session id → [`grant_key`] → the decision, kept
    /// for this proxy's lifetime, at most [`GRANTS_MAX`] a session.
    pub grants: HashMap<String, HashMap<String, crate::wire::control::Decision>>,
    /// The command sp-acp launched, which names the agent when `agentInfo` does not.
    pub command: Vec<String>,
    next_id: u64,
}

impl State {
    pub fn offers(&self) -> agent::Offers {
        agent::Offers {
            inject: self.inject,
            steering: self.steering,
            delivery_steer: self.delivery_steer,
            prompt_queueing: self.prompt_queueing,
        }
    }

    /// Remembers that the proxy answered this agent request, so the editor's own answer to it
    /// is swallowed. Bounded: past the cap a late editor answer reaches the agent, which then
    /// gets a second answer for an id it already had one for.
    pub fn swallow_later(&mut self, key: String) {
        if self.answered.len() < TRACK_MAX {
            self.answered.insert(key);
        } else {
            crate::logging::warn("sp-acp: too many unanswered requests to track; not swallowing");
        }
    }

    /// A fresh id for a request of the proxy's own, and `own`'s key for it.
    pub fn own_id(&mut self, own: Own) -> Value {
        self.next_id += 1;
        let id = Value::String(format!("{OWN_ID_PREFIX}{}", self.next_id));
        self.own.insert(id_key(&id), own);
        id
    }
}

/// What the forwarders tell the controller.
#[derive(Debug)]
pub(crate) enum Ev {
    Session {
        sid: String,
        cwd: Option<String>,
        source: &'static str,
        /// The session's mode as the agent reports it (`modes.currentModeId`).
        mode: Option<String>,
    },
    /// The session's mode changed (the editor's `session/set_mode`, or the agent's
    /// `current_mode_update`).
    Mode { sid: String, mode: String },
    Permission {
        sid: String,
        attention: String,
        tool: Option<String>,
        message: Option<String>,
        /// The input shown with it (an elicitation's questions).
        input: Option<Value>,
    },
    /// The agent withdrew a request (`$/cancel_request`) nobody had answered.
    Withdrawn { sid: String, attention: String },
    /// The editor answered a permission before any remote answer did.
    EditorAnswered { sid: String, attention: String },
    TurnEnded {
        sid: String,
        stop: Option<wire::StopReason>,
        /// The agent's text of the turn (empty when another prompt of it still runs).
        text: String,
    },
    OwnDone {
        own: Own,
        result: Result<Value, String>,
        /// A turn of the session was still running when the answer came (so its
        /// `TurnEnded` is still to come): read here, in frame order, not by the controller
        /// later, when it may have ended meanwhile.
        running: bool,
    },
    /// A frame for the agent the controller writes (an answer from a grant for the session),
    /// so the forwarding thread never waits on the agent's stdin.
    ToAgent { frame: String },
    /// The agent exited: end this proxy's sessions.
    Closed,
}

/// The shape every frame is read as; only these fields are looked at, and the payloads are
/// kept raw (borrowed from the frame) until one turns out to matter.
#[derive(serde::Deserialize)]
struct Msg<'a> {
    id: Option<Value>,
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

fn parse(frame: &[u8]) -> Option<Msg<'_>> {
    serde_json::from_slice::<Msg>(frame).ok()
}

/// A JSON-RPC id as a map key: `1` and `"1"` stay different.
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// The few request fields sp-acp reads from the editor; everything else is skipped unread.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Fields {
    session_id: Option<String>,
    cwd: Option<String>,
    mode_id: Option<String>,
}

fn fields(params: Option<&RawValue>) -> Fields {
    params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default()
}

pub(crate) struct Shared {
    pub state: Mutex<State>,
    events: SyncSender<Ev>,
    pub to_agent: Sink,
    pub to_editor: Sink,
}

impl Shared {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send(&self, ev: Ev) {
        if let Err(e) = self.events.try_send(ev) {
            crate::logging::warn(&format!("sp-acp: event dropped ({e}); the store is behind"));
        }
    }

    /// A frame from the editor, before it is forwarded to the agent.
    fn editor_frame(&self, frame: &[u8]) -> Verdict {
        let Some(m) = parse(frame) else {
            return Verdict::Forward;
        };
        let Some(id) = &m.id else {
            return Verdict::Forward;
        };
        let key = id_key(id);
        let mut st = self.lock();
        match m.method.as_deref() {
            None => {
                // A response to one of the agent's requests.
                if st.answered.remove(&key) {
                    crate::logging::info(&format!(
                        "sp-acp: the editor's answer to {key} swallowed (answered remotely)"
                    ));
                    return Verdict::Swallow;
                }
                if let Some(p) = st.perms.remove(&key) {
                    drop(st);
                    self.send(Ev::EditorAnswered {
                        sid: p.sid,
                        attention: p.attention,
                    });
                }
            }
            Some(method) => {
                let f = || fields(m.params);
                let req = match method {
                    "initialize" => Some(ClientReq::Initialize),
                    "session/new" => Some(ClientReq::New { cwd: f().cwd }),
                    "session/load" => {
                        let f = f();
                        f.session_id.map(|sid| ClientReq::Load { sid, cwd: f.cwd })
                    }
                    "session/set_mode" => {
                        let f = f();
                        f.session_id
                            .zip(f.mode_id)
                            .map(|(sid, mode)| ClientReq::SetMode { sid, mode })
                    }
                    "session/prompt" => f().session_id.map(|sid| {
                        st.sessions.entry(sid.clone()).or_default().prompts += 1;
                        ClientReq::Prompt { sid }
                    }),
                    _ => None,
                };
                if let Some(req) = req {
                    if st.client_requests.len() < TRACK_MAX {
                        st.client_requests.insert(key, req);
                    }
                }
            }
        }
        Verdict::Forward
    }

    /// A frame from the agent, before it is forwarded to the editor.
    fn agent_frame(&self, frame: &[u8]) -> Verdict {
        let Some(m) = parse(frame) else {
            return Verdict::Forward;
        };
        match (&m.id, m.method.as_deref()) {
            (Some(id), None) => self.agent_response(&id_key(id), &m),
            (Some(id), Some("session/request_permission")) => self.permission(id, &m),
            (Some(id), Some("elicitation/create")) => self.elicitation(id, &m),
            (None, Some("$/cancel_request")) => self.withdrawn(&m),
            (None, Some("session/update")) => self.mode_update(&m),
            _ => Verdict::Forward,
        }
    }

    fn agent_response(&self, key: &str, m: &Msg) -> Verdict {
        let mut st = self.lock();
        if let Some(own) = st.own.remove(key) {
            let ends_a_prompt = match &own {
                Own::Prompt { sid, .. }
                | Own::Inject {
                    sid, queued: true, ..
                } => Some(sid.clone()),
                Own::Inject { .. } | Own::Steering { .. } => None,
            };
            let running = st.sessions.get(own.sid()).is_some_and(|s| s.prompts > 0);
            let text = ends_a_prompt
                .as_ref()
                .map(|sid| end_prompt(&mut st, sid))
                .unwrap_or_default();
            drop(st);
            let result = own_result(m);
            // OwnDone first: a queued prompt's messages wait for the turn's end, which may
            // be this very answer.
            self.send(Ev::OwnDone {
                own,
                result,
                running,
            });
            if let (Some(sid), Some(r)) = (ends_a_prompt, m.result) {
                self.send(Ev::TurnEnded {
                    sid,
                    stop: wire::stop_reason(r),
                    text,
                });
            }
            return Verdict::Swallow;
        }
        let Some(req) = st.client_requests.remove(key) else {
            return Verdict::Forward;
        };
        match req {
            ClientReq::Initialize => {
                if let Some(r) = m.result {
                    st.agent_name = wire::agent_name(r);
                    let v: Value = serde_json::from_str(r.get()).unwrap_or(Value::Null);
                    let caps = v.get("agentCapabilities").unwrap_or(&Value::Null);
                    st.inject = offers_inject(caps);
                    st.delivery_steer = offers_delivery_steer(caps);
                    st.prompt_queueing = offers_prompt_queueing(caps);
                    st.steering = offers_steering(&v);
                    let offered = |b: bool| if b { "offered" } else { "not offered" };
                    crate::logging::info(&format!(
                        "sp-acp: agent {:?}, protocol {}, session/inject {}, _session/steering {}, session/prompt delivery steer {}, promptQueueing {}",
                        st.agent_name.as_deref().unwrap_or("(unnamed)"),
                        v.get("protocolVersion").unwrap_or(&Value::Null),
                        offered(st.inject),
                        offered(st.steering),
                        offered(st.delivery_steer),
                        offered(st.prompt_queueing),
                    ));
                }
            }
            ClientReq::New { cwd } => {
                if let Some(sid) = m.result.and_then(wire::new_session_id) {
                    st.sessions.entry(sid.clone()).or_default();
                    drop(st);
                    self.send(Ev::Session {
                        sid,
                        cwd,
                        source: "startup",
                        mode: m.result.and_then(wire::current_mode),
                    });
                }
            }
            ClientReq::Load { sid, cwd } if m.error.is_none() => {
                st.sessions.entry(sid.clone()).or_default();
                drop(st);
                self.send(Ev::Session {
                    sid,
                    cwd,
                    source: "resume",
                    mode: m.result.and_then(wire::current_mode),
                });
            }
            ClientReq::SetMode { sid, mode } if m.error.is_none() => {
                drop(st);
                self.send(Ev::Mode { sid, mode });
            }
            ClientReq::SetMode { .. } => {}
            ClientReq::Load { .. } => {}
            ClientReq::Prompt { sid } => {
                let text = end_prompt(&mut st, &sid);
                drop(st);
                self.send(Ev::TurnEnded {
                    sid,
                    stop: m.result.and_then(wire::stop_reason),
                    text,
                });
            }
        }
        Verdict::Forward
    }

    /// A permission request: answered at once from a grant for the session when one matches
    /// (and then not forwarded: the editor never sees it), else announced and forwarded.
    fn permission(&self, id: &Value, m: &Msg) -> Verdict {
        let Some(params) = m.params else {
            return Verdict::Forward;
        };
        let ask = match wire::permission_ask(params) {
            Ok(a) => a,
            Err(e) => {
                crate::logging::warn(&format!(
                    "sp-acp: a session/request_permission that does not match the ACP schema ({e}); not announced"
                ));
                return Verdict::Forward;
            }
        };
        let grant = grant_key(ask.kind.as_deref(), ask.title.as_deref(), &ask.raw_input);
        if let Some(frame) = self.answer_from_grant(id, &ask, &grant) {
            // Swallowed only once its answer is sure to be written; else asked as usual.
            match self.events.try_send(Ev::ToAgent { frame }) {
                Ok(()) => return Verdict::Swallow,
                Err(e) => crate::logging::warn(&format!(
                    "sp-acp: cannot answer from the grant ({e}); asking as usual"
                )),
            }
        }
        let sid = ask.session_id;
        let title = ask.title.as_deref();
        let attention =
            call_attention_id(&ask.tool_call_id, &ask.raw_input, title).unwrap_or_else(|| {
                crate::harness::minted_attention_id(&sid, title.unwrap_or(""), &ask.raw_input)
            });
        let tool = title
            .filter(|t| is_tool_name(t))
            .or(ask.kind.as_deref().filter(|k| is_tool_name(k)))
            .map(str::to_string);
        // ACP titles are for people: OpenCode and Codex title a call by its command ("echo hi >
        // out.txt"), and Codex's rawInput holds ids and an argv. A title that is not just the
        // tool's name says best what the call does; otherwise the input does.
        let name = tool.as_deref().unwrap_or("tool");
        // Copilot CLI titles a call by what it is for ("Write the marker file") and puts the
        // command in rawInput: a command the title does not show is what the person must see.
        let command = ask.raw_input.get("command").and_then(Value::as_str);
        let message = Some(match (title, command) {
            (Some(t), Some(c)) if !t.contains(c) => format!("{name} {c}"),
            (Some(t), _) if t != name && !t.trim().is_empty() => format!("{name} {t}"),
            _ => crate::harness::describe_tool(name, &ask.raw_input),
        });
        let perm = Perm {
            id: id.clone(),
            sid,
            attention,
            options: ask.options,
            grant,
            elicit: None,
        };
        self.track(self.lock(), perm, tool, message, None)
    }

    /// Keeps an agent request open until someone answers it, and announces it.
    fn track(
        &self,
        mut st: std::sync::MutexGuard<'_, State>,
        perm: Perm,
        tool: Option<String>,
        message: Option<String>,
        input: Option<Value>,
    ) -> Verdict {
        if st.perms.len() >= TRACK_MAX {
            return Verdict::Forward;
        }
        let (sid, attention) = (perm.sid.clone(), perm.attention.clone());
        st.sessions.entry(sid.clone()).or_default();
        st.perms.insert(id_key(&perm.id), perm);
        drop(st);
        self.send(Ev::Permission {
            sid,
            attention,
            tool,
            message,
            input,
        });
        Verdict::Forward
    }

    /// An `elicitation/create` (rule 41): announced as a question (a form) or a link to open
    /// (a URL), and forwarded; the first answer, the editor's or the phone's, wins.
    fn elicitation(&self, id: &Value, m: &Msg) -> Verdict {
        let Some(params) = m.params else {
            return Verdict::Forward;
        };
        let e = match elicit::read(params) {
            Ok(e) => e,
            Err(why) => {
                crate::logging::warn(&format!(
                    "sp-acp: an elicitation/create not announced: {why}"
                ));
                return Verdict::Forward;
            }
        };
        let st = self.lock();
        // One scoped to a request belongs to that request's session (a prompt's).
        let sid = e.session_id.clone().or_else(|| {
            let key = id_key(e.request_id.as_ref()?);
            match st.client_requests.get(&key) {
                Some(ClientReq::Prompt { sid }) => Some(sid.clone()),
                _ => None,
            }
        });
        let Some(sid) = sid else {
            crate::logging::warn(
                "sp-acp: an elicitation/create of no known session; not announced",
            );
            return Verdict::Forward;
        };
        let (tool, message, input) = elicit::shown(&e);
        let attention = e
            .tool_call_id
            .as_deref()
            .and_then(|t| call_attention_id(t, &input, None))
            .unwrap_or_else(|| crate::harness::minted_attention_id(&sid, tool, &input));
        let perm = Perm {
            id: id.clone(),
            sid,
            attention,
            options: Vec::new(),
            grant: String::new(),
            elicit: Some(Arc::new(e)),
        };
        self.track(st, perm, Some(tool.to_string()), Some(message), Some(input))
    }

    /// A `current_mode_update` among the agent's session updates (only frames that name it
    /// are parsed: most updates are streamed text).
    fn mode_update(&self, m: &Msg) -> Verdict {
        let Some(p) = m.params else {
            return Verdict::Forward;
        };
        if p.get().contains("agent_message_chunk") {
            self.agent_text(p);
        }
        if !p.get().contains("current_mode_update") {
            return Verdict::Forward;
        }
        if let Some((sid, mode)) = wire::mode_update(p) {
            self.send(Ev::Mode { sid, mode });
        }
        Verdict::Forward
    }

    /// The agent's text of a running turn, kept for the reply of the phone's prompts that
    /// wait for that turn's end (DECISIONS 38). Text outside a turn (a `session/load`
    /// replaying history) is not kept; at most [`TURN_TEXT_MAX`] bytes a turn.
    fn agent_text(&self, p: &RawValue) {
        let Some((sid, text)) = wire::agent_text(p) else {
            return;
        };
        let mut st = self.lock();
        let Some(s) = st.sessions.get_mut(&sid).filter(|s| s.prompts > 0) else {
            return;
        };
        let room = TURN_TEXT_MAX.saturating_sub(s.text.len());
        let mut cut = room.min(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        s.text.push_str(&text[..cut]);
    }

    /// The agent's `$/cancel_request` for a request still open: the phone's prompt is
    /// cleared (the editor gets the notification as it is).
    fn withdrawn(&self, m: &Msg) -> Verdict {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Cancel {
            request_id: Value,
        }
        let Some(c) = m
            .params
            .and_then(|p| serde_json::from_str::<Cancel>(p.get()).ok())
        else {
            return Verdict::Forward;
        };
        let p = self.lock().perms.remove(&id_key(&c.request_id));
        if let Some(p) = p {
            self.send(Ev::Withdrawn {
                sid: p.sid,
                attention: p.attention,
            });
        }
        Verdict::Forward
    }

    /// The answer to a request the person already answered for the session (the same tool,
    /// the exact same input): the agent's `allow_once` / `reject_once` option.
    fn answer_from_grant(
        &self,
        id: &Value,
        ask: &wire::PermissionAsk,
        grant: &str,
    ) -> Option<String> {
        use crate::wire::control::Decision;
        let st = self.lock();
        let decision = st.grants.get(&ask.session_id)?.get(grant)?;
        let want = match decision {
            Decision::Allow => options::Want::AllowOnce,
            Decision::Deny => options::Want::RejectOnce,
        };
        let option = &options::choose(&ask.options, want).ok()?.0.id;
        crate::logging::info(&format!(
            "sp-acp: acp:{} {}: {} from the grant for the session (option {option:?}); not announced",
            ask.session_id,
            ask.tool_call_id,
            decision.as_str()
        ));
        Some(wire::permission_selected(id, option))
    }
}

/// The agent's answer to a request of the proxy's own: its result, or its error's message.
fn own_result(m: &Msg) -> Result<Value, String> {
    match (m.result, m.error) {
        (Some(r), _) => Ok(serde_json::from_str(r.get()).unwrap_or(Value::Null)),
        (None, Some(e)) => {
            let e: Value = serde_json::from_str(e.get()).unwrap_or(Value::Null);
            Err(e
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| e.to_string(), str::to_string))
        }
        (None, None) => Err("the agent answered with neither result nor error".into()),
    }
}

/// One prompt of the session ended; when it was the last, the turn's text is taken.
fn end_prompt(st: &mut State, sid: &str) -> String {
    match st.sessions.get_mut(sid) {
        Some(s) => {
            s.prompts = s.prompts.saturating_sub(1);
            if s.prompts == 0 {
                std::mem::take(&mut s.text)
            } else {
                String::new()
            }
        }
        None => String::new(),
    }
}

/// The attention id of a call the agent named (DECISIONS 32): its `toolCallId`, `-` and the
/// first 8 hex digits of sha256 over its input as JSON, so a second request with the same id
/// and another input is a new prompt that needs its own answer. The input is `rawInput`; an
/// agent that sends none (Gemini CLI 0.61 puts the command in the title only) has its title
/// stand in, as JSON string. None when that is no usable id (then one is minted from the
/// session, title and input).
pub fn call_attention_id(
    tool_call_id: &str,
    raw_input: &Value,
    title: Option<&str>,
) -> Option<String> {
    let input = match (raw_input, title) {
        (Value::Null, Some(t)) => Value::String(t.to_string()),
        (v, _) => v.clone(),
    };
    crate::harness::named_attention_id(tool_call_id, &input)
}

/// What a grant for the session matches (DECISIONS 30): the call's kind and title (the tool as
/// the person saw it) and its exact input, as sha256 over them as JSON. Never the call's id.
pub fn grant_key(kind: Option<&str>, title: Option<&str>, raw_input: &Value) -> String {
    use sha2::{Digest, Sha256};
    let what = serde_json::json!([kind, title, raw_input]);
    let d = Sha256::digest(serde_json::to_vec(&what).unwrap_or_default());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// `^[A-Za-z0-9_.:-]{1,120}$`, what an event's `tool` may be.
fn is_tool_name(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 120
        && t.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'-'))
}

/// Whether the agent's capabilities offer Harn's `session/inject`. Harn has no published
/// capability key for it yet, so any of these counts: a key `inject` or `sessionInject` that
/// is true or an object/array, or the method name `session/inject` anywhere in them.
pub fn offers_inject(caps: &Value) -> bool {
    match caps {
        Value::Object(o) => o.iter().any(|(k, v)| {
            ((k == "inject" || k == "sessionInject")
                && (v.as_bool() == Some(true) || v.is_object() || v.is_array()))
                || offers_inject(v)
        }),
        Value::Array(a) => a.iter().any(offers_inject),
        Value::String(s) => s == "session/inject",
        _ => false,
    }
}

/// Whether the agent takes `session/prompt` with `delivery: "steer"` into a running turn, as
/// Harn 0.10 says with `promptCapabilities.delivery.steer`.
pub fn offers_delivery_steer(caps: &Value) -> bool {
    caps.pointer("/promptCapabilities/delivery/steer")
        .is_some_and(|v| !v.is_null() && v.as_bool() != Some(false))
}

/// Whether a `session/prompt` sent while a turn runs joins that turn, as claude-agent-acp
/// says with `_meta.claudeCode.promptQueueing`.
pub fn offers_prompt_queueing(caps: &Value) -> bool {
    caps.pointer("/_meta/claudeCode/promptQueueing")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Whether the agent answers `_session/steering`, the steering extension some ACP adapters
/// offer, as it says with `_meta.steering.supported: true` on its `initialize` result (under
/// `agentCapabilities` is taken too).
pub fn offers_steering(init_result: &Value) -> bool {
    [
        "/_meta/steering/supported",
        "/agentCapabilities/_meta/steering/supported",
    ]
    .iter()
    .any(|p| init_result.pointer(p).and_then(Value::as_bool) == Some(true))
}

/// The Zed `agent_servers` entry for an agent behind sp-acp (`sp hooks print acp`).
pub fn zed_snippet(bin_dir: &std::path::Path) -> String {
    let v = serde_json::json!({
        "agent_servers": {
            "OpenCode (sessionpipe)": {
                "command": bin_dir.join("sp-acp").to_string_lossy(),
                "args": ["--", "opencode", "acp"],
                "env": {}
            }
        }
    });
    format!(
        "// Zed settings.json: merge into your settings. Any ACP agent works the same way:\n\
         // put its command after \"--\" (e.g. [\"--\", \"gemini\", \"--experimental-acp\"]).\n\
         // The adapters editors install for Claude Code and Codex: [\"--\", \"npx\", \"-y\",\n\
         // \"@agentclientprotocol/claude-agent-acp\"] and [\"--\", \"npx\", \"-y\", \"@agentclientprotocol/codex-acp\"].\n{}\n",
        serde_json::to_string_pretty(&v).unwrap_or_default()
    )
}

pub enum Args {
    Run(Vec<String>),
    Help,
    Version,
}

pub fn parse_args(args: &[String]) -> Result<Args, String> {
    match args.first().map(String::as_str) {
        Some("-h" | "--help") => Ok(Args::Help),
        Some("-V" | "--version") => Ok(Args::Version),
        Some("--") if args.len() > 1 => Ok(Args::Run(args[1..].to_vec())),
        Some(a) if !a.starts_with('-') => Ok(Args::Run(args.to_vec())),
        Some("--") | None => Err("no agent given: sp-acp -- AGENT [ARGS...]".into()),
        Some(a) => Err(format!("unknown option {a:?}; see sp-acp --help")),
    }
}

/// The whole of sp-acp's `main`.
pub fn main() -> ExitCode {
    crate::logging::init("sp-acp");
    std::panic::set_hook(Box::new(|info| {
        crate::logging::error(&format!("sp-acp panic: {info}"))
    }));
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse_args(&args) {
        Ok(Args::Help) => {
            print!(
                "{HELP}\n{}\n  SESSIONPIPE_NO_SPAWN   set to stop sp-acp starting sp-sync when none runs\n",
                crate::paths::ENV_HELP
            );
            ExitCode::SUCCESS
        }
        Ok(Args::Version) => {
            println!("sp-acp {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Ok(Args::Run(agent)) => run(&agent),
        Err(e) => {
            eprintln!("sp-acp: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs the agent behind the proxy until it exits; returns its exit status.
pub fn run(agent: &[String]) -> ExitCode {
    let mut child = match Command::new(&agent[0])
        .args(&agent[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sp-acp: cannot start {:?}: {e}", agent[0]);
            crate::logging::error(&format!("cannot start {:?}: {e}", agent[0]));
            return ExitCode::from(127);
        }
    };
    crate::logging::info(&format!("sp-acp: started {agent:?} (pid {})", child.id()));
    let (tx, rx) = sync_channel(QUEUE_BOUND);
    let agent_in = child.stdin.take().map(frame::sink);
    let agent_out = child.stdout.take();
    let (Some(agent_in), Some(agent_out)) = (agent_in, agent_out) else {
        let _ = child.kill();
        return ExitCode::from(1);
    };
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            command: agent.to_vec(),
            ..State::default()
        }),
        events: tx,
        to_agent: agent_in,
        to_editor: frame::sink(std::io::stdout()),
    });
    let controller = {
        let s = Arc::clone(&shared);
        std::thread::spawn(move || control::run(&s, rx))
    };
    pass_signals_to(child.id());
    // Editor → agent. At the editor's EOF the agent's stdin is closed, which ends the agent.
    {
        let s = Arc::clone(&shared);
        std::thread::spawn(move || {
            let r = std::io::BufReader::with_capacity(64 * 1024, std::io::stdin());
            let res = frame::pump(
                r,
                &s.to_agent,
                frame::FRAME_CAP,
                |f| s.editor_frame(f),
                |n| log_oversize("editor", n),
            );
            if let Err(e) = res {
                crate::logging::info(&format!("sp-acp: editor → agent ended: {e}"));
            }
            let mut w = s.to_agent.lock().unwrap_or_else(|e| e.into_inner());
            *w = Box::new(std::io::sink());
        });
    }
    // Agent → editor, on this thread: when the agent closes stdout the session is over.
    let res = frame::pump(
        std::io::BufReader::with_capacity(64 * 1024, agent_out),
        &shared.to_editor,
        frame::FRAME_CAP,
        |f| shared.agent_frame(f),
        |n| log_oversize("agent", n),
    );
    if let Err(e) = res {
        crate::logging::info(&format!("sp-acp: agent → editor ended: {e}"));
    }
    let status = child.wait();
    // Blocking, unlike the forwarders' events: the controller drains the queue, and the
    // sessions must end before we exit.
    if shared.events.send(Ev::Closed).is_ok() {
        let _ = controller.join();
    }
    match status {
        Ok(s) => exit_code(s),
        Err(e) => {
            crate::logging::error(&format!("sp-acp: waiting for the agent: {e}"));
            ExitCode::from(1)
        }
    }
}

/// SIGTERM, SIGINT or SIGHUP to sp-acp (an editor closing the agent) goes to the agent, so
/// it ends as if signalled itself and sp-acp still ends this proxy's sessions on the way out;
/// an agent still running 5 s later is killed.
fn pass_signals_to(pid: u32) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let got = Arc::new(AtomicUsize::new(0));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        if let Err(e) = signal_hook::flag::register_usize(sig, Arc::clone(&got), sig as usize) {
            crate::logging::warn(&format!("sp-acp: cannot watch signal {sig}: {e}"));
        }
    }
    std::thread::spawn(move || {
        let sig = loop {
            match got.load(Ordering::Relaxed) {
                0 => std::thread::sleep(std::time::Duration::from_millis(50)),
                s => break s as libc::c_int,
            }
        };
        crate::logging::info(&format!("sp-acp: signal {sig}; passing it to the agent"));
        // SAFETY: kill has no memory-safety preconditions; pid is our child, not yet reaped
        // (the main thread reaps it only after its stdout closed).
        unsafe { libc::kill(pid as libc::pid_t, sig) };
        std::thread::sleep(std::time::Duration::from_secs(5));
        // SAFETY: as above.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    });
}

fn log_oversize(from: &str, n: usize) {
    crate::logging::warn(&format!(
        "sp-acp: a {n}-byte frame from the {from} is over the {} byte cap; forwarded unparsed",
        frame::FRAME_CAP
    ));
}

/// The agent's exit status as ours: its code, or 128 + the signal that ended it.
fn exit_code(s: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig) as u8),
        _ => ExitCode::from(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inject_is_found_where_an_agent_may_put_it() {
        assert!(offers_inject(
            &json!({"_meta":{"harn":{"sessionInject":["steer"]}}})
        ));
        assert!(offers_inject(&json!({"methods":["session/inject"]})));
        assert!(!offers_inject(
            &json!({"loadSession":true,"promptCapabilities":{"image":true}})
        ));
        assert!(!offers_inject(&json!({"inject":false})));
    }

    /// The shapes Harn 0.10.185 answers `initialize` with (harn-serve's
    /// `acp_agent_capabilities`), cut to what is read here; it has no `session/inject`.
    #[test]
    fn harn_010_delivery_steer_is_found_and_inject_is_not() {
        let harn = json!({
            "loadSession": true,
            "session": {
                "pendingPrompts": {},
                "injectHostEvent": {"kinds": ["host_tool_result"], "delivery": ["immediate"]},
                "remind": {"modes": ["interrupt_immediate", "finish_step", "audit_only"]},
            },
            "promptCapabilities": {"image": true, "delivery": {"steer": {}, "queue": {}}},
        });
        assert!(!offers_inject(&harn));
        assert!(offers_delivery_steer(&harn));
        let plain = json!({"loadSession": true, "promptCapabilities": {"image": true}});
        assert!(!offers_delivery_steer(&plain));
    }

    #[test]
    fn a_calls_attention_id_is_its_id_and_a_digest_of_its_input() {
        let id = |input: Value, title| call_attention_id("call_1", &input, title).unwrap();
        let a = id(json!({"command": "echo hi"}), Some("bash"));
        let b = id(json!({"command": "rm -rf ~"}), Some("bash"));
        assert!(
            a.starts_with("call_1-") && a.len() == "call_1-".len() + 8,
            "{a}"
        );
        assert!(a["call_1-".len()..].bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b, "another input under the same id is another prompt");
        assert_eq!(a, id(json!({"command": "echo hi"}), Some("bash")));
        // Without rawInput the title is the input.
        assert_ne!(
            id(Value::Null, Some("echo hi")),
            id(Value::Null, Some("rm -rf ~"))
        );
        assert_eq!(call_attention_id("bad id", &Value::Null, None), None);
        assert_eq!(
            call_attention_id(&"x".repeat(125), &Value::Null, None),
            None
        );
    }

    /// As claude-agent-acp answers `initialize` (0.23.1 and 0.101.0), cut to what is read here.
    #[test]
    fn claude_agents_prompt_queueing_is_found() {
        let claude = json!({
            "_meta": {"claudeCode": {"promptQueueing": true}},
            "promptCapabilities": {"image": true, "embeddedContext": true},
            "loadSession": true,
        });
        assert!(offers_prompt_queueing(&claude));
        assert!(!offers_inject(&claude) && !offers_delivery_steer(&claude));
        assert!(!offers_prompt_queueing(&json!({"loadSession": true})));
        assert!(!offers_prompt_queueing(
            &json!({"_meta": {"claudeCode": {"promptQueueing": false}}})
        ));
    }

    #[test]
    fn steering_is_found_where_adapters_advertise_it() {
        assert!(offers_steering(
            &json!({"_meta": {"steering": {"supported": true}}, "agentCapabilities": {}})
        ));
        assert!(offers_steering(
            &json!({"agentCapabilities": {"_meta": {"steering": {"supported": true}}}})
        ));
        assert!(!offers_steering(
            &json!({"_meta": {"steering": {"supported": "yes"}}})
        ));
        assert!(!offers_steering(&json!({"agentCapabilities": {}})));
    }

    #[test]
    fn args() {
        let a = |v: &[&str]| parse_args(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(
            matches!(a(&["--", "opencode", "acp"]), Ok(Args::Run(v)) if v == ["opencode", "acp"])
        );
        assert!(matches!(a(&["opencode"]), Ok(Args::Run(_))));
        assert!(a(&["--"]).is_err());
        assert!(a(&[]).is_err());
        assert!(a(&["--bogus"]).is_err());
    }
}
