//! The event log of a collection in object storage
//! (ARCHITECTURE.md, "The event log"). Each event is one object,
//! `.ibi/log/<seq>!<item>!<hash>` (the seq zero-padded to 16 digits, so that
//! keys list in order; the item's name with `/` as `+`, empty for the
//! collection's own events; the SHA-256 of the body), holding the event's
//! canonical body. A listing thus gives each event's place, item and hash, and
//! an edited body no longer matches the hash its key holds.
//! Only the lease holder appends, one event at a time in order, each with a
//! create-only write, so nothing ever overwrites an event. `.ibi/log-head` keeps
//! the last seq and hash, so a writer finds the log's end by listing only what
//! follows it. An intent (placement or removal) records the log's end when it
//! is written: a step replayed by recovery appends only the events whose ids are
//! not logged after it.
//!
//! So that one item's events are found without listing the whole log, each
//! event of an item, once created, is indexed under the item,
//! `.ibi/log-items/<name path>/<seq>!<hash>!<event id>` (an empty object;
//! the entries of one append are written at once, after its events). An
//! entry names exactly one event key, which holds that event or nothing (an
//! entry made behind ibi's back is passed over). A writer killed between
//! creating events and indexing them leaves them after the head it last
//! saved; the next writer, reading the end, indexes what it finds there
//! again. `.ibi/log-items-from` holds the first seq indexed: a log begun by
//! an older ibi lists its earlier part whole, as before.

use futures_util::stream::{self, StreamExt, TryStream, TryStreamExt};
use object_store::path::Path as Key;
use object_store::{ObjectMeta, PutMode};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::events::{Event, StoredEvent, GENESIS};
use crate::id::RepositoryName;
use crate::store::s3::keys::Keys;
use crate::store::s3::objects::{Objects, IN_FLIGHT};

pub const LOG: &str = ".ibi/log";
pub const LOG_HEAD: &str = ".ibi/log-head";
pub const LOG_ITEMS: &str = ".ibi/log-items";
pub const LOG_ITEMS_FROM: &str = ".ibi/log-items-from";

/// The log's last event: its seq and hash (seq 0 and `GENESIS` when empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tail {
    pub seq: u64,
    pub hash: String,
}

impl Default for Tail {
    fn default() -> Tail {
        Tail { seq: 0, hash: GENESIS.to_string() }
    }
}

/// What this handle knows of the log's end, valid while it holds the lease
/// (taking the lease forgets it).
pub type KnownTail = tokio::sync::Mutex<Option<Tail>>;

/// The first seq of the per-item index, once this handle has read or written it.
pub type KnownIndex = tokio::sync::Mutex<Option<u64>>;

/// The log of one collection.
pub struct ObjectLog<'a> {
    pub objects: &'a Objects,
    pub keys: &'a Keys,
    pub tail: &'a KnownTail,
    pub index: &'a KnownIndex,
    /// The collection's id, which a new log's first event is bound to.
    pub collection_id: Option<&'a str>,
}

fn event_key(keys: &Keys, stored: &StoredEvent, item: Option<&str>) -> Key {
    let item = item.unwrap_or_default().replace('/', "+");
    keys.at(&format!("{LOG}/{:016}!{item}!{}", stored.seq, stored.hash))
}

/// `events` sealed one after another from `tail`, each linked to the one before.
fn seal_in_order<'e>(events: &[&'e Event], tail: Tail) -> Vec<(&'e Event, StoredEvent)> {
    let mut prev = tail;
    let mut sealed = Vec::with_capacity(events.len());
    for event in events {
        let stored = (*event).clone().seal(prev.seq + 1, &prev.hash);
        prev = Tail { seq: stored.seq, hash: stored.hash.clone() };
        sealed.push((*event, stored));
    }
    sealed
}

/// An event's entry in its item's index.
fn index_key(keys: &Keys, item: &str, stored: &StoredEvent, id: &str) -> Key {
    keys.at(&format!("{LOG_ITEMS}/{item}/{:016}!{}!{id}", stored.seq, stored.hash))
}

/// An index entry: the event it names (its seq, hash and the key it is kept
/// at) and that event's id.
struct Indexed {
    listed: Listed,
    id: String,
}

fn parse_index_key(keys: &Keys, item: &str, meta: ObjectMeta) -> Option<Indexed> {
    let mut parts = meta.location.filename()?.splitn(3, '!');
    let seq = parts.next()?.parse().ok()?;
    let (hash, id) = (parts.next()?.to_string(), parts.next()?.to_string());
    let token = item.replace('/', "+");
    let key = keys.at(&format!("{LOG}/{seq:016}!{token}!{hash}"));
    Some(Indexed { listed: Listed { seq, item: token, hash, key }, id })
}

