//! The ACP payloads sp-acp reads and writes, typed with `agent-client-protocol-schema` (the
//! types of the Rust SDK, protocol v1, without its async connection). Only the payloads are
//! typed: the JSON-RPC envelope is ours (the schema crate leaves `"jsonrpc"` to the
//! transport). Frames the proxy forwards are never re-serialized; these are only for the frames
//! it writes itself and the few it reads.
use agent_client_protocol_schema::v1 as schema;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

pub use schema::{PermissionOptionKind, StopReason};

/// What a `session/request_permission` asks, as sp-acp needs it.
pub struct PermissionAsk {
    pub session_id: String,
    pub tool_call_id: String,
    pub title: Option<String>,
    /// `read`, `edit`, `execute`, … as the spec spells it.
    pub kind: Option<String>,
    pub raw_input: Value,
    pub options: Vec<super::options::PermOption>,
}

pub fn permission_ask(params: &RawValue) -> Result<PermissionAsk, serde_json::Error> {
    let r: schema::RequestPermissionRequest = serde_json::from_str(params.get())?;
    let f = &r.tool_call.fields;
    Ok(PermissionAsk {
        session_id: r.session_id.0.to_string(),
        tool_call_id: r.tool_call.tool_call_id.0.to_string(),
        title: f.title.clone(),
        kind: f
            .kind
            .and_then(|k| serde_json::to_value(k).ok())
            .and_then(|v| v.as_str().map(str::to_string)),
        raw_input: f.raw_input.clone().unwrap_or(Value::Null),
        options: r
            .options
            .into_iter()
            .map(|o| super::options::PermOption {
                id: o.option_id.0.to_string(),
                kind: o.kind,
                name: o.name,
            })
            .collect(),
    })
}

/// The `stopReason` of a `session/prompt` result.
pub fn stop_reason(result: &RawValue) -> Option<StopReason> {
    serde_json::from_str::<schema::PromptResponse>(result.get())
        .ok()
        .map(|r| r.stop_reason)
}

/// The spec's word for a stop reason (`end_turn`, `cancelled`, …).
pub fn stop_word(s: StopReason) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{s:?}"))
}

/// The `sessionId` of a `session/new` result.
pub fn new_session_id(result: &RawValue) -> Option<String> {
    serde_json::from_str::<schema::NewSessionResponse>(result.get())
        .ok()
        .map(|r| r.session_id.0.to_string())
}

/// The session's mode in a `session/new` or `session/load` result (`modes.currentModeId`).
pub fn current_mode(result: &RawValue) -> Option<String> {
    let v: Value = serde_json::from_str(result.get()).ok()?;
    v.pointer("/modes/currentModeId")?
        .as_str()
        .map(str::to_string)
}

/// The session and its new mode from a `session/update` of kind `current_mode_update`.
pub fn mode_update(params: &RawValue) -> Option<(String, String)> {
    let n: schema::SessionNotification = serde_json::from_str(params.get()).ok()?;
    match n.update {
        schema::SessionUpdate::CurrentModeUpdate(u) => {
            Some((n.session_id.0.to_string(), u.current_mode_id.0.to_string()))
        }
        _ => None,
    }
}

/// The session and the text of a `session/update` of kind `agent_message_chunk` (a text
/// block; other content is not the agent's answer as text).
pub fn agent_text(params: &RawValue) -> Option<(String, String)> {
    let n: schema::SessionNotification = serde_json::from_str(params.get()).ok()?;
    match n.update {
        schema::SessionUpdate::AgentMessageChunk(schema::ContentChunk {
            content: schema::ContentBlock::Text(t),
            ..
        }) => Some((n.session_id.0.to_string(), t.text)),
        _ => None,
    }
}

/// The agent's name from an `initialize` result (`agentInfo.name`).
pub fn agent_name(result: &RawValue) -> Option<String> {
    serde_json::from_str::<schema::InitializeResponse>(result.get())
        .ok()?
        .agent_info
        .map(|i| i.name)
}

