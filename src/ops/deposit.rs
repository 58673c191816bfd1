//! Deposit: build the bag in `.ibi/staging/`, copying and hashing in one read
//! pass; mint the names under the minter lock, ahead of the clock; write the tag
//! files; wait for the clock to reach the names; make the batch durable; rename
//! into place (never over an existing item); create the aliases. A batch is
//! staged, named and tagged on a thread while the one before it is placed.
//! Each item is reported as soon as it is durable. A content record (locally,
//! a row of the inventory's `deposits` table), made durable before the item is
//! placed, lets a rerun after any failure or kill say "already deposited as
//! NAME" instead of depositing the same content twice. `--move` then removes
//! exactly what was copied: a file only if it still has the stamp it had when
//! read, a folder only if empty.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::bag::history::{HISTORY_LABELS, ORIGIN};
use crate::bag::{self, manifest, BagContents, BagInfo, ManifestEntry, Oxum};
use crate::digest::Digests;
use crate::error::{Error, IoContext, Result};
use crate::events::EventKind;
use crate::fsx::{self, open_regular, CopyMode, Stamp};
use crate::id::minter::{sleep_until_reached, Clock};
use crate::id::{Minted, RepositoryName, Timestamp};
use crate::ops::foreign_bag::plan_bag;
use crate::ops::report::{NoticedClock, Outcome, Reporter, Task};
use crate::ops::source::{plan_paths, PlannedFile, SourcePlan};
use crate::ops::survey::{while_surveying, Survey};
use crate::ops::transfer::{place_staged, StagedItem};
use crate::store::guard;
use crate::store::log::Action;
use crate::store::{
    item_ibip, mint_ahead, FileSource, ItemRecord, LockWait, Placement, Slot, StageId, Staging, Status, Store, Writer,
};

#[derive(Debug, Clone, Default)]
pub struct DepositOptions {
    /// One item per path instead of one item for all.
    pub each: bool,
    /// Each path is an existing BagIt bag, deposited whole.
    pub bag: bool,
    /// Remove the originals once the item is durable.
    pub move_sources: bool,
    pub follow_symlinks: bool,
    /// Deposit content even when the collection already holds an item of it.
    pub duplicate: bool,
    /// Extra bag-info fields.
    pub meta: Vec<(String, String)>,
}

/// bag-info labels that ibi writes itself, which `--meta` may never set.
pub const RESERVED_LABELS: [&str; 6] =
    ["External-Identifier", "Bagging-Date", "Payload-Oxum", "Source-Organization", "Bag-Size", bag::SOURCE_IDENTIFIER];

/// Refuses `--meta` labels that ibi writes itself.
pub fn check_meta(meta: &[(String, String)]) -> Result<()> {
    for (label, _) in meta {
        if RESERVED_LABELS.iter().chain(&HISTORY_LABELS).any(|r| r.eq_ignore_ascii_case(label)) {
            return Err(Error::Invalid {
                what: "metadata label".into(),
                problem: format!("{label} is written by ibi itself and cannot be set"),
            });
        }
    }
    Ok(())
}

/// One item a deposit made durable, or found already deposited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deposited {
    pub minted: Minted,
    /// The collection already held this content; nothing new was placed.
    pub already: bool,
}

/// A deposited item with the stamps of the source files it was copied from.
pub struct DepositOutcome {
    pub deposited: Deposited,
    pub stamps: Vec<(PathBuf, Stamp)>,
}

