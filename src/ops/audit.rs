//! The audit of every copy (ARCHITECTURE.md, "Sites and the copy policy"):
//! without moving a payload byte, each place (the collection and each of its
//! sites) tells which of the collection's held items it holds and their
//! identity digests (a far server computes its own; S3 reads the tagmanifest
//! objects), its own record of each, and its last fixity checks. Per item the
//! copies are judged against the item's authority (ARCHITECTURE.md,
//! "Authority"): the collection's own copy when it holds what the collection's
//! record says and its last check did not fail; only when it does not, the
//! identity a strict majority of the sites' copies agree on, counting only
//! copies whose identity some version of the collection's record held. A copy
//! is complete when it holds that identity and its own record agrees, and
//! verified when its last fixity check did not fail (and, with
//! `max_fixity_age`, passed within it). An item meets the policy with enough
//! complete, verified copies in enough zones.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::BuildHasher;
use std::path::Path;

use crate::error::Result;
use crate::id::{RepositoryName, Timestamp};
use crate::ops::fixity::{LastCheck, LastChecks};
use crate::ops::placement::{self, PlacementFacts};
use crate::ops::repair::{repair_toward, RepairOptions};
use crate::ops::report::Reporter;
use crate::store::config::{parse_days, CollectionConfig, Policy, SeaweedFs};
use crate::store::inventory::Status;
use crate::store::placement::ItemPlacement;
use crate::store::{Connect, Store};

/// The fewest and the most names of one chunk the audit asks each place
/// about. Between them a chunk ends before a name that begins one
/// (`begins_chunk`), so chunks are cut by the names themselves: a deposit
/// changes the chunk it falls in, not every chunk after it, and a place that
/// keeps pages of what it read (`store::copy_states`) finds them again.
const CHUNK_AT_LEAST: usize = 250;
const CHUNK_AT_MOST: usize = 4000;

/// Whether `name` begins a chunk: about one name in a thousand, chosen by
/// the name's SHA-256 alone (the same in every run and on every machine).
fn begins_chunk(name: &RepositoryName) -> bool {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(name.to_string().as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) % 1000 == 0
}

/// What one place holds of one item.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Copy {
    Missing,
    Held { identity: String, record_agrees: bool, fixity: Fixity },
}

/// A copy's last fixity check, as its place kept it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fixity {
    Passed,
    /// Passed within the cycle by a store-attested check (the store's
    /// checksums, not a read of the bytes).
    Attested,
    /// Passed, before the policy's cycle began.
    Stale,
    /// Passed within the cycle by a store-attested check, but its bytes were
    /// not read and found whole within the policy's read cycle.
    Unread,
    Failed,
    Never,
}

/// The facts of one place: where, its zone, whether it answered, and its counts.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PlaceFacts {
    pub url: String,
    /// Declared: the zone (disaster threat) its operator named.
    pub zone: String,
    /// Declared: the media its operator named.
    pub media: String,
    /// Measured: where it is (its filesystem and host, its far host, or its S3
    /// endpoint and bucket); places of one locality share their fate.
    pub locality: String,
    /// Measured: the kind of storage it is ("filesystem" or "object store").
    pub storage: &'static str,
    /// Why it could not be read, when it could not.
    pub unreachable: Option<String>,
    pub held: u64,
    pub missing: u64,
    pub divergent: u64,
    pub damaged: u64,
    pub stale: u64,
    pub never_checked: u64,
    /// Copies whose last check within the cycle was store-attested, not a read.
    pub attested: u64,
    /// Copies whose identity this run took from what this machine read of
    /// them before (a page it signed), the listing showing each tagmanifest
    /// unchanged since, rather than reading it again (`store::copy_states`).
    pub from_pages: u64,
    /// Items it holds that the collection never recorded (planted, or lost here).
    pub strays: u64,
    /// The oldest last good check of its copies (RFC 3339), when it keeps dates.
    pub oldest_check: Option<String>,
    /// Where its cluster proves its copies are (`--placement`), when asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementFacts>,
}

