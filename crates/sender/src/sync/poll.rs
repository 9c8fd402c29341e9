//! One long poll per (live session × control sink) (DECISIONS 1, 2).
use super::{backoff, Shared, SinkCtx};
use crate::store::{Ingested, Store};
use crate::wire::control;
use serde_json::Value;
use std::time::Duration;

/// When a poll brings only messages we already hold (a prompt waiting for its Stop is
/// redelivered on every poll until acked), pause this long so the loop does not spin.
const ALL_SEEN_PAUSE: Duration = Duration::from_millis(500);
/// DECISIONS 24: at least this long between two polls of one session, whatever the
/// receiver answers (204 at once, `retry-after: 0`, errors).
pub const MIN_POLL_GAP: Duration = Duration::from_millis(250);
/// DECISIONS 24: at most this many new messages are taken from one poll answer; the rest
/// stay with the receiver, which redelivers them (they are not acked).
pub const MAX_NEW_PER_POLL: usize = 100;

/// What the loop should do after one poll.
pub enum Next {
    Again,
    After(Duration),
    /// Failure number n on the control schedule; why (recorded with the delay chosen).
    Backoff(String),
    /// 401/403: the sink is paused until its config changes.
    Stop,
}

impl Next {
    /// How long to pause before the next poll, counting failures in a row; `None`: stop.
    /// A back-off is recorded in the log under `what` (the poll it follows).
    pub(super) fn pause(self, failures: &mut u32, what: &str) -> Option<Duration> {
        match self {
            Next::Again => {
                *failures = 0;
                Some(Duration::ZERO)
            }
            Next::After(d) => {
                *failures = 0;
                Some(d)
            }
            Next::Backoff(why) => {
                *failures += 1;
                let d = backoff::delay(backoff::CONTROL, *failures);
                backoff::record(what, &why, d);
                Some(d)
            }
            Next::Stop => None,
        }
    }
}

/// How long the next long poll may be held: the receiver's and our cap, and in a bounded
/// run never past its deadline (before cron's next tick); `None` when the run is ending.
pub(super) fn wait_s(shared: &Shared, ctx: &SinkCtx) -> Option<u64> {
    let wait = shared.wait_max_s.min(ctx.found().wait_max_s);
    match shared.remaining().map(|left| left.as_secs()) {
        None => Some(wait),
        Some(left) if left < 2 => None,
        Some(left) => Some(wait.min(left - 1)),
    }
}

fn poll_url(ctx: &SinkCtx, key: &str, wait: u64) -> Option<String> {
    let base = ctx.found().control_url?;
    let sep = if base.contains('?') { '&' } else { '?' };
    Some(format!("{base}{sep}session={key}&wait={wait}"))
}

/// One poll and its handling. `wait` is the long-poll hold in seconds.
pub fn poll_once(
    shared: &Shared,
    ctx: &SinkCtx,
    store: &mut Store,
    key: &str,
    harness: &str,
    wait: u64,
) -> Next {
    let Some(url) = poll_url(ctx, key, wait) else {
        return Next::Stop;
    };
    exchange(shared, ctx, store, &url, key, wait, |store, body| {
        ingest(shared, ctx, store, key, harness, body)
    })
}

/// One long poll of `url` with the sink's control token, and what its answer means for the
/// loop; a 200's body goes to `ingest`, which says whether anything new arrived.
pub fn exchange(
    shared: &Shared,
    ctx: &SinkCtx,
    store: &mut Store,
    url: &str,
    key: &str,
    wait: u64,
    ingest: impl FnOnce(&mut Store, &str) -> anyhow::Result<bool>,
) -> Next {
    let asked_at = crate::clock::now_ms();
    let reply = match shared.client.get(
        url,
        Some(ctx.control_token()),
        Duration::from_secs(wait + 10),
    ) {
        Ok(r) => r,
        Err(e) => {
            let why = format!("poll: {e}");
            ctx.failed(store, &why);
            return Next::Backoff(why);
        }
    };
    if let (Some(away), 200 | 204) = (reply.away, reply.status) {
        let _ = store.note_receiver_away(&ctx.name, away, asked_at, crate::clock::now_ms());
    }
    match reply.status {
        200 => match ingest(store, &reply.body) {
            Ok(new) => {
                let _ = store.note_poll_ok(&ctx.name);
                if new {
                    Next::Again
                } else {
                    Next::After(ALL_SEEN_PAUSE)
                }
            }
            Err(e) => {
                let why = format!("poll: {e:#}");
                ctx.failed(store, &why);
                Next::Backoff(why)
            }
        },
        204 => {
            let _ = store.note_poll_ok(&ctx.name);
            Next::Again
        }
        401 | 403 => {
            let why = if ctx.signed.is_some() {
                format!(
                    "control poll answered {}: the receiver no longer knows this machine's token; run `sp pair {}` again",
                    reply.status, ctx.name
                )
            } else {
                format!(
                    "control poll answered {}: check the sink's token, then edit the config",
                    reply.status
                )
            };
            crate::logging::error(&format!("sink {}: {why}", ctx.name));
            let _ = store.pause_control(&ctx.name, &why, &ctx.fingerprint);
            ctx.failed(store, &why);
            Next::Stop
        }
        404 => {
            ctx.failed(
                store,
                "control poll answered 404: the receiver has no control; retry in 5 min",
            );
            let d = backoff::jitter(Duration::from_secs(300));
            let what = format!("poll {} {key}", ctx.name);
            backoff::record(&what, "control poll answered 404", d);
            Next::After(d)
        }
        429 => {
            let d = backoff::retry_after(reply.retry_after.as_deref());
            let _ = store.note_error(
                &ctx.name,
                &format!("control poll answered 429; retry in {}s", d.as_secs()),
            );
            let what = format!("poll {} {key}", ctx.name);
            backoff::record(&what, "control poll answered 429", d);
            Next::After(d)
        }
        s => {
            let why = format!("control poll answered {s}");
            ctx.failed(store, &why);
            Next::Backoff(why)
        }
    }
}

