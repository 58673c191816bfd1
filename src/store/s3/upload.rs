//! Sends one file's bytes to an object, hashing them as they go: a file that fits
//! in one part is one create-only PUT; a larger one is a multipart upload whose
//! parts are sent while the next are read. The fixity is the sha256 computed here
//! (S3's multipart checksums are checksums of parts, not of the file).

use std::io::Read;
use std::sync::{Condvar, Mutex};

use object_store::path::Path as Key;
use object_store::{ObjectStoreExt, PutMode, WriteMultipart};

use crate::digest::{Digests, Hasher};
use crate::error::Error;
use crate::fsx::CopyError;
use crate::store::s3::objects::{Lost, Objects};
use crate::store::FileSource;

/// The size of one part, and the most a single PUT carries.
const PART: usize = 8 * 1024 * 1024;
/// Parts in flight at once.
const PARTS_IN_FLIGHT: usize = 2;
/// Room first made for a file's bytes (it grows as they come, up to `PART`).
const FIRST_READ: usize = 64 * 1024;
/// Files longer than `FIRST_READ` sent at once, in the whole process: each holds
/// up to a part in its buffer and `PARTS_IN_FLIGHT` more in the upload, so
/// staging more items at once (`TransferShape::staging_threads`) never holds more memory.
const LONG_FILES_AT_ONCE: usize = 2;

/// Permits to send a long file; one is held while such a file is sent.
struct Permits {
    held: Mutex<usize>,
    freed: Condvar,
}

static LONG_FILES: Permits = Permits { held: Mutex::new(0), freed: Condvar::new() };

impl Permits {
    fn acquire(&'static self) -> Permit {
        let mut held = crate::sync::lock(&self.held);
        while *held >= LONG_FILES_AT_ONCE {
            held = self.freed.wait(held).unwrap_or_else(|p| p.into_inner());
        }
        *held += 1;
        Permit(self)
    }
}

struct Permit(&'static Permits);

impl Drop for Permit {
    fn drop(&mut self) {
        *crate::sync::lock(&self.0.held) -= 1;
        self.0.freed.notify_one();
    }
}

/// Uploads `from` to `key` (which must not exist yet) and returns its digests, and
/// its bytes when it went up in one PUT (the caller may keep small ones).
pub fn send(objects: &Objects, key: &Key, from: FileSource) -> Result<(Digests, Option<Vec<u8>>), CopyError> {
    let source_error = |e| CopyError::Source(Error::io("read", from.origin, e));
    let mut hasher = Hasher::new(from.also);
    // The first part is read into a buffer that grows with what comes (most files
    // are small), not into a zeroed part: zeroing 8 MiB for each small file was a
    // third of a mirror's CPU.
    let mut buf = Vec::with_capacity(FIRST_READ);
    (&mut *from.reader).take(FIRST_READ as u64).read_to_end(&mut buf).map_err(source_error)?;
    let _permit = (buf.len() == FIRST_READ).then(|| LONG_FILES.acquire());
    if buf.len() == FIRST_READ {
        (&mut *from.reader).take((PART - FIRST_READ) as u64).read_to_end(&mut buf).map_err(source_error)?;
    }
    let first = buf.len();
    hasher.update(&buf);
    (from.progress)(first as u64);
    if first < PART {
        buf.shrink_to_fit();
        let placed = objects.run(objects.put(key, buf.clone(), PutMode::Create)).map_err(CopyError::Destination)?;
        placed.map_err(|Lost| CopyError::Destination(already_staged(objects, key)))?;
        return Ok((hasher.finish(), Some(buf)));
    }
    objects.run(async {
        let upload =
            objects.store.put_multipart(key).await.map_err(|e| CopyError::Destination(objects.error(key, e)))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
        writer.write(&buf);
        loop {
            writer
                .wait_for_capacity(PARTS_IN_FLIGHT)
                .await
                .map_err(|e| CopyError::Destination(objects.error(key, e)))?;
            let n = crate::fsx::fill(from.reader, &mut buf).map_err(source_error)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            (from.progress)(n as u64);
            writer.write(&buf[..n]);
        }
        writer.finish().await.map_err(|e| CopyError::Destination(objects.error(key, e)))?;
        Ok((hasher.finish(), None))
    })
}

fn already_staged(objects: &Objects, key: &Key) -> Error {
    Error::Invalid { what: "staged path".into(), problem: format!("{} is already staged", objects.url(key)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// However many staging threads send long files, at most
    /// `LONG_FILES_AT_ONCE` hold a permit at once, and every one gets its turn.
    #[test]
    fn long_files_are_sent_a_bounded_few_at_a_time() {
        static PERMITS: Permits = Permits { held: Mutex::new(0), freed: Condvar::new() };
        let (now, most, done) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..20 {
                        let _permit = PERMITS.acquire();
                        let held = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(held, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_micros(200));
                        now.fetch_sub(1, Ordering::SeqCst);
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(done.load(Ordering::SeqCst), 160);
        assert!(most.load(Ordering::SeqCst) <= LONG_FILES_AT_ONCE, "{} at once", most.load(Ordering::SeqCst));
        assert_eq!(*crate::sync::lock(&PERMITS.held), 0, "every permit was given back");
    }
}