/// An item short of the policy, or with a copy known to be bad, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Shortfall {
    pub name: String,
    pub good_copies: u32,
    pub zones: Vec<String>,
    pub reasons: Vec<String>,
    /// The policy is met by its other copies; a copy is still known bad.
    pub meets_policy: bool,
}

/// An item a site holds that the collection has no record of.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stray {
    pub name: String,
    pub place: String,
}

/// How many strays and how many items short of the policy the report names
/// (the counts are whole): what an audit holds stays bounded however many there are.
const STRAYS_NAMED: usize = 1000;
const SHORTFALLS_NAMED: usize = 10_000;

/// The audit's findings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditReport {
    pub items: u64,
    pub policy: Policy,
    pub places: Vec<PlaceFacts>,
    /// How many items are short of the policy.
    pub short: u64,
    /// How many items have a copy known missing, damaged, divergent or forged
    /// (or no copy to vouch for), the policy met or not.
    pub known_bad: u64,
    /// How many items are either.
    pub listed: u64,
    /// The first of them (up to ten thousand), with the reasons.
    pub shortfalls: Vec<Shortfall>,
    /// The first strays found (each place's `strays` counts them all).
    pub strays: Vec<Stray>,
    /// Sites whose cosigned checkpoint this collection's log no longer holds
    /// (`ops::checkpoints::check`), each with why.
    pub log_problems: Vec<String>,
}

impl AuditReport {
    pub fn meets_policy(&self) -> bool {
        let sound = |p: &PlaceFacts| p.unreachable.is_none() && p.placement.as_ref().is_none_or(PlacementFacts::sound);
        self.short == 0
            && self.known_bad == 0
            && self.strays.is_empty()
            && self.log_problems.is_empty()
            && self.places.iter().all(sound)
    }
}

/// One place being audited: its facts, its last fixity checks, and the cluster
/// to ask where its objects are (`--placement`).
struct Place {
    facts: PlaceFacts,
    checks: Option<LastChecks>,
    cluster: Option<SeaweedFs>,
}

/// What one place holds of a chunk of names, in their order.
#[derive(Default)]
struct Held {
    copies: Vec<Copy>,
    /// The identities of every version its record of each name holds.
    recorded: Vec<Vec<String>>,
    /// Where its cluster proves each item is (`--placement`), in the same order.
    placed: Option<Vec<ItemPlacement>>,
}

/// The policy in force: the configured one, or every place a copy.
fn policy_of(config: &CollectionConfig) -> Policy {
    let copies = 1 + config.sites.len() as u32;
    config.policy.clone().unwrap_or(Policy { copies, zones: 1, max_fixity_age: None, max_read_age: None })
}

/// Every place surveyed: the collection first, then each site in the order
/// configured (an unreachable one has no handle). The collection's held items
/// are taken a chunk at a time (`each_chunk`), so what the audit holds is a
/// chunk's copies, each place's last checks (sixteen bytes an item) and the
/// hashes of the collection's names (eight bytes an item), never every copy.
struct Survey<'a> {
    stores: Stores<'a>,
    places: Vec<Place>,
    policy: Policy,
    cycles: Cycles,
    items: u64,
    /// Keyed hashes of every name the collection has a record of, sorted once
    /// the collection's records were read: strays are looked up in it.
    known: Vec<u64>,
    hasher: std::hash::RandomState,
    short: u64,
    known_bad: u64,
    listed: u64,
    shortfalls: Vec<Shortfall>,
    strays: Vec<Stray>,
}

/// What is done with each chunk of held names and what each place holds of it.
type OnChunk<'s, 'a> = dyn FnMut(&mut Survey<'a>, &[RepositoryName], &[Held]) -> Result<()> + 's;

/// The places' stores: the collection, then each site (none when it could not be opened).
struct Stores<'a> {
    root: &'a dyn Store,
    sites: Vec<Option<Box<dyn Store>>>,
}

