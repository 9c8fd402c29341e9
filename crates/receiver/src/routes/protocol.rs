//! The protocol's routes (`docs/protocol.md#seed`, `docs/protocol.md#http`): discovery, events, the control
//! long poll and acks, and `/healthz`. Each protocol route is counted (and in test builds
//! logged and open to injected faults) by [`on`] before its extractors run.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
#[cfg(feature = "testing")]
use axum::middleware::{self, Next};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};
use tower::util::MapRequestLayer;

use crate::auth::{bearer_machine, AckAuth, ControlOffered, Sender};
use crate::body::{self, OtherJson};
use crate::db::Stored;
use crate::error::{clip, json_reply, ApiError, Reply};
use crate::longpoll;
use crate::options::{Route, ACK_PATH, AWAY_PATH, CONTROL_PATH, EVENTS_PATH, WELL_KNOWN_PATH};
use crate::state::{AppState, HEALTH_WAIT};
use crate::validate::{as_integer, check_ack_body, check_event};
use spwire::{is_ulid, split_session_key};

use super::{signed, wait_s, Q};

/// The protocol's routes.
pub(crate) fn router(app: &AppState) -> Router<AppState> {
    Router::new()
        .route(WELL_KNOWN_PATH, on(app, Route::WellKnown, get(well_known)))
        .route(EVENTS_PATH, on(app, Route::Events, post(events)))
        .route(CONTROL_PATH, on(app, Route::Poll, get(poll)))
        .route(ACK_PATH, on(app, Route::Ack, post(ack)))
        .route(AWAY_PATH, post(away))
        .route("/healthz", get(healthz))
}

/// A protocol route, counted (`event_posts`, `polls`) before its extractors run; in test
/// builds also logged and open to the faults queued for it (`testing.rs`).
fn on(app: &AppState, route: Route, m: MethodRouter<AppState>) -> MethodRouter<AppState> {
    #[cfg(feature = "testing")]
    let m = m.route_layer(middleware::from_fn_with_state(
        app.clone(),
        move |State(app): State<AppState>, req: Request, next: Next| async move {
            super::testing::inject(&app, route, req, next).await
        },
    ));
    let shared = app.shared.clone();
    m.route_layer(MapRequestLayer::new(move |req: Request| {
        match route {
            Route::Events => shared.event_posts.fetch_add(1, Ordering::Relaxed),
            Route::Poll => shared.polls.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        req
    }))
}

/// `POST {control}/away` `{"away": bool}` with a sender's token: `sp away on|off` on a
/// machine sets the person's one Away switch, the one the page shows and every machine hears
/// in its next poll answer (held polls answer at once).
async fn away(
    State(app): State<AppState>,
    _: ControlOffered,
    _: Sender,
    OtherJson(body, _read): OtherJson<Value>,
) -> Reply {
    let away = match (body.get("away"), body.as_object().map(|o| o.len())) {
        (Some(Value::Bool(a)), Some(1)) => *a,
        _ => {
            return Err(ApiError::bad_request(
                "invalid: the body must be {\"away\": true|false}",
            ))
        }
    };
    super::set_away(&app, away).await?;
    Ok(json_reply(StatusCode::OK, json!({ "away": away })))
}

/// `GET /.well-known/sessionpipe`.
async fn well_known(State(app): State<AppState>) -> axum::response::Response {
    json_reply(StatusCode::OK, app.shared.opts.well_known())
}

/// `GET /healthz`: 200 when the database answers within [`HEALTH_WAIT`], 503 otherwise (at
/// once: a database that hangs does not hang the health check). Its pings take slots of
/// their own, so the check neither waits behind other calls nor, asked often while the
/// database hangs, piles up threads.
async fn healthz(State(app): State<AppState>) -> Reply {
    let shared = app.shared.clone();
    let ping = async move {
        // Never closed, so a slot always comes.
        let slot = shared.health_slots.clone().acquire_owned().await;
        let pinged = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            shared.db.ping()
        });
        pinged.await.unwrap_or_else(|e| Err(anyhow::anyhow!("{e}")))
    };
    let answer = tokio::time::timeout(HEALTH_WAIT, ping)
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {HEALTH_WAIT:?}")));
    match answer {
        Ok(()) => Ok(json_reply(StatusCode::OK, json!({"status": "ok"}))),
        Err(e) => {
            tracing::error!("healthz: the database does not answer: {e}");
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
            ))
        }
    }
}

