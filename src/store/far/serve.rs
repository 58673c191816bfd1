//! The far side of a session, `ibi serve --stdio`: greets, agrees on a
//! version, opens one local collection and answers requests on it. The server
//! is the authority: it checks every request against its own state and never
//! trusts that a well-behaved `ibi` sent it (ARCHITECTURE.md, "The far server").
//!
//! - The collection's folder is pinned at `Open`: realpath, admitted by
//!   `restrict_to` component by component, then opened with no symlink on the
//!   way, and from then on reached only through that directory handle
//!   (`/proc/self/fd/N`), so swapping the folder for a symlink changes nothing.
//!   Every file path a request names is a plain relative path, resolved beneath it.
//! - Writing needs the session's lease: staging, placing, removing, aliases,
//!   deposit records, recovery and minting. `read_only` never hands out a lease and
//!   writes no file at all; `append_only` refuses replacement, withdrawal, removal
//!   and re-pointing an alias.
//! - A placement is checked against the staged bag and the collection: bag-info
//!   names the item, the alias it asks for is its own and free, a name with a record
//!   only ever takes back one of its own versions, and the inventory record is made
//!   here from the staged bag (a client's record is never taken).
//! - Names are minted here, with the collection's own minter state and this
//!   machine's clock; a client asks for a count and never writes a state.
//! - Resources are bounded per session: `WORKERS` threads take requests from a
//!   queue of `QUEUE` (the reader waits when it is full: backpressure), at most
//!   `MAX_OPEN_FILES` files arrive at once, and at most `BUFFERED` bytes of them
//!   wait in memory. The workers answer at once, so replies come in any order
//!   (each names its request's id): a client waits for the replies whose order
//!   matters (`Open` before the rest, `Lease` before a write).

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use rayon::prelude::*;

use super::wire::{self, Reply, Request, Snapshot, Target, WireCheck, WireError, WirePlacement, WireSlot};
use crate::bag::{self, BagFiles};
use crate::digest::{Algorithm, Digests};
use crate::error::{Error, Result};
use crate::fsx::CopyError;
use crate::id::{Ibip, RepositoryName, Timestamp};
use crate::store::config::CollectionConfig;
use crate::store::inventory::{fixity_date, FixityCheck};
use crate::store::local::Collection;
use crate::store::{identifier_problems, FileSource, ItemRecord, LockWait, Placement, StageId, Store, Writer};
use crate::sync::lock;

/// Makes, signs and keeps a witness of a collection, as JSON (`ops::witness`,
/// handed in by the caller so that this layer never reaches up into the ops).
pub type MakeWitness = fn(&dyn crate::store::Store) -> Result<Option<String>>;

/// Checks a collection's log chain from where its last check ended
/// (`ops::log::check_chain`), handed in as `MakeWitness` is.
pub type CheckChain = fn(&dyn crate::store::Store) -> Result<Option<crate::events::ChainOutcome>>;

/// What a server admits.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    pub restrict_to: Vec<PathBuf>,
    pub read_only: bool,
    pub append_only: bool,
    /// Where the machine-wide minter states are (default: the machine's own).
    pub minter_dir: Option<PathBuf>,
    /// How this server makes a witness when a client's verify ends (`MakeWitness`):
    /// from its own bags, with its own key, which never leaves this machine.
    pub witness: Option<MakeWitness>,
    /// How this server checks its own log's chain for a client's verify
    /// (`CheckChain`); without one, it answers that it keeps no log.
    pub chain_check: Option<CheckChain>,
}

/// Threads that answer requests, per session.
const WORKERS: usize = 8;
/// Requests waiting for a worker before the reader stops reading.
const QUEUE: usize = 64;
/// Files arriving at once; a stage that opens more fails.
const MAX_OPEN_FILES: usize = 64;
/// Bytes of arriving files held in memory at once; the reader waits past it.
const BUFFERED: usize = 64 << 20;

/// Files of at most this size go into a snapshot whole.
const SMALL_FILE: u64 = 256 * 1024;
/// A file is written as it arrives once this much of it is waiting.
const BUFFER_FILE: usize = 1 << 20;
/// Entries per page of a walk or of the records.
const PAGE: usize = 1024;
/// How many of the server's own fixity checks it keeps in one transaction.
const FIXITY_AT_ONCE: usize = 256;

/// Finished small files handed to a writing thread together: the reader holds
/// them until `WRITE_BATCH_FILES` or `WRITE_BATCH_BYTES` have arrived, a request
/// that is not staging comes, or its next read may wait, so one wake-up of a
/// writing thread carries many files instead of one each.
const WRITE_BATCH_FILES: usize = 64;
const WRITE_BATCH_BYTES: usize = 1 << 20;

/// The files of a session on their way in: those still arriving, by the
/// client's file id, and those finished but not yet handed to a writing thread.
#[derive(Default)]
struct Arriving {
    open: HashMap<u64, Incoming>,
    finished: Vec<Incoming>,
    finished_bytes: usize,
}

/// One staged item of the client's.
struct StageState {
    id: StageId,
    /// Files still being written.
    pending: usize,
    /// The first failure while staging: placing the item fails with it.
    error: Option<WireError>,
    /// Digests taken as each file arrived.
    arrived: HashMap<String, Digests>,
}

/// A file on its way in.
struct Incoming {
    stage: u64,
    rel: String,
    mtime: Option<(i64, u32)>,
    also: Vec<Algorithm>,
    buffer: Vec<u8>,
    streaming: Option<SyncSender<Vec<u8>>>,
}

struct Session {
    options: ServeOptions,
    /// The open collection, for the life of the process (a session opens one).
    collection: OnceLock<&'static Collection>,
    out: Mutex<Box<dyn Write + Send>>,
    stages: Mutex<HashMap<u64, StageState>>,
    stage_settled: Condvar,
    /// The session's writer, which holds the lease: none until `Lease`, never on a
    /// read-only server, restricted to appending on an append-only one.
    writer: Mutex<Option<Arc<dyn Writer>>>,
    /// Held while the lease is taken (`take_lease`).
    leasing: Mutex<()>,
    /// Where requests that compute in parallel (verify, identities, placing) run: a
    /// pool of the session's own, so that they never wait behind work of the
    /// process's global pool (a client in the same process, in tests).
    pool: rayon::ThreadPool,
    /// Where arriving files are written; apart from `pool`, whose requests may wait for them.
    writes: rayon::ThreadPool,
    /// The collection's folder, held open since `Open`.
    pinned: OnceLock<rustix::fd::OwnedFd>,
    /// Bytes of arriving files held in memory.
    buffered: Budget,
    /// The results of this server's own checks (`CheckItem`) not yet kept.
    fixity: Mutex<Vec<FixityCheck>>,
    /// An OCFL site kept on this machine, once `OcflOpen` names it.
    ocfl: super::serve_ocfl::OcflSession,
}