/// Deposits `paths` as one item (or one per path with `each` or `bag`), holding the
/// write lock. Items go in batches of `DEPOSIT_BATCH`; `on_durable` sees each item as soon as
/// it is durable, before any original is removed. Returns how many items it saw.
pub fn deposit(
    collection: &dyn Store,
    paths: &[PathBuf],
    options: &DepositOptions,
    clock: &dyn Clock,
    reporter: &dyn Reporter,
    on_durable: &mut dyn FnMut(&Deposited),
) -> Result<u64> {
    check_meta(&options.meta)?;
    crate::store::refuse_unless_minting(collection)?;
    if let Some(root) = collection.local_root() {
        let mut sources = guard::SourceGuard::new("deposit source", root)?;
        paths.iter().try_for_each(|path| sources.check(path))?;
    }
    let writer = collection.begin_write(LockWait::Forever)?;
    let groups: Vec<Vec<PathBuf>> = if options.each || options.bag {
        paths.iter().map(|p| vec![p.clone()]).collect()
    } else {
        vec![paths.to_vec()]
    };
    reporter.begin(Task::Deposit);
    let each = options.each || options.bag;
    let survey = Survey::Paths { paths, follow: options.follow_symlinks, each };
    let count = while_surveying(reporter, survey, || -> Result<u64> {
        let writer = writer.as_ref();
        let context = (options, clock, reporter);
        // A pipeline of two: each batch is planned, staged, named ahead of the clock
        // and tagged on one thread while the batch before it is made durable and
        // placed here, so the minter's wait for the clock costs no time. The hand-over
        // is a rendezvous: a batch is prepared only while the one before it is placed.
        std::thread::scope(|scope| {
            let (hand_over, prepared) = std::sync::mpsc::sync_channel(0);
            let preparing = scope.spawn(move || prepare_all(writer, &groups, context, hand_over));
            let placed = prepared.into_iter().try_fold(0, |count, batch: Result<(Vec<SourcePlan>, PreparedBatch)>| {
                let (plans, batch) = batch?;
                Ok::<u64, Error>(count + finish_groups(writer, &plans, batch, context, on_durable)?)
            });
            if let Err(panic) = preparing.join() {
                std::panic::resume_unwind(panic);
            }
            placed
        })
    })?;
    reporter.end();
    Ok(count)
}

/// The preparing end of `deposit`'s pipeline: hands over each batch prepared,
/// until one fails or the placing end stops taking them. Each batch's look-up of
/// content already deposited also asks the batch before it, which the placing
/// end is placing meanwhile.
fn prepare_all<'a>(
    writer: &'a dyn Writer,
    groups: &[Vec<PathBuf>],
    context: (&DepositOptions, &dyn Clock, &dyn Reporter),
    hand_over: std::sync::mpsc::SyncSender<Result<(Vec<SourcePlan>, PreparedBatch<'a>)>>,
) {
    let mut earlier = Earlier::default();
    for batch in groups.chunks(DEPOSIT_BATCH) {
        let prepared = plan_and_prepare(writer, batch, &earlier, context);
        let failed = prepared.is_err();
        earlier = prepared.as_ref().map(|(_, batch)| batch.new_contents()).unwrap_or_default();
        if hand_over.send(prepared).is_err() || failed {
            return;
        }
    }
}

/// Plans one batch of groups, stages their payloads, names them ahead of the
/// clock and writes their tag files.
fn plan_and_prepare<'a>(
    writer: &'a dyn Writer,
    batch: &[Vec<PathBuf>],
    earlier: &Earlier,
    (options, clock, reporter): (&DepositOptions, &dyn Clock, &dyn Reporter),
) -> Result<(Vec<SourcePlan>, PreparedBatch<'a>)> {
    let plans: Vec<SourcePlan> = batch
        .iter()
        .map(|group| if options.bag { plan_bag(&group[0]) } else { plan_paths(group, options.follow_symlinks) })
        .collect::<Result<_>>()?;
    let payloads = stage_batch(writer, &plans, reporter)?;
    let prepared = prepare_batch(writer, &plans, payloads, earlier, (options, clock, reporter))?;
    Ok((plans, prepared))
}

/// Places one prepared batch, reporting each item as soon as it is durable, then
/// removes the moved originals. Returns how many items it saw.
fn finish_groups(
    writer: &dyn Writer,
    plans: &[SourcePlan],
    prepared: PreparedBatch,
    (options, clock, reporter): (&DepositOptions, &dyn Clock, &dyn Reporter),
    on_durable: &mut dyn FnMut(&Deposited),
) -> Result<u64> {
    let outcomes = place_prepared(writer, prepared, &NoticedClock { clock, reporter }, None)?;
    for (plan, outcome) in plans.iter().zip(&outcomes) {
        let d = &outcome.deposited;
        let name = d.minted.name.to_string();
        if d.already {
            reporter.warning(&format!("{} was already deposited as {name}", describe(plan)));
        }
        reporter.item(&name, if d.already { Outcome::AlreadyDeposited } else { Outcome::Deposited });
        on_durable(d);
    }
    if options.move_sources {
        for (plan, outcome) in plans.iter().zip(&outcomes) {
            remove_moved(plan, &outcome.stamps, reporter);
        }
    }
    Ok(plans.len() as u64)
}