impl Stores<'_> {
    fn get(&self, place: usize) -> Option<&dyn Store> {
        match place {
            0 => Some(self.root),
            i => self.sites[i - 1].as_deref(),
        }
    }
}

impl<'a> Survey<'a> {
    fn report(self) -> AuditReport {
        let places = self.places.into_iter().map(|p| p.facts).collect();
        let (items, policy, short, known_bad, listed) =
            (self.items, self.policy, self.short, self.known_bad, self.listed);
        let (shortfalls, strays) = (self.shortfalls, self.strays);
        AuditReport { items, policy, places, short, known_bad, listed, shortfalls, strays, log_problems: Vec::new() }
    }

    /// Hands each chunk of the collection's held names (sorted within the
    /// chunk) to `each`, with what every place holds of it; then fills `known`.
    fn each_chunk(&mut self, each: &mut OnChunk<'_, 'a>) -> Result<()> {
        let mut names = Vec::with_capacity(CHUNK_AT_MOST);
        let mut known = Vec::new();
        let root = self.stores.root;
        let mut summaries = root.inventory().record_summaries();
        loop {
            let next = summaries.next().transpose()?;
            let ends = |next: &crate::store::inventory::RecordSummary| {
                next.status == Status::Present
                    && (names.len() == CHUNK_AT_MOST || (names.len() >= CHUNK_AT_LEAST && begins_chunk(&next.name)))
            };
            if next.as_ref().is_none_or(ends) {
                names.sort_unstable();
                self.items += names.len() as u64;
                let held = self.look(&names);
                each(self, &names, &held)?;
                names.clear();
            }
            let Some(summary) = next else { break };
            known.push(self.hasher.hash_one(&summary.name));
            if summary.status == Status::Present {
                names.push(summary.name);
            }
        }
        known.sort_unstable();
        self.known = known;
        Ok(())
    }

    /// What each place holds of `names`; a place that fails to answer is
    /// unreachable from then on.
    fn look(&mut self, names: &[RepositoryName]) -> Vec<Held> {
        let mut all = Vec::with_capacity(self.places.len());
        for i in 0..self.places.len() {
            let Some(store) = self.stores.get(i).filter(|_| self.places[i].facts.unreachable.is_none()) else {
                all.push(Held::default());
                continue;
            };
            let place = &mut self.places[i];
            let mut held = match look_at(store, names, place.checks.as_ref(), self.cycles, &mut place.facts) {
                Ok((copies, recorded)) => Held { copies, recorded, placed: None },
                Err(e) => {
                    place.facts.unreachable = Some(e.to_string());
                    all.push(Held::default());
                    continue;
                }
            };
            if let Some(cluster) = place.cluster.clone() {
                held.placed = Some(ask_placement(place, store, &cluster, names, &held.copies));
            }
            all.push(held);
        }
        all
    }
}

/// The first second of each of the policy's cycles it sets: any check's
/// (`max_fixity_age`), and a check that read the bytes (`max_read_age`).
#[derive(Debug, Clone, Copy, Default)]
struct Cycles {
    fixity: Option<i64>,
    read: Option<i64>,
}

impl Cycles {
    fn of(policy: &Policy) -> Result<Cycles> {
        let start = |age: &Option<String>| -> Result<Option<i64>> {
            let Some(age) = age else { return Ok(None) };
            let days = parse_days(age).map_err(|problem| crate::Error::Invalid { what: "[policy]".into(), problem })?;
            let start = Timestamp::now().checked_add_nanos(-(i128::from(days) * 86_400 * 1_000_000_000));
            Ok(Some(start.nanos().div_euclid(1_000_000_000) as i64))
        };
        Ok(Cycles { fixity: start(&policy.max_fixity_age)?, read: start(&policy.max_read_age)? })
    }
}

