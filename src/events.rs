//! The event log's format (ARCHITECTURE.md, "The event log"): what happened to a
//! collection and its items, one event per action or check, each bound to the
//! one before it by a hash chain. An event is stored as its canonical body (the
//! compact JSON of `Event`, fields in the order declared here) and the SHA-256
//! of that body; the body holds its position (`seq`, from 1) and the previous
//! event's hash (`prev`, 64 zeros for the first), so an edited, removed,
//! inserted or reordered event breaks the chain at that place (`check_chain`).
//! Stores keep the log (`Ledger::events`) and append to it in the same durable
//! step as the change each event records; this module owns only the format, the
//! agent of this process and the chain check.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::fsx::hash_bytes;

/// The `prev` of the first event of a log begun before logs were bound to
/// their collection (and of a backend's log that keeps no id).
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The `prev` of the first event of the log of the collection `id`: the
/// SHA-256 of `ibi log of ` and the id, so that the log of another collection
/// put in its place breaks the chain at event 1.
pub fn genesis(collection_id: &str) -> String {
    hash_bytes(format!("ibi log of {collection_id}").as_bytes())
}

/// The `prev` of a new log's first event: bound to the collection when it has an id.
pub fn first_prev(collection_id: Option<&str>) -> String {
    collection_id.map_or_else(|| GENESIS.to_string(), genesis)
}

/// What an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    Deposit,
    Update,
    Withdraw,
    CopyIn,
    MirrorIn,
    MigrateIn,
    MigrateOut,
    Repair,
    Retire,
    Handover,
    Fixity,
    Witness,
    /// A name handed out by `ibi mint -C` with no item (yet): logged so that a
    /// minter state restored from a backup never hands it out again.
    Mint,
}

impl EventKind {
    pub const ALL: [EventKind; 13] = [
        EventKind::Deposit,
        EventKind::Update,
        EventKind::Withdraw,
        EventKind::CopyIn,
        EventKind::MirrorIn,
        EventKind::MigrateIn,
        EventKind::MigrateOut,
        EventKind::Repair,
        EventKind::Retire,
        EventKind::Handover,
        EventKind::Fixity,
        EventKind::Witness,
        EventKind::Mint,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Deposit => "deposit",
            EventKind::Update => "update",
            EventKind::Withdraw => "withdraw",
            EventKind::CopyIn => "copy-in",
            EventKind::MirrorIn => "mirror-in",
            EventKind::MigrateIn => "migrate-in",
            EventKind::MigrateOut => "migrate-out",
            EventKind::Repair => "repair",
            EventKind::Retire => "retire",
            EventKind::Handover => "handover",
            EventKind::Fixity => "fixity",
            EventKind::Witness => "witness",
            EventKind::Mint => "mint",
        }
    }

    pub fn parse(text: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// Whether this kind brings an item into the collection where it was not.
    pub fn is_arrival(self) -> bool {
        matches!(self, EventKind::Deposit | EventKind::CopyIn | EventKind::MirrorIn | EventKind::MigrateIn)
    }
}

/// Who acted: the user and host running `ibi`, its version, and for a far
/// session what its key was restricted to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    pub user: String,
    pub host: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restriction: Option<String>,
}

impl Agent {
    /// A one-line name for the agent (`user@host, ibi 1.2.3, append-only key`).
    pub fn label(&self) -> String {
        let mut label = format!("{}@{}, ibi {}", self.user, self.host, self.version);
        if let Some(restriction) = &self.restriction {
            label.push_str(&format!(", {restriction}"));
        }
        label
    }
}

static RESTRICTION: OnceLock<String> = OnceLock::new();

/// Names the restriction of this process's session (a far server's key), once,
/// before its first event.
pub fn set_session_restriction(restriction: String) {
    let _ = RESTRICTION.set(restriction);
}

/// The agent of this process.
/// The name `/etc/passwd` gives `uid`, if it lists it.
fn account_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let listed: u32 = fields.nth(1)?.parse().ok()?;
        (listed == uid && !name.is_empty()).then(|| name.to_string())
    })
}

