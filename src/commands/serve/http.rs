//! The HTTP side of `gpusched serve` (docs/SECURITY.md "serve"): hyper's
//! HTTP/1.1 server on a tokio runtime of its own, one request per
//! connection, built for a page and an API read on loopback by a few
//! browsers, and for nobody else's client to stop it:
//!
//! * an idle connection costs a task, not a thread: up to
//!   [`MAX_CONNECTIONS`] at once (the descriptor limit is raised to fit),
//!   and at most [`MAX_PER_USER`] of them from any one local user other
//!   than serve's own (the peer's uid asked of the kernel's socket
//!   diagnostics for the exact connection, under the accepted socket's
//!   own address, so a wildcard listener caps as a loopback one does) or
//!   any one remote address,
//!   so nobody can hold every slot and shut the owner out;
//! * a request head of at most [`MAX_HEAD_BYTES`] (431 past it), all of
//!   it within [`HEAD_DEADLINE`] (hyper's header-read timeout);
//! * a whole connection within [`CONNECTION_DEADLINE`] (a client that
//!   pipelines and never reads is dropped);
//! * the answer is built off the network thread (a timeline being drawn
//!   holds up no other request);
//! * an accept that fails (out of descriptors) is tried again after a
//!   pause, never the end of the server.

use http_body_util::Full;
use hyper::body::Bytes;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 8192;

/// Connections one local user other than serve's own, or one remote
/// address, may hold at once.
pub const MAX_PER_USER: usize = 256;

/// Who holds a connection, for [`MAX_PER_USER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Peer {
    /// A local user other than serve's own (from the kernel's socket diagnostics).
    User(u32),
    /// A peer the kernel names no local socket for: another machine (or a
    /// local socket that closed before it was looked up), by address.
    Address(std::net::IpAddr),
}

/// The largest request head (request line and headers), in bytes.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// How long a client has to send its whole request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);

/// How long a connection may last in all, answer included.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(30);

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
///
/// Errors: the runtime cannot be made, or the listener cannot be handed
/// to it.
pub fn serve(
    listener: std::net::TcpListener,
    answer: Arc<dyn Fn(&Request) -> Reply + Send + Sync>,
) -> std::io::Result<()> {
    raise_descriptor_limit();
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let me = nix::unistd::geteuid().as_raw();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let live = Arc::new(AtomicUsize::new(0));
        let per_user: Arc<Mutex<HashMap<Peer, usize>>> = Arc::default();
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(_) => {
                    // Out of descriptors, or a connection reset before it
                    // was taken: pause, then go on.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // The accepted socket's own address (getsockname(2)), not the
            // listener's: on 0.0.0.0 or [::] only the former names this
            // connection.
            let user = match stream.local_addr() {
                Ok(local) => who(local, peer, me),
                Err(_) => Some(Peer::Address(peer.ip())),
            };
            let Some(slot) = Slot::take(&live, &per_user, user) else {
                drop(stream);
                continue;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let service = hyper::service::service_fn(move |request| {
                    let answer = answer.clone();
                    async move { Ok::<_, std::convert::Infallible>(respond(request, answer).await) }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEAD_DEADLINE)
                    .max_buf_size(MAX_HEAD_BYTES)
                    .keep_alive(false)
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                let _ = tokio::time::timeout(CONNECTION_DEADLINE, connection).await;
            });
        }
    })
}

/// The answer to one request: GET and HEAD go to `answer` (on the
/// blocking pool: it reads files and may draw the timeline), anything
/// else is 405.
async fn respond(
    request: hyper::Request<hyper::body::Incoming>,
    answer: Arc<dyn Fn(&Request) -> Reply + Send + Sync>,
) -> hyper::Response<Full<Bytes>> {
    let method = request.method().clone();
    let reply = if method == hyper::Method::GET || method == hyper::Method::HEAD {
        let ours = Request {
            method: method.as_str().to_string(),
            target: request
                .uri()
                .path_and_query()
                .map_or_else(|| "/".to_string(), |p| p.as_str().to_string()),
            headers: request
                .headers()
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
        };
        tokio::task::spawn_blocking(move || answer(&ours))
            .await
            .unwrap_or_else(|_| Reply::new(500, "text/plain", "500: the answer failed\n"))
    } else {
        Reply::new(405, "text/plain", "405: only GET here\n").with_header("Allow", "GET, HEAD")
    };
    let mut response = hyper::Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        response = response.header(name.as_str(), value.as_str());
    }
    let body = if method == hyper::Method::HEAD {
        Bytes::new()
    } else {
        Bytes::from(reply.body)
    };
    response
        .body(Full::new(body))
        .unwrap_or_else(|_| hyper::Response::new(Full::new(Bytes::from_static(b"500\n"))))
}