/// Opens every place and reads its last checks; a site that cannot be opened
/// or read is unreachable.
fn open_all<'a>(
    store: &'a dyn Store,
    config: &CollectionConfig,
    connect: &Connect,
    placement: bool,
) -> Result<Survey<'a>> {
    let policy = policy_of(config);
    let cycles = Cycles::of(&policy)?;
    let (locality, storage) = locality_of(&store.location());
    let here = PlaceFacts {
        locality,
        storage,
        url: store.location(),
        zone: config.zone.clone().unwrap_or_else(|| "here".into()),
        media: config.media.unwrap_or_default().as_str().into(),
        ..PlaceFacts::default()
    };
    let mut places = vec![place_of(store, here, None)];
    let mut sites = Vec::new();
    for site in &config.sites {
        let media = site.media.as_str().into();
        let (locality, storage) = locality_of(&site.url);
        let (url, zone) = (site.url.clone(), site.zone.clone());
        let facts = PlaceFacts { url, zone, media, locality, storage, ..Default::default() };
        let cluster = site.seaweedfs.clone().filter(|_| placement);
        match crate::store::open(Path::new(&site.url), connect) {
            Ok(opened) => {
                places.push(place_of(opened.as_ref(), facts, cluster));
                sites.push(Some(opened));
            }
            Err(e) => {
                let facts = PlaceFacts { unreachable: Some(e.to_string()), ..facts };
                places.push(Place { facts, checks: None, cluster: None });
                sites.push(None);
            }
        }
    }
    let (items, known, hasher, short, known_bad, listed) = (0, Vec::new(), std::hash::RandomState::new(), 0, 0, 0);
    let (shortfalls, strays) = (Vec::new(), Vec::new());
    let stores = Stores { root: store, sites };
    Ok(Survey { stores, places, policy, cycles, items, known, hasher, short, known_bad, listed, shortfalls, strays })
}

/// Where a place measurably is, and its kind of storage: a local folder's
/// filesystem (its device) on this host, a far collection's host, an S3
/// collection's endpoint and bucket.
fn locality_of(url: &str) -> (String, &'static str) {
    use crate::store::location::{Location, OcflPlace};
    use std::os::unix::fs::MetadataExt;
    match Location::parse(Path::new(url)) {
        Ok(Location::Local(path) | Location::Ocfl(OcflPlace::Folder(path))) => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let device = std::fs::metadata(&path).map(|m| format!("{:x}", m.dev())).unwrap_or_else(|_| "?".into());
            (format!("filesystem {device} on {}", host.trim()), "filesystem")
        }
        Ok(Location::Far(far) | Location::Ocfl(OcflPlace::Far(far))) => (format!("host {}", far.host), "filesystem"),
        Ok(Location::Object(object) | Location::Ocfl(OcflPlace::Bucket(object))) => {
            let endpoint = std::env::var("AWS_ENDPOINT_URL").or_else(|_| std::env::var("AWS_ENDPOINT"));
            let endpoint = endpoint.unwrap_or_else(|_| "AWS".into());
            (format!("S3 {endpoint} bucket {}", object.bucket), "object store")
        }
        Err(_) => (format!("unknown ({url})"), "filesystem"),
    }
}

/// A place's last checks read, and the oldest good one noted.
fn place_of(store: &dyn Store, mut facts: PlaceFacts, cluster: Option<SeaweedFs>) -> Place {
    match LastChecks::read(store) {
        Ok(checks) => {
            facts.oldest_check = checks.as_ref().and_then(LastChecks::oldest_good).map(|check| check.date());
            Place { facts, checks, cluster }
        }
        Err(e) => {
            Place { facts: PlaceFacts { unreachable: Some(e.to_string()), ..facts }, checks: None, cluster: None }
        }
    }
}

