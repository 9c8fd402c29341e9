//! The two outboxes: acks to `POST {control}/ack` (DECISIONS 3) and events to
//! `POST {events}` with the protocol's status rules (§2.2).
use super::http::Reply;
use super::{backoff, Shared, SinkCtx};
use crate::clock::now_ms;
use crate::store::Store;
use crate::wire::control::{ack_body, AckOut};
use crate::wire::event::{envelope, StoredEvent};
use serde_json::Value;
use std::time::Duration;

const ACK_BATCH: usize = 100;
const SEND_TIMEOUT: Duration = Duration::from_secs(15);
/// With nothing due, look again at least this often (retries come due with time).
const IDLE_WAIT: Duration = Duration::from_secs(1);

pub enum Sent {
    /// Something went; there may be more.
    Progress,
    /// Nothing was due.
    Idle,
    /// Failed; retry after this long.
    Retry(Duration),
    /// Paused until the config changes.
    Paused,
}

pub fn send_acks_once(shared: &Shared, ctx: &SinkCtx, store: &mut Store) -> anyhow::Result<Sent> {
    let Some(control) = ctx.found().control_url else {
        return Ok(Sent::Idle);
    };
    let control = control.as_str();
    let rows = store.pending_acks(&ctx.name, now_ms(), ACK_BATCH)?;
    if rows.is_empty() {
        return Ok(Sent::Idle);
    }
    let ids: Vec<String> = rows.iter().map(|r| r.message_id.clone()).collect();
    let body = ack_body(
        &rows
            .iter()
            .map(|r| AckOut {
                id: r.message_id.clone(),
                outcome: r.outcome,
                at: r.at.clone(),
                code: r.code.clone(),
                detail: r.detail.clone(),
                mode: r.mode,
                session: r.session.clone(),
                reply: r.reply.clone(),
                seq: r.seq,
            })
            .collect::<Vec<_>>(),
    )
    .to_string();
    let url = format!(
        "{}/ack",
        control
            .split('?')
            .next()
            .unwrap_or(control)
            .trim_end_matches('/')
    );
    match shared
        .client
        .post_json(&url, ctx.control_token(), &body, &[], SEND_TIMEOUT)
    {
        Ok(r) if (200..300).contains(&r.status) => {
            let sent: Vec<(String, i64)> = rows
                .iter()
                .map(|r| (r.message_id.clone(), r.generation))
                .collect();
            store.acks_sent(&ctx.name, &sent)?;
            crate::logging::info(&format!("sink {}: {} ack(s) sent", ctx.name, ids.len()));
            Ok(Sent::Progress)
        }
        Ok(r) if r.status == 401 || r.status == 403 => {
            let why = format!(
                "ack answered {}: check the sink's token, then edit the config",
                r.status
            );
            store.pause_control(&ctx.name, &why, &ctx.fingerprint)?;
            ctx.failed(store, &why);
            store.acks_failed(&ctx.name, &ids, &why, None)?;
            Ok(Sent::Paused)
        }
        Ok(r) if r.status == 429 => {
            let d = backoff::retry_after(r.retry_after.as_deref());
            store.acks_failed(
                &ctx.name,
                &ids,
                "429",
                Some(now_ms() + d.as_millis() as i64),
            )?;
            backoff::record(&format!("acks {}", ctx.name), "ack answered 429", d);
            Ok(Sent::Retry(d))
        }
        Ok(r) if r.status == 400 && rows.iter().any(|r| !r.outcome.is_final()) => {
            // A receiver that predates `taken` and `progress` refuses the batch: those are
            // best effort (the final ack supersedes them), so they are dropped and the
            // finals go again at once.
            let interim: Vec<(String, i64)> = rows
                .iter()
                .filter(|r| !r.outcome.is_final())
                .map(|r| (r.message_id.clone(), r.generation))
                .collect();
            let n = store.drop_interim_acks(&ctx.name, &interim)?;
            crate::logging::warn(&format!(
                "sink {}: ack answered 400; {n} taken/progress ack(s) dropped, the rest go again",
                ctx.name
            ));
            Ok(Sent::Progress)
        }
        Ok(r) => acks_failed(ctx, store, &ids, format!("ack answered {}", r.status)),
        Err(e) => acks_failed(ctx, store, &ids, format!("ack: {e}")),
    }
}

