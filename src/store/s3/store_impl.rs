//! `Store` for `S3Store`: each call maps onto the keys of `keys` and the protocol
//! of `place`, and runs its requests concurrently where it has many.

use super::place::{DirectGroup, DirectGroupLeft, GroupedStage};
use super::*;
use crate::store::inventory::{FixityCheck, Forward};

/// How many items a transfer into S3 stages at once.
const STAGING_THREADS: usize = 4;

impl Store for S3Store {
    fn aliases(&self) -> &dyn crate::store::aliases::Aliases {
        self
    }

    fn inventory(&self) -> &dyn crate::store::records::Records {
        self
    }

    fn ledger(&self) -> &dyn crate::store::ledger::Ledger {
        self
    }

    fn kept_copies(&self) -> Option<&dyn crate::store::kept::KeptCopies> {
        Some(self)
    }

    fn store_checksums(&self) -> Option<&dyn crate::store::attest::StoreChecksums> {
        Some(self)
    }

    fn copy_states(&self) -> Option<&dyn crate::store::copy_states::CopyStates> {
        Some(self)
    }

    fn location(&self) -> String {
        self.objects.place.clone()
    }

    fn local_root(&self) -> Option<&Path> {
        None
    }

    fn subsystem(&self) -> &Subsystem {
        &self.subsystem
    }

    fn organisation(&self) -> Option<&str> {
        self.config.organisation.as_deref()
    }

    fn as_dyn(&self) -> &dyn Store {
        self
    }

    /// Each staged file is a request: `STAGING_THREADS` items at once keep the
    /// server busy where the cores alone would leave it waiting on each answer.
    fn transfer_shape(&self) -> crate::store::TransferShape {
        crate::store::TransferShape { staging_threads: Some(STAGING_THREADS), ..Default::default() }
    }

    fn walk(&self) -> Box<dyn Iterator<Item = Result<Listed>> + Send + '_> {
        walk::leaves(&self.objects, self.keys.at(keys::MARKERS))
    }

    fn slot(&self, name: &RepositoryName) -> Result<Slot> {
        let exists = self.objects.run(self.objects.exists(&self.keys.marker(name)))?;
        Ok(if exists { Slot::Item } else { Slot::Empty })
    }

    fn slots(&self, names: &[RepositoryName]) -> Result<Vec<Slot>> {
        let markers: Vec<Key> = names.iter().map(|name| self.keys.marker(name)).collect();
        let held = self.objects.run(self.listed_or_asked(&markers))?;
        Ok(held.into_iter().map(|held| if held { Slot::Item } else { Slot::Empty }).collect())
    }

    fn item_files<'a>(&'a self, name: &RepositoryName) -> Box<dyn BagFiles + 'a> {
        Box::new(self.item_bag(name))
    }

    fn open(
        &self,
        name: &RepositoryName,
        rel: &str,
    ) -> std::io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)> {
        let bag = self.item_bag(name);
        if !bag.exists {
            return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        }
        Ok((Box::new(bag.reader(rel)?), None))
    }

    fn leftovers(&self) -> Vec<Problem> {
        // With the lease free no writer is at work, so any stage or intent is left over.
        // It is read, not taken: a reader may hold read-only credentials.
        let held = super::lease::is_held(&self.objects, &self.keys);
        let placer = self.placer();
        let counted = held.and_then(|held| match held {
            true => Ok((0, Vec::new())),
            false => self.objects.run(async {
                let n = placer.leftover_count().await?;
                let partial = if n > 0 { placer.partial_items().await? } else { Vec::new() };
                Ok((n, partial))
            }),
        });
        let problem = |detail: String| Problem::new("staging", None, ProblemKind::Leftover, detail);
        match counted {
            Ok((0, _)) => Vec::new(),
            Ok((n, partial)) => {
                let mut problems = vec![problem(format!("{n} staged item(s) or intents left by an interrupted writer; the next writing command completes or clears them"))];
                problems.extend(partial.iter().map(|name| {
                    let at = format!("{}/{name}/", self.objects.place);
                    problem(format!("{at} holds the files of an item a killed writer never committed (no commit marker): it is no item, though aws-cli or rclone would copy it as one; the next writing command removes it"))
                }));
                problems
            }
            Err(e) => vec![problem(e.to_string())],
        }
    }

    fn begin_write(&self, wait: LockWait) -> Result<Box<dyn Writer + '_>> {
        Leased::begin(self, wait)
    }

    /// From the bags, as the provided method does, but `IN_FLIGHT` at once.
    fn identities(&self, names: &[RepositoryName]) -> Vec<Result<String>> {
        self.bag_identities(names)
    }

    /// Each identity read by its own requests, `IN_FLIGHT` at once.
    fn bag_identities(&self, names: &[RepositoryName]) -> Vec<Result<String>> {
        self.objects.run(stream::iter(names).map(|name| self.identity(name)).buffered(IN_FLIGHT).collect())
    }

    fn placement(
        &self,
        names: &[RepositoryName],
        cluster: &crate::store::config::SeaweedFs,
    ) -> Result<Option<Vec<crate::store::placement::ItemPlacement>>> {
        let folders: Vec<String> = names.iter().map(|name| self.keys.item(name).to_string()).collect();
        let bucket = self.objects.bucket();
        self.objects.run(super::seaweedfs::placements(cluster, bucket, &folders)).map(Some)
    }
}

