//! What every backend logs for the changes it makes (ARCHITECTURE.md, "The
//! event log"): the `Action` a placement carries from the operation that made
//! it (its kind, a note, and the item's events carried from the collection it
//! came from), and the events a placed or removed item gets, built from its
//! record. A backend appends them in the same durable step as the record.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::events::{Event, EventKind, StoredEvent};
use crate::id::RepositoryName;
use crate::store::config::Minting;
use crate::store::inventory::{ItemRecord, Status};
use crate::store::Store;

/// How many events a page of `Ledger::events` holds at most; a shorter page is the last.
pub const EVENT_PAGE: usize = 1000;

/// How many of an item's events a placement may carry (a hostile peer cannot
/// make a placement arbitrarily large).
pub const MAX_CARRIED: usize = 10_000;

/// What a placement is, for the log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    /// None: a deposit, or an update when it replaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<EventKind>,
    /// Added to the event's detail (`from COLLECTION`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// The item's events in the collection it came from, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<Event>,
}

impl Action {
    pub fn of(kind: EventKind, note: String) -> Action {
        Action { kind: Some(kind), note, carried: Vec::new() }
    }

    /// Whether a replacement of this kind keeps the copy it displaces: one that
    /// brings another collection's copy over this one (a repair, mirror, copy or
    /// migration). An update keeps its earlier versions in the item, and an
    /// upgrade rewrites the same bytes.
    pub fn keeps_what_it_replaces(&self) -> bool {
        use EventKind::*;
        matches!(self.kind, Some(Repair | MirrorIn | CopyIn | MigrateIn))
    }
}

/// What one journalled step (a placed or removed batch, named by its journal
/// record) logs: each item's action. Replaying the step makes the same event ids.
#[derive(Debug, Clone, Default)]
pub struct StepLog {
    pub step: String,
    pub actions: HashMap<RepositoryName, Action>,
}

/// The journal line that keeps an item's action for recovery.
const ACTION_LINE: &str = "#action\t";

impl StepLog {
    pub fn new(step: String, actions: HashMap<RepositoryName, Action>) -> StepLog {
        StepLog { step, actions }
    }

    /// The events of the item placed as `record`.
    pub fn events_of(&self, record: &ItemRecord) -> Vec<Event> {
        let action = self.actions.get(&record.name).cloned().unwrap_or_default();
        placement_events(record, &action, &self.step)
    }

    /// The actions as journal lines (one JSON line each, after the item lines).
    pub fn journal_lines(actions: &HashMap<RepositoryName, Action>) -> String {
        let line = |(name, action): (&RepositoryName, &Action)| {
            format!("{ACTION_LINE}{name}\t{}\n", serde_json::to_string(action).expect("an action serialises"))
        };
        actions.iter().map(line).collect()
    }

    /// The step a journal record named `step` holding `text` describes.
    pub fn from_journal(step: String, text: &str) -> StepLog {
        let actions = text
            .lines()
            .filter_map(|line| line.strip_prefix(ACTION_LINE)?.split_once('\t'))
            .filter_map(|(name, json)| Some((RepositoryName::parse(name).ok()?, serde_json::from_str(json).ok()?)))
            .collect();
        StepLog { step, actions }
    }
}

/// The events of each of `names` in `store`'s log (one `Ledger::items_events`
/// for them all), marked as carried from it, to go with the items to another
/// collection: what was done to each. Their fixity checks stay: they are
/// evidence about the copy they checked, and the copy that arrives gets its own.
pub fn carried_events(store: &dyn Store, names: &[RepositoryName]) -> Result<Vec<Vec<Event>>> {
    let from = store.inventory().collection_id().unwrap_or_else(|| store.location());
    let stored = store.ledger().items_events(names)?;
    if stored.len() != names.len() {
        let problem = format!("asked for the events of {} items, it answered for {}", names.len(), stored.len());
        return Err(Error::Data { what: format!("the log of {}", store.location()), problem });
    }
    let carry = |(name, stored): (&RepositoryName, Vec<StoredEvent>)| -> Result<Vec<Event>> {
        let mut carried = Vec::with_capacity(stored.len());
        for stored in stored.iter().take(MAX_CARRIED) {
            let event =
                stored.event().map_err(|problem| Error::Data { what: format!("the log of {name}"), problem })?;
            if event.kind != EventKind::Fixity {
                carried
                    .push(Event { carried_from: event.carried_from.clone().or_else(|| Some(from.clone())), ..event });
            }
        }
        Ok(carried)
    };
    names.iter().zip(stored).map(carry).collect()
}