/// `POST {events}`: the token (the shared sink token, or a paired machine's own, which the
/// batch's sessions then belong to), the protocol version and the declared size are judged
/// from the head; then the batch.
async fn events(
    State(app): State<AppState>,
    Sender(machine): Sender,
    headers: HeaderMap,
    body: Body,
) -> Reply {
    if let Some(v) = headers.get("sessionpipe-protocol") {
        if v.to_str().map(str::trim).ok() != Some("1") {
            return Err(ApiError::bad_request("unsupported_protocol").with("supported", json!([1])));
        }
    }
    let opts = &app.shared.opts;
    let (max_events, max_tier) = (opts.max_events, opts.max_tier);
    let read = body::read(
        &app,
        &headers,
        body,
        opts.max_bytes,
        "batch larger than batch.max_bytes",
    )
    .await?;
    let body: Value = read.json_with_nul()?;
    let Some(list) = body.get("events").and_then(Value::as_array) else {
        return Err(ApiError::bad_request(
            "malformed body: events must be an array",
        ));
    };
    if list.is_empty() {
        return Err(ApiError::bad_request("empty batch"));
    }
    if list.len() > max_events {
        return Err(ApiError::bad_request("more events than batch.max_events"));
    }
    for (i, ev) in list.iter().enumerate() {
        if !ev.get("id").and_then(Value::as_str).is_some_and(is_ulid) {
            return Err(ApiError::bad_request(&format!(
                "malformed body: events[{i}].id not a ULID"
            )));
        }
    }
    if list.iter().any(|ev| {
        ev.get("tier")
            .and_then(as_integer)
            .is_some_and(|t| t > i64::from(max_tier))
    }) {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "tier_above_max")
            .with("max_tier", max_tier.into()));
    }
    let list = list.clone();
    let (accepted, duplicates, rejected) = app
        .shared
        .with_db(move |st| store_events(st, &list, machine.as_deref()))
        .await?;
    Ok(json_reply(
        StatusCode::ACCEPTED,
        json!({"accepted": accepted, "duplicates": duplicates, "rejected": rejected, "max_tier": max_tier}),
    ))
}

/// Stores a batch's valid events sent with `machine`'s token (`None`: the shared one): how
/// many were new, how many duplicates, and the rejected (an event for another machine's
/// session among them).
fn store_events(
    st: &mut crate::state::Ctx<'_>,
    list: &[Value],
    machine: Option<&str>,
) -> Result<(u64, u64, Vec<Value>), ApiError> {
    let mut rejected = Vec::new();
    let mut valid = Vec::with_capacity(list.len());
    for ev in list {
        let id = ev["id"].as_str().unwrap_or_default();
        if let Err(reason) = check_event(ev) {
            let entry = json!({"id": id, "reason": clip(&reason, 200)});
            st.push_rejected(json!({"id": id, "reason": clip(&reason, 200), "event": ev}));
            rejected.push(entry);
            continue;
        }
        valid.push(ev);
    }
    let now = st.now_ms();
    let stored = st.db.insert_events(&valid, now, machine)?;
    let count = |want: Stored| stored.iter().filter(|s| **s == want).count() as u64;
    let (accepted, duplicates) = (count(Stored::New), count(Stored::Duplicate));
    for (ev, _) in valid
        .iter()
        .zip(&stored)
        .filter(|(_, s)| **s == Stored::Foreign)
    {
        let id = ev["id"].as_str().unwrap_or_default();
        let reason = if machine.is_some() {
            "session belongs to another machine (its own token sends for it)"
        } else {
            "session belongs to a paired machine (its own token sends for it, not the shared one)"
        };
        st.push_rejected(json!({"id": id, "reason": reason, "event": ev}));
        rejected.push(json!({"id": id, "reason": reason}));
    }
    if accepted > 0 {
        st.bump();
    }
    // Tell the person (push.rs) of each new prompt and of its end; a duplicate never.
    for (ev, _) in valid
        .iter()
        .zip(&stored)
        .filter(|(_, s)| **s == Stored::New)
    {
        if let Some(mut n) = crate::push::Notice::from_event(ev) {
            // A question is answered on the page (its options); other prompts may be
            // answered from the notification where the payload says what to sign.
            if let crate::push::Notice::Needed {
                session,
                machine,
                tool,
                answer,
                ..
            } = &mut n
            {
                if !matches!(tool.as_deref(), Some("AskUserQuestion" | "question")) {
                    *answer = super::signed::push_answer(st, session);
                }
                // A sender without a `machine` name: the name its machine paired with.
                if machine.is_none() {
                    *machine = super::signed::session_machine(st, session).and_then(|m| m.1);
                }
            }
            st.notify(n);
        }
    }
    Ok((accepted, duplicates, rejected))
}

