//! A deliberately small HTTP/1.x server: one request per connection (`Connection: close`),
//! GET and HEAD only, the request head read with a size limit and a deadline and parsed by
//! `httparse`, a bounded number of connections at once, where a new connection takes the
//! place of the oldest one still sending its head rather than being refused. That is all a
//! Prometheus scrape needs, and every resource a peer can make it spend is bounded.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most bytes of a request head (request line and headers).
pub const MAX_HEAD: usize = 8 * 1024;
/// Most headers in a request.
pub const MAX_HEADERS: usize = 64;
/// How long a connection is drained after its response (so the peer sees the response
/// rather than a reset), at most.
const LINGER: Duration = Duration::from_millis(500);
/// Most bytes drained after a response.
const LINGER_BYTES: usize = 64 * 1024;

/// The limits of the server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; see [`serve`] for what happens at the limit.
    pub max_connections: usize,
    /// Time for a client to send its whole request head, from the connection on.
    pub read_timeout: Duration,
    /// Time for a response to be written.
    pub write_timeout: Duration,
}

/// A request the server answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET` or `HEAD` (others are refused before a [`Request`] is made).
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The `Accept` header (the last one, if several).
    pub accept: Option<String>,
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// The body (not sent for HEAD; its length is).
    pub body: Vec<u8>,
}

impl Response {
    /// A `text/plain` response.
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: body.into().into_bytes(),
        }
    }
}

/// The reason phrase of the status codes the server sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// What a request head says so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Head {
    /// A whole head.
    Complete(Request),
    /// Not all of it yet.
    Partial,
    /// Refused: answer with this status and message.
    Refused(u16, String),
}

/// Parses a request head from the bytes read so far (at most [`MAX_HEAD`] are ever given).
pub fn parse_head(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => {
            if buf.len() < MAX_HEAD {
                return Head::Partial;
            }
            // Out of room: a request line that long is a URI too long, else the headers are.
            let line_ended = buf.contains(&b'\n');
            return if line_ended {
                Head::Refused(431, format!("request head longer than {MAX_HEAD} bytes"))
            } else {
                Head::Refused(414, format!("request line longer than {MAX_HEAD} bytes"))
            };
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Head::Refused(431, format!("more than {MAX_HEADERS} headers"));
        }
        Err(httparse::Error::Version) => {
            return Head::Refused(505, "HTTP/1.0 and HTTP/1.1 only".into());
        }
        Err(e) => return Head::Refused(400, format!("malformed request: {e}")),
    }
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return Head::Refused(400, "malformed request".into());
    };
    if req.version.is_some_and(|v| v > 1) {
        return Head::Refused(505, "HTTP/1.0 and HTTP/1.1 only".into());
    }
    // Origin form (`/metrics?x`) or absolute form (`http://host/metrics`).
    let path = match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    };
    let path = path.split(['?', '#']).next().unwrap_or("");
    let accept = req
        .headers
        .iter()
        .rev()
        .find(|h| h.name.eq_ignore_ascii_case("accept"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned());
    Head::Complete(Request {
        method: method.to_string(),
        path: path.to_string(),
        accept,
    })
}

/// Why no request was read.
#[derive(Debug)]
pub enum NoRequest {
    /// The peer sent nothing (or closed): close without an answer.
    Silent,
    /// Answer with this status and message, then close.
    Refuse(u16, String),
}

/// Reads one request head from `stream`: at most [`MAX_HEAD`] bytes, all within `timeout`
/// of the call.
///
/// # Errors
/// [`NoRequest`]: what to answer, if anything.
pub fn read_request(stream: &mut TcpStream, timeout: Duration) -> Result<Request, NoRequest> {
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out(&buf, timeout));
        }
        if stream.set_read_timeout(Some(left)).is_err() {
            return Err(NoRequest::Silent);
        }
        let room = MAX_HEAD - buf.len();
        let want = room.min(chunk.len());
        let n = match stream.read(&mut chunk[..want]) {
            Ok(0) if buf.is_empty() => return Err(NoRequest::Silent),
            Ok(0) => return Err(NoRequest::Refuse(400, "request head cut short".into())),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(timed_out(&buf, timeout));
            }
            Err(_) => return Err(NoRequest::Silent),
        };
        buf.extend_from_slice(&chunk[..n]);
        match parse_head(&buf) {
            Head::Complete(r) => return Ok(r),
            Head::Partial => {}
            Head::Refused(status, msg) => return Err(NoRequest::Refuse(status, msg)),
        }
    }
}