fn describe(plan: &SourcePlan) -> String {
    plan.originals.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

/// A copied file's path in the new bag and its digests.
type HashedFile = (String, Digests);
/// A source file and its stamp when it was read.
type SourceStamp = (PathBuf, Stamp);

/// What one staged payload holds.
struct Payload<'a> {
    staging: Staging<'a>,
    files: Vec<(String, Digests)>,
    tag_files: Vec<(String, Digests)>,
    oxum: Oxum,
    stamps: Vec<(PathBuf, Stamp)>,
}

/// Warns about what the new bag keeps but cannot describe faithfully.
fn warn_about_names(plan: &SourcePlan, reporter: &dyn Reporter) {
    for warning in &plan.warnings {
        reporter.warning(warning);
    }
    for file in plan.files.iter().filter(|f| f.path.contains('%')) {
        reporter.warning(&format!(
            "{} holds a \"%\": its manifest line encodes it as %25, as RFC 8493 requires; bagit-python 1.9 cannot validate such a name",
            file.path
        ));
    }
    for file in plan.files.iter().filter(|f| f.path.ends_with([' ', '\t'])) {
        reporter.warning(&format!(
            "{:?} ends with a space or TAB: its manifest line keeps it, but bagit-python strips it when it reads \
             the manifest and reports the file missing; rename it if the bag must validate there",
            file.path
        ));
    }
    for empty in &plan.empty_dirs {
        reporter.warning(&format!("empty folder {empty} is kept, but BagIt manifests do not record empty folders"));
    }
    if plan.files.is_empty() {
        let sources: Vec<String> = plan.originals.iter().map(|p| p.display().to_string()).collect();
        reporter.warning(&format!(
            "{} holds no files: the item's payload is empty (and any deposit of no files is the same deposit)",
            sources.join(", ")
        ));
    }
}

/// Copies one planned file to `staging/<path>`, hashing it in every algorithm, and
/// checks the digests a source bag promised.
fn copy_planned(
    (file, roots): (&PlannedFile, &[PathBuf]),
    staging: &Staging,
    mode: CopyMode,
) -> Result<(HashedFile, SourceStamp)> {
    let opened = match mode.follow {
        true => open_regular(&file.source, true),
        false => fsx::open_source(roots, &file.source),
    };
    let opened = opened.with_path("open", &file.source)?;
    let stamp = Stamp::of(&opened.meta);
    let mut reader = opened.file;
    let source = FileSource {
        reader: &mut reader,
        origin: &file.source,
        mtime: opened.meta.modified().ok(),
        also: mode.also,
        progress: mode.progress,
    };
    let digests = staging.writer.stage_file(staging.id, &file.path, source)?;
    for (algorithm, expected) in &file.expected {
        let found = digests.get(*algorithm).unwrap_or_default();
        if found != expected {
            return Err(Error::Data {
                what: format!("source bag file {}", file.source.display()),
                problem: format!("{algorithm} {found} does not match its manifest ({expected})"),
            });
        }
    }
    Ok(((file.path.clone(), digests), (file.source.clone(), stamp)))
}

/// Copies the payload and kept tag files into a new staging folder, hashing as it
/// reads, in parallel.
fn stage_payload<'a>(writer: &'a dyn Writer, plan: &SourcePlan, reporter: &dyn Reporter) -> Result<Payload<'a>> {
    let staging = Staging::new(writer)?;
    for dir in std::iter::once(bag::DATA).chain(plan.dirs.iter().map(String::as_str)) {
        writer.stage_dir(staging.id, dir)?;
    }
    warn_about_names(plan, reporter);
    let progress = |n: u64| reporter.bytes(n);
    let mode = CopyMode { follow: plan.follow_symlinks, sync: false, progress: &progress, also: &plan.algorithms };
    let copy_all = |files: &[PlannedFile]| -> Result<(Vec<HashedFile>, Vec<SourceStamp>)> {
        let roots = plan.originals.as_slice();
        let copied: Vec<_> =
            files.par_iter().map(|f| copy_planned((f, roots), &staging, mode)).collect::<Result<_>>()?;
        Ok(copied.into_iter().unzip())
    };
    let (files, mut stamps) = copy_all(&plan.files)?;
    let (tag_files, tag_stamps) = copy_all(&plan.tag_files)?;
    stamps.extend(tag_stamps);
    stamps.extend(plan.read_stamps.iter().cloned());
    let oxum = Oxum { octets: files.iter().map(|(_, d)| d.size).sum(), files: files.len() as u64 };
    Ok(Payload { staging, files, tag_files, oxum, stamps })
}