pub fn this_agent() -> Agent {
    static AGENT: OnceLock<Agent> = OnceLock::new();
    let mut agent = AGENT
        .get_or_init(|| {
            let uid = rustix::process::geteuid().as_raw();
            // The account of the effective uid, as the system names it: `$USER`
            // is whatever the caller's environment says (unset under cron and
            // ssh commands), so the log would name an agent by hearsay.
            let user = account_name(uid).unwrap_or_else(|| format!("uid {uid}"));
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "localhost".into());
            Agent { user, host, version: env!("CARGO_PKG_VERSION").into(), restriction: None }
        })
        .clone();
    agent.restriction = RESTRICTION.get().cloned();
    agent
}

/// One event, as its body holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Its place in the log, from 1.
    pub seq: u64,
    /// Unique across collections (a UUID); an event carried to another collection keeps it.
    pub id: String,
    /// When it happened (RFC 3339, UTC).
    pub date: String,
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The item's repository name; none for an event of the whole collection.
    pub item: Option<String>,
    pub agent: Agent,
    /// `success` or `failure` for actions, `pass` or `fail` for fixity checks.
    pub outcome: String,
    pub detail: String,
    /// The collection the event was carried from (by mirror, copy or migrate),
    /// when it happened there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried_from: Option<String>,
    /// The hash of the event before it.
    pub prev: String,
}

impl Event {
    /// An event of this process, now, not yet in a log (`seq` 0, no `prev`).
    pub fn new(kind: EventKind, item: Option<String>, outcome: &str, detail: String) -> Event {
        Event::dated(crate::id::Timestamp::now().to_rfc3339_seconds(), kind, item, outcome, detail)
    }

    /// An event of this process (as `new`) that happened at `date` (RFC 3339).
    pub fn dated(date: String, kind: EventKind, item: Option<String>, outcome: &str, detail: String) -> Event {
        Event {
            seq: 0,
            id: uuid::Uuid::now_v7().urn().to_string(),
            date,
            kind,
            item,
            agent: this_agent(),
            outcome: outcome.into(),
            detail,
            carried_from: None,
            prev: String::new(),
        }
    }

    /// An id that is the same whenever it is made from the same `parts` (a
    /// journalled action and its item), so that a replay logs nothing twice.
    pub fn stable_id(parts: &[&str]) -> String {
        let digest = hash_bytes(parts.join("\n").as_bytes());
        let hex = &digest[..32];
        let hex = format!("{}8{}{}", &hex[..12], &hex[13..16], &hex[16..]);
        format!("urn:uuid:{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
    }

    /// A stable id (as `stable_id`) whose first 48 bits are `began`, the Unix
    /// time in milliseconds its step began, as a UUIDv7's are: the ids of one
    /// step sort together and after earlier steps', so a log's unique index on
    /// ids grows at its end instead of taking each id at a random place (a
    /// page written per id). The other 74 bits are the hash of `parts`; the
    /// version is 8 (custom).
    pub fn stable_id_at(began: u64, parts: &[&str]) -> String {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(parts.join("\n").as_bytes());
        let mut bytes = [0u8; 16];
        bytes[..6].copy_from_slice(&began.to_be_bytes()[2..]);
        bytes[6..].copy_from_slice(&digest[..10]);
        uuid::Builder::from_custom_bytes(bytes).into_uuid().urn().to_string()
    }

    /// Puts the event at `seq` after `prev`: its stored body and hash.
    pub fn seal(mut self, seq: u64, prev: &str) -> StoredEvent {
        self.seq = seq;
        self.prev = prev.to_string();
        let body = serde_json::to_string(&self).expect("an event serialises");
        let hash = hash_bytes(body.as_bytes());
        StoredEvent { seq, body, hash }
    }
}

/// An event as a store keeps it: its place, its canonical body and that body's hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredEvent {
    pub seq: u64,
    pub body: String,
    pub hash: String,
}

impl StoredEvent {
    /// Its body's place and previous hash.
    fn link(&self) -> Result<Link<'_>, String> {
        serde_json::from_str(&self.body).map_err(|e| format!("event {}: its body is not an event ({e})", self.seq))
    }

    /// The event its body holds.
    pub fn event(&self) -> Result<Event, String> {
        serde_json::from_str(&self.body).map_err(|e| format!("event {}: its body is not an event ({e})", self.seq))
    }
}

/// The two fields of an event's body that link it into its log, read without
/// making the rest's Strings: a chain check reads every event logged since the
/// last, and parsing whole events was a third of its time. Whether a body holds a
/// whole event is not the chain's question: a body is sealed by its hash, so one
/// that is linked but malformed was written by whoever could also have written a
/// well-formed forgery.
#[derive(Deserialize)]
struct Link<'a> {
    seq: u64,
    #[serde(borrow)]
    prev: std::borrow::Cow<'a, str>,
}

