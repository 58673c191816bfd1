//! The far side of a session, `ibi serve --stdio`: greets, agrees on a
//! version, opens one local collection and answers requests on it, each on a
//! thread of its own so that a client may have many in flight. Staging frames
//! are handled in arrival order; before placing, every staged item is checked
//! against its manifests with the digests taken as its bytes arrived.
//!
//! Restrictions, for an authorized_keys forced command: `restrict_to` admits
//! only collections beneath those folders (after realpath, component by
//! component: `/srv/lib` does not admit `/srv/library2`); `read_only` refuses
//! every write; `append_only` accepts new items but refuses replacement,
//! withdrawal, removal and re-pointing an alias. The lease is released when
//! the session ends, however it ends.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use super::wire::{self, Reply, Request, Snapshot, Target, WireCheck, WireError, WirePlacement};
use crate::bag::{self, BagFiles};
use crate::digest::{Algorithm, Digests};
use crate::error::{Error, Result};
use crate::fsx::CopyError;
use crate::id::{RepositoryName, Timestamp};
use crate::store::local::config::CollectionConfig;
use crate::store::local::Collection;
use crate::store::{identifier_problems, FileSource, Lease, LockWait, Placement, StageId, Store};

/// What a server admits.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    pub restrict_to: Vec<PathBuf>,
    pub read_only: bool,
    pub append_only: bool,
    /// Where the machine-wide minter states are (default: the machine's own).
    pub minter_dir: Option<PathBuf>,
}

/// Files of at most this size go into a snapshot whole.
const SMALL_FILE: u64 = 256 * 1024;
/// A file is written as it arrives once this much of it is waiting.
const BUFFER_FILE: usize = 1 << 20;
/// Entries per page of a walk or of the records.
const PAGE: usize = 1024;

/// The date a client sends to end a minter update (none: abandoned), and the id of its request.
type MinterEnd = (Option<String>, u64);

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
    collection: OnceLock<Collection>,
    out: Mutex<Box<dyn Write + Send>>,
    stages: Mutex<HashMap<u64, StageState>>,
    stage_settled: Condvar,
    lease: Mutex<Option<Lease>>,
    /// Where requests that compute in parallel (verify, identities, placing) run: a
    /// pool of the session's own, so that they never wait behind work of the
    /// process's global pool (a client in the same process, in tests).
    pool: rayon::ThreadPool,
    /// Where arriving files are written; apart from `pool`, whose requests may wait for them.
    writes: rayon::ThreadPool,
    /// Minter updates waiting for the client's date: by `MinterBegin` id, the date and the `MinterEnd` id.
    minter: Mutex<HashMap<u64, Sender<MinterEnd>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves one session on stdin and stdout until the client closes it.