/// Counts the items a reachable site records present that the collection has
/// no record of (an item planted there, or one whose record was lost here),
/// naming the first ones; a site whose records cannot be read is unreachable.
/// Only the names are listed; the records of the unknown ones are read.
fn find_strays(survey: &mut Survey, i: usize) {
    let Some(store) = survey.stores.get(i).filter(|_| survey.places[i].facts.unreachable.is_none()) else { return };
    let mut unknown = Vec::new();
    let mut names = store.inventory().record_names();
    loop {
        let next = names.next();
        if next.is_none() || unknown.len() == CHUNK_AT_MOST {
            let place = &mut survey.places[i];
            if let Err(e) = count_strays(place, store, &std::mem::take(&mut unknown), &mut survey.strays) {
                return place.facts.unreachable = Some(e.to_string());
            }
        }
        match next {
            None => return,
            Some(Err(e)) => return survey.places[i].facts.unreachable = Some(e.to_string()),
            Some(Ok(name)) if survey.known.binary_search(&survey.hasher.hash_one(&name)).is_err() => unknown.push(name),
            Some(Ok(_)) => {}
        }
    }
}

/// Counts and names those of `unknown` the place records present.
fn count_strays(
    place: &mut Place,
    store: &dyn Store,
    unknown: &[RepositoryName],
    strays: &mut Vec<Stray>,
) -> Result<()> {
    if unknown.is_empty() {
        return Ok(());
    }
    for record in store.inventory().records(unknown)?.into_iter().flatten() {
        if record.status == Status::Present {
            place.facts.strays += 1;
            if strays.len() < STRAYS_NAMED {
                strays.push(Stray { name: record.name.to_string(), place: place.facts.url.clone() });
            }
        }
    }
    Ok(())
}

/// Asks the cluster behind a reachable place where the items of a chunk it
/// holds are, adding to the place's placement facts.
fn ask_placement(
    place: &mut Place,
    store: &dyn Store,
    cluster: &SeaweedFs,
    names: &[RepositoryName],
    copies: &[Copy],
) -> Vec<ItemPlacement> {
    let held: Vec<usize> = (0..names.len()).filter(|&i| matches!(copies.get(i), Some(Copy::Held { .. }))).collect();
    let held_names: Vec<RepositoryName> = held.iter().map(|&i| names[i].clone()).collect();
    let (facts, found) = placement::ask(store, cluster, &held_names);
    placement::add(place.facts.placement.get_or_insert_with(Default::default), facts);
    let mut placed = vec![ItemPlacement::default(); names.len()];
    for (i, item) in held.into_iter().zip(found) {
        placed[i] = item;
    }
    placed
}

/// Audits `store` and its configured sites against the policy; with `placement`,
/// each site that names its SeaweedFS cluster counts the data centres it proves.
pub fn audit(store: &dyn Store, config: &CollectionConfig, connect: &Connect, placement: bool) -> Result<AuditReport> {
    let mut survey = open_all(store, config, connect, placement)?;
    survey.each_chunk(&mut |survey, names, held| {
        compare(survey, names, held);
        Ok(())
    })?;
    for i in 1..survey.places.len() {
        find_strays(&mut survey, i);
    }
    let log_problems = check_checkpoints(&survey, config);
    let mut report = survey.report();
    report.log_problems = log_problems;
    Ok(report)
}

/// Holds the collection's log to the checkpoint each reachable site cosigned.
fn check_checkpoints(survey: &Survey, config: &CollectionConfig) -> Vec<String> {
    let Some(key) = config.witness_key.as_deref() else { return Vec::new() };
    let mut problems = Vec::new();
    for i in 1..survey.places.len() {
        let Some(site) = survey.stores.get(i).filter(|_| survey.places[i].facts.unreachable.is_none()) else {
            continue;
        };
        let url = &survey.places[i].facts.url;
        match crate::ops::checkpoints::check(survey.stores.root, site, key) {
            Ok(None) => {}
            Ok(Some(why)) => problems.push(format!("{url}: {why}")),
            Err(e) => problems.push(format!("{url}: its checkpoint of this collection does not check: {e}")),
        }
    }
    problems
}

