//! The NDSA Levels of Digital Preservation (v2.0) cells that a collection's own
//! facts prove, for `ibi audit --ndsa`: from an audit of every copy (places,
//! zones, media, damage, fixity ages) and the collection's own evidence (its
//! event log and its chain, its witness key's file mode), each cell of the
//! Storage, Integrity, Control and Metadata areas that ibi can judge is met,
//! partial or unmet, with the evidence; every other cell is marked as needing a
//! person, never guessed.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::error::Result;
use crate::events::EventKind;
use crate::ops::audit::{AuditReport, PlaceFacts};
use crate::store::config::CollectionConfig;
use crate::store::{Connect, Store};

/// What the facts say of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Judgement {
    Met,
    Partial,
    Unmet,
    /// Not a fact ibi holds: a person judges it.
    Person,
}

impl Judgement {
    pub fn as_str(self) -> &'static str {
        match self {
            Judgement::Met => "met",
            Judgement::Partial => "partial",
            Judgement::Unmet => "unmet",
            Judgement::Person => "person",
        }
    }
}

/// One cell of the NDSA matrix: its area, level and words, and the judgement.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub area: &'static str,
    pub level: u8,
    pub text: &'static str,
    pub judgement: Judgement,
    pub evidence: String,
}

/// The collection's own evidence beyond the audit.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// Events in the log, by type; `None` when the collection keeps no log.
    pub events: Option<BTreeMap<&'static str, u64>>,
    /// The log's first break, if its chain is broken.
    pub broken_log: Option<String>,
    /// The witness key's file mode, when the collection keeps one on this machine.
    pub key_mode: Option<u32>,
    pub has_inventory: bool,
    /// Whether the collection keeps a signed witness of its items' identities.
    pub witness: bool,
    /// Repairs logged at the sites (each site logs the repairs of its own copies).
    pub site_repairs: u64,
    /// Sites whose logs could not be read.
    pub sites_unread: Vec<String>,
}

/// Reads the evidence of `store`: one pass over its log and over each site's,
/// and its key file.
pub fn evidence(store: &dyn Store, config: &CollectionConfig, connect: &Connect) -> Result<Evidence> {
    let check = crate::ops::log::check_chain(store, crate::ops::log::CHAIN_WINDOW_LEAST)?;
    let mut counts: BTreeMap<&'static str, u64> = EventKind::ALL.iter().map(|k| (k.as_str(), 0)).collect();
    let keeps = crate::ops::log::for_each(store, None, &mut |stored| {
        let event = crate::ops::log::read(stored)?;
        *counts.entry(event.kind.as_str()).or_default() += 1;
        Ok(())
    })?;
    let key_mode = store.local_root().and_then(|root| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(root.join(".ibi/witness.key")).ok().map(|m| m.permissions().mode() & 0o777)
    });
    let (site_repairs, sites_unread) = site_repairs(config, connect);
    Ok(Evidence {
        events: keeps.then_some(counts),
        broken_log: check.and_then(|c| c.broken),
        key_mode,
        has_inventory: store.inventory().has_inventory(),
        witness: store.ledger().latest_witness().ok().flatten().is_some(),
        site_repairs,
        sites_unread,
    })
}

/// The repairs logged at every site, and the sites whose logs could not be read.
fn site_repairs(config: &CollectionConfig, connect: &Connect) -> (u64, Vec<String>) {
    let (mut repairs, mut unread) = (0, Vec::new());
    for site in &config.sites {
        let counted = crate::store::open(std::path::Path::new(&site.url), connect).and_then(|opened| {
            let mut n = 0;
            crate::ops::log::for_each(opened.as_ref(), None, &mut |stored| {
                n += u64::from(crate::ops::log::read(stored)?.kind == EventKind::Repair);
                Ok(())
            })?;
            Ok(n)
        });
        match counted {
            Ok(n) => repairs += n,
            Err(e) => unread.push(format!("{}: {e}", site.url)),
        }
    }
    (repairs, unread)
}

/// The places that hold a complete, undamaged copy of every item.
fn complete_places(report: &AuditReport) -> Vec<&PlaceFacts> {
    report
        .places
        .iter()
        .filter(|p| p.unreachable.is_none() && p.missing == 0 && p.divergent == 0 && p.damaged == 0)
        .collect()
}

fn distinct<'a>(places: &[&'a PlaceFacts], of: impl Fn(&'a PlaceFacts) -> &'a str) -> BTreeSet<&'a str> {
    places.iter().map(|p| of(p)).collect()
}

fn cell(area: &'static str, level: u8, text: &'static str, judgement: Judgement, evidence: String) -> Cell {
    Cell { area, level, text, judgement, evidence }
}