/// The events of an item placed as `record` by `action` (one journalled step
/// named `step`): the carried events first (marked as carried, from another
/// collection when they do not say which), then the placement's own event.
pub fn placement_events(record: &ItemRecord, action: &Action, step: &str) -> Vec<Event> {
    let name = record.name.to_string();
    let mut kind = action.kind.unwrap_or(EventKind::Deposit);
    if kind == EventKind::Update && record.status == Status::Withdrawn {
        kind = EventKind::Withdraw;
    }
    let version = record.current();
    let mut detail = match (&record.withdrawn, kind) {
        (Some(w), EventKind::Withdraw) => format!("version {}, withdrawn: {}", version.number, w.reason),
        _ => format!("version {}, identity {}", version.number, version.digest),
    };
    if !action.note.is_empty() {
        detail.push_str(&format!(", {}", action.note));
    }
    let mut events: Vec<Event> = action
        .carried
        .iter()
        .filter(|e| e.item.as_deref() == Some(name.as_str()))
        .take(MAX_CARRIED)
        .map(|e| Event {
            carried_from: e.carried_from.clone().or_else(|| Some("another collection".into())),
            ..e.clone()
        })
        .collect();
    let mut own = Event::new(kind, Some(name.clone()), "success", detail);
    own.id = step_event_id(step, &name, kind);
    events.push(own);
    events
}

/// The event of an item taken away by migrate (its record notes where to).
pub fn removal_event(name: &RepositoryName, record: Option<&ItemRecord>, step: &str) -> Event {
    let detail = match record.and_then(|r| r.moved.as_ref()) {
        Some(to) => format!("to {}", to.to),
        None => "removed".to_string(),
    };
    let mut event = Event::new(EventKind::MigrateOut, Some(name.to_string()), "success", detail);
    event.id = step_event_id(step, &name.to_string(), EventKind::MigrateOut);
    event
}

/// The id of the `kind` event of item `name` in the journalled step `step`: the
/// same whenever the step is replayed. A step whose name carries the time it
/// began (`step_began`) gets ids in time order; one named before that (by an
/// earlier ibi) keeps the ids that ibi gave it, so a replay still finds them.
fn step_event_id(step: &str, name: &str, kind: EventKind) -> String {
    let parts = [step, name, kind.as_str()];
    match step_began(step) {
        Some(began) => Event::stable_id_at(began, &parts),
        None => Event::stable_id(&parts),
    }
}

/// The Unix time in milliseconds a step began, when its name carries it as
/// `-t` and twelve hex digits, then `-` (a local journal record,
/// `place-t0193a0b1c2d3-…`; an S3 stage token is hex alone and carries none).
pub fn step_began(step: &str) -> Option<u64> {
    let (_, rest) = step.split_once("-t")?;
    let hex = rest.get(..12).filter(|_| rest.as_bytes().get(12) == Some(&b'-'))?;
    hex.bytes().all(|b| b.is_ascii_hexdigit()).then(|| u64::from_str_radix(hex, 16).ok()).flatten()
}

/// The part of a step's name that carries the time it began, for `step_began`.
pub fn step_time_mark(began: u64) -> String {
    format!("t{:012x}-", began & 0xffff_ffff_ffff)
}

/// The event of a change in the collection's part in minting (`retire`,
/// `handover`); none when nothing changed.
pub fn minting_event(before: &Minting, after: &Minting) -> Option<Event> {
    if before == after {
        return None;
    }
    let (kind, detail) = match after {
        Minting::Retired(None) => (EventKind::Retire, "retired: it mints no more names".to_string()),
        Minting::Retired(Some(next)) => {
            (EventKind::Handover, format!("handed minting over to {} ({})", next.location, next.id))
        }
        Minting::Mints => (EventKind::Handover, "took over minting its subsystem's names".to_string()),
        Minting::Follows(peer) => (EventKind::Handover, format!("follows {} ({})", peer.location, peer.id)),
    };
    Some(Event::new(kind, None, "success", detail))
}