fn timed_out(buf: &[u8], timeout: Duration) -> NoRequest {
    if buf.is_empty() {
        NoRequest::Silent
    } else {
        NoRequest::Refuse(
            408,
            format!(
                "request head not complete within {} ms",
                timeout.as_millis()
            ),
        )
    }
}

/// Writes `r` (without its body when `head_only`) and closes the connection.
///
/// # Errors
/// The peer went away or did not read within the write timeout.
pub fn write_response(stream: &mut TcpStream, r: &Response, head_only: bool) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\
         X-Content-Type-Options: nosniff\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    for (k, v) in &r.headers {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if !head_only {
        out.extend_from_slice(&r.body);
    }
    stream.write_all(&out)?;
    stream.flush()
}

/// Ends the connection gracefully: no more writing, then what the peer still sends is read
/// and dropped for a moment (bounded), so that closing with unread input does not reset
/// the connection before the peer has read the response.
pub fn linger_close(stream: &mut TcpStream) {
    if stream.shutdown(Shutdown::Write).is_err() {
        return;
    }
    let deadline = Instant::now() + LINGER;
    let mut drained = 0usize;
    let mut sink = [0u8; 4096];
    while drained < LINGER_BYTES {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}

/// What the server counts about connections (exported as the exporter's own metrics).
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Connections answered 503: the limit was reached and every connection was past its
    /// request head (being answered).
    pub rejected: AtomicU64,
    /// Connections closed to make room for a new one: the oldest of those that had not sent
    /// a whole request head yet (or were lingering after their answer).
    pub evicted: AtomicU64,
}

/// One open connection, as the table of connections knows it.
#[derive(Debug)]
struct Conn {
    /// A handle on the socket, to shut it down when the connection is evicted.
    stream: Option<TcpStream>,
    /// Whether it may be evicted: it has not sent its whole request head yet, or it has
    /// been answered and is lingering. A connection whose request is being answered is not.
    evictable: bool,
}

/// The connections open now, by the order they were accepted (ids only grow, so the
/// smallest id is the oldest).
#[derive(Debug, Default)]
struct Table {
    next: u64,
    conns: BTreeMap<u64, Conn>,
}

type Shared = Arc<Mutex<Table>>;

fn relock<T>(r: std::sync::LockResult<T>) -> T {
    // The table is whole whatever panicked while holding it (inserts, removes, flags).
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A connection's entry in the table; removed when dropped (if not evicted before).
struct Slot {
    table: Shared,
    id: u64,
}

impl Slot {
    fn set_evictable(&self, evictable: bool) {
        if let Some(c) = relock(self.table.lock()).conns.get_mut(&self.id) {
            c.evictable = evictable;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        relock(self.table.lock()).conns.remove(&self.id);
    }
}

/// Answers connections on `listener` with `handler` until `stop` is set, each on its own
/// thread, at most `limits.max_connections` at once; then waits up to `grace` for the
/// connections being served.
///
/// At the limit, a new connection does not wait and is not refused while some connection
/// has not sent its whole request head yet: the oldest such connection (idle, or
/// trickling its head byte by byte) is closed to make room (counted in `stats.evicted`).
/// So slow or silent peers cannot starve a scrape, which sends its head at once. Only when
/// every connection is past its head (being answered) is the new one answered 503 at once
/// (counted in `stats.rejected`).
///
/// # Errors
/// The listener cannot be polled.
pub fn serve(
    listener: &TcpListener,
    limits: Limits,
    handler: Arc<dyn Fn(&Request) -> Response + Send + Sync>,
    stop: &AtomicBool,
    stats: Arc<ConnStats>,
    grace: Duration,
) -> io::Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    listener.set_nonblocking(true)?;
    let table: Shared = Arc::default();
    while !stop.load(Ordering::SeqCst) {
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(200u16)) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
        loop {
            let stream = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was accepted:
                    // nothing to answer; take a breath and go on.
                    eprintln!("davinci-exporter: accept: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    break;
                }
            };
            accept_one(stream, limits, &handler, &table, &stats);
        }
    }
    let t0 = Instant::now();
    while !relock(table.lock()).conns.is_empty() && t0.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Makes room for one more connection: `true` if there was room or the oldest evictable