/// A failed ack send: each ack retries on the ack schedule (kept in the store), and the
/// soonest retry is recorded as the back-off.
fn acks_failed(
    ctx: &SinkCtx,
    store: &mut Store,
    ids: &[String],
    e: String,
) -> anyhow::Result<Sent> {
    let d = store.acks_failed(&ctx.name, ids, &e, None)?;
    let what = format!("acks {}", ctx.name);
    backoff::record(&what, &e, Duration::from_millis(d as u64));
    ctx.failed(store, &e);
    Ok(Sent::Retry(Duration::ZERO))
}

/// Per-sink event state kept across sends: how many events fit a request.
pub struct EventsState {
    pub batch: usize,
    pub failures: u32,
}

pub fn send_events_once(
    shared: &Shared,
    ctx: &SinkCtx,
    store: &mut Store,
    st: &mut EventsState,
) -> anyhow::Result<Sent> {
    let found = ctx.found();
    let Some(sink) = store.sink_state(&ctx.name)? else {
        return Ok(Sent::Idle);
    };
    if sink.events_paused.is_some() {
        return Ok(Sent::Paused);
    }
    let events = store.events_after(sink.event_cursor, st.batch.min(found.max_events))?;
    if events.is_empty() {
        return Ok(Sent::Idle);
    }
    let tier = ctx.tier.min(found.max_tier).min(sink.tier_cap.unwrap_or(3));
    // DECISIONS 40: an event above this sink's tier (a transcript for a tier-1 sink) is
    // never sent to it; the cursor passes it.
    let skipped_to = events.last().map(|e| e.rowid);
    let events: Vec<StoredEvent> = events
        .into_iter()
        .filter(|e| crate::wire::event::min_tier(&e.kind) <= tier)
        .collect();
    if events.is_empty() {
        if let Some(last) = skipped_to {
            store.advance_cursor(&ctx.name, last, false)?;
        }
        return Ok(Sent::Progress);
    }
    let (len, body) = batch_body(&events, tier, ctx.machine.as_deref(), found.max_bytes);
    let batch = Batch {
        first: &events[0].event_id,
        len,
        last: events[len - 1].rowid,
        tier,
    };
    if body.len() > found.max_bytes {
        crate::logging::error(&format!(
            "sink {}: event {} is larger than the receiver takes; dropped",
            ctx.name, batch.first
        ));
        store.advance_cursor(&ctx.name, batch.last, false)?;
        return Ok(Sent::Progress);
    }
    // A retried batch reuses its webhook-id, derived from the events it carries.
    let webhook_id = format!("msg_{}_{}", batch.first, batch.len);
    let reply = shared.client.post_json(
        &found.events_url,
        ctx.control_token(),
        &body,
        &[("webhook-id", &webhook_id)],
        SEND_TIMEOUT,
    );
    match reply {
        Ok(r) => events_answered(ctx, store, st, &r, &batch),
        Err(e) => events_failed(ctx, store, st, format!("events: {e}")),
    }
}

/// The batch of events one request carries.
struct Batch<'a> {
    /// The first event's id.
    first: &'a str,
    len: usize,
    /// The outbox row of the last event sent.
    last: i64,
    tier: u8,
}

/// The request body for the first events that fit `max_bytes` (halving the batch until it
/// does, down to one event), and how many it carries.
fn batch_body(
    events: &[StoredEvent],
    tier: u8,
    machine: Option<&str>,
    max_bytes: usize,
) -> (usize, String) {
    let mut rendered: Vec<Value> = events.iter().map(|e| envelope(e, tier, machine)).collect();
    let mut body = serde_json::json!({ "events": rendered }).to_string();
    while body.len() > max_bytes && rendered.len() > 1 {
        rendered.truncate(rendered.len() / 2);
        body = serde_json::json!({ "events": rendered }).to_string();
    }
    (rendered.len(), body)
}