fn person(area: &'static str, level: u8, text: &'static str) -> Cell {
    cell(area, level, text, Judgement::Person, "not a fact ibi holds".into())
}

/// Met when the complete copies reach `need`; partial when only the places
/// declared (some of them short of a complete copy) do; else unmet.
fn reach(complete: usize, declared: usize, need: usize) -> Judgement {
    match (complete >= need, declared >= need) {
        (true, _) => Judgement::Met,
        (false, true) => Judgement::Partial,
        (false, false) => Judgement::Unmet,
    }
}

/// What the Storage cells count among the complete copies: measured (distinct
/// localities, kinds of storage) and declared (zone and media labels). A
/// declared difference alone makes a cell at most partial.
struct Spread {
    complete: usize,
    places: usize,
    localities: usize,
    /// Distinct declared zones, counted once a locality (two labels on one disk are one).
    zones_measured: usize,
    zones_declared: usize,
    storage_kinds: usize,
    media_declared: usize,
}

impl Spread {
    fn of(report: &AuditReport) -> Spread {
        let complete = complete_places(report);
        let all: Vec<&PlaceFacts> = report.places.iter().collect();
        let localities = distinct(&complete, |p| p.locality.as_str()).len();
        let mut zone_of_locality: BTreeMap<&str, &str> = BTreeMap::new();
        for place in &complete {
            zone_of_locality.entry(place.locality.as_str()).or_insert(place.zone.as_str());
        }
        let zones_measured = zone_of_locality.values().collect::<BTreeSet<_>>().len();
        Spread {
            complete: complete.len(),
            places: all.len(),
            localities,
            zones_measured,
            zones_declared: distinct(&all, |p| p.zone.as_str()).len(),
            storage_kinds: distinct(&complete, |p| p.storage).len(),
            media_declared: distinct(&all, |p| p.media.as_str()).len(),
        }
    }

    /// Met when measured facts reach `need`; partial when only declared ones do.
    fn judge(measured: usize, declared: usize, need: usize) -> Judgement {
        reach(measured, declared.max(measured), need)
    }
}

/// The Storage cells: copies, zones (declared disaster threats) and media,
/// each judged on what was measured.
fn storage(report: &AuditReport) -> Vec<Cell> {
    let spread = Spread::of(report);
    let evidence = format!(
        "measured: {} of {} places hold a complete copy of all {} items, at {} distinct localities ({}); \
         declared: {}",
        spread.complete,
        spread.places,
        report.items,
        spread.localities,
        report
            .places
            .iter()
            .map(|p| format!("{}: {}, {}", p.url, p.locality, p.storage))
            .collect::<Vec<_>>()
            .join("; "),
        report
            .places
            .iter()
            .map(|p| format!("{} zone {}, media {}", p.url, p.zone, p.media))
            .collect::<Vec<_>>()
            .join("; "),
    );
    let separate = Spread::judge(spread.localities.min(spread.complete), spread.complete, 2);
    let three_apart = match (spread.complete >= 3, spread.localities >= 2) {
        (true, true) => Judgement::Met,
        (true, false) => Judgement::Partial,
        (false, _) if spread.places >= 3 => Judgement::Partial,
        _ => Judgement::Unmet,
    };
    let threats = |need| Spread::judge(spread.zones_measured, spread.zones_declared, need);
    let media = Spread::judge(spread.storage_kinds, spread.media_declared, 2);
    let text = |t: &'static str, j: Judgement, level: u8| cell("Storage", level, t, j, evidence.clone());
    vec![
        text("Have two complete copies in separate locations", separate, 1),
        text("Document all storage media where content is stored", Judgement::Met, 1),
        person("Storage", 1, "Put content into stable storage"),
        text("Have three complete copies with at least one copy in a separate geographic location", three_apart, 2),
        person(
            "Storage",
            2,
            "Document storage and storage media indicating the resources and dependencies they require to function",
        ),
        text(
            "Have at least one copy in a geographic location with a different disaster threat than the other copies",
            threats(2),
            3,
        ),
        text("Have at least one copy on a different storage media type", media, 3),
        person("Storage", 3, "Track the obsolescence of storage and media"),
        text(
            "Have at least three copies in geographic locations, each with a different disaster threat",
            threats(3),
            4,
        ),
        person("Storage", 4, "Maximize storage diversification to avoid single points of failure"),
        person(
            "Storage",
            4,
            "Have a plan and execution to address obsolescence of storage hardware, software, and media",
        ),
    ]
}