/// Stores a poll answer. Returns whether anything new arrived.
fn ingest(
    shared: &Shared,
    ctx: &SinkCtx,
    store: &mut Store,
    key: &str,
    harness: &str,
    body: &str,
) -> anyhow::Result<bool> {
    let v: Value =
        serde_json::from_str(body).map_err(|e| anyhow::anyhow!("poll answer is not JSON: {e}"))?;
    let Some(items) = v.get("messages").and_then(Value::as_array) else {
        anyhow::bail!("poll answer has no messages array");
    };
    let checked: Vec<control::Checked> = items.iter().map(control::check).collect();
    let route = |m: &control::ControlMessage| crate::harness::route_message(harness, key, m);
    let (results, left) =
        store.ingest_capped(&ctx.name, key, &checked, &route, MAX_NEW_PER_POLL)?;
    if left > 0 {
        crate::logging::warn(&format!(
            "{key}: {} offered {} messages in one poll; took {MAX_NEW_PER_POLL} new ones, {left} left for it to redeliver",
            ctx.name,
            items.len()
        ));
    }
    let new = log_results(key, &ctx.name, &results);
    if new {
        shared.notify();
    }
    Ok(new)
}

/// Logs what one poll answer did, one line a message, or one summary line for a big answer
/// so a flood cannot fill the log; returns whether anything new arrived.
pub(super) fn log_results(key: &str, sink: &str, results: &[Ingested]) -> bool {
    let mut new = false;
    let quiet = results.len() > 10;
    let (mut queued, mut finals, mut dropped) = (0usize, 0usize, 0usize);
    for r in results {
        match r {
            Ingested::Queued { .. } if quiet => {
                new = true;
                queued += 1;
            }
            Ingested::Final { .. } if quiet => {
                new = true;
                finals += 1;
            }
            Ingested::Dropped { .. } if quiet => dropped += 1,
            Ingested::Queued { id, kind } => {
                new = true;
                crate::logging::info(&format!("{key}: queued {} {id} from {sink}", kind.as_str()));
            }
            Ingested::Final {
                id,
                outcome,
                detail,
            } => {
                new = true;
                crate::logging::info(&format!(
                    "{key}: {id} acked {} at once ({})",
                    outcome.as_str(),
                    detail.as_deref().unwrap_or("")
                ));
            }
            Ingested::Duplicate { .. } => {}
            Ingested::Dropped { reason } => crate::logging::warn(&format!(
                "{key}: dropped a message from {sink} that cannot be acked: {reason}"
            )),
        }
    }
    if quiet {
        crate::logging::info(&format!(
            "{key}: from {sink}: {queued} queued, {finals} acked at once, {dropped} dropped (no usable id), {} already held",
            results.len() - queued - finals - dropped
        ));
    }
    new
}

/// Polls until the session ends, the sink pauses, or sp-sync stops.
pub fn poll_loop(shared: &Shared, ctx: &SinkCtx, key: &str, harness: &str) {
    let mut store = match shared.open_store() {
        Ok(s) => s,
        Err(e) => {
            crate::logging::error(&format!("poll {key}: {e:#}"));
            return;
        }
    };
    let mut failures = 0u32;
    let mut last_poll: Option<std::time::Instant> = None;
    while !shared.stopping() {
        if let Some(gap) = last_poll.map(|t| MIN_POLL_GAP.saturating_sub(t.elapsed())) {
            if !gap.is_zero() {
                shared.sleep(gap);
                continue;
            }
        }
        let live = store
            .polled_sessions(shared.live_ms, &crate::runs::resumable())
            .map(|l| l.iter().any(|(k, _)| k == key))
            .unwrap_or(true);
        if !live || store.control_paused(&ctx.name).unwrap_or(false) {
            return;
        }
        let Some(wait) = wait_s(shared, ctx) else {
            return;
        };
        last_poll = Some(std::time::Instant::now());
        let what = format!("poll {} {key}", ctx.name);
        match poll_once(shared, ctx, &mut store, key, harness, wait).pause(&mut failures, &what) {
            Some(pause) if !pause.is_zero() => shared.sleep(pause),
            Some(_) => {}
            None => return,
        }
    }
}
