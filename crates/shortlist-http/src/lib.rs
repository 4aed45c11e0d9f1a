//! The HTTP serving under Shortlist's three servers — `engine serve`, `mock serve` and the
//! workbench's `shortlist serve` — so that each is as hard to hold hostage as the others.
//!
//! Principal items and how they relate:
//! - [`Limits`]: how long a client may take over its request headers, and how large a body it
//!   may send and how long it may take over it. Built once from the command line by
//!   [`Limits::new`], which refuses a zero; [`Limits::default`] is what the servers use unless
//!   told otherwise.
//! - [`serve`]: the accept loop. `axum::serve` waits for ever on a connection that opens and
//!   never finishes its request headers; here each connection is HTTP/1 under hyper with a
//!   header-read timeout, and a graceful shutdown that stops accepting, lets each connection
//!   finish the request in hand and returns once all have closed.
//! - [`read_body`]: a request body read whole within the limits, or a [`BodyError`] that names
//!   its HTTP status (413, 408 or 400); each server answers it in its own error shape.
//! - [`text_fields`]: a multipart form's fields as text (the workbench's uploads), or a
//!   [`FieldsError`]: past the body limit (413, the caller names the limit), or an error
//!   that names the field; the `web_upload` fuzz target drives it as the workbench does.
//!
//! ```
//! use axum::{Router, routing::get};
//! use shortlist_http::{Limits, serve};
//!
//! let runtime = tokio::runtime::Runtime::new().unwrap();
//! runtime.block_on(async {
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//!     let app = Router::new().route("/health", get(|| async { "ok" }));
//!     // Serves until the shutdown future resolves: here at once.
//!     serve(listener, app, &Limits::default(), async {}).await;
//! });
//! ```

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The longest request body read by default, in bytes: ten thousand chat messages, or a prompt
/// of several hundred thousand tokens, fit; a longer body is answered 413 before it is read whole.
pub const DEFAULT_MAX_BODY_BYTES: usize = 2 << 20;

/// The time a client has by default, once its headers are in, to send its whole body. A client
/// that sends headers and then nothing is answered 408 and let go, instead of holding its
/// connection and its task for ever.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The time a client has by default to send a request's headers, from the moment the server
/// waits for them (a new connection, or a kept-alive one after its last answer). A connection
/// that sends half a request line and stops is closed when it runs out; so is a kept-alive
/// connection left idle that long.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How much a client may send and how long it may take: see [`DEFAULT_MAX_BODY_BYTES`],
/// [`DEFAULT_BODY_TIMEOUT`] and [`DEFAULT_HEADER_TIMEOUT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    max_body_bytes: usize,
    body_timeout: Duration,
    header_timeout: Duration,
}

/// A limit that would refuse every request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// A body limit of 0 bytes would refuse every request with a body.
    #[error("the body limit is 0 bytes: every request with a body would be refused")]
    ZeroBodyBytes,
    /// A timeout of zero would let go of every client before it could send anything.
    #[error("the {what} timeout is 0: every client would be let go before it sent anything")]
    ZeroTimeout {
        /// `body` or `header`.
        what: &'static str,
    },
}

impl Limits {
    /// Limits of `max_body_bytes` bytes and `body_timeout` for a request's body, and
    /// `header_timeout` for its headers; none may be zero.
    pub fn new(
        max_body_bytes: usize,
        body_timeout: Duration,
        header_timeout: Duration,
    ) -> Result<Self, LimitError> {
        if max_body_bytes == 0 {
            return Err(LimitError::ZeroBodyBytes);
        }
        if body_timeout.is_zero() {
            return Err(LimitError::ZeroTimeout { what: "body" });
        }
        if header_timeout.is_zero() {
            return Err(LimitError::ZeroTimeout { what: "header" });
        }
        Ok(Self {
            max_body_bytes,
            body_timeout,
            header_timeout,
        })
    }

    /// The longest body read, in bytes.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// The time a client has to send its body once its headers are in.
    pub fn body_timeout(&self) -> Duration {
        self.body_timeout
    }

    /// The time a client has to send a request's headers.
    pub fn header_timeout(&self) -> Duration {
        self.header_timeout
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
        }
    }
}