/// Writes a new bag's tag files into its staging; returns its identity digest.
fn write_tags(writer: &dyn Writer, stage: StageId, contents: &BagContents) -> Result<String> {
    bag::write_tag_files_with(contents, &mut |name, bytes| {
        let mut reader = std::io::Cursor::new(bytes);
        let origin = Path::new(name);
        let source = FileSource { reader: &mut reader, origin, mtime: None, also: &[], progress: &|_| {} };
        writer.stage_file(stage, name, source).map(drop).map_err(Error::from)
    })
}

/// The bag-info of a new item: its two identifiers first, then what it carries over.
fn bag_info(
    collection: &dyn Store,
    minted: &Minted,
    payload: &Payload,
    plan: &SourcePlan,
    options: &DepositOptions,
    today: &str,
) -> BagInfo {
    let mut info = BagInfo::default();
    info.push("External-Identifier", minted.name.to_string());
    if let Some(ibip) = &minted.ibip {
        info.push("External-Identifier", ibip.to_string());
    }
    // A source bag's provenance is kept: its own Bagging-Date, Source-Organization
    // and Bag-Size stand, and ibi's are added only where it has none.
    let source_has = |label: &str| plan.info.as_ref().is_some_and(|i| i.first(label).is_some());
    if !source_has("Bagging-Date") {
        info.push("Bagging-Date", today);
    }
    info.push("Payload-Oxum", payload.oxum.to_string());
    if let (Some(org), false) = (collection.organisation(), source_has("Source-Organization")) {
        info.push("Source-Organization", org);
    }
    if let Some(id) = collection.inventory().collection_id() {
        info.push(ORIGIN, id);
    }
    if let Some(source) = &plan.info {
        for (label, value) in &source.fields {
            if label.eq_ignore_ascii_case("External-Identifier") {
                info.push(bag::SOURCE_IDENTIFIER, value.clone());
                continue;
            }
            if HISTORY_LABELS.iter().any(|h| h.eq_ignore_ascii_case(label)) {
                // The source's own history (an exported ibi item) is kept as a record, not as ours.
                info.push(&format!("Source-{label}"), value.clone());
                continue;
            }
            // Payload-Oxum is recomputed (the payload was checked against it).
            if !label.eq_ignore_ascii_case("Payload-Oxum") {
                info.push(label, value.clone());
            }
        }
    }
    for (label, value) in &options.meta {
        info.push(label, value.clone());
    }
    info
}

/// What identifies the content of a deposit: its payload manifest, the metadata
/// asked for, and the bag-info a source bag brings. Equal keys, equal deposits.
fn content_key(payload: &Payload, plan: &SourcePlan, options: &DepositOptions) -> String {
    let entries = |files: &[(String, Digests)]| -> Vec<ManifestEntry> {
        files.iter().map(|(path, d)| ManifestEntry { digest: d.sha256().to_string(), path: path.clone() }).collect()
    };
    let mut text = manifest::format(&entries(&payload.files));
    if !payload.tag_files.is_empty() {
        text.push_str(&format!("\u{0}tags\u{0}{}", manifest::format(&entries(&payload.tag_files))));
    }
    for (label, value) in options.meta.iter().chain(plan.info.iter().flat_map(|i| i.fields.iter())) {
        text.push_str(&format!("\u{0}{label}: {value}"));
    }
    text.push_str(&format!("\u{0}bag={}", options.bag));
    fsx::hash_bytes(text.as_bytes())
}

/// The item this content was deposited as: by the batch being placed (`earlier`),
/// else as the collection records it (`deposited_as`).
fn known_content(
    collection: &dyn Store,
    earlier: &Earlier,
    key: &str,
    payload: &Payload,
    options: &DepositOptions,
) -> Result<Option<Minted>> {
    match earlier.0.get(key) {
        Some(minted) => Ok(Some(minted.clone())),
        None => deposited_as(collection, key, payload, options.move_sources),
    }
}

