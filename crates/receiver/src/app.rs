//! The app: every route (`routes/`) under the layers every request passes, outermost first:
//! the request log (test builds), a panic answered 500, the whole request within the longest
//! hold plus [`REQUEST_SLACK`] (408), its body within [`BODY_TIMEOUT`], `cache-control:
//! no-store` on every answer, and the guard that closes a connection whose body was left
//! unread (`body.rs`). A path no route has answers 404 `{"reason":"not_found"}`; a known path
//! with another method 405 `{"reason":"method_not_allowed"}` with `allow`.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::IntoResponse;
use axum::Router;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};

use crate::body;
use crate::error::ApiError;
use crate::limits::{BODY_TIMEOUT, REQUEST_SLACK};
use crate::routes::{page, protocol, signed};
use crate::state::AppState;

/// The router for one serving generation.
pub(crate) fn router(app: AppState) -> Router {
    let hold_max = Duration::from_secs(app.shared.opts.wait_max_s.max(25));
    #[cfg_attr(not(feature = "testing"), allow(unused_mut))]
    let mut routes = Router::new()
        .merge(protocol::router(&app))
        .merge(signed::router())
        .merge(page::router(&app));
    #[cfg(feature = "testing")]
    if app.shared.opts.test_door {
        routes = routes.merge(crate::routes::testing::router());
    }
    let routes = routes
        .fallback(|| async { ApiError::not_found() })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
        })
        .layer(middleware::from_fn(body::guard_unread))
        .layer(SetResponseHeaderLayer::overriding(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ))
        .layer(RequestBodyTimeoutLayer::new(BODY_TIMEOUT))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            hold_max + REQUEST_SLACK,
        ))
        .layer(CatchPanicLayer::custom(|_| {
            tracing::error!("a request handler panicked");
            ApiError::internal().into_response()
        }));
    #[cfg(feature = "testing")]
    let routes = routes.layer(middleware::from_fn_with_state(
        app.clone(),
        crate::routes::testing::log,
    ));
    routes.with_state(app)
}