/// The event of a name handed out with no item (`ibi mint -C`).
pub fn mint_event(name: &RepositoryName) -> Event {
    Event::new(EventKind::Mint, Some(name.to_string()), "success", "handed out with no item".into())
}

/// The event of a witness just kept (`ops::witness`'s JSON): its root and size.
pub fn witness_event(json: &str) -> Event {
    let value: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let detail = format!(
        "root {} over {} items, signed by {}",
        value["root"].as_str().unwrap_or("?"),
        value["items"].as_u64().unwrap_or(0),
        value["public_key"].as_str().unwrap_or("?")
    );
    Event::new(EventKind::Witness, None, "success", detail)
}

/// The action a server logs for a placement a client asked for: the client's
/// kind only where it fits the placement (an arrival never replaces), a short
/// note, and a bounded history, every carried event marked as carried.
pub fn admitted_action(asked: Action, replace: bool) -> Action {
    let fallback = if replace { EventKind::Update } else { EventKind::Deposit };
    let fits = |kind: EventKind| match replace {
        false => kind.is_arrival(),
        true => matches!(kind, EventKind::Update | EventKind::MirrorIn | EventKind::Repair | EventKind::CopyIn),
    };
    let kind = asked.kind.filter(|k| fits(*k)).unwrap_or(fallback);
    let note: String = asked.note.chars().filter(|c| !c.is_control()).take(300).collect();
    let carried = asked
        .carried
        .into_iter()
        .take(MAX_CARRIED)
        .map(|e| Event { carried_from: e.carried_from.or_else(|| Some("another collection".into())), ..e })
        .collect();
    Action { kind: Some(kind), note, carried }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a hostile far client may ask of the server's log: a kind that does
    /// not fit the placement, a note with control characters, an unbounded
    /// history of events that pretend to be the server's own.
    #[test]
    fn a_far_clients_action_is_admitted_only_as_far_as_it_fits() {
        let forged = Event::new(EventKind::Deposit, Some("a.b/c/2020/01.01.00.00.00".into()), "success", "x".into());
        let asked = Action {
            kind: Some(EventKind::Repair),
            note: "from\nsomewhere\u{1b}[31m".into(),
            carried: vec![forged; MAX_CARRIED + 5],
        };
        let admitted = admitted_action(asked.clone(), false);
        assert_eq!(admitted.kind, Some(EventKind::Deposit), "a repair never arrives where nothing was");
        assert_eq!(admitted.note, "fromsomewhere[31m");
        assert_eq!(admitted.carried.len(), MAX_CARRIED);
        assert!(admitted.carried.iter().all(|e| e.carried_from.is_some()), "carried events never pass as its own");
        let replacing = Action { kind: Some(EventKind::Deposit), ..asked };
        assert_eq!(admitted_action(replacing, true).kind, Some(EventKind::Update), "a replacement is no deposit");
        let fits = Action::of(EventKind::MirrorIn, String::new());
        assert_eq!(admitted_action(fits, true).kind, Some(EventKind::MirrorIn));
    }

    /// A step named by this ibi carries its time and its events' ids sort by
    /// it; a step named by an earlier ibi keeps the ids that ibi made, so a
    /// replay of its journal record after an upgrade still finds them logged.
    #[test]
    fn a_steps_time_orders_its_ids_and_an_older_step_keeps_its_own() {
        let began = 0x0193_a0b1_c2d3;
        let step = format!("place-{}0123456789abcdef-42-7", step_time_mark(began));
        assert_eq!(step_began(&step), Some(began));
        assert!(step_event_id(&step, "a/b/c/d", EventKind::Deposit).starts_with("urn:uuid:0193a0b1-c2d3-8"));
        let older = "place-0123456789abcdef-42-7";
        assert_eq!(step_began(older), None);
        assert_eq!(
            step_event_id(older, "a/b/c/d", EventKind::Deposit),
            Event::stable_id(&[older, "a/b/c/d", "deposit"]),
            "the id an earlier ibi gave"
        );
        for not_a_time in ["place-tZZZZZZZZZZZZ-x", "place-t0193a0b1c2d3", "0000000000000abc", "remove-t12-"] {
            assert_eq!(step_began(not_a_time), None, "{not_a_time}");
        }
    }
}