/// Why a request body was not read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The body is longer than the limit (413); the rest of it is not read.
    #[error("request body: longer than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The body did not arrive within the body timeout (408).
    #[error(
        "request body: not received within {} s of the headers",
        .after.as_secs_f64()
    )]
    TimedOut {
        /// The timeout.
        after: Duration,
    },
    /// The connection broke, or its framing was wrong (400).
    #[error("request body could not be read: {0}")]
    Unreadable(String),
}

impl BodyError {
    /// The HTTP status that answers it.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TimedOut { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::Unreadable(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// Why a multipart form could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldsError {
    /// The body ran past the route's body limit (413): the caller names the limit, which it
    /// knows and this reader does not.
    #[error("the upload is larger than this server takes")]
    TooLarge,
    /// Anything else, naming the field where it can (400).
    #[error("{0}")]
    Unreadable(String),
}

impl FieldsError {
    /// The HTTP status that answers it.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unreadable(_) => StatusCode::BAD_REQUEST,
        }
    }

    fn of(e: &axum::extract::multipart::MultipartError, what: impl FnOnce() -> String) -> Self {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Self::TooLarge
        } else {
            Self::Unreadable(format!("{} could not be read: {e}", what()))
        }
    }
}

/// Every field of a multipart form as `(name, text)`, in order: files are read as UTF-8 text
/// (eval sets, studies); anything else is an error that names the field, or
/// [`FieldsError::TooLarge`] past the body limit.
pub async fn text_fields(
    mut body: axum::extract::Multipart,
) -> Result<Vec<(String, String)>, FieldsError> {
    let mut fields = Vec::new();
    while let Some(field) = body
        .next_field()
        .await
        .map_err(|e| FieldsError::of(&e, || "the upload".to_owned()))?
    {
        let name = field.name().unwrap_or_default().to_owned();
        let bytes = field
            .bytes()
            .await
            .map_err(|e| FieldsError::of(&e, || format!("field `{name}`")))?;
        // The field's bytes become the text without a copy (a trace runs to hundreds of MiB).
        let text = String::from_utf8(Vec::from(bytes))
            .map_err(|_| FieldsError::Unreadable(format!("field `{name}` is not UTF-8 text")))?;
        fields.push((name, text));
    }
    Ok(fields)
}

/// Read `body` whole within `limits`: at most [`Limits::max_body_bytes`] bytes, all within
/// [`Limits::body_timeout`].
pub async fn read_body(body: Body, limits: &Limits) -> Result<Bytes, BodyError> {
    let read = axum::body::to_bytes(body, limits.max_body_bytes);
    match tokio::time::timeout(limits.body_timeout, read).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let e = e.into_inner();
            if e.is::<http_body_util::LengthLimitError>() {
                Err(BodyError::TooLarge {
                    limit: limits.max_body_bytes,
                })
            } else {
                Err(BodyError::Unreadable(e.to_string()))
            }
        }
        Err(_) => Err(BodyError::TimedOut {
            after: limits.body_timeout,
        }),
    }
}