fn count(evidence: &Evidence, kinds: &[&str]) -> u64 {
    evidence.events.as_ref().map_or(0, |e| kinds.iter().map(|k| e.get(k).copied().unwrap_or(0)).sum())
}

/// The Integrity cells: manifests made and checked, checks at intervals, repair.
fn integrity(report: &AuditReport, evidence: &Evidence) -> Vec<Cell> {
    let damaged: u64 = report.places.iter().map(|p| p.damaged + p.divergent + p.missing).sum();
    let stale: u64 = report.places.iter().map(|p| p.stale + p.never_checked).sum();
    let oldest: Vec<String> = report
        .places
        .iter()
        .map(|p| {
            let oldest = p.oldest_check.as_deref().unwrap_or("none");
            match p.attested {
                0 => format!("{}: oldest check {oldest}", p.url),
                n => {
                    format!("{}: oldest check {oldest}, {n} copies resting on store-attested checks (not reads)", p.url)
                }
            }
        })
        .collect();
    let checks = count(evidence, &["fixity"]);
    let arrivals = count(evidence, &["deposit", "update", "copy-in", "mirror-in", "migrate-in"]);
    let intervals = match (&report.policy.max_fixity_age, stale) {
        (Some(_), 0) => Judgement::Met,
        (_, _) if checks > 0 => Judgement::Partial,
        _ => Judgement::Unmet,
    };
    let policy_age = report.policy.max_fixity_age.clone().unwrap_or_else(|| "none set".into());
    let interval_words =
        format!("max_fixity_age {policy_age}; {stale} copies stale or never checked; {}", oldest.join("; "));
    let unread = match evidence.sites_unread.is_empty() {
        true => String::new(),
        false => format!("; logs not read: {}", evidence.sites_unread.join(", ")),
    };
    let repair_words = format!(
        "measured by the last checks: {damaged} copies missing, damaged, divergent or forged (a change made since \
         a copy's last check is not known until it is checked again; {stale} copies stale or never checked); \
         repairs logged: {} here, {} at the sites{unread}",
        count(evidence, &["repair"]),
        evidence.site_repairs
    );
    let repaired = match (damaged, stale) {
        (0, 0) => Judgement::Met,
        (0, _) => Judgement::Partial,
        _ => Judgement::Unmet,
    };
    let (backed_up, backed_up_words) = integrity_apart(report, evidence);
    let i = |level: u8, text: &'static str, judgement: Judgement, words: String| {
        cell("Integrity", level, text, judgement, words)
    };
    vec![
        i(
            1,
            TEXT_VERIFY_PROVIDED,
            Judgement::Met,
            format!("a bag's sha256 manifest is checked before it is placed; {arrivals} arrivals logged"),
        ),
        i(1, TEXT_GENERATE, Judgement::Met, "every item is a BagIt bag with sha256 manifests made at deposit".into()),
        person("Integrity", 1, "Virus check all content; isolate content for virus check as needed"),
        i(
            2,
            TEXT_VERIFY_MOVING,
            Judgement::Met,
            "copy, mirror, migrate and replicate verify each item on arrival".into(),
        ),
        person("Integrity", 2, "Use write-blockers when working with original media"),
        i(2, TEXT_BACK_UP_INTEGRITY, backed_up, backed_up_words),
        i(3, TEXT_INTERVALS, intervals, interval_words),
        i(
            3,
            TEXT_DOCUMENT_CHECKS,
            reach(checks as usize, 0, 1),
            format!("{checks} fixity checks logged with their outcomes"),
        ),
        i(3, "Perform audit of integrity information on demand", Judgement::Met, "this audit".into()),
        person("Integrity", 4, "Verify integrity information in response to specific events or activities"),
        i(4, "Replace or repair corrupted content as necessary", repaired, repair_words),
    ]
}

/// Integrity information held apart from the content: the records of each
/// item's identity kept by complete sites at other localities than the
/// collection, or its signed witness. The manifests inside a bag travel with it
/// and are never apart from it.
fn integrity_apart(report: &AuditReport, evidence: &Evidence) -> (Judgement, String) {
    let here = report.places.first().map(|p| p.locality.as_str()).unwrap_or_default();
    let apart: Vec<&str> =
        complete_places(report).into_iter().filter(|p| p.locality != here).map(|p| p.url.as_str()).collect();
    let witness = if evidence.witness { "a signed witness of every identity is kept" } else { "no witness" };
    let words = format!(
        "measured: {} complete sites at other localities keep their own records of each item's identity ({}); {witness} \
         (the manifests inside each bag do not count: they travel with the content)",
        apart.len(),
        apart.join(", ")
    );
    let judgement = match (apart.is_empty(), evidence.witness) {
        (false, _) => Judgement::Met,
        (true, true) => Judgement::Partial,
        (true, false) => Judgement::Unmet,
    };
    (judgement, words)
}