/// connection was closed for it, `false` if every connection is being answered.
fn make_room(t: &mut Table, max: usize, stats: &ConnStats) -> bool {
    if t.conns.len() < max {
        return true;
    }
    let oldest = t.conns.iter().find(|(_, c)| c.evictable).map(|(&id, _)| id);
    let Some(id) = oldest else {
        return false;
    };
    if let Some(c) = t.conns.remove(&id) {
        if let Some(s) = c.stream {
            // Wakes its thread (the read returns 0), which then ends without an answer.
            let _ = s.shutdown(Shutdown::Both);
        }
    }
    stats.evicted.fetch_add(1, Ordering::Relaxed);
    true
}

fn accept_one(
    mut stream: TcpStream,
    limits: Limits,
    handler: &Arc<dyn Fn(&Request) -> Response + Send + Sync>,
    table: &Shared,
    stats: &ConnStats,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(limits.write_timeout));
    let id = {
        let mut t = relock(table.lock());
        if make_room(&mut t, limits.max_connections, stats) {
            let id = t.next;
            t.next += 1;
            t.conns.insert(
                id,
                Conn {
                    stream: stream.try_clone().ok(),
                    evictable: true,
                },
            );
            Some(id)
        } else {
            None
        }
    };
    let Some(id) = id else {
        stats.rejected.fetch_add(1, Ordering::Relaxed);
        // A fresh socket's send buffer takes this without blocking.
        let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
        let mut r = Response::text(
            503,
            format!(
                "busy: {} connections are being answered; try again\n",
                limits.max_connections
            ),
        );
        r.headers.push(("Retry-After", "1".into()));
        let _ = write_response(&mut stream, &r, false);
        let _ = stream.shutdown(Shutdown::Both);
        return;
    };
    let slot = Slot {
        table: Arc::clone(table),
        id,
    };
    let handler = Arc::clone(handler);
    let spawned = std::thread::Builder::new()
        .name("http-conn".into())
        .spawn(move || {
            serve_connection(stream, limits, &*handler, &slot);
        });
    if let Err(e) = spawned {
        // The closure, with the stream and the slot, was dropped: the connection closes.
        eprintln!("davinci-exporter: cannot start a connection thread: {e}");
    }
}

