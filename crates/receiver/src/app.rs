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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{ReceiverOptions, EVENTS_PATH};
    use crate::state::Shared;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use std::sync::Arc;
    use tower::ServiceExt;

    /// Sends one request through the router; the status, the headers and the body.
    fn send(req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, String) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let db = crate::db::open_memory().unwrap().store;
            let addr = "127.0.0.1:9".parse().unwrap();
            let opts = ReceiverOptions {
                token: "sink-token".into(),
                ..Default::default()
            };
            let shared = Arc::new(Shared::new(opts, db, addr));
            let app = router(AppState {
                shared,
                generation: 0,
            });
            let resp = app.oneshot(req).await.unwrap();
            let (parts, body) = resp.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            (
                parts.status,
                parts.headers,
                String::from_utf8_lossy(&body).into_owned(),
            )
        })
    }

    #[test]
    fn an_unknown_path_is_404_and_a_wrong_method_405_with_allow() {
        let (status, headers, body) = send(Request::get("/nope").body(Body::empty()).unwrap());
        assert_eq!(status, 404);
        assert_eq!(body, r#"{"reason":"not_found"}"#);
        assert_eq!(headers[header::CACHE_CONTROL], "no-store");
        let (status, headers, body) = send(Request::get(EVENTS_PATH).body(Body::empty()).unwrap());
        assert_eq!(status, 405);
        assert_eq!(body, r#"{"reason":"method_not_allowed"}"#);
        assert_eq!(headers[header::ALLOW], "POST");
    }

    #[test]
    fn a_stranger_is_refused_before_the_declared_size_is_judged() {
        let post = |token: &str| {
            Request::post(EVENTS_PATH)
                .header(header::AUTHORIZATION, format!("Bearer {token}"))
                .header(header::CONTENT_LENGTH, "50000000")
                .body(Body::empty())
                .unwrap()
        };
        let (status, headers, _) = send(post("wrong"));
        assert_eq!(status, 401);
        assert_eq!(headers[header::CONNECTION], "close");
        let (status, _, body) = send(post("sink-token"));
        assert_eq!(status, 413);
        assert!(body.contains("batch.max_bytes"), "{body}");
    }

    #[test]
    fn the_page_answers_only_its_own_host_with_its_headers() {
        let get = |host: &str| {
            Request::get("/login")
                .header(header::HOST, host)
                .body(Body::empty())
                .unwrap()
        };
        let (status, headers, _) = send(get("127.0.0.1:8787"));
        assert_eq!(status, 200);
        assert!(headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'"));
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(headers[header::REFERRER_POLICY], "same-origin");
        let (status, headers, body) = send(get("rebind.evil.example"));
        assert_eq!(status, 403);
        assert_eq!(body, r#"{"reason":"host_not_allowed"}"#);
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert!(headers.get(header::CONTENT_SECURITY_POLICY).is_none());
    }
}
