//! A deliberately small HTTP/1.x server: one request per connection (`Connection: close`),
//! GET and HEAD only, the request head read with a size limit and a deadline and parsed by
//! `httparse`, a bounded number of connections at once, where a new connection takes the
//! place of the oldest one still sending its head rather than being refused. Heads are read
//! by the accepting thread as their bytes arrive (poll(2), no thread per slow peer); a whole
//! head is answered on a thread of its own. That is all a Prometheus scrape needs, and every
//! resource a peer can make it spend is bounded.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod head;
use head::timed_out;
pub use head::{parse_head, Head, NoRequest};

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

/// One connection handed to a thread (being answered, refused, or lingering after its
/// answer), as the table of connections knows it.
#[derive(Debug)]
struct Conn {
    /// A handle on the socket, to shut it down when the connection is evicted.
    stream: Option<TcpStream>,
    /// Whether it may be evicted: it has been answered and is lingering. A connection whose
    /// request is being answered is not.
    evictable: bool,
}

/// The connections handed to threads, by the order they were accepted (ids only grow, so
/// the smallest id is the oldest; the connections still sending their heads share the ids).
#[derive(Debug, Default)]
struct Table {
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

/// A connection still sending its request head, read by the accepting thread without
/// blocking (no thread of its own, so a peer that trickles costs a buffer, not a thread).
#[derive(Debug)]
struct Incoming {
    stream: TcpStream,
    buf: Vec<u8>,
    deadline: Instant,
}

/// What reading a connection's available bytes found.
enum Progress {
    /// The head is not whole yet; more may come.
    Waiting,
    /// A whole head.
    Request(Request),
    /// Answer with this status and message.
    Refuse(u16, String),
    /// The peer closed, or the socket failed: drop it without an answer.
    Gone,
}

impl Incoming {
    /// Reads what the peer has sent so far, without blocking.
    fn read_available(&mut self) -> Progress {
        let mut chunk = [0u8; 2048];
        loop {
            let want = (MAX_HEAD - self.buf.len()).min(chunk.len());
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) if self.buf.is_empty() => return Progress::Gone,
                Ok(0) => return Progress::Refuse(400, "request head cut short".into()),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    match parse_head(&self.buf) {
                        Head::Complete(r) => return Progress::Request(r),
                        Head::Refused(status, msg) => return Progress::Refuse(status, msg),
                        Head::Partial => {}
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Progress::Waiting,
                Err(_) => return Progress::Gone,
            }
        }
    }
}

/// What one thread of the server does with a connection.
enum Task {
    /// Answer this request.
    Answer(Request),
    /// Answer with this status and message.
    Refuse(u16, String),
}

type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// The server's state, owned by the accepting thread.
struct Acceptor<'a> {
    limits: Limits,
    handler: &'a Handler,
    stats: &'a ConnStats,
    table: Shared,
    /// Connections still sending their heads, by id.
    incoming: BTreeMap<u64, Incoming>,
    next: u64,
}

