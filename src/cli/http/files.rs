//! One file of an item, as HTTP wants it: the strong `ETag` is the sha256 its
//! manifest lists, `Repr-Digest` the same digest (RFC 9530), `Last-Modified` the
//! date of the item's current version (the same on every mirror). Conditional
//! requests (`If-None-Match`, `If-Modified-Since`, `If-Range`) and one byte range
//! per request (206, 416; several ranges get the whole file, as RFC 9110 allows)
//! are answered before any byte is read. A small file's bytes are checked against
//! the manifest before its response starts (a mismatch re-reads the item once,
//! then answers 500) and kept by digest (`SmallFiles`); a large one is streamed as
//! it is, its `Repr-Digest` letting the client check it, unless `--verify-streams`
//! asks for it to be hashed on the way (the last chunk is held back, and a
//! mismatch cuts the connection), which halves the throughput.

use std::io::Read;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use http_range_header::{EndPosition, StartPosition};
use ibi::digest::Hasher;
use ibi::ops::resolution::{FileView, ItemView, Resolution};

use super::common::{blocking, refuse, short, Raw};
use super::App;

/// Files up to this size are read whole, and checked, before the response starts.
const SMALL: u64 = 256 * 1024;
/// The size of each chunk streamed.
const CHUNK: usize = 128 * 1024;

/// What the validators of one file are.
pub(super) struct Validators {
    pub etag: String,
    pub last_modified: Option<String>,
}

pub async fn response(
    app: Arc<App>,
    store: usize,
    view: Arc<ItemView>,
    file: FileView,
    headers: &HeaderMap,
) -> Response {
    let validators =
        Validators { etag: format!("\"{}\"", file.sha256), last_modified: view.modified().and_then(http_date) };
    if not_modified(headers, &validators) {
        let mut response = StatusCode::NOT_MODIFIED.into_response();
        describe(response.headers_mut(), &file, &validators);
        return response;
    }
    let range = match (file.size, range_asked(headers, &validators)) {
        (Some(size), Some(value)) => match satisfiable_range(value, size) {
            RangeAnswer::One(start, end) => Some((start, end, size)),
            RangeAnswer::Whole => None,
            RangeAnswer::Unsatisfiable => {
                let mut response = refuse(StatusCode::RANGE_NOT_SATISFIABLE, "range", "it starts past the file's end");
                let value = HeaderValue::from_str(&format!("bytes */{size}")).expect("digits are a valid header");
                response.headers_mut().insert(header::CONTENT_RANGE, value);
                return response;
            }
        },
        _ => None,
    };
    let mut response = match range {
        Some((start, end, size)) => ranged(&app, store, &view, &file, start, end, size).await,
        None if file.size.is_some_and(|s| s <= SMALL) => whole_small(&app, store, view.clone(), file.clone()).await,
        None => {
            streamed(&app, store, &view, &file, 0, file.size, app.verify_streams.then(|| file.sha256.clone())).await
        }
    };
    if response.status().is_success() {
        describe(response.headers_mut(), &file, &validators);
    }
    response.extensions_mut().insert(Raw);
    response
}

/// The headers every answer about a file carries.
fn describe(headers: &mut HeaderMap, file: &FileView, validators: &Validators) {
    let put = |headers: &mut HeaderMap, name: header::HeaderName, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    put(headers, header::ETAG, &validators.etag);
    if let Some(date) = &validators.last_modified {
        put(headers, header::LAST_MODIFIED, date);
    }
    if let Some(raw) = hex_bytes(&file.sha256) {
        let digest = base64::engine::general_purpose::STANDARD.encode(raw);
        put(headers, header::HeaderName::from_static("repr-digest"), &format!("sha-256=:{digest}:"));
    }
    put(headers, header::ACCEPT_RANGES, "bytes");
    put(headers, header::CONTENT_TYPE, &content_type(&file.path));
    // A bag may hold HTML or SVG: never let it run as this site.
    put(headers, header::CONTENT_SECURITY_POLICY, "sandbox");
}

