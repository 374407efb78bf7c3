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
//! writes nothing but its token file. The box is read once a second by
//! one background thread; requests are answered from that copy, so fifty
//! clients cost what one does. HTTP is `serve/http.rs`: GET only, one
//! request per connection, with a cap on connections, on the request
//! head's size and time, and on every write (docs/SECURITY.md "serve").
//!
//! Every request needs the token, on every address (docs/SECURITY.md):
//! `Authorization: Bearer T` or the cookie `/login` sets, compared in
//! constant time. On a loopback address the token is made on first run
//! in `~/.config/gpusched/serve-token` (0600) and the printed URL carries
//! it, as Jupyter's does; any other address needs `--token-file`. On
//! loopback the Host header must name a loopback host, and an Origin
//! header must be this server's own, so a web page that rebinds its name
//! to 127.0.0.1 reads nothing.

mod http;

use super::box_source::BoxSource;
use crate::cli::ServeArgs;
use crate::error::Error;
use http::{Reply, Request};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// The page: HTML, CSS and JavaScript in one file, built into the binary.
const PAGE: &str = include_str!("serve/page.html");

/// The start of the cookie's name `/login` sets: `gpusched_token_PORT`.
const COOKIE: &str = "gpusched_token";

/// The cookie of a serve on `port` holding `token`: its name and value
/// both bound to the port (docs/SECURITY.md "serve"). Browsers send every
/// cookie of 127.0.0.1 to every port, so another user's server on
/// another port receives this one: it carries not the token but a hash
/// of it with the port, which no server on another port accepts and from
/// which the token cannot be had for the API.
fn cookie_for(port: u16, token: &str) -> (String, String) {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("gpusched serve cookie\0{port}\0{token}").as_bytes());
    let value = digest.iter().map(|b| format!("{b:02x}")).collect();
    (format!("{COOKIE}_{port}"), value)
}

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
    /// The token every request must carry.
    token: String,
    /// The cookie `/login` sets instead: name and value ([`cookie_for`]).
    cookie: (String, String),
    /// Whether we listen on a loopback address (Host is checked, the
    /// cookie is `Secure`: browsers treat loopback as a secure context).
    loopback: bool,
    /// The last timeline drawn, and when.
    timeline: RwLock<Option<(Instant, String)>>,
}

/// Runs `gpusched serve` until killed.
///
/// Errors (exit 2): a non-loopback address without `--token-file`; a
/// token file that others can read, or that is empty; the GPUs, ledger or
/// rules cannot be opened; the address cannot be bound.
pub fn run(args: &ServeArgs) -> anyhow::Result<i32> {
    let loopback = args.listen.ip().is_loopback();
    let token = match &args.token_file {
        Some(path) => read_token(path)?,
        None if loopback => own_token()?,
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
        cookie: cookie_for(args.listen.port(), &token),
        token,
        loopback,
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
    let listener = listen_on(args.listen)?;
    let login = format!(
        "http://{}/login?token={}",
        args.listen,
        percent_encoding::utf8_percent_encode(&shared.token, percent_encoding::NON_ALPHANUMERIC)
    );
    println!(
        "gpusched serve: open {login} (the token is in {}); API /api/v1/status, /api/v1/box, /metrics with Authorization: Bearer TOKEN",
        args.token_file
            .clone()
            .or_else(default_token_file)
            .map_or("?".into(), |p| p.display().to_string())
    );
    http::serve(
        listener,
        Arc::new(move |request: &Request| answer(&shared, request)),
    )
    .map_err(|e| Error::io(format!("cannot serve on {}", args.listen), e))?;
    Ok(0)
}

/// Binds `address`; a port taken by another server says so and names
/// the next one.
///
/// Errors ([`Error::Usage`]): the address cannot be bound.
fn listen_on(address: std::net::SocketAddr) -> Result<std::net::TcpListener, Error> {
    std::net::TcpListener::bind(address).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            let next = std::net::SocketAddr::new(address.ip(), address.port().wrapping_add(1));
            format!(
                " — another server (perhaps another user's gpusched serve) has that port; pick another with --listen {next}"
            )
        } else {
            String::new()
        };
        Error::Usage(format!("cannot listen on {address}: {e}{hint}"))
    })
}