/// What `audit --repair` did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct AuthorityRepair {
    /// Copies restored or replaced.
    pub repaired: u64,
    /// Items no copy of which can be vouched for: left for a person.
    pub undecided: Vec<String>,
    /// Sites a repair could not reach or finish, and why.
    pub failed: Vec<String>,
}

/// Whether a place's copy is the agreed one, sound as far as its place knows:
/// a source for the others.
fn is_source(copy: Option<&Copy>, agreed: &str) -> bool {
    matches!(copy, Some(Copy::Held { identity, record_agrees: true, fixity })
        if identity == agreed && *fixity != Fixity::Failed)
}

/// Restores every missing, damaged, divergent or forged copy from a copy that
/// holds the item's authority (`Authority::of`: the collection's own copy
/// first), each verified on arrival by the transfer driver; where no copy can
/// be vouched for it changes nothing and names the item. Every copy replaced is
/// kept by its place (`.ibi/kept/`), never deleted. A chunk of items at a time;
/// returns what it did and the audit after it.
pub fn repair_toward_authority(
    store: &dyn Store,
    config: &CollectionConfig,
    connect: &Connect,
    options: RepairOptions,
    placement: bool,
    reporter: &dyn Reporter,
) -> Result<(AuthorityRepair, AuditReport)> {
    let mut survey = open_all(store, config, connect, false)?;
    let mut done = AuthorityRepair::default();
    survey.each_chunk(&mut |survey, names, held| {
        repair_chunk(survey, names, held, options, reporter, &mut done);
        Ok(())
    })?;
    drop(survey);
    Ok((done, audit(store, config, connect, placement)?))
}

/// Repairs the copies of one chunk of names toward their majorities.
fn repair_chunk(
    survey: &Survey,
    names: &[RepositoryName],
    held: &[Held],
    options: RepairOptions,
    reporter: &dyn Reporter,
    done: &mut AuthorityRepair,
) {
    let reachable: Vec<usize> =
        (0..survey.places.len()).filter(|&p| survey.places[p].facts.unreachable.is_none()).collect();
    let mut work: BTreeMap<(usize, usize), Vec<(RepositoryName, String)>> = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let authority = Authority::of(held, i, &|p| reachable.contains(&p));
        let Some(agreed) = authority.agreed else {
            if reachable.iter().any(|&p| matches!(held[p].copies.get(i), Some(Copy::Held { .. }))) {
                done.undecided.push(name.to_string());
            }
            continue;
        };
        let source_of = |p: usize| is_source(held[p].copies.get(i), &agreed);
        // The collection's own copy first: a site's is a source only where the collection has none.
        let Some(&source) = reachable.iter().find(|&&p| source_of(p)) else { continue };
        for &p in reachable.iter().filter(|&&p| !source_of(p)) {
            work.entry((p, source)).or_default().push((name.clone(), agreed.clone()));
        }
    }
    for ((to, from), wanted) in &work {
        let (Some(to_store), Some(from_store)) = (survey.stores.get(*to), survey.stores.get(*from)) else { continue };
        match repair_toward(to_store, from_store, wanted, options, reporter) {
            Ok(summary) => done.repaired += summary.copied + summary.replaced,
            Err(e) => done.failed.push(format!("{}: {e}", to_store.location())),
        }
    }
}

/// What `store` holds of each of `names`: identities, its records, its fixity dates.
fn look_at(
    store: &dyn Store,
    names: &[RepositoryName],
    checks: Option<&LastChecks>,
    cycles: Cycles,
    facts: &mut PlaceFacts,
) -> Result<(Vec<Copy>, Vec<Vec<String>>)> {
    let states = crate::store::copy_states::copy_states_of(store, names)?;
    let mut copies = Vec::with_capacity(names.len());
    let mut recorded = Vec::with_capacity(names.len());
    for (name, state) in names.iter().zip(states) {
        recorded.push(state.record.as_ref().map(|r| r.versions.clone()).unwrap_or_default());
        let Ok(identity) = state.identity else {
            copies.push(Copy::Missing);
            continue;
        };
        facts.from_pages += u64::from(state.from_page);
        let record_agrees =
            state.record.is_some_and(|r| r.status == Status::Present && r.versions.last() == Some(&identity));
        let last = checks.and_then(|c| c.get(name));
        let fixity = fixity_of(last, || checks.and_then(|c| c.read_at(name)), cycles);
        copies.push(Copy::Held { identity, record_agrees, fixity });
    }
    Ok((copies, recorded))
}

