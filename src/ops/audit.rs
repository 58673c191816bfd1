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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use rayon::prelude::*;

use crate::error::Result;
use crate::id::{RepositoryName, Timestamp};
use crate::ops::repair::{repair_toward, RepairOptions};
use crate::ops::report::Reporter;
use crate::store::config::{parse_days, CollectionConfig, Policy};
use crate::store::inventory::{fixity_date, FixityCheck, Status};
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
    /// The oldest last good check of its copies (RFC 3339), when it keeps dates.
    pub oldest_check: Option<String>,
}

/// An item short of the policy, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Shortfall {
    pub name: String,
    pub good_copies: u32,
    pub zones: Vec<String>,
    pub reasons: Vec<String>,
}

/// The audit's findings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditReport {
    pub items: u64,
    pub policy: Policy,
    pub places: Vec<PlaceFacts>,
    pub shortfalls: Vec<Shortfall>,
}

impl AuditReport {
    pub fn meets_policy(&self) -> bool {
        self.shortfalls.is_empty() && self.places.iter().all(|p| p.unreachable.is_none())
    }
}

/// One place being audited: its facts and what it holds of each item, in the
/// order of the collection's held names.
struct Place {
    facts: PlaceFacts,
    copies: Vec<Copy>,
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
        AuditReport { items: self.names.len() as u64, policy: self.policy, places, shortfalls }
    }
}

/// The first day of the policy's fixity cycle, when it sets one.
fn cycle_start(policy: &Policy) -> Result<Option<String>> {
    let Some(age) = &policy.max_fixity_age else { return Ok(None) };
    let days = parse_days(age).map_err(|problem| crate::Error::Invalid { what: "[policy]".into(), problem })?;
    let start = Timestamp::now().checked_add_nanos(-(i128::from(days) * 86_400 * 1_000_000_000));
    Ok(Some(fixity_date(start)))
}

fn survey_all<'a>(store: &'a dyn Store, config: &CollectionConfig, connect: &Connect) -> Result<Survey<'a>> {
    let policy = policy_of(config);
    let cycle_start = cycle_start(&policy)?;
    let names: Vec<RepositoryName> =
        store.all_records().filter_map(|r| r.ok().filter(|r| r.status == Status::Present).map(|r| r.name)).collect();
    let here = PlaceFacts {
        url: store.location(),
        zone: config.zone.clone().unwrap_or_else(|| "here".into()),
        media: config.media.unwrap_or_default().as_str().into(),
        ..PlaceFacts::default()
    };
    let mut places = vec![survey(store, here, &names, cycle_start.as_deref())];
    let mut sites = Vec::new();
    for site in &config.sites {
        let media = site.media.as_str().into();
        let facts = PlaceFacts { url: site.url.clone(), zone: site.zone.clone(), media, ..Default::default() };
        match crate::store::open(Path::new(&site.url), connect) {
            Ok(opened) => {
                places.push(survey(opened.as_ref(), facts, &names, cycle_start.as_deref()));
                sites.push(Some(opened));
            }
            Err(e) => {
                places.push(Place {
                    facts: PlaceFacts { unreachable: Some(e.to_string()), ..facts },
                    copies: Vec::new(),
                });
                sites.push(None);
            }
        }
    }
    Ok(Survey { root: store, sites, names, places, policy })
}

/// Audits `store` and its configured sites against the policy.
pub fn audit(store: &dyn Store, config: &CollectionConfig, connect: &Connect) -> Result<AuditReport> {
    Ok(survey_all(store, config, connect)?.report())
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
    reporter: &dyn Reporter,
) -> Result<(MajorityRepair, AuditReport)> {
    let survey = survey_all(store, config, connect)?;
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
    Ok((done, audit(store, config, connect)?))
}

/// What `store` holds of each name: identities, its records, its fixity dates.
fn survey(store: &dyn Store, facts: PlaceFacts, names: &[RepositoryName], cycle_start: Option<&str>) -> Place {
    let checks = match store.fixity_checks() {
        Ok(checks) => checks.map(|c| c.into_iter().map(|c| (c.name.clone(), c)).collect::<HashMap<_, _>>()),
        Err(e) => return Place { facts: PlaceFacts { unreachable: Some(e.to_string()), ..facts }, copies: Vec::new() },
    };
    let mut copies = Vec::with_capacity(names.len());
    for batch in names.chunks(NAMES_AT_ONCE) {
        let records = match store.records(batch) {
            Ok(records) => records,
            Err(e) => return Place { facts: PlaceFacts { unreachable: Some(e.to_string()), ..facts }, copies },
        };
        // Read from each bag's tagmanifest (no payload byte), not from the records,
        // so that a copy deleted or replaced behind ibi's back shows.
        let identities: Vec<Result<String>> =
            batch.par_iter().map(|name| crate::store::identity_digest(store, name)).collect();
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
    let mut place = Place { facts, copies };
    place.facts.oldest_check = checks.and_then(|c| c.values().filter(|c| c.ok).map(|c| c.date.clone()).min());
    place
}

fn fixity_of(check: Option<&FixityCheck>, cycle_start: Option<&str>) -> Fixity {
    match check {
        None => Fixity::Never,
        Some(check) if !check.ok => Fixity::Failed,
        Some(check) if cycle_start.is_some_and(|start| check.date.as_str() < start) => Fixity::Stale,
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
            match verdict(place, i, agreed.as_deref(), policy) {
                Ok(()) => {
                    good += 1;
                    zones.insert(place.facts.zone.clone());
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