/// Walks a log in order, checking each link: the first break, as a sentence.
/// A check may start mid-log (`ChainCheck::after`): the event before its first
/// is read only for its hash, which it must still match.
#[derive(Debug, Default)]
pub struct ChainCheck {
    /// The events before the first this check links (its lead-in's place).
    base: u64,
    /// How many events were checked.
    count: u64,
    prev: Option<String>,
    /// The event a mid-log check reads first, only for its hash.
    lead_in: Option<u64>,
    broken: Option<String>,
    /// The place of the first break.
    broken_at: u64,
    /// Events that must still hold the hashes seen earlier.
    pins: Vec<Pin>,
    /// The `prev` the first event must hold (`genesis` of the collection's id);
    /// `None`: any log's first event is taken.
    genesis: Option<String>,
    /// The first event held `GENESIS`: a log begun before logs were bound.
    unbound: bool,
}

/// A log's head as a signed witness saw it: the log must still hold that event.
#[derive(Debug, Clone)]
pub struct Anchor {
    pub seq: u64,
    pub hash: String,
    /// The witness's date, for the message.
    pub signed: String,
}

/// An event a check must find unchanged, and who saw it.
#[derive(Debug, Clone)]
struct Pin {
    seq: u64,
    hash: String,
    /// The witness's date; `None`: the last chain check.
    signed: Option<String>,
}

impl Pin {
    fn what(&self) -> String {
        match &self.signed {
            Some(date) => format!("the event the witness of {date} signed as the log's last"),
            None => "the event the last chain check of this log ended at".to_string(),
        }
    }

    fn tail_removed(&self, last: u64) -> String {
        match &self.signed {
            Some(date) => format!(
                "the log ends at event {last}, but the witness of {date} signed a log of {} events: its tail was removed",
                self.seq
            ),
            None => format!(
                "the log ends at event {last}, but the last chain check read it through event {}: its tail was removed",
                self.seq
            ),
        }
    }
}

/// Where the last chain check of a log stopped, kept by its store between
/// checks, so that the next reads only the events logged since and a window of
/// older ones (`crate::ops::log::check_chain`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainCursor {
    /// The last event checked, and its hash then.
    pub through: u64,
    pub hash: String,
    /// Where the next window of older events starts (from 1).
    pub window_next: u64,
}

/// What a chain check found: the log's length, how many events it read, and the first break.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainOutcome {
    pub events: u64,
    pub checked: u64,
    pub broken: Option<String>,
    /// Why where the check ended was not kept (the next check reads more of
    /// the log, nothing else is lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unkept: Option<String>,
}

impl ChainCheck {
    /// A check that also holds the log to `anchor`: the event it names must be
    /// there, unchanged, so that a log cut short (its tail removed, which leaves
    /// the chain that remains whole) or rewritten since is seen.
    pub fn anchored(anchor: Anchor) -> ChainCheck {
        let mut check = ChainCheck::default();
        check.pin_anchor(anchor);
        check
    }

    /// A check of the events after `lead_in`, which is read first for its hash
    /// only (`0`: from the first event).
    pub fn after(lead_in: u64) -> ChainCheck {
        ChainCheck { base: lead_in, lead_in: (lead_in > 0).then_some(lead_in), ..ChainCheck::default() }
    }

    /// Holds the log to the collection `id`: its first event must follow the
    /// collection's `genesis` (or `GENESIS`, a log begun before logs were bound,
    /// which `unbound` then says).
    pub fn bind_to(&mut self, collection_id: &str) {
        self.genesis = Some(genesis(collection_id));
    }

    /// Whether the log's first event was read and follows `GENESIS`, not its
    /// collection's genesis: a log begun before logs were bound to their collection.
    pub fn unbound(&self) -> bool {
        self.unbound
    }

    /// Holds the log to a witness's head as well.
    pub fn pin_anchor(&mut self, anchor: Anchor) {
        self.pins.push(Pin { seq: anchor.seq, hash: anchor.hash, signed: Some(anchor.signed) });
    }