pub fn serve_stdio(options: ServeOptions) -> Result<()> {
    serve(options, io::stdin(), Box::new(io::stdout()))
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
        lease: Mutex::default(),
        pool: pool("ibi-serve")?,
        writes: pool("ibi-serve-write")?,
        minter: Mutex::default(),
    });
    let mut incoming = HashMap::new();
    while let Some(frame) = wire::read_frame(&mut input).map_err(broken)? {
        let request: Request = wire::decode(&frame).map_err(broken)?;
        session.take(frame.id, request, frame.payload, &mut incoming);
    }
    // The client is gone: staged items are dropped and the lease released as the process ends.
    lock(&session.lease).take();
    Ok(())
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
    fn collection(&self) -> Result<&dyn Store> {
        self.collection
            .get()
            .map(|c| c as &dyn Store)
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

    fn refuse_changes(&self, what: &str) -> Result<()> {
        self.refuse_writes(what)?;
        if self.options.append_only {
            let why = "this server only accepts new items (ibi serve --append-only)".into();
            return Err(Error::Refused { what: what.into(), why });
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

    /// Takes one frame: staging inline, in order; anything else on a thread of its own.
    fn take(self: &Arc<Self>, id: u64, request: Request, payload: Vec<u8>, incoming: &mut HashMap<u64, Incoming>) {
        match request {
            Request::StageDir { stage, rel } => self.stage_dir(stage, &rel),
            Request::FileBegin { stage, file, rel, mtime, also } => {
                self.with_stage(stage, |state| state.pending += 1);
                let entry = Incoming { stage, rel, mtime, also, buffer: Vec::new(), streaming: None };
                incoming.insert(file, entry);
            }
            Request::FileData { file } => {
                if let Some(entry) = incoming.get_mut(&file) {
                    self.file_data(entry, payload);
                }
            }
            Request::FileEnd { file } => {
                if let Some(entry) = incoming.remove(&file) {
                    self.file_end(entry);
                }
            }
            Request::MinterEnd { begin, date } => match lock(&self.minter).remove(&begin) {
                Some(to) => {
                    let _ = to.send((date, id));
                }
                None => self.reply_result(
                    id,
                    Err(Error::Invalid { what: "request".into(), problem: "no minter update is open".into() }),
                ),
            },
            other => {
                let session = self.clone();
                std::thread::spawn(move || session.answer(id, other));
            }
        }
    }

    /// Runs `f` on the client's stage, creating it on first use.
    fn with_stage<T>(&self, stage: u64, f: impl FnOnce(&mut StageState) -> T) -> Option<T> {
        let mut stages = lock(&self.stages);
        let state = stages.entry(stage).or_insert_with(|| {
            let made = self.collection().and_then(|c| {
                self.refuse_writes("staging")?;
                c.stage()
            });
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
        if let Err(e) = self.collection().and_then(|c| c.stage_dir(id, rel)) {
            self.fail_stage(stage, &e);
        }
    }

    fn file_data(self: &Arc<Self>, entry: &mut Incoming, payload: Vec<u8>) {
        if let Some(to) = &entry.streaming {
            let _ = to.send(payload);
            return;
        }
        entry.buffer.extend_from_slice(&payload);
        if entry.buffer.len() >= BUFFER_FILE {
            let (to, from) = sync_channel(8);
            let _ = to.send(std::mem::take(&mut entry.buffer));
            entry.streaming = Some(to);
            let session = self.clone();
            let (stage, rel, mtime, also) = (entry.stage, entry.rel.clone(), entry.mtime, entry.also.clone());
            let mut reader = Chunks { from, chunk: io::Cursor::new(Vec::new()) };
            std::thread::spawn(move || session.write_file(stage, &rel, mtime, &also, &mut reader));
        }
    }

    fn file_end(self: &Arc<Self>, entry: Incoming) {
        if entry.streaming.is_some() {
            return; // Dropping the sender ends the writer's stream.
        }
        let session = self.clone();
        self.writes.spawn(move || {
            let mut reader = io::Cursor::new(entry.buffer);
            session.write_file(entry.stage, &entry.rel, entry.mtime, &entry.also, &mut reader);
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
        let result = match (target, self.collection()) {
            (Some((id, true)), Ok(collection)) => {
                let origin = PathBuf::from(rel);
                let source = FileSource {
                    reader,
                    origin: &origin,
                    mtime: wire::mtime_from_wire(mtime),
                    also,
                    progress: &|_| {},
                };
                Some(collection.stage_file(id, rel, source))
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
        let mut stages = lock(&self.stages);
        loop {
            let Some(state) = stages.get(&stage) else {
                return Err(Error::NotFound {
                    what: "staged item",
                    name: stage.to_string(),
                    place: PathBuf::from("ibi serve"),
                });
            };
            if state.pending == 0 {
                if let Some(e) = &state.error {
                    return Err(e.clone().into_error("ibi serve"));
                }
                return Ok((state.id, state.arrived.clone()));
            }
            stages = self.stage_settled.wait(stages).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn answer(&self, id: u64, request: Request) {
        match request {
            Request::Walk => self.walk(id),
            Request::AllRecords => self.all_records(id),
            Request::Read { name, rel } => self.read(id, &name, &rel),
            Request::MinterBegin => self.mint(id),
            Request::Discard { stage } => {
                if let Ok((sid, _)) = self.settled(stage) {
                    if let Ok(c) = self.collection() {
                        c.discard(sid);
                    }
                }
                lock(&self.stages).remove(&stage);
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
            Request::Init { path, config } => return self.init(&path, &config),
            Request::Slot(name) => Reply::Slot(c()?.slot(&name)?.into()),
            Request::Alias(ibip) => Reply::Name(c()?.alias(&ibip)?),
            Request::DanglingAliases => Reply::Aliases(c()?.dangling_aliases()?),
            Request::AliasProblem(ibip, name) => Reply::Text(c()?.alias_problem(&ibip, &name)),
            Request::Snapshot { target, budget } => return self.snapshot(&target, budget),
            Request::Bundle { names, budget } => return self.bundle(&names, budget),
            Request::Digests { target, rel, also } => Reply::Digests(self.digests(&target, &rel, &also)?),
            Request::Identities(names) => Reply::Identities(
                c()?.identities(&names).iter().map(|r| r.as_ref().map_err(WireError::from).cloned()).collect(),
            ),
            Request::Leftovers => Reply::Problems(c()?.leftovers()),
            Request::Inventory => Reply::Inventory { id: c()?.collection_id(), present: c()?.has_inventory() },
            Request::Records(names) => Reply::Records(c()?.records(&names)?),
            Request::Lease(wait) => return done(self.take_lease(wait)),
            Request::Unlease => {
                lock(&self.lease).take();
                Reply::Done
            }
            Request::Recover => return done(self.refuse_writes("recovery").and_then(|_| c()?.recover())),
            Request::DepositRecord(key) => Reply::Name(c()?.deposit_record(&key)?),
            Request::WriteDepositRecords(records) => {
                self.refuse_writes("deposit")?;
                return done(c()?.write_deposit_records(&records));
            }
            Request::StageLink { stage, rel, name, from } => {
                let (sid, _) = self.settled(stage)?;
                return done(c()?.stage_link(sid, &rel, &name, &from));
            }
            Request::Place(batch) => return self.place(batch),
            Request::RestoreAlias(ibip, name) => {
                self.refuse_writes("restoring an alias")?;
                if self.options.append_only && c()?.alias(&ibip)?.is_some_and(|n| n != name) {
                    self.refuse_changes(&format!("re-pointing alias {ibip}"))?;
                }
                return done(c()?.restore_alias(&ibip, &name));
            }
            Request::Remove(names) => {
                self.refuse_changes("removing items")?;
                return done(c()?.remove(&names));
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

    fn opened(&self, collection: Collection) -> Result<(Reply, Vec<u8>)> {
        let reply = Reply::Opened { config: collection.config.to_toml(), location: collection.location() };
        self.collection
            .set(collection)
            .map_err(|_| Error::Invalid { what: "request".into(), problem: "a collection is already open".into() })?;
        Ok((reply, Vec::new()))
    }

    fn open(&self, path: &Path) -> Result<(Reply, Vec<u8>)> {
        let path = self.admit(path, false)?;
        self.opened(self.with_minters(Collection::open(&path)?))
    }

    fn init(&self, path: &Path, config: &str) -> Result<(Reply, Vec<u8>)> {
        self.refuse_writes("creating a collection")?;
        let path = self.admit(path, true)?;
        let (config, subsystem) = CollectionConfig::parse(config, "the client's collection config")?;
        self.opened(self.with_minters(Collection::init(&path, subsystem, config.organisation)?))
    }

    fn with_minters(&self, collection: Collection) -> Collection {
        match &self.options.minter_dir {
            Some(dir) => collection.with_minter_dir(dir),
            None => collection,
        }
    }

    fn take_lease(&self, wait: wire::Wait) -> Result<()> {
        self.refuse_writes("writing")?;
        let wait = match wait {
            wire::Wait::No => LockWait::No,
            wire::Wait::Forever => LockWait::Forever,
            wire::Wait::Millis(ms) => LockWait::For(std::time::Duration::from_millis(ms)),
        };
        let lease = self.collection()?.lease(wait)?;
        *lock(&self.lease) = Some(lease);
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
                let (mut snapshot, payload) = self.snapshot_of(c.staged_files(sid).as_ref(), None, budget);
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
        let c = self.collection()?;
        let files = match target {
            Target::Item(name) => c.item_files(name),
            Target::Stage(stage) => c.staged_files(self.settled(*stage)?.0),
        };
        files.digests(rel, also).map_err(|e| Error::io("hash", rel, e))
    }

    fn check_item(&self, name: &RepositoryName) -> Result<WireCheck> {
        let c = self.collection()?;
        let check = bag::verify_bag(c.item_files(name).as_ref(), &name.to_string(), &|_| {});
        let identifiers = check.info.as_ref().map(|info| identifier_problems(c, name, info)).unwrap_or_default();
        Ok(WireCheck {
            problems: check.problems,
            info: check.info,
            files: check.files,
            bytes: check.bytes,
            identifiers,
        })
    }

    /// Checks each staged item against its manifests with its arrival digests, then places what passed.
    fn place(&self, batch: Vec<WirePlacement>) -> Result<(Reply, Vec<u8>)> {
        self.refuse_writes("placing items")?;
        let c = self.collection()?;
        let mut refused = Vec::new();
        let mut go = Vec::new();
        for p in batch {
            let (sid, arrived) = self.settled(p.stage)?;
            lock(&self.stages).remove(&p.stage);
            if p.replace {
                if let Err(e) = self.refuse_changes(&format!("replacing {}", p.name)) {
                    c.discard(sid);
                    refused.push((p.name, Some(WireError::from(&e))));
                    continue;
                }
            }
            if let Some(problem) = arrival_problems(c, sid, &p.name, &arrived) {
                c.discard(sid);
                refused.push((p.name.clone(), Some(WireError::Data { what: p.name.to_string(), problem })));
                continue;
            }
            go.push(Placement { stage: sid, name: p.name, ibip: p.ibip, replace: p.replace, record: p.record });
        }
        let placed = c.place(&go)?;
        refused.extend(placed.into_iter().map(|(name, r)| (name, r.err().as_ref().map(WireError::from))));
        Ok((Reply::Placed(refused), Vec::new()))
    }

    fn walk(&self, id: u64) {
        match self.collection() {
            Ok(c) => self.stream_pages(id, c.walk().map(|l| l.map(Into::into)), Reply::Listed),
            Err(e) => self.reply_result(id, Err(e)),
        }
    }

    fn all_records(&self, id: u64) {
        match self.collection() {
            Ok(c) => self.stream_pages(id, c.all_records().map(|r| r.map(Some)), Reply::Records),
            Err(e) => self.reply_result(id, Err(e)),
        }
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
        let opened = self.collection().and_then(|c| {
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
        let mut buffer = vec![0u8; wire::CHUNK];
        loop {
            match reader.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => self.reply(id, &Reply::Data, &buffer[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return self.reply_result(id, Err(Error::io("read", format!("{name}/{rel}"), e))),
            }
        }
        self.reply(id, &Reply::End, &[]);
    }

    /// One minter update: the stored date goes to the client, whose `MinterEnd` brings the next.
    fn mint(&self, begin: u64) {
        let (to, from) = channel();
        lock(&self.minter).insert(begin, to);
        let mut end = None;
        let result = self.refuse_writes("minting").and_then(|_| self.collection()).and_then(|c| {
            c.minter_state().update(&mut |last| {
                self.reply(begin, &Reply::MinterDate(last.map(|t| t.to_decimal())), &[]);
                let (date, end_id) = from.recv().map_err(|_| Error::Invalid {
                    what: "minter update".into(),
                    problem: "the client went away".into(),
                })?;
                end = Some(end_id);
                match date {
                    Some(text) => Ok(Timestamp::parse_decimal(&text)?),
                    None => {
                        Err(Error::Invalid { what: "minter update".into(), problem: "abandoned by the client".into() })
                    }
                }
            })
        });
        lock(&self.minter).remove(&begin);
        let result = result.map(|_| (Reply::Done, Vec::new()));
        self.reply_result(end.unwrap_or(begin), result);
    }
}

/// Why a staged item cannot be placed as it arrived, if it cannot.
fn arrival_problems(
    c: &dyn Store,
    sid: StageId,
    name: &RepositoryName,
    arrived: &HashMap<String, Digests>,
) -> Option<String> {
    let files = c.staged_files(sid);
    let lookup = |rel: &str, also: &[Algorithm]| match arrived.get(rel) {
        Some(d) if also.iter().all(|a| d.get(*a).is_some()) => Ok(d.clone()),
        _ => files.digests(rel, also),
    };
    let check = bag::verify_bag_using(files.as_ref(), &name.to_string(), &lookup);
    if check.problems.is_empty() {
        return None;
    }
    let listed: Vec<String> = check.problems.iter().take(3).map(|p| p.to_string()).collect();
    Some(format!("it arrived damaged and was not placed: {}", listed.join("; ")))
}
