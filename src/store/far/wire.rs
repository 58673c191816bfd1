//! The far protocol on the wire: the greeting and version choice, the frame
//! (`Frame`: a request id, a JSON header and raw bytes), the typed messages each
//! way (`Request`, `Reply`) and errors as they cross (`WireError`). Both ends
//! use this module: `far::conn` (the client) and `far::serve` (the server).
//!
//! A session opens with the server's greeting line, `IBI-SERVE <min> <max>`; the
//! client skips anything before it (a shell's banner), picks the highest version
//! both speak and answers `IBI-CLIENT <version>`. Frames follow:
//! `u32 header length, u32 payload length, u64 id, header (JSON), payload`.

use std::io::{self, BufRead, Read, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::bag::files::{FileKind, TreeEntry, TreeError};
use crate::bag::BagInfo;
use crate::digest::{Algorithm, Digests};
use crate::error::{Error, ErrorClass};
use crate::id::{Ibip, RepositoryName};
use crate::problem::Problem;
use crate::store::inventory::Forward;
use crate::store::{ItemRecord, Listed, Minting, Slot};

/// The first word of the server's greeting.
pub const GREETING: &str = "IBI-SERVE";
/// The first word of the client's answer.
pub const ANSWER: &str = "IBI-CLIENT";
/// The protocol versions this build speaks.
/// Version 2: the server mints with its own state (`Mint`); a client never writes one.
/// Version 4: `BagIdentities`, each read from the bag (a version-3 peer is asked per item).
/// Version 5: `FixityCheckPages`. Version 6: `CheckChain`, the server checks its own log.
/// Version 7: `Slots`, the slots of many names in one request.
/// Version 8: `CosignerKey`, `SeenCheckpoint` and `Cosign`: the server keeps and
/// cosigns the checkpoints of the collections it is a site of.
/// Version 9: `OcflOpen` and `Ocfl`: an OCFL storage root kept as a site on
/// the far machine, written and read a step at a time.
pub const VERSIONS: (u32, u32) = (3, 9);
/// Replaces `VERSIONS` (`MIN-MAX` or `N`), to test version skew.
pub const VERSIONS_ENV: &str = "IBI_PROTOCOL_VERSIONS";
/// How much a far shell may print before the greeting.
pub const MAX_BANNER: usize = 64 * 1024;
/// The most names one `Mint` asks for: more than a batch's worth. A client
/// asks for more in several requests; the server refuses a larger one, which
/// would hold its minter (and sleep on its clock) for as long as the count takes.
pub const MAX_MINT: usize = 1024;
/// The largest header or payload of one frame.
pub const MAX_FRAME: u32 = 64 * 1024 * 1024;
/// The size of the data frames a file is sent in: one read into the thread's
/// read buffer (`fsx::with_read_buffer`).
pub const CHUNK: usize = crate::fsx::BUFFER_SIZE;

/// The protocol versions this process speaks: `VERSIONS`, or what `VERSIONS_ENV` says.
pub fn versions() -> (u32, u32) {
    let Ok(text) = std::env::var(VERSIONS_ENV) else { return VERSIONS };
    let parse = |t: &str| t.trim().parse::<u32>().ok();
    match text.split_once('-') {
        Some((a, b)) => parse(a).zip(parse(b)).unwrap_or(VERSIONS),
        None => parse(&text).map_or(VERSIONS, |v| (v, v)),
    }
}

/// The greeting line the server sends first.
pub fn greeting() -> String {
    let (min, max) = versions();
    format!("{GREETING} {min} {max}\n")
}

/// What the client found before and in the greeting.
pub enum Greeted {
    /// The server's versions.
    Versions(u32, u32),
    /// The connection ended (or the banner ran too long) without a greeting: what came instead.
    Missing(String),
}

/// Reads lines until the greeting, skipping a banner.
pub fn read_greeting(input: &mut impl BufRead) -> io::Result<Greeted> {
    let mut seen = String::new();
    loop {
        let mut line = Vec::new();
        let n = input.by_ref().take(MAX_BANNER as u64).read_until(b'\n', &mut line)?;
        let text = String::from_utf8_lossy(&line);
        if let Some(rest) = text.strip_prefix(GREETING) {
            let mut words = rest.split_whitespace().map(|w| w.parse::<u32>().ok());
            if let (Some(Some(min)), Some(Some(max))) = (words.next(), words.next()) {
                return Ok(Greeted::Versions(min, max));
            }
        }
        seen.push_str(&text);
        if n == 0 || seen.len() >= MAX_BANNER || !line.ends_with(b"\n") {
            return Ok(Greeted::Missing(seen.trim().chars().take(400).collect()));
        }
    }
}

/// The version both sides speak, if any.
pub fn common_version(ours: (u32, u32), theirs: (u32, u32)) -> Option<u32> {
    let (low, high) = (ours.0.max(theirs.0), ours.1.min(theirs.1));
    (low <= high).then_some(high)
}

/// One frame: the request it belongs to, a header and raw bytes.
#[derive(Debug)]
pub struct Frame {
    pub id: u64,
    pub header: Vec<u8>,
    pub payload: Vec<u8>,
}

/// Writes one frame (the caller flushes).
pub fn write_frame(out: &mut impl Write, id: u64, header: &impl Serialize, payload: &[u8]) -> io::Result<()> {
    let header = serde_json::to_vec(header).map_err(io::Error::other)?;
    let mut head = [0u8; 16];
    head[..4].copy_from_slice(&(header.len() as u32).to_be_bytes());
    head[4..8].copy_from_slice(&(payload.len() as u32).to_be_bytes());
    head[8..].copy_from_slice(&id.to_be_bytes());
    out.write_all(&head)?;
    out.write_all(&header)?;
    out.write_all(payload)
}

/// Whether `buffered` holds a whole frame (so that reading it cannot wait).
pub fn frame_buffered(buffered: &[u8]) -> bool {
    let Some(head) = buffered.get(..8) else { return false };
    let header_len = u32::from_be_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    let payload_len = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
    buffered.len() >= 16 + header_len + payload_len
}

/// Reads one frame; `None` at a clean end of the stream.
pub fn read_frame(input: &mut impl Read) -> io::Result<Option<Frame>> {
    let mut head = [0u8; 16];
    match input.read_exact(&mut head[..1]) {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        other => other?,
    }
    input.read_exact(&mut head[1..])?;
    let header_len = u32::from_be_bytes(head[..4].try_into().expect("4 bytes"));
    let payload_len = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes"));
    if header_len > MAX_FRAME || payload_len > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "a frame larger than the protocol allows"));
    }
    let id = u64::from_be_bytes(head[8..].try_into().expect("8 bytes"));
    let mut header = vec![0; header_len as usize];
    input.read_exact(&mut header)?;
    let mut payload = vec![0; payload_len as usize];
    input.read_exact(&mut payload)?;
    Ok(Some(Frame { id, header, payload }))
}

