//! Held requests: the control long poll (a session's or a machine's) and the page's state
//! request wait, as async tasks that cost no thread, on the state's `watch` (bumped by every
//! change) with a deadline. Each look at the state runs off the async workers (SQLite).
//! A hold ends unanswered ([`ApiError::Cut`]) when the receiver goes down meanwhile.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::db::Queued;
use crate::error::{ApiError, Reply};
use crate::state::{AppState, Ctx};

/// Pollers whose last Away word is remembered; past this the memory starts over (a poller
/// then hears the word once more).
const AWAY_TOLD_MAX: usize = 10_000;

/// Waits until `check` answers `Some` (it runs now, on every change of the state, and at
/// least every `recheck`), and gives it a last look (`last` true) at `deadline`, where it
/// must answer. With a `key` (a poll's), a change looks again only when it touched that key
/// (or every key; see [`crate::state::Marks`]). `None` when the receiver went down or
/// stopped meanwhile.
pub(crate) async fn hold<T, F>(
    app: &AppState,
    deadline: Instant,
    recheck: Option<Duration>,
    key: Option<&str>,
    mut check: F,
) -> Option<T>
where
    T: Send + 'static,
    F: FnMut(&mut Ctx<'_>, bool) -> Option<T> + Send + 'static,
{
    let mut rx = app.shared.watch.subscribe();
    let generation = app.generation;
    let marks = || app.shared.marks.lock().unwrap_or_else(|e| e.into_inner());
    // The latest mark before the last look, and when the next look is due regardless.
    let mut seen: Option<u64> = None;
    let mut due = deadline;
    loop {
        rx.borrow_and_update();
        let now = Instant::now();
        let last = now >= deadline;
        let quiet = match (key, seen) {
            (Some(k), Some(s)) if !last && now < due => !marks().changed_since(k, s),
            _ => false,
        };
        if !quiet {
            seen = Some(marks().seq());
            due = recheck.map_or(deadline, |r| deadline.min(now + r));
            let (f, out) = app
                .shared
                .with_db(move |st| {
                    if st.mem().cut_since(generation) {
                        return (check, Err(()));
                    }
                    let out = check(st, last);
                    (check, Ok(out))
                })
                .await;
            check = f;
            match out {
                Err(()) => return None,
                Ok(Some(v)) => return Some(v),
                Ok(None) if last => return None,
                Ok(None) => {}
            }
        }
        // A poll is counted as held while it waits here ([`crate::Receiver::held_polls`]).
        let _held = key.map(|_| Held::count(&app.shared.held));
        tokio::select! {
            _ = rx.changed() => {}
            _ = tokio::time::sleep_until(due.into()) => {}
        }
    }
}

/// One held poll in the count, until dropped (also when its connection goes, and the task
/// with it).
struct Held<'a>(&'a AtomicUsize);

impl<'a> Held<'a> {
    fn count(n: &'a AtomicUsize) -> Held<'a> {
        n.fetch_add(1, Ordering::Relaxed);
        Held(n)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A poll's answer: 200 `{messages}` or 204, with the Away word.
enum PollAnswer {
    Messages(Vec<Value>, bool),
    Nothing(bool),
}

impl IntoResponse for PollAnswer {
    fn into_response(self) -> Response {
        let (mut r, away) = match self {
            PollAnswer::Messages(m, away) => (
                (StatusCode::OK, axum::Json(json!({ "messages": m }))).into_response(),
                away,
            ),
            PollAnswer::Nothing(away) => (StatusCode::NO_CONTENT.into_response(), away),
        };
        r.headers_mut().insert(
            "sessionpipe-away",
            HeaderValue::from_static(if away { "1" } else { "0" }),
        );
        r
    }
}

/// Holds a long poll until `pending` finds messages (served, and marked polled for the
/// page) or `deadline` passes (204). It wakes on every change of the state, and at least
/// every `recheck` when rows may come from another process.
///
/// DECISIONS 27: every poll answer carries the person's Away switch, and a poller that was
/// told another word is answered at once (so is every poll held when the switch changes),
/// so a machine hears a change within a poll's round trip.
pub(crate) async fn poll(
    app: &AppState,
    deadline: Instant,
    recheck: Option<Duration>,
    who: String,
    mut pending: impl FnMut(&mut Ctx<'_>) -> anyhow::Result<Vec<Queued>> + Send + 'static,
) -> Reply {
    let key = who.clone();
    let answer = hold(app, deadline, recheck, Some(&key), move |st, last| {
        let away = st.db.away().unwrap_or(false);
        // Told another word before (a poller that never polled hears it at its answer).
        let stale = st.mem().away_told.get(&who).is_some_and(|t| *t != away);
        let rows = match pending(st) {
            Ok(r) => r,
            Err(e) => return Some(Err(ApiError::db(&e))),
        };
        if rows.is_empty() {
            if !last && !stale {
                return None;
            }
            tell_away(st, &who, away);
            return Some(Ok(PollAnswer::Nothing(away)));
        }
        let ns: Vec<i64> = rows.iter().map(|q| q.n).collect();
        let now = st.now_ms();
        // Only the page looks at this; a failure here must not cost the sender its poll.
        if st.db.mark_polled(&ns, now).unwrap_or(0) > 0 {
            st.bump();
        }
        tell_away(st, &who, away);
        let messages = rows.into_iter().map(|q| q.body).collect();
        Some(Ok(PollAnswer::Messages(messages, away)))
    })
    .await;
    match answer {
        Some(a) => Ok(a?.into_response()),
        None => Err(ApiError::Cut),
    }
}

/// Remembers that `who` heard `away`.
fn tell_away(st: &mut Ctx<'_>, who: &str, away: bool) {
    let mut mem = st.mem();
    if mem.away_told.len() >= AWAY_TOLD_MAX && !mem.away_told.contains_key(who) {
        mem.away_told.clear();
    }
    mem.away_told.insert(who.to_owned(), away);
}