/// A copy's fixity under the policy's cycles, from its last check and (asked
/// only of a store-attested one) when its bytes were last read and found whole.
fn fixity_of(check: Option<LastCheck>, read_at: impl FnOnce() -> Option<i64>, cycles: Cycles) -> Fixity {
    match check {
        None => Fixity::Never,
        Some(check) if check.undated() || check.future() => Fixity::Never,
        Some(check) if !check.ok => Fixity::Failed,
        Some(check) if cycles.fixity.is_some_and(|start| check.at < start) => Fixity::Stale,
        Some(check) if check.attested => match cycles.read {
            Some(start) if read_at().is_none_or(|at| at < start) => Fixity::Unread,
            _ => Fixity::Attested,
        },
        Some(_) => Fixity::Passed,
    }
}

/// The identity an item's copies are judged against, and whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    /// None when no copy can be vouched for: a person must decide.
    agreed: Option<String>,
    /// Every identity the collection's record of the item has held.
    recorded: Vec<String>,
}

impl Authority {
    /// The authority over item `i` of a chunk (place 0 is the collection): the
    /// collection's own copy when it holds what its record says and its last
    /// check did not fail; else the identity a strict majority of the reachable
    /// sites' copies agree on, among the identities the collection recorded.
    fn of(held: &[Held], i: usize, reachable: &dyn Fn(usize) -> bool) -> Authority {
        let recorded = held.first().and_then(|h| h.recorded.get(i)).cloned().unwrap_or_default();
        let own = held.first().and_then(|h| h.copies.get(i));
        if let Some(Copy::Held { identity, record_agrees: true, fixity }) = own {
            if *fixity != Fixity::Failed {
                return Authority { agreed: Some(identity.clone()), recorded };
            }
        }
        let at_sites = (1..held.len()).filter(|&p| reachable(p)).filter_map(|p| match held[p].copies.get(i) {
            Some(Copy::Held { identity, .. }) if recorded.contains(identity) => Some(identity.as_str()),
            _ => None,
        });
        let agreed = majority(at_sites).map(str::to_string);
        Authority { agreed, recorded }
    }

    /// Why a copy of `identity` is not the item's (when it is not).
    fn fault(&self, identity: &str) -> Option<String> {
        let agreed = self.agreed.as_deref()?;
        if identity == agreed {
            return None;
        }
        Some(match self.recorded.iter().any(|r| r == identity) {
            true => "divergent: it holds another version than the collection's".into(),
            false => format!("forged: its identity {identity} is none the collection ever recorded"),
        })
    }
}

/// The identity a strict majority of the copies held agree on.
fn majority<'a>(held: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut total = 0;
    for identity in held {
        *counts.entry(identity).or_default() += 1;
        total += 1;
    }
    counts.into_iter().find(|(_, n)| n * 2 > total).map(|(identity, _)| identity)
}