/// Reads a frame's header as `T`.
pub fn decode<T: for<'de> Deserialize<'de>>(frame: &Frame) -> io::Result<T> {
    serde_json::from_slice(&frame.header).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// How long to wait for the lease.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Wait {
    No,
    Forever,
    Millis(u64),
}

/// Which bag a request reads: an item, or a staged one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Target {
    Item(RepositoryName),
    Stage(u64),
}

/// One placement as sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WirePlacement {
    pub stage: u64,
    pub name: RepositoryName,
    pub ibip: Option<Ibip>,
    pub replace: bool,
    pub record: Option<ItemRecord>,
    /// What the log is to record (an older client sends none).
    #[serde(default)]
    pub action: crate::store::log::Action,
}

/// What the client asks; the frame's id ties replies to it.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    Open {
        path: PathBuf,
    },
    Init {
        path: PathBuf,
        config: String,
    },
    Walk,
    Slot(RepositoryName),
    /// The slots of many names, in their order (version 7).
    Slots(Vec<RepositoryName>),
    Alias(Ibip),
    DanglingAliases,
    AliasProblem(Ibip, RepositoryName),
    /// A bag's root kind, entries and the bytes of its small files (up to `budget` in all).
    Snapshot {
        target: Target,
        budget: u64,
    },
    /// Snapshots of many items at once.
    Bundle {
        names: Vec<RepositoryName>,
        budget: u64,
    },
    Digests {
        target: Target,
        rel: String,
        also: Vec<Algorithm>,
    },
    Read {
        name: RepositoryName,
        rel: String,
    },
    Identities(Vec<RepositoryName>),
    /// Version 4: identities read from each bag's tagmanifest, not from records.
    BagIdentities(Vec<RepositoryName>),
    /// Version 4: the collection's configuration as stored now (its sites and policy).
    Config,
    /// Version 4: the server makes, signs and keeps a witness of its collection
    /// (from its own bags, with its own key) and sends it (`Reply::Text`).
    MakeWitness,
    /// Version 4: the latest witness kept (`Reply::Text`).
    LatestWitness,
    Leftovers,
    Inventory,
    Records(Vec<RepositoryName>),
    AllRecords,
    Lease(Wait),
    Unlease,
    Recover,
    /// Mints `count` dates with the server's own minter state and clock.
    Mint {
        count: usize,
    },
    /// The newest date the server's minter has handed out or holds.
    MintedUpTo,
    /// Raises the server's minter state to this date (decimal seconds): a handover.
    RaiseMinter(String),
    /// The collection's part in minting, as stored now.
    Minting,
    SetMinting(Minting),
    DepositRecord(String),
    WriteDepositRecords(Vec<(String, RepositoryName)>),
    // Staging: sent without waiting for a reply; a failure is kept with the stage
    // and reported by the next request that reads or places it.
    StageDir {
        stage: u64,
        rel: String,
    },
    FileBegin {
        stage: u64,
        file: u64,
        rel: String,
        mtime: Option<(i64, u32)>,
        also: Vec<Algorithm>,
    },
    /// The payload holds the bytes.
    FileData {
        file: u64,
    },
    FileEnd {
        file: u64,
    },
    Discard {
        stage: u64,
    },
    StageLink {
        stage: u64,
        rel: String,
        name: RepositoryName,
        from: String,
    },
    Place(Vec<WirePlacement>),
    RestoreAlias(Ibip, RepositoryName),
    Remove(Vec<RepositoryName>),
    NoteMoved(Vec<RepositoryName>, Forward),
    CheckItem(RepositoryName),
    /// A page of the event log after event `after`, of one item when given.
    Events {
        item: Option<RepositoryName>,
        after: u64,
    },
    /// Every item's last fixity check, as the server's own checks kept them, in
    /// one reply (which a large collection's checks overflow: `MAX_FRAME`).
    FixityChecks,
    /// Version 5: every item's last fixity check, streamed in pages
    /// (`Reply::FixityChecks`, then `End`); a collection that keeps none sends
    /// one `FixityChecks(None)`.
    FixityCheckPages,
    /// Version 6: the server checks its own log's chain, from where its last
    /// check ended (`Reply::Chain`); a client never reads a far log whole for it.
    CheckChain,
    /// Logs names handed out with no item (`ibi mint -C`), under the lease.
    NoteMinted(Vec<RepositoryName>),
    /// Version 8: the name and public key the server cosigns with (`Reply::Text`: `NAME\tKEY`).
    CosignerKey,
    /// Version 8: the newest checkpoint of an origin the server cosigned (`Reply::Text`).
    SeenCheckpoint(String),
    /// Version 8: cosign a checkpoint, given the events since the one kept (`Reply::Text`).
    Cosign {
        note: String,
        collection_key: String,
        events: Vec<crate::events::StoredEvent>,
    },
    /// Version 9: opens the OCFL storage root at `path` (made by the writer when
    /// missing) for the session's `Ocfl` steps (`Reply::Done`).
    OcflOpen {
        path: PathBuf,
    },
    /// Version 9: one step on the open OCFL root; a file's bytes in the payload.
    Ocfl(OcflCall),
}

