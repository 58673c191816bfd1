//! Reading a collection's event log: every event in order (`for_each`), the
//! chain check `verify` makes (`check_chain`), and one item's history as PREMIS
//! 3 XML (`premis`), the data dictionary's element names in the
//! `http://www.loc.gov/premis/v3` namespace, as Archivematica's `metsrw` reads
//! it. The log's format is `crate::events`.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::events::{Agent, ChainCheck, ChainCursor, ChainOutcome, Event, StoredEvent};
use crate::id::RepositoryName;
use crate::ops::handles::xml;
use crate::store::Store;

/// Calls `each` with every stored event (of `item` only when given), in order;
/// `Ok(false)` when the collection keeps no log.
pub fn for_each(
    store: &dyn Store,
    item: Option<&RepositoryName>,
    each: &mut dyn FnMut(&StoredEvent) -> Result<()>,
) -> Result<bool> {
    let mut after = 0;
    let mut keeps = false;
    while let Some(page) = store.ledger().events(item, after)? {
        keeps = true;
        let Some(last) = page.last() else { break };
        after = last.seq;
        page.iter().try_for_each(&mut *each)?;
        if page.len() < crate::store::log::EVENT_PAGE {
            break;
        }
    }
    Ok(keeps)
}

/// The event a stored event holds; an unreadable one is damaged data.
pub fn read(stored: &StoredEvent) -> Result<Event> {
    stored.event().map_err(|problem| Error::Data { what: "the event log".into(), problem })
}

/// The fewest older events a chain check reads besides those logged since the
/// last check: a log this long or shorter is read whole every time.
pub const CHAIN_WINDOW_LEAST: u64 = 100_000;

/// Checks the log's chain, and that it still holds the last event the latest
/// witness signed; `None` when the collection keeps no log.
///
/// The first check reads the whole log. Each later one reads the events logged
/// since the last ended (which must be unchanged), from the witness's head if
/// that is earlier, and a window of older events: at least `least_window` and
/// twice the new ones, taken in turn from the start of the log, so that every
/// link is read again within a cycle while a check costs a bounded multiple of
/// what was logged since the last one. Where a check ended is kept only when it
/// found no break, so a break stays reported until it is mended.
pub fn check_chain(store: &dyn Store, least_window: u64) -> Result<Option<ChainOutcome>> {
    if store.ledger().checks_own_chain() {
        return store.ledger().check_own_chain();
    }
    let anchor = crate::ops::witness::latest(store)?.and_then(|w| w.log_anchor());
    let Some(cursor) = store.ledger().chain_cursor()?.filter(|c| c.through > 0) else {
        return check_whole(store, anchor);
    };
    // The new events, from the earlier of the last check's end and the witness's head.
    let signed = anchor.as_ref().filter(|a| a.seq > 0);
    let lead_in = signed.map_or(cursor.through, |a| a.seq.min(cursor.through));
    let mut new = ChainCheck::after(lead_in);
    new.pin_cursor(&cursor);
    if let Some(anchor) = anchor {
        new.pin_anchor(anchor);
    }
    check_range(store, &mut new, None)?;
    let older = lead_in;
    let window = least_window.max(2 * new.count()).max(1);
    let start = if cursor.window_next > older { 1 } else { cursor.window_next.max(1) };
    let last = start.saturating_add(window - 1).min(older);
    let mut old = ChainCheck::after(start - 1);
    bind(store, &mut old);
    check_range(store, &mut old, Some(last))?;
    let checked = new.count() + old.count();
    let mut outcome = ChainOutcome { events: new.last_seq(), checked, ..ChainOutcome::default() };
    // The first break in the log's order: an insertion shifts every later event.
    let ended_early = (old.last_seq() < last)
        .then(|| format!("the log ends at event {}, before event {last}: its tail was removed", old.last_seq()));
    let breaks = [old.break_at(), ended_early.as_deref().map(|e| (last, e)), new.break_at()];
    outcome.broken = breaks.into_iter().flatten().min_by_key(|(at, _)| *at).map(|(_, why)| why.to_string());
    if outcome.broken.is_none() {
        let window_next = if last >= older { 1 } else { last + 1 };
        outcome.unkept = keep_cursor(store, &new, window_next);
    }
    Ok(Some(outcome))
}