/// A count of bytes in memory with a ceiling: taking waits while it is over.
#[derive(Default)]
struct Budget {
    used: Mutex<usize>,
    freed: Condvar,
}

impl Budget {
    /// Whether taking `bytes` now would wait for others to be given back.
    fn would_wait(&self, bytes: usize) -> bool {
        let used = *lock(&self.used);
        used > 0 && used + bytes > BUFFERED
    }

    fn take(&self, bytes: usize) {
        let mut used = lock(&self.used);
        while *used > 0 && *used + bytes > BUFFERED {
            used = self.freed.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        *used += bytes;
    }

    fn give(&self, bytes: usize) {
        *lock(&self.used) -= bytes;
        self.freed.notify_all();
    }
}

/// Serves one session on stdin and stdout until the client closes it.
pub fn serve_stdio(options: ServeOptions) -> Result<()> {
    crate::events::set_session_restriction(session_restriction(&options));
    serve(options, io::stdin(), Box::new(io::stdout()))
}

/// What the log says of this session's agent: where it came from (OpenSSH's
/// `SSH_CONNECTION`) and what its key may do.
fn session_restriction(options: &ServeOptions) -> String {
    let from = std::env::var("SSH_CONNECTION").ok().and_then(|c| c.split(' ').next().map(String::from));
    let mut parts = vec![match from {
        Some(address) => format!("far session from {address}"),
        None => "far session".to_string(),
    }];
    if !options.restrict_to.is_empty() {
        let paths: Vec<String> = options.restrict_to.iter().map(|p| p.display().to_string()).collect();
        parts.push(format!("restricted to {}", paths.join(", ")));
    }
    if options.append_only {
        parts.push("append-only".into());
    }
    if options.read_only {
        parts.push("read-only".into());
    }
    parts.join(", ")
}

/// Serves one session on `input` and `output`.
pub fn serve(options: ServeOptions, input: impl Read, output: Box<dyn Write + Send>) -> Result<()> {
    let broken = |e: io::Error| Error::Connection { place: "ibi serve".into(), problem: e.to_string() };
    let mut output = BufWriter::with_capacity(1 << 20, output);
    output.write_all(wire::greeting().as_bytes()).and_then(|_| output.flush()).map_err(broken)?;
    let mut input = BufReader::with_capacity(1 << 20, input);
    let mut answer = String::new();
    input.by_ref().take(256).read_line(&mut answer).map_err(broken)?;
    let (min, max) = wire::versions();
    let chosen = answer.strip_prefix(wire::ANSWER).and_then(|v| v.trim().parse::<u32>().ok());
    if !chosen.is_some_and(|v| (min..=max).contains(&v)) {
        let problem =
            format!("the client answered {:?}; this server speaks protocol versions {min}-{max}", answer.trim());
        return Err(Error::Connection { place: "ibi serve".into(), problem });
    }
    let session = Arc::new(Session {
        options,
        collection: OnceLock::new(),
        out: Mutex::new(Box::new(output)),
        stages: Mutex::default(),
        stage_settled: Condvar::new(),
        writer: Mutex::default(),
        leasing: Mutex::default(),
        pool: pool("ibi-serve")?,
        writes: pool("ibi-serve-write")?,
        pinned: OnceLock::new(),
        buffered: Budget::default(),
        fixity: Mutex::default(),
        ocfl: Default::default(),
    });
    let (queue, workers) = session.start_workers()?;
    let mut arriving = Arriving::default();
    loop {
        // The finished files go to a writer before a read that may wait, so a
        // client waiting for them (a placement) is never left waiting on this one.
        if !wire::frame_buffered(input.buffer()) {
            session.write_finished(&mut arriving);
        }
        let Some(frame) = wire::read_frame(&mut input).map_err(broken)? else { break };
        match wire::decode::<Request>(&frame) {
            Ok(request) => session.take(frame.id, request, frame.payload, &mut arriving, &queue),
            Err(e) => {
                let problem = format!("a request this server cannot read: {e}");
                session.reply_result(frame.id, Err(Error::Invalid { what: "request".into(), problem }));
            }
        }
    }
    drop(queue);
    // The client is gone: files it never finished end now (their stages settle,
    // failed), the requests it sent are finished (a write cut short by the
    // process's exit would leave its staging or trash behind), its staged items
    // are dropped, then the lease released.
    session.abandon(arriving);
    workers.finish(SETTLE);
    session.discard_all();
    session.keep_fixity(true);
    lock(&session.writer).take();
    Ok(())
}

/// How long a session's end waits for the work its client left running: writes
/// into its stages, then the requests its workers were answering. A request
/// still running after it (a lease awaited forever) is not waited for.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

/// A session's worker threads.
struct Workers(Vec<std::thread::JoinHandle<()>>);

impl Workers {
    /// Waits, up to `settle`, for every worker to answer its last request and end.
    fn finish(self, settle: std::time::Duration) {
        let deadline = std::time::Instant::now() + settle;
        while self.0.iter().any(|w| !w.is_finished()) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.0.into_iter().filter(|w| w.is_finished()).for_each(|w| drop(w.join()));
    }
}

fn pool(name: &'static str) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .thread_name(move |i| format!("{name}-{i}"))
        .build()
        .map_err(|e| Error::Connection { place: "ibi serve".into(), problem: format!("cannot start threads: {e}") })
}

/// A reader over chunks sent down a channel.
struct Chunks {
    from: Receiver<Vec<u8>>,
    chunk: io::Cursor<Vec<u8>>,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = self.chunk.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            match self.from.recv() {
                Ok(bytes) => self.chunk = io::Cursor::new(bytes),
                Err(_) => return Ok(0),
            }
        }
    }
}

impl Session {
    /// Starts the session's `WORKERS`, fed by a queue of `QUEUE` requests; they
    /// end when the queue is dropped and its last request is answered.
    fn start_workers(self: &Arc<Self>) -> Result<(SyncSender<(u64, Request)>, Workers)> {
        let (to, from) = sync_channel::<(u64, Request)>(QUEUE);
        let from = Arc::new(Mutex::new(from));
        let mut workers = Vec::with_capacity(WORKERS);
        for i in 0..WORKERS {
            let (session, from) = (self.clone(), from.clone());
            let work = move || loop {
                let next = lock(&from).recv();
                match next {
                    Ok((id, request)) => session.answer(id, request),
                    Err(_) => return,
                }
            };
            let worker =
                std::thread::Builder::new().name(format!("ibi-serve-worker-{i}")).spawn(work).map_err(|e| {
                    Error::Connection { place: "ibi serve".into(), problem: format!("cannot start threads: {e}") }
                })?;
            workers.push(worker);
        }
        Ok((to, Workers(workers)))
    }