/// 200 with `content_type`, never cached (the documents change every
/// second).
fn ok(content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
    Reply::new(200, content_type, body).with_header("Cache-Control", "no-store")
}

/// `status` with a plain-text `message`.
fn text(status: u16, message: impl Into<String>) -> Reply {
    Reply::new(status, "text/plain; charset=utf-8", message.into())
}

/// 303 to `location`.
fn see_other(location: &str) -> Reply {
    Reply::new(303, "text/plain; charset=utf-8", Vec::new()).with_header("Location", location)
}

/// Whether a request that reached a loopback listener names a loopback
/// host (`localhost`, `127.0.0.1`, `[::1]`, any port): a page whose name
/// was rebound to 127.0.0.1 sends its own name, and gets 421.
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The answer to a GET: the Host and Origin checks, the token check,
/// then the route.
fn answer(shared: &Shared, request: &Request) -> Reply {
    let host = request.header("Host").unwrap_or("");
    if shared.loopback && !loopback_host(host) {
        return text(
            421,
            format!("421: this gpusched serve answers to localhost, not to {host:?}\n"),
        );
    }
    if let Some(origin) = request.header("Origin")
        && origin != format!("http://{host}")
    {
        return text(403, "403: a page of another origin may not read this\n");
    }
    let url = request.target.as_str();
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    if path == "/login" {
        return login(shared, query);
    }
    if !carried(&request.headers, &shared.cookie.0).is_some_and(|given| given.holds(shared)) {
        return text(
            401,
            "401: this gpusched serve needs its token: open the /login?token=… URL it printed, or send Authorization: Bearer …\n",
        )
        .with_header("WWW-Authenticate", "Bearer");
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

/// Where the token of a loopback `serve` lives:
/// `$XDG_CONFIG_HOME/gpusched/serve-token`, else
/// `~/.config/gpusched/serve-token`.
fn default_token_file() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("gpusched").join("serve-token"))
}

/// The token of a loopback `serve`: read from [`default_token_file`], or
/// made there on first run (128 random bits as hex, mode 0600 set at
/// creation, never through a link).
///
/// Errors (exit 2): no home directory, or the file cannot be made or
/// read (with the `--token-file` to use instead).
fn own_token() -> Result<String, Error> {
    use std::io::Write;
    use std::os::unix::fs::DirBuilderExt;
    let Some(path) = default_token_file() else {
        return Err(Error::Usage(
            "no HOME or XDG_CONFIG_HOME to keep serve's token in; give one with --token-file FILE"
                .into(),
        ));
    };
    if let Some(dir) = path.parent() {
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir);
    }
    match crate::files::create_private(&path) {
        Ok(mut file) => {
            let token = random_token()?;
            file.write_all(format!("{token}\n").as_bytes())
                .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_token(&path),
        Err(e) => Err(Error::Usage(format!(
            "cannot make the token file {} ({}); give one with --token-file FILE",
            path.display(),
            crate::files::io_reason(&e)
        ))),
    }
}

/// 128 random bits as 32 hex digits.
///
/// Errors: no random source.
fn random_token() -> Result<String, Error> {
    let mut bytes = [0u8; 16];
    crate::trust::random_bytes(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
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
    let (contents, meta) = crate::trust::read_untrusted(path, 4096).map_err(|e| match e {
        crate::trust::Untrusted::Io(e) => unreadable(e),
        e => Error::Usage(format!("token file {}: {e}", path.display())),
    })?;
    if meta.mode() & 0o077 != 0 {
        return Err(Error::Usage(format!(
            "token file {} can be read by others (mode {:04o}); `chmod 600 {}`",
            path.display(),
            meta.mode() & 0o7777,
            path.display()
        )));
    }
    let contents = String::from_utf8_lossy(&contents);
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
    use sha2::Digest;
    use subtle::ConstantTimeEq;
    // Digests of equal length: not even the token's length shows.
    let (given, token) = (sha2::Sha256::digest(given), sha2::Sha256::digest(token));
    bool::from(given.as_slice().ct_eq(token.as_slice()))
}

/// What a request proves itself with.
#[derive(Debug, PartialEq)]
enum Credential {
    /// `Authorization: Bearer TOKEN`.
    Bearer(String),
    /// The cookie named `cookie_name` ([`cookie_for`]): its value.
    Cookie(String),
}

impl Credential {
    /// Whether it is this server's: the token, or its cookie's value.
    fn holds(&self, shared: &Shared) -> bool {
        match self {
            Credential::Bearer(token) => same_token(token, &shared.token),
            Credential::Cookie(value) => same_token(value, &shared.cookie.1),
        }
    }
}

/// What a request carries: its bearer header (the scheme in any case, as
/// RFC 9110 allows), or the cookie named `cookie_name`.
fn carried(headers: &[(String, String)], cookie_name: &str) -> Option<Credential> {
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if let Some(bearer) = values("Authorization").find_map(|v| {
        let (scheme, rest) = v.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then_some(rest)
    }) {
        return Some(Credential::Bearer(bearer.trim().to_string()));
    }
    values("Cookie")
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == cookie_name)
        .map(|(_, value)| Credential::Cookie(value.to_string()))
}

