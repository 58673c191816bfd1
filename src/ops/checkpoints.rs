//! Carrying the collection's checkpoint to its sites and holding the log to
//! what they cosigned (docs/formats.md, "Checkpoints"). `replicate` signs a
//! checkpoint of the log's head with the collection's witness key and hands it
//! to each site with the events since the one the site kept; the site cosigns
//! it only if it extends that one. `audit` asks each site for the checkpoint it
//! kept and refuses a log at home that is shorter than it or does not hold its
//! head: a tail cut off, an old witness replayed or another collection's log
//! spliced in is found at the next audit against any site.

use crate::checkpoint::{self, Head};
use crate::error::Result;
use crate::events::StoredEvent;
use crate::store::Store;

/// What carrying the checkpoint to one site did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Carried {
    /// The site cosigned the log at this many events.
    Cosigned(u64),
    /// Nothing to carry, and why (no log, no key here, the site keeps none).
    Skipped(&'static str),
}

/// The collection's origin, head and signing seed, when it can sign a checkpoint.
fn signable(store: &dyn Store) -> Result<std::result::Result<(Head, [u8; 32]), &'static str>> {
    let Some(id) = store.inventory().collection_id() else { return Ok(Err("the collection has no id")) };
    let Some((size, head)) = store.ledger().log_head()? else { return Ok(Err("the collection keeps no log here")) };
    let Some(writer) = store.ledger().writer() else { return Ok(Err("this handle may not write")) };
    let Some(seed) = writer.witness_seed()? else { return Ok(Err("no witness key on this machine")) };
    Ok(Ok((Head { origin: checkpoint::origin(&id), size, head }, seed)))
}

/// The log's events after `after`, through `until`.
fn events_between(store: &dyn Store, after: u64, until: u64) -> Result<Vec<StoredEvent>> {
    let mut events = Vec::new();
    let mut at = after;
    while at < until {
        let Some(page) = store.ledger().events(None, at)? else { break };
        let Some(last) = page.last().map(|e| e.seq) else { break };
        events.extend(page.into_iter().filter(|e| e.seq <= until));
        at = last;
    }
    Ok(events)
}

/// Signs a checkpoint of `store`'s log and has `site` cosign it.
pub fn carry(store: &dyn Store, site: &dyn Store) -> Result<Carried> {
    let Some(cosigner) = site.cosigner() else { return Ok(Carried::Skipped("the site keeps no checkpoints")) };
    let (head, seed) = match signable(store)? {
        Ok(signable) => signable,
        Err(why) => return Ok(Carried::Skipped(why)),
    };
    let key = hex::encode(ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key().as_bytes());
    let seen = match cosigner.seen_checkpoint(&head.origin)? {
        Some(note) => checkpoint::open(&note, &key)?.size,
        None => head.size,
    };
    let events = events_between(store, seen, head.size)?;
    let note = checkpoint::sign(&head, &seed)?;
    cosigner.cosign(&note, &key, &events)?;
    Ok(Carried::Cosigned(head.size))
}

/// What the checkpoint `site` cosigned says of `store`'s log now: `None` when
/// the log holds it, else why not. A site that keeps none says nothing.
pub fn check(store: &dyn Store, site: &dyn Store, collection_key: &str) -> Result<Option<String>> {
    let (Some(cosigner), Some(id)) = (site.cosigner(), store.inventory().collection_id()) else { return Ok(None) };
    let Some(note) = cosigner.seen_checkpoint(&checkpoint::origin(&id))? else { return Ok(None) };
    let seen = checkpoint::open(&note, collection_key)?;
    let held = store.ledger().log_head()?.map_or(0, |(size, _)| size);
    if held < seen.size {
        return Ok(Some(format!(
            "it cosigned this collection's log at {} events; the log here holds {held}: events were removed",
            seen.size
        )));
    }
    let at = events_between(store, seen.size.saturating_sub(1), seen.size)?;
    match at.first() {
        Some(event) if event.seq == seen.size && event.hash == seen.head => Ok(None),
        _ => Ok(Some(format!(
            "it cosigned this collection's log at {} events with head {}; event {} here is another: the log was \
             rewritten",
            seen.size, seen.head, seen.size
        ))),
    }
}