    /// Discards every stage of the session (it ended), once the files being written
    /// into them are done: the client's unfinished files end with their channels
    /// (dropped before this), so each write ends soon; a write still running after
    /// `SETTLE` is not waited for. Discarding under a running write would leave
    /// the folder it creates behind, a leftover verify reports.
    fn discard_all(&self) {
        let deadline = std::time::Instant::now() + SETTLE;
        let mut stages = lock(&self.stages);
        while stages.values().any(|state| state.pending > 0) && std::time::Instant::now() < deadline {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            stages = self.stage_settled.wait_timeout(stages, left).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
        }
        let stages: Vec<StageId> = stages.drain().map(|(_, state)| state.id).collect();
        stages.into_iter().for_each(|sid| self.discard_stage(sid));
        if let Some(collection) = self.collection.get() {
            collection.drop_stages();
        }
    }

    /// Removes one of the session's stages. Its own staging, not the
    /// collection's content: no lease is needed (one given back with `Unlease`
    /// after staging must not leave the stage behind).
    fn discard_stage(&self, sid: StageId) {
        if let Some(collection) = self.collection.get() {
            crate::store::write::WriteBackend::discard(*collection, sid);
        }
    }

    /// The session's writer, for `what`: refused unless this session may write and
    /// holds the collection's lease.
    fn writer(&self, what: &str) -> Result<Arc<dyn Writer>> {
        self.refuse_writes(what)?;
        lock(&self.writer).clone().ok_or_else(|| Error::Refused {
            what: what.into(),
            why: "this session does not hold the collection's write lease".into(),
        })
    }