impl crate::store::aliases::Aliases for S3Store {
    fn alias(&self, ibip: &Ibip) -> Result<Option<RepositoryName>> {
        self.objects.run(self.alias_async(ibip))
    }

    fn dangling_aliases(&self, checked: &dyn Fn(&Ibip) -> bool) -> Result<Vec<(Ibip, RepositoryName)>> {
        let root = self.keys.at(keys::ALIASES);
        let listed = self.objects.run(self.objects.list_all(&root))?;
        let ibips: Vec<Ibip> = listed
            .iter()
            .filter_map(|m| Ibip::parse(&keys::Keys::relative(&root, &m.location, KeyForm::Names)?).ok())
            .filter(|ibip| !checked(ibip))
            .collect();
        let found: Vec<Option<(Ibip, RepositoryName)>> = self.objects.run(
            stream::iter(ibips)
                .map(|ibip| async move {
                    // A corrupt alias is its item's problem (alias_problem), not a dangling one.
                    let name = match self.alias_async(&ibip).await {
                        Ok(Some(name)) => name,
                        Ok(None) | Err(Error::CorruptState { .. }) => return Ok(None),
                        Err(e) => return Err(e),
                    };
                    let held = self.objects.exists(&self.keys.marker(&name)).await?;
                    Ok::<_, Error>((!held && ibip.date() == name.date()).then_some((ibip, name)))
                })
                .buffered(IN_FLIGHT)
                .try_collect(),
        )?;
        Ok(found.into_iter().flatten().collect())
    }

    fn alias_problem(&self, ibip: &Ibip, name: &RepositoryName) -> Option<String> {
        match self.alias(ibip) {
            Ok(Some(target)) if &target == name => None,
            Ok(Some(target)) => Some(format!("alias {ibip} names {target}, expected {name}")),
            Ok(None) => Some(format!("alias {ibip} is missing")),
            Err(e) => Some(format!("alias {ibip} cannot be read: {e}")),
        }
    }
}

impl crate::store::records::Records for S3Store {
    fn has_inventory(&self) -> bool {
        true
    }

    fn records(&self, names: &[RepositoryName]) -> Result<Vec<Option<ItemRecord>>> {
        let keys: Vec<Key> = names.iter().map(|name| self.keys.record(name)).collect();
        let held = self.objects.run(self.listed_or_asked(&keys))?;
        let asked: Vec<RepositoryName> =
            names.iter().zip(&held).filter(|(_, held)| **held).map(|(name, _)| name.clone()).collect();
        let mut read = self.record_batch_lenient(&asked)?.into_iter();
        Ok(held.into_iter().map(|held| if held { read.next().flatten() } else { None }).collect())
    }

