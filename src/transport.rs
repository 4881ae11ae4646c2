//! Each connection's transport under hyper: the write timeout, the lingering close after a
//! refusal, and JSON answers in place of hyper's own bare ones to requests it cannot parse.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::{EnfError, MgmtError};
use crate::ids::RequestId;

/// Told of each answer the transport writes itself: whether it took the management
/// interface's shape, its request id (its `X-Request-Id`) and its body's length.
pub type OwnAnswer = Box<dyn Fn(bool, &RequestId, usize) + Send>;

/// The connection's transport.
///
/// - A read hands hyper at most `READ_CHUNK` bytes. hyper's read buffer grows whenever a read
///   fills it, up to its maximum (room for a 1 MiB request head), and never shrinks: over TLS a
///   1 MiB upload grew it to about 1 MiB, kept for the connection's life (a hundred stalled
///   uploads held 85 MB). With reads of at most 8 KiB it stays at 16 KiB, and grows
///   only to hold a request head that is still arriving.
/// - A request head past `HEAD_FREE` bytes is charged to the memory budget (the whole 1 MiB its
///   buffer may take, held until the connection closes; the server closes such a connection after
///   its answer); when the budget cannot grant it, the connection is closed.
/// - A write that makes no progress for `write_timeout` fails the connection: a client that sends
///   requests and never reads the answers fills the socket's buffers, and would otherwise hold
///   its connection (and the answers queued for it) for ever.
/// - When a request was refused for its size, closing first reads and discards what the client
///   is still sending (up to a byte and time limit): closing a socket with unread data makes TCP
///   reset it, and the client would lose our answer.
/// - A request hyper cannot parse (a broken request line or header, a head beyond its buffer) is
///   answered by hyper itself with a bare 400, 414 or 431 and no body. The transport writes a JSON
///   error of the request's interface instead (decisions.md: every error has a JSON body; a
///   request over 1 MiB is a 400 `Request too large`), then closes after a lingering discard.
/// - hyper's 431 also stands for more header fields than it parses (100), which it finds before
///   the head has fully arrived. Which of the two it was is settled by reading on (and
///   discarding) until the request is past the 1 MiB rule or the client stops sending.
/// - Like every answer, those carry an `X-Request-Id` (and, in the management shape, the same
///   id as `txId`), and are reported to `own_answer` for the metrics and the access log.
pub struct Transport<T> {
    inner: T,
    /// Set by the request handler when it refuses a request for its size: closing first
    /// discards what is still arriving.
    linger: Arc<AtomicBool>,
    budget: usize,
    time: std::time::Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The 1 MiB rule (request line, headers and body).
    max_request: usize,
    /// Bytes read since the last answer began: how much of the current request has arrived.
    read_since: usize,
    /// hyper's 431, not answered yet: its `date` line, while the transport reads on to tell a
    /// request beyond the 1 MiB rule from one with too many header fields.
    undecided: Option<Vec<u8>>,
    quiet: Option<Pin<Box<tokio::time::Sleep>>>,
    drained: bool,
    /// Whether the request being read targets the management interface (`/v1/...`), so that an
    /// answer the transport writes itself takes that interface's error shape; read from the
    /// start of the first read after each answer (the next request line).
    management: bool,
    sniffed: bool,
    /// An answer of our own still to be written, and how much of it has been.
    out: Vec<u8>,
    out_pos: usize,
    own_answer: Option<OwnAnswer>,
    write_timeout: std::time::Duration,
    /// The write timeout's timer, kept between stalls (armed only while a write is pending).
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
    stalled: bool,
    /// The connection's slot (whether a request is in progress) and the memory budget, for
    /// charging large request heads.
    heads: Option<(Arc<crate::slots::Conn>, Arc<crate::budget::MemoryBudget>)>,
    head_charge: Option<crate::budget::Charge>,
}

/// Most bytes handed to hyper by one read.
pub const READ_CHUNK: usize = 8 * 1024;

/// Bytes of a request head that are not charged to the memory budget.
pub const HEAD_FREE: usize = 64 * 1024;

