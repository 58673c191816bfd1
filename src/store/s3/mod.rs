//! The object-storage backend: a collection in an S3-compatible bucket under a
//! prefix (`s3://BUCKET/PREFIX`), through the `object_store` crate. Items keep
//! the name path as their keys; atomicity comes from create-only and `If-Match`
//! writes of a commit marker per item instead of renames (`place`); the lease and
//! the minter are conditional writes too (`lease`). The async runtime stays
//! inside `objects`; every other module here, and all of `ibi`, is synchronous.
//! ARCHITECTURE.md ("Collections in object storage") has the whole protocol.

pub mod bag;
pub mod checks;
mod copy_states;
mod kept;
pub mod keys;
pub mod lease;
pub mod log;
pub mod objects;
pub mod place;
pub mod ranges;
pub mod seaweedfs;
pub mod upgrade;
pub mod upload;
pub mod walk;

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as Key;
use object_store::{ObjectStore, PutMode, RetryConfig};

use crate::bag::manifest::check_path;
use crate::bag::BagFiles;
use crate::digest::Digests;
use crate::error::{Error, Result};
use crate::fsx::CopyError;
use crate::id::minter::MinterState;
use crate::id::{Ibip, RepositoryName, Subsystem};
use crate::problem::{Problem, ProblemKind};
use crate::store::config::{CollectionConfig, Minting};
use crate::store::location::ObjectAddress;
use crate::store::{
    item_ibip, FileSource, ItemRecord, Lease, Leased, Listed, LockWait, Placed, Placement, Refusal, Slot, StageId,
    Store, WriteBackend, Writer,
};
use crate::sync::lock;
use bag::ObjectBag;
use keys::{KeyForm, Keys};
use objects::{Lost, Objects, IN_FLIGHT};
use place::{Marker, Placer};

/// A collection in object storage.
pub struct S3Store {
    pub(crate) objects: Objects,
    pub(crate) keys: Keys,
    config: CollectionConfig,
    subsystem: Subsystem,
    /// This handle's stages.
    stages: Mutex<HashMap<u64, StageMeta>>,
    /// The folder of the machine-wide minter states (`local::minter::machine_dir`).
    minter_dir: Option<std::path::PathBuf>,
    /// The newest name of its own subsystem the collection's inventory records,
    /// found once: the minter never goes at or before it (a restored bucket).
    held_floor: std::sync::OnceLock<Option<crate::id::Timestamp>>,
    /// The log's end, while this handle holds the lease.
    log_tail: log::KnownTail,
    log_index: log::KnownIndex,
    /// Whether this handle swept the superseded fixity check keys (`checks.rs`).
    checks_swept: std::sync::atomic::AtomicBool,
    /// Whether the store answered a write promptly (asked before keeping fixity dates).
    answers_writes: std::sync::OnceLock<std::result::Result<(), String>>,
}

/// What this handle knows of one of its stages.
#[derive(Debug, Clone, Default)]
struct StageMeta {
    /// The folders staged (an empty folder has no object).
    dirs: BTreeSet<String>,
    /// Staged at the item's own keys (`Writer::stage_for`), for this name.
    direct: Option<RepositoryName>,
    /// The intent this direct stage shares with others begun with it
    /// (`Writer::stages_for`); none when it has one of its own.
    group: Option<std::sync::Arc<place::DirectGroupLeft>>,
    /// The files written so far, relative to the bag, with their sizes.
    files: Vec<(String, u64)>,
    /// The bytes of the tag files written (small, read back by the check before placing).
    tags: HashMap<String, Vec<u8>>,
}

/// The client for `address`, configured from the standard AWS environment.
pub fn connect(address: &ObjectAddress) -> Result<Objects> {
    refuse_plain_http_unless_allowed(address)?;
    install_tls_crypto();
    let retry = RetryConfig { max_retries: 2, retry_timeout: Duration::from_secs(20), ..Default::default() };
    // Every PUT carries x-amz-checksum-sha256: a store that checks it (AWS,
    // SeaweedFS) refuses bytes that arrive changed and keeps the digest, which
    // a store-attested check reads back (`attest`).
    let store = AmazonS3Builder::from_env()
        .with_bucket_name(&address.bucket)
        .with_retry(retry)
        .with_checksum_algorithm(object_store::aws::Checksum::SHA256)
        .build()
        .map_err(|e| Error::Invalid { what: format!("S3 location {address}"), problem: e.to_string() })?;
    let store = Arc::new(store);
    let objects = Objects::new(store.clone() as Arc<dyn ObjectStore>, address.to_string())?;
    Ok(objects.with_signer(store))
}