/// Compares the copies of a chunk of items, counts each place's findings, and
/// counts (and names, up to the cap) the items short of the policy.
fn compare(survey: &mut Survey, names: &[RepositoryName], held: &[Held]) {
    for (i, name) in names.iter().enumerate() {
        let places = &survey.places;
        let authority = Authority::of(held, i, &|p| places[p].facts.unreachable.is_none());
        let mut good = 0;
        let mut zones = BTreeSet::new();
        let mut reasons = Vec::new();
        let mut known_bad = false;
        if authority.agreed.is_none() {
            reasons.push(
                "no copy to vouch for: the collection's own is missing or damaged, and no strict majority of the \
                 sites' copies agree on an identity the collection recorded: a person must decide"
                    .into(),
            );
        }
        for (place, held) in survey.places.iter_mut().zip(held) {
            if place.facts.unreachable.is_some() {
                continue;
            }
            let placed = held.placed.as_ref().and_then(|p| p.get(i)).cloned();
            if placed.as_ref().is_some_and(|p| p.degraded) {
                reasons.push(format!("{}: degraded: its store keeps fewer replicas than it asks for", place.facts.url));
            }
            match verdict(&mut place.facts, held.copies.get(i), &authority, &survey.policy) {
                Ok(()) => {
                    good += 1;
                    zones.extend(placement::zones_of(&place.facts.zone, placed.as_ref()));
                }
                Err(fault) => {
                    known_bad |= fault.known_bad;
                    reasons.push(format!("{}: {}", place.facts.url, fault.why));
                }
            }
        }
        let policy = &survey.policy;
        let short = good < policy.copies || (zones.len() as u32) < policy.zones;
        survey.short += u64::from(short);
        let known_bad = known_bad || authority.agreed.is_none();
        survey.known_bad += u64::from(known_bad);
        survey.listed += u64::from(short || known_bad);
        if (short || known_bad) && survey.shortfalls.len() < SHORTFALLS_NAMED {
            let (copies, wanted) = (policy.copies, policy.zones);
            let count = format!(
                "{good} good copies in {} zones; the policy asks for {copies} in {wanted}{}",
                zones.len(),
                if short { "" } else { " (met)" }
            );
            reasons.insert(0, count);
            let zones = zones.into_iter().collect();
            let name = name.to_string();
            survey.shortfalls.push(Shortfall { name, good_copies: good, zones, reasons, meets_policy: !short });
        }
    }
}

/// Why a copy does not count toward the policy; `known_bad` when it is
/// missing, damaged, divergent or forged (not merely unchecked).
struct Fault {
    why: String,
    known_bad: bool,
}

impl Fault {
    fn bad(why: impl Into<String>) -> Fault {
        Fault { why: why.into(), known_bad: true }
    }
    fn unchecked(why: impl Into<String>) -> Fault {
        Fault { why: why.into(), known_bad: false }
    }
}

/// Whether a place's copy is complete and verified; counts it.
fn verdict(
    facts: &mut PlaceFacts,
    copy: Option<&Copy>,
    authority: &Authority,
    policy: &Policy,
) -> std::result::Result<(), Fault> {
    let Some(Copy::Held { identity, record_agrees, fixity }) = copy else {
        facts.missing += 1;
        return Err(Fault::bad("missing"));
    };
    facts.held += 1;
    if let Some(fault) = authority.fault(identity) {
        facts.divergent += 1;
        return Err(Fault::bad(fault));
    }
    if !record_agrees {
        facts.divergent += 1;
        return Err(Fault::bad("its bag no longer matches its own record (replaced behind ibi's back?)"));
    }
    match fixity {
        Fixity::Failed => {
            facts.damaged += 1;
            Err(Fault::bad("damaged: its last fixity check failed"))
        }
        Fixity::Stale => {
            facts.stale += 1;
            Err(Fault::unchecked("stale fixity: last checked before the policy's cycle"))
        }
        Fixity::Unread => {
            facts.stale += 1;
            Err(Fault::unchecked(
                "store-attested only: its bytes were not read and found whole within the policy's max_read_age",
            ))
        }
        Fixity::Never if policy.max_fixity_age.is_some() => {
            facts.never_checked += 1;
            Err(Fault::unchecked("never checked, and the policy sets a maximum fixity age"))
        }
        Fixity::Never => {
            facts.never_checked += 1;
            Ok(())
        }
        Fixity::Attested => {
            facts.attested += 1;
            Ok(())
        }
        Fixity::Passed => Ok(()),
    }
}