    /// Holds the log to where the last check ended: that event must be unchanged.
    pub fn pin_cursor(&mut self, cursor: &ChainCursor) {
        self.pins.push(Pin { seq: cursor.through, hash: cursor.hash.clone(), signed: None });
    }

    /// Ends the walk: a log shorter than an event pinned lost its tail.
    pub fn end(&mut self) {
        let last = self.last_seq();
        if self.broken.is_some() {
            return;
        }
        let (at, broken) = match self.lead_in {
            Some(lead_in) => (lead_in, Some(format!("the log ends before event {lead_in}: its tail was removed"))),
            None => match self.pins.iter().find(|pin| pin.seq > last) {
                Some(pin) => (pin.seq, Some(pin.tail_removed(last))),
                None => (0, None),
            },
        };
        (self.broken_at, self.broken) = (at, broken);
    }

    /// Checks the next stored event; after a break, nothing more is checked.
    pub fn next(&mut self, stored: &StoredEvent) {
        if self.broken.is_some() {
            return;
        }
        self.broken_at = stored.seq;
        if let Some(lead_in) = self.lead_in.take() {
            self.broken = self.lead_in_problem(lead_in, stored).or_else(|| self.pin_problem(stored));
            self.prev = Some(stored.hash.clone());
            return;
        }
        self.count += 1;
        self.broken = self.link_problem(stored).or_else(|| self.pin_problem(stored));
        self.prev = Some(stored.hash.clone());
    }

    fn lead_in_problem(&self, lead_in: u64, stored: &StoredEvent) -> Option<String> {
        if stored.seq != lead_in {
            return Some(format!("event {lead_in} is missing: the next one stored is {}", stored.seq));
        }
        (hash_bytes(stored.body.as_bytes()) != stored.hash)
            .then(|| format!("event {}: its content does not match its hash (edited)", stored.seq))
    }

    fn pin_problem(&self, stored: &StoredEvent) -> Option<String> {
        let pin = self.pins.iter().find(|p| p.seq == stored.seq && p.hash != stored.hash)?;
        Some(format!("event {}: it is not {} (the log was rewritten since)", stored.seq, pin.what()))
    }

    fn link_problem(&mut self, stored: &StoredEvent) -> Option<String> {
        let expected_seq = self.base + self.count;
        if stored.seq != expected_seq {
            return Some(format!("event {expected_seq} is missing: the next one stored is {}", stored.seq));
        }
        if hash_bytes(stored.body.as_bytes()) != stored.hash {
            return Some(format!("event {}: its content does not match its hash (edited)", stored.seq));
        }
        let link = match stored.link() {
            Ok(link) => link,
            Err(why) => return Some(why),
        };
        if link.seq != stored.seq {
            return Some(format!("event {}: it says it is event {} (moved)", stored.seq, link.seq));
        }
        if self.prev.is_none() {
            return self.first_link_problem(&link.prev);
        }
        let prev = self.prev.as_deref().unwrap_or(GENESIS);
        if link.prev != prev {
            return Some(format!(
                "event {}: it does not follow event {} (its previous hash differs: removed, inserted or reordered)",
                stored.seq,
                stored.seq - 1
            ));
        }
        None
    }

    /// Why the log's first event (whose `prev` is `prev`) does not begin this log.
    fn first_link_problem(&mut self, prev: &str) -> Option<String> {
        if prev == GENESIS {
            self.unbound = self.genesis.is_some();
            return None;
        }
        match &self.genesis {
            Some(genesis) if prev != genesis => Some(
                "event 1: it begins the log of another collection (its previous hash is not this collection's \
                 beginning)"
                    .to_string(),
            ),
            Some(_) => None,
            // A check that knows no collection (its store keeps no id) takes any beginning.
            None => None,
        }
    }

    /// How many events were checked (a lead-in is not).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The place of the last event read.
    pub fn last_seq(&self) -> u64 {
        self.base + self.count
    }

    /// The first break, if any.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// The first break and its place, if any.
    pub fn break_at(&self) -> Option<(u64, &str)> {
        self.broken.as_deref().map(|broken| (self.broken_at, broken))
    }

