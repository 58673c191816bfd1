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
