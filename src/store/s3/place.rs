//! Placement, removal and recovery in object storage, where there is no rename
//! (ARCHITECTURE.md, "Collections in object storage"). An item exists exactly
//! when its commit marker does, and the marker is claimed with a create-only
//! write, so of two writers racing for one name exactly one wins and nothing is
//! overwritten. Placing an item:
//!
//! 1. write the intent (`.ibi/placing/<stage>`: the name, alias, folders, record);
//! 2. claim the marker, create-only (a replacement: `If-Match` on its ETag), in
//!    state `placing` naming the stage, so readers read the staged files;
//! 3. copy the staged files to the item's keys (server-side), drop old extras;
//! 4. write the alias and the inventory record, and append the item's events
//!    to the log (`log`);
//! 5. mark it `present`, then delete the stage and the intent.
//!
//! A killed writer leaves an intent: `recover` finishes the placement when the
//! marker names its stage, and otherwise deletes the stage. Removal writes its
//! own intent first, deletes the marker, then the files and the alias.
//!
//! A new item whose name is known before staging (`Writer::stage_for`: a copy or
//! mirror) skips the copies: its intent (`.ibi/direct/<stage>`, or one
//! `.ibi/direct/g<token>` for the stages a chunk begins together) names it, its
//! files go straight to the item's keys with create-only writes. Placing a batch
//! of them writes one intent for the batch (`.ibi/direct-batches/<token>`: each
//! one's stage, name and action, and the log's end), then for each the
//! create-only marker, its events, alias and record. Until the marker exists
//! nothing reads those files; `recover` deletes them when it never came, and
//! completes the events, alias and record when it did. (An earlier ibi rewrote
//! each item's own intent with its action instead; `recover` reads both.)
//!
//! Every intent records the log's end when it was written, so that recovery,
//! replaying the step, appends only the events it had not yet appended.

use std::collections::BTreeSet;

use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::path::Path as Key;
use object_store::PutMode;
use serde::{Deserialize, Serialize};

use crate::bag::{BagInfo, BAG_INFO_TXT, TAGMANIFEST};
use crate::error::{Error, Result};
use crate::id::{Ibip, RepositoryName};
use crate::store::log::{placement_events, removal_event, Action};
use crate::store::s3::checks::ObjectChecks;
use crate::store::s3::keys::{self, KeyForm, Keys};
use crate::store::s3::log::ObjectLog;
use crate::store::s3::objects::{Lost, Objects, IN_FLIGHT};
use crate::store::{ItemRecord, Placement, Refusal, StageId, Status};

/// The commit marker: `placing` while the files are copied from `stage`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Marker {
    pub placing: bool,
    pub stage: Option<String>,
    pub dirs: Vec<String>,
    /// How the item's file paths are spelled in its keys (and its stage's).
    #[serde(default)]
    pub keys: KeyForm,
}

/// What a placement will do, written before it starts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Intent {
    pub name: RepositoryName,
    pub ibip: Option<String>,
    pub dirs: Vec<String>,
    pub replace: bool,
    pub record: ItemRecord,
    /// How the staged file paths are spelled (an intent an older ibi wrote: encoded).
    #[serde(default)]
    pub keys: KeyForm,
    /// What the log records of it.
    #[serde(default)]
    pub action: Action,
    /// The log's end when the intent was written (an older ibi's intent: none, 0).
    #[serde(default)]
    pub log_after: u64,
}

/// A direct placement's intent as placing it rewrites it (an older ibi's, or one
/// not yet placed, holds the bare name).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DirectIntent {
    pub name: RepositoryName,
    pub action: Action,
    pub log_after: u64,
}

/// The intent of a batch of direct placements: each one's stage and intent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DirectBatch {
    pub entries: Vec<DirectEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DirectEntry {
    pub stage: String,
    pub intent: DirectIntent,
}

/// The intent of several direct stages begun together (`Writer::stages_for`,
/// `.ibi/direct/g<token>`): each stage with the name its files go to. Written
/// once, before any of their files; removed once each is placed or discarded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DirectGroup {
    pub stages: Vec<GroupedStage>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupedStage {
    pub stage: String,
    pub name: RepositoryName,
}