impl<T> Transport<T> {
    pub fn new(
        inner: T,
        linger: Arc<AtomicBool>,
        budget: usize,
        time: std::time::Duration,
        max_request: usize,
        write_timeout: std::time::Duration,
    ) -> Transport<T> {
        Transport {
            inner,
            linger,
            budget,
            time,
            deadline: None,
            max_request,
            read_since: 0,
            undecided: None,
            quiet: None,
            drained: false,
            management: false,
            sniffed: false,
            out: Vec::new(),
            out_pos: 0,
            own_answer: None,
            write_timeout,
            stall: None,
            stalled: false,
            heads: None,
            head_charge: None,
        }
    }

    /// Reports each answer the transport writes itself to `f`.
    pub fn on_own_answer(mut self, f: OwnAnswer) -> Transport<T> {
        self.own_answer = Some(f);
        self
    }

    /// Queues our answer in place of hyper's bare one: a 400 with the interface's JSON error,
    /// `message` or (`None`) the 1 MiB rule's.
    fn queue_answer(&mut self, message: Option<&str>, date: Option<&[u8]>) {
        let id = RequestId::next();
        let (out, body_len) = json_answer(message, self.management, date, &id);
        if let Some(f) = &self.own_answer {
            f(self.management, &id, body_len);
        }
        self.out = out;
        self.out_pos = 0;
    }

    /// Charges request heads past `HEAD_FREE` bytes to `budget`; `conn` tells whether a request
    /// (whose body is charged by the server) is in progress.
    pub fn charging_heads(
        mut self,
        conn: Arc<crate::slots::Conn>,
        budget: Arc<crate::budget::MemoryBudget>,
    ) -> Transport<T> {
        self.heads = Some((conn, budget));
        self
    }

    /// Passes a write's result on, timing the stall when it is pending: the timer starts at the
    /// first pending write and stops at the next that completes, and once it fires the write
    /// fails. (Kept in a box reused between stalls: a connection that never stalls never
    /// allocates it.)
    fn watch<R>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if r.is_ready() {
            self.stalled = false;
            return r;
        }
        let deadline = tokio::time::Instant::now() + self.write_timeout;
        match (&mut self.stall, self.stalled) {
            (Some(s), false) => s.as_mut().reset(deadline),
            (None, _) => self.stall = Some(Box::pin(tokio::time::sleep_until(deadline))),
            (Some(_), true) => {}
        }
        self.stalled = true;
        if let Some(s) = self.stall.as_mut() {
            if s.as_mut().poll(cx).is_ready() {
                self.stalled = false;
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client read nothing of the answer within the write timeout",
                )));
            }
        }
        Poll::Pending
    }

    /// An answer is being written: the next read starts the next request.
    fn answering(&mut self) {
        self.sniffed = false;
        self.read_since = 0;
    }
}

impl<T: AsyncWrite + Unpin> Transport<T> {
    /// Writes what is left of our own answer; ready once it is all written.
    fn poll_drain_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.out_pos < self.out.len() {
            let r = Pin::new(&mut self.inner).poll_write(cx, &self.out[self.out_pos..]);
            let n = ready!(self.watch(cx, r))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out_pos += n;
        }
        Poll::Ready(Ok(()))
    }

    /// If `head` is hyper's own answer to an unparsable request, takes it in place of writing it
    /// and queues ours; returns how many bytes were taken.
    fn replace_bare_answer(
        &mut self,
        cx: &mut Context<'_>,
        head: &[u8],
    ) -> Option<io::Result<usize>> {
        let status = bare_error_status(head)?;
        self.linger.store(true, Ordering::Relaxed);
        if status == 431 && self.read_since <= self.max_request {
            // Answered once `poll_settle` has found out which 431 this is.
            self.undecided = Some(date_line(head).unwrap_or_default().to_vec());
            return Some(Ok(head.len()));
        }
        let message = match status {
            // The head alone is beyond what the server reads: the 1 MiB rule.
            431 => None,
            414 => Some("Request URI too long"),
            _ => Some("Malformed HTTP request"),
        };
        let date = date_line(head).map(<[u8]>::to_vec);
        self.queue_answer(message, date.as_deref());
        // Start writing now; whatever does not fit yet goes out on the flush that follows.
        if let Poll::Ready(Err(e)) = self.poll_drain_out(cx) {
            return Some(Err(e));
        }
        Some(Ok(head.len()))
    }
}

/// How long a client that hyper refused with its 431 may pause before the transport takes the
/// request to have fully arrived.
const QUIET: std::time::Duration = std::time::Duration::from_millis(50);