fn content_type(path: &str) -> String {
    let guess = mime_guess::from_path(path).first_or_octet_stream();
    if guess.type_() == mime_guess::mime::TEXT {
        format!("{guess}; charset=utf-8")
    } else {
        guess.to_string()
    }
}

fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    hex::decode(hex).ok()
}

/// An RFC 3339 date as an HTTP date (`httpdate`, hyper's own: chrono's `format`
/// took a twentieth of a small file's request).
pub fn http_date(rfc3339: &str) -> Option<String> {
    let date = chrono::DateTime::parse_from_rfc3339(rfc3339).ok()?;
    Some(httpdate::fmt_http_date(date.into()))
}

fn header_text(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// RFC 9110 §13.1.2 and §13.1.3: `If-None-Match` (weak comparison), else `If-Modified-Since`.
pub(super) fn not_modified(headers: &HeaderMap, validators: &Validators) -> bool {
    if let Some(tags) = header_text(headers, header::IF_NONE_MATCH) {
        let ours = validators.etag.as_str();
        return tags.split(',').map(str::trim).any(|t| t == "*" || t.trim_start_matches("W/") == ours);
    }
    let since = header_text(headers, header::IF_MODIFIED_SINCE).and_then(parse_http_date);
    let ours = validators.last_modified.as_deref().and_then(parse_http_date);
    matches!((since, ours), (Some(since), Some(ours)) if ours <= since)
}

fn parse_http_date(text: &str) -> Option<std::time::SystemTime> {
    httpdate::parse_http_date(text.trim()).ok()
}

/// The Range header, unless `If-Range` names another version (RFC 9110 §13.1.5).
pub(super) fn range_asked<'a>(headers: &'a HeaderMap, validators: &Validators) -> Option<&'a str> {
    let range = header_text(headers, header::RANGE)?;
    match header_text(headers, header::IF_RANGE) {
        None => Some(range),
        Some(tag) if tag.trim() == validators.etag => Some(range),
        Some(date) if validators.last_modified.as_deref() == Some(date.trim()) => Some(range),
        Some(_) => None,
    }
}

pub(super) enum RangeAnswer {
    One(u64, u64),
    Whole,
    Unsatisfiable,
}

/// RFC 9110 §14: an invalid Range is ignored; one whose ranges all start past the
/// end is unsatisfiable; a suffix longer than the file is the whole file.
pub(super) fn satisfiable_range(value: &str, size: u64) -> RangeAnswer {
    let parsed = match http_range_header::parse_range_header(value) {
        Ok(parsed) => parsed,
        // `bytes=-0` asks for no bytes at all: well formed, and unsatisfiable.
        Err(http_range_header::RangeUnsatisfiableError::ZeroSuffix) => return RangeAnswer::Unsatisfiable,
        Err(_) => return RangeAnswer::Whole,
    };
    let mut satisfiable = parsed.ranges.iter().filter_map(|range| {
        let (start, end) = match (range.start, range.end) {
            (StartPosition::FromLast(n), _) => (size.saturating_sub(n), size.checked_sub(1)?),
            (StartPosition::Index(i), EndPosition::Index(j)) => (i, j.min(size.checked_sub(1)?)),
            (StartPosition::Index(i), EndPosition::LastByte) => (i, size.checked_sub(1)?),
        };
        (start < size && start <= end).then_some((start, end))
    });
    match (satisfiable.next(), satisfiable.next()) {
        (None, _) => RangeAnswer::Unsatisfiable,
        (Some((start, end)), None) => RangeAnswer::One(start, end),
        (Some(_), Some(_)) => RangeAnswer::Whole,
    }
}

async fn ranged(
    app: &Arc<App>,
    store: usize,
    view: &ItemView,
    file: &FileView,
    start: u64,
    end: u64,
    size: u64,
) -> Response {
    let mut response = streamed(app, store, view, file, start, Some(end - start + 1), None).await;
    if response.status() != StatusCode::OK {
        return response;
    }
    *response.status_mut() = StatusCode::PARTIAL_CONTENT;
    let value = HeaderValue::from_str(&format!("bytes {start}-{end}/{size}")).expect("digits are a valid header");
    response.headers_mut().insert(header::CONTENT_RANGE, value);
    response
}