/// An event as its key names it.
struct Listed {
    seq: u64,
    item: String,
    hash: String,
    key: Key,
}

/// What an event's key holds; none for any other object.
fn parse_event_key(meta: ObjectMeta) -> Option<Listed> {
    let mut parts = meta.location.filename()?.splitn(3, '!');
    let seq = parts.next()?.parse().ok()?;
    let (item, hash) = (parts.next()?.to_string(), parts.next()?.to_string());
    Some(Listed { seq, item, hash, key: meta.location })
}

/// An event's tag: its seq, item token (its name with `+` for `/`, as its key
/// spells it) and hash, hashed under `tags` (keyed at random for the run), so
/// that a claim on an event is held in 16 bytes. Whoever writes a log key
/// cannot aim it at a claim's tag without the run's key.
pub fn event_tag(tags: &std::hash::RandomState, seq: u64, item_token: &str, hash: &str) -> u64 {
    std::hash::BuildHasher::hash_one(tags, (seq, item_token, hash))
}

/// How an item's name is spelled in its log keys.
pub fn item_token(name: &RepositoryName) -> String {
    name.to_string().replace('/', "+")
}

fn corrupt(objects: &Objects, key: &Key, problem: String) -> Error {
    Error::CorruptState { path: objects.url(key).into(), problem }
}