/// `GET {control}`'s query.
#[derive(Deserialize)]
pub(crate) struct PollQuery {
    session: Option<String>,
    wait: Option<String>,
    /// Signed control: the machine polling (with its own token).
    machine: Option<String>,
}

/// `GET {control}?session=<harness>:<id>&wait=<s>`: the long poll; with `machine=` instead,
/// signed control's per-machine poll.
async fn poll(
    State(app): State<AppState>,
    _: ControlOffered,
    Q(q): Q<PollQuery>,
    headers: HeaderMap,
) -> Reply {
    let wait_max = app.shared.opts.wait_max_s as f64;
    if let Some(machine) = q.machine {
        let wait = wait_s(q.wait.as_deref(), wait_max, wait_max)?;
        let token_of = bearer_machine(&app, &headers).await?;
        // Nothing of the request is kept while the poll is held.
        drop(headers);
        return signed::machine_poll(&app, token_of, machine, wait).await;
    }
    let Sender(sender) = Sender::check(&app, &headers).await?;
    drop(headers);
    let session = q
        .session
        .ok_or_else(|| ApiError::bad_request("missing session"))?;
    if split_session_key(&session).is_none() {
        return Err(ApiError::bad_request(
            "malformed session: want <harness>:<id>",
        ));
    }
    // A session of a paired machine is polled with that machine's token only (DECISIONS 33);
    // a removed machine's with the shared token or, paired again, its own: never another's.
    let key = session.clone();
    let owner = app
        .shared
        .with_db(move |st| st.db.session_owner(&key))
        .await?;
    let refused = match (owner.and_then(|o| Some((o.machine?, o.paired))), &sender) {
        (Some((o, _)), Some(s)) => &o != s,
        (Some((_, paired)), None) => paired,
        (None, _) => false,
    };
    if refused {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "session_of_another_machine",
        ));
    }
    let wait = wait_s(q.wait.as_deref(), wait_max, wait_max)?;
    let deadline = Instant::now() + Duration::from_secs_f64(wait);
    let who = session.clone();
    longpoll::poll(&app, deadline, None, who, move |st| {
        st.pending_rows(&session)
    })
    .await
}

/// `POST {control}/ack`.
async fn ack(
    State(app): State<AppState>,
    _: ControlOffered,
    AckAuth(machine): AckAuth,
    OtherJson(body, _read): OtherJson<Value>,
) -> Reply {
    let acks = check_ack_body(&body).map_err(|reason| ApiError::bad_request(&reason))?;
    app.shared
        .with_db(move |st| store_acks(st, acks, machine))
        .await?;
    Ok(json_reply(StatusCode::ACCEPTED, json!({})))
}

/// Stores the acks `machine` (or the sink token, `None`) may give.
fn store_acks(
    st: &mut crate::state::Ctx<'_>,
    mut acks: Vec<Value>,
    machine: Option<String>,
) -> Result<(), ApiError> {
    let mut owners = Vec::with_capacity(acks.len());
    for a in &acks {
        let id = a["id"].as_str().unwrap_or_default();
        let owner = match st.db.message_machine(id)? {
            // An unsigned message: the sink token's, or (DECISIONS 33) that of the machine
            // its session belongs to.
            Some(None) => match st.db.message_session(id)? {
                Some(session) => Some(st.db.session_machine(&session)?.flatten()),
                None => Some(None),
            },
            other => other,
        };
        owners.push(owner);
    }
    let mut owners = owners.into_iter();
    acks.retain(|_| match owners.next() {
        // Unknown ids, and unsigned messages of no machine's session: the sink token's.
        None | Some(None) | Some(Some(None)) => machine.is_none(),
        Some(Some(Some(m))) => machine.as_deref() == Some(m.as_str()),
    });
    let now = st.now_ms();
    st.db.insert_acks(&acks, now)?;
    // A message the person sent that failed or was refused: they hear of it (push.rs).
    for a in &acks {
        let id = a["id"].as_str().unwrap_or_default();
        if let Ok(Some(session)) = st.db.message_session(id) {
            if let Some(n) = crate::push::Notice::from_ack(&session, a) {
                st.notify(n);
            }
        }
    }
    st.bump();
    Ok(())
}