    fn all_records(&self) -> Box<dyn Iterator<Item = Result<ItemRecord>> + Send + '_> {
        let mut leaves = walk::leaves(&self.objects, self.keys.at(keys::INVENTORY)).peekable();
        Box::new(
            std::iter::from_fn(move || {
                let mut names = Vec::new();
                while names.len() < 256 {
                    match leaves.next()? {
                        Ok(Listed::Item(name)) => names.push(name),
                        Ok(Listed::Stray { .. }) => {}
                        Err(e) => return Some(vec![Err(e)]),
                    }
                    if leaves.peek().is_none() {
                        break;
                    }
                }
                Some(match self.record_batch_each(&names) {
                    Ok(records) => records.into_iter().filter_map(Result::transpose).collect(),
                    Err(e) => vec![Err(e)],
                })
            })
            .flatten(),
        )
    }

    /// Listed, no record read.
    fn record_names(&self) -> Box<dyn Iterator<Item = Result<RepositoryName>> + Send + '_> {
        let leaves = walk::leaves(&self.objects, self.keys.at(keys::INVENTORY));
        Box::new(leaves.filter_map(|leaf| match leaf {
            Ok(Listed::Item(name)) => Some(Ok(name)),
            Ok(Listed::Stray { .. }) => None,
            Err(e) => Some(Err(e)),
        }))
    }

    fn deposit_record(&self, key: &str) -> Result<Option<RepositoryName>> {
        let digest = crate::digest::of_bytes(key.as_bytes(), &[]);
        let Some(found) = self.objects.run(self.objects.get(&self.keys.deposit(digest.sha256())))? else {
            return Ok(None);
        };
        Ok(RepositoryName::parse(String::from_utf8_lossy(&found.bytes).trim()).ok())
    }

    fn collection_id(&self) -> Option<String> {
        self.config.id.clone()
    }

    fn current_config(&self) -> Result<Option<CollectionConfig>> {
        Ok(Some(self.stored_config()?.0))
    }

    fn minting(&self) -> Result<Minting> {
        self.minting_now()
    }
}

impl crate::store::ledger::Ledger for S3Store {
    fn latest_witness(&self) -> Result<Option<String>> {
        let found = self.objects.run(self.objects.get_capped(&self.keys.at(WITNESS), MAX_WITNESS_BYTES))?;
        Ok(found.map(|found| String::from_utf8_lossy(&found.bytes).into_owned()))
    }

    /// Kept at `.ibi/chain-cursor.json`; one that does not read is none (the next check reads the whole log).
    fn chain_cursor(&self) -> Result<Option<crate::events::ChainCursor>> {
        let found = self.objects.run(self.objects.get_capped(&self.keys.at(CHAIN_CURSOR), MAX_WITNESS_BYTES))?;
        Ok(found.and_then(|found| serde_json::from_slice(&found.bytes).ok()))
    }

    fn fixity_checks(&self) -> Result<Option<Vec<crate::store::inventory::FixityCheck>>> {
        let mut checks = Vec::new();
        self.each_fixity_check(&mut |check| checks.push(check))?;
        Ok(Some(checks))
    }

    fn each_fixity_check(&self, each: &mut dyn FnMut(FixityCheck)) -> Result<bool> {
        let Some(key) = self.check_key()? else { return Ok(true) };
        let tags = std::hash::RandomState::new();
        let (signed, held) = self.objects.run(self.logged_checks(&key, &tags))?;
        signed.into_iter().zip(held).filter(|(_, held)| *held).filter_map(|(s, _)| s.into_check()).for_each(each);
        Ok(true)
    }

    fn events(&self, item: Option<&RepositoryName>, after: u64) -> Result<Option<Vec<crate::events::StoredEvent>>> {
        self.objects.run(self.log().page(item, after, crate::store::log::EVENT_PAGE)).map(Some)
    }

    fn writer(&self) -> Option<&dyn crate::store::ledger::LedgerWriter> {
        Some(self)
    }
}

impl crate::store::ledger::LedgerWriter for S3Store {
    /// The checks' events are appended under the lease (taken for a moment; a
    /// writer holding it long makes this fail, and verify says so), then each
    /// item's last check is kept beside its record.
    fn record_fixity(&self, checks: &[crate::store::inventory::FixityCheck]) -> Result<()> {
        if checks.is_empty() {
            return Ok(());
        }
        self.answers_writes()?;
        let _lease = WriteBackend::lease(self, LockWait::For(Duration::from_secs(10)))?;
        // A check this machine cannot sign is kept, but counts as never made.
        let seed = self.witness_seed_here().ok().flatten();
        let events: Vec<_> = checks.iter().map(|check| check.event()).collect();
        let log = self.log();
        self.objects.run(async {
            let appended = log.append(&events, None).await?;
            log.save_end().await?;
            let logged: std::collections::HashMap<&str, (u64, &str)> =
                appended.iter().map(|(id, seq, hash)| (id.as_str(), (*seq, hash.as_str()))).collect();
            let sign = |check: &FixityCheck, (seq, hash): (u64, &str)| {
                let text = super::checks::signed_text(check, seq, hash);
                let key = ed25519_dalek::SigningKey::from_bytes(seed.as_ref()?);
                let signature = hex::encode(ed25519_dalek::Signer::sign(&key, text.as_bytes()).to_bytes());
                Some(super::checks::Logged { seq, hash: hash.to_string(), signature })
            };
            let claimed: Vec<_> = checks
                .iter()
                .zip(&events)
                .map(|(check, e)| (check.clone(), logged.get(e.id.as_str()).and_then(|l| sign(check, *l))))
                .collect();
            self.checks().keep(&claimed).await
        })
    }

