//! The blocking face of an object store: this module owns the tokio runtime the
//! `object_store` client needs, so that the rest of `ibi` stays synchronous. It
//! offers the few calls the S3 backend makes (get, conditional put, list one
//! level, list a subtree, delete, server-side copy), maps their errors onto
//! `ibi`'s typed errors, and turns a streamed object into a `Read`. When the
//! server stops answering (a transport error, after the client's own retries),
//! every request fails at once for a while instead of retrying each in turn, so
//! a run whose server died ends promptly (exit 3) and can simply be run again.

use std::future::Future;
use std::io::{self, Read};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt, TryStreamExt};
use object_store::path::Path as Key;
use object_store::{ListResult, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutPayload, UpdateVersion};

use crate::error::Error;

/// How many requests one call keeps in flight.
pub const IN_FLIGHT: usize = 32;

/// The most ibi reads whole of one object (a record, marker, lease, config,
/// log event or tag file): another writer in the bucket cannot make a reader
/// hold more than `IN_FLIGHT` times this. A record of 4 MiB holds thousands
/// of versions.
pub const MAX_STATE_BYTES: u64 = 4 * 1024 * 1024;
/// How long requests fail at once after the server stopped answering.
const DOWN_FOR: Duration = Duration::from_secs(10);

/// An object store and the runtime its futures run on.
#[derive(Clone)]
pub struct Objects {
    pub store: Arc<dyn ObjectStore>,
    runtime: Arc<tokio::runtime::Runtime>,
    /// `s3://BUCKET/PREFIX`, for messages.
    pub place: String,
    /// When and why the server last stopped answering.
    down: Arc<Mutex<Option<(Instant, String)>>>,
    /// The lease this handle's writes depend on, while it holds one.
    fence: Arc<Mutex<Option<Arc<Fence>>>>,
    /// What signs a request `object_store` cannot make itself (a HEAD that asks
    /// for the stored checksum); none for a store that is not S3.
    signer: Option<Arc<object_store::aws::AmazonS3>>,
}

/// What a lease holder's writes depend on: the lease's holder thread moves
/// `valid_until` on at each renewal, and says when the lease was taken over.
/// Past `valid_until`, or once lost, every write through the fenced handle is
/// refused, so a holder cut off from the server for longer than the lease
/// lasts (or whose lease another party overwrote) stops writing before, or
/// as soon as it learns, another writer may take over. A write already in
/// flight when that happens is not called back: the server has no fencing
/// tokens.
#[derive(Debug)]
pub struct Fence {
    valid_until: Mutex<Instant>,
    lost: Mutex<Option<String>>,
}

impl Fence {
    pub fn new(valid_until: Instant) -> Fence {
        Fence { valid_until: Mutex::new(valid_until), lost: Mutex::new(None) }
    }

    pub fn extend(&self, valid_until: Instant) {
        *crate::sync::lock(&self.valid_until) = valid_until;
    }

    pub fn lose(&self, why: String) {
        crate::sync::lock(&self.lost).get_or_insert(why);
    }

    fn check(&self) -> Result<(), String> {
        if let Some(why) = crate::sync::lock(&self.lost).as_ref() {
            return Err(why.clone());
        }
        let until = *crate::sync::lock(&self.valid_until);
        match Instant::now().checked_duration_since(until) {
            Some(late) => Err(format!("it was not renewed in time (its renewal is {} overdue)", how_long(late))),
            None => Ok(()),
        }
    }
}