fn events_failed(
    ctx: &SinkCtx,
    store: &mut Store,
    st: &mut EventsState,
    e: String,
) -> anyhow::Result<Sent> {
    st.failures += 1;
    ctx.failed(store, &e);
    let d = backoff::delay(backoff::EVENTS, st.failures);
    backoff::record(&format!("events {}", ctx.name), &e, d);
    Ok(Sent::Retry(d))
}

/// The protocol's status rules for an events answer (§2.2).
fn events_answered(
    ctx: &SinkCtx,
    store: &mut Store,
    st: &mut EventsState,
    r: &Reply,
    batch: &Batch,
) -> anyhow::Result<Sent> {
    match r.status {
        // A 2xx without a batch response (a proxy's page, a body cut short) took nothing:
        // retry it like an error.
        200..=299 => match batch_response(&r.body) {
            Some(v) => events_accepted(ctx, store, st, &v, batch.last),
            None => events_failed(
                ctx,
                store,
                st,
                format!("events answered {} without a batch response", r.status),
            ),
        },
        400 => {
            crate::logging::error(&format!(
                "sink {}: events answered 400 ({}); batch dropped",
                ctx.name,
                spwire::text::truncate(&r.body, 200)
            ));
            store.advance_cursor(&ctx.name, batch.last, false)?;
            Ok(Sent::Progress)
        }
        401 => {
            let why = if ctx.signed.is_some() {
                format!(
                    "events answered 401: the receiver no longer knows this machine's token (removed on its page?); run `sp pair {0}` again, or `sp pair --off {0}` to send with the sink's token",
                    ctx.name
                )
            } else {
                "events answered 401: check the sink's token, then edit the config".to_string()
            };
            let why = why.as_str();
            store.pause_events(&ctx.name, why, &ctx.fingerprint)?;
            ctx.failed(store, why);
            crate::logging::error(&format!("sink {}: {why}", ctx.name));
            Ok(Sent::Paused)
        }
        403 => events_forbidden(ctx, store, r, batch),
        413 => {
            if batch.len == 1 {
                crate::logging::error(&format!(
                    "sink {}: event {} refused as too large; dropped",
                    ctx.name, batch.first
                ));
                store.advance_cursor(&ctx.name, batch.last, false)?;
            } else {
                st.batch = (batch.len / 2).max(1);
            }
            Ok(Sent::Progress)
        }
        429 => {
            let d = backoff::retry_after(r.retry_after.as_deref());
            backoff::record(&format!("events {}", ctx.name), "events answered 429", d);
            Ok(Sent::Retry(d))
        }
        s => events_failed(ctx, store, st, format!("events answered {s}")),
    }
}

/// The batch response of a 2xx: an object with a count `accepted`.
fn batch_response(body: &str) -> Option<Value> {
    serde_json::from_str::<Value>(body)
        .ok()
        .filter(|v| v.get("accepted").is_some_and(Value::is_u64))
}

/// §2.2: the cursor moves only on an accepted batch; `last` is its last event's outbox row.
fn events_accepted(
    ctx: &SinkCtx,
    store: &mut Store,
    st: &mut EventsState,
    v: &Value,
    last: i64,
) -> anyhow::Result<Sent> {
    st.failures = 0;
    store.advance_cursor(&ctx.name, last, true)?;
    if let Some(rej) = v
        .get("rejected")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
    {
        crate::logging::warn(&format!(
            "sink {}: receiver rejected events: {}",
            ctx.name,
            Value::Array(rej.clone())
        ));
    }
    Ok(Sent::Progress)
}