    /// The key lives on this machine (`witness_key::machine_key_path`), not in
    /// the bucket; `collection.toml` publishes its public key.
    fn witness_seed(&self) -> Result<Option<[u8; 32]>> {
        self.witness_seed_here()
    }

    /// Kept at `.ibi/witness.json`, and logged under the lease as fixity checks are.
    fn keep_witness(&self, json: &str) -> Result<()> {
        self.answers_writes()?;
        let _lease = WriteBackend::lease(self, LockWait::For(Duration::from_secs(10)))?;
        let log = self.log();
        self.objects.run(async {
            self.objects.overwrite(&self.keys.at(WITNESS), json.as_bytes().to_vec()).await?;
            log.append(&[crate::store::log::witness_event(json)], None).await?;
            log.save_end().await
        })
    }

    fn keep_chain_cursor(&self, cursor: &crate::events::ChainCursor) -> Result<()> {
        self.answers_writes()?;
        let _lease = WriteBackend::lease(self, LockWait::For(Duration::from_secs(10)))?;
        let json = serde_json::to_vec(cursor).expect("a cursor serialises");
        self.objects.run(self.objects.overwrite(&self.keys.at(CHAIN_CURSOR), json))
    }

    /// Rewritten with `If-Match`, as the minting part is (`set_minting`).
    fn change_config(
        &self,
        change: &mut dyn FnMut(&mut CollectionConfig) -> Result<()>,
    ) -> Result<Option<CollectionConfig>> {
        let place = format!("{}/.ibi/collection.toml", self.objects.place);
        let key = self.keys.config();
        for _ in 0..CONFIG_TRIES {
            let (mut config, version) = self.stored_config()?;
            change(&mut config)?;
            let text = config.to_toml();
            CollectionConfig::parse(&text, &place)?;
            // A lost conditional write means another writer changed it since it
            // was read: read it again and make this change to what it is now.
            if self.objects.run(self.objects.put(&key, text.into_bytes(), PutMode::Update(version)))?.is_ok() {
                return Ok(Some(config));
            }
        }
        Err(Error::Invalid {
            what: format!("the config of {}", self.objects.place),
            problem: format!("other writers changed it {CONFIG_TRIES} times while this change was made; run it again"),
        })
    }
}

impl WriteBackend for S3Store {
    fn log_events(&self, events: &[crate::events::Event]) -> Result<()> {
        let log = self.log();
        self.objects.run(async {
            log.append(events, None).await?;
            log.save_end().await
        })
    }

    fn upgrade_stored_form(&self, done: &dyn Fn(&RepositoryName, Option<&str>)) -> Result<usize> {
        let rewritten = self.upgrade_keys(done)?;
        self.objects.run(self.log().index_earlier_events())?;
        Ok(rewritten)
    }

    fn set_minting(&self, minting: &Minting) -> Result<()> {
        S3Store::set_minting(self, minting)
    }

    /// Each record is rewritten with where the item went (under the lease).
    fn note_moved(&self, names: &[RepositoryName], to: &Forward) -> Result<()> {
        let records = self.record_batch_lenient(names)?;
        let writes = records.into_iter().flatten().map(|mut record| {
            record.moved = Some(to.clone());
            let key = self.keys.record(&record.name);
            async move { self.objects.overwrite(&key, serde_json::to_vec(&record).expect("a record serialises")).await }
        });
        self.objects.run(stream::iter(writes).buffer_unordered(IN_FLIGHT).try_collect::<()>())
    }

    /// Taking the lease forgets the log's end this handle knew: another writer
    /// may have appended since.
    fn lease(&self, wait: LockWait) -> Result<Lease> {
        let lease = lease::take(&self.objects, &self.keys, wait)?;
        *self.log_tail.blocking_lock() = None;
        Ok(lease)
    }

    fn recover(&self) -> Result<()> {
        self.objects.run(self.placer().recover())
    }