fn how_long(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// An object's bytes and the version to update it by.
pub struct Fetched {
    pub bytes: Bytes,
    pub version: UpdateVersion,
    /// When the server last wrote it (its clock).
    pub modified: chrono::DateTime<chrono::Utc>,
}

/// A conditional write that lost: the object exists, or changed since it was read.
#[derive(Debug)]
pub struct Lost;

impl Objects {
    pub fn new(store: Arc<dyn ObjectStore>, place: String) -> Result<Objects, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ibi-s3")
            .enable_all()
            .build()
            .map_err(|e| Error::io("start the S3 client for", &place, e))?;
        Ok(Objects {
            store,
            runtime: Arc::new(runtime),
            place,
            down: Arc::default(),
            fence: Arc::default(),
            signer: None,
        })
    }

    /// This handle, able to ask the store for what it keeps of an object
    /// (`stored_sha256`).
    pub fn with_signer(mut self, signer: Arc<object_store::aws::AmazonS3>) -> Objects {
        self.signer = Some(signer);
        self
    }

    /// The SHA-256 (hex) the store keeps of the object at `key`, from the
    /// checksum sent with its upload (`HEAD` with `x-amz-checksum-mode:
    /// ENABLED`); `None` when it keeps none of the whole object (none was
    /// sent, the store ignores them, or a multipart upload's composite one).
    pub async fn stored_sha256(&self, key: &Key) -> Result<Option<String>, Error> {
        use base64::Engine;
        use object_store::signer::{SignedUrlOptions, Signer};
        self.answering(key)?;
        let Some(signer) = &self.signer else { return Ok(None) };
        let options = SignedUrlOptions::default().with_signed_header(
            http::HeaderName::from_static("x-amz-checksum-mode"),
            http::HeaderValue::from_static("ENABLED"),
        );
        let url = signer
            .signed_url_opts(http::Method::HEAD, key, Duration::from_secs(300), &options)
            .await
            .map_err(|e| self.error(key, e))?;
        let client = reqwest::Client::new();
        let answer = client
            .head(url)
            .header("x-amz-checksum-mode", "ENABLED")
            .send()
            .await
            .map_err(|e| Error::Connection { place: self.url(key), problem: with_causes(&e) })?;
        if answer.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(Error::NotFound { what: "object", name: key.to_string(), place: self.place.clone().into() });
        }
        if !answer.status().is_success() {
            let problem = format!("HEAD for its checksum answered {}", answer.status());
            return Err(Error::Connection { place: self.url(key), problem });
        }
        let stored = answer.headers().get("x-amz-checksum-sha256").and_then(|v| v.to_str().ok());
        let digest = stored.and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok());
        Ok(digest.filter(|d| d.len() == 32).map(hex::encode))
    }

    /// Makes every write through this handle and its clones depend on `fence`.
    pub fn fence_with(&self, fence: Arc<Fence>) {
        *crate::sync::lock(&self.fence) = Some(fence);
    }

    /// Ends `fence`'s hold on this handle's writes (a later lease's stays).
    pub fn unfence(&self, fence: &Arc<Fence>) {
        let mut held = crate::sync::lock(&self.fence);
        if held.as_ref().is_some_and(|f| Arc::ptr_eq(f, fence)) {
            *held = None;
        }
    }

    /// A handle on the same server whose writes no lease fences: the lease's
    /// own keeper renews and releases through it.
    pub fn unfenced(&self) -> Objects {
        Objects { fence: Arc::default(), ..self.clone() }
    }

    /// `answering`, and for a write, that the lease it depends on still holds.
    fn writable(&self, key: &Key) -> Result<(), Error> {
        self.answering(key)?;
        let fence = crate::sync::lock(&self.fence).clone();
        match fence.map(|f| f.check()) {
            Some(Err(why)) => Err(Error::LeaseLost { place: self.place.clone(), problem: why }),
            _ => Ok(()),
        }
    }

    /// The URL of `key` (which holds the collection's prefix), for messages.
    pub fn url(&self, key: &Key) -> String {
        let bucket: Vec<&str> = self.place.splitn(4, '/').take(3).collect();
        format!("{}/{key}", bucket.join("/"))
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        let rest = self.place.strip_prefix("s3://").unwrap_or(&self.place);
        rest.split('/').next().unwrap_or(rest)
    }

    /// Runs a future to completion on this store's runtime (never call it from inside one).
    pub fn run<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// The error for a failed request on `key`: the place and the store's own words.
    /// A transport failure marks the server down for `DOWN_FOR`.
    pub fn error(&self, key: &Key, e: object_store::Error) -> Error {
        let problem = without_xml(&with_causes(&e));
        if is_transport(&e) {
            *crate::sync::lock(&self.down) = Some((Instant::now(), problem.clone()));
        }
        Error::Connection { place: self.url(key), problem }
    }

    /// The error for a failed listing: S3 answers a listing of any prefix of a
    /// bucket it holds and may read, so a refusal is about the bucket itself.
    fn list_error(&self, prefix: &Key, e: object_store::Error) -> Error {
        match (is_transport(&e), self.error(prefix, e)) {
            (false, Error::Connection { place, problem }) => {
                let bucket = self.place.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
                let problem = format!(
                    "{problem}; the bucket could not be listed: check that {bucket} exists (`aws s3 mb {bucket}` \
                     creates it), that these credentials may list it, and AWS_REGION and AWS_ENDPOINT_URL"
                );
                Error::Connection { place, problem }
            }
            (_, error) => error,
        }
    }

    /// Fails at once while the server is marked down.
    fn answering(&self, key: &Key) -> Result<(), Error> {
        let down = crate::sync::lock(&self.down);
        match down.as_ref() {
            Some((since, why)) if since.elapsed() < DOWN_FOR => Err(Error::Connection {
                place: self.url(key),
                problem: format!("the server stopped answering {}: {why}", how_long_ago(since.elapsed())),
            }),
            _ => Ok(()),
        }
    }

    /// A whole object of ibi's own state or a bag's tag file (never payload,
    /// which is streamed): one longer than `MAX_STATE_BYTES` is refused.
    pub async fn get(&self, key: &Key) -> Result<Option<Fetched>, Error> {
        self.get_capped(key, MAX_STATE_BYTES).await
    }

    /// `get`, refusing an object longer than `cap` bytes before its body is
    /// read (the size comes with the response's headers): another writer in the
    /// bucket cannot make a reader hold an object of any size.
    pub async fn get_capped(&self, key: &Key, cap: u64) -> Result<Option<Fetched>, Error> {
        self.answering(key)?;
        match self.store.get(key).await {
            Ok(got) if got.meta.size > cap => Err(Error::CorruptState {
                path: self.url(key).into(),
                problem: format!("it is {} bytes long, more than the {cap} bytes ibi reads of it", got.meta.size),
            }),
            Ok(got) => {
                let version = UpdateVersion { e_tag: got.meta.e_tag.clone(), version: got.meta.version.clone() };
                let modified = got.meta.last_modified;
                let bytes = got.bytes().await.map_err(|e| self.error(key, e))?;
                Ok(Some(Fetched { bytes, version, modified }))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(key, e)),
        }
    }

    pub async fn exists(&self, key: &Key) -> Result<bool, Error> {
        self.answering(key)?;
        match self.store.head(key).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.error(key, e)),
        }
    }

    /// An object's size.
    pub async fn size(&self, key: &Key) -> Result<u64, Error> {
        self.answering(key)?;
        self.store.head(key).await.map(|meta| meta.size).map_err(|e| self.error(key, e))
    }

    /// Writes `bytes` at `key` as `mode` says; `Ok(Err(Lost))` when the condition failed.
    pub async fn put(
        &self,
        key: &Key,
        bytes: impl Into<PutPayload>,
        mode: PutMode,
    ) -> Result<Result<UpdateVersion, Lost>, Error> {
        self.writable(key)?;
        match self.store.put_opts(key, bytes.into(), mode.into()).await {
            Ok(done) => Ok(Ok(UpdateVersion { e_tag: done.e_tag, version: done.version })),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => Ok(Err(Lost)),
            Err(e) => Err(self.error(key, e)),
        }
    }

    /// Writes unconditionally.
    pub async fn overwrite(&self, key: &Key, bytes: impl Into<PutPayload>) -> Result<(), Error> {
        self.put(key, bytes, PutMode::Overwrite).await?.map_err(|Lost| self.error(key, lost()))?;
        Ok(())
    }

    /// One level under `prefix`: its sub-prefixes and objects. Some servers
    /// (SeaweedFS) list a folder as an object of its own key (`prefix/`, which
    /// `object_store` reads as `prefix`) and keep emptied folders as sub-prefixes:
    /// the first is dropped here; callers count objects, not sub-prefixes.
    pub async fn list_level(&self, prefix: &Key) -> Result<ListResult, Error> {
        self.answering(prefix)?;
        let mut listed = self.store.list_with_delimiter(Some(prefix)).await.map_err(|e| self.list_error(prefix, e))?;
        listed.objects.retain(|meta| meta.location != *prefix);
        Ok(listed)
    }

    /// Every object under `prefix` (an item's or a stage's files: a small subtree),
    /// without folder objects (`a/`, read as `a`, empty, beside keys under `a/`),
    /// which some servers and tools write and which are no files.
    pub async fn list_all(&self, prefix: &Key) -> Result<Vec<ObjectMeta>, Error> {
        self.answering(prefix)?;
        let listed: Vec<ObjectMeta> =
            self.store.list(Some(prefix)).try_collect().await.map_err(|e| self.list_error(prefix, e))?;
        Ok(without_folder_objects(prefix, listed))
    }

    /// The objects under `prefix` whose keys sort after `offset`, in key order, as
    /// the server lists them (a page at a time).
    pub fn list_after<'a>(&'a self, prefix: &'a Key, offset: &'a Key) -> BoxStream<'a, Result<ObjectMeta, Error>> {
        if let Err(e) = self.answering(prefix) {
            return futures_util::stream::once(async { Err(e) }).boxed();
        }
        self.store.list_with_offset(Some(prefix), offset).map_err(|e| self.list_error(prefix, e)).boxed()
    }

    /// Whether any object (not a folder object) is under `prefix`; reads one page at most.
    pub async fn holds_objects(&self, prefix: &Key) -> Result<bool, Error> {
        self.answering(prefix)?;
        let page: Vec<ObjectMeta> =
            self.store.list(Some(prefix)).take(1000).try_collect().await.map_err(|e| self.list_error(prefix, e))?;
        Ok(!without_folder_objects(prefix, page).is_empty())
    }

    pub async fn delete(&self, key: &Key) -> Result<(), Error> {
        self.writable(key)?;
        match self.store.delete(key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(key, e)),
        }
    }

    /// Deletes many objects in as few requests as the store allows (S3: 1,000 a request).
    pub async fn delete_many(&self, keys: Vec<Key>) -> Result<(), Error> {
        let Some(first) = keys.first().cloned() else { return Ok(()) };
        self.writable(&first)?;
        let stream = futures_util::stream::iter(keys.into_iter().map(Ok)).boxed();
        let results: Vec<object_store::Result<Key>> = self.store.delete_stream(stream).collect().await;
        for result in results {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.error(&first, e)),
            }
        }
        Ok(())
    }

    /// Deletes every object under `prefix`.
    pub async fn delete_all(&self, prefix: &Key) -> Result<(), Error> {
        let keys = self.list_all(prefix).await?.into_iter().map(|m| m.location).collect();
        self.delete_many(keys).await
    }

    pub async fn copy(&self, from: &Key, to: &Key) -> Result<(), Error> {
        self.writable(to)?;
        self.store.copy(from, to).await.map_err(|e| self.error(from, e))
    }

    /// A streamed object as a blocking reader.
    pub fn reader(&self, key: &Key) -> io::Result<ObjectReader> {
        self.answering(key).map_err(|e| io::Error::other(e.to_string()))?;
        let got = self.run(self.store.get(key)).map_err(to_io)?;
        Ok(ObjectReader { runtime: self.runtime.clone(), stream: got.into_stream(), chunk: Bytes::new() })
    }
}

