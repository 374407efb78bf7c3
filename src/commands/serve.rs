//! `gpusched serve` (docs/BEHAVIOUR.md "Seeing the whole box"): the box
//! view, this user's queue and timeline as a web page that updates itself
//! by polling the API, and the read-only API itself:
//!
//! * `GET /` — the page (one self-contained HTML document, no external
//!   assets, so it works offline);
//! * `GET /api/v1/status` — the scheduler's status.json for `--log-dir`
//!   (docs/status.schema.json);
//! * `GET /api/v1/box` — the box (docs/box.schema.json);
//! * `GET /metrics` — the scheduler's metrics.prom;
//! * `GET /timeline.svg` — the run's timeline;
//! * `GET /login?token=T` — sets the token cookie and goes to `/`.
//!
//! It runs as its own process, never inside a scheduler's loop, and
//! writes nothing. The box is read once a second by one background task;
//! requests are answered from that copy, so fifty clients cost what one
//! does. HTTP is axum on tokio: the most used and best kept Rust HTTP
//! stack, already on tokio like `gpusched mcp`.
//!
//! Loopback addresses are served without a token (reach them with `ssh
//! -L`); any other address needs `--token-file`, and then every request
//! must carry the token as `Authorization: Bearer T` or the cookie
//! `/login` sets, compared in constant time; anything else gets 401.

use super::box_source::BoxSource;
use crate::cli::ServeArgs;
use crate::error::Error;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// The page: HTML, CSS and JavaScript in one file, built into the binary.
const PAGE: &str = include_str!("serve/page.html");

/// The cookie `/login` sets.
const COOKIE: &str = "gpusched_token";

/// How often the box is read for the API.
const REFRESH: Duration = Duration::from_secs(1);

/// How long a rendered timeline is served before it is drawn again.
const TIMELINE_TTL: Duration = Duration::from_secs(10);

/// What the handlers share.
struct Shared {
    /// The box document, as JSON, from the last read.
    box_json: RwLock<String>,
    /// The scheduler's log directory.
    log_dir: PathBuf,
    /// The token, when one is required.
    token: Option<String>,
    /// The last timeline drawn, and when.
    timeline: RwLock<Option<(Instant, String)>>,
}

/// Runs `gpusched serve` until killed.
///
/// Errors (exit 2): a non-loopback address without `--token-file`; a
/// token file that others can read, or that is empty; the GPUs, ledger or
/// rules cannot be opened; the address cannot be bound.
pub fn run(args: &ServeArgs) -> anyhow::Result<i32> {
    let token = match &args.token_file {
        Some(path) => Some(read_token(path)?),
        None if args.listen.ip().is_loopback() => None,
        None => {
            return Err(Error::Usage(format!(
                "serving on {} (not a loopback address) needs --token-file FILE: anyone who can reach the port would see every user's jobs; or listen on 127.0.0.1 and use `ssh -L {}:localhost:{}`",
                args.listen,
                args.listen.port(),
                args.listen.port()
            ))
            .into());
        }
    };
    // The GPU backend stays on the thread that opened it: the box is read
    // there, first before anything is served (so a bad --sim or ledger
    // is an error at start), then every REFRESH.
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let place = args.place.clone();
    let shared = Arc::new(Shared {
        box_json: RwLock::new(String::new()),
        log_dir: crate::files::absolute(&args.place.log_dir),
        token,
        timeline: RwLock::new(None),
    });
    let reader = shared.clone();
    std::thread::Builder::new()
        .name("box".into())
        .spawn(move || {
            let read = |source: &mut BoxSource| -> anyhow::Result<String> {
                Ok(serde_json::to_string(&source.read()?)?)
            };
            let mut source = match BoxSource::open(&place) {
                Ok(source) => source,
                Err(e) => {
                    let _ = first_tx.send(Err(e));
                    return;
                }
            };
            let first = read(&mut source);
            let failed = first.is_err();
            let _ = first_tx.send(first);
            if failed {
                return;
            }
            loop {
                std::thread::sleep(REFRESH);
                if let Ok(json) = read(&mut source)
                    && let Ok(mut slot) = reader.box_json.write()
                {
                    *slot = json;
                }
            }
        })?;
    let first = first_rx
        .recv()
        .map_err(|_| anyhow::anyhow!("the box reader ended at start"))??;
    if let Ok(mut slot) = shared.box_json.write() {
        *slot = first;
    }
    // One thread serves: every handler reads a document the box reader
    // keeps ready, and the timeline is drawn on the blocking pool.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(args.listen))
        .map_err(|e| Error::Usage(format!("cannot listen on {}: {e}", args.listen)))?;
    println!(
        "gpusched serve: http://{}/ ({}); API /api/v1/status, /api/v1/box, /metrics",
        args.listen,
        if shared.token.is_some() {
            "token required: open /login?token=… once, or send Authorization: Bearer …"
        } else {
            "loopback only, no token"
        }
    );
    let app = router(shared);
    runtime.block_on(async { axum::serve(listener, app).await })?;
    Ok(0)
}