    fn minter_state(&self) -> Box<dyn MinterState + '_> {
        let machine = self
            .minter_dir
            .as_ref()
            .map(|dir| crate::store::local::minter::machine_states(dir, &self.subsystem))
            .unwrap_or_default();
        let floor = Box::new(|| self.held_floor());
        Box::new(lease::ObjectMinter { objects: &self.objects, keys: &self.keys, machine, floor })
    }

    fn write_deposit_records(&self, records: &[(String, RepositoryName)]) -> Result<()> {
        self.objects.run(
            stream::iter(records)
                .map(|(key, name)| async move {
                    let digest = crate::digest::of_bytes(key.as_bytes(), &[]);
                    self.objects.overwrite(&self.keys.deposit(digest.sha256()), name.to_string().into_bytes()).await
                })
                .buffer_unordered(IN_FLIGHT)
                .try_collect::<()>(),
        )
    }

    fn stage(&self) -> Result<StageId> {
        let stage = S3Store::new_stage();
        lock(&self.stages).insert(stage.0, StageMeta::default());
        Ok(stage)
    }

    fn stage_for(&self, name: &RepositoryName, replace: bool) -> Result<StageId> {
        if replace {
            return self.stage();
        }
        let stage = S3Store::new_stage();
        let intent = self.keys.direct(stage);
        self.objects.run(self.objects.overwrite(&intent, name.to_string().into_bytes()))?;
        lock(&self.stages).insert(stage.0, StageMeta { direct: Some(name.clone()), ..StageMeta::default() });
        Ok(stage)
    }

    /// One intent for every new item among `items` (`.ibi/direct/g<token>`), not
    /// one each: a mirror into a bucket writes one object fewer per item.
    fn stages_for(&self, items: &[(RepositoryName, bool)]) -> Result<Option<Vec<StageId>>> {
        let new = items.iter().filter(|(_, replace)| !replace).count();
        if new < 2 {
            return Ok(None);
        }
        let stages: Vec<StageId> = items.iter().map(|_| S3Store::new_stage()).collect();
        let grouped = items.iter().zip(&stages).filter(|((_, replace), _)| !replace);
        let entries =
            grouped.map(|((name, _), stage)| GroupedStage { stage: keys::stage_token(*stage), name: name.clone() });
        let key = self.keys.direct_group(&uuid::Uuid::new_v4().simple().to_string());
        let body = serde_json::to_vec(&DirectGroup { stages: entries.collect() }).expect("a group intent serialises");
        self.objects.run(self.objects.overwrite(&key, body))?;
        let left = std::sync::Arc::new(DirectGroupLeft { key, left: new.into() });
        let mut metas = lock(&self.stages);
        for ((name, replace), stage) in items.iter().zip(&stages) {
            let meta = match replace {
                true => StageMeta::default(),
                false => StageMeta { direct: Some(name.clone()), group: Some(left.clone()), ..StageMeta::default() },
            };
            metas.insert(stage.0, meta);
        }
        Ok(Some(stages))
    }

    fn stage_dir(&self, stage: StageId, rel: &str) -> Result<()> {
        check_path(rel).map_err(|why| Error::Invalid { what: "staged path".into(), problem: why })?;
        let mut stages = lock(&self.stages);
        let meta = stages.get_mut(&stage.0).ok_or_else(|| no_stage(stage))?;
        meta.dirs.insert(rel.to_string());
        Ok(())
    }

    fn stage_file(&self, stage: StageId, rel: &str, from: FileSource) -> std::result::Result<Digests, CopyError> {
        let invalid = |why: String| CopyError::Destination(Error::Invalid { what: "staged path".into(), problem: why });
        check_path(rel).map_err(invalid)?;
        let key = self.staged_key(stage, rel).map_err(CopyError::Destination)?;
        let (digests, bytes) = upload::send(&self.objects, &key, from)?;
        self.staged(stage, rel, digests.size, bytes);
        Ok(digests)
    }

    fn stage_link(&self, stage: StageId, rel: &str, name: &RepositoryName, from: &str) -> Result<()> {
        check_path(rel).map_err(|why| Error::Invalid { what: "staged path".into(), problem: why })?;
        let (base, marker) = self.item_base(name)?.ok_or_else(|| Error::NotFound {
            what: "item",
            name: name.to_string(),
            place: self.objects.place.clone().into(),
        })?;
        let source = keys::key_under(&base, from, marker.keys);
        let size = self.objects.run(self.objects.size(&source))?;
        self.objects.run(self.objects.copy(&source, &self.staged_key(stage, rel)?))?;
        self.staged(stage, rel, size, None);
        Ok(())
    }

    fn staged_files<'a>(&'a self, stage: StageId) -> Box<dyn BagFiles + 'a> {
        let meta = lock(&self.stages).get(&stage.0).cloned();
        let base = match meta.as_ref().and_then(|m| m.direct.as_ref()) {
            Some(name) => self.keys.item(name),
            None => self.keys.stage(stage),
        };
        let listed = || self.objects.run(self.objects.list_all(&base)).is_ok_and(|l| !l.is_empty());
        let exists = meta.is_some() || listed();
        let (dirs, known, cached) = match meta {
            Some(meta) => (meta.dirs.into_iter().collect(), Some(meta.files), meta.tags),
            None => (Vec::new(), None, HashMap::new()),
        };
        let form = KeyForm::Names;
        Box::new(ObjectBag { objects: &self.objects, base, dirs, exists, known, cached, settled: None, form })
    }

    fn discard(&self, stage: StageId) {
        let Some(meta) = lock(&self.stages).remove(&stage.0) else { return };
        let _ = self.objects.run(async {
            match &meta.direct {
                // Never delete at an item's keys once an item holds them.
                Some(name) if !self.objects.exists(&self.keys.marker(name)).await? => {
                    for (rel, _) in &meta.files {
                        self.objects.delete(&self.keys.item_file(name, rel, KeyForm::Names)).await?;
                    }
                    self.delete_intent(self.intent_done(stage, &meta)).await
                }
                Some(_) => self.delete_intent(self.intent_done(stage, &meta)).await,
                None => self.objects.delete_all(&self.keys.stage(stage)).await,
            }
        });
    }

    fn place(&self, batch: &[Placement]) -> Result<Placed> {
        let batch = &self.without_known_history(batch)?;
        let metas: Vec<StageMeta> = {
            let stages = lock(&self.stages);
            batch
                .iter()
                .map(|p| stages.get(&p.stage.0).cloned().ok_or_else(|| no_stage(p.stage)))
                .collect::<Result<_>>()?
        };
        let placer = &self.placer();
        let direct: Vec<&Placement> =
            batch.iter().zip(&metas).filter(|(_, meta)| meta.direct.is_some()).map(|(p, _)| p).collect();
        let (intents, batch_intents) = match direct.is_empty() {
            true => (Vec::new(), Vec::new()),
            false => self.objects.run(placer.write_direct_batch(&direct))?,
        };
        let mut intents = intents.iter();
        let outcomes: Vec<std::result::Result<(), Refusal>> = self.objects.run(
            stream::iter(batch.iter().zip(metas).map(|(p, meta)| {
                let intent = meta.direct.as_ref().and_then(|_| intents.next());
                (p, meta, intent)
            }))
            .map(|(p, meta, intent)| async move {
                match intent {
                    Some(intent) => placer.place_direct(p, meta.dirs, intent).await,
                    None => placer.place_one(p, meta.dirs).await,
                }
            })
            .buffered(16)
            .try_collect(),
        )?;
        let placed: Vec<&Placement> = batch.iter().zip(&outcomes).filter(|(_, o)| o.is_ok()).map(|(p, _)| p).collect();
        let mut done: Vec<_> = {
            let mut stages = lock(&self.stages);
            let done = |p: &&Placement| {
                stages.remove(&p.stage.0).filter(|meta| meta.direct.is_some()).map(|meta| (p.stage, meta))
            };
            placed.iter().filter_map(done).filter_map(|(stage, meta)| self.intent_done(stage, &meta)).collect()
        };
        // The batch's intents go with them: each item they cover is placed, or
        // was refused and keeps its own intent (a name-only one) for `discard`.
        done.extend(batch_intents);
        self.objects.run(self.objects.delete_many(done))?;
        self.objects.run(self.log().save_end())?;
        Ok(batch.iter().map(|p| p.name.clone()).zip(outcomes).collect())
    }

    fn restore_alias(&self, ibip: &Ibip, name: &RepositoryName) -> Result<()> {
        self.objects.run(self.objects.overwrite(&self.keys.alias(ibip), name.to_string().into_bytes()))
    }

    fn remove(&self, names: &[RepositoryName]) -> Result<()> {
        let ibips: Vec<Option<Ibip>> = names.iter().map(|n| item_ibip(self, n).ok().flatten()).collect();
        let placer = self.placer();
        self.objects.run(
            stream::iter(names.iter().zip(ibips))
                .map(|(name, ibip)| placer.remove_one(name, ibip))
                .buffer_unordered(IN_FLIGHT)
                .try_collect::<()>(),
        )?;
        self.objects.run(self.log().save_end())
    }
}