fn request(id: &Value, method: &str, params: impl Serialize) -> String {
    frame(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

fn notification(method: &str, params: impl Serialize) -> String {
    frame(json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

fn response(id: &Value, result: impl Serialize) -> String {
    frame(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// One newline-delimited frame.
fn frame(v: Value) -> String {
    let mut s = v.to_string();
    s.push('\n');
    s
}

/// The answer to a permission request: the option chosen.
pub fn permission_selected(id: &Value, option_id: &str) -> String {
    response(
        id,
        schema::RequestPermissionResponse::new(schema::RequestPermissionOutcome::Selected(
            schema::SelectedPermissionOutcome::new(option_id.to_string()),
        )),
    )
}

/// The answer to an `elicitation/create`: accepted, with the form's content.
pub fn elicitation_accept(id: &Value, content: serde_json::Map<String, Value>) -> String {
    response(id, json!({"action": "accept", "content": content}))
}

/// The answer to an `elicitation/create`: declined.
pub fn elicitation_decline(id: &Value) -> String {
    response(id, json!({"action": "decline"}))
}

/// The answer to a permission request of a cancelled turn.
pub fn permission_cancelled(id: &Value) -> String {
    response(
        id,
        schema::RequestPermissionResponse::new(schema::RequestPermissionOutcome::Cancelled),
    )
}

/// `$/cancel_request` for a request the other side no longer needs to answer.
pub fn cancel_request(id: &Value) -> String {
    let id: schema::RequestId =
        serde_json::from_value(id.clone()).unwrap_or(schema::RequestId::Null);
    notification(
        "$/cancel_request",
        schema::CancelRequestNotification::new(id),
    )
}

pub fn session_cancel(session_id: &str) -> String {
    notification(
        "session/cancel",
        schema::CancelNotification::new(session_id.to_string()),
    )
}

pub fn session_prompt(id: &Value, session_id: &str, text: &str) -> String {
    request(
        id,
        "session/prompt",
        schema::PromptRequest::new(session_id.to_string(), vec![text.to_string().into()]),
    )
}

/// Shows the editor a prompt it did not send, as the user's message.
pub fn user_message(session_id: &str, text: &str) -> String {
    notification(
        "session/update",
        schema::SessionNotification::new(
            session_id.to_string(),
            schema::SessionUpdate::UserMessageChunk(schema::ContentChunk::new(
                text.to_string().into(),
            )),
        ),
    )
}

/// Harn's `session/inject` (not in the ACP schema): `mode` `steer` or `interrupt_immediate`.
pub fn session_inject(id: &Value, session_id: &str, mode: &str, text: &str) -> String {
    request(
        id,
        "session/inject",
        json!({"sessionId": session_id, "mode": mode, "content": [{"type": "text", "text": text}]}),
    )
}

/// Harn 0.10's steer (not in the ACP schema): a `session/prompt` with `delivery: "steer"`
/// joins the running turn at its next safe point; Harn answers it with the message's
/// `messageId` once the message is in the turn.
pub fn session_prompt_steer(id: &Value, session_id: &str, text: &str) -> String {
    request(
        id,
        "session/prompt",
        json!({"sessionId": session_id, "prompt": [{"type": "text", "text": text}], "delivery": "steer"}),
    )
}

/// The `_session/steering` extension (not in the ACP schema): the text joins the running turn.
/// `idleBehavior: "promptRequired"` asks the agent to answer `promptRequired` instead of
/// starting a turn itself when none runs, so sp-acp still sends every prompt it starts; it is
/// sent where adapters read it, at the top level and under `_meta.steering`.
pub fn session_steering(id: &Value, session_id: &str, text: &str) -> String {
    request(
        id,
        "_session/steering",
        json!({"sessionId": session_id, "prompt": [{"type": "text", "text": text}],
               "idleBehavior": "promptRequired",
               "_meta": {"steering": {"idleBehavior": "promptRequired"}}}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_text_reads_only_the_agents_text_chunks() {
        let update = |u: Value| {
            serde_json::value::to_raw_value(&json!({"sessionId": "ses_1", "update": u})).unwrap()
        };
        let chunk =
            |kind: &str, content: Value| update(json!({"sessionUpdate": kind, "content": content}));
        assert_eq!(
            agent_text(&chunk(
                "agent_message_chunk",
                json!({"type": "text", "text": "hi"})
            )),
            Some(("ses_1".into(), "hi".into()))
        );
        assert_eq!(
            agent_text(&chunk(
                "agent_thought_chunk",
                json!({"type": "text", "text": "hmm"})
            )),
            None
        );
        assert_eq!(
            agent_text(&chunk(
                "user_message_chunk",
                json!({"type": "text", "text": "q"})
            )),
            None
        );
        let image = json!({"type": "image", "data": "AAAA", "mimeType": "image/png"});
        assert_eq!(agent_text(&chunk("agent_message_chunk", image)), None);
    }

    fn parsed(s: &str) -> Value {
        assert!(s.ends_with('\n') && !s[..s.len() - 1].contains('\n'));
        serde_json::from_str(s).unwrap()
    }

    /// The frames sp-acp writes have the shapes of the ACP spec (agentclientprotocol.com,
    /// schema v1), written out here by hand.
    #[test]
    fn frames_have_the_specs_shapes() {
        assert_eq!(
            parsed(&permission_selected(&json!(0), "once")),
            json!({"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "selected", "optionId": "once"}}})
        );
        assert_eq!(
            parsed(&permission_cancelled(&json!("p1"))),
            json!({"jsonrpc": "2.0", "id": "p1", "result": {"outcome": {"outcome": "cancelled"}}})
        );
        assert_eq!(
            parsed(&cancel_request(&json!(7))),
            json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 7}})
        );
        assert_eq!(
            parsed(&session_cancel("ses_1")),
            json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "ses_1"}})
        );
        assert_eq!(
            parsed(&session_prompt(&json!("sp-acp-1"), "ses_1", "hi")),
            json!({"jsonrpc": "2.0", "id": "sp-acp-1", "method": "session/prompt",
                   "params": {"sessionId": "ses_1", "prompt": [{"type": "text", "text": "hi"}]}})
        );
        assert_eq!(
            parsed(&user_message("ses_1", "hi")),
            json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "ses_1",
                   "update": {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hi"}}}})
        );
    }

    #[test]
    fn reads_opencodes_permission_request() {
        // As OpenCode 1.18.33 `acp` sends it (tests/acp_agents.rs drives the real one).
        let p = RawValue::from_string(
            r#"{"sessionId":"ses_1","toolCall":{"toolCallId":"call_1","title":"echo hi > marker.txt","kind":"execute","status":"pending","locations":[],"rawInput":{"command":"echo hi > marker.txt"}},"options":[{"optionId":"once","kind":"allow_once","name":"Allow once"},{"optionId":"always","kind":"allow_always","name":"Always allow"},{"optionId":"reject","kind":"reject_once","name":"Reject"}]}"#.into(),
        )
        .unwrap();
        let a = permission_ask(&p).unwrap();
        assert_eq!(a.session_id, "ses_1");
        assert_eq!(a.tool_call_id, "call_1");
        assert_eq!(a.kind.as_deref(), Some("execute"));
        assert_eq!(a.raw_input, json!({"command": "echo hi > marker.txt"}));
        let opts: Vec<(&str, PermissionOptionKind, &str)> = a
            .options
            .iter()
            .map(|o| (o.id.as_str(), o.kind, o.name.as_str()))
            .collect();
        assert_eq!(
            opts,
            vec![
                ("once", PermissionOptionKind::AllowOnce, "Allow once"),
                ("always", PermissionOptionKind::AllowAlways, "Always allow"),
                ("reject", PermissionOptionKind::RejectOnce, "Reject")
            ]
        );
        let r = RawValue::from_string(
            r#"{"stopReason":"cancelled","usage":{"inputTokens":0},"_meta":{}}"#.into(),
        )
        .unwrap();
        assert_eq!(stop_reason(&r), Some(StopReason::Cancelled));
        assert_eq!(stop_word(StopReason::EndTurn), "end_turn");
    }
}
