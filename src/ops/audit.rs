//! The audit of every copy (ARCHITECTURE.md, "Sites and the copy policy"):
//! without moving a payload byte, each place (the collection and each of its
//! sites) tells which of the collection's held items it holds and their
//! identity digests (a far server computes its own; S3 reads the tagmanifest
//! objects), its own record of each, and its last fixity checks. Per item the
//! copies are compared: the identity a strict majority of the places holding it
//! agree on is the item's; a copy is complete when it holds that identity and
//! its own record agrees, and verified when its last fixity check did not fail
//! (and, with `max_fixity_age`, passed within it). An item meets the policy
//! with enough complete, verified copies in enough zones.

use std::collections::{BTreeMap, BTreeSet};
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

/// How many names one request asks about.
const NAMES_AT_ONCE: usize = 1000;

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
    /// Passed, before the policy's cycle began.
    Stale,
    Failed,
    Never,
}

/// The facts of one place: where, its zone, whether it answered, and its counts.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PlaceFacts {
    pub url: String,
    pub zone: String,
    pub media: String,
    /// Why it could not be read, when it could not.
    pub unreachable: Option<String>,
    pub held: u64,
    pub missing: u64,
    pub divergent: u64,
    pub damaged: u64,
    pub stale: u64,
    pub never_checked: u64,
    /// Items it holds that the collection never recorded (planted, or lost here).
    pub strays: u64,
    /// The oldest last good check of its copies (RFC 3339), when it keeps dates.
    pub oldest_check: Option<String>,
    /// Where its cluster proves its copies are (`--placement`), when asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementFacts>,
}

/// An item short of the policy, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Shortfall {
    pub name: String,
    pub good_copies: u32,
    pub zones: Vec<String>,
    pub reasons: Vec<String>,
}

/// An item a site holds that the collection has no record of.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stray {
    pub name: String,
    pub place: String,
}

/// How many strays the report names (the places' counts are whole).
const STRAYS_NAMED: usize = 1000;

/// The audit's findings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditReport {
    pub items: u64,
    pub policy: Policy,
    pub places: Vec<PlaceFacts>,
    pub shortfalls: Vec<Shortfall>,
    /// The first strays found (each place's `strays` counts them all).
    pub strays: Vec<Stray>,
}

impl AuditReport {
    pub fn meets_policy(&self) -> bool {
        let sound = |p: &PlaceFacts| p.unreachable.is_none() && p.placement.as_ref().is_none_or(PlacementFacts::sound);
        self.shortfalls.is_empty() && self.strays.is_empty() && self.places.iter().all(sound)
    }
}

/// One place being audited: its facts and what it holds of each item, in the
/// order of the collection's held names.
struct Place {
    facts: PlaceFacts,
    copies: Vec<Copy>,
    /// Where its cluster proves each item is (`--placement`), in the same order.
    placed: Option<Vec<ItemPlacement>>,
}

/// The policy in force: the configured one, or every place a copy.
fn policy_of(config: &CollectionConfig) -> Policy {
    let copies = 1 + config.sites.len() as u32;
    config.policy.clone().unwrap_or(Policy { copies, zones: 1, max_fixity_age: None })
}

/// Every place surveyed: the collection first, then each site in the order
/// configured (an unreachable one has no handle).
struct Survey<'a> {
    root: &'a dyn Store,
    sites: Vec<Option<Box<dyn Store>>>,
    names: Vec<RepositoryName>,
    places: Vec<Place>,
    policy: Policy,
    strays: Vec<Stray>,
}

impl Survey<'_> {
    fn store(&self, place: usize) -> Option<&dyn Store> {
        match place {
            0 => Some(self.root),
            i => self.sites[i - 1].as_deref(),
        }
    }

    fn report(mut self) -> AuditReport {
        let shortfalls = compare(&self.names, &mut self.places, &self.policy);
        let places = self.places.into_iter().map(|p| p.facts).collect();
        let (items, policy, strays) = (self.names.len() as u64, self.policy, self.strays);
        AuditReport { items, policy, places, shortfalls, strays }
    }
}

