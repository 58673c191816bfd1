//! The `Reporter` trait and its typed `Event`s: how long operations tell the
//! outside world about progress, items, problems and warnings. The library
//! sends events; the binary draws them as progress bars, JSON Lines, or nothing
//! under cron. Events are data, so a far side can forward them unchanged.

use crate::id::minter::Clock;
use crate::id::Timestamp;
use crate::problem::Problem;

/// Which operation a phase belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    Deposit,
    Verify,
    Copy,
    Migrate,
    Mirror,
    Repair,
}

impl Task {
    pub fn as_str(self) -> &'static str {
        match self {
            Task::Deposit => "deposit",
            Task::Verify => "verify",
            Task::Copy => "copy",
            Task::Migrate => "migrate",
            Task::Mirror => "mirror",
            Task::Repair => "repair",
        }
    }
}

/// What happened to one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    Deposited,
    AlreadyDeposited,
    /// Verified with no problem.
    Ok,
    /// Verified, with problems (reported separately).
    Damaged,
    /// The item disappeared while the run went on (moved away by someone else).
    Vanished,
    Unchanged,
    Skipped,
    Copied,
    Replaced,
    Migrated,
    WouldCopy,
    WouldMigrate,
    /// Its copy failed on DST's side (a full disk): the run stops after placing
    /// what was staged, and the item stays where it was.
    NotCopied {
        why: &'a str,
    },
    WouldReplace {
        why: &'a str,
    },
    AliasRestored,
    WouldRestoreAlias,
}

impl Outcome<'_> {
    /// The words used in text and JSON output.
    pub fn describe(self) -> String {
        match self {
            Outcome::Deposited => "deposited".into(),
            Outcome::AlreadyDeposited => "already deposited".into(),
            Outcome::Ok => "ok".into(),
            Outcome::Damaged => "damaged".into(),
            Outcome::Vanished => "vanished (moved away during the run)".into(),
            Outcome::Unchanged => "unchanged".into(),
            Outcome::Skipped => "skipped".into(),
            Outcome::Copied => "copied".into(),
            Outcome::Replaced => "replaced".into(),
            Outcome::Migrated => "migrated".into(),
            Outcome::WouldCopy => "would copy".into(),
            Outcome::WouldMigrate => "would migrate".into(),
            Outcome::NotCopied { why } => format!("not copied: {why}"),
            Outcome::WouldReplace { why } => format!("would replace ({why})"),
            Outcome::AliasRestored => "alias restored".into(),
            Outcome::WouldRestoreAlias => "would restore the alias".into(),
        }
    }
}

/// One thing an operation reports.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A phase starts.
    Begin(Task),
    /// More work became known: items and payload bytes to add to the totals.
    Found {
        items: u64,
        bytes: u64,
    },
    /// Bytes were read or copied (many times within a large file).
    Bytes(u64),
    /// One item finished. The name is rendered only by a reporter that shows
    /// it: a quiet no-op mirror settles every item, and writing each name out
    /// for nobody cost it more than comparing the two copies.
    Item {
        name: ItemName<'a>,
        outcome: Outcome<'a>,
    },
    Problem(&'a Problem),
    Warning(&'a str),
    /// The minter waits for its clock to pass the last name's time (coarse granularity).
    WaitingForMinter {
        seconds: f64,
    },
    /// The phase ends.
    End,
}

/// An item's name in an event, written out only by a reporter that shows it.
#[derive(Clone, Copy)]
pub struct ItemName<'a>(pub &'a dyn std::fmt::Display);

impl std::fmt::Display for ItemName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Debug for ItemName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0.to_string())
    }
}

/// Receives events from operations.
pub trait Reporter: Send + Sync {
    fn report(&self, event: Event<'_>);

    /// Whether totals are worth a survey ahead of the work (`Event::Found`): true
    /// when someone watches a progress bar, false under cron.
    fn wants_totals(&self) -> bool {
        false
    }

    fn begin(&self, task: Task) {
        self.report(Event::Begin(task));
    }
    fn found(&self, items: u64, bytes: u64) {
        self.report(Event::Found { items, bytes });
    }
    fn bytes(&self, n: u64) {
        self.report(Event::Bytes(n));
    }
    fn item(&self, name: &dyn std::fmt::Display, outcome: Outcome<'_>) {
        self.report(Event::Item { name: ItemName(name), outcome });
    }
    fn problem(&self, problem: &Problem) {
        self.report(Event::Problem(problem));
    }
    fn warning(&self, message: &str) {
        self.report(Event::Warning(message));
    }
    fn end(&self) {
        self.report(Event::End);
    }
}

/// A clock that says so before a wait of a second or more: at coarse granularity
/// (60 s) the minter may wait most of a minute for the next free name.
pub struct NoticedClock<'a> {
    pub clock: &'a dyn Clock,
    pub reporter: &'a dyn Reporter,
}

impl Clock for NoticedClock<'_> {
    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn sleep_until(&self, until: Timestamp) {
        let seconds = (until.nanos() - self.clock.now().nanos()) as f64 / 1e9;
        if seconds >= 1.0 {
            self.reporter.report(Event::WaitingForMinter { seconds });
        }
        self.clock.sleep_until(until);
    }
}

/// Counts the problems an operation reports (any makes the run exit 1).
#[derive(Debug, Default)]
pub struct ProblemCount(std::sync::atomic::AtomicU64);

impl ProblemCount {
    /// Counts `problem` and hands it to the reporter.
    pub fn report(&self, reporter: &dyn Reporter, problem: &Problem) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        reporter.problem(problem);
    }

    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A reporter that reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Reporter for Silent {
    fn report(&self, _event: Event<'_>) {}
}