/// A connection's place among [`MAX_CONNECTIONS`] and its user's among
/// [`MAX_PER_USER`], given back on drop.
struct Slot {
    live: Arc<AtomicUsize>,
    per_user: Arc<Mutex<HashMap<Peer, usize>>>,
    user: Option<Peer>,
}

impl Slot {
    /// A place for a connection of `user` (`None`: serve's own user);
    /// `None` when full.
    fn take(
        live: &Arc<AtomicUsize>,
        per_user: &Arc<Mutex<HashMap<Peer, usize>>>,
        user: Option<Peer>,
    ) -> Option<Slot> {
        if live.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        // From here on, dropping the slot gives its place back.
        let mut slot = Slot {
            live: live.clone(),
            per_user: per_user.clone(),
            user: None,
        };
        if let Some(uid) = user {
            let mut counts = per_user.lock().unwrap_or_else(|e| e.into_inner());
            let count = counts.entry(uid).or_default();
            if *count >= MAX_PER_USER {
                return None;
            }
            *count += 1;
            slot.user = Some(uid);
        }
        Some(slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::AcqRel);
        if let Some(uid) = self.user {
            let mut counts = self.per_user.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(count) = counts.get_mut(&uid) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    counts.remove(&uid);
                }
            }
        }
    }
}

/// Who a connection from `peer` to `local` (the accepted socket's own
/// address) counts against: `None` for serve's own user `me`, the local
/// user the kernel names for it, else the peer's address.
fn who(local: SocketAddr, peer: SocketAddr, me: u32) -> Option<Peer> {
    match peer_uid(local, peer) {
        Some(uid) if uid == me => None,
        Some(uid) => Some(Peer::User(uid)),
        None => Some(Peer::Address(peer.ip())),
    }
}

/// The local user whose socket `peer` is, for a connection to `local`
/// (the accepted socket's address, never a wildcard) from this machine:
/// the uid the kernel's socket diagnostics (sock_diag(7), one
/// `SOCK_DIAG_BY_FAMILY` request for the exact socket whose local address
/// is `peer` and remote address `local`) give for the peer's end. A local
/// peer may come from any of the machine's addresses, not only loopback,
/// so every peer is looked up; an IPv4 peer on an IPv6 listener
/// (`::ffff:a.b.c.d`) is looked up as the IPv4 socket it is. `None` for a
/// remote peer or one not found.
///
/// One lookup costs the kernel a hash-table probe; reading the whole
/// socket table (`/proc/net/tcp`) instead took 10 ms with 1500 sockets
/// open, which capped how fast serve could accept at all.
fn peer_uid(local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    use netlink_packet_core::{NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
    use netlink_packet_sock_diag::SockDiagMessage;
    use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
    use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
    use netlink_sys::{Socket, protocols::NETLINK_SOCK_DIAG};
    use std::net::IpAddr;

    let unmapped = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let (peer_ip, local_ip) = (unmapped(peer.ip()), unmapped(local.ip()));
    let family = match (peer_ip, local_ip) {
        (IpAddr::V4(_), IpAddr::V4(_)) => AF_INET,
        (IpAddr::V6(_), IpAddr::V6(_)) => AF_INET6,
        _ => return None,
    };
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    let mut request = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::all(),
            socket_id: SocketId {
                source_port: peer.port(),
                destination_port: local.port(),
                source_address: peer_ip,
                destination_address: local_ip,
                interface_id: 0,
                // INET_DIAG_NOCOOKIE: any socket with these addresses.
                cookie: [0xff; 8],
            },
        })
        .into(),
    );
    request.finalize();
    let mut sent = vec![0; request.buffer_len()];
    request.serialize(&mut sent);
    let mut socket = Socket::new(NETLINK_SOCK_DIAG).ok()?;
    socket.bind_auto().ok()?;
    socket.connect(&netlink_sys::SocketAddr::new(0, 0)).ok()?;
    socket.send(&sent, 0).ok()?;
    // The kernel answers within send(2): a reply is there, or none comes.
    socket.set_non_blocking(true).ok()?;
    let mut received = vec![0; 8192];
    let size = socket.recv(&mut &mut received[..], 0).ok()?;
    let reply = NetlinkMessage::<SockDiagMessage>::deserialize(&received[..size]).ok()?;
    match reply.payload {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => {
            Some(response.header.uid)
        }
        _ => None,
    }
}