    /// The hash of the last event read (the log's head).
    pub fn head(&self) -> Option<&str> {
        self.prev.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Event ids are UUIDv7 (time first), so the log's unique index on them
    /// grows at its end instead of taking each new id at a random page.
    #[test]
    fn event_ids_sort_in_the_order_the_events_were_made() {
        let ids: Vec<String> = (0..64)
            .map(|_| {
                std::thread::sleep(std::time::Duration::from_micros(1100));
                Event::new(EventKind::Deposit, None, "success", String::new()).id
            })
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        assert!(ids.iter().all(|id| id.starts_with("urn:uuid:") && id.as_bytes()[23] == b'7'), "{ids:?}");
    }

    fn chain(n: usize) -> Vec<StoredEvent> {
        let mut prev = GENESIS.to_string();
        (1..=n as u64)
            .map(|seq| {
                let stored = Event::new(EventKind::Deposit, Some(format!("a/b/c/{seq}")), "success", String::new())
                    .seal(seq, &prev);
                prev = stored.hash.clone();
                stored
            })
            .collect()
    }

    fn first_break(events: &[StoredEvent]) -> Option<String> {
        let mut check = ChainCheck::default();
        events.iter().for_each(|e| check.next(e));
        check.broken().map(String::from)
    }

    #[test]
    fn an_intact_chain_has_no_break() {
        assert_eq!(first_break(&chain(5)), None);
    }

    #[test]
    fn every_kind_of_tampering_breaks_the_chain_at_its_place() {
        let mut edited = chain(5);
        edited[2].body = edited[2].body.replace("success", "failure");
        assert!(first_break(&edited).unwrap().starts_with("event 3: its content"));
        let mut removed = chain(5);
        removed.remove(1);
        assert!(first_break(&removed).unwrap().starts_with("event 2 is missing"));
        let mut reordered = chain(5);
        reordered.swap(1, 2);
        assert!(first_break(&reordered).unwrap().starts_with("event 2 is missing"));
        // Renumbered to hide a swap, with hashes recomputed: the links still break.
        let mut relinked = chain(5);
        relinked.swap(1, 2);
        for (i, e) in relinked.iter_mut().enumerate() {
            e.seq = i as u64 + 1;
        }
        assert!(first_break(&relinked).unwrap().contains("event 2"));
    }

    /// The chain reads only each body's place and previous hash: they are the
    /// whole event's, and a body resealed to claim another place is "moved".
    #[test]
    fn the_link_read_is_the_whole_events_place_and_previous_hash() {
        for stored in chain(4) {
            let (link, event) = (stored.link().unwrap(), stored.event().unwrap());
            assert_eq!((link.seq, link.prev.as_ref()), (event.seq, event.prev.as_str()));
        }
        let mut moved = chain(3);
        moved[1].body = moved[1].body.replacen("\"seq\":2", "\"seq\":7", 1);
        moved[1].hash = hash_bytes(moved[1].body.as_bytes());
        assert!(
            first_break(&moved).unwrap().starts_with("event 2: it says it is event 7"),
            "{:?}",
            first_break(&moved)
        );
        let mut not_json = chain(2);
        not_json[1].body = "{\"seq\":2".into();
        not_json[1].hash = hash_bytes(not_json[1].body.as_bytes());
        assert!(first_break(&not_json).unwrap().contains("its body is not an event"));
    }

    #[test]
    fn a_stable_id_at_a_time_sorts_by_the_time_and_is_stable() {
        let id = Event::stable_id_at(0x0193_0000_0001, &["place-x", "a/b/c/d"]);
        assert_eq!(id, Event::stable_id_at(0x0193_0000_0001, &["place-x", "a/b/c/d"]));
        assert_ne!(id, Event::stable_id_at(0x0193_0000_0001, &["place-x", "a/b/c/e"]));
        assert!(id.starts_with("urn:uuid:01930000-0001-8"), "the time, then version 8: {id}");
        let later = Event::stable_id_at(0x0193_0000_0002, &["place-a", "a/a/a/a"]);
        assert!(id < later, "a later step's ids sort after: {id} {later}");
        let uuid = uuid::Uuid::parse_str(id.trim_start_matches("urn:uuid:")).unwrap();
        assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
    }

    #[test]
    fn a_stable_id_is_a_uuid_and_stable() {
        let id = Event::stable_id(&["place-x", "a/b/c/d"]);
        assert_eq!(id, Event::stable_id(&["place-x", "a/b/c/d"]));
        assert_ne!(id, Event::stable_id(&["place-y", "a/b/c/d"]));
        assert!(uuid::Uuid::parse_str(id.trim_start_matches("urn:uuid:")).is_ok(), "{id}");
    }
}
