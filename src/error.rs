//! Typed library errors. Every error names what it concerns: the input text and
//! column for parse errors, the path and the operation for I/O errors, both
//! dates for a clock that runs behind the minter state. The binary turns the
//! `ErrorClass` of an error into an exit code; the library never exits.

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Invalid text: what was being read, the whole input, a 1-based column (in characters)
/// and the problem, e.g. `invalid month "13" at column 28 in repository name "…"`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{problem} at column {column} in {kind} \"{input}\"")]
pub struct ParseError {
    pub kind: &'static str,
    pub input: String,
    pub column: usize,
    pub problem: String,
}

impl ParseError {
    pub fn new(kind: &'static str, input: &str, column: usize, problem: impl Into<String>) -> Self {
        ParseError { kind, input: input.to_string(), column, problem: problem.into() }
    }
}

/// How a failure should be reported to a user: it selects the CLI exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Invalid input or usage (exit 2).
    Input,
    /// The run finished but found problems in data (exit 1).
    Data,
    /// Operational failure: I/O, disk full, permissions, a broken clock (exit 3).
    Operational,
    /// Another process holds a lock (exit 75).
    Busy,
}

#[derive(Debug, Error)]
pub enum Error {
    #[error(transparent)]
    Parse(#[from] ParseError),

    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{} is corrupt: {problem}; fix or remove it by hand (it is never reset silently)", path.display())]
    CorruptState { path: PathBuf, problem: String },

    #[error(
        "clock {clock} is behind the minter state {state}: the next name needs a wait of {wait_seconds} s, more than max_wait {max_wait_seconds} s"
    )]
    ClockBehind { clock: String, state: String, wait_seconds: String, max_wait_seconds: String },

    #[error("cannot encode {what}: {problem}")]
    NotEncodable { what: String, problem: String },

    #[error(
        "{} item(s) are placed and durable ({}) but not yet in the inventory: {cause}; the next writing command \
         records them",
        names.len(),
        names.join(", ")
    )]
    PlacedUnrecorded {
        names: Vec<String>,
        /// Why the inventory could not record them (its class is this error's).
        cause: Box<Error>,
    },

    #[error("{} is locked by {}; try later", path.display(), holder.as_deref().unwrap_or("another run"))]
    Locked {
        path: PathBuf,
        /// Who holds it and since when, when the lock says.
        holder: Option<String>,
    },

    #[error("invalid {what}: {problem}")]
    Invalid { what: String, problem: String },

    /// Something asked for by name that is not there (an item, a collection).
    #[error("{what} {name} is not in {}", place.display())]
    NotFound { what: &'static str, name: String, place: PathBuf },

    /// A place that must be new is taken: ibi never overwrites.
    #[error("{} already exists; refusing to overwrite it", path.display())]
    AlreadyExists { path: PathBuf },

    /// Files or folders a bag cannot hold faithfully, each with why; `symlinks`
    /// says whether following symlinks would admit some of them.
    #[error("cannot bag {}", offenders.join(", "))]
    Unbaggable { offenders: Vec<String>, symlinks: bool },

    /// Watching a folder for changes failed (inotify limits, a vanished folder).
    #[error("cannot watch {}: {problem}", path.display())]
    Watch { path: PathBuf, problem: String },

    /// The item was withdrawn: its name resolves to a tombstone.
    #[error("{name} is withdrawn (on {}): {reason}", to_the_second(date))]
    Withdrawn { name: String, date: String, reason: String },

    /// Damaged data met on the way (a corrupt source bag): the run stops for this item.
    #[error("{what}: {problem}")]
    Data { what: String, problem: String },

    /// A far server refused the request (`ibi serve --read-only`, `--append-only`,
    /// `--restrict-to-path`): what was asked and why not.
    #[error("{what} refused: {why}")]
    Refused { what: String, why: String },

    /// A far collection's error that did not keep its shape on the wire: where, its
    /// class (and so the exit code) and its message.
    #[error("{place}: {message}")]
    Far { place: String, class: ErrorClass, message: String },

    /// A collection that does not mint its subsystem's names was asked for one.
    #[error("{place} mints no names: {why}")]
    NotMinting { place: String, why: String },

    /// The item is no longer here: migrate moved it (or a handover sent the
    /// subsystem's names) to `to` on `date`, reachable at `url` when one was given.
    #[error("{name} is not here: it moved to {to} on {}{}", to_the_second(date), url.as_ref().map_or(String::new(), |u| format!(" ({u}{name})")))]
    Moved { name: String, to: String, date: String, url: Option<String> },

    /// Two collections both mint one subsystem's names (RTC-10 allows one).
    #[error(
        "{first} ({first_id}) and {second} ({second_id}) both mint the names of {subsystem}, and only one may: \
         move minting from one to the other with `ibi handover FROM TO`, or re-create one with \
         `ibi init ROOT --like OTHER`; nothing was changed"
    )]
    TwoMinting { subsystem: String, first: String, first_id: String, second: String, second_id: String },

    /// This run's write lease on a collection in object storage was lost (not
    /// renewed in time, or taken over), so it stopped writing.
    #[error(
        "{place}: this run's write lease was lost: {problem}; it wrote nothing more, and running it again completes it"
    )]
    LeaseLost { place: String, problem: String },

    /// Talking to a far collection failed: the connection, the greeting or the protocol.
    #[error("{place}: {problem}")]
    Connection { place: String, problem: String },
}

impl Error {
    /// An I/O error that names the action and the path.
    pub fn io(action: &'static str, path: impl AsRef<Path>, source: io::Error) -> Self {
        Error::Io { action, path: path.as_ref().to_path_buf(), source }
    }

    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Parse(_)
            | Error::NotEncodable { .. }
            | Error::Invalid { .. }
            | Error::NotFound { .. }
            | Error::Unbaggable { .. }
            | Error::Refused { .. }
            | Error::NotMinting { .. }
            | Error::TwoMinting { .. } => ErrorClass::Input,
            Error::Far { class, .. } => *class,
            Error::PlacedUnrecorded { cause, .. } => cause.class(),
            Error::Connection { .. } => ErrorClass::Operational,
            Error::Io { .. } | Error::CorruptState { .. } | Error::ClockBehind { .. } | Error::Watch { .. } => {
                ErrorClass::Operational
            }
            Error::AlreadyExists { .. } | Error::Data { .. } | Error::Withdrawn { .. } | Error::Moved { .. } => {
                ErrorClass::Data
            }
            Error::Locked { .. } | Error::LeaseLost { .. } => ErrorClass::Busy,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An RFC 3339 date for people: to the second (`…T10:02:06.227811804Z` reads
/// `…T10:02:06Z`); any other text as it is.
pub fn to_the_second(date: &str) -> String {
    match (date.split_once('.'), date.ends_with('Z')) {
        (Some((whole, _)), true) if whole.contains('T') => format!("{whole}Z"),
        _ => date.to_string(),
    }
}

/// Adds the action and path to an `io::Result`, `fs_err` style.
pub trait IoContext<T> {
    fn with_path(self, action: &'static str, path: impl AsRef<Path>) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn with_path(self, action: &'static str, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| Error::io(action, path, e))
    }
}