/// Raises this process's soft limit on open descriptors to its hard
/// limit (at most what [`MAX_CONNECTIONS`] needs), so idle connections
/// meet the connection cap, not the descriptor limit.
fn raise_descriptor_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let want = hard.min(MAX_CONNECTIONS as u64 + 256);
        if want > soft {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, want, hard);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_gets_at_most_their_share_of_connections() {
        let live = Arc::new(AtomicUsize::new(0));
        let per_user = Arc::default();
        let held: Vec<Slot> = (0..MAX_PER_USER)
            .map(|_| Slot::take(&live, &per_user, Some(Peer::User(7))).unwrap())
            .collect();
        assert!(Slot::take(&live, &per_user, Some(Peer::User(7))).is_none());
        // Another user, and serve's own, still get in.
        assert!(Slot::take(&live, &per_user, Some(Peer::User(8))).is_some());
        assert!(Slot::take(&live, &per_user, None).is_some());
        drop(held);
        assert!(Slot::take(&live, &per_user, Some(Peer::User(7))).is_some());
        assert_eq!(live.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_remote_address_gets_at_most_its_share_of_connections() {
        let live = Arc::new(AtomicUsize::new(0));
        let per_user = Arc::default();
        let far = Peer::Address("192.0.2.7".parse().unwrap());
        let _held: Vec<Slot> = (0..MAX_PER_USER)
            .map(|_| Slot::take(&live, &per_user, Some(far)).unwrap())
            .collect();
        assert!(Slot::take(&live, &per_user, Some(far)).is_none());
        let other = Peer::Address("192.0.2.8".parse().unwrap());
        assert!(Slot::take(&live, &per_user, Some(other)).is_some());
    }

    /// A real connection to a wildcard listener is found in the socket
    /// table under the accepted socket's own address (the listener's,
    /// 0.0.0.0, names no row), as this process's own user.
    #[test]
    fn a_peer_on_a_wildcard_listener_is_named_by_the_accepted_sockets_address() {
        let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (stream, peer) = listener.accept().unwrap();
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(peer_uid(listener.local_addr().unwrap(), peer), None);
        assert_eq!(peer_uid(stream.local_addr().unwrap(), peer), Some(me));
        assert_eq!(who(stream.local_addr().unwrap(), peer, me), None);
        assert_eq!(
            who(stream.local_addr().unwrap(), peer, me + 1),
            Some(Peer::User(me))
        );
    }

    /// An IPv4 client of an IPv6 wildcard listener arrives as
    /// `::ffff:127.0.0.1` and is found as the IPv4 socket it is; a peer
    /// no local socket matches (a closed one) is nobody's.
    #[test]
    fn a_v4_peer_on_a_v6_listener_and_a_closed_peer() {
        let Ok(listener) = std::net::TcpListener::bind("[::]:0") else {
            return; // no IPv6 on this machine
        };
        let port = listener.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (stream, peer) = listener.accept().unwrap();
        assert!(peer.is_ipv6(), "{peer}");
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(peer_uid(stream.local_addr().unwrap(), peer), Some(me));
        drop(client);
        let gone = SocketAddr::new(peer.ip(), peer.port().wrapping_add(1));
        assert_eq!(peer_uid(stream.local_addr().unwrap(), gone), None);
    }
}