/// `/login?token=T`: with the right token, sets the cookie (`Secure` on
/// loopback, which browsers count as a secure context; over plain HTTP
/// on another address a `Secure` cookie would never be sent back) and
/// goes to the page; else 401.
fn login(shared: &Shared, query: &str) -> Reply {
    let given = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == "token")
        .map(|(_, value)| percent_decoded(value));
    match given {
        Some(given) if same_token(&given, &shared.token) => see_other("/").with_header(
            "Set-Cookie",
            &format!(
                "{}={}; HttpOnly; SameSite=Strict; Path=/{}",
                shared.cookie.0,
                shared.cookie.1,
                if shared.loopback { "; Secure" } else { "" }
            ),
        ),
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
    match crate::trust::read_untrusted(&shared.log_dir.join(name), crate::trust::MAX_STATUS_BYTES) {
        Ok((bytes, _)) => ok(content_type, bytes),
        Err(e) => text(
            404,
            format!(
                "no {name} in {} ({}): no scheduler has run with this --log-dir\n",
                shared.log_dir.display(),
                match e {
                    crate::trust::Untrusted::Io(e) => crate::files::io_reason(&e),
                    other => other.to_string(),
                }
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
        let header = |n: &str, v: &str| (n.to_string(), v.to_string());
        let mut headers = Vec::new();
        let name = "gpusched_token_8765";
        assert_eq!(carried(&headers, name), None);
        // Another port's cookie is not ours.
        headers.push(header("cookie", "a=1; gpusched_token_9000=x; b=2"));
        assert_eq!(carried(&headers, name), None);
        headers.push(header("cookie", "a=1; gpusched_token_8765=s3cret; b=2"));
        assert_eq!(
            carried(&headers, name),
            Some(Credential::Cookie("s3cret".into()))
        );
        headers.push(header("Authorization", "bearer t0k"));
        assert_eq!(
            carried(&headers, name),
            Some(Credential::Bearer("t0k".into())),
            "any case"
        );
        // The cookie is bound to its port and is not the token.
        let (a, b) = (cookie_for(8765, "tok"), cookie_for(9000, "tok"));
        assert_eq!(a.0, "gpusched_token_8765");
        assert_ne!(a.1, b.1);
        assert_ne!(a.1, "tok");
        assert!(same_token("s3cret", "s3cret"));
        assert!(!same_token("s3cre", "s3cret"));
        assert!(!same_token("s3creT", "s3cret"));
        assert!(!same_token("", "s3cret"));
    }

    #[test]
    fn only_loopback_names_pass_the_host_check() {
        for host in [
            "localhost:8765",
            "127.0.0.1:8765",
            "[::1]:8765",
            "LOCALHOST",
            "127.0.0.1",
        ] {
            assert!(loopback_host(host), "{host}");
        }
        for host in [
            "evil.example:8765",
            "",
            "10.0.0.1:8765",
            "localhost.evil.example:8765",
        ] {
            assert!(!loopback_host(host), "{host}");
        }
    }

    #[test]
    fn a_query_value_is_percent_decoded() {
        assert_eq!(percent_decoded("a%2Fb+c%3d"), "a/b c=");
        assert_eq!(percent_decoded("50%"), "50%");
        assert_eq!(percent_decoded("%zz"), "%zz");
    }
}