/// A small file, read whole and checked before a byte goes out.
async fn whole_small(app: &Arc<App>, store: usize, view: Arc<ItemView>, file: FileView) -> Response {
    if let Some(bytes) = app.small_files.get(&file.sha256) {
        return ok_bytes(bytes);
    }
    let reader = app.clone();
    let (name, listed) = (view.name.clone(), file.clone());
    let bytes = match short(app, move || read_whole(&reader, store, (&name, &listed))).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => return unreadable(&view, &file, &e.to_string()),
        Err(timed_out) => return timed_out,
    };
    if ibi::fsx::hash_bytes(&bytes) == file.sha256 {
        let bytes = Bytes::from(bytes);
        app.small_files.put(&file.sha256, &bytes);
        return ok_bytes(bytes);
    }
    // The item may have been replaced since its view was read: read it again, once.
    let again = app.clone();
    let name = view.name.clone();
    let fresh = blocking(move || {
        again.resolver.forget(store, &name);
        again.resolver.resolve(&name.to_string())
    })
    .await;
    if let Ok(Resolution::Item { view: fresh, .. }) = fresh {
        if fresh.file(&file.path).is_some_and(|f| f.sha256 == ibi::fsx::hash_bytes(&bytes)) {
            return ok_bytes(Bytes::from(bytes));
        }
    }
    let why = "its bytes do not match the item's manifest; the collection's operator should run `ibi verify`";
    refuse(StatusCode::INTERNAL_SERVER_ERROR, &format!("{}/{}", view.name, file.path), why)
}

fn ok_bytes(bytes: Bytes) -> Response {
    let length = bytes.len();
    let mut response = (StatusCode::OK, Body::from(bytes)).into_response();
    response.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    response
}

