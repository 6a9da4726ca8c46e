//! A request head: parsed by `httparse` from the bytes read so far, within the server's
//! bounds ([`MAX_HEAD`] bytes, [`MAX_HEADERS`] headers), or refused with the status to answer.
#![forbid(unsafe_code)]

use std::time::Duration;

use super::{Request, MAX_HEAD, MAX_HEADERS};

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

pub(super) fn timed_out(buf: &[u8], timeout: Duration) -> NoRequest {
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