impl S3Store {
    /// Every item's last check whose signature holds under `key`, and whether
    /// the log holds its event (`ObjectLog::holds`): the check keys listed,
    /// then the log's keys from the oldest claimed event on.
    async fn logged_checks(
        &self,
        key: &ed25519_dalek::VerifyingKey,
        tags: &std::hash::RandomState,
    ) -> Result<(Vec<super::checks::SignedCheck>, Vec<bool>)> {
        use rayon::prelude::*;
        // Each page's signatures checked on every core (one is tens of
        // microseconds), each check then kept compactly.
        let mut signed = Vec::new();
        self.checks()
            .each_page(&mut |page| {
                signed.par_extend(page.into_par_iter().filter_map(|(check, logged)| {
                    let logged = logged?;
                    let holds = super::checks::signed_by(&check, &logged, key);
                    holds.then(|| super::checks::SignedCheck::of(check, &logged, tags))
                }))
            })
            .await?;
        let claims: Vec<(u64, u64)> = signed.iter().map(|s| (s.seq, s.tag)).collect();
        let held = self.log().holds(&claims, tags).await?;
        Ok((signed, held))
    }

    /// The key a check key's signature must hold under: this machine's copy of
    /// the witness key where it has one (a key published in the bucket could
    /// be replaced by anyone who writes there), else the published one.
    fn check_key(&self) -> Result<Option<ed25519_dalek::VerifyingKey>> {
        use crate::store::witness_key::{machine_key_dir, machine_key_path, public_key, witness_seed};
        let here = match (self.config.id.as_deref(), machine_key_dir()) {
            (Some(id), Some(dir)) => witness_seed(&machine_key_path(&dir, id), false)?.map(|seed| public_key(&seed)),
            _ => None,
        };
        let Some(hex_key) = here.or(self.stored_config()?.0.witness_key) else { return Ok(None) };
        let bytes: Option<[u8; 32]> = hex::decode(&hex_key).ok().and_then(|b| b.try_into().ok());
        Ok(bytes.and_then(|b| ed25519_dalek::VerifyingKey::from_bytes(&b).ok()))
    }

