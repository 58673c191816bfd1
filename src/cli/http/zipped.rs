//! `GET /<name>.zip`: the item as a serialized bag (RFC 8493 §4: one top folder
//! holding the bag), written by the `zip` crate's streaming writer straight into
//! the response as it is read, with no temporary file. Entries are stored, not
//! deflated, so the bytes inside are the bytes the manifests list, and each
//! entry carries its file's modification time.
//!
//! **Resumable.** With stored entries the zip's layout depends only on the
//! entries' names, sizes and dates, never on their bytes, so its length is known
//! before a byte is read: the writer is run once over zeros into a counter. The
//! ETag is a digest of the item's identity and the entries' dates. A `Range`
//! (with a matching `If-Range`) is answered 206 by writing the zip again and
//! sending only the bytes asked for (the files before the range are read and
//! checked, not sent).
//!
//! **Checked.** Each file is read no further than its listed size and hashed as
//! it goes out; a file that is short or does not match its manifest ends the
//! stream with an error, so the connection is cut before the zip's central
//! directory: a client never gets a complete zip holding damaged bytes.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ibi::digest::Hasher;
use ibi::ops::resolution::{FileView, ItemView};
use ibi::store::Store;
use zip::write::{SimpleFileOptions, StreamWriter};
use zip::ZipWriter;

use super::common::{blocking, body_of, refuse, stream_from_thread, Feeder, Raw};
use super::files::{http_date, not_modified, range_asked, satisfiable_range, RangeAnswer, Validators};
use super::App;

/// Bytes gathered before a chunk goes out.
const CHUNK: usize = 128 * 1024;

/// One entry of the zip: a file of the item, its size and its date.
struct Entry {
    file: FileView,
    size: u64,
    modified: zip::DateTime,
}

/// What is known of the zip before it is written.
struct Layout {
    entries: Vec<Entry>,
    length: u64,
    etag: String,
}

/// An `io::Write` that hands the bytes of `[skip, skip + left)` to the response in
/// chunks. It fails once the client has gone, which stops the writer, and once
/// the range is sent (`sent` then says so: that is no error).
struct ChannelWriter {
    buffer: Vec<u8>,
    feeder: Arc<Feeder>,
    skip: u64,
    left: u64,
    sent: Arc<AtomicBool>,
}

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        let chunk = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK));
        self.feeder.send(Ok(Bytes::from(chunk)))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let skipped = self.skip.min(bytes.len() as u64) as usize;
        self.skip -= skipped as u64;
        let wanted = &bytes[skipped..];
        let taken = self.left.min(wanted.len() as u64) as usize;
        self.buffer.extend_from_slice(&wanted[..taken]);
        self.left -= taken as u64;
        if self.buffer.len() >= CHUNK || (self.left == 0 && !self.buffer.is_empty()) {
            self.send()?;
        }
        if self.left == 0 {
            self.sent.store(true, Ordering::SeqCst);
            return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "the range asked for is sent"));
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            Ok(())
        } else {
            self.send()
        }
    }
}

/// Counts what is written (the layout's dry run).
#[derive(Default)]
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len() as u64;
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The folder the bag sits in inside the zip: the name, its slashes made dashes.
fn top_folder(view: &ItemView) -> String {
    view.name.to_string().replace('/', "-")
}

pub async fn response(app: Arc<App>, store: usize, view: Arc<ItemView>, headers: &HeaderMap) -> Response {
    let (for_layout, view_for_layout) = (app.clone(), view.clone());
    let layout = blocking(move || layout(for_layout.resolver.stores()[store].as_ref(), &view_for_layout)).await;
    let Some(layout) = layout else { return streamed(app, store, view, None, 0, u64::MAX) };
    let validators = Validators { etag: layout.etag.clone(), last_modified: view.modified().and_then(http_date) };
    if not_modified(headers, &validators) {
        return with_validators(StatusCode::NOT_MODIFIED.into_response(), &validators);
    }
    let total = layout.length;
    let (start, end) = match range_asked(headers, &validators).map(|value| satisfiable_range(value, total)) {
        Some(RangeAnswer::One(start, end)) => (start, end),
        Some(RangeAnswer::Unsatisfiable) => {
            let mut response = refuse(StatusCode::RANGE_NOT_SATISFIABLE, "range", "it starts past the zip's end");
            let value = HeaderValue::from_str(&format!("bytes */{total}")).expect("digits are a valid header");
            response.headers_mut().insert(header::CONTENT_RANGE, value);
            return response;
        }
        _ => (0, total.saturating_sub(1)),
    };
    let partial = start > 0 || end + 1 < total;
    let mut response = streamed(app, store, view, Some(layout), start, end + 1 - start);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(end + 1 - start));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if partial {
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
        let value = HeaderValue::from_str(&format!("bytes {start}-{end}/{total}")).expect("digits are a valid header");
        response.headers_mut().insert(header::CONTENT_RANGE, value);
    }
    with_validators(response, &validators)
}

fn with_validators(mut response: Response, validators: &Validators) -> Response {
    if let Ok(value) = HeaderValue::from_str(&validators.etag) {
        response.headers_mut().insert(header::ETAG, value);
    }
    if let Some(value) = validators.last_modified.as_deref().and_then(|d| HeaderValue::from_str(d).ok()) {
        response.headers_mut().insert(header::LAST_MODIFIED, value);
    }
    response
}