/// The item this content was deposited as, if the collection still has it in
/// service with exactly these bytes. The record only says where to look: the item
/// must be present (not withdrawn, purged or moved away), its current manifest must
/// list exactly the payload's files and digests, and, when the sources are to be
/// removed, its bytes must verify. Otherwise the content is deposited anew, so a
/// stale or forged record can never cause a source to be removed.
fn deposited_as(collection: &dyn Store, key: &str, payload: &Payload, checked: bool) -> Result<Option<Minted>> {
    let Some(name) = collection.inventory().deposit_record(key)? else { return Ok(None) };
    if collection.slot(&name)? != Slot::Item {
        return Ok(None);
    }
    let record = match collection.inventory().records(std::slice::from_ref(&name))?.pop().flatten() {
        Some(record) => record,
        None => ItemRecord::from_bag(collection.item_files(&name).as_ref(), &name)?,
    };
    if record.status != Status::Present || !holds_exactly(collection, &name, &payload.files) {
        return Ok(None);
    }
    if checked && !collection.check_item(&name, &|_| {}).1.is_empty() {
        return Ok(None);
    }
    Ok(Some(Minted { ibip: item_ibip(collection, &name).ok().flatten(), name }))
}

/// Whether the item's current sha256 manifest lists exactly `files` (path and digest).
fn holds_exactly(collection: &dyn Store, name: &RepositoryName, files: &[(String, Digests)]) -> bool {
    let Ok(bytes) = collection.item_files(name).read(bag::MANIFEST) else { return false };
    let (entries, problems) = manifest::parse(&String::from_utf8_lossy(&bytes), 64);
    let listed: BTreeSet<(String, String)> = entries.into_iter().map(|e| (e.path, e.digest)).collect();
    let ours: BTreeSet<(String, String)> = files.iter().map(|(p, d)| (p.clone(), d.sha256().to_string())).collect();
    problems.is_empty() && listed == ours
}

/// One item of a batch once named: its staged payload, its plan and content key,
/// its name, and whether that content was already deposited (then it is not placed).
struct NewItem<'a, 'p> {
    payload: Payload<'a>,
    plan: &'p SourcePlan,
    key: String,
    minted: Minted,
    already: bool,
}

/// Pairs each staged payload with its name: the one it was already deposited as
/// (`known`), else the next of `minted` (one per unknown payload, in order).
fn name_items<'a, 'p>(
    payloads: Vec<Payload<'a>>,
    plans: &'p [SourcePlan],
    keys: Vec<String>,
    known: Vec<Option<Minted>>,
    minted: Vec<Minted>,
) -> Vec<NewItem<'a, 'p>> {
    let mut minted = minted.into_iter();
    let named = payloads.into_iter().zip(plans).zip(keys).zip(known);
    named
        .map(|(((payload, plan), key), known)| {
            let (minted, already) = match known {
                Some(m) => (m, true),
                None => (minted.next().expect("one name was minted per fresh item"), false),
            };
            NewItem { payload, plan, key, minted, already }
        })
        .collect()
}

/// Writes a new item's tag files into its staging; returns the inventory's record of it.
fn tag_new_item(
    writer: &dyn Writer,
    item: &NewItem,
    options: &DepositOptions,
    today: &str,
) -> Result<Option<ItemRecord>> {
    let info = bag_info(writer.store(), &item.minted, &item.payload, item.plan, options, today);
    let contents = BagContents {
        info: &info,
        algorithms: &item.plan.algorithms,
        payload: &item.payload.files,
        tag_files: &item.payload.tag_files,
    };
    let identity = write_tags(writer, item.payload.staging.id, &contents)?;
    Ok(ItemRecord::from_info(&item.minted.name, &info, &identity).ok().map(|mut record| {
        record.deposit_keys = vec![item.key.clone()];
        record
    }))
}

/// How many items a deposit stages, makes durable and places together: each
/// batch pays one `syncfs`, one journal record, one fsync per touched folder and
/// one inventory transaction, which small items feel (one-file items, medians of
/// interleaved runs: 1,048 items/s at 64 a batch, 1,305 at 256, 1,285 at 1,024).
pub const DEPOSIT_BATCH: usize = 256;

/// Called with the minted identifiers just before the items are renamed into place.
pub type BeforePlace<'a> = &'a dyn Fn(&[&Minted]) -> Result<()>;

/// Deposits planned items; the caller holds the write lock. Every payload is staged
/// first, so a failure (disk full, unreadable file) mints nothing; content already
/// deposited is reported as such; the rest is minted in one lock hold, its tag files
/// and content records written, and `place_all` makes the batch durable and places it.
pub fn deposit_batch(
    writer: &dyn Writer,
    plans: &[SourcePlan],
    options: &DepositOptions,
    clock: &dyn Clock,
    reporter: &dyn Reporter,
    before_place: Option<BeforePlace>,
) -> Result<Vec<DepositOutcome>> {
    let payloads = stage_batch(writer, plans, reporter)?;
    let prepared = prepare_batch(writer, plans, payloads, &Earlier::default(), (options, clock, reporter))?;
    place_prepared(writer, prepared, &NoticedClock { clock, reporter }, before_place)
}