/// `listed` without the objects that stand for a folder: `prefix` itself, and empty
/// objects whose key is a folder of another listed key.
fn without_folder_objects(prefix: &Key, listed: Vec<ObjectMeta>) -> Vec<ObjectMeta> {
    let folders: std::collections::HashSet<&str> = listed
        .iter()
        .flat_map(|meta| meta.location.as_ref().match_indices('/').map(|(i, _)| &meta.location.as_ref()[..i]))
        .collect();
    let is_folder =
        |meta: &ObjectMeta| meta.location == *prefix || (meta.size == 0 && folders.contains(meta.location.as_ref()));
    let keep: Vec<bool> = listed.iter().map(|meta| !is_folder(meta)).collect();
    listed.into_iter().zip(keep).filter_map(|(meta, keep)| keep.then_some(meta)).collect()
}

/// "moments ago" under a second ("0.0 s ago" read as if it never answered), else "N s ago".
fn how_long_ago(elapsed: Duration) -> String {
    match elapsed.as_secs() {
        0 => "moments ago".into(),
        n => format!("{n} s ago"),
    }
}

/// An error's words followed by its causes' that it does not already say: the
/// client's own words for a transport failure stop at "error sending request",
/// and the reason (a refused connection, an untrusted certificate) is a cause.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text = format!("{text}: {said}");
        }
        cause = c.source();
    }
    text
}