/// `check_chain` with the usual window: what a far server runs for its clients (`ServeOptions::chain_check`).
pub fn check_chain_here(store: &dyn Store) -> Result<Option<ChainOutcome>> {
    check_chain(store, CHAIN_WINDOW_LEAST)
}

/// Reads the whole log checking its chain (`audit --ndsa`, and a first check).
pub fn check_whole(store: &dyn Store, anchor: Option<crate::events::Anchor>) -> Result<Option<ChainOutcome>> {
    let mut check = anchor.map_or_else(ChainCheck::default, ChainCheck::anchored);
    bind(store, &mut check);
    let keeps = for_each(store, None, &mut |stored| {
        check.next(stored);
        Ok(())
    })?;
    check.end();
    if !keeps {
        return Ok(None);
    }
    let broken = check.broken().map(str::to_string);
    let unkept = if broken.is_none() && check.count() > 0 { keep_cursor(store, &check, 1) } else { None };
    Ok(Some(ChainOutcome { events: check.last_seq(), checked: check.count(), broken, unkept }))
}

/// Holds `check` to `store`'s collection, when it has an id.
fn bind(store: &dyn Store, check: &mut ChainCheck) {
    if let Some(id) = store.inventory().collection_id() {
        check.bind_to(&id);
    }
}

/// Checks the events `check` starts after, through `last` (or to the log's end).
fn check_range(store: &dyn Store, check: &mut ChainCheck, last: Option<u64>) -> Result<()> {
    let mut after = check.last_seq().saturating_sub(1);
    while let Some(page) = store.ledger().events(None, after)? {
        let Some(tail) = page.last() else { break };
        after = tail.seq;
        for stored in page.iter().take_while(|stored| last.is_none_or(|last| stored.seq <= last)) {
            check.next(stored);
        }
        let past = last.is_some_and(|last| after >= last);
        if page.len() < crate::store::log::EVENT_PAGE || past || check.broken().is_some() {
            break;
        }
    }
    check.end();
    Ok(())
}

/// Keeps where `check` ended (its last event and that event's hash); why not,
/// when the store would not (a read-only key, a store that answers no write).
fn keep_cursor(store: &dyn Store, check: &ChainCheck, window_next: u64) -> Option<String> {
    let hash = check.head()?;
    let cursor = ChainCursor { through: check.last_seq(), hash: hash.to_string(), window_next };
    match store.ledger().writer() {
        Some(writer) => writer.keep_chain_cursor(&cursor).err().map(|e| e.to_string()),
        None => Some("this handle may not write".into()),
    }
}

/// One item's events as a PREMIS 3 document: the object, each event linked to
/// its agent and the object, and each agent once.
pub fn premis(store: &dyn Store, name: &RepositoryName) -> Result<String> {
    let mut events = Vec::new();
    for_each(store, Some(name), &mut |stored| {
        events.push(read(stored)?);
        Ok(())
    })?;
    let mut agents: BTreeMap<String, Agent> = BTreeMap::new();
    for event in &events {
        agents.entry(agent_id(&event.agent)).or_insert_with(|| event.agent.clone());
    }
    let mut out = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<premis:premis xmlns:premis=\"http://www.loc.gov/premis/v3\" \
         xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:schemaLocation=\"http://www.loc.gov/premis/v3 \
         http://www.loc.gov/standards/premis/v3/premis.xsd\" version=\"3.0\">\n",
    );
    out.push_str(&premis_object(name));
    events.iter().for_each(|event| out.push_str(&premis_event(event, name)));
    agents.iter().for_each(|(id, agent)| out.push_str(&premis_agent(id, agent)));
    out.push_str("</premis:premis>\n");
    Ok(out)
}

/// An agent's identifier in PREMIS: its label, which names user, host, version and restriction.
fn agent_id(agent: &Agent) -> String {
    agent.label()
}

fn premis_object(name: &RepositoryName) -> String {
    format!(
        "  <premis:object xsi:type=\"premis:intellectualEntity\" version=\"3.0\">\n    <premis:objectIdentifier>\
         <premis:objectIdentifierType>IBI repository name</premis:objectIdentifierType>\
         <premis:objectIdentifierValue>{}</premis:objectIdentifierValue></premis:objectIdentifier>\n  </premis:object>\n",
        xml(&name.to_string())
    )
}