/// One step on an OCFL storage root (`store::ocfl::files::RootWrites`), paths
/// relative to the root.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum OcflCall {
    /// A small file whole (`Reply::OcflBytes`).
    ReadSmall(String),
    /// Up to `len` bytes of a file from `offset` (`Reply::OcflBytes`; none past its end).
    ReadRange {
        rel: String,
        offset: u64,
        len: u64,
    },
    SizesUnder(String),
    VersionNumbers(String),
    ObjectDirs,
    /// The payload added to a new file (`first`: made now, and must not exist).
    Append {
        rel: String,
        first: bool,
    },
    Create(String),
    Replace(String),
    ReplaceUnsynced(String),
    Remove(String),
    RemoveTree(String),
    RenameDir {
        from: String,
        to: String,
    },
    Sync,
    /// Holds the root for writing for the rest of the session.
    Lock,
    ClearObjectLeftovers(String),
    PruneEmptyDirs(String),
    ClearUnfinishedRoot(crate::store::ocfl::files::Unfinished),
}

/// A file's kind as sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WireKind {
    Dir,
    File(u64),
    Other(String),
}

impl From<FileKind> for WireKind {
    fn from(kind: FileKind) -> WireKind {
        match kind {
            FileKind::Dir => WireKind::Dir,
            FileKind::File { size } => WireKind::File(size),
            FileKind::Other(what) => WireKind::Other(what.to_string()),
        }
    }
}

