//! The routes, one axum route per endpoint, in sub-routers per area: the protocol
//! (`protocol.rs`), signed control (`signed.rs`), the page (`page.rs`) and its static files
//! (`assets.rs`), "Not now" (`snooze.rs`), and in test builds the test door and fault injection (`testing.rs`).
//! `app.rs` puts them together under the layers every request passes.

pub(crate) mod assets;
pub(crate) mod page;
pub(crate) mod protocol;
pub(crate) mod signed;
pub(crate) mod snooze;
#[cfg(feature = "testing")]
pub(crate) mod testing;

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ApiError, Reply};
use crate::state::Refused;

/// A query string as `T` (axum's `Query`), refused 400 `malformed query: …` when it does not
/// fit.
pub(crate) struct Q<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Q<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        // A NUL (`%00`) in a parameter: refused naming it (no store keeps one).
        let query = parts.uri.query().unwrap_or_default();
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).unwrap_or_default();
        if let Some((name, _)) = pairs
            .iter()
            .find(|(k, v)| k.contains('\0') || v.contains('\0'))
        {
            return Err(ApiError::bad_request(&format!(
                "NUL character in query parameter {}",
                name.replace('\0', "\\0")
            )));
        }
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(Q(v)),
            Err(e) => Err(ApiError::bad_request(&format!(
                "malformed query: {}",
                e.body_text()
            ))),
        }
    }
}

/// Sets the person's one Away switch (the page's, or `sp away` on a machine) and answers
/// every held poll at once with it (DECISIONS 27).
pub(crate) async fn set_away(app: &crate::state::AppState, away: bool) -> Result<(), ApiError> {
    app.shared
        .with_db(move |st| {
            let now = st.now_ms();
            st.db.set_away(away, now)?;
            st.touch(crate::state::ALL.to_owned());
            st.bump();
            Ok::<_, ApiError>(())
        })
        .await
}

/// A `wait` parameter in seconds, clamped to `0..=max` (`default` without one).
pub(crate) fn wait_s(v: Option<&str>, default: f64, max: f64) -> Result<f64, ApiError> {
    match v {
        None => Ok(default),
        Some(w) => match w.trim().parse::<f64>() {
            Ok(w) if w.is_finite() => Ok(w.clamp(0.0, max)),
            _ => Err(ApiError::bad_request("malformed wait")),
        },
    }
}

/// The answer to an enqueue (the test door's or the page's).
pub(crate) fn enqueued(result: Result<Value, Refused>) -> Reply {
    match result {
        Ok(msg) => Ok(crate::error::json_reply(StatusCode::OK, msg)),
        Err(Refused::Bad(reason)) => Err(ApiError::bad_request(&reason)),
        Err(Refused::Db(e)) => Err(ApiError::db(&e)),
    }
}