/// The first day of the policy's fixity cycle, when it sets one.
fn cycle_start(policy: &Policy) -> Result<Option<i64>> {
    let Some(age) = &policy.max_fixity_age else { return Ok(None) };
    let days = parse_days(age).map_err(|problem| crate::Error::Invalid { what: "[policy]".into(), problem })?;
    let start = Timestamp::now().checked_add_nanos(-(i128::from(days) * 86_400 * 1_000_000_000));
    Ok(Some(start.nanos().div_euclid(1_000_000_000) as i64))
}

fn survey_all<'a>(
    store: &'a dyn Store,
    config: &CollectionConfig,
    connect: &Connect,
    placement: bool,
) -> Result<Survey<'a>> {
    let policy = policy_of(config);
    let cycle_start = cycle_start(&policy)?;
    // Sorted: strays are looked up by binary search.
    let (mut names, mut gone) = (Vec::new(), Vec::new());
    for record in store.all_records() {
        let record = record?;
        match record.status {
            Status::Present => names.push(record.name),
            _ => gone.push(record.name),
        }
    }
    names.sort_unstable();
    gone.sort_unstable();
    let known = Known { present: &names, gone: &gone };
    let mut strays = Vec::new();
    let here = PlaceFacts {
        url: store.location(),
        zone: config.zone.clone().unwrap_or_else(|| "here".into()),
        media: config.media.unwrap_or_default().as_str().into(),
        ..PlaceFacts::default()
    };
    let mut places = vec![survey(store, here, &names, cycle_start)];
    let mut sites = Vec::new();
    for site in &config.sites {
        let media = site.media.as_str().into();
        let facts = PlaceFacts { url: site.url.clone(), zone: site.zone.clone(), media, ..Default::default() };
        match crate::store::open(Path::new(&site.url), connect) {
            Ok(opened) => {
                let mut place = survey(opened.as_ref(), facts, &names, cycle_start);
                find_strays(&mut place, opened.as_ref(), &known, &mut strays);
                if let Some(cluster) = site.seaweedfs.as_ref().filter(|_| placement) {
                    ask_placement(&mut place, opened.as_ref(), cluster, &names);
                }
                places.push(place);
                sites.push(Some(opened));
            }
            Err(e) => {
                let facts = PlaceFacts { unreachable: Some(e.to_string()), ..facts };
                places.push(Place { facts, copies: Vec::new(), placed: None });
                sites.push(None);
            }
        }
    }
    Ok(Survey { root: store, sites, names, places, policy, strays })
}

/// The names the collection has records of: held, and withdrawn or moved away.
struct Known<'a> {
    present: &'a [RepositoryName],
    gone: &'a [RepositoryName],
}

impl Known<'_> {
    fn contains(&self, name: &RepositoryName) -> bool {
        self.present.binary_search(name).is_ok() || self.gone.binary_search(name).is_ok()
    }
}

