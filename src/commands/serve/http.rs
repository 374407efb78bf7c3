//! The HTTP side of `gpusched serve` (docs/SECURITY.md "serve"): a
//! GET-only HTTP/1.1 server over std's sockets, one request per
//! connection, built for a page and an API read on loopback by a few
//! browsers, and for nobody else's client to stop it:
//!
//! * at most [`MAX_CONNECTIONS`] connections at once, each on a thread
//!   of its own (one slow or hostile client never holds another's);
//!   beyond that a connection is closed at once;
//! * a request head of at most [`MAX_HEAD_BYTES`], all of it within
//!   [`HEAD_DEADLINE`] (an endless header line is answered 431, a client
//!   that sends nothing is dropped);
//! * every write within [`WRITE_TIMEOUT`] (a client that pipelines and
//!   never reads is dropped);
//! * an accept that fails (out of descriptors) is tried again after a
//!   pause, never the end of the server.
//!
//! tiny_http, which served before, has none of these limits: idle
//! connections exhausted descriptors and its accept thread panicked for
//! good, and one client that never read blocked every worker.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;

/// The largest request head (request line and headers), in bytes.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// How long a client has to send its whole request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);

/// How long one write of the answer may block.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A request: its target (path and query) and headers (names as sent).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `GET`, `HEAD`, …
    pub method: String,
    /// The request target: `/api/v1/box?x=1`.
    pub target: String,
    /// Header names and values, in order.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Headers besides Content-Length and Connection.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    /// `status` with `body` of `content_type`.
    pub fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
        }
    }

    /// The reply with one more header.
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// Serves `listener` with `answer` until the process ends.
pub fn serve(listener: TcpListener, answer: Arc<dyn Fn(&Request) -> Reply + Send + Sync>) {
    let live = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors, or a connection reset before it was
                // taken: pause, then go on.
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if live.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::AcqRel);
            drop(stream);
            continue;
        }
        let (live, answer) = (live.clone(), answer.clone());
        let spawned = std::thread::Builder::new()
            .name("http".into())
            .spawn(move || {
                let _slot = Slot(live);
                let _ = handle(stream, answer.as_ref());
            });
        if spawned.is_err() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A connection's place among [`MAX_CONNECTIONS`], given back on drop.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Reads one request from `stream`, answers it and closes.
fn handle(mut stream: TcpStream, answer: &dyn Fn(&Request) -> Reply) -> std::io::Result<()> {
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let reply = match read_head(&mut stream)? {
        Head::Complete(bytes) => match parse(&bytes) {
            Some(request) if request.method == "GET" || request.method == "HEAD" => {
                let mut reply = answer(&request);
                if request.method == "HEAD" {
                    reply.body.clear();
                }
                reply
            }
            Some(_) => Reply::new(405, "text/plain", "405: only GET here\n")
                .with_header("Allow", "GET, HEAD"),
            None => Reply::new(400, "text/plain", "400: not an HTTP request\n"),
        },
        Head::TooLarge => Reply::new(
            431,
            "text/plain",
            format!("431: request head over {MAX_HEAD_BYTES} bytes\n"),
        ),
        Head::Gone => return Ok(()),
    };
    write_reply(&mut stream, &reply)
}

/// What came of reading a request head.
enum Head {
    /// The head, up to and without its blank line.
    Complete(Vec<u8>),
    /// Longer than [`MAX_HEAD_BYTES`].
    TooLarge,
    /// The client closed, or did not finish within [`HEAD_DEADLINE`].
    Gone,
}

/// Reads until the blank line that ends a head, within the deadline.
fn read_head(stream: &mut TcpStream) -> std::io::Result<Head> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = memchr::memmem::find(&head, b"\r\n\r\n") {
            head.truncate(end);
            return Ok(Head::Complete(head));
        }
        if head.len() > MAX_HEAD_BYTES {
            return Ok(Head::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Head::Gone);
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(Head::Gone),
            Ok(n) => head.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Ok(Head::Gone),
        }
    }
}

/// The request a head holds; `None` when it is not one.
pub fn parse(head: &[u8]) -> Option<Request> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target, version) = (first.next()?, first.next()?, first.next()?);
    if first.next().is_some() || !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return None;
    }
    let headers = lines
        .map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.trim().to_string(), value.trim().to_string()))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Request {
        method: method.to_string(),
        target: target.to_string(),
        headers,
    })
}

/// Writes `reply` and closes the connection.
fn write_reply(stream: &mut TcpStream, reply: &Reply) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        reply.body.len()
    ));
    stream.write_all(head.as_bytes())?;
    stream.write_all(&reply.body)?;
    stream.flush()?;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// The reason phrase of the status codes served.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_parses_into_method_target_and_headers() {
        let request =
            parse(b"GET /api/v1/box?a=1 HTTP/1.1\r\nHost: 127.0.0.1:8765\r\nX-A:  b ").unwrap();
        assert_eq!(request.method, "GET");
        assert_eq!(request.target, "/api/v1/box?a=1");
        assert_eq!(request.header("host"), Some("127.0.0.1:8765"));
        assert_eq!(request.header("x-a"), Some("b"));
        assert_eq!(parse(b"GET / HTTP/1.1"), parse(b"GET / HTTP/1.1"));
        assert!(parse(b"GET / HTTP/1.1").is_some());
        assert!(parse(b"GET http://evil/ HTTP/1.1").is_none());
        assert!(parse(b"GET / SMTP").is_none());
        assert!(parse(b"GET / HTTP/1.1\r\nno colon here").is_none());
        assert!(parse(b"\xff\xfe").is_none());
    }
}