    /// The batch with each carried event already in this log left out (an item
    /// that comes back keeps its history once): the log is listed once, and the
    /// events of the items that carry history are read.
    fn without_known_history(&self, batch: &[Placement]) -> Result<Vec<Placement>> {
        let carrying: BTreeSet<String> =
            batch.iter().filter(|p| !p.action.carried.is_empty()).map(|p| p.name.to_string()).collect();
        if carrying.is_empty() {
            return Ok(batch.to_vec());
        }
        let known = self.objects.run(self.log().ids_of(&carrying))?;
        let mut batch = batch.to_vec();
        for placement in &mut batch {
            placement.action.carried.retain(|event| !known.contains(&event.id));
        }
        Ok(batch)
    }
}

/// How many times a change of the configuration is made again on what another
/// writer left before it gives up.
const CONFIG_TRIES: usize = 16;

/// How long verify waits for a store to answer a write before it gives up
/// keeping fixity dates there (a store with a data centre down never answers).
const WRITES_ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// Where the latest witness is kept.
const WITNESS: &str = ".ibi/witness.json";

/// Where the last chain check of the log ended (`crate::events::ChainCursor`).
const CHAIN_CURSOR: &str = ".ibi/chain-cursor.json";

/// The longest witness read (a witness is a few hundred bytes; a local one is
/// read with the same cap).
const MAX_WITNESS_BYTES: u64 = 64 * 1024;