fn serve_connection(
    mut stream: TcpStream,
    limits: Limits,
    handler: &(dyn Fn(&Request) -> Response + Send + Sync),
    slot: &Slot,
) {
    match read_request(&mut stream, limits.read_timeout) {
        Ok(req) => {
            slot.set_evictable(false);
            let r = if req.method == "GET" || req.method == "HEAD" {
                handler(&req)
            } else {
                let mut r = Response::text(
                    405,
                    format!("method {} not allowed: GET or HEAD\n", req.method),
                );
                r.headers.push(("Allow", "GET, HEAD".into()));
                r
            };
            let _ = write_response(&mut stream, &r, req.method == "HEAD");
        }
        Err(NoRequest::Silent) => return,
        Err(NoRequest::Refuse(status, msg)) => {
            let _ = write_response(&mut stream, &Response::text(status, msg + "\n"), false);
        }
    }
    slot.set_evictable(true);
    linger_close(&mut stream);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(path: &str) -> Head {
        Head::Complete(Request {
            method: "GET".into(),
            path: path.into(),
            accept: None,
        })
    }

    #[test]
    fn heads() {
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            req("/metrics")
        );
        assert_eq!(
            parse_head(b"GET /metrics?a=b HTTP/1.0\r\n\r\n"),
            req("/metrics")
        );
        assert_eq!(
            parse_head(b"GET http://h:9464/metrics HTTP/1.1\r\n\r\n"),
            req("/metrics")
        );
        assert_eq!(parse_head(b"GET http://h:9464 HTTP/1.1\r\n\r\n"), req("/"));
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"),
            Head::Partial
        );
        assert_eq!(parse_head(b"GE"), Head::Partial);
        let Head::Complete(r) = parse_head(
            b"GET / HTTP/1.1\r\naccept: text/plain\r\nAccept: application/openmetrics-text\r\n\r\n",
        ) else {
            panic!()
        };
        assert_eq!(r.accept.as_deref(), Some("application/openmetrics-text"));
        assert!(matches!(
            parse_head(b"\x16\x03\x01garbage\r\n\r\n"),
            Head::Refused(400, _)
        ));
        assert!(matches!(
            parse_head(b"GET / HTTP/2.0\r\n\r\n"),
            Head::Refused(505, _)
        ));
        let long_line = [b"GET /".as_slice(), &[b'a'; MAX_HEAD]].concat();
        assert!(matches!(
            parse_head(&long_line[..MAX_HEAD]),
            Head::Refused(414, _)
        ));
        let mut long_head = b"GET / HTTP/1.1\r\n".to_vec();
        while long_head.len() < MAX_HEAD {
            long_head.extend_from_slice(
                b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
            );
        }
        assert!(matches!(
            parse_head(&long_head[..MAX_HEAD]),
            Head::Refused(431, _)
        ));
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for _ in 0..=MAX_HEADERS {
            many.extend_from_slice(b"A: b\r\n");
        }
        many.extend_from_slice(b"\r\n");
        assert!(matches!(parse_head(&many), Head::Refused(431, _)));
    }

    /// A server on a free loopback port with `max` connections, answering 200 "ok" after
    /// `delay`; stopped (and its thread joined) on drop.
    struct Server {
        addr: std::net::SocketAddr,
        stop: Arc<AtomicBool>,
        stats: Arc<ConnStats>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Server {
        fn start(max: usize, delay: Duration) -> Server {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let stats = Arc::new(ConnStats::default());
            let limits = Limits {
                max_connections: max,
                read_timeout: Duration::from_secs(30),
                write_timeout: Duration::from_secs(5),
            };
            let handler: Arc<dyn Fn(&Request) -> Response + Send + Sync> =
                Arc::new(move |_: &Request| {
                    std::thread::sleep(delay);
                    Response::text(200, "ok\n")
                });
            let (st, ss) = (Arc::clone(&stop), Arc::clone(&stats));
            let thread = std::thread::spawn(move || {
                serve(&l, limits, handler, &st, ss, Duration::from_secs(1)).unwrap();
            });
            Server {
                addr,
                stop,
                stats,
                thread: Some(thread),
            }
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// GET / and the status of the answer (0 if the connection closed without one).
    fn status(addr: std::net::SocketAddr) -> u16 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        let text = String::from_utf8_lossy(&buf);
        text.split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn at_the_limit_the_oldest_idle_connection_makes_room() {
        let srv = Server::start(2, Duration::ZERO);
        let mut idle: Vec<TcpStream> = (0..2)
            .map(|_| TcpStream::connect(srv.addr).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(status(srv.addr), 200);
        // The oldest idle one was closed, without an answer; the other is still open.
        idle[0]
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = Vec::new();
        assert_eq!(idle[0].read_to_end(&mut buf).unwrap_or(0), 0);
        idle[1]
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut one = [0u8; 1];
        let e = idle[1].read(&mut one).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{e}"
        );
        assert!(srv.stats.evicted.load(Ordering::Relaxed) >= 1);
        assert_eq!(srv.stats.rejected.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn at_the_limit_with_every_connection_answered_a_new_one_gets_503() {
        let srv = Server::start(2, Duration::from_millis(1500));
        let addr = srv.addr;
        let busy: Vec<_> = (0..2)
            .map(|_| std::thread::spawn(move || status(addr)))
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        assert_eq!(status(addr), 503);
        assert!(t0.elapsed() < Duration::from_millis(1000), "503 at once");
        for b in busy {
            assert_eq!(b.join().unwrap(), 200, "the busy ones were not evicted");
        }
        assert_eq!(srv.stats.rejected.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn sixteen_tricklers_do_not_starve_scrapes() {
        let srv = Server::start(16, Duration::ZERO);
        let addr = srv.addr;
        let stop = Arc::new(AtomicBool::new(false));
        // 16 peers each send a request head one byte every 50 ms, a header that never
        // ends; an evicted one connects again.
        let tricklers: Vec<_> = (0..16)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let head = b"GET / HTTP/1.1\r\nX-Slow: ";
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(mut s) = TcpStream::connect(addr) else {
                            continue;
                        };
                        let mut i = 0usize;
                        while !stop.load(Ordering::Relaxed) {
                            let b = head.get(i).copied().unwrap_or(b'a');
                            if s.write_all(&[b]).is_err() {
                                break;
                            }
                            i += 1;
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let mut answers = Vec::new();
        for _ in 0..36 {
            answers.push(status(addr));
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        for t in tricklers {
            t.join().unwrap();
        }
        assert!(answers.iter().all(|&s| s == 200), "{answers:?}");
        assert!(srv.stats.evicted.load(Ordering::Relaxed) > 0);
        assert_eq!(srv.stats.rejected.load(Ordering::Relaxed), 0);
    }
}
