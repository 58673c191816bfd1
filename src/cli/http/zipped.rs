//! `GET /<name>.zip`: the item as a serialized bag (RFC 8493 §4: one top folder
//! holding the bag), written by the `zip` crate's streaming writer straight into
//! the response as it is read, with no temporary file. Entries are stored, not
//! deflated, so the bytes inside are the bytes the manifests list. Each file is
//! read no further than its listed size and hashed as it goes out; a file that is
//! short or does not match its manifest ends the stream with an error, so the
//! connection is cut before the zip's central directory: a client never gets a
//! complete zip holding damaged bytes.

use std::io::{Read, Write};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ibi::digest::Hasher;
use ibi::ops::resolution::{FileView, ItemView};
use zip::write::SimpleFileOptions;

use super::common::Raw;
use super::App;

/// Bytes gathered before a chunk goes out.
const CHUNK: usize = 128 * 1024;

/// An `io::Write` that hands what it is given to the response in chunks; it fails
/// once the client has gone, which stops the writer.
struct ChannelWriter {
    buffer: Vec<u8>,
    sender: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
}

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        let chunk = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK));
        self.sender
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= CHUNK {
            self.send()?;
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

/// The folder the bag sits in inside the zip: the name, its slashes made dashes.
fn top_folder(view: &ItemView) -> String {
    view.name.to_string().replace('/', "-")
}

pub fn response(app: Arc<App>, store: usize, view: Arc<ItemView>) -> Response {
    let (sender, receiver) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(2);
    let top = top_folder(&view);
    let folder = top.clone();
    tokio::task::spawn_blocking(move || {
        let writer = ChannelWriter { buffer: Vec::with_capacity(CHUNK), sender: sender.clone() };
        if let Err(e) = write_zip(&app, store, &view, &folder, writer) {
            let _ = sender.blocking_send(Err(std::io::Error::other(e.to_string())));
        }
    });
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|chunk| (chunk, receiver))
    });
    let mut response = (StatusCode::OK, Body::from_stream(stream)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/zip"));
    if let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{top}.zip\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response.extensions_mut().insert(Raw);
    response
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

fn write_zip(app: &App, store: usize, view: &ItemView, top: &str, writer: ChannelWriter) -> zip::result::ZipResult<()> {
    let store = app.resolver.stores()[store].as_ref();
    let mut zip = zip::ZipWriter::new_stream(writer);
    for file in &view.files {
        let large = file.size.is_none_or(|s| s >= u32::MAX as u64);
        let options = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(large)
            .unix_permissions(0o644);
        zip.start_file(format!("{top}/{}", file.path), options)?;
        let (reader, _) = store.open(&view.name, &file.path)?;
        copy_checked(reader, file, &mut zip)?;
    }
    let mut writer = zip.finish()?.into_inner();
    writer.flush()?;
    Ok(())
}