fn premis_event(event: &Event, name: &RepositoryName) -> String {
    let mut detail = event.detail.clone();
    if let Some(from) = &event.carried_from {
        detail.push_str(&format!(" (carried from {from})"));
    }
    format!(
        "  <premis:event version=\"3.0\">\n    <premis:eventIdentifier><premis:eventIdentifierType>UUID\
         </premis:eventIdentifierType><premis:eventIdentifierValue>{id}</premis:eventIdentifierValue>\
         </premis:eventIdentifier>\n    <premis:eventType>{kind}</premis:eventType>\n    \
         <premis:eventDateTime>{date}</premis:eventDateTime>\n    <premis:eventDetailInformation>\
         <premis:eventDetail>{detail}</premis:eventDetail></premis:eventDetailInformation>\n    \
         <premis:eventOutcomeInformation><premis:eventOutcome>{outcome}</premis:eventOutcome>\
         </premis:eventOutcomeInformation>\n    <premis:linkingAgentIdentifier><premis:linkingAgentIdentifierType>\
         ibi agent</premis:linkingAgentIdentifierType><premis:linkingAgentIdentifierValue>{agent}\
         </premis:linkingAgentIdentifierValue></premis:linkingAgentIdentifier>\n    \
         <premis:linkingObjectIdentifier><premis:linkingObjectIdentifierType>IBI repository name\
         </premis:linkingObjectIdentifierType><premis:linkingObjectIdentifierValue>{name}\
         </premis:linkingObjectIdentifierValue></premis:linkingObjectIdentifier>\n  </premis:event>\n",
        id = xml(event.id.trim_start_matches("urn:uuid:")),
        kind = event.kind.as_str(),
        date = xml(&event.date),
        detail = xml(&detail),
        outcome = xml(&event.outcome),
        agent = xml(&agent_id(&event.agent)),
        name = xml(&name.to_string()),
    )
}