    /// Opens the admitted folder `real` (a realpath) with no symlink on the way and
    /// keeps it open; the path that reaches it through that handle from now on.
    fn pin(&self, real: &Path) -> Result<PathBuf> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let how = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let opened = match rustix::fs::openat2(rustix::fs::CWD, real, flags, Mode::empty(), how) {
            Err(rustix::io::Errno::NOSYS) => rustix::fs::open(real, flags, Mode::empty()),
            other => other,
        };
        let fd = opened.map_err(|e| Error::Refused {
            what: format!("collection {}", real.display()),
            why: format!("it cannot be opened without passing through a symlink ({e})"),
        })?;
        let through = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)));
        let _ = self.pinned.set(fd);
        Ok(if through.is_dir() { through } else { real.to_path_buf() })
    }

    fn collection(&self) -> Result<&dyn Store> {
        self.collection
            .get()
            .map(|c| *c as &dyn Store)
            .ok_or_else(|| Error::Invalid { what: "request".into(), problem: "no collection is open yet".into() })
    }

    fn reply(&self, id: u64, reply: &Reply, payload: &[u8]) {
        let mut out = lock(&self.out);
        // A client that went away is noticed by the reader; nothing to do here.
        let _ = wire::write_frame(&mut *out, id, reply, payload).and_then(|_| out.flush());
    }

    fn reply_result(&self, id: u64, result: Result<(Reply, Vec<u8>)>) {
        match result {
            Ok((reply, payload)) => self.reply(id, &reply, &payload),
            Err(e) => self.reply(id, &Reply::Error(WireError::from(&e)), &[]),
        }
    }

    fn refuse_writes(&self, what: &str) -> Result<()> {
        if self.options.read_only {
            return Err(Error::Refused {
                what: what.into(),
                why: "this server is read-only (ibi serve --read-only)".into(),
            });
        }
        Ok(())
    }

    /// The collection path, if `restrict_to` admits it.
    fn admit(&self, path: &Path, creating: bool) -> Result<PathBuf> {
        if self.options.restrict_to.is_empty() {
            return Ok(path.to_path_buf());
        }
        let refused = |why: String| Error::Refused { what: format!("collection {}", path.display()), why };
        let real = match std::fs::canonicalize(path) {
            Ok(real) => real,
            Err(_) if creating => {
                let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
                let leaf = path.file_name().ok_or_else(|| refused("it has no final name".into()))?;
                std::fs::canonicalize(parent).map_err(|e| refused(e.to_string()))?.join(leaf)
            }
            Err(e) => return Err(refused(e.to_string())),
        };
        let admitted = self
            .options
            .restrict_to
            .iter()
            .filter_map(|dir| std::fs::canonicalize(dir).ok())
            .any(|dir| real.starts_with(&dir));
        match admitted {
            true => Ok(real),
            false => Err(refused("it is outside the folders this server admits (--restrict-to-path)".into())),
        }
    }

    /// Takes one frame: staging inline, in order; anything else to the workers' queue
    /// (the reader waits while it is full).
    fn take(
        self: &Arc<Self>,
        id: u64,
        request: Request,
        payload: Vec<u8>,
        arriving: &mut Arriving,
        queue: &SyncSender<(u64, Request)>,
    ) {
        match request {
            Request::StageDir { stage, rel } => self.stage_dir(stage, &rel),
            Request::FileBegin { stage, file, rel, mtime, also } => {
                let admitted = match (arriving.open.len() < MAX_OPEN_FILES, check_rel(&rel)) {
                    (false, _) => Err(Error::Refused {
                        what: format!("file {rel}"),
                        why: format!("a session may send at most {MAX_OPEN_FILES} files at once"),
                    }),
                    (true, checked) => checked,
                };
                if let Err(e) = admitted {
                    return self.fail_stage(stage, &e);
                }
                if arriving.open.contains_key(&file) {
                    // Taking it would drop the open one unwritten, and its stage
                    // would wait for it for ever.
                    let problem = format!("file {file} was begun again before it ended");
                    return self.fail_stage(stage, &Error::Invalid { what: format!("file {rel}"), problem });
                }
                self.with_stage(stage, |state| state.pending += 1);
                let entry = Incoming { stage, rel, mtime, also, buffer: Vec::new(), streaming: None };
                arriving.open.insert(file, entry);
            }
            Request::FileData { file } => {
                if self.buffered.would_wait(payload.len()) {
                    self.write_finished(arriving);
                }
                if let Some(entry) = arriving.open.get_mut(&file) {
                    self.file_data(entry, payload);
                }
            }
            Request::FileEnd { file } => {
                if let Some(entry) = arriving.open.remove(&file) {
                    self.file_end(entry, arriving);
                }
            }
            // In order, as they come: a file's parts follow each other.
            Request::Ocfl(call) => {
                let result = self.ocfl.step(call, &payload, self.options.read_only);
                self.reply_result(id, result);
            }
            other => {
                self.write_finished(arriving);
                let _ = queue.send((id, other));
            }
        }
    }

    /// Runs `f` on the client's stage, creating it on first use.
    fn with_stage<T>(&self, stage: u64, f: impl FnOnce(&mut StageState) -> T) -> Option<T> {
        let mut stages = lock(&self.stages);
        let state = stages.entry(stage).or_insert_with(|| {
            let made = self.writer("staging").and_then(|w| w.stage());
            let (id, error) = match made {
                Ok(id) => (id, None),
                Err(e) => (StageId(u64::MAX), Some(WireError::from(&e))),
            };
            StageState { id, pending: 0, error, arrived: HashMap::new() }
        });
        Some(f(state))
    }

    fn fail_stage(&self, stage: u64, error: &Error) {
        self.with_stage(stage, |state| {
            state.error.get_or_insert_with(|| WireError::from(error));
        });
    }

    fn stage_dir(&self, stage: u64, rel: &str) {
        let Some((id, None)) = self.with_stage(stage, |s| (s.id, s.error.clone())) else { return };
        if let Err(e) = check_rel(rel).and_then(|_| self.writer("staging")).and_then(|w| w.stage_dir(id, rel)) {
            self.fail_stage(stage, &e);
        }
    }

    fn file_data(self: &Arc<Self>, entry: &mut Incoming, payload: Vec<u8>) {
        if let Some(to) = &entry.streaming {
            let _ = to.send(payload);
            return;
        }
        self.buffered.take(payload.len());
        entry.buffer.extend_from_slice(&payload);
        if entry.buffer.len() >= BUFFER_FILE {
            let (to, from) = sync_channel(8);
            self.buffered.give(entry.buffer.len());
            let _ = to.send(std::mem::take(&mut entry.buffer));
            entry.streaming = Some(to);
            let session = self.clone();
            let (stage, rel, mtime, also) = (entry.stage, entry.rel.clone(), entry.mtime, entry.also.clone());
            let mut reader = Chunks { from, chunk: io::Cursor::new(Vec::new()) };
            std::thread::spawn(move || session.write_file(stage, &rel, mtime, &also, &mut reader));
        }
    }

    /// Ends the files of a client that went away: a streaming one with its
    /// stream (its writer sees the end), the others unwritten, each one's stage
    /// settled and failed, so that nothing waits on them.
    fn abandon(&self, arriving: Arriving) {
        let Arriving { open, finished, finished_bytes } = arriving;
        // What the finished files hold is counted in `finished_bytes`; an open
        // file's bytes, in its buffer.
        let open_bytes: usize = open.values().map(|entry| entry.buffer.len()).sum();
        self.buffered.give(finished_bytes + open_bytes);
        let mut stages = lock(&self.stages);
        for entry in open.into_values().chain(finished).filter(|entry| entry.streaming.is_none()) {
            // A stage already placed or discarded is not made again for it.
            let Some(state) = stages.get_mut(&entry.stage) else { continue };
            let problem = format!("the client went away before file {} was written", entry.rel);
            state.pending = state.pending.saturating_sub(1);
            state.error.get_or_insert_with(|| WireError::from(&Error::Invalid { what: "staging".into(), problem }));
        }
        drop(stages);
        self.stage_settled.notify_all();
    }

    fn file_end(self: &Arc<Self>, entry: Incoming, arriving: &mut Arriving) {
        if entry.streaming.is_some() {
            return; // Dropping the sender ends the writer's stream.
        }
        arriving.finished_bytes += entry.buffer.len();
        arriving.finished.push(entry);
        if arriving.finished.len() >= WRITE_BATCH_FILES || arriving.finished_bytes >= WRITE_BATCH_BYTES {
            self.write_finished(arriving);
        }
    }

    /// Hands the finished files to a writing thread, in one job.
    fn write_finished(self: &Arc<Self>, arriving: &mut Arriving) {
        if arriving.finished.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut arriving.finished);
        let held = std::mem::take(&mut arriving.finished_bytes);
        let session = self.clone();
        self.writes.spawn(move || {
            for entry in batch {
                let mut reader = io::Cursor::new(entry.buffer);
                session.write_file(entry.stage, &entry.rel, entry.mtime, &entry.also, &mut reader);
            }
            session.buffered.give(held);
        });
    }

    fn write_file(
        &self,
        stage: u64,
        rel: &str,
        mtime: Option<(i64, u32)>,
        also: &[Algorithm],
        reader: &mut (dyn Read + Send),
    ) {
        let target = self.with_stage(stage, |s| (s.id, s.error.is_none()));
        let result = match (target, self.writer("staging")) {
            (Some((id, true)), Ok(writer)) => {
                let origin = PathBuf::from(rel);
                let source = FileSource {
                    reader,
                    origin: &origin,
                    mtime: wire::mtime_from_wire(mtime),
                    also,
                    progress: &|_| {},
                };
                Some(writer.stage_file(id, rel, source))
            }
            _ => {
                let _ = io::copy(reader, &mut io::sink());
                None
            }
        };
        let mut stages = lock(&self.stages);
        if let Some(state) = stages.get_mut(&stage) {
            match result {
                Some(Ok(digests)) => {
                    state.arrived.insert(rel.to_string(), digests);
                }
                Some(Err(CopyError::Source(e) | CopyError::Destination(e))) => {
                    state.error.get_or_insert_with(|| WireError::from(&e));
                }
                None => {}
            }
            state.pending = state.pending.saturating_sub(1);
        }
        self.stage_settled.notify_all();
    }

    /// Waits until every file of the stage is written; its server id, failure and arrival digests.
    fn settled(&self, stage: u64) -> Result<(StageId, HashMap<String, Digests>)> {
        let stages = self.settled_lock(stage)?;
        let state = &stages[&stage];
        match &state.error {
            Some(e) => Err(e.clone().into_error("ibi serve")),
            None => Ok((state.id, state.arrived.clone())),
        }
    }

    /// Waits until every file of the stage is written, then takes it from the
    /// session, which forgets it: a stage that failed is discarded here and its
    /// failure returned; one that did not, the caller places or discards.
    fn take_settled(&self, stage: u64) -> Result<(StageId, HashMap<String, Digests>)> {
        let state = self.settled_lock(stage)?.remove(&stage).expect("a settled stage is held");
        match state.error {
            Some(e) => {
                self.discard_stage(state.id);
                Err(e.into_error("ibi serve"))
            }
            None => Ok((state.id, state.arrived)),
        }
    }

    /// The session's stages, once `stage` has no file still being written.
    fn settled_lock(&self, stage: u64) -> Result<std::sync::MutexGuard<'_, HashMap<u64, StageState>>> {
        let mut stages = lock(&self.stages);
        loop {
            match stages.get(&stage) {
                None => {
                    let name = stage.to_string();
                    return Err(Error::NotFound { what: "staged item", name, place: PathBuf::from("ibi serve") });
                }
                Some(state) if state.pending == 0 => return Ok(stages),
                Some(_) => stages = self.stage_settled.wait(stages).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }

    fn answer(&self, id: u64, request: Request) {
        match request {
            Request::Walk => self.walk(id),
            Request::AllRecords => self.all_records(id),
            Request::FixityCheckPages => self.fixity_pages(id),
            Request::Read { name, rel } => self.read(id, &name, &rel),
            Request::Discard { stage } => {
                if let Ok((sid, _)) = self.take_settled(stage) {
                    self.discard_stage(sid);
                }
            }
            other => {
                let result = self.pool.install(|| self.handle(other));
                self.reply_result(id, result);
            }
        }
    }

    fn handle(&self, request: Request) -> Result<(Reply, Vec<u8>)> {
        let done = |r: Result<()>| r.map(|_| (Reply::Done, Vec::new()));
        let c = || self.collection();
        let reply = match request {
            Request::Open { path } => return self.open(&path),
            Request::OcflOpen { path } => self.ocfl.open(&self.admit(&home_expanded(&path)?, true)?)?,
            Request::Init { path, config } => return self.init(&path, &config),
            Request::Slot(name) => Reply::Slot(c()?.slot(&name)?.into()),
            Request::Slots(names) => Reply::Slots(c()?.slots(&names)?.into_iter().map(WireSlot::from).collect()),
            Request::Alias(ibip) => Reply::Name(c()?.aliases().alias(&ibip)?),
            Request::DanglingAliases => Reply::Aliases(c()?.aliases().dangling_aliases(&|_| false)?),
            Request::AliasProblem(ibip, name) => Reply::Text(c()?.aliases().alias_problem(&ibip, &name)),
            Request::Snapshot { target, budget } => return self.snapshot(&target, budget),
            Request::Bundle { names, budget } => return self.bundle(&names, budget),
            Request::Digests { target, rel, also } => {
                check_rel(&rel)?;
                Reply::Digests(self.digests(&target, &rel, &also)?)
            }
            Request::Identities(names) => Reply::Identities(
                c()?.identities(&names).iter().map(|r| r.as_ref().map_err(WireError::from).cloned()).collect(),
            ),
            Request::BagIdentities(names) => Reply::Identities(
                c()?.bag_identities(&names).iter().map(|r| r.as_ref().map_err(WireError::from).cloned()).collect(),
            ),
            Request::Config => {
                Reply::Config(c()?.inventory().current_config()?.map(|config| config.to_toml()).unwrap_or_default())
            }
            Request::MakeWitness => Reply::Text(match (self.options.read_only, self.options.witness) {
                (false, Some(make)) => {
                    // The checks this session made vouch for the leaves: kept first.
                    self.keep_fixity(true);
                    make(c()?)?
                }
                _ => None,
            }),
            Request::LatestWitness => Reply::Text(c()?.ledger().latest_witness()?),
            Request::CheckChain => Reply::Chain(match self.options.chain_check {
                Some(check) => check(c()?)?,
                None => None,
            }),
            Request::Leftovers => Reply::Problems(c()?.leftovers()),
            Request::Inventory => {
                Reply::Inventory { id: c()?.inventory().collection_id(), present: c()?.inventory().has_inventory() }
            }
            Request::Records(names) => Reply::Records(c()?.inventory().records(&names)?),
            Request::Events { item, after } => Reply::Events(c()?.ledger().events(item.as_ref(), after)?),
            Request::FixityChecks => {
                self.keep_fixity(true);
                Reply::FixityChecks(c()?.ledger().fixity_checks()?)
            }
            Request::Lease(wait) => return done(self.take_lease(wait)),
            Request::Unlease => {
                lock(&self.writer).take();
                Reply::Done
            }
            // Taking the lease (`Lease`) recovered already.
            Request::Recover => return done(self.writer("recovery").map(drop)),
            Request::Mint { count } => Reply::Minted(self.mint(count)?),
            Request::MintedUpTo => {
                Reply::Date(self.writer("reading the minter")?.minter().minted_up_to()?.map(Timestamp::to_decimal))
            }
            Request::RaiseMinter(date) => return done(self.raise_minter(&date)),
            Request::Minting => Reply::Minting(c()?.inventory().minting()?),
            Request::SetMinting(minting) => {
                return done(
                    check_minting(&minting)
                        .and_then(|()| self.writer("changing who mints")?.minter().set_minting(&minting)),
                )
            }
            Request::DepositRecord(key) => Reply::Name(c()?.inventory().deposit_record(&key)?),
            Request::WriteDepositRecords(records) => {
                return done(self.writer("deposit records")?.minter().write_deposit_records(&records));
            }
            Request::NoteMinted(names) => {
                return done(self.writer("logging minted names")?.minter().note_minted(&names))
            }
            Request::CosignerKey => {
                let key = c()?.cosigner().map(|c| c.cosigner_key()).transpose()?.flatten();
                Reply::Text(key.map(|(name, key)| format!("{name}\t{key}")))
            }
            Request::SeenCheckpoint(origin) => {
                Reply::Text(c()?.cosigner().map(|c| c.seen_checkpoint(&origin)).transpose()?.flatten())
            }
            Request::Cosign { note, collection_key, events } => {
                if self.options.read_only {
                    return Err(Error::Refused {
                        what: "cosigning a checkpoint".into(),
                        why: "this session's key is read-only".into(),
                    });
                }
                let collection = c()?;
                let cosigner = collection.cosigner().ok_or_else(|| Error::Refused {
                    what: "cosigning a checkpoint".into(),
                    why: "this collection keeps no checkpoints".into(),
                })?;
                Reply::Text(Some(cosigner.cosign(&note, &collection_key, &events)?))
            }
            Request::StageLink { stage, rel, name, from } => {
                let writer = self.writer("staging")?;
                check_rel(&rel).and_then(|_| check_rel(&from))?;
                let (sid, _) = self.settled(stage)?;
                return done(writer.stage_link(sid, &rel, &name, &from));
            }
            Request::Place(batch) => return self.place(batch),
            Request::RestoreAlias(ibip, name) => {
                let writer = self.writer("restoring an alias")?;
                restore_alias_problem(c()?, &ibip, &name)?;
                return done(writer.restore_alias(&ibip, &name));
            }
            Request::Remove(names) => return done(self.writer("removing items")?.remove(&names)),
            Request::NoteMoved(names, to) => {
                return done(to.check().and_then(|()| self.writer("noting moves")?.note_moved(&names, &to)))
            }
            Request::CheckItem(name) => Reply::Checked(self.check_item(&name)?),
            other => {
                return Err(Error::Invalid {
                    what: "request".into(),
                    problem: format!("{other:?} is not answered here"),
                })
            }
        };
        Ok((reply, Vec::new()))
    }

    fn opened(&self, collection: Collection, real: &Path) -> Result<(Reply, Vec<u8>)> {
        let reply = Reply::Opened { config: collection.config.to_toml(), location: real.display().to_string() };
        self.collection
            .set(Box::leak(Box::new(collection)))
            .map_err(|_| Error::Invalid { what: "request".into(), problem: "a collection is already open".into() })?;
        Ok((reply, Vec::new()))
    }

    fn open(&self, path: &Path) -> Result<(Reply, Vec<u8>)> {
        let real = self.admit(&home_expanded(path)?, false)?;
        let collection = Collection::open(&self.pin(&real)?)?.known_as(&real);
        self.opened(self.configured(collection), &real)
    }

    fn init(&self, path: &Path, config: &str) -> Result<(Reply, Vec<u8>)> {
        self.refuse_writes("creating a collection")?;
        let real = self.admit(&home_expanded(path)?, true)?;
        let (asked, subsystem) = CollectionConfig::parse(config, "the client's collection config")?;
        // The server gives the id; the client chooses only what a collection is.
        let mut config = CollectionConfig::new(&subsystem, asked.organisation.clone());
        config.follows = asked.follows;
        let minter_dir = self.options.minter_dir.clone().or_else(crate::store::local::minter::machine_dir);
        drop(Collection::init(&real, &config, minter_dir)?);
        self.open(&real)
    }

    /// The collection as this server's options say: read-only, and its minter folder.
    fn configured(&self, mut collection: Collection) -> Collection {
        if self.options.read_only {
            collection = collection.read_only();
        }
        match &self.options.minter_dir {
            Some(dir) => collection.with_minter_dir(dir),
            None => collection,
        }
    }

    /// Mints `count` dates with the collection's own state and this machine's clock.
    fn mint(&self, count: usize) -> Result<Vec<String>> {
        if count > wire::MAX_MINT {
            let problem =
                format!("{count} names in one request; this server mints at most {} at a time", wire::MAX_MINT);
            return Err(Error::Invalid { what: "Mint".into(), problem });
        }
        let dates = self.writer("minting")?.minter().mint_dates(count, &crate::id::minter::SystemClock)?;
        Ok(dates.into_iter().map(Timestamp::to_decimal).collect())
    }

    /// Raises the minter for a handover; never past a day beyond this server's
    /// clock, so a client cannot push the names it mints into the far future.
    /// A client raises the minter past names it placed or a predecessor handed
    /// out, never past this server's clock plus the granularity (a date further
    /// ahead would stop every deposit here until the clock reached it), and an
    /// `--append-only` key not at all.
    fn raise_minter(&self, date: &str) -> Result<()> {
        let date = Timestamp::parse_decimal(date)?;
        let writer = self.writer("raising the minter")?;
        // A copy's raise after placing is already covered by the floor of the names
        // it placed: nothing to do, nothing refused.
        if writer.minter().minted_up_to()?.is_some_and(|held| held >= date) {
            return Ok(());
        }
        if self.options.append_only {
            let why = "this server only accepts new items (ibi serve --append-only)".into();
            return Err(Error::Refused { what: "raising the minter".into(), why });
        }
        let grain = writer.store().subsystem().granularity.nanos();
        let limit = Timestamp::from_nanos(Timestamp::now().nanos() + grain);
        if date > limit {
            let problem =
                format!("{} is past this server's clock ({})", date.to_rfc3339(), Timestamp::now().to_rfc3339());
            return Err(Error::Invalid { what: "minter date".into(), problem });
        }
        writer.minter().raise_minter_to(date)
    }

    fn take_lease(&self, wait: wire::Wait) -> Result<()> {
        self.refuse_writes("writing")?;
        let wait = match wait {
            wire::Wait::No => LockWait::No,
            wire::Wait::Forever => LockWait::Forever,
            wire::Wait::Millis(ms) => LockWait::For(std::time::Duration::from_millis(ms)),
        };
        let collection: &'static Collection = self
            .collection
            .get()
            .ok_or_else(|| Error::Invalid { what: "request".into(), problem: "no collection is open yet".into() })?;
        // One lease a session: a second ask would wait on the lock this session
        // holds, for ever; asks at once are taken one at a time.
        let _one_at_a_time = lock(&self.leasing);
        if lock(&self.writer).is_some() {
            return Ok(());
        }
        let writer = collection.begin_write(wait)?;
        if self.options.append_only {
            writer.restrict_to_appending();
        }
        let writer: Arc<dyn Writer> = Arc::from(writer);
        *lock(&self.writer) = Some(writer);
        Ok(())
    }

    fn snapshot_of(&self, files: &dyn BagFiles, name: Option<&RepositoryName>, budget: u64) -> (Snapshot, Vec<u8>) {
        let root = files.root_kind().map(Into::into).map_err(|e| e.to_string());
        let entries: Vec<_> = files.entries();
        let mut contents = Vec::new();
        let mut payload = Vec::new();
        let mut left = budget;
        for entry in entries.iter().flatten() {
            let (Ok(rel), bag::files::FileKind::File { size }) = (&entry.rel, entry.kind) else { continue };
            let small = size <= SMALL_FILE || (name.is_none() && !rel.starts_with("data/"));
            if !small || size > left {
                continue;
            }
            let read = match (name, self.collection()) {
                (Some(name), Ok(c)) => c.open(name, rel).and_then(|(mut r, mtime)| {
                    let mut bytes = Vec::new();
                    r.read_to_end(&mut bytes).map(|_| (bytes, mtime))
                }),
                _ => files.read(rel).map(|bytes| (bytes, None)),
            };
            if let Ok((bytes, mtime)) = read {
                left -= bytes.len() as u64;
                contents.push((rel.clone(), bytes.len() as u64, wire::mtime_to_wire(mtime)));
                payload.extend_from_slice(&bytes);
            }
        }
        let entries = entries.into_iter().map(Into::into).collect();
        (Snapshot { root, entries, contents, digests: Vec::new() }, payload)
    }

    fn snapshot(&self, target: &Target, budget: u64) -> Result<(Reply, Vec<u8>)> {
        let c = self.collection()?;
        let (snapshot, payload) = match target {
            Target::Item(name) => self.snapshot_of(c.item_files(name).as_ref(), Some(name), budget),
            Target::Stage(stage) => {
                let (sid, arrived) = self.settled(*stage)?;
                let writer = self.writer("reading a stage")?;
                let (mut snapshot, payload) = self.snapshot_of(writer.staged_files(sid).as_ref(), None, budget);
                snapshot.digests = arrived.into_iter().collect();
                (snapshot, payload)
            }
        };
        Ok((Reply::Snapshot(snapshot), payload))
    }

    fn bundle(&self, names: &[RepositoryName], budget: u64) -> Result<(Reply, Vec<u8>)> {
        let c = self.collection()?;
        let mut all = Vec::new();
        let mut payload = Vec::new();
        for name in names {
            let (snapshot, bytes) = self.snapshot_of(c.item_files(name).as_ref(), Some(name), budget);
            all.push((name.clone(), snapshot));
            payload.extend_from_slice(&bytes);
        }
        Ok((Reply::Bundle(all), payload))
    }

    fn digests(&self, target: &Target, rel: &str, also: &[Algorithm]) -> Result<Digests> {
        let hash = |files: Box<dyn BagFiles + '_>| files.digests(rel, also).map_err(|e| Error::io("hash", rel, e));
        match target {
            Target::Item(name) => hash(self.collection()?.item_files(name)),
            Target::Stage(stage) => {
                let sid = self.settled(*stage)?.0;
                hash(self.writer("reading a stage")?.staged_files(sid))
            }
        }
    }

    fn check_item(&self, name: &RepositoryName) -> Result<WireCheck> {
        let c = self.collection()?;
        let check = bag::verify_bag(c.item_files(name).as_ref(), &name.to_string(), &|_| {});
        let identifiers = check.info.as_ref().map(|info| identifier_problems(c, name, info)).unwrap_or_default();
        let ok = check.problems.is_empty() && identifiers.is_empty();
        let date = fixity_date(crate::id::Timestamp::now());
        let fixity = FixityCheck::read(name.clone(), date, ok, check.files, check.bytes);
        lock(&self.fixity).push(fixity);
        self.keep_fixity(false);
        Ok(WireCheck {
            problems: check.problems,
            info: check.info,
            files: check.files,
            bytes: check.bytes,
            identifiers,
        })
    }

    /// Keeps the dates of this server's own checks: all that wait, or a batch once
    /// one is full (a client's claims are never taken: it only asks for checks). A
    /// read-only server keeps none: it writes nothing. Failing to keep them loses no
    /// item, only the order of later rolling runs, so no request fails for it.
    fn keep_fixity(&self, all: bool) {
        let batch = {
            let mut waiting = lock(&self.fixity);
            if waiting.is_empty() || !all && waiting.len() < FIXITY_AT_ONCE {
                return;
            }
            std::mem::take(&mut *waiting)
        };
        if let (false, Ok(c)) = (self.options.read_only, self.collection()) {
            if let Some(writer) = c.ledger().writer() {
                let _ = writer.record_fixity(&batch);
            }
        }
    }

    /// Checks each staged item (`admit_placement`), then places what passed, with
    /// records made here, and raises this collection's minter past the names placed.
    fn place(&self, batch: Vec<WirePlacement>) -> Result<(Reply, Vec<u8>)> {
        let writer = self.writer("placing items")?;
        // Checks made before this placement are kept first: kept after it, a
        // failed check of a replaced copy would count against its replacement.
        self.keep_fixity(true);
        let c = self.collection()?;
        let held = c.inventory().records(&batch.iter().map(|p| p.name.clone()).collect::<Vec<_>>())?;
        let staged = self.take_batch(&batch)?;
        // Each item is checked on the session's pool: nothing is placed before
        // all are checked, so the order changes nothing.
        let checked: Vec<(WirePlacement, StageId, Result<ItemRecord>)> = self.pool.install(|| {
            batch
                .into_par_iter()
                .zip(held)
                .zip(staged)
                .map(|((p, held), (sid, arrived))| {
                    let admitted = admit_placement(writer.as_ref(), sid, &p, held.as_ref(), &arrived);
                    (p, sid, admitted)
                })
                .collect()
        });
        let mut refused = Vec::new();
        let mut go = Vec::new();
        for (p, sid, admitted) in checked {
            match admitted {
                // The alias is the one bag-info records, which verify will expect.
                Ok(record) => go.push(Placement {
                    stage: sid,
                    name: p.name,
                    ibip: record.ibip,
                    replace: p.replace,
                    record: Some(record),
                    action: crate::store::log::admitted_action(p.action, p.replace),
                }),
                Err(e) => {
                    writer.discard(sid);
                    refused.push((p.name, Some(WireError::from(&e))));
                }
            }
        }
        let placed = writer.place(&go)?;
        let arrived: Vec<RepositoryName> = placed.iter().filter(|(_, r)| r.is_ok()).map(|(n, _)| n.clone()).collect();
        crate::store::raise_minter(writer.as_ref(), &arrived)?;
        refused.extend(placed.into_iter().map(|(name, r)| (name, r.err().as_ref().map(WireError::from))));
        Ok((Reply::Placed(refused), Vec::new()))
    }

    /// Takes the stage of each placement once its files are written. If one
    /// cannot be taken (never made, failed, or named twice), the placement
    /// fails as a whole and every stage of it is discarded: the session has
    /// forgotten them, so nothing else would.
    fn take_batch(&self, batch: &[WirePlacement]) -> Result<Vec<(StageId, HashMap<String, Digests>)>> {
        let taken: Vec<_> = batch.iter().map(|p| self.take_settled(p.stage)).collect();
        if let Some(failed) = taken.iter().position(Result::is_err) {
            taken.iter().flatten().for_each(|(sid, _)| self.discard_stage(*sid));
            return Err(taken.into_iter().nth(failed).and_then(Result::err).expect("the failed placement"));
        }
        Ok(taken.into_iter().flatten().collect())
    }

    fn walk(&self, id: u64) {
        match self.collection() {
            Ok(c) => self.stream_pages(id, c.walk().map(|l| l.map(Into::into)), Reply::Listed),
            Err(e) => self.reply_result(id, Err(e)),
        }
    }

    fn all_records(&self, id: u64) {
        match self.collection() {
            Ok(c) => self.stream_pages(id, c.inventory().all_records().map(|r| r.map(Some)), Reply::Records),
            Err(e) => self.reply_result(id, Err(e)),
        }
    }

    /// Streams every item's last fixity check in pages of `PAGE` (the checks
    /// waiting to be kept are kept first), then `End`; an error ends it instead.
    fn fixity_pages(&self, id: u64) {
        self.keep_fixity(true);
        let c = match self.collection() {
            Ok(c) => c,
            Err(e) => return self.reply_result(id, Err(e)),
        };
        let mut page = Vec::with_capacity(PAGE);
        let kept = c.ledger().each_fixity_check(&mut |check| {
            page.push(check);
            if page.len() == PAGE {
                self.reply(id, &Reply::FixityChecks(Some(std::mem::take(&mut page))), &[]);
            }
        });
        match kept {
            Err(e) => return self.reply_result(id, Err(e)),
            Ok(kept) => self.reply(id, &Reply::FixityChecks(kept.then_some(page)), &[]),
        }
        self.reply(id, &Reply::End, &[]);
    }

    /// Sends a stream in pages of `PAGE`, then `End`; an error ends it instead.
    fn stream_pages<T>(&self, id: u64, items: impl Iterator<Item = Result<T>>, page_of: impl Fn(Vec<T>) -> Reply) {
        let mut page = Vec::with_capacity(PAGE);
        for item in items {
            match item {
                Ok(item) => page.push(item),
                Err(e) => return self.reply_result(id, Err(e)),
            }
            if page.len() == PAGE {
                self.reply(id, &page_of(std::mem::take(&mut page)), &[]);
            }
        }
        self.reply(id, &page_of(page), &[]);
        self.reply(id, &Reply::End, &[]);
    }

    fn read(&self, id: u64, name: &RepositoryName, rel: &str) {
        let opened = check_rel(rel).and_then(|_| self.collection()).and_then(|c| {
            c.open(name, rel).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => {
                    Error::NotFound { what: "file", name: rel.into(), place: PathBuf::from(name.to_string()) }
                }
                _ => Error::io("open", format!("{name}/{rel}"), e),
            })
        });
        let (mut reader, mtime) = match opened {
            Ok(opened) => opened,
            Err(e) => return self.reply_result(id, Err(e)),
        };
        self.reply(id, &Reply::FileStart(wire::mtime_to_wire(mtime)), &[]);
        let sent = crate::fsx::with_read_buffer(|buffer| loop {
            match reader.read(buffer) {
                Ok(0) => return Ok(()),
                Ok(n) => self.reply(id, &Reply::Data, &buffer[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        });
        if let Err(e) = sent {
            return self.reply_result(id, Err(Error::io("read", format!("{name}/{rel}"), e)));
        }
        self.reply(id, &Reply::End, &[]);
    }
}

/// The record of a staged item that may be placed as asked: it arrived whole, its
/// bag-info names it, the alias it asks for is its own and free, and a new
/// placement of a name that has a record only takes back one of its own versions
/// (a repair, or an item coming back). A key that may replace may also remove, so
/// a replacement is not checked further (append-only keys' writers refuse it).
fn admit_placement(
    writer: &dyn Writer,
    sid: StageId,
    p: &WirePlacement,
    held: Option<&ItemRecord>,
    arrived: &HashMap<String, Digests>,
) -> Result<ItemRecord> {
    let c = writer.store();
    let mut record = staged_record(writer, sid, &p.name, arrived)?;
    // The client's content keys only say where to look (a deposit checks the bytes).
    record.deposit_keys = p.record.as_ref().map(|r| r.deposit_keys.clone()).unwrap_or_default();
    if record.deposit_keys.len() > 64 || record.deposit_keys.iter().any(|k| !is_content_key(k)) {
        return Err(Error::Refused {
            what: format!("placing {}", p.name),
            why: "its content keys are malformed".into(),
        });
    }
    let refuse = |why: String| Err(Error::Refused { what: format!("placing {}", p.name), why });
    if p.ibip.is_some() && p.ibip != record.ibip {
        return refuse("the IBIp asked for is not the one its bag-info records".into());
    }
    if let Some(ibip) = &record.ibip {
        if let Some(other) = c.aliases().alias(ibip)?.filter(|n| *n != p.name) {
            return refuse(format!("alias {ibip} names another item, {other}"));
        }
    }
    if p.replace {
        return Ok(record);
    }
    if c.slot(&p.name)? != crate::store::Slot::Empty {
        return Err(Error::AlreadyExists { path: PathBuf::from(p.name.to_string()) });
    }
    if let Some(held) = held.filter(|h| !h.versions.iter().any(|v| v.digest == record.current().digest)) {
        let how = match held.status {
            crate::store::Status::Removed => "held by another item, which moved away",
            _ => "held by another item",
        };
        return refuse(format!("the name was {how}; it only ever takes back one of that item's versions"));
    }
    Ok(record)
}

/// The record a staged item's bag implies, once it is checked against its manifests
/// with the digests taken as it arrived and its bag-info names it; otherwise why not.
/// A content key as deposit makes them: a sha256 in lower-case hex.
fn is_content_key(key: &str) -> bool {
    key.len() == 64 && key.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn staged_record(
    writer: &dyn Writer,
    sid: StageId,
    name: &RepositoryName,
    arrived: &HashMap<String, Digests>,
) -> Result<ItemRecord> {
    let files = writer.staged_files(sid);
    let lookup = |rel: &str, also: &[Algorithm]| match arrived.get(rel) {
        Some(d) if also.iter().all(|a| d.get(*a).is_some()) => Ok(d.clone()),
        _ => files.digests(rel, also),
    };
    let check = bag::verify_bag_using(files.as_ref(), &name.to_string(), &lookup);
    let refused = |why: &str, problems: &[crate::problem::Problem]| {
        let listed: Vec<String> = problems.iter().take(3).map(|p| p.to_string()).collect();
        Error::Data { what: name.to_string(), problem: format!("{why} and was not placed: {}", listed.join("; ")) }
    };
    if !check.problems.is_empty() {
        return Err(refused("it arrived damaged", &check.problems));
    }
    let Some(info) = check.info else {
        return Err(Error::Data { what: name.to_string(), problem: "it arrived without bag-info.txt".into() });
    };
    let named = crate::store::bag_identifier_problems(name, &info);
    if !named.is_empty() {
        return Err(refused("its bag-info does not name it", &named));
    }
    let identity = lookup(bag::TAGMANIFEST, &[]).map_err(|e| Error::io("hash", bag::TAGMANIFEST, e))?;
    ItemRecord::from_info(name, &info, identity.sha256())
}

/// `~` or `~/…` at the start of a far path is this user's home folder, as scp and
/// rsync read `HOST:~/library`; any other path is taken as it is.
fn home_expanded(path: &Path) -> Result<PathBuf> {
    let rest = match path.strip_prefix("~") {
        Ok(rest) => rest,
        Err(_) => return Ok(path.to_path_buf()),
    };
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).ok_or_else(|| Error::Invalid {
        what: format!("collection {}", path.display()),
        problem: "it starts with ~, but this far account has no HOME".into(),
    })?;
    Ok(PathBuf::from(home).join(rest))
}

/// Refuses a path a request names unless it is plain and relative (no `..`, no `/` first).
fn check_rel(rel: &str) -> Result<()> {
    bag::manifest::check_path(rel)
        .map_err(|why| Error::Invalid { what: "path".into(), problem: format!("{rel:?}: {why}") })
}

/// Refuses restoring an alias that names an item the collection does not hold, or
/// whose bag-info records another IBIp.
fn restore_alias_problem(c: &dyn Store, ibip: &Ibip, name: &RepositoryName) -> Result<()> {
    let refuse = |why: String| Err(Error::Refused { what: format!("restoring alias {ibip}"), why });
    if c.slot(name)? != crate::store::Slot::Item {
        return refuse(format!("{name} is not an item here"));
    }
    if crate::store::item_ibip(c, name)?.as_ref() != Some(ibip) {
        return refuse(format!("the bag-info of {name} does not record it"));
    }
    Ok(())
}

/// Refuses a minting role whose successor's forwarding URL or place a
/// resolver could not answer with as it is (`Forward::check`'s rule).
fn check_minting(minting: &crate::store::Minting) -> Result<()> {
    match minting {
        crate::store::Minting::Retired(Some(next)) => {
            let forward = crate::store::inventory::Forward {
                to: next.location.clone(),
                date: next.since.clone(),
                url: next.forward_url.clone(),
            };
            forward.check()
        }
        _ => Ok(()),
    }
}
