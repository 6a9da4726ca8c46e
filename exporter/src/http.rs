//! A deliberately small HTTP/1.x server: one request per connection (`Connection: close`),
//! GET and HEAD only, the request head read with a size limit and a deadline and parsed by
//! `httparse`, a bounded number of connections at once. That is all a Prometheus scrape
//! needs, and every resource a peer can make it spend is bounded.
#![forbid(unsafe_code)]

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
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
    /// Connections served at once; more are answered 503 and closed.
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

/// Answers connections on `listener` with `handler` until `stop` is set, each on its own
/// thread, at most `limits.max_connections` at once (more are answered 503 at once); then
/// waits up to `grace` for the connections being served. `rejected` counts the 503s.
///
/// # Errors
/// The listener cannot be polled.
pub fn serve(
    listener: &TcpListener,
    limits: Limits,
    handler: Arc<dyn Fn(&Request) -> Response + Send + Sync>,
    stop: &AtomicBool,
    rejected: Arc<AtomicUsize>,
    grace: Duration,
) -> io::Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    listener.set_nonblocking(true)?;
    let active = Arc::new(AtomicUsize::new(0));
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
            accept_one(stream, limits, &handler, &active, &rejected);
        }
    }
    let t0 = Instant::now();
    while active.load(Ordering::SeqCst) > 0 && t0.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Decrements the count of connections being served when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_one(
    mut stream: TcpStream,
    limits: Limits,
    handler: &Arc<dyn Fn(&Request) -> Response + Send + Sync>,
    active: &Arc<AtomicUsize>,
    rejected: &AtomicUsize,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(limits.write_timeout));
    if active.fetch_add(1, Ordering::SeqCst) >= limits.max_connections {
        active.fetch_sub(1, Ordering::SeqCst);
        rejected.fetch_add(1, Ordering::Relaxed);
        // A fresh socket's send buffer takes this without blocking.
        let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
        let mut r = Response::text(
            503,
            format!(
                "busy: {} connections are being served; try again\n",
                limits.max_connections
            ),
        );
        r.headers.push(("Retry-After", "1".into()));
        let _ = write_response(&mut stream, &r, false);
        let _ = stream.shutdown(Shutdown::Both);
        return;
    }
    let slot = Slot(Arc::clone(active));
    let handler = Arc::clone(handler);
    let spawned = std::thread::Builder::new()
        .name("http-conn".into())
        .spawn(move || {
            let _slot = slot;
            serve_connection(stream, limits, &*handler);
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
) {
    match read_request(&mut stream, limits.read_timeout) {
        Ok(req) => {
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
}