fn premis_agent(id: &str, agent: &Agent) -> String {
    let note = agent.restriction.as_deref().map(|r| format!("<premis:agentNote>{}</premis:agentNote>", xml(r)));
    format!(
        "  <premis:agent version=\"3.0\">\n    <premis:agentIdentifier><premis:agentIdentifierType>ibi agent\
         </premis:agentIdentifierType><premis:agentIdentifierValue>{id}</premis:agentIdentifierValue>\
         </premis:agentIdentifier>\n    <premis:agentName>{user}@{host}</premis:agentName>\n    \
         <premis:agentType>person</premis:agentType>\n    <premis:agentVersion>ibi {version}</premis:agentVersion>\
         {note}\n  </premis:agent>\n",
        id = xml(id),
        user = xml(&agent.user),
        host = xml(&agent.host),
        version = xml(&agent.version),
        note = note.unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventKind, GENESIS};
    use crate::store::conformance::subsystem;
    use crate::store::ledger::Ledger;
    use crate::store::ledger::LedgerWriter;
    use crate::store::log::EVENT_PAGE;
    use crate::store::memory::MemoryStore;

    /// A collection whose log holds `n` events, in a whole chain.
    fn logged(n: u64) -> MemoryStore {
        let store = MemoryStore::new(subsystem());
        append(&store, n);
        store
    }

    fn append(store: &MemoryStore, n: u64) {
        store.tamper_with_log(|log| {
            let mut prev = log.last().map_or_else(|| GENESIS.to_string(), |last| last.hash.clone());
            for _ in 0..n {
                let seq = log.len() as u64 + 1;
                let item = Some(format!("a/b/2026/{seq}"));
                let stored = Event::new(EventKind::Fixity, item, "success", String::new()).seal(seq, &prev);
                prev = stored.hash.clone();
                log.push(stored);
            }
        });
    }

    fn edit(store: &MemoryStore, seq: u64) {
        store.tamper_with_log(|log| {
            let event = &mut log[seq as usize - 1];
            event.body = event.body.replace("success", "failure");
        });
    }

    fn check(store: &MemoryStore, least_window: u64) -> ChainOutcome {
        check_chain(store, least_window).unwrap().expect("the store keeps a log")
    }

    #[test]
    fn a_later_chain_check_reads_the_new_events_and_a_window_of_older_ones() {
        let store = logged(5_000);
        let first = check(&store, 1_000);
        assert_eq!((first.events, first.checked, first.broken), (5_000, 5_000, None), "the first reads it whole");
        append(&store, 100);
        let second = check(&store, 1_000);
        assert_eq!((second.events, second.checked, second.broken), (5_100, 100 + 1_000, None));
        append(&store, 800);
        let third = check(&store, 1_000);
        assert_eq!(third.checked, 800 + 1_600, "twice the new ones, when that is more than the least window");
        let cursor = store.chain_cursor().unwrap().unwrap();
        assert_eq!((cursor.through, cursor.window_next), (5_900, 2_601));
    }

    /// Every verify read the whole log, which grows by an event per item per
    /// verify: a nightly verify of a million items would read 365 million
    /// events after a year. A check now reads what was logged since the last
    /// and a bounded window of older events, however long the log.
    #[test]
    fn regress_every_verify_reads_the_whole_log() {
        let store = logged(20_000);
        check(&store, 1_000);
        for _ in 0..10 {
            append(&store, 300);
            let before = store.events_served();
            assert_eq!(check(&store, 1_000).broken, None);
            let read = store.events_served() - before;
            assert!(read <= 300 + 1_000 + 2 * EVENT_PAGE as u64, "a check of 300 new events read {read} of 20,000+");
        }
    }

    #[test]
    fn an_old_edit_is_found_within_one_cycle_of_windows_and_stays_reported() {
        let store = logged(5_000);
        check(&store, 1_000);
        edit(&store, 4_321);
        let mut found = None;
        for run in 1..=6 {
            append(&store, 10);
            if let Some(broken) = check(&store, 1_000).broken {
                found = Some((run, broken));
                break;
            }
        }
        let (run, broken) = found.expect("a cycle of windows reaches the edit");
        assert_eq!(run, 5, "the fifth window, events 4,001 to 5,000, holds it");
        assert!(broken.starts_with("event 4321: its content does not match"), "{broken}");
        append(&store, 10);
        assert_eq!(check(&store, 1_000).broken, Some(broken), "a break keeps the cursor where it was");
    }

    #[test]
    fn the_event_the_last_check_ended_at_must_be_unchanged() {
        let store = logged(50);
        check(&store, 1_000);
        edit(&store, 50);
        append(&store, 5);
        let broken = check(&store, 1_000).broken.expect("the edit is seen");
        assert!(broken.starts_with("event 50: its content does not match"), "{broken}");
    }

    #[test]
    fn a_log_cut_below_where_the_last_check_ended_lost_its_tail() {
        let store = logged(50);
        check(&store, 1_000);
        store.tamper_with_log(|log| log.truncate(40));
        let broken = check(&store, 1_000).broken.expect("the cut is seen");
        assert!(broken.contains("before event 50") && broken.contains("tail was removed"), "{broken}");
        // Re-sealed to hide the cut, with as many events as before: still not the event checked.
        append(&store, 10);
        let broken = check(&store, 1_000).broken.expect("the rewrite is seen");
        assert!(broken.starts_with("event 50: it is not the event the last chain check"), "{broken}");
    }

    /// Another writer in the bucket can set the cursor: one that names events the
    /// log does not hold, or a wrong hash, is a break named, never a panic or a pass.
    #[test]
    fn a_cursor_another_writer_set_is_checked_not_trusted() {
        let store = logged(50);
        check(&store, 1_000);
        for (through, hash, window_next) in [(u64::MAX, "x", u64::MAX), (60, "y", 1), (30, "z", 0), (50, "", 49)] {
            let forged = ChainCursor { through, hash: hash.to_string(), window_next };
            store.keep_chain_cursor(&forged).unwrap();
            let broken = check(&store, 1_000).broken.unwrap_or_else(|| panic!("{forged:?} passed"));
            assert!(broken.contains("tail was removed") || broken.contains("is not the event"), "{broken}");
        }
    }

    #[test]
    fn a_lost_cursor_means_a_whole_check() {
        let store = logged(3_000);
        check(&store, 1_000);
        edit(&store, 10);
        store.keep_chain_cursor(&ChainCursor { through: 0, hash: String::new(), window_next: 1 }).unwrap();
        let outcome = check(&store, 1_000);
        assert_eq!(outcome.checked, 10, "read from the first event, to the break");
        assert!(outcome.broken.unwrap().starts_with("event 10: its content"));
    }
}