/// The S3 client's TLS is rustls over `ring`, installed as the process's provider
/// before the first client is built (reqwest is built without one, so that the
/// C build of aws-lc is not needed). A provider already installed is kept.
fn install_tls_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A plain-HTTP endpoint without `AWS_ALLOW_HTTP=true`: the client would fail
/// every request with "builder error"; say so, and the fix, before it does.
fn refuse_plain_http_unless_allowed(address: &ObjectAddress) -> Result<()> {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").or_else(|_| std::env::var("AWS_ENDPOINT")).unwrap_or_default();
    let allowed = std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    if !endpoint.to_ascii_lowercase().starts_with("http://") || allowed {
        return Ok(());
    }
    Err(Error::Invalid {
        what: format!("S3 location {address}"),
        problem: format!(
            "its endpoint {endpoint} is plain HTTP, which the S3 client refuses unless AWS_ALLOW_HTTP=true is set: \
             set it (for a server on loopback or a trusted network), or use an https:// endpoint"
        ),
    })
}

impl S3Store {
    pub fn open(address: &ObjectAddress) -> Result<S3Store> {
        S3Store::open_on(connect(address)?, &address.prefix)
    }

    pub fn init(address: &ObjectAddress, config: &CollectionConfig, unconditional_ok: bool) -> Result<S3Store> {
        S3Store::init_on(connect(address)?, &address.prefix, config, unconditional_ok)
    }

    /// Opens the collection under `prefix` of `objects`.
    pub fn open_on(objects: Objects, prefix: &str) -> Result<S3Store> {
        let keys = Keys::new(prefix);
        let Some(found) = objects.run(objects.get(&keys.config()))? else {
            // A missing bucket also answers "not found": a listing tells them apart.
            objects.run(objects.holds_objects(&keys.at("")))?;
            let problem = "it is not an ibi collection (no .ibi/collection.toml); create one with `ibi init`".into();
            return Err(Error::Invalid { what: format!("collection {}", objects.place), problem });
        };
        let text = String::from_utf8_lossy(&found.bytes);
        let (config, subsystem) = CollectionConfig::parse(&text, &format!("{}/.ibi/collection.toml", objects.place))?;
        let minter_dir = crate::store::local::minter::machine_dir();
        let held_floor = std::sync::OnceLock::new();
        let log_tail = log::KnownTail::default();
        let log_index = log::KnownIndex::default();
        let answers_writes = std::sync::OnceLock::new();
        let stages = Mutex::default();
        Ok(S3Store {
            objects,
            keys,
            config,
            subsystem,
            stages,
            minter_dir,
            held_floor,
            log_tail,
            log_index,
            checks_swept: Default::default(),
            answers_writes,
        })
    }

    /// The config as stored now, with its version for a conditional rewrite.
    fn stored_config(&self) -> Result<(CollectionConfig, object_store::UpdateVersion)> {
        let key = self.keys.config();
        let found = self.objects.run(self.objects.get(&key))?.ok_or_else(|| Error::Invalid {
            what: format!("collection {}", self.objects.place),
            problem: "its .ibi/collection.toml is gone".into(),
        })?;
        let text = String::from_utf8_lossy(&found.bytes);
        let (config, _) = CollectionConfig::parse(&text, &format!("{}/.ibi/collection.toml", self.objects.place))?;
        Ok((config, found.version))
    }

    /// The collection's part in minting, as the bucket holds it now.
    pub fn minting_now(&self) -> Result<Minting> {
        Ok(self.stored_config()?.0.minting())
    }