impl From<&WireKind> for FileKind {
    fn from(kind: &WireKind) -> FileKind {
        match kind {
            WireKind::Dir => FileKind::Dir,
            WireKind::File(size) => FileKind::File { size: *size },
            WireKind::Other(what) => FileKind::Other(
                ["symlink", "directory", "FIFO", "socket", "device", "file"]
                    .into_iter()
                    .find(|k| k == what)
                    .unwrap_or("special file"),
            ),
        }
    }
}

/// One entry of a snapshot: the path (or its lossy form) and kind, or why it could not be listed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WireEntry {
    Ok { rel: Result<String, String>, kind: WireKind },
    Err { rel: Option<String>, why: String },
}

impl From<Result<TreeEntry, TreeError>> for WireEntry {
    fn from(entry: Result<TreeEntry, TreeError>) -> WireEntry {
        match entry {
            Ok(e) => WireEntry::Ok { rel: e.rel, kind: e.kind.into() },
            Err(e) => WireEntry::Err { rel: e.rel, why: e.why },
        }
    }
}

impl From<&WireEntry> for Result<TreeEntry, TreeError> {
    fn from(entry: &WireEntry) -> Self {
        match entry {
            WireEntry::Ok { rel, kind } => Ok(TreeEntry { rel: rel.clone(), kind: kind.into() }),
            WireEntry::Err { rel, why } => Err(TreeError { rel: rel.clone(), why: why.clone() }),
        }
    }
}

/// A small file sent whole: its path, length and modification time.
pub type Content = (String, u64, Option<(i64, u32)>);

/// A bag as listed by the server; the payload holds `contents`' bytes in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    pub root: Result<WireKind, String>,
    pub entries: Vec<WireEntry>,
    /// Small files sent whole: path, length, modification time.
    pub contents: Vec<Content>,
    /// Digests already known (taken on arrival), by path.
    pub digests: Vec<(String, Digests)>,
}

/// What verifying an item on the server found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireCheck {
    pub problems: Vec<Problem>,
    pub info: Option<BagInfo>,
    pub files: u64,
    pub bytes: u64,
    /// Problems of the identifiers and the alias.
    pub identifiers: Vec<Problem>,
}

/// A walk's entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WireListed {
    Item(RepositoryName),
    Stray { place: String, why: String },
}

impl From<Listed> for WireListed {
    fn from(listed: Listed) -> WireListed {
        match listed {
            Listed::Item(name) => WireListed::Item(name),
            Listed::Stray { place, why } => WireListed::Stray { place, why },
        }
    }
}

impl From<WireListed> for Listed {
    fn from(listed: WireListed) -> Listed {
        match listed {
            WireListed::Item(name) => Listed::Item(name),
            WireListed::Stray { place, why } => Listed::Stray { place, why },
        }
    }
}