/// Serve `router` on `listener` until `shutdown` resolves: then stop accepting, let each open
/// connection finish the request in hand (a stream runs to its end), and return once every
/// connection has closed. Each connection is HTTP/1 and must send each request's headers within
/// [`Limits::header_timeout`], or it is closed. An accept error that is not the client's (out of
/// file descriptors) is logged and retried after a second, as `axum::serve` does.
pub async fn serve(
    mut listener: TcpListener,
    router: Router,
    limits: &Limits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let header_timeout = limits.header_timeout;
    // Closed when shutdown begins: each connection then finishes its request and closes.
    let (stop, stopping) = watch::channel(());
    // Each connection holds a receiver; the sender sees it closed once the last has ended.
    let (all_closed, open) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let mut stopping = stopping.clone();
        let open = open.clone();
        tokio::spawn(async move {
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let mut connection = pin!(builder.serve_connection(TokioIo::new(stream), service));
            let result = tokio::select! {
                result = connection.as_mut() => result,
                _ = stopping.changed() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = result {
                // A client that went away or timed out is its own business, not the server's.
                tracing::debug!(%peer, error = %e, "connection ended");
            }
            drop(open);
        });
    }
    drop(listener);
    drop(stop);
    drop(open);
    all_closed.closed().await;
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use axum::routing::{get, post};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpStream;

    use super::*;

    fn limits(header_ms: u64) -> Limits {
        Limits::new(
            16,
            Duration::from_millis(300),
            Duration::from_millis(header_ms),
        )
        .expect("valid limits")
    }

    fn app(limits: Limits) -> Router {
        Router::new()
            .route("/health", get(|| async { "ok" }))
            .route(
                "/echo",
                post(move |body: Body| async move {
                    match read_body(body, &limits).await {
                        Ok(bytes) => (StatusCode::OK, bytes.to_vec()),
                        Err(e) => (e.status(), e.to_string().into_bytes()),
                    }
                }),
            )
    }

    /// `app` served under `limits` on a free loopback port, until [`Running::stop`].
    struct Running {
        addr: std::net::SocketAddr,
        stop: tokio::sync::oneshot::Sender<()>,
        server: tokio::task::JoinHandle<()>,
    }

    impl Running {
        async fn start(app: Router, limits: Limits) -> Running {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("addr");
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let server = tokio::spawn(async move {
                serve(listener, app, &limits, async {
                    let _ = stopped.await;
                })
                .await;
            });
            Running { addr, stop, server }
        }

        /// Ask the server to stop; it must return within 5 s, without a panic.
        async fn stop(self) {
            self.stop.send(()).expect("the server runs");
            tokio::time::timeout(Duration::from_secs(5), self.server)
                .await
                .expect("the server stops")
                .expect("no panic");
        }
    }

    async fn answer(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(request).await.expect("send");
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw).await;
        String::from_utf8_lossy(&raw).into_owned()
    }

    #[test]
    fn zero_limits_are_refused() {
        let second = Duration::from_secs(1);
        assert_eq!(
            Limits::new(0, second, second),
            Err(LimitError::ZeroBodyBytes)
        );
        assert_eq!(
            Limits::new(1, Duration::ZERO, second),
            Err(LimitError::ZeroTimeout { what: "body" })
        );
        assert_eq!(
            Limits::new(1, second, Duration::ZERO),
            Err(LimitError::ZeroTimeout { what: "header" })
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_that_never_finishes_its_headers_is_closed_while_others_are_served() {
        let limits = limits(300);
        let running = Running::start(app(limits), limits).await;
        let addr = running.addr;
        let started = Instant::now();
        let mut slow = TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"GET /hea")
            .await
            .expect("half a request line");
        let reply = answer(
            addr,
            b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(reply.ends_with("\r\n\r\nok"), "{reply}");
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut rest))
            .await
            .expect("the server closes the connection")
            .unwrap_or(0);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
            "closed after {waited:?} with {n} bytes"
        );
        running.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bodies_over_the_limit_or_too_slow_are_refused_with_their_status() {
        let limits = limits(5_000);
        let running = Running::start(app(limits), limits).await;
        let addr = running.addr;
        let ok = answer(
            addr,
            b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
        )
        .await;
        assert!(
            ok.starts_with("HTTP/1.1 200") && ok.ends_with("hello"),
            "{ok}"
        );
        let big = answer(
            addr,
            b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 17\r\n\r\n12345678901234567",
        )
        .await;
        assert!(big.starts_with("HTTP/1.1 413"), "{big}");
        assert!(big.contains("longer than 16 bytes"), "{big}");
        let started = Instant::now();
        let slow = answer(
            addr,
            b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 10\r\n\r\nabc",
        )
        .await;
        assert!(slow.starts_with("HTTP/1.1 408"), "{slow}");
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
        running.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_finishes_the_response_in_hand_then_returns() {
        let limits = Limits::default();
        let slow_answer = Router::new().route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(400)).await;
                "done"
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            serve(listener, slow_answer, &limits, async {
                let _ = stopped.await;
            })
            .await;
        });
        let client = tokio::spawn(answer(addr, b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.send(()).expect("the server runs");
        let reply = client.await.expect("no panic");
        assert!(
            reply.starts_with("HTTP/1.1 200") && reply.ends_with("done"),
            "{reply}"
        );
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the server stops once the response is sent")
            .expect("no panic");
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
    }
}