/// A group intent as a writer holds it: its key, and how many of its stages are
/// neither placed nor discarded yet.
#[derive(Debug)]
pub struct DirectGroupLeft {
    pub key: Key,
    pub left: std::sync::atomic::AtomicUsize,
}

impl DirectGroupLeft {
    /// One of its stages is done with: the key to delete once none is left.
    pub fn one_done(&self) -> Option<Key> {
        (self.left.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1).then(|| self.key.clone())
    }
}

/// The most bytes one batch intent holds (the rest go in another): well under
/// the cap on what is read whole (`MAX_STATE_BYTES`), whatever the histories.
const DIRECT_BATCH_BYTES: usize = 1024 * 1024;

impl DirectIntent {
    fn parse(bytes: &[u8]) -> Result<DirectIntent> {
        if let Ok(intent) = serde_json::from_slice(bytes) {
            return Ok(intent);
        }
        let name = RepositoryName::parse(String::from_utf8_lossy(bytes).trim()).map_err(Error::from)?;
        Ok(DirectIntent { name, action: Action::default(), log_after: 0 })
    }
}

/// A removal's intent (an older ibi's holds only the alias).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RemovalIntent {
    pub ibip: Option<String>,
    pub step: String,
    pub log_after: u64,
}

impl RemovalIntent {
    fn parse(bytes: &[u8]) -> Option<RemovalIntent> {
        if let Ok(intent) = serde_json::from_slice::<RemovalIntent>(bytes) {
            return Some(intent);
        }
        let ibip: Option<String> = serde_json::from_slice(bytes).ok()?;
        Some(RemovalIntent { ibip, step: String::new(), log_after: 0 })
    }
}

fn json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("plain data serializes")
}

pub(super) fn parse<T: for<'de> Deserialize<'de>>(bytes: &[u8], objects: &Objects, key: &Key) -> Result<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::CorruptState { path: objects.url(key).into(), problem: e.to_string() })
}

/// The placement protocol over one collection's keys.
pub struct Placer<'a> {
    pub objects: &'a Objects,
    pub keys: &'a Keys,
    pub log: ObjectLog<'a>,
    pub checks: ObjectChecks<'a>,
}

