//! The page's static files (`page/*`, embedded with `include_str!`/`include_bytes!`;
//! nothing secret): HTML, CSS, scripts, the manifest, the service worker and the icons.
//! Served under the page's layers (`page.rs`: the `Host` check and the security headers).

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha2::{Digest, Sha256};

use crate::state::AppState;

pub(crate) const INDEX_HTML: &str = include_str!("../page/index.html");
pub(crate) const LOGIN_HTML: &str = include_str!("../page/login.html");
pub(crate) const APP_CSS: &str = include_str!("../page/app.css");
pub(crate) const APP_JS: &str = include_str!("../page/app.js");
pub(crate) const LOGIN_JS: &str = include_str!("../page/login.js");
pub(crate) const MANIFEST: &str = include_str!("../page/manifest.webmanifest");
pub(crate) const SERVICE_WORKER: &str = include_str!("../page/sw.js");
pub(crate) const ICON_SVG: &str = include_str!("../page/icon.svg");
// Made from icon.svg by scripts/icons.mjs (Android and iOS want PNGs to install the page).
pub(crate) const ICON_192: &[u8] = include_bytes!("../page/icon-192.png");
pub(crate) const ICON_512: &[u8] = include_bytes!("../page/icon-512.png");
pub(crate) const ICON_MASKABLE_512: &[u8] = include_bytes!("../page/icon-maskable-512.png");
pub(crate) const APPLE_TOUCH_ICON: &[u8] = include_bytes!("../page/apple-touch-icon.png");

/// The service worker with its shell cache named after a hash of the files it keeps
/// (sw.js's `%SHELL_VERSION%`): a receiver with other files installs a new worker, which
/// drops the old cache.
fn service_worker() -> &'static str {
    static SW: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SW.get_or_init(|| {
        let mut h = Sha256::new();
        for part in [
            INDEX_HTML.as_bytes(),
            LOGIN_HTML.as_bytes(),
            APP_CSS.as_bytes(),
            APP_JS.as_bytes(),
            LOGIN_JS.as_bytes(),
            MANIFEST.as_bytes(),
            ICON_SVG.as_bytes(),
            ICON_192,
            ICON_512,
            ICON_MASKABLE_512,
            APPLE_TOUCH_ICON,
        ] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part);
        }
        let version: String = h.finalize()[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        SERVICE_WORKER.replace("%SHELL_VERSION%", &version)
    })
}

/// One file with its type.
fn file(ty: &'static str, body: &'static [u8]) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, ty)], body).into_response()
}

const JS: &str = "text/javascript; charset=utf-8";

/// The static files' routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/assets/app.css",
            get(|| async { file("text/css; charset=utf-8", APP_CSS.as_bytes()) }),
        )
        .route(
            "/assets/app.js",
            get(|| async { file(JS, APP_JS.as_bytes()) }),
        )
        .route(
            "/assets/login.js",
            get(|| async { file(JS, LOGIN_JS.as_bytes()) }),
        )
        .route(
            "/manifest.webmanifest",
            get(|| async { file("application/manifest+json", MANIFEST.as_bytes()) }),
        )
        .route(
            "/sw.js",
            get(|| async { file(JS, service_worker().as_bytes()) }),
        )
        .route(
            "/assets/icon.svg",
            get(|| async { file("image/svg+xml", ICON_SVG.as_bytes()) }),
        )
        .route(
            "/assets/icon-192.png",
            get(|| async { file("image/png", ICON_192) }),
        )
        .route(
            "/assets/icon-512.png",
            get(|| async { file("image/png", ICON_512) }),
        )
        .route(
            "/assets/icon-maskable-512.png",
            get(|| async { file("image/png", ICON_MASKABLE_512) }),
        )
        .route(
            "/assets/apple-touch-icon.png",
            get(|| async { file("image/png", APPLE_TOUCH_ICON) }),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_names_its_cache_after_the_shell() {
        let sw = service_worker();
        assert!(!sw.contains("%SHELL_VERSION%"));
        let name = sw.split("'sessionpipe-shell-").nth(1).unwrap();
        assert!(name.starts_with(|c: char| c.is_ascii_hexdigit()), "{name}");
        assert_eq!(name.find('\''), Some(12), "{name}");
    }
}