    /// Sets the collection's part in minting (the config is rewritten with
    /// `If-Match`, so a concurrent change is never lost).
    pub fn set_minting(&self, minting: &Minting) -> Result<()> {
        let (config, version) = self.stored_config()?;
        let before = config.minting();
        let config = config.with_minting(minting);
        let key = self.keys.config();
        let put = self.objects.put(&key, config.to_toml().into_bytes(), PutMode::Update(version));
        self.objects.run(put)?.map_err(|Lost| Error::Invalid {
            what: format!("the config of {}", self.objects.place),
            problem: "it changed meanwhile; run the command again".into(),
        })?;
        let event = crate::store::log::minting_event(&before, minting);
        let log = self.log();
        self.objects.run(async {
            log.append(event.as_slice(), None).await?;
            log.save_end().await
        })
    }

    /// Uses `dir` for the machine-wide minter states (tests keep theirs apart).
    pub fn with_minter_dir(mut self, dir: &Path) -> S3Store {
        self.minter_dir = Some(dir.to_path_buf());
        self
    }

    /// Creates a collection under an empty `prefix`, after proving the server honours
    /// create-only writes (unless `unconditional_ok`).
    pub fn init_on(
        objects: Objects,
        prefix: &str,
        config: &CollectionConfig,
        unconditional_ok: bool,
    ) -> Result<S3Store> {
        let keys = Keys::new(prefix);
        if objects.run(objects.holds_objects(&keys.at("")))? {
            let problem = "it already holds objects; a collection starts from an empty prefix".into();
            return Err(Error::Invalid { what: format!("collection location {}", objects.place), problem });
        }
        if !unconditional_ok {
            probe_conditional_writes(&objects, &keys)?;
        }
        if config.minting().mints() {
            claim_in_bucket(&objects, &keys, config)?;
        }
        let created = objects.run(objects.put(&keys.config(), config.to_toml().into_bytes(), PutMode::Create))?;
        created
            .map_err(|Lost| Error::AlreadyExists { path: format!("{}/.ibi/collection.toml", objects.place).into() })?;
        S3Store::open_on(objects, prefix)
    }

    /// Where a staged file goes: the stage's keys, or the item's for a direct stage.
    fn staged_key(&self, stage: StageId, rel: &str) -> Result<object_store::path::Path> {
        let stages = lock(&self.stages);
        let meta = stages.get(&stage.0).ok_or_else(|| no_stage(stage))?;
        let base = match &meta.direct {
            Some(name) => self.keys.item(name),
            None => self.keys.stage(stage),
        };
        keys::check_file_key(&base, rel)
            .map_err(|why| Error::Invalid { what: format!("file {rel:?}"), problem: why })?;
        Ok(keys::key_under(&base, rel, KeyForm::Names))
    }

    /// Notes a file written into a stage (and keeps a tag file's bytes).
    fn staged(&self, stage: StageId, rel: &str, size: u64, bytes: Option<Vec<u8>>) {
        if let Some(meta) = lock(&self.stages).get_mut(&stage.0) {
            meta.files.push((rel.to_string(), size));
            if let (false, Some(bytes)) = (rel.contains('/'), bytes) {
                meta.tags.insert(rel.to_string(), bytes);
            }
        }
    }