/// What the server answers. A stream (walk, records, a file) is several replies
/// with one id, ended by `End` (or an `Error`).
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Done,
    End,
    Error(WireError),
    /// The collection's config (TOML) and its location as the server names it.
    Opened {
        config: String,
        location: String,
    },
    Listed(Vec<WireListed>),
    Slot(WireSlot),
    Slots(Vec<WireSlot>),
    Name(Option<RepositoryName>),
    Aliases(Vec<(Ibip, RepositoryName)>),
    Text(Option<String>),
    Snapshot(Snapshot),
    Bundle(Vec<(RepositoryName, Snapshot)>),
    Digests(Digests),
    /// A file's modification time; its bytes follow in `Data` replies.
    FileStart(Option<(i64, u32)>),
    Data,
    Identities(Vec<Result<String, WireError>>),
    /// The configuration's TOML text.
    Config(String),
    Problems(Vec<Problem>),
    Inventory {
        id: Option<String>,
        present: bool,
    },
    Records(Vec<Option<ItemRecord>>),
    /// Minted dates, as decimal seconds.
    Minted(Vec<String>),
    /// A date, as decimal seconds, or none.
    Date(Option<String>),
    Minting(Minting),
    Placed(Vec<(RepositoryName, Option<WireError>)>),
    Checked(WireCheck),
    Events(Option<Vec<crate::events::StoredEvent>>),
    FixityChecks(Option<Vec<crate::store::inventory::FixityCheck>>),
    /// What the server's own chain check found; `None`: it keeps no log.
    Chain(Option<crate::events::ChainOutcome>),
    /// Version 9: whether the OCFL file was there; its bytes in the payload.
    OcflBytes(bool),
    OcflSizes(std::collections::BTreeMap<String, u64>),
    OcflNumbers(Vec<u32>),
    OcflNames(Vec<String>),
    OcflYes(bool),
}

/// A slot as sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WireSlot {
    Empty,
    Item,
    Foreign(String),
}

impl From<Slot> for WireSlot {
    fn from(slot: Slot) -> WireSlot {
        match slot {
            Slot::Empty => WireSlot::Empty,
            Slot::Item => WireSlot::Item,
            Slot::Foreign(place) => WireSlot::Foreign(place),
        }
    }
}

impl From<WireSlot> for Slot {
    fn from(slot: WireSlot) -> Slot {
        match slot {
            WireSlot::Empty => Slot::Empty,
            WireSlot::Item => Slot::Item,
            WireSlot::Foreign(place) => Slot::Foreign(place),
        }
    }
}

/// An error as it crosses: the variants callers tell apart keep their shape; the
/// rest keep their class (and so the exit code) and their message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WireError {
    Locked {
        path: PathBuf,
        #[serde(default)]
        holder: Option<String>,
    },
    AlreadyExists {
        path: PathBuf,
    },
    NotFound {
        what: String,
        name: String,
        place: PathBuf,
    },
    Invalid {
        what: String,
        problem: String,
    },
    Data {
        what: String,
        problem: String,
    },
    Withdrawn {
        name: String,
        date: String,
        reason: String,
    },
    Refused {
        what: String,
        why: String,
    },
    NotMinting {
        place: String,
        why: String,
    },
    Other {
        class: WireClass,
        message: String,
    },
}

/// An error's class as sent.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum WireClass {
    Input,
    Data,
    Operational,
    Busy,
}

impl From<&Error> for WireError {
    fn from(error: &Error) -> WireError {
        match error {
            Error::Locked { path, holder } => WireError::Locked { path: path.clone(), holder: holder.clone() },
            Error::AlreadyExists { path } => WireError::AlreadyExists { path: path.clone() },
            Error::NotFound { what, name, place } => {
                WireError::NotFound { what: what.to_string(), name: name.clone(), place: place.clone() }
            }
            Error::Invalid { what, problem } => WireError::Invalid { what: what.clone(), problem: problem.clone() },
            Error::Data { what, problem } => WireError::Data { what: what.clone(), problem: problem.clone() },
            Error::Withdrawn { name, date, reason } => {
                WireError::Withdrawn { name: name.clone(), date: date.clone(), reason: reason.clone() }
            }
            Error::Refused { what, why } => WireError::Refused { what: what.clone(), why: why.clone() },
            Error::NotMinting { place, why } => WireError::NotMinting { place: place.clone(), why: why.clone() },
            other => {
                let class = match other.class() {
                    ErrorClass::Input => WireClass::Input,
                    ErrorClass::Data => WireClass::Data,
                    ErrorClass::Operational => WireClass::Operational,
                    ErrorClass::Busy => WireClass::Busy,
                };
                WireError::Other { class, message: other.to_string() }
            }
        }
    }
}