const TEXT_VERIFY_PROVIDED: &str = "Verify integrity information if it has been provided with the content";
const TEXT_GENERATE: &str = "Generate integrity information if not provided with the content";
const TEXT_VERIFY_MOVING: &str = "Verify integrity information when moving or copying content";
const TEXT_BACK_UP_INTEGRITY: &str =
    "Back up integrity information and store copy in a separate location from the content";
const TEXT_INTERVALS: &str = "Verify integrity information of content at fixed intervals";
const TEXT_DOCUMENT_CHECKS: &str = "Document integrity information verification processes and outcomes";

const TEXT_DETERMINE_AGENTS: &str =
    "Determine the human and software agents that should be authorized to read, write, move, and delete content";
const TEXT_DOCUMENT_AGENTS: &str =
    "Document the human and software agents authorized to read, write, move, and delete content and apply these";
const TEXT_LOGS: &str = "Maintain logs and identify the human and software agents that performed actions on content";

/// The Control cells: who may act (a person's), and the log of who did.
fn control(evidence: &Evidence) -> Vec<Cell> {
    let key = match evidence.key_mode {
        Some(mode) if mode & 0o077 == 0 => (
            Judgement::Partial,
            format!(
                "the witness signing key is its owner's only (mode {mode:o}); who may write is the system's \
                 and the SSH keys' to document"
            ),
        ),
        Some(mode) => (Judgement::Unmet, format!("the witness signing key is readable by others (mode {mode:o})")),
        None => (Judgement::Person, "no signing key on this machine".into()),
    };
    let events: u64 = evidence.events.as_ref().map_or(0, |e| e.values().sum());
    let logs = match (&evidence.events, &evidence.broken_log) {
        (None, _) => (Judgement::Unmet, "the collection keeps no event log".into()),
        (Some(_), Some(broken)) => (Judgement::Unmet, format!("the log's chain is broken: {broken}")),
        (Some(_), None) => (
            Judgement::Met,
            format!("{events} events, each naming its agent (user, host, ibi version, key), in an intact hash chain"),
        ),
    };
    vec![
        person("Control", 1, TEXT_DETERMINE_AGENTS),
        cell("Control", 2, TEXT_DOCUMENT_AGENTS, key.0, key.1),
        cell("Control", 3, TEXT_LOGS, logs.0, logs.1),
        person("Control", 4, "Perform periodic review of actions/access logs"),
    ]
}

/// The Metadata cells: the inventory and where it is kept, and the actions recorded.
fn metadata(report: &AuditReport, evidence: &Evidence) -> Vec<Cell> {
    let inventory = match evidence.has_inventory {
        true => {
            (Judgement::Met, format!("an inventory of {} items; the sites are listed in collection.toml", report.items))
        }
        false => (Judgement::Unmet, "the collection keeps no inventory (run `ibi upgrade`)".into()),
    };
    let sites_with_copies = complete_places(report).len().saturating_sub(1);
    let actions = count(
        evidence,
        &[
            "deposit",
            "update",
            "withdraw",
            "copy-in",
            "mirror-in",
            "migrate-in",
            "migrate-out",
            "repair",
            "retire",
            "handover",
            "fixity",
        ],
    );
    vec![
        cell(
            "Metadata",
            1,
            "Create inventory of content, also documenting current storage locations",
            inventory.0,
            inventory.1,
        ),
        cell(
            "Metadata",
            1,
            "Backup inventory and store at least one copy separately from content",
            reach(sites_with_copies, 0, 1),
            format!("{sites_with_copies} sites keep a complete copy with its own inventory"),
        ),
        person("Metadata", 2, "Store enough metadata to know what the content is"),
        person("Metadata", 3, "Determine what metadata standards to apply"),
        person("Metadata", 3, "Find and fill gaps in your metadata to meet those standards"),
        cell(
            "Metadata",
            4,
            "Record preservation actions associated with content and when those actions occur",
            reach(actions as usize, 0, 1),
            format!("{actions} dated actions in the event log (`ibi log NAME --premis` writes PREMIS 3)"),
        ),
        person("Metadata", 4, "Implement metadata standards chosen"),
    ]
}

/// Every cell, area by area, level by level.
pub fn cells(report: &AuditReport, evidence: &Evidence) -> Vec<Cell> {
    let mut all = storage(report);
    all.extend(integrity(report, evidence));
    all.extend(control(evidence));
    all.extend(metadata(report, evidence));
    all
}