    fn checks(&self) -> checks::ObjectChecks<'_> {
        checks::ObjectChecks { objects: &self.objects, keys: &self.keys, swept: &self.checks_swept }
    }

    fn placer(&self) -> Placer<'_> {
        Placer { objects: &self.objects, keys: &self.keys, log: self.log(), checks: self.checks() }
    }

    fn log(&self) -> log::ObjectLog<'_> {
        log::ObjectLog {
            objects: &self.objects,
            keys: &self.keys,
            tail: &self.log_tail,
            index: &self.log_index,
            collection_id: self.config.id.as_deref(),
        }
    }

    /// Where an item's files are read from: its own keys, or its stage while it is placed.
    fn item_base(&self, name: &RepositoryName) -> Result<Option<(object_store::path::Path, Marker)>> {
        let Some(marker) = self.objects.run(self.placer().marker(name))? else { return Ok(None) };
        let base = match marker.stage.as_deref().and_then(keys::parse_stage) {
            Some(stage) if marker.placing => self.keys.stage(stage),
            _ => self.keys.item(name),
        };
        Ok(Some((base, marker)))
    }

    /// The bag of the item `name`: at its stage while a placement is in flight (with
    /// its own keys to fall back on once it ends), otherwise at its own keys.
    fn item_bag(&self, name: &RepositoryName) -> ObjectBag<'_> {
        let own = self.keys.item(name);
        let (base, dirs, exists, form) = match self.item_base(name) {
            Ok(Some((base, marker))) => (base, marker.dirs, true, marker.keys),
            _ => (own.clone(), Vec::new(), false, KeyForm::Names),
        };
        let settled = (base != own).then_some(own);
        ObjectBag { objects: &self.objects, base, dirs, exists, known: None, cached: HashMap::new(), settled, form }
    }

    /// The identity digest of `name` as `store::identity_digest` reads it (the
    /// sha256 of its tagmanifest, where `item_bag` looks), without blocking.
    async fn identity(&self, name: &RepositoryName) -> Result<String> {
        let own = self.keys.item(name);
        let placer = self.placer();
        let (base, form) = match placer.marker(name).await {
            Ok(Some(marker)) => match marker.stage.as_deref().and_then(keys::parse_stage) {
                Some(stage) if marker.placing => (self.keys.stage(stage), marker.keys),
                _ => (own.clone(), marker.keys),
            },
            _ => (own.clone(), KeyForm::Names),
        };
        let rel = crate::bag::TAGMANIFEST;
        let mut found = self.objects.get(&keys::key_under(&base, rel, form)).await?;
        if found.is_none() && base != own {
            found = self.objects.get(&keys::key_under(&own, rel, form)).await?;
        }
        let bytes = found
            .ok_or_else(|| Error::Data { what: format!("{name}/{rel}"), problem: "it is not there".into() })?
            .bytes;
        Ok(crate::digest::of_bytes(&bytes, &[]).sha256().to_string())
    }

    /// Whether an object is at each of `keys` (one per name, under one of the
    /// per-name trees): a batch is answered from one listing of its span
    /// (`ranges`), and a name the listing did not reach, or a batch too small
    /// to be worth a listing, with a request each.
    async fn listed_or_asked(&self, keys: &[Key]) -> Result<Vec<bool>> {
        let listed = match keys.len() >= LISTED_FROM {
            true => ranges::objects_of(&self.objects, keys, ranges::Within::At, listing_cap(keys.len())).await?,
            false => vec![None; keys.len()],
        };
        stream::iter(keys.iter().zip(listed))
            .map(|(key, listed)| async move {
                match listed {
                    Some(found) => Ok(!found.is_empty()),
                    None => self.objects.exists(key).await,
                }
            })
            .buffered(IN_FLIGHT)
            .try_collect()
            .await
    }

    /// Each name's record, read one request a name. A record that cannot be
    /// read, or that names another item (written by another party), is that
    /// item's problem (`Error::Data`, naming the object), never the batch's.
    fn record_batch_each(&self, names: &[RepositoryName]) -> Result<Vec<Result<Option<ItemRecord>>>> {
        self.objects.run(
            stream::iter(names)
                .map(|name| async move {
                    let key = self.keys.record(name);
                    let bad = |problem: String| Error::Data { what: self.objects.url(&key), problem };
                    let Some(found) = self.objects.get(&key).await? else { return Ok(Ok(None)) };
                    // One typed reading, which refuses a record with no versions (serde) and
                    // one filed under another name.
                    let record: ItemRecord = match serde_json::from_slice(&found.bytes) {
                        Ok(record) => record,
                        Err(e) => return Ok(Err(bad(format!("the record of {name} does not read: {e}")))),
                    };
                    if record.name != *name {
                        let problem = format!("it is filed under {name} but records {}", record.name);
                        return Ok(Err(bad(problem)));
                    }
                    Ok::<_, Error>(Ok(Some(record)))
                })
                .buffered(IN_FLIGHT)
                .try_collect(),
        )
    }

    /// Each name's record; a bad one (`record_batch_each`) fails the batch.
    fn record_batch(&self, names: &[RepositoryName]) -> Result<Vec<Option<ItemRecord>>> {
        self.record_batch_each(names)?.into_iter().collect()
    }

    /// Each name's record; a bad one reads as none: the item is then one the
    /// collection holds no record of, which every reader reports as that item's
    /// problem.
    fn record_batch_lenient(&self, names: &[RepositoryName]) -> Result<Vec<Option<ItemRecord>>> {
        Ok(self.record_batch_each(names)?.into_iter().map(|record| record.ok().flatten()).collect())
    }
}