/// A 403 naming a lower `max_tier` lowers ours; any other 403 pauses the sink's events.
fn events_forbidden(
    ctx: &SinkCtx,
    store: &mut Store,
    r: &Reply,
    batch: &Batch,
) -> anyhow::Result<Sent> {
    let max = serde_json::from_str::<Value>(&r.body)
        .ok()
        .and_then(|v| v.get("max_tier").and_then(Value::as_u64))
        .map(|t| t.min(3) as u8);
    match max {
        Some(m) if m < batch.tier => {
            store.set_tier_cap(&ctx.name, m, &ctx.fingerprint)?;
            crate::logging::warn(&format!("sink {}: lowered tier to {m}", ctx.name));
            Ok(Sent::Progress)
        }
        _ => {
            let why = "events answered 403: the receiver refuses this sender; check the sink";
            store.pause_events(&ctx.name, why, &ctx.fingerprint)?;
            ctx.failed(store, why);
            Ok(Sent::Paused)
        }
    }
}

/// Sends due acks until none is due or a send fails.
pub fn acks_loop(shared: &Shared, ctx: &SinkCtx) {
    run_loop(
        shared,
        ctx,
        "acks",
        |store| send_acks_once(shared, ctx, store),
        |store| {
            // Earliest retry of a failed ack.
            store
                .next_ack_due(&ctx.name)
                .ok()
                .flatten()
                .map(|t| Duration::from_millis((t - now_ms()).max(0) as u64))
        },
    );
}

pub fn events_loop(shared: &Shared, ctx: &SinkCtx) {
    let mut st = EventsState {
        batch: 50,
        failures: 0,
    };
    run_loop(
        shared,
        ctx,
        "events",
        |store| send_events_once(shared, ctx, store, &mut st),
        |_| None,
    );
}

fn run_loop(
    shared: &Shared,
    ctx: &SinkCtx,
    what: &str,
    mut once: impl FnMut(&mut Store) -> anyhow::Result<Sent>,
    next_due: impl Fn(&Store) -> Option<Duration>,
) {
    let mut store = match shared.open_store() {
        Ok(s) => s,
        Err(e) => {
            crate::logging::error(&format!("{what} sender {}: {e:#}", ctx.name));
            return;
        }
    };
    let mut seen = 0u64;
    loop {
        // After a stop, one last pass so what was decided at the end still goes out.
        let last_pass = shared.stopping();
        let r = once(&mut store);
        match r {
            Ok(Sent::Progress) => {
                if !last_pass {
                    continue;
                }
            }
            Ok(Sent::Idle) | Ok(Sent::Paused) => {
                if last_pass {
                    return;
                }
                let wait = next_due(&store).unwrap_or(IDLE_WAIT).min(IDLE_WAIT);
                shared.wait_work(&mut seen, wait);
            }
            Ok(Sent::Retry(d)) => {
                if last_pass {
                    return;
                }
                if d.is_zero() {
                    let wait = next_due(&store).unwrap_or(IDLE_WAIT).min(IDLE_WAIT);
                    shared.sleep(wait.max(Duration::from_millis(100)));
                } else {
                    shared.sleep(d);
                }
            }
            Err(e) => {
                crate::logging::warn(&format!("{what} sender {}: {e:#}", ctx.name));
                if last_pass {
                    return;
                }
                shared.sleep(Duration::from_secs(1));
            }
        }
        if last_pass {
            // Keep draining while progress is made, but never past a short grace period.
            let mut rounds = 0;
            while rounds < 20 {
                rounds += 1;
                match once(&mut store) {
                    Ok(Sent::Progress) => continue,
                    _ => break,
                }
            }
            return;
        }
    }
}

/// `--once`: send what is due, for each outbox, until nothing more goes.
pub fn flush(shared: &Shared, ctx: &SinkCtx, store: &mut Store) {
    let mut st = EventsState {
        batch: 50,
        failures: 0,
    };
    for _ in 0..100 {
        match send_events_once(shared, ctx, store, &mut st) {
            Ok(Sent::Progress) => continue,
            Ok(_) => break,
            Err(e) => {
                crate::logging::warn(&format!("events {}: {e:#}", ctx.name));
                break;
            }
        }
    }
    for _ in 0..100 {
        match send_acks_once(shared, ctx, store) {
            Ok(Sent::Progress) => continue,
            Ok(_) => break,
            Err(e) => {
                crate::logging::warn(&format!("acks {}: {e:#}", ctx.name));
                break;
            }
        }
    }
}