impl S3Store {
    /// The seed of the key that signs this collection's witnesses, from this
    /// machine's key folder. Made (and its public key published in the stored
    /// `collection.toml`) when the collection has none yet; a key here whose
    /// public key is not the published one is refused as replaced, and with a
    /// published key but none here, no witness can be signed on this machine.
    fn witness_seed_here(&self) -> Result<Option<[u8; 32]>> {
        use crate::store::ledger::LedgerWriter;
        use crate::store::witness_key::{machine_key_dir, machine_key_path, public_key, witness_seed};
        let (Some(id), Some(dir)) = (self.config.id.as_deref(), machine_key_dir()) else { return Ok(None) };
        let path = machine_key_path(&dir, id);
        let published = self.stored_config()?.0.witness_key;
        let may_write = published.is_none() && self.answers_writes().is_ok();
        if may_write {
            crate::fsx::create_dir_all_durable(&dir)?;
        }
        let Some(seed) = witness_seed(&path, may_write)? else {
            return match published {
                Some(key) => Err(Error::Invalid {
                    what: "witness key".into(),
                    problem: format!(
                        "{} publishes the witness key {key}, but this machine does not hold it: copy {} here from \
                         the machine that made it",
                        self.objects.place,
                        path.display()
                    ),
                }),
                None => Ok(None),
            };
        };
        let public = public_key(&seed);
        let published = match published {
            Some(key) => key,
            None => self
                .change_config(&mut |config| {
                    config.witness_key.get_or_insert(public.clone());
                    Ok(())
                })?
                .and_then(|config| config.witness_key)
                .unwrap_or_default(),
        };
        if published != public {
            return Err(Error::Data {
                what: path.display().to_string(),
                problem: format!(
                    "its public key {public} is not the one {}'s collection.toml publishes ({published}): the key \
                     was replaced. Restore the original key, or remove witness_key from collection.toml to publish \
                     this one",
                    self.objects.place
                ),
            });
        }
        Ok(Some(seed))
    }

    /// Whether the store answers a write promptly, asked once per handle: a
    /// reading command that keeps dates never waits on a store whose writes hang.
    fn answers_writes(&self) -> Result<()> {
        let answered = self.answers_writes.get_or_init(|| {
            let key = self.keys.probe(&uuid::Uuid::new_v4().to_string());
            let write = async {
                // Some bytes: SeaweedFS keeps an empty object in its filer alone,
                // which answers while the volumes' writes hang.
                self.objects.overwrite(&key, b"ibi write probe\n".to_vec()).await?;
                self.objects.delete(&key).await
            };
            match self.objects.run(async { tokio::time::timeout(WRITES_ANSWER_WITHIN, write).await }) {
                Ok(done) => done.map_err(|e| e.to_string()),
                Err(_) => Err(format!("it did not answer a write within {} s", WRITES_ANSWER_WITHIN.as_secs())),
            }
        });
        answered.clone().map_err(|problem| Error::Connection { place: self.objects.place.clone(), problem })
    }

    /// The newest name of the collection's own subsystem its inventory records (held,
    /// withdrawn or moved away), listed once per handle: a minter state restored from
    /// an older bucket never hands one out again.
    fn held_floor(&self) -> Result<Option<crate::id::Timestamp>> {
        if let Some(floor) = self.held_floor.get() {
            return Ok(*floor);
        }
        let own = self.subsystem.prefix();
        let mut newest = None;
        for listed in walk::leaves(&self.objects, self.keys.at(keys::INVENTORY)) {
            if let Listed::Item(name) = listed? {
                if name.prefix() == own {
                    newest = newest.max(Some(name.date()));
                }
            }
        }
        Ok(*self.held_floor.get_or_init(|| newest))
    }

    /// The name an alias object holds; a body that is no name is corrupt state.
    async fn alias_async(&self, ibip: &Ibip) -> Result<Option<RepositoryName>> {
        let key = self.keys.alias(ibip);
        let Some(found) = self.objects.get(&key).await? else { return Ok(None) };
        RepositoryName::parse(String::from_utf8_lossy(&found.bytes).trim())
            .map(Some)
            .map_err(|e| Error::CorruptState { path: self.objects.url(&key).into(), problem: e.to_string() })
    }

    /// The intent to delete now that direct stage `stage` is placed or
    /// discarded: its own, or its group's once no other stage of it is left.
    fn intent_done(&self, stage: StageId, meta: &StageMeta) -> Option<Key> {
        match &meta.group {
            Some(group) => group.one_done(),
            None => Some(self.keys.direct(stage)),
        }
    }

    async fn delete_intent(&self, key: Option<Key>) -> Result<()> {
        match key {
            Some(key) => self.objects.delete(&key).await,
            None => Ok(()),
        }
    }

    /// A new stage token, unique across processes and machines.
    pub(super) fn new_stage() -> StageId {
        StageId(uuid::Uuid::new_v4().as_u64_pair().0)
    }
}

/// The SHA-256 the bucket keeps of each object, from the checksum every PUT
/// of ibi's sends (`s3::connect`).
impl crate::store::attest::StoreChecksums for S3Store {
    fn stored_sha256(&self, name: &RepositoryName, rel: &str) -> Result<Option<String>> {
        self.item_bag(name).stored_sha256(rel)
    }
}