impl ObjectLog<'_> {
    /// Which of `claims` (an event's seq and its `event_tag` under `tags`) the
    /// log holds: a listing of the log's keys from the first claimed seq on,
    /// each key matched as it passes (no event read).
    pub async fn holds(&self, claims: &[(u64, u64)], tags: &std::hash::RandomState) -> Result<Vec<bool>> {
        let mut order: Vec<usize> = (0..claims.len()).collect();
        order.sort_unstable_by_key(|&i| claims[i].0);
        let mut held = vec![false; claims.len()];
        let Some(&first) = order.first() else { return Ok(held) };
        let prefix = self.keys.at(LOG);
        let offset = self.keys.at(&format!("{LOG}/{:016}", claims[first].0));
        let mut listed = self.objects.list_after(&prefix, &offset);
        let mut next = 0;
        while next < order.len() {
            let Some(meta) = listed.try_next().await? else { break };
            let Some(event) = parse_event_key(meta) else { continue };
            while next < order.len() && claims[order[next]].0 < event.seq {
                next += 1;
            }
            let tag = event_tag(tags, event.seq, &event.item, &event.hash);
            for &i in order[next..].iter().take_while(|&&i| claims[i].0 == event.seq) {
                held[i] |= claims[i].1 == tag;
            }
        }
        Ok(held)
    }

    /// The keys of the events after `after` and before `before`, in order, up
    /// to `limit` of those whose item token is `item` when given.
    async fn keys_between(&self, after: u64, before: u64, item: Option<&str>, limit: usize) -> Result<Vec<Listed>> {
        let prefix = self.keys.at(LOG);
        let offset = self.keys.at(&format!("{LOG}/{:016}", after + 1));
        let token = item.map(|i| i.replace('/', "+"));
        let wanted = |meta: ObjectMeta| {
            let listed = parse_event_key(meta)?;
            (listed.seq > after && token.as_ref().is_none_or(|t| *t == listed.item)).then_some(listed)
        };
        self.objects
            .list_after(&prefix, &offset)
            .try_filter_map(|meta| std::future::ready(Ok(wanted(meta))))
            .try_take_while(|listed| std::future::ready(Ok(listed.seq < before)))
            .take(limit)
            .try_collect()
            .await
    }

    async fn keys_after(&self, after: u64, item: Option<&str>, limit: usize) -> Result<Vec<Listed>> {
        self.keys_between(after, u64::MAX, item, limit).await
    }

    /// The stored events listed, in order.
    async fn read(&self, listed: Vec<Listed>) -> Result<Vec<StoredEvent>> {
        stream::iter(listed)
            .map(|Listed { seq, hash, key, .. }| async move {
                let found = self.objects.get(&key).await?;
                let body = found.map(|f| String::from_utf8_lossy(&f.bytes).into_owned()).unwrap_or_default();
                Ok::<_, Error>(StoredEvent { seq, hash, body })
            })
            .buffered(IN_FLIGHT)
            .try_collect()
            .await
    }

    /// Up to `limit` events after `after`, of `item` only when given.
    pub async fn page(&self, item: Option<&RepositoryName>, after: u64, limit: usize) -> Result<Vec<StoredEvent>> {
        let Some(item) = item.map(|n| n.to_string()) else {
            return self.read(self.keys_after(after, None, limit).await?).await;
        };
        let from = self.indexed_from().await?;
        let before = from.unwrap_or(u64::MAX);
        let mut events = match before > after + 1 {
            true => self.read(self.keys_between(after, before, Some(&item), limit).await?).await?,
            false => Vec::new(),
        };
        if from.is_some() && events.len() < limit {
            let after = after.max(before - 1);
            events.extend(self.indexed_page(&item, after, limit - events.len()).await?);
        }
        Ok(events)
    }

    /// The entries of `item`'s index after seq `after`, in order.
    fn index_after<'a>(
        &'a self,
        item: &'a str,
        prefix: &'a Key,
        offset: &'a Key,
    ) -> impl TryStream<Ok = Indexed, Error = Error> + 'a {
        self.objects
            .list_after(prefix, offset)
            .try_filter_map(move |meta| std::future::ready(Ok(parse_index_key(self.keys, item, meta))))
    }

    /// Up to `limit` of `item`'s events after `after`, found through its index;
    /// an entry whose event is not there is passed over.
    async fn indexed_page(&self, item: &str, after: u64, limit: usize) -> Result<Vec<StoredEvent>> {
        let prefix = self.keys.at(&format!("{LOG_ITEMS}/{item}"));
        let offset = self.keys.at(&format!("{LOG_ITEMS}/{item}/{:016}", after + 1));
        self.index_after(item, &prefix, &offset)
            .try_filter(|indexed| std::future::ready(indexed.listed.seq > after))
            .map_ok(|Indexed { listed: Listed { seq, hash, key, .. }, .. }| async move {
                let found = self.objects.get(&key).await?;
                Ok(found.map(|f| StoredEvent { seq, hash, body: String::from_utf8_lossy(&f.bytes).into_owned() }))
            })
            .try_buffered(IN_FLIGHT)
            .try_filter_map(|found| std::future::ready(Ok(found)))
            .take(limit)
            .try_collect()
            .await
    }

    /// The ids of `item`'s indexed events that are in the log.
    async fn indexed_ids(&self, item: &str) -> Result<Vec<String>> {
        let prefix = self.keys.at(&format!("{LOG_ITEMS}/{item}"));
        self.index_after(item, &prefix, &prefix)
            .map_ok(|Indexed { listed, id }| async move { Ok(self.objects.exists(&listed.key).await?.then_some(id)) })
            .try_buffered(IN_FLIGHT)
            .try_filter_map(|found| std::future::ready(Ok(found)))
            .try_collect()
            .await
    }

    /// The first seq indexed per item; none when this log has no index (begun
    /// by an older ibi and not appended to since).
    async fn indexed_from(&self) -> Result<Option<u64>> {
        let mut known = self.index.lock().await;
        if known.is_none() {
            *known = self.read_indexed_from().await?;
        }
        Ok(*known)
    }

    async fn read_indexed_from(&self) -> Result<Option<u64>> {
        let key = self.keys.at(LOG_ITEMS_FROM);
        let Some(found) = self.objects.get(&key).await? else { return Ok(None) };
        let text = String::from_utf8_lossy(&found.bytes);
        let from = text.trim().parse().map_err(|e| corrupt(self.objects, &key, format!("not a seq: {e}")))?;
        Ok(Some(from))
    }

    /// Makes sure every event appended from now on is indexed: a log without an
    /// index starts one after its last event (the caller holds the lease, so no
    /// other writer appends meanwhile).
    /// Placements appending at once start it once: the first holds the others
    /// back until it is written.
    async fn start_index(&self) -> Result<()> {
        let mut known = self.index.lock().await;
        if known.is_none() {
            *known = self.read_indexed_from().await?;
        }
        if known.is_some() {
            return Ok(());
        }
        let from = self.end().await? + 1;
        self.objects.overwrite(&self.keys.at(LOG_ITEMS_FROM), from.to_string().into_bytes()).await?;
        *known = Some(from);
        Ok(())
    }

    /// The log's end as stored: the head object, then whatever follows it.
    async fn load_tail(&self) -> Result<Tail> {
        let head_key = self.keys.at(LOG_HEAD);
        let head = match self.objects.get(&head_key).await? {
            Some(found) => serde_json::from_slice(&found.bytes)
                .map_err(|e| corrupt(self.objects, &head_key, format!("not a log head: {e}")))?,
            None => Tail { seq: 0, hash: crate::events::first_prev(self.collection_id) },
        };
        let later = self.keys_after(head.seq, None, usize::MAX).await?;
        let tail = later.last().map_or(head, |last| Tail { seq: last.seq, hash: last.hash.clone() });
        self.index_listed(later).await?;
        Ok(tail)
    }

    /// Indexes the listed events of items (again, when a writer killed between
    /// creating an event and indexing it left it after the head it last saved;
    /// or for the first time, for a log begun before the index). Only a writer,
    /// under the lease, does this.
    async fn index_listed(&self, listed: Vec<Listed>) -> Result<()> {
        let of_items: Vec<Listed> = listed.into_iter().filter(|l| !l.item.is_empty()).collect();
        let stored = self.read(of_items).await?;
        // An event that does not parse is left for verify's chain check to name.
        let events: Vec<(Event, StoredEvent)> =
            stored.into_iter().filter_map(|stored| Some((stored.event().ok()?, stored))).collect();
        let sealed: Vec<(&Event, StoredEvent)> = events.iter().map(|(event, stored)| (event, stored.clone())).collect();
        self.index(&sealed).await
    }

    /// The seq of the log's last event (a step's intent records it).
    pub async fn end(&self) -> Result<u64> {
        let mut tail = self.tail.lock().await;
        if tail.is_none() {
            *tail = Some(self.load_tail().await?);
        }
        Ok(tail.as_ref().map_or(0, |t| t.seq))
    }

    /// Indexes the events of items that a log begun by an older ibi holds
    /// before its index starts (`ibi upgrade`, under the lease), then records
    /// that the index starts at the first event; the number indexed. Each entry
    /// is written whole before the start moves, so a killed run is run again.
    pub async fn index_earlier_events(&self) -> Result<usize> {
        self.start_index().await?;
        let from = self.indexed_from().await?.unwrap_or(1);
        if from == 1 {
            return Ok(0);
        }
        let earlier = self.keys_between(0, from, None, usize::MAX).await?;
        let indexed = earlier.iter().filter(|l| !l.item.is_empty()).count();
        self.index_listed(earlier).await?;
        self.objects.overwrite(&self.keys.at(LOG_ITEMS_FROM), b"1".to_vec()).await?;
        *self.index.lock().await = Some(1);
        Ok(indexed)
    }

    /// The ids of the events of these items (by name): through their indexes,
    /// and for a log begun by an older ibi, a listing of its unindexed part.
    pub async fn ids_of(
        &self,
        items: &std::collections::BTreeSet<String>,
    ) -> Result<std::collections::HashSet<String>> {
        self.end().await?;
        let from = self.indexed_from().await?;
        let before = from.unwrap_or(u64::MAX);
        let mut ids = std::collections::HashSet::new();
        if before > 1 {
            let tokens: std::collections::BTreeSet<String> = items.iter().map(|i| i.replace('/', "+")).collect();
            let listed = self.keys_between(0, before, None, usize::MAX).await?;
            let theirs: Vec<Listed> = listed.into_iter().filter(|l| tokens.contains(&l.item)).collect();
            let stored = self.read(theirs).await?;
            ids.extend(stored.iter().filter_map(|s| s.event().ok()).map(|e| e.id));
        }
        if from.is_some() {
            ids.extend(self.indexed_ids_of(items).await?);
        }
        Ok(ids)
    }

    /// The ids of the indexed events of these items that are in the log: their
    /// indexes listed together (`ranges`), an item the listing did not reach
    /// listed alone, and each entry's event looked for.
    async fn indexed_ids_of(&self, items: &std::collections::BTreeSet<String>) -> Result<Vec<String>> {
        let items: Vec<&String> = items.iter().collect();
        let folders: Vec<Key> = items.iter().map(|item| self.keys.at(&format!("{LOG_ITEMS}/{item}"))).collect();
        let cap = 16 * items.len().max(64);
        let listed = super::ranges::objects_of(self.objects, &folders, super::ranges::Within::Under, cap).await?;
        let mut entries = Vec::new();
        let mut unreached = Vec::new();
        for (item, listed) in items.into_iter().zip(listed) {
            match listed {
                Some(found) => {
                    entries.extend(found.into_iter().filter_map(|meta| parse_index_key(self.keys, item, meta)))
                }
                None => unreached.push(item),
            }
        }
        let mut ids: Vec<String> = stream::iter(entries)
            .map(|Indexed { listed, id }| async move {
                Ok::<_, Error>(self.objects.exists(&listed.key).await?.then_some(id))
            })
            .buffer_unordered(IN_FLIGHT)
            .try_filter_map(|found| std::future::ready(Ok(found)))
            .try_collect()
            .await?;
        let more: Vec<Vec<String>> = stream::iter(unreached)
            .map(|item| self.indexed_ids(item))
            .buffer_unordered(IN_FLIGHT)
            .try_collect()
            .await?;
        ids.extend(more.into_iter().flatten());
        Ok(ids)
    }

    /// The ids of the events after `after`.
    async fn ids_after(&self, after: u64) -> Result<std::collections::HashSet<String>> {
        let stored = self.read(self.keys_after(after, None, usize::MAX).await?).await?;
        Ok(stored.iter().filter_map(|s| s.event().ok()).map(|e| e.id).collect())
    }

    /// Appends `events` in order; with `replayed_after`, skips those whose id is
    /// logged after that seq (a step recovery replays). The events are sealed
    /// in order against the log's end and created one after another; then,
    /// with the end free for other appends, the index entries of those of
    /// items are written all at once (a kill before they are is mended by the
    /// next writer's reading of the end). A create-only write that loses means
    /// the remembered end was stale: the end is read again and the rest sealed
    /// anew, once.
    /// Returns the seq and hash of each event it appended, by the event's id
    /// (not those a replay found logged already).
    pub async fn append(&self, events: &[Event], replayed_after: Option<u64>) -> Result<Vec<(String, u64, String)>> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let known = match replayed_after {
            Some(after) => self.ids_after(after).await?,
            None => Default::default(),
        };
        if events.iter().any(|e| e.item.is_some()) {
            self.start_index().await?;
        }
        let mut todo: Vec<&Event> = events.iter().filter(|e| !known.contains(&e.id)).collect();
        let mut appended = Vec::with_capacity(todo.len());
        let mut guard = self.tail.lock().await;
        let mut reread = false;
        while !todo.is_empty() {
            let tail = match guard.take() {
                Some(tail) => tail,
                None => self.load_tail().await?,
            };
            let mut sealed = seal_in_order(&todo, tail);
            let (created, lost) = self.create_in_order(&sealed).await?;
            *guard =
                created.checked_sub(1).map(|last| Tail { seq: sealed[last].1.seq, hash: sealed[last].1.hash.clone() });
            sealed.truncate(created);
            appended.extend(sealed);
            let Some(key) = lost else { break };
            if reread {
                let problem = "another writer appends to the log without the lease".into();
                return Err(corrupt(self.objects, &key, problem));
            }
            (reread, *guard) = (true, None);
            todo.drain(..created);
        }
        drop(guard);
        self.index(&appended).await?;
        Ok(appended.into_iter().map(|(event, stored)| (event.id.clone(), stored.seq, stored.hash)).collect())
    }

    /// Writes the index entries of the sealed events of items, all at once.
    async fn index(&self, sealed: &[(&Event, StoredEvent)]) -> Result<()> {
        stream::iter(sealed.iter().filter_map(|(event, stored)| Some((event.item.as_deref()?, *event, stored))))
            .map(|(item, event, stored)| async move {
                self.objects.overwrite(&index_key(self.keys, item, stored, &event.id), Vec::new()).await
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<()>()
            .await
    }

    /// Creates the sealed events one after another; how many were created, and
    /// the key of the one whose create lost, if one did.
    async fn create_in_order(&self, sealed: &[(&Event, StoredEvent)]) -> Result<(usize, Option<Key>)> {
        for (done, (event, stored)) in sealed.iter().enumerate() {
            let key = event_key(self.keys, stored, event.item.as_deref());
            if self.objects.put(&key, stored.body.clone().into_bytes(), PutMode::Create).await?.is_err() {
                return Ok((done, Some(key)));
            }
        }
        Ok((sealed.len(), None))
    }

    /// Keeps the log's end in the head object (a hint: a stale head costs a longer listing).
    pub async fn save_end(&self) -> Result<()> {
        let tail = self.tail.lock().await.clone();
        match tail {
            Some(tail) => {
                let bytes = serde_json::to_vec(&tail).expect("a tail serialises");
                self.objects.overwrite(&self.keys.at(LOG_HEAD), bytes).await
            }
            None => Ok(()),
        }
    }
}