impl Placer<'_> {
    pub async fn marker(&self, name: &RepositoryName) -> Result<Option<Marker>> {
        let key = self.keys.marker(name);
        match self.objects.get(&key).await? {
            Some(found) => Ok(Some(parse(&found.bytes, self.objects, &key)?)),
            None => Ok(None),
        }
    }

    /// The record the bag under `base` implies, read from its bag-info and tagmanifest.
    async fn record_at(&self, base: &Key, name: &RepositoryName) -> Result<ItemRecord> {
        let read = |rel: &'static str| async move {
            let key = base.clone().join(rel);
            let missing = || Error::Data { what: format!("{name}/{rel}"), problem: "it was not staged".into() };
            self.objects.get(&key).await?.map(|f| f.bytes).ok_or_else(missing)
        };
        let info = read(BAG_INFO_TXT).await?;
        let digest = crate::digest::of_bytes(&read(TAGMANIFEST).await?, &[]);
        let text = String::from_utf8_lossy(&info);
        let info = BagInfo::parse(&text).map_err(|line| Error::Data {
            what: format!("{name}/{BAG_INFO_TXT}"),
            problem: format!("malformed line {line}"),
        })?;
        ItemRecord::from_info(name, &info, digest.sha256())
    }

    /// Places one staged item; `Ok(Err(_))` when its name is taken.
    pub async fn place_one(&self, p: &Placement, dirs: BTreeSet<String>) -> Result<Result<(), Refusal>> {
        let record = match &p.record {
            Some(record) => record.clone(),
            None => self.record_at(&self.keys.stage(p.stage), &p.name).await?,
        };
        let intent = Intent {
            name: p.name.clone(),
            ibip: p.ibip.map(|i| i.to_string()),
            dirs: dirs.into_iter().collect(),
            replace: p.replace,
            record,
            keys: KeyForm::Names,
            action: p.action.clone(),
            log_after: self.log.end().await?,
        };
        let intent_key = self.keys.placing(p.stage);
        self.objects.overwrite(&intent_key, json(&intent)).await?;
        if self.claim(&intent, p.stage).await?.is_err() {
            self.objects.delete(&intent_key).await?;
            let path = format!("{}/{}", self.objects.place, p.name).into();
            return Ok(Err(Error::AlreadyExists { path }));
        }
        self.finish(&intent, p.stage, false).await?;
        Ok(Ok(()))
    }

    /// Claims the marker for the stage: create-only, or `If-Match` for a replacement.
    async fn claim(&self, intent: &Intent, stage: StageId) -> Result<Result<(), Lost>> {
        let key = self.keys.marker(&intent.name);
        let token = Some(keys::stage_token(stage));
        let marker = Marker { placing: true, stage: token, dirs: intent.dirs.clone(), keys: intent.keys };
        let mode = match intent.replace {
            false => PutMode::Create,
            true => self.objects.get(&key).await?.map_or(PutMode::Create, |found| PutMode::Update(found.version)),
        };
        Ok(self.objects.put(&key, json(&marker), mode).await?.map(drop))
    }

    /// Steps 3 to 5: idempotent, so recovery runs it again after a kill (`replayed`).
    pub async fn finish(&self, intent: &Intent, stage: StageId, replayed: bool) -> Result<()> {
        let name = &intent.name;
        let stage_key = self.keys.stage(stage);
        let staged = self.objects.list_all(&stage_key).await?;
        let form = intent.keys;
        let rels: Vec<String> = staged.iter().filter_map(|m| Keys::relative(&stage_key, &m.location, form)).collect();
        let old = match intent.replace {
            true => {
                self.checks.forget(name).await?;
                let old = self.objects.list_all(&self.keys.item(name)).await?;
                if intent.action.keeps_what_it_replaces() {
                    self.keep(name, stage, &old).await?;
                }
                old
            }
            false => Vec::new(),
        };
        stream::iter(rels.iter())
            .map(|rel| async move {
                let (from, to) = (self.keys.staged_file(stage, rel, form), self.keys.item_file(name, rel, form));
                self.objects.copy(&from, &to).await
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<()>()
            .await?;
        let new: BTreeSet<Key> = rels.iter().map(|rel| self.keys.item_file(name, rel, form)).collect();
        let extras: Vec<Key> = old.into_iter().map(|m| m.location).filter(|k| !new.contains(k)).collect();
        self.delete_keys(&extras).await?;
        if let Some(ibip) = &intent.ibip {
            let ibip = Ibip::parse(ibip).map_err(Error::from)?;
            self.objects.overwrite(&self.keys.alias(&ibip), name.to_string().into_bytes()).await?;
        }
        self.objects.overwrite(&self.keys.record(name), json(&intent.record)).await?;
        let events = placement_events(&intent.record, &intent.action, &keys::stage_token(stage));
        self.log.append(&events, replayed.then_some(intent.log_after)).await?;
        let marker = Marker { placing: false, stage: None, dirs: intent.dirs.clone(), keys: form };
        self.objects.overwrite(&self.keys.marker(name), json(&marker)).await?;
        self.objects.delete_all(&stage_key).await?;
        self.objects.delete(&self.keys.placing(stage)).await
    }

    /// Copies the objects a replacement is about to overwrite to
    /// `.ibi/kept/<name>@<stage>/`, then writes `<that>.complete`; a replay
    /// finds it and keeps nothing twice (by then the objects are partly the new
    /// copy's). Nothing is overwritten before the keep is complete.
    async fn keep(&self, name: &RepositoryName, stage: StageId, old: &[object_store::ObjectMeta]) -> Result<()> {
        let base = self.keys.kept(name, &keys::stage_token(stage));
        let complete = Key::from(format!("{base}.complete"));
        if self.objects.get(&complete).await?.is_some() {
            return Ok(());
        }
        let item = self.keys.item(name);
        stream::iter(old.iter())
            .map(|meta| {
                let (item, base) = (&item, &base);
                async move {
                    let Some(parts) = meta.location.prefix_match(item) else { return Ok(()) };
                    let mut to = base.clone();
                    to.extend(parts);
                    self.objects.copy(&meta.location, &to).await
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<()>()
            .await?;
        self.objects.overwrite(&complete, name.to_string().into_bytes()).await
    }

    /// Writes the intents of a batch of direct placements (as few objects as
    /// their size allows) and returns each placement's intent and the intents'
    /// keys, which the caller deletes with the items' own intents once placed.
    pub async fn write_direct_batch(&self, direct: &[&Placement]) -> Result<(Vec<DirectIntent>, Vec<Key>)> {
        let log_after = self.log.end().await?;
        let intents: Vec<DirectIntent> =
            direct.iter().map(|p| DirectIntent { name: p.name.clone(), action: p.action.clone(), log_after }).collect();
        let mut written = Vec::new();
        let mut entries = Vec::new();
        let mut bytes = 0;
        for (p, intent) in direct.iter().zip(&intents) {
            let entry = DirectEntry { stage: keys::stage_token(p.stage), intent: intent.clone() };
            bytes += json(&entry).len();
            entries.push(entry);
            if bytes >= DIRECT_BATCH_BYTES {
                written.push(self.write_batch_intent(std::mem::take(&mut entries)).await?);
                bytes = 0;
            }
        }
        if !entries.is_empty() {
            written.push(self.write_batch_intent(entries).await?);
        }
        Ok((intents, written))
    }

    async fn write_batch_intent(&self, entries: Vec<DirectEntry>) -> Result<Key> {
        let key = self.keys.direct_batch(&uuid::Uuid::new_v4().simple().to_string());
        self.objects.overwrite(&key, json(&DirectBatch { entries })).await?;
        Ok(key)
    }

    /// Commits an item staged at its own keys, its batch's intent written: the
    /// marker, create-only, then its events, alias and record; the caller deletes
    /// the batch's intents together after. `Ok(Err(_))` when the name is taken.
    pub async fn place_direct(
        &self,
        p: &Placement,
        dirs: BTreeSet<String>,
        intent: &DirectIntent,
    ) -> Result<Result<(), Refusal>> {
        let record = match &p.record {
            Some(record) => record.clone(),
            None => self.record_at(&self.keys.item(&p.name), &p.name).await?,
        };
        // The stage it came from, which readers pass over (it is not `placing`),
        // tells recovery whose item this is.
        let stage = Some(keys::stage_token(p.stage));
        let marker = Marker { placing: false, stage, dirs: dirs.into_iter().collect(), keys: KeyForm::Names };
        if self.objects.put(&self.keys.marker(&p.name), json(&marker), PutMode::Create).await?.is_err() {
            let path = format!("{}/{}", self.objects.place, p.name).into();
            return Ok(Err(Error::AlreadyExists { path }));
        }
        self.commit_direct(intent, p.stage, p.ibip, &record, false).await?;
        Ok(Ok(()))
    }

    /// The events, alias and record of a direct placement whose marker is written.
    async fn commit_direct(
        &self,
        intent: &DirectIntent,
        stage: StageId,
        ibip: Option<Ibip>,
        record: &ItemRecord,
        replayed: bool,
    ) -> Result<()> {
        let events = placement_events(record, &intent.action, &keys::stage_token(stage));
        self.log.append(&events, replayed.then_some(intent.log_after)).await?;
        let name = &intent.name;
        if let Some(ibip) = ibip {
            self.objects.overwrite(&self.keys.alias(&ibip), name.to_string().into_bytes()).await?;
        }
        self.objects.overwrite(&self.keys.record(name), json(record)).await
    }

    /// Completes or clears one direct placement a killed writer left: its files
    /// are deleted when its marker never came, its events, alias and record
    /// completed when it did. An item another placement committed at its name
    /// (its marker names another stage) is left as it is, and so is one whose
    /// record already holds it present (its record is its commit's last step):
    /// an intent another writer in the bucket planted, naming an item ibi
    /// placed, cannot have its action logged for that item.
    async fn recover_direct(&self, key: &Key, stage: StageId, intent: &DirectIntent) -> Result<()> {
        self.settle_direct(stage, intent).await?;
        self.objects.delete(key).await
    }

    /// Completes or clears one direct placement a killed writer left (its intent
    /// is the caller's to delete).
    async fn settle_direct(&self, stage: StageId, intent: &DirectIntent) -> Result<()> {
        let name = &intent.name;
        match self.marker(name).await? {
            None => self.objects.delete_all(&self.keys.item(name)).await?,
            Some(Marker { stage: Some(other), .. }) if other != keys::stage_token(stage) => {}
            Some(_) => {
                let record = self.record_at(&self.keys.item(name), name).await?;
                if !self.records_present(&record).await? {
                    self.commit_direct(intent, stage, record.ibip, &record, true).await?;
                }
            }
        }
        Ok(())
    }

    /// The stages and names of the direct intent at `key`: one stage's
    /// (`.ibi/direct/<stage>`) or a group's (`.ibi/direct/g<token>`, its entries
    /// whose stage reads as one); `None` for a key of neither form, or gone.
    async fn direct_intents(&self, key: &Key) -> Result<Option<Vec<(StageId, DirectIntent)>>> {
        let Some(file) = key.filename() else { return Ok(None) };
        let is_group = file.starts_with(keys::GROUP_MARK);
        let stage = keys::parse_stage(file);
        if stage.is_none() && !is_group {
            return Ok(None);
        }
        let Some(found) = self.objects.get(key).await? else { return Ok(None) };
        if let Some(stage) = stage {
            return Ok(Some(vec![(stage, DirectIntent::parse(&found.bytes)?)]));
        }
        let group: DirectGroup = parse(&found.bytes, self.objects, key)?;
        let named = |entry: GroupedStage| {
            let stage = keys::parse_stage(&entry.stage)?;
            Some((stage, DirectIntent { name: entry.name, action: Action::default(), log_after: 0 }))
        };
        Ok(Some(group.stages.into_iter().filter_map(named).collect()))
    }

    /// Whether the stored record of `record`'s item holds it present, as its bag is.
    async fn records_present(&self, record: &ItemRecord) -> Result<bool> {
        let key = self.keys.record(&record.name);
        let Some(found) = self.objects.get(&key).await? else { return Ok(false) };
        let stored: ItemRecord = parse(&found.bytes, self.objects, &key)?;
        Ok(stored.status == Status::Present && stored.current().digest == record.current().digest)
    }

    async fn delete_keys(&self, keys: &[Key]) -> Result<()> {
        stream::iter(keys).map(|k| self.objects.delete(k)).buffer_unordered(IN_FLIGHT).try_collect::<()>().await
    }

    /// Removes one item: intent, marker, files, alias, then the record says `removed`
    /// and the log records where it went.
    pub async fn remove_one(&self, name: &RepositoryName, ibip: Option<Ibip>) -> Result<()> {
        let step = uuid::Uuid::new_v4().to_string();
        let intent = RemovalIntent { ibip: ibip.map(|i| i.to_string()), step, log_after: self.log.end().await? };
        self.objects.overwrite(&self.keys.removing(name), json(&intent)).await?;
        self.complete_removal(name, &intent, false).await
    }

    /// The removal `intent` describes, from its second step (recovery replays it).
    async fn complete_removal(&self, name: &RepositoryName, intent: &RemovalIntent, replayed: bool) -> Result<()> {
        let ibip = intent.ibip.as_deref().and_then(|i| Ibip::parse(i).ok());
        self.objects.delete(&self.keys.marker(name)).await?;
        self.checks.forget(name).await?;
        self.objects.delete_all(&self.keys.item(name)).await?;
        if let Some(ibip) = ibip {
            let alias = self.keys.alias(&ibip);
            let names_it = self.objects.get(&alias).await?.is_some_and(|f| f.bytes == name.to_string().as_bytes());
            if names_it {
                self.objects.delete(&alias).await?;
            }
        }
        let record_key = self.keys.record(name);
        let mut record: Option<ItemRecord> = match self.objects.get(&record_key).await? {
            Some(found) => Some(parse(&found.bytes, self.objects, &record_key)?),
            None => None,
        };
        if let Some(record) = record.as_mut() {
            record.status = Status::Removed;
            self.objects.overwrite(&record_key, json(&record)).await?;
        }
        let step = if intent.step.is_empty() { name.to_string() } else { intent.step.clone() };
        let event = removal_event(name, record.as_ref(), &step);
        self.log.append(&[event], replayed.then_some(intent.log_after)).await?;
        self.objects.delete(&self.keys.removing(name)).await
    }
}

impl Placer<'_> {
    /// Completes or clears what killed writers left: placements whose marker names
    /// their stage are finished, other stages deleted, removals completed.
    pub async fn recover(&self) -> Result<()> {
        for meta in self.objects.list_all(&self.keys.at(keys::PLACING)).await? {
            let Some(stage) = meta.location.filename().and_then(keys::parse_stage) else { continue };
            let Some(found) = self.objects.get(&meta.location).await? else { continue };
            let intent: Intent = parse(&found.bytes, self.objects, &meta.location)?;
            let token = Some(keys::stage_token(stage));
            match self.marker(&intent.name).await? {
                Some(marker) if marker.placing && marker.stage == token => self.finish(&intent, stage, true).await?,
                _ => {
                    self.objects.delete_all(&self.keys.stage(stage)).await?;
                    self.objects.delete(&meta.location).await?;
                }
            }
        }
        for meta in self.objects.list_all(&self.keys.at(keys::REMOVING)).await? {
            let Some(found) = self.objects.get(&meta.location).await? else { continue };
            let Some(intent) = RemovalIntent::parse(&found.bytes) else {
                let path = self.objects.url(&meta.location).into();
                return Err(Error::CorruptState { path, problem: "not a removal intent".into() });
            };
            let text = meta.location.filename().unwrap_or_default().replace('+', "/");
            let name = RepositoryName::parse(&text).map_err(Error::from)?;
            self.complete_removal(&name, &intent, true).await?;
        }
        for meta in self.objects.list_all(&self.keys.at(keys::DIRECT_BATCHES)).await? {
            let Some(found) = self.objects.get(&meta.location).await? else { continue };
            let batch: DirectBatch = parse(&found.bytes, self.objects, &meta.location)?;
            for DirectEntry { stage, intent } in &batch.entries {
                let Some(stage) = keys::parse_stage(stage) else { continue };
                self.recover_direct(&self.keys.direct(stage), stage, intent).await?;
            }
            self.objects.delete(&meta.location).await?;
        }
        for meta in self.objects.list_all(&self.keys.at(keys::DIRECT)).await? {
            let Some(intents) = self.direct_intents(&meta.location).await? else { continue };
            for (stage, intent) in &intents {
                self.settle_direct(*stage, intent).await?;
            }
            self.objects.delete(&meta.location).await?;
        }
        self.objects.delete_all(&self.keys.at(keys::STAGING)).await
    }

    /// The names whose files a killed writer left at their own keys with no commit
    /// marker (`.ibi/direct/` intents whose marker never came): not items to ibi,
    /// but folders that look like bags to aws-cli or rclone until `recover` runs.
    pub async fn partial_items(&self) -> Result<Vec<RepositoryName>> {
        let mut partial = Vec::new();
        for meta in self.objects.list_all(&self.keys.at(keys::DIRECT)).await? {
            let Ok(Some(intents)) = self.direct_intents(&meta.location).await else { continue };
            for (_, DirectIntent { name, .. }) in intents {
                if self.marker(&name).await?.is_none() && self.objects.holds_objects(&self.keys.item(&name)).await? {
                    partial.push(name);
                }
            }
        }
        Ok(partial)
    }

    /// How many stages and intents killed writers left.
    pub async fn leftover_count(&self) -> Result<usize> {
        // Stages are counted by the objects under them: an emptied folder is none
        // (SeaweedFS lists it as a sub-prefix for ever).
        let staged = self.objects.list_all(&self.keys.at(keys::STAGING)).await?;
        let stage_root = self.keys.at(keys::STAGING);
        let tokens: BTreeSet<String> = staged
            .iter()
            .filter_map(|m| m.location.prefix_match(&stage_root)?.next().map(|p| p.as_ref().to_string()))
            .collect();
        let stages = tokens.len();
        let placing = self.objects.list_level(&self.keys.at(keys::PLACING)).await?.objects.len();
        let removing = self.objects.list_level(&self.keys.at(keys::REMOVING)).await?.objects.len();
        let direct = self.objects.list_level(&self.keys.at(keys::DIRECT)).await?.objects.len();
        let batches = self.objects.list_level(&self.keys.at(keys::DIRECT_BATCHES)).await?.objects.len();
        Ok(stages + placing + removing + direct + batches)
    }
}
