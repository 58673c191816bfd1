//! Reading a collection's event log: every event in order (`for_each`), the
//! chain check `verify` makes (`check_chain`), and one item's history as PREMIS
//! 3 XML (`premis`), the data dictionary's element names in the
//! `http://www.loc.gov/premis/v3` namespace, as Archivematica's `metsrw` reads
//! it. The log's format is `crate::events`.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::events::{Agent, ChainCheck, Event, StoredEvent};
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
    while let Some(page) = store.events(item, after)? {
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

/// Walks the whole log checking its chain, and that it still holds the last
/// event the latest witness signed; `None` when the collection keeps no log.
pub fn check_chain(store: &dyn Store) -> Result<Option<ChainCheck>> {
    let anchor = crate::ops::witness::latest(store)?.and_then(|w| w.log_anchor());
    let mut check = anchor.map_or_else(ChainCheck::default, ChainCheck::anchored);
    let keeps = for_each(store, None, &mut |stored| {
        check.next(stored);
        Ok(())
    })?;
    check.end();
    Ok(keeps.then_some(check))
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