/// Stages each plan's payload, in parallel; nothing is minted.
fn stage_batch<'a>(writer: &'a dyn Writer, plans: &[SourcePlan], reporter: &dyn Reporter) -> Result<Vec<Payload<'a>>> {
    plans.par_iter().map(|plan| stage_payload(writer, plan, reporter)).collect()
}

/// One item of a prepared batch: its staged and tagged payload, its content key,
/// its name, and whether that content was already deposited (then it is not placed).
struct PreparedItem<'a> {
    payload: Payload<'a>,
    key: String,
    minted: Minted,
    already: bool,
    /// What the inventory is to record of a new item.
    record: Option<ItemRecord>,
}

/// A batch staged, named ahead of the clock and tagged: what is left is to wait
/// for the clock to reach its names, then record and place it.
struct PreparedBatch<'a> {
    items: Vec<PreparedItem<'a>>,
    usable_from: Option<Timestamp>,
}

impl PreparedBatch<'_> {
    /// The content keys of the new items, with their names.
    fn new_contents(&self) -> Earlier {
        let new = self.items.iter().filter(|item| !item.already);
        Earlier(new.map(|item| (item.key.clone(), item.minted.clone())).collect())
    }
}

/// The content keys a batch being placed deposits anew, with their names: the
/// next batch is prepared meanwhile, and its look-up in the collection may not
/// see them yet.
#[derive(Default)]
struct Earlier(HashMap<String, Minted>);

/// The first half of `deposit_batch` once the payloads are staged: content already
/// deposited is recognised, the rest named ahead of the clock and tagged.
fn prepare_batch<'a>(
    writer: &'a dyn Writer,
    plans: &[SourcePlan],
    payloads: Vec<Payload<'a>>,
    earlier: &Earlier,
    (options, clock, reporter): (&DepositOptions, &dyn Clock, &dyn Reporter),
) -> Result<PreparedBatch<'a>> {
    let keys: Vec<String> = payloads.iter().zip(plans).map(|(p, plan)| content_key(p, plan, options)).collect();
    let mut known = Vec::with_capacity(plans.len());
    for (key, payload) in keys.iter().zip(&payloads) {
        known.push(if options.duplicate {
            None
        } else {
            known_content(writer.store(), earlier, key, payload, options)?
        });
    }
    let fresh = known.iter().filter(|k| k.is_none()).count();
    let ahead = mint_ahead(writer, fresh, &NoticedClock { clock, reporter })?;
    let now = clock.now().to_rfc3339();
    let today = now.get(..10).unwrap_or(&now);
    let items = name_items(payloads, plans, keys, known, ahead.minted);
    // Each new bag's tag files, in parallel: they are what a small item mostly is.
    let tagged: Vec<Option<ItemRecord>> = items
        .par_iter()
        .map(|item| match item.already {
            true => Ok(None),
            false => tag_new_item(writer, item, options, today),
        })
        .collect::<Result<_>>()?;
    let items = items
        .into_iter()
        .zip(tagged)
        .map(|(item, record)| {
            let NewItem { payload, key, minted, already, .. } = item;
            PreparedItem { payload, key, minted, already, record }
        })
        .collect();
    Ok(PreparedBatch { items, usable_from: ahead.usable_from })
}