/// The zip's bytes `[skip, skip + length)` as a streamed body (the whole zip,
/// without a known length, when `layout` is `None`: a file's size is not listed).
fn streamed(
    app: Arc<App>,
    store: usize,
    view: Arc<ItemView>,
    layout: Option<Layout>,
    skip: u64,
    length: u64,
) -> Response {
    let top = top_folder(&view);
    let folder = top.clone();
    let chunks = stream_from_thread(move |feeder| {
        let feeder = Arc::new(feeder);
        let sent = Arc::new(AtomicBool::new(false));
        let writer = ChannelWriter {
            buffer: Vec::with_capacity(CHUNK),
            feeder: feeder.clone(),
            skip,
            left: length,
            sent: sent.clone(),
        };
        let store = app.resolver.stores()[store].as_ref();
        let entries = layout.map(|l| l.entries).unwrap_or_else(|| undated_entries(&view));
        let result = write_zip(writer, &folder, &entries, |entry, zip| {
            let (reader, _) = store.open(&view.name, &entry.file.path)?;
            copy_checked(reader, &entry.file, zip)
        });
        if let Err(e) = result.and_then(|mut writer| Ok(writer.flush()?)) {
            if !sent.load(Ordering::SeqCst) {
                let _ = feeder.send(Err(std::io::Error::other(e.to_string())));
            }
        }
    });
    let chunks = match chunks {
        Ok(chunks) => chunks,
        Err(busy) => return *busy,
    };
    let mut response = (StatusCode::OK, body_of(chunks)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/zip"));
    if let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{top}.zip\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response.extensions_mut().insert(Raw);
    response
}

/// The zip's layout, when every file's size is listed and every file opens: each
/// entry's date (the file's modification time, or the item's version date where
/// the store keeps none), the zip's length (a dry run over zeros) and its ETag.
fn layout(store: &dyn Store, view: &ItemView) -> Option<Layout> {
    let fallback = view.modified().and_then(|d| chrono::DateTime::parse_from_rfc3339(d).ok()).map(SystemTime::from);
    let mut identity = Hasher::new(&[]);
    identity.update(view.identity.as_bytes());
    let mut entries = Vec::with_capacity(view.files.len());
    for file in &view.files {
        let (_, mtime) = store.open(&view.name, &file.path).ok()?;
        let when = mtime.or(fallback);
        let seconds = when.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs());
        identity.update(format!("\0{}\0{seconds}", file.path).as_bytes());
        entries.push(Entry { file: file.clone(), size: file.size?, modified: zip_date(when) });
    }
    let counted = write_zip(Counter::default(), &top_folder(view), &entries, |entry, zip| {
        std::io::copy(&mut std::io::repeat(0).take(entry.size), zip).map(drop)
    });
    let length = counted.ok()?.0;
    let etag = format!("\"zip-{}\"", &identity.finish().sha256()[..32]);
    Some(Layout { entries, length, etag })
}

/// Entries for a zip without a layout (a size not listed): dated by the version.
fn undated_entries(view: &ItemView) -> Vec<Entry> {
    let when = view.modified().and_then(|d| chrono::DateTime::parse_from_rfc3339(d).ok()).map(SystemTime::from);
    let modified = zip_date(when);
    view.files.iter().map(|file| Entry { file: file.clone(), size: file.size.unwrap_or(u64::MAX), modified }).collect()
}

/// A zip (MS-DOS) date; 1980-01-01 for none or one outside its range.
fn zip_date(when: Option<SystemTime>) -> zip::DateTime {
    use chrono::{Datelike, Timelike};
    let Some(when) = when else { return zip::DateTime::default() };
    let t = chrono::DateTime::<chrono::Utc>::from(when);
    let (year, month, day) = (t.year().clamp(0, u16::MAX as i32) as u16, t.month() as u8, t.day() as u8);
    zip::DateTime::from_date_and_time(year, month, day, t.hour() as u8, t.minute() as u8, t.second() as u8)
        .unwrap_or_default()
}

/// Copies a file's bytes into the zip, at most its listed size, and fails unless
/// they are exactly the bytes its manifest lists.
fn copy_checked(reader: Box<dyn Read + Send + '_>, file: &FileView, out: &mut impl Write) -> std::io::Result<()> {
    let mut reader = reader.take(file.size.unwrap_or(u64::MAX));
    let mut hasher = Hasher::new(&[]);
    let (mut buffer, mut read) = (vec![0; CHUNK], 0u64);
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        out.write_all(&buffer[..n])?;
        read += n as u64;
    }
    let short = file.size.is_some_and(|size| read < size);
    if short || hasher.finish().sha256() != file.sha256 {
        let why = format!("{} does not match its manifest; the zip is cut short", file.path);
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
    }
    Ok(())
}

/// Writes the zip of `entries` under the folder `top` into `out`, each entry's
/// bytes by `body`; returns `out`.
fn write_zip<W: Write>(
    out: W,
    top: &str,
    entries: &[Entry],
    mut body: impl FnMut(&Entry, &mut ZipWriter<StreamWriter<W>>) -> std::io::Result<()>,
) -> zip::result::ZipResult<W> {
    let mut zip = ZipWriter::new_stream(out);
    for entry in entries {
        let options = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(entry.size >= u32::MAX as u64)
            .unix_permissions(0o644)
            .last_modified_time(entry.modified);
        zip.start_file(format!("{top}/{}", entry.file.path), options)?;
        body(entry, &mut zip)?;
    }
    Ok(zip.finish()?.into_inner())
}
