//! What every response path of the server shares: the marker of responses that
//! go out unchanged (`Raw`), the two ways of running store work (`blocking`,
//! `short`), a compressed page, and a plain refusal.

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{pages, App};

/// Marks a response that must go out as it is (files, zips): never compressed.
#[derive(Clone, Copy)]
pub struct Raw;

/// Runs blocking store work on the blocking pool.
pub async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).await.expect("a blocking task of the server panicked")
}

/// Runs short store work (a cached lookup, a stat, a small read): right here when
/// every collection is on this machine's filesystem, where it takes microseconds
/// from the page cache (as nginx reads files on its event loop); on the blocking
/// pool when a store may wait on the network.
pub async fn short<T: Send + 'static>(app: &App, work: impl FnOnce() -> T + Send + 'static) -> Result<T, Response> {
    if app.all_local {
        return Ok(work());
    }
    tokio::time::timeout(super::RESPONSE_TIMEOUT, blocking(work)).await.map_err(|_| {
        let why = format!("a collection did not answer within {} s", super::RESPONSE_TIMEOUT.as_secs());
        refuse(StatusCode::SERVICE_UNAVAILABLE, "collection", &why)
    })
}

/// How long a streaming response waits for its client to take the next chunk
/// before it gives up and cuts the connection: a client that stops reading holds
/// its thread and its few chunks this long at most.
pub const CLIENT_IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// At most this many responses stream at once; beyond, 503 with `Retry-After`.
const MAX_STREAMS: usize = 2048;

/// How many responses stream now.
static STREAMS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The body of a streaming response: chunks read (blocking) on a thread of its
/// own and handed to the connection. Not the blocking pool's: clients that stop
/// reading would pin its threads, and the short store work every page needs would
/// wait behind them (`short`, 503 after a minute).
pub type Chunks = tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>;

/// Where a streaming thread puts its chunks.
pub struct Feeder {
    sender: tokio::sync::mpsc::Sender<std::io::Result<bytes::Bytes>>,
    runtime: tokio::runtime::Handle,
}

impl Feeder {
    /// Hands one chunk (or the error that ends the body) to the connection, waiting
    /// at most `CLIENT_IDLE` for room; fails when the client went away or stalled.
    pub fn send(&self, chunk: std::io::Result<bytes::Bytes>) -> std::io::Result<()> {
        use tokio::sync::mpsc::error::TrySendError;
        let chunk = match self.sender.try_send(chunk) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Closed(_)) => return Err(gone()),
            Err(TrySendError::Full(chunk)) => chunk,
        };
        // The timer is made inside the runtime's context, which `block_on` enters.
        let sent = self.runtime.block_on(async { tokio::time::timeout(CLIENT_IDLE, self.sender.send(chunk)).await });
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(gone()),
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client stopped reading")),
        }
    }
}

fn gone() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
}

/// Runs `work` on a thread of its own, feeding the returned body (one chunk
/// buffered: memory per connection is two chunks), or 503 when `MAX_STREAMS`
/// already stream.
pub fn stream_from_thread(work: impl FnOnce(Feeder) + Send + 'static) -> Result<Chunks, Box<Response>> {
    use std::sync::atomic::Ordering;
    /// One of the `MAX_STREAMS`, given back however its thread ends.
    struct Streaming;
    impl Drop for Streaming {
        fn drop(&mut self) {
            STREAMS.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let streaming = Streaming;
    if STREAMS.fetch_add(1, Ordering::SeqCst) >= MAX_STREAMS {
        drop(streaming);
        let mut busy = refuse(StatusCode::SERVICE_UNAVAILABLE, "server", "too many downloads at once; try again soon");
        busy.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from_static("5"));
        return Err(Box::new(busy));
    }
    let (sender, receiver) = tokio::sync::mpsc::channel(1);
    let feeder = Feeder { sender, runtime: tokio::runtime::Handle::current() };
    let spawned = std::thread::Builder::new().name("ibi-stream".into()).spawn(move || {
        let _streaming = streaming;
        work(feeder);
    });
    spawned.map(|_| receiver).map_err(|e| {
        Box::new(refuse(StatusCode::SERVICE_UNAVAILABLE, "server", &format!("no thread for the zip: {e}")))
    })
}

/// A body of the chunks a streaming thread sends.
pub fn body_of(chunks: Chunks) -> axum::body::Body {
    let stream =
        futures_util::stream::unfold(
            chunks,
            |mut chunks| async move { chunks.recv().await.map(|chunk| (chunk, chunks)) },
        );
    axum::body::Body::from_stream(stream)
}

/// A page compressed as the request's Accept-Encoding allows (tower-http's layer,
/// applied to this one response).
pub async fn compressed(headers: &HeaderMap, page: Response) -> Response {
    use tower::{Layer, ServiceExt};
    let mut request = axum::http::Request::new(axum::body::Body::empty());
    if let Some(accept) = headers.get(header::ACCEPT_ENCODING) {
        request.headers_mut().insert(header::ACCEPT_ENCODING, accept.clone());
    }
    let page = std::sync::Mutex::new(Some(page));
    let service = tower::service_fn(move |_| {
        let page = page.lock().ok().and_then(|mut p| p.take()).unwrap_or_default();
        async move { Ok::<_, std::convert::Infallible>(page) }
    });
    match tower_http::compression::CompressionLayer::new().layer(service).oneshot(request).await {
        Ok(response) => response.map(axum::body::Body::new),
        Err(never) => match never {},
    }
}

/// A problem with the request itself, said plainly.
pub fn refuse(status: StatusCode, what: &str, why: &str) -> Response {
    let body = pages::problem(status, what, why);
    (status, [(header::CONTENT_TYPE, pages::HTML)], body).into_response()
}