/// The routes, behind the token check.
fn router(shared: Arc<Shared>) -> axum::Router {
    axum::Router::new()
        .route("/", get(page))
        .route("/api/v1/status", get(status))
        .route("/api/v1/box", get(box_doc))
        .route("/metrics", get(metrics))
        .route("/timeline.svg", get(timeline))
        .route("/login", get(login))
        .layer(middleware::from_fn_with_state(shared.clone(), authorize))
        .with_state(shared)
}

/// Reads the token: the file's first line, trimmed.
///
/// Errors (exit 2): unreadable, empty, or readable by others.
fn read_token(path: &Path) -> Result<String, Error> {
    let meta = std::fs::metadata(path).map_err(|e| {
        Error::Usage(format!(
            "token file {}: {}",
            path.display(),
            crate::files::io_reason(&e)
        ))
    })?;
    if meta.mode() & 0o077 != 0 {
        return Err(Error::Usage(format!(
            "token file {} can be read by others (mode {:04o}); `chmod 600 {}`",
            path.display(),
            meta.mode() & 0o7777,
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::Usage(format!(
            "token file {}: {}",
            path.display(),
            crate::files::io_reason(&e)
        ))
    })?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(Error::Usage(format!(
            "token file {} is empty",
            path.display()
        )));
    }
    Ok(token)
}

/// Whether `given` is the token, in time that does not depend on where
/// they differ.
fn same_token(given: &str, token: &str) -> bool {
    use subtle::ConstantTimeEq;
    given.len() == token.len() && bool::from(given.as_bytes().ct_eq(token.as_bytes()))
}

/// The token a request carries: its bearer header, or our cookie.
fn carried(headers: &HeaderMap) -> Option<String> {
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(bearer.trim().to_string());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_string())
}

/// Lets a request through when no token is required, or it carries the
/// token; `/login` checks its own. Anything else: 401.
async fn authorize(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let Some(token) = &shared.token else {
        return next.run(request).await;
    };
    if request.uri().path() == "/login" {
        return next.run(request).await;
    }
    match carried(request.headers()) {
        Some(given) if same_token(&given, token) => next.run(request).await,
        _ => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "401: this gpusched serve needs its token: open /login?token=… once, or send Authorization: Bearer …\n",
        )
            .into_response(),
    }
}

/// `/login?token=T`: with the right token, sets the cookie and goes to
/// the page; else 401.
async fn login(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(token) = &shared.token else {
        return Redirect::to("/").into_response();
    };
    match query.get("token") {
        Some(given) if same_token(given, token) => {
            let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
            let mut response = Redirect::to("/").into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        _ => (StatusCode::UNAUTHORIZED, "401: wrong token\n").into_response(),
    }
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response()
}

/// A file of the log directory, as `content_type`; 404 when the
/// scheduler has not written it.
fn log_file(shared: &Shared, name: &str, content_type: &'static str) -> Response {
    match std::fs::read(shared.log_dir.join(name)) {
        Ok(bytes) => (
            [
                (header::CONTENT_TYPE, content_type),
                (header::CACHE_CONTROL, "no-store"),
            ],
            bytes,
        )
            .into_response(),
        Err(e) => (
            StatusCode::NOT_FOUND,
            format!(
                "no {name} in {} ({}): no scheduler has run with this --log-dir\n",
                shared.log_dir.display(),
                crate::files::io_reason(&e)
            ),
        )
            .into_response(),
    }
}

async fn status(State(shared): State<Arc<Shared>>) -> Response {
    log_file(&shared, "status.json", "application/json")
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    log_file(&shared, "metrics.prom", "text/plain; version=0.0.4")
}

async fn box_doc(State(shared): State<Arc<Shared>>) -> Response {
    let json = shared
        .box_json
        .read()
        .map(|j| j.clone())
        .unwrap_or_default();
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        json,
    )
        .into_response()
}

async fn timeline(State(shared): State<Arc<Shared>>) -> Response {
    let fresh = shared
        .timeline
        .read()
        .ok()
        .and_then(|t| t.clone())
        .filter(|(at, _)| at.elapsed() < TIMELINE_TTL);
    let svg = match fresh {
        Some((_, svg)) => svg,
        None => {
            let log_dir = shared.log_dir.clone();
            match tokio::task::spawn_blocking(move || crate::timeline::render(&log_dir)).await {
                Ok(Ok(svg)) => {
                    if let Ok(mut slot) = shared.timeline.write() {
                        *slot = Some((Instant::now(), svg.clone()));
                    }
                    svg
                }
                _ => {
                    return (
                        StatusCode::NOT_FOUND,
                        "no journal to draw a timeline from\n",
                    )
                        .into_response();
                }
            }
        }
    };
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        svg,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_taken_from_the_bearer_header_or_the_cookie() {
        let mut headers = HeaderMap::new();
        assert_eq!(carried(&headers), None);
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; gpusched_token=s3cret; b=2"),
        );
        assert_eq!(carried(&headers).as_deref(), Some("s3cret"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer t0k"),
        );
        assert_eq!(carried(&headers).as_deref(), Some("t0k"));
        assert!(same_token("s3cret", "s3cret"));
        assert!(!same_token("s3cre", "s3cret"));
        assert!(!same_token("s3creT", "s3cret"));
        assert!(!same_token("", "s3cret"));
    }
}