/// The second half of `deposit_batch`: once the clock has reached the batch's
/// names, records the new items' content keys and places them.
fn place_prepared(
    writer: &dyn Writer,
    prepared: PreparedBatch,
    clock: &dyn Clock,
    before_place: Option<BeforePlace>,
) -> Result<Vec<DepositOutcome>> {
    let mut outcomes = Vec::with_capacity(prepared.items.len());
    let mut staged = Vec::with_capacity(prepared.items.len());
    let mut records = Vec::with_capacity(prepared.items.len());
    for item in prepared.items {
        let PreparedItem { payload, key, minted, already, record } = item;
        if !already {
            records.push((key, minted.name.clone()));
            let placement = Placement {
                stage: payload.staging.id,
                name: minted.name.clone(),
                ibip: minted.ibip,
                replace: false,
                record,
                action: Action::of(EventKind::Deposit, String::new()),
            };
            staged.push(StagedItem { staging: payload.staging, placement, bytes: payload.oxum.octets });
        }
        outcomes.push(DepositOutcome { deposited: Deposited { minted, already }, stamps: payload.stamps });
    }
    sleep_until_reached(clock, prepared.usable_from);
    writer.minter().write_deposit_records(&records)?;
    if let Some(hook) = before_place {
        let new: Vec<&Minted> = outcomes.iter().filter(|o| !o.deposited.already).map(|o| &o.deposited.minted).collect();
        hook(&new)?;
    }
    for (_, outcome) in place_staged(writer, staged)? {
        outcome?;
    }
    Ok(outcomes)
}

/// Removes the originals of a durable deposit: each file only if it still has the
/// stamp it had when it was read (same inode, size and mtime), then each folder only
/// if it is empty. Anything else stays, with a warning naming it.
pub fn remove_moved(plan: &SourcePlan, stamps: &[(PathBuf, Stamp)], reporter: &dyn Reporter) {
    let mut touched = BTreeSet::new();
    for (path, stamp) in stamps {
        match fsx::remove_source(&plan.originals, path, stamp) {
            Ok(fsx::Removal::Removed) => {
                touched.insert(fsx::parent_dir(path).to_path_buf());
            }
            Ok(fsx::Removal::Changed) => reporter.warning(&format!(
                "kept {}: it changed after it was copied (or a folder on its way is now a symlink)",
                path.display()
            )),
            Ok(fsx::Removal::Gone) => {}
            Err(e) => reporter.warning(&format!("kept {}: cannot remove it: {e}", path.display())),
        }
    }
    for dir in plan.source_dirs.iter().rev() {
        match fs::remove_dir(dir) {
            Ok(()) => {
                // Gone itself: its parent's fsync makes the removal durable.
                touched.remove(dir);
                touched.insert(fsx::parent_dir(dir).to_path_buf());
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => reporter.warning(&format!(
                "kept folder {}: it holds what was not deposited ({})",
                dir.display(),
                leftovers(dir)
            )),
            Err(e) => reporter.warning(&format!("kept folder {}: {e}", dir.display())),
        }
    }
    for dir in touched {
        if let Err(e) = fsx::fsync_dir(&dir) {
            reporter.warning(&e.to_string());
        }
    }
}

/// The first few names left in a folder, for a warning.
fn leftovers(dir: &std::path::Path) -> String {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    let more = names.len().saturating_sub(5);
    names.truncate(5);
    if more > 0 {
        names.push(format!("and {more} more"));
    }
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::minter::SystemClock;
    use crate::ops::Silent;
    use crate::store::conformance::subsystem;
    use crate::store::memory::MemoryStore;

    /// A batch is prepared while the one before it is placed: content that batch
    /// deposits anew is known from it, not minted again.
    #[test]
    fn content_of_the_batch_being_placed_is_known_without_minting() {
        let sources = tempfile::tempdir().unwrap();
        let path = sources.path().join("s");
        fs::create_dir_all(&path).unwrap();
        fs::write(path.join("f.txt"), b"one content").unwrap();
        let store = MemoryStore::new(subsystem());
        let writer = store.begin_write(LockWait::No).unwrap();
        let writer = writer.as_ref();
        let options = DepositOptions { each: true, ..DepositOptions::default() };
        let context = (&options, &SystemClock as &dyn Clock, &Silent as &dyn Reporter);
        let plans = vec![plan_paths(std::slice::from_ref(&path), false).unwrap()];
        let prepare = |earlier: &Earlier| {
            let payloads = stage_batch(writer, &plans, &Silent).unwrap();
            prepare_batch(writer, &plans, payloads, earlier, context).unwrap()
        };
        let first = prepare(&Earlier::default());
        assert!(!first.items[0].already);
        let minted_up_to = writer.minter().minted_up_to().unwrap();
        let second = prepare(&first.new_contents());
        assert!(second.items[0].already, "known from the batch being placed");
        assert_eq!(second.items[0].minted, first.items[0].minted);
        assert_eq!(writer.minter().minted_up_to().unwrap(), minted_up_to, "no name minted for it");
        let third = prepare(&Earlier::default());
        assert!(!third.items[0].already, "unplaced content is not in the collection");
    }
}