/// The fewest names a batch must hold for its objects to be listed rather than
/// asked for one by one (a listing answers a page where each name is a request).
const LISTED_FROM: usize = 4;

/// How many objects a batch's listing reads at most before it asks for the rest
/// one by one: a page, or four an asked name (names scattered over a large
/// collection would otherwise list everything between them).
fn listing_cap(names: usize) -> usize {
    (4 * names).max(1000)
}

/// Writes one probe object twice with `If-None-Match: *`: the second must be refused.
fn probe_conditional_writes(objects: &Objects, keys: &Keys) -> Result<()> {
    let key = keys.probe(&uuid::Uuid::new_v4().simple().to_string());
    let first = objects.run(objects.put(&key, b"first".to_vec(), PutMode::Create))?;
    let second = objects.run(objects.put(&key, b"second".to_vec(), PutMode::Create))?;
    objects.run(objects.delete(&key))?;
    if first.is_ok() && second.is_err() {
        return Ok(());
    }
    Err(Error::Refused {
        what: format!("init of {}", objects.place),
        why: "the server ignored a create-only write (If-None-Match: *) and wrote one object twice, so it could \
              not keep two writers from taking one name; use a server that honours conditional writes, or pass \
              --unsafe-no-conditional-writes"
            .into(),
    })
}

fn no_stage(stage: StageId) -> Error {
    Error::Invalid { what: "staging".into(), problem: format!("no staged item {}", keys::stage_token(stage)) }
}

mod store_impl;

/// The bucket's own registry of minting collections: one object per subsystem,
/// `.ibi-minting/<host>_<port>` at the bucket's root, naming the collection
/// (its key prefix and id) that mints it. Written create-only, or over an entry
/// whose collection is gone or no longer mints (`If-Match`), so that of two
/// machines making a minting collection of one subsystem in one bucket, one wins.
fn claim_in_bucket(objects: &Objects, keys: &Keys, config: &CollectionConfig) -> Result<()> {
    let (_, subsystem) = CollectionConfig::parse(&config.to_toml(), "the new collection's config")?;
    let entry_key = Keys::new("").at(&format!(".ibi-minting/{}_{}", subsystem.host, subsystem.port));
    let id = config.id.clone().unwrap_or_default();
    let ours = format!("{}\n{id}\n", keys.at("").as_ref().trim_end_matches('/'));
    loop {
        let mode = match objects.run(objects.get(&entry_key))? {
            None => PutMode::Create,
            Some(found) => {
                let text = String::from_utf8_lossy(&found.bytes).into_owned();
                let mut lines = text.lines();
                let (prefix, held_id) = (lines.next().unwrap_or_default(), lines.next().unwrap_or_default());
                if still_mints_in_bucket(objects, prefix, held_id)? {
                    let problem = format!(
                        "s3://{}/{prefix} ({held_id}) already mints the names of {} in this bucket, and one \
                         subsystem has one minting collection: make this one with `ibi init … --like` it, or move \
                         minting later with `ibi handover`; nothing was created",
                        objects.place.trim_start_matches("s3://").split('/').next().unwrap_or_default(),
                        subsystem.prefix()
                    );
                    return Err(Error::Invalid { what: format!("collection {}", objects.place), problem });
                }
                PutMode::Update(found.version)
            }
        };
        if objects.run(objects.put(&entry_key, ours.clone().into_bytes(), mode))?.is_ok() {
            return Ok(());
        }
    }
}

/// Whether the collection under `prefix` of the bucket is there, is `id`, and mints.
fn still_mints_in_bucket(objects: &Objects, prefix: &str, id: &str) -> Result<bool> {
    let Some(found) = objects.run(objects.get(&Keys::new(prefix).config()))? else { return Ok(false) };
    let text = String::from_utf8_lossy(&found.bytes);
    let Ok((config, _)) = CollectionConfig::parse(&text, "a collection's config in the bucket") else {
        return Ok(false);
    };
    Ok(config.id.as_deref() == Some(id) && !matches!(config.minting(), Minting::Retired(None) | Minting::Follows(_)))
}
