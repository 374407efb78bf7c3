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
//! writes nothing. The box is read once a second by one background thread;
//! requests are answered from that copy, so fifty clients cost what one
//! does. HTTP is tiny_http, a small synchronous server: a loopback page
//! that answers from memory needs no async stack, and a fresh release
//! build is faster without one (docs/PERFORMANCE.md "Building and
//! CI"). A few threads answer; the timeline is drawn on the one that
//! asked for it.
//!
//! Loopback addresses are served without a token (reach them with `ssh
//! -L`); any other address needs `--token-file`, and then every request
//! must carry the token as `Authorization: Bearer T` or the cookie
//! `/login` sets, compared in constant time; anything else gets 401.

use super::box_source::BoxSource;
use crate::cli::ServeArgs;
use crate::error::Error;
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
    let server = tiny_http::Server::http(args.listen)
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
    let server = Arc::new(server);
    let workers: Vec<_> = (0..WORKERS)
        .map(|i| {
            let (server, shared) = (server.clone(), shared.clone());
            std::thread::Builder::new()
                .name(format!("http-{i}"))
                .spawn(move || {
                    for request in server.incoming_requests() {
                        let reply = answer(&shared, request.url(), request.headers());
                        // A client that went away is not our problem.
                        let _ = request.respond(reply);
                    }
                })
        })
        .collect::<Result<_, _>>()?;
    for worker in workers {
        let _ = worker.join();
    }
    Ok(0)
}

/// Threads answering requests.
const WORKERS: usize = 4;

/// An answer to a request.
type Reply = tiny_http::Response<std::io::Cursor<Vec<u8>>>;

/// A header from parts we write ourselves (always valid ASCII).
fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes())
        .expect("a header gpusched writes is ASCII")
}

/// 200 with `content_type`, never cached (the documents change every
/// second).
fn ok(content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
    tiny_http::Response::from_data(body.into())
        .with_header(header("Content-Type", content_type))
        .with_header(header("Cache-Control", "no-store"))
}

/// `status` with a plain-text `message`.
fn text(status: u16, message: impl Into<String>) -> Reply {
    tiny_http::Response::from_data(message.into().into_bytes())
        .with_status_code(status)
        .with_header(header("Content-Type", "text/plain; charset=utf-8"))
}

/// 303 to `location`.
fn see_other(location: &str) -> Reply {
    tiny_http::Response::from_data(Vec::new())
        .with_status_code(303)
        .with_header(header("Location", location))
}

/// The answer to a GET of `url` with `headers`: the token check, then the
/// route.
fn answer(shared: &Shared, url: &str, headers: &[tiny_http::Header]) -> Reply {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    if path == "/login" {
        return login(shared, query);
    }
    if let Some(token) = &shared.token
        && !carried(headers).is_some_and(|given| same_token(&given, token))
    {
        return text(
            401,
            "401: this gpusched serve needs its token: open /login?token=… once, or send Authorization: Bearer …\n",
        )
        .with_header(header("WWW-Authenticate", "Bearer"));
    }
    match path {
        "/" => ok("text/html; charset=utf-8", PAGE),
        "/api/v1/status" => log_file(shared, "status.json", "application/json"),
        "/metrics" => log_file(shared, "metrics.prom", "text/plain; version=0.0.4"),
        "/api/v1/box" => {
            let json = shared
                .box_json
                .read()
                .map(|j| j.clone())
                .unwrap_or_default();
            ok("application/json", json)
        }
        "/timeline.svg" => timeline(shared),
        _ => text(
            404,
            format!("404: no {path} here; try / or /api/v1/status\n"),
        ),
    }
}

/// Reads the token: the file's first line, trimmed.
///
/// Errors (exit 2): unreadable, empty, or readable by others.
fn read_token(path: &Path) -> Result<String, Error> {
    let unreadable = |e: std::io::Error| {
        Error::Usage(format!(
            "token file {}: {}",
            path.display(),
            crate::files::io_reason(&e)
        ))
    };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    if meta.mode() & 0o077 != 0 {
        return Err(Error::Usage(format!(
            "token file {} can be read by others (mode {:04o}); `chmod 600 {}`",
            path.display(),
            meta.mode() & 0o7777,
            path.display()
        )));
    }
    let contents = std::fs::read_to_string(path).map_err(unreadable)?;
    let token = contents.lines().next().unwrap_or("").trim().to_string();
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
fn carried(headers: &[tiny_http::Header]) -> Option<String> {
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.field.equiv(name))
            .map(|h| h.value.as_str())
    };
    if let Some(bearer) = values("Authorization").find_map(|v| v.strip_prefix("Bearer ")) {
        return Some(bearer.trim().to_string());
    }
    values("Cookie")
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_string())
}

/// `/login?token=T`: with the right token, sets the cookie and goes to
/// the page; else 401.
fn login(shared: &Shared, query: &str) -> Reply {
    let Some(token) = &shared.token else {
        return see_other("/");
    };
    let given = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == "token")
        .map(|(_, value)| percent_decoded(value));
    match given {
        Some(given) if same_token(&given, token) => see_other("/").with_header(header(
            "Set-Cookie",
            &format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"),
        )),
        _ => text(401, "401: wrong token\n"),
    }
}

/// A query value decoded as a browser's form sends it: `+` is a space,
/// `%XX` a byte (what axum's `Query` did before); a malformed escape is
/// kept as written.
fn percent_decoded(value: &str) -> String {
    percent_encoding::percent_decode_str(&value.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// A file of the log directory, as `content_type`; 404 when the
/// scheduler has not written it.
fn log_file(shared: &Shared, name: &str, content_type: &str) -> Reply {
    match std::fs::read(shared.log_dir.join(name)) {
        Ok(bytes) => ok(content_type, bytes),
        Err(e) => text(
            404,
            format!(
                "no {name} in {} ({}): no scheduler has run with this --log-dir\n",
                shared.log_dir.display(),
                crate::files::io_reason(&e)
            ),
        ),
    }
}

/// The run's timeline, drawn at most every [`TIMELINE_TTL`].
fn timeline(shared: &Shared) -> Reply {
    let fresh = shared
        .timeline
        .read()
        .ok()
        .and_then(|t| t.clone())
        .filter(|(at, _)| at.elapsed() < TIMELINE_TTL);
    let svg = match fresh {
        Some((_, svg)) => svg,
        None => match crate::timeline::render(&shared.log_dir) {
            Ok(svg) => {
                if let Ok(mut slot) = shared.timeline.write() {
                    *slot = Some((Instant::now(), svg.clone()));
                }
                svg
            }
            Err(_) => return text(404, "no journal to draw a timeline from\n"),
        },
    };
    ok("image/svg+xml", svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_taken_from_the_bearer_header_or_the_cookie() {
        let mut headers = Vec::new();
        assert_eq!(carried(&headers), None);
        headers.push(header("cookie", "a=1; gpusched_token=s3cret; b=2"));
        assert_eq!(carried(&headers).as_deref(), Some("s3cret"));
        headers.push(header("Authorization", "Bearer t0k"));
        assert_eq!(carried(&headers).as_deref(), Some("t0k"));
        assert!(same_token("s3cret", "s3cret"));
        assert!(!same_token("s3cre", "s3cret"));
        assert!(!same_token("s3creT", "s3cret"));
        assert!(!same_token("", "s3cret"));
    }

    #[test]
    fn a_query_value_is_percent_decoded() {
        assert_eq!(percent_decoded("a%2Fb+c%3d"), "a/b c=");
        assert_eq!(percent_decoded("50%"), "50%");
        assert_eq!(percent_decoded("%zz"), "%zz");
    }
}