impl WireError {
    /// The error on this side; `place` names the far collection for errors that lost their shape.
    pub fn into_error(self, place: &str) -> Error {
        match self {
            WireError::Locked { path, holder } => Error::Locked { path, holder },
            WireError::AlreadyExists { path } => Error::AlreadyExists { path },
            WireError::NotFound { what, name, place } => {
                let what = ["item", "collection", "file", "alias", "staged item"]
                    .into_iter()
                    .find(|w| *w == what)
                    .unwrap_or("entry");
                Error::NotFound { what, name, place }
            }
            WireError::Invalid { what, problem } => Error::Invalid { what, problem },
            WireError::Data { what, problem } => Error::Data { what, problem },
            WireError::Withdrawn { name, date, reason } => Error::Withdrawn { name, date, reason },
            WireError::Refused { what, why } => Error::Refused { what, why },
            WireError::NotMinting { place, why } => Error::NotMinting { place, why },
            WireError::Other { class, message } => {
                let class = match class {
                    WireClass::Input => ErrorClass::Input,
                    WireClass::Data => ErrorClass::Data,
                    WireClass::Operational => ErrorClass::Operational,
                    WireClass::Busy => ErrorClass::Busy,
                };
                Error::Far { place: place.to_string(), class, message }
            }
        }
    }
}

/// A modification time as sent: seconds and nanoseconds since the epoch.
pub fn mtime_to_wire(time: Option<std::time::SystemTime>) -> Option<(i64, u32)> {
    let since = time?.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some((since.as_secs() as i64, since.subsec_nanos()))
}

/// A modification time as received.
pub fn mtime_from_wire(time: Option<(i64, u32)>) -> Option<std::time::SystemTime> {
    let (secs, nanos) = time?;
    let secs = u64::try_from(secs).ok()?;
    Some(std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greeting_is_found_after_a_banner() {
        let mut input = io::Cursor::new(b"Welcome to lab!\nlast login\nIBI-SERVE 1 3\n".to_vec());
        assert!(matches!(read_greeting(&mut input).unwrap(), Greeted::Versions(1, 3)));
    }

    #[test]
    fn no_greeting_reports_what_came_instead() {
        let mut input = io::Cursor::new(b"bash: ibi: command not found\n".to_vec());
        match read_greeting(&mut input).unwrap() {
            Greeted::Missing(text) => assert_eq!(text, "bash: ibi: command not found"),
            Greeted::Versions(..) => panic!("no greeting was sent"),
        }
    }

    #[test]
    fn versions_agree_on_the_highest_common_one() {
        assert_eq!(common_version((1, 3), (2, 5)), Some(3));
        assert_eq!(common_version((1, 1), (2, 2)), None);
    }

    #[test]
    fn frames_round_trip() {
        let mut bytes = Vec::new();
        write_frame(&mut bytes, 7, &Request::Slot(RepositoryName::parse("a.b/c/2009/02.16.17.46").unwrap()), b"xy")
            .unwrap();
        let frame = read_frame(&mut io::Cursor::new(bytes)).unwrap().unwrap();
        assert_eq!((frame.id, frame.payload.as_slice()), (7, &b"xy"[..]));
        assert!(
            matches!(decode::<Request>(&frame).unwrap(), Request::Slot(n) if n.to_string() == "a.b/c/2009/02.16.17.46")
        );
    }

    #[test]
    fn a_truncated_frame_is_an_error_not_an_end() {
        let mut bytes = Vec::new();
        write_frame(&mut bytes, 1, &Request::Walk, b"").unwrap();
        bytes.truncate(bytes.len() - 1);
        assert!(read_frame(&mut io::Cursor::new(bytes)).is_err());
    }
}