/// Reads a small file, but never more than one byte past its listed size: a file
/// grown behind the server's back is then known not to match, without reading it all.
fn read_whole(app: &App, store: usize, file: (&ibi::id::RepositoryName, &FileView)) -> std::io::Result<Vec<u8>> {
    let (name, file) = file;
    let (reader, _) = app.resolver.stores()[store].open(name, &file.path)?;
    let listed = file.size.unwrap_or(SMALL);
    let mut bytes = Vec::with_capacity(listed as usize);
    reader.take(listed + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn unreadable(view: &ItemView, file: &FileView, why: &str) -> Response {
    let what = format!("{}/{}", view.name, file.path);
    refuse(StatusCode::INTERNAL_SERVER_ERROR, &what, &format!("it cannot be read: {why}"))
}

/// `length` bytes from `start` (all that are left when `None`), sent as they are
/// read; `expect` is the sha256 of a whole file. The file is opened before the
/// status is chosen: one that cannot be opened (a symlink, a FIFO, gone) gets 500,
/// not a 200 cut short. Each chunk is read when the connection asks for it (on the
/// blocking pool only when a store may wait on the network), so a client that
/// stops reading holds no thread, and two chunks at most.
async fn streamed(
    app: &Arc<App>,
    store: usize,
    view: &ItemView,
    file: &FileView,
    start: u64,
    length: Option<u64>,
    expect: Option<String>,
) -> Response {
    let (owner, name, path) = (app.clone(), view.name.clone(), file.path.clone());
    let open = move || {
        OpenFile::try_new(owner, |app| app.resolver.stores()[store].open_from(&name, &path, start).map(|(r, _)| r))
    };
    let file_open = match short(app, open).await {
        Ok(Ok(file_open)) => file_open,
        Ok(Err(e)) => return unreadable(view, file, &e.to_string()),
        Err(timed_out) => return timed_out,
    };
    let hasher = expect.as_ref().map(|_| Hasher::new(&[]));
    let download = Download { file: file_open, hasher, expect, left: length, held: None, finished: false };
    let local = app.all_local;
    let chunks = futures_util::stream::unfold(download, move |mut download| async move {
        let (download, chunk) = if local {
            let chunk = download.next_chunk();
            (download, chunk)
        } else {
            blocking(move || {
                let chunk = download.next_chunk();
                (download, chunk)
            })
            .await
        };
        chunk.map(|chunk| (chunk, download))
    });
    let mut response = (StatusCode::OK, Body::from_stream(chunks)).into_response();
    if let Some(length) = length {
        response.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    response
}

/// A reader of a file of an item.
type FileReader<'a> = Box<dyn Read + Send + 'a>;

self_cell::self_cell!(
    /// A file of an item opened for reading, with the server state its reader
    /// borrows, so that it can wait between chunks outside any thread.
    struct OpenFile {
        owner: Arc<App>,
        #[covariant]
        dependent: FileReader,
    }
);

/// A download under way: the file, the bytes left to send, and the check of the
/// whole file against its manifest.
struct Download {
    file: OpenFile,
    hasher: Option<Hasher>,
    expect: Option<String>,
    left: Option<u64>,
    /// The chunk read last, sent once the next is read: the last chunk goes out
    /// only when the whole file is known to match its manifest.
    held: Option<Bytes>,
    finished: bool,
}

impl Download {
    /// The next chunk to send, or the error that cuts the connection; `None` at the end.
    fn next_chunk(&mut self) -> Option<std::io::Result<Bytes>> {
        while !self.finished {
            let want = self.left.map_or(CHUNK, |left| left.min(CHUNK as u64) as usize);
            let mut chunk = vec![0; want];
            let read =
                if want == 0 { Ok(0) } else { self.file.with_dependent_mut(|_, reader| reader.read(&mut chunk)) };
            let n = match read {
                Ok(0) => return self.finish(),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e));
                }
            };
            chunk.truncate(n);
            if let Some(hasher) = self.hasher.as_mut() {
                hasher.update(&chunk);
            }
            self.left = self.left.map(|left| left.saturating_sub(n as u64));
            if let Some(ready) = self.held.replace(Bytes::from(chunk)) {
                return Some(Ok(ready));
            }
        }
        None
    }

    /// At the end of the file: the last chunk, once the file is whole and matches.
    fn finish(&mut self) -> Option<std::io::Result<Bytes>> {
        self.finished = true;
        if self.left.is_some_and(|left| left > 0) {
            let short = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file is shorter than its listing");
            return Some(Err(short));
        }
        if let (Some(expect), Some(hasher)) = (self.expect.take(), self.hasher.take()) {
            if expect != hasher.finish().sha256() {
                return Some(Err(std::io::Error::other("the file does not match its manifest")));
            }
        }
        self.held.take().map(Ok)
    }
}

/// The bytes of small files already checked against their manifests, by sha256:
/// content-addressed, so an entry can never be stale (a changed file has another
/// digest in its item's new view). Bounded: emptied when it would pass its budget.
pub struct SmallFiles {
    entries: std::sync::Mutex<(std::collections::HashMap<String, Bytes>, usize)>,
}

/// Files up to this size are kept.
const CACHED_FILE: usize = 64 * 1024;
/// All kept files together stay under this.
const CACHE_BUDGET: usize = 64 * 1024 * 1024;

impl SmallFiles {
    pub fn new() -> SmallFiles {
        SmallFiles { entries: std::sync::Mutex::new((std::collections::HashMap::new(), 0)) }
    }

    fn get(&self, sha256: &str) -> Option<Bytes> {
        self.entries.lock().ok()?.0.get(sha256).cloned()
    }

    fn put(&self, sha256: &str, bytes: &Bytes) {
        if bytes.len() > CACHED_FILE {
            return;
        }
        let Ok(mut entries) = self.entries.lock() else { return };
        if entries.1 + bytes.len() > CACHE_BUDGET {
            *entries = (std::collections::HashMap::new(), 0);
        }
        if entries.0.insert(sha256.to_string(), bytes.clone()).is_none() {
            entries.1 += bytes.len();
        }
    }
}
