//! "Not now" from the page (issue 26): `POST /page/api/snooze` puts open prompts off for
//! [`ReceiverOptions::not_now_s`](crate::ReceiverOptions::not_now_s) (15 minutes unless set):
//! every open page hides them (the state answer lists them under `snoozed`), a notification
//! already shown for one is withdrawn, and the push worker sends nothing for them, while the
//! machine keeps waiting. Nothing is answered.
//! Login and CSRF (with the same-origin checks) as every page post; at most
//! [`PROMPTS_MAX`] prompts a request and [`SNOOZES_MAX`] put off at once.
//!
//! | route | auth | answers |
//! |---|---|---|
//! | `POST /page/api/snooze` `{"prompts": [{"session", "for"}]}` | login + CSRF | 200 `{"until", "snoozed": [for…], "gone": [for…]}` (`gone`: no longer open); 400 naming what is wrong or the cap |
//! | `POST /page/api/snooze` `{"prompts": […], "undo": true}` | login + CSRF | "Show again": 200 `{"shown": [for…], "gone": [for…]}`, the prompts back on every page at once |

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use serde::Deserialize;
use serde_json::json;
use spwire::split_session_key;

use crate::auth::Csrf;
use crate::body;
use crate::db::{Snooze, SNOOZES_MAX};
use crate::error::{json_reply, ApiError, Reply};
use crate::state::AppState;
use crate::validate::format_ms_timestamp;

/// Prompts one "Not now" may put off (a batch of the page's selection).
pub(crate) const PROMPTS_MAX: usize = 200;

pub(crate) fn page_router() -> Router<AppState> {
    Router::new().route("/page/api/snooze", post(snooze))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SnoozeReq {
    prompts: Vec<PromptRef>,
    /// "Show again": the prompts come back at once (their time ends now).
    #[serde(default)]
    undo: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptRef {
    session: String,
    #[serde(rename = "for")]
    attention_id: String,
}

async fn snooze(State(app): State<AppState>, _: Csrf, headers: HeaderMap, body: Body) -> Reply {
    let SnoozeReq { prompts, undo } = body::read_other_json(&app, &headers, body).await?;
    if prompts.is_empty() || prompts.len() > PROMPTS_MAX {
        return Err(ApiError::bad_request(&format!(
            "prompts must list 1 to {PROMPTS_MAX} prompts"
        )));
    }
    for p in &prompts {
        if split_session_key(&p.session).is_none() {
            return Err(ApiError::bad_request(
                "malformed session: want <harness>:<id>",
            ));
        }
        if p.attention_id.is_empty() || p.attention_id.chars().count() > 128 {
            return Err(ApiError::bad_request(
                "for must be 1 to 128 characters (the attention_id)",
            ));
        }
    }
    let window_ms = app.shared.opts.not_now_s as i64 * 1000;
    if undo {
        return show_again(&app, prompts).await;
    }
    let out = app
        .shared
        .with_db(move |st| -> Result<_, ApiError> {
            let now = st.now_ms();
            let until = now + window_ms;
            let (mut snoozed, mut gone) = (Vec::new(), Vec::new());
            for p in prompts {
                match st.db.snooze(&p.session, &p.attention_id, now, until)? {
                    Snooze::Until(_) => {
                        // Its notification closes on every device too (the withdrawal push
                        // of DECISIONS 34, sent only where it was pushed).
                        st.notify(crate::push::Notice::Cleared {
                            session: p.session,
                            attention_id: p.attention_id.clone(),
                            cause: format!("not now until {until}"),
                        });
                        snoozed.push(p.attention_id)
                    }
                    Snooze::NotOpen => gone.push(p.attention_id),
                    Snooze::Full => {
                        if !snoozed.is_empty() {
                            st.bump();
                        }
                        return Err(ApiError::bad_request(&format!(
                            "at most {SNOOZES_MAX} prompts can be put off at once; answer some first"
                        )));
                    }
                }
            }
            if !snoozed.is_empty() {
                // Every open page hears of it at once (its held state request answers).
                st.bump();
            }
            let until = time::OffsetDateTime::from_unix_timestamp_nanos(until as i128 * 1_000_000)
                .map(format_ms_timestamp)
                .unwrap_or_default();
            Ok(json!({"until": until, "snoozed": snoozed, "gone": gone}))
        })
        .await?;
    Ok(json_reply(StatusCode::OK, out))
}

/// "Show again" (`"undo": true`): each prompt's time ends now, so every page shows it again
/// and it may be pushed again. 200 `{"shown": [for…], "gone": [for…]}` (`gone`: no longer
/// open).
async fn show_again(app: &AppState, prompts: Vec<PromptRef>) -> Reply {
    let out = app
        .shared
        .with_db(move |st| -> Result<_, ApiError> {
            let now = st.now_ms();
            let (mut shown, mut gone) = (Vec::new(), Vec::new());
            for p in prompts {
                // Ending its time now is the undo: the state lists only times still to come.
                match st.db.snooze(&p.session, &p.attention_id, now, now)? {
                    Snooze::Until(_) => shown.push(p.attention_id),
                    // Not open, or not put off while the most are: nothing to bring back.
                    Snooze::NotOpen | Snooze::Full => gone.push(p.attention_id),
                }
            }
            if !shown.is_empty() {
                st.bump();
            }
            Ok(json!({"shown": shown, "gone": gone}))
        })
        .await?;
    Ok(json_reply(StatusCode::OK, out))
}