/// A message with an S3 error document (`<?xml …><Error><Code>NoSuchBucket</Code>
/// <Message>…</Message>…`) shown as its code and message, for people; nothing is
/// decided by it.
fn without_xml(text: &str) -> String {
    let Some(start) = text.find("<?xml").or_else(|| text.find("<Error>")) else { return text.to_string() };
    let field = |tag: &str| {
        let open = format!("<{tag}>");
        let from = text[start..].find(&open)? + start + open.len();
        let to = text[from..].find("</")? + from;
        Some(text[from..to].trim().to_string())
    };
    let said = [field("Code"), field("Message")].into_iter().flatten().collect::<Vec<_>>().join(": ");
    format!("{}{said}", text[..start].trim_end().trim_end_matches(':').to_string() + ": ")
}

fn lost() -> object_store::Error {
    object_store::Error::Generic { store: "S3", source: "a plain write was refused".into() }
}

/// Whether the request failed in transport (connect, send, timeout, interrupted):
/// found by the typed `HttpError` in the error's sources, never by its text.
fn is_transport(e: &object_store::Error) -> bool {
    use object_store::client::{HttpError, HttpErrorKind};
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(http) = cause.downcast_ref::<HttpError>() {
            return matches!(
                http.kind(),
                HttpErrorKind::Connect | HttpErrorKind::Request | HttpErrorKind::Timeout | HttpErrorKind::Interrupted
            );
        }
        source = cause.source();
    }
    false
}