impl<T: AsyncRead + Unpin> Transport<T> {
    /// For an undecided 431: reads and discards what the client still sends until the request
    /// is past the 1 MiB rule (`Request too large`), or the client pauses, stops or the linger
    /// time runs out (the head had more header fields than hyper parses); then queues the answer.
    fn poll_settle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(date) = self.undecided.as_ref() else {
            return Poll::Ready(Ok(()));
        };
        let time = self.time;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(time)));
        let mut scratch = [0u8; 16 * 1024];
        let too_large = loop {
            if self.read_since > self.max_request {
                break true;
            }
            let quiet = self
                .quiet
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(QUIET)));
            if deadline.as_mut().poll(cx).is_ready() || quiet.as_mut().poll(cx).is_ready() {
                break false;
            }
            let mut rb = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.inner).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) if rb.filled().is_empty() => break false,
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    self.read_since += n;
                    self.budget = self.budget.saturating_sub(n);
                    self.quiet = None;
                }
                Poll::Ready(Err(_)) => break false,
                Poll::Pending => return Poll::Pending,
            }
        };
        let message = if too_large {
            None
        } else {
            Some(TOO_MANY_FIELDS)
        };
        let date = date.clone();
        self.queue_answer(message, Some(&date));
        self.undecided = None;
        Poll::Ready(Ok(()))
    }
}

/// The answer to a request head with more header fields than hyper parses (its default, 100).
const TOO_MANY_FIELDS: &str = "Too many header fields (at most 100)";

impl<T: AsyncRead + Unpin> AsyncRead for Transport<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let n = {
            let mut part = buf.take(READ_CHUNK);
            ready!(Pin::new(&mut self.inner).poll_read(cx, &mut part))?;
            part.filled().len()
        };
        // SAFETY: the inner reader filled the first `n` bytes of `buf`'s unfilled part, through
        // `part`, which is a view of it.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        self.read_since += n;
        if !self.sniffed && n > 0 {
            self.sniffed = true;
            self.management = targets_management(&buf.filled()[before..]);
        }
        if self.read_since > HEAD_FREE && self.head_charge.is_none() {
            if let Some((conn, budget)) = &self.heads {
                if conn.phase() != crate::slots::Phase::Active {
                    match budget.try_charge(self.max_request) {
                        Some(c) => self.head_charge = Some(c),
                        None => {
                            return Poll::Ready(Err(io::Error::other(
                                "a large request head and the memory budget spent",
                            )))
                        }
                    }
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Transport<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_drain_out(cx))?;
        if let Some(taken) = this.replace_bare_answer(cx, buf) {
            return Poll::Ready(taken);
        }
        this.answering();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_drain_out(cx))?;
        if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
            if let Some(taken) = this.replace_bare_answer(cx, first) {
                return Poll::Ready(taken);
            }
        }
        this.answering();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain_out(cx))?;
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_settle(cx))?;
        ready!(self.poll_drain_out(cx))?;
        if self.linger.load(Ordering::Relaxed) && !self.drained {
            // Make sure our answer is on the wire before we start discarding.
            if let Poll::Ready(Err(e)) = Pin::new(&mut self.inner).poll_flush(cx) {
                return Poll::Ready(Err(e));
            }
            let time = self.time;
            let this = &mut *self;
            let deadline = this
                .deadline
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(time)));
            let mut scratch = [0u8; 16 * 1024];
            loop {
                if deadline.as_mut().poll(cx).is_ready() || this.budget == 0 {
                    break;
                }
                let mut rb = ReadBuf::new(&mut scratch);
                match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                    Poll::Ready(Ok(())) if rb.filled().is_empty() => break,
                    Poll::Ready(Ok(())) => {
                        this.budget = this.budget.saturating_sub(rb.filled().len())
                    }
                    Poll::Ready(Err(_)) => break,
                    Poll::Pending => return Poll::Pending,
                }
            }
            this.drained = true;
        }
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, r)
    }
}

/// Whether the request line at the start of `data` targets `/v1` (the management interface).
fn targets_management(data: &[u8]) -> bool {
    let Some(space) = data.iter().take(16).position(|&b| b == b' ') else {
        return false;
    };
    let target = &data[space + 1..];
    target.starts_with(b"/v1") && matches!(target.get(3), Some(b'/' | b' ' | b'?'))
}

