//! The chat page at `/`: an HTML page, its script and stylesheet, and the vendored
//! `marked` (markdown) and DOMPurify (sanitizing) builds, all compiled into the
//! binary so that the page works offline. The page talks to `/v1/chat/completions`
//! like any other client, so the API key and the rest of the API's rules apply.
//!
//! The page is public (it holds no data); a Content-Security-Policy lets it load
//! and call nothing but this server.

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// What the page may load and call: this server only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One compiled-in file and its media type.
#[derive(Clone, Copy)]
struct Asset {
    media_type: &'static str,
    body: &'static str,
}

const INDEX: Asset = Asset {
    media_type: "text/html; charset=utf-8",
    body: include_str!("../webui/index.html"),
};

/// The page's other files, by route.
const FILES: [(&str, Asset); 4] = [
    (
        "/webui/app.js",
        Asset {
            media_type: "text/javascript; charset=utf-8",
            body: include_str!("../webui/app.js"),
        },
    ),
    (
        "/webui/style.css",
        Asset {
            media_type: "text/css; charset=utf-8",
            body: include_str!("../webui/style.css"),
        },
    ),
    (
        "/webui/vendor/marked.min.js",
        Asset {
            media_type: "text/javascript; charset=utf-8",
            body: include_str!("../webui/vendor/marked.min.js"),
        },
    ),
    (
        "/webui/vendor/purify.min.js",
        Asset {
            media_type: "text/javascript; charset=utf-8",
            body: include_str!("../webui/vendor/purify.min.js"),
        },
    ),
];

impl IntoResponse for Asset {
    fn into_response(self) -> Response {
        (
            [
                (header::CONTENT_TYPE, self.media_type),
                (header::CONTENT_SECURITY_POLICY, CSP),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            self.body,
        )
            .into_response()
    }
}

/// The page's routes (merged into the router unless `--no-webui`).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut r = Router::new().route("/", get(|| async { INDEX }));
    for (path, asset) in FILES {
        r = r.route(path, get(move || async move { asset }));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offline: the page and its script name no other host, so nothing is
    /// fetched from a CDN (the CSP would block it anyway).
    #[test]
    fn page_loads_nothing_from_elsewhere() {
        for text in [INDEX.body, FILES[0].1.body, FILES[1].1.body] {
            assert!(!text.contains("http://") && !text.contains("https://"));
            assert!(!text.contains("//cdn"));
        }
    }

    /// Every file the page names is served.
    #[test]
    fn page_names_only_served_files() {
        for (path, _) in FILES {
            assert!(
                INDEX.body.contains(&path[1..]),
                "{path} not used by the page"
            );
        }
        let named = INDEX.body.matches("src=\"").count() + INDEX.body.matches("href=\"").count();
        assert_eq!(named, FILES.len());
    }
}