impl Acceptor<'_> {
    /// Connections open now.
    fn open(&self) -> usize {
        self.incoming.len() + relock(self.table.lock()).conns.len()
    }

    /// Reads what connection `id` has sent; a whole head (or a refusal) goes to a thread.
    fn progress(&mut self, id: u64) {
        let Some(c) = self.incoming.get_mut(&id) else {
            return;
        };
        let task = match c.read_available() {
            Progress::Waiting => return,
            Progress::Gone => {
                self.incoming.remove(&id);
                return;
            }
            Progress::Request(r) => Task::Answer(r),
            Progress::Refuse(status, msg) => Task::Refuse(status, msg),
        };
        if let Some(c) = self.incoming.remove(&id) {
            self.hand_over(id, c.stream, task);
        }
    }

    /// Gives every connection still sending its head a chance to finish it.
    fn progress_all(&mut self) {
        let ids: Vec<u64> = self.incoming.keys().copied().collect();
        for id in ids {
            self.progress(id);
        }
    }

    /// Closes the connections past their read timeout: `408` for half a head, nothing for
    /// none.
    fn expire(&mut self, now: Instant) {
        let late: Vec<u64> = self
            .incoming
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in late {
            let Some(c) = self.incoming.remove(&id) else {
                continue;
            };
            if let NoRequest::Refuse(status, msg) = timed_out(&c.buf, self.limits.read_timeout) {
                self.hand_over(id, c.stream, Task::Refuse(status, msg));
            }
        }
    }

    /// Room for one more connection: `true` if there is room, or was made by closing the
    /// oldest connection that is still sending its head or lingering after its answer;
    /// `false` if every connection is being answered. Before closing one, every connection
    /// still sending its head reads what it has been sent, so a scraper whose head has
    /// arrived is answered, never taken for a slow peer.
    fn make_room(&mut self) -> bool {
        let mut caught_up = false;
        while self.open() >= self.limits.max_connections {
            if !caught_up {
                self.progress_all();
                caught_up = true;
                continue;
            }
            let lingering = {
                let t = relock(self.table.lock());
                t.conns.iter().find(|(_, c)| c.evictable).map(|(&id, _)| id)
            };
            let waiting = self.incoming.keys().next().copied();
            let oldest = match (waiting, lingering) {
                (Some(w), Some(l)) => w.min(l),
                (Some(id), None) | (None, Some(id)) => id,
                (None, None) => return false,
            };
            if let Some(c) = self.incoming.remove(&oldest) {
                let _ = c.stream.shutdown(Shutdown::Both);
            } else if let Some(c) = relock(self.table.lock()).conns.remove(&oldest) {
                if let Some(s) = c.stream {
                    // Wakes its thread (the read returns 0), which then ends.
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
            self.stats.evicted.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// A new connection: read at once if its head is there, else kept until it is.
    fn accept(&mut self, stream: TcpStream) {
        if !self.make_room() {
            refuse_busy(stream, self.limits.max_connections, self.stats);
            return;
        }
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let _ = stream.set_nodelay(true);
        let id = self.next;
        self.next += 1;
        self.incoming.insert(
            id,
            Incoming {
                stream,
                buf: Vec::new(),
                deadline: Instant::now() + self.limits.read_timeout,
            },
        );
        self.progress(id);
    }

    /// Hands connection `id` to a thread of its own for `task`.
    fn hand_over(&mut self, id: u64, mut stream: TcpStream, task: Task) {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_write_timeout(Some(self.limits.write_timeout));
        relock(self.table.lock()).conns.insert(
            id,
            Conn {
                stream: stream.try_clone().ok(),
                evictable: false,
            },
        );
        let slot = Slot {
            table: Arc::clone(&self.table),
            id,
        };
        let handler = Arc::clone(self.handler);
        let spawned = std::thread::Builder::new()
            .name("http-conn".into())
            .spawn(move || {
                answer(&mut stream, task, &*handler);
                slot.set_evictable(true);
                linger_close(&mut stream);
                drop(slot);
            });
        if let Err(e) = spawned {
            // The closure, with the stream and the slot, was dropped: the connection closes.
            eprintln!("davinci-exporter: cannot start a connection thread: {e}");
        }
    }
}

/// Answers `task` on `stream`.
fn answer(
    stream: &mut TcpStream,
    task: Task,
    handler: &(dyn Fn(&Request) -> Response + Send + Sync),
) {
    match task {
        Task::Answer(req) => {
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
            let _ = write_response(stream, &r, req.method == "HEAD");
        }
        Task::Refuse(status, msg) => {
            let _ = write_response(stream, &Response::text(status, msg + "\n"), false);
        }
    }
}

/// `503` at once: every connection is being answered.
fn refuse_busy(mut stream: TcpStream, max: usize, stats: &ConnStats) {
    stats.rejected.fetch_add(1, Ordering::Relaxed);
    // A fresh socket's send buffer takes this without blocking.
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let mut r = Response::text(
        503,
        format!("busy: {max} connections are being answered; try again\n"),
    );
    r.headers.push(("Retry-After", "1".into()));
    let _ = write_response(&mut stream, &r, false);
    let _ = stream.shutdown(Shutdown::Both);
}

/// Answers connections on `listener` with `handler` until `stop` is set, at most
/// `limits.max_connections` at once; then waits up to `grace` for the connections being
/// served.
///
/// Request heads are read by this thread, without blocking, as their bytes arrive: a peer
/// that trickles its head byte by byte holds a buffer, not a thread, and delays no one.
/// A whole head is answered on a thread of its own. At the limit, a new connection does
/// not wait and is not refused while some connection has not sent its whole head yet (or
/// is lingering after its answer): first every such connection reads what it has been
/// sent (a scraper's head arrives at once, so it is answered rather than evicted), then
/// the oldest still waiting is closed to make room (counted in `stats.evicted`). Only
/// when every connection is being answered is the new one answered 503 at once (counted
/// in `stats.rejected`).
///
/// # Errors
/// The listener cannot be polled.
pub fn serve(
    listener: &TcpListener,
    limits: Limits,
    handler: Handler,
    stop: &AtomicBool,
    stats: Arc<ConnStats>,
    grace: Duration,
) -> io::Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    listener.set_nonblocking(true)?;
    let mut srv = Acceptor {
        limits,
        handler: &handler,
        stats: &stats,
        table: Arc::default(),
        incoming: BTreeMap::new(),
        next: 0,
    };
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        let wake = srv
            .incoming
            .values()
            .map(|c| c.deadline.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_millis(200))
            .min(Duration::from_millis(200));
        let ids: Vec<u64> = srv.incoming.keys().copied().collect();
        let ready: Vec<bool> = {
            let mut fds = vec![PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
            fds.extend(
                srv.incoming
                    .values()
                    .map(|c| PollFd::new(c.stream.as_fd(), PollFlags::POLLIN)),
            );
            // Rounded up to a whole millisecond, so a deadline is not polled for in a loop.
            let ms = u16::try_from(wake.as_millis() + 1).unwrap_or(200);
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(io::Error::from(e)),
            }
            fds.iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect()
        };
        for (id, _) in ids.iter().zip(ready.iter().skip(1)).filter(|(_, &r)| r) {
            srv.progress(*id);
        }
        srv.expire(Instant::now());
        if ready.first().copied().unwrap_or(false) {
            loop {
                match listener.accept() {
                    Ok((s, _)) => srv.accept(s),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // Out of descriptors, or a connection reset before it was
                        // accepted: nothing to answer; take a breath and go on.
                        eprintln!("davinci-exporter: accept: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                        break;
                    }
                }
            }
        }
    }
    srv.incoming.clear();
    let t0 = Instant::now();
    while !relock(srv.table.lock()).conns.is_empty() && t0.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