/// The status of hyper's own answer to a request it could not parse: a whole `4xx` head with
/// `content-length: 0` and `connection: close`. Parasol's own 4xx answers always carry a JSON
/// body, so this matches nothing else.
fn bare_error_status(head: &[u8]) -> Option<u16> {
    let status = head.strip_prefix(b"HTTP/1.1 4")?;
    if !head.ends_with(b"\r\n\r\n")
        || find(head, b"\r\ncontent-length: 0\r\n").is_none()
        || find(head, b"\r\nconnection: close\r\n").is_none()
    {
        return None;
    }
    let rest = std::str::from_utf8(status.get(..2)?).ok()?;
    Some(400 + rest.parse::<u16>().ok()?)
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// hyper's `date: ...` header line (with its CRLF), kept in our answer.
fn date_line(head: &[u8]) -> Option<&[u8]> {
    let start = find(head, b"\r\ndate: ")? + 2;
    let len = find(&head[start..], b"\r\n")? + 2;
    Some(&head[start..start + len])
}

/// Our answer in place of hyper's bare one: a 400 with the interface's JSON error, `message` or
/// (`None`) the 1 MiB rule's, and the request id `id`; with its body's length.
fn json_answer(
    message: Option<&str>,
    management: bool,
    date: Option<&[u8]>,
    id: &RequestId,
) -> (Vec<u8>, usize) {
    let body = if management {
        let e = message.map_or(MgmtError::TooLarge, |m| MgmtError::BadRequest(m.into()));
        serde_json::to_vec(&e.body(id.as_str()))
    } else {
        let e = message.map_or(EnfError::TooLarge, |m| EnfError::BadRequest(m.into()));
        serde_json::to_vec(&e.body())
    }
    .unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n{}: {id}\r\n",
        body.len(),
        crate::ids::X_REQUEST_ID,
    )
    .into_bytes();
    out.extend_from_slice(date.unwrap_or_default());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
    (out, body.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyper_bare_answers_are_recognised_and_nothing_else() {
        let bare = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: Tue, 24 Nov 2026 17:48:15 GMT\r\n\r\n";
        assert_eq!(bare_error_status(bare), Some(431));
        let bare = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(bare_error_status(bare), Some(400));
        // Our own answers: a body, or not an error.
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 86\r\n\r\n";
        assert_eq!(bare_error_status(ours), None);
        let ours = b"HTTP/1.1 204 No Content\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(bare_error_status(ours), None);
        assert_eq!(bare_error_status(b"HTTP/1.1 4"), None);
        assert_eq!(bare_error_status(b""), None);
    }

    #[test]
    fn the_interface_is_read_from_the_request_line() {
        assert!(targets_management(
            b"GET /v1/organizations/1/sites HTTP/1.1\r\n"
        ));
        assert!(targets_management(b"POST /v1?x HTTP/1.1\r\n"));
        assert!(!targets_management(b"GET /v10/x HTTP/1.1\r\n"));
        assert!(!targets_management(b"GET /1.0/domains HTTP/1.1\r\n"));
        assert!(!targets_management(b"GARBAGE"));
        assert!(!targets_management(b""));
    }

    #[test]
    fn our_answer_is_the_interfaces_json_error() {
        let date = date_line(b"HTTP/1.1 400 Bad Request\r\ndate: D\r\n\r\n");
        assert_eq!(date, Some(&b"date: D\r\n"[..]));
        let id = RequestId::next();
        let (text, len) = json_answer(None, false, date, &id);
        let text = String::from_utf8(text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(len, body.len());
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        assert!(
            head.contains(&format!("\r\nx-request-id: {id}\r\n")),
            "{head}"
        );
        assert!(head.contains("\r\nconnection: close") && head.ends_with("\r\ndate: D"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert_eq!(
            body,
            r#"{"code":"BadRequestError","message":"Request too large","statusCode":400}"#
        );
        let (text, _) = json_answer(Some("Malformed HTTP request"), true, None, &id);
        let text = String::from_utf8(text).unwrap();
        let body: serde_json::Value =
            serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap();
        assert_eq!(body["message"], "Malformed HTTP request");
        assert_eq!(body["statusCode"], 400);
        assert_eq!(body["txId"], id.as_str(), "the txId is the X-Request-Id");
    }
}