/// An object store error as an I/O error (for `BagFiles` and `Read`), keeping "not found".
pub fn to_io(e: object_store::Error) -> io::Error {
    match e {
        object_store::Error::NotFound { .. } => io::Error::new(io::ErrorKind::NotFound, e.to_string()),
        e => io::Error::other(e.to_string()),
    }
}

/// Reads a streamed object chunk by chunk.
pub struct ObjectReader {
    runtime: Arc<tokio::runtime::Runtime>,
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
}

impl Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.chunk.is_empty() {
            match self.runtime.block_on(self.stream.next()) {
                Some(chunk) => self.chunk = chunk.map_err(to_io)?,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_holds_until_its_lease_is_overdue_or_lost() {
        let fence = Fence::new(Instant::now() + Duration::from_secs(60));
        assert!(fence.check().is_ok());
        fence.extend(Instant::now());
        std::thread::sleep(Duration::from_millis(2));
        assert!(fence.check().unwrap_err().contains("not renewed in time"));
        fence.extend(Instant::now() + Duration::from_secs(60));
        assert!(fence.check().is_ok(), "a renewal after a late one holds again");
        fence.lose("taken over".into());
        fence.extend(Instant::now() + Duration::from_secs(60));
        assert_eq!(fence.check().unwrap_err(), "taken over", "a lost lease stays lost");
    }

    #[test]
    fn s3_error_documents_read_as_code_and_message() {
        let raw = "Error performing GET http://h/b?list-type=2 - 404 Not Found: <?xml version=\"1.0\"?>\n\
                   <Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message>\
                   <RequestId>X</RequestId></Error>";
        let tidy = without_xml(raw);
        assert_eq!(tidy, "Error performing GET http://h/b?list-type=2 - 404 Not Found: NoSuchBucket: The specified bucket does not exist");
        assert_eq!(without_xml("plain words"), "plain words");
    }

    #[test]
    fn a_server_that_just_stopped_answering_stopped_moments_ago() {
        assert_eq!(how_long_ago(Duration::from_millis(40)), "moments ago");
        assert_eq!(how_long_ago(Duration::from_millis(3400)), "3 s ago");
    }

    #[test]
    fn folder_objects_are_no_files() {
        let meta = |key: &str, size: u64| ObjectMeta {
            location: Key::from(key),
            last_modified: chrono::Utc::now(),
            size,
            e_tag: None,
            version: None,
        };
        let listed = vec![meta("p", 0), meta("p/a", 0), meta("p/a/b.txt", 3), meta("p/empty.txt", 0)];
        let kept: Vec<String> =
            without_folder_objects(&Key::from("p"), listed).iter().map(|m| m.location.to_string()).collect();
        assert_eq!(kept, ["p/a/b.txt", "p/empty.txt"]);
    }
}