/// Counts the items a reachable place records present that the collection has
/// no record of (an item planted there, or one whose record was lost here),
/// naming the first ones; a place whose records cannot be read is unreachable.
/// Only the names are listed; the records of the unknown ones are read.
fn find_strays(place: &mut Place, store: &dyn Store, known: &Known, strays: &mut Vec<Stray>) {
    if place.facts.unreachable.is_some() {
        return;
    }
    let mut unknown = Vec::new();
    let mut names = store.record_names();
    loop {
        let next = names.next();
        if next.is_none() || unknown.len() == NAMES_AT_ONCE {
            if let Err(e) = count_strays(place, store, &std::mem::take(&mut unknown), strays) {
                return place.facts.unreachable = Some(e.to_string());
            }
        }
        match next {
            None => return,
            Some(Err(e)) => return place.facts.unreachable = Some(e.to_string()),
            Some(Ok(name)) if !known.contains(&name) => unknown.push(name),
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
    for record in store.records(unknown)?.into_iter().flatten() {
        if record.status == Status::Present {
            place.facts.strays += 1;
            if strays.len() < STRAYS_NAMED {
                strays.push(Stray { name: record.name.to_string(), place: place.facts.url.clone() });
            }
        }
    }
    Ok(())
}

/// Asks the cluster behind a reachable place where the items it holds are.
fn ask_placement(place: &mut Place, store: &dyn Store, cluster: &SeaweedFs, names: &[RepositoryName]) {
    if place.facts.unreachable.is_some() {
        return;
    }
    let held: Vec<usize> =
        (0..names.len()).filter(|&i| matches!(place.copies.get(i), Some(Copy::Held { .. }))).collect();
    let held_names: Vec<RepositoryName> = held.iter().map(|&i| names[i].clone()).collect();
    let (facts, found) = placement::ask(store, cluster, &held_names);
    let mut placed = vec![ItemPlacement::default(); names.len()];
    for (i, item) in held.into_iter().zip(found) {
        placed[i] = item;
    }
    place.facts.placement = Some(facts);
    place.placed = Some(placed);
}

/// Audits `store` and its configured sites against the policy; with `placement`,
/// each site that names its SeaweedFS cluster counts the data centres it proves.
pub fn audit(store: &dyn Store, config: &CollectionConfig, connect: &Connect, placement: bool) -> Result<AuditReport> {
    Ok(survey_all(store, config, connect, placement)?.report())
}

/// What `audit --repair` did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct MajorityRepair {
    /// Copies restored or replaced.
    pub repaired: u64,
    /// Items whose copies disagree with no strict majority: left for a person.
    pub undecided: Vec<String>,
    /// Sites a repair could not reach or finish, and why.
    pub failed: Vec<String>,
}

/// Whether a place's copy of item `i` is the agreed one, sound as far as its
/// place knows: a source for the others.
fn is_source(place: &Place, i: usize, agreed: &str) -> bool {
    matches!(place.copies.get(i), Some(Copy::Held { identity, record_agrees: true, fixity })
        if identity == agreed && *fixity != Fixity::Failed)
}

/// Restores every missing, damaged or divergent copy from a copy whose identity
/// a strict majority of the places holding the item agree on (each copy is
/// verified on arrival by the transfer driver); where no majority exists it
/// changes nothing and names the item. Nothing is ever deleted. Returns what it
/// did and the audit after it.
pub fn repair_by_majority(
    store: &dyn Store,
    config: &CollectionConfig,
    connect: &Connect,
    options: RepairOptions,
    placement: bool,
    reporter: &dyn Reporter,
) -> Result<(MajorityRepair, AuditReport)> {
    let survey = survey_all(store, config, connect, false)?;
    let mut done = MajorityRepair::default();
    let mut work: BTreeMap<(usize, usize), Vec<(RepositoryName, String)>> = BTreeMap::new();
    for (i, name) in survey.names.iter().enumerate() {
        let reachable: Vec<usize> =
            (0..survey.places.len()).filter(|&p| survey.places[p].facts.unreachable.is_none()).collect();
        let held = reachable.iter().filter_map(|&p| match survey.places[p].copies.get(i) {
            Some(Copy::Held { identity, .. }) => Some(identity.as_str()),
            _ => None,
        });
        let held: Vec<&str> = held.collect();
        let Some(agreed) = majority(held.iter().copied()).map(str::to_string) else {
            if !held.is_empty() {
                done.undecided.push(name.to_string());
            }
            continue;
        };
        let Some(&source) = reachable.iter().find(|&&p| is_source(&survey.places[p], i, &agreed)) else { continue };
        for &p in reachable.iter().filter(|&&p| !is_source(&survey.places[p], i, &agreed)) {
            work.entry((p, source)).or_default().push((name.clone(), agreed.clone()));
        }
    }
    for ((to, from), wanted) in &work {
        let (Some(to_store), Some(from_store)) = (survey.store(*to), survey.store(*from)) else { continue };
        match repair_toward(to_store, from_store, wanted, options, reporter) {
            Ok(summary) => done.repaired += summary.copied + summary.replaced,
            Err(e) => done.failed.push(format!("{}: {e}", to_store.location())),
        }
    }
    drop(survey);
    Ok((done, audit(store, config, connect, placement)?))
}

/// What `store` holds of each name: identities, its records, its fixity dates.
fn survey(store: &dyn Store, facts: PlaceFacts, names: &[RepositoryName], cycle_start: Option<i64>) -> Place {
    let checks = match LastChecks::read(store) {
        Ok(checks) => checks,
        Err(e) => {
            let facts = PlaceFacts { unreachable: Some(e.to_string()), ..facts };
            return Place { facts, copies: Vec::new(), placed: None };
        }
    };
    let mut copies = Vec::with_capacity(names.len());
    for batch in names.chunks(NAMES_AT_ONCE) {
        let records = match store.records(batch) {
            Ok(records) => records,
            Err(e) => {
                return Place { facts: PlaceFacts { unreachable: Some(e.to_string()), ..facts }, copies, placed: None }
            }
        };
        // Read from each bag's tagmanifest (no payload byte), not from the records,
        // so that a copy deleted or replaced behind ibi's back shows.
        let identities = store.bag_identities(batch);
        for ((name, identity), record) in batch.iter().zip(identities).zip(records) {
            let Ok(identity) = identity else {
                copies.push(Copy::Missing);
                continue;
            };
            let record_agrees = record.is_some_and(|r| r.status == Status::Present && r.current().digest == identity);
            let fixity = fixity_of(checks.as_ref().and_then(|c| c.get(name)), cycle_start);
            copies.push(Copy::Held { identity, record_agrees, fixity });
        }
    }
    let mut place = Place { facts, copies, placed: None };
    place.facts.oldest_check = checks.and_then(|c| c.oldest_good()).map(|check| check.date());
    place
}

fn fixity_of(check: Option<LastCheck>, cycle_start: Option<i64>) -> Fixity {
    match check {
        None => Fixity::Never,
        Some(check) if check.undated() => Fixity::Never,
        Some(check) if !check.ok => Fixity::Failed,
        Some(check) if cycle_start.is_some_and(|start| check.at < start) => Fixity::Stale,
        Some(_) => Fixity::Passed,
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

/// Compares every item's copies, counts each place's findings, and returns the
/// items short of the policy.
fn compare(names: &[RepositoryName], places: &mut [Place], policy: &Policy) -> Vec<Shortfall> {
    let mut shortfalls = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let held = places.iter().filter_map(|p| match p.copies.get(i) {
            Some(Copy::Held { identity, .. }) => Some(identity.as_str()),
            _ => None,
        });
        let agreed = majority(held).map(str::to_string);
        let mut good = 0;
        let mut zones = BTreeSet::new();
        let mut reasons = Vec::new();
        if agreed.is_none() {
            reasons.push("no strict majority of its copies agree on its identity: a person must decide".into());
        }
        for place in places.iter_mut() {
            if place.facts.unreachable.is_some() {
                continue;
            }
            let placed = place.placed.as_ref().and_then(|p| p.get(i)).cloned();
            if placed.as_ref().is_some_and(|p| p.degraded) {
                reasons.push(format!("{}: degraded: its store keeps fewer replicas than it asks for", place.facts.url));
            }
            match verdict(place, i, agreed.as_deref(), policy) {
                Ok(()) => {
                    good += 1;
                    zones.extend(placement::zones_of(&place.facts.zone, placed.as_ref()));
                }
                Err(why) => reasons.push(format!("{}: {why}", place.facts.url)),
            }
        }
        if good < policy.copies || (zones.len() as u32) < policy.zones {
            reasons.insert(
                0,
                format!(
                    "{good} good copies in {} zones; the policy asks for {} in {}",
                    zones.len(),
                    policy.copies,
                    policy.zones
                ),
            );
            let zones = zones.into_iter().collect();
            shortfalls.push(Shortfall { name: name.to_string(), good_copies: good, zones, reasons });
        }
    }
    shortfalls
}

/// Whether the place's copy of item `i` is complete and verified; counts it.
fn verdict(place: &mut Place, i: usize, agreed: Option<&str>, policy: &Policy) -> std::result::Result<(), String> {
    let facts = &mut place.facts;
    let Some(Copy::Held { identity, record_agrees, fixity }) = place.copies.get(i) else {
        facts.missing += 1;
        return Err("missing".into());
    };
    facts.held += 1;
    if agreed.is_some_and(|a| a != identity) {
        facts.divergent += 1;
        return Err("divergent: its identity differs from the majority's".into());
    }
    if !record_agrees {
        facts.divergent += 1;
        return Err("its bag no longer matches its own record (replaced behind ibi's back?)".into());
    }
    match fixity {
        Fixity::Failed => {
            facts.damaged += 1;
            Err("damaged: its last fixity check failed".into())
        }
        Fixity::Stale => {
            facts.stale += 1;
            Err("stale fixity: last checked before the policy's cycle".into())
        }
        Fixity::Never if policy.max_fixity_age.is_some() => {
            facts.never_checked += 1;
            Err("never checked, and the policy sets a maximum fixity age".into())
        }
        Fixity::Never => {
            facts.never_checked += 1;
            Ok(())
        }
        Fixity::Passed => Ok(()),
    }
}
