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
use crate::store::Store;

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
}

/// Reads the evidence of `store`: one pass over its log, and its key file.
pub fn evidence(store: &dyn Store) -> Result<Evidence> {
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
    Ok(Evidence {
        events: keeps.then_some(counts),
        broken_log: check.and_then(|c| c.broken),
        key_mode,
        has_inventory: store.has_inventory(),
    })
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

/// The Storage cells: copies, zones (declared disaster threats) and media.
fn storage(report: &AuditReport) -> Vec<Cell> {
    let complete = complete_places(report);
    let all: Vec<&PlaceFacts> = report.places.iter().collect();
    let zones = (distinct(&complete, |p| p.zone.as_str()).len(), distinct(&all, |p| p.zone.as_str()).len());
    let media = (distinct(&complete, |p| p.media.as_str()).len(), distinct(&all, |p| p.media.as_str()).len());
    let evidence = format!(
        "{} of {} places hold a complete copy of all {} items: {}",
        complete.len(),
        all.len(),
        report.items,
        all.iter().map(|p| format!("{} (zone {}, {})", p.url, p.zone, p.media)).collect::<Vec<_>>().join(", ")
    );
    let copies_3 = reach(complete.len(), all.len(), 3);
    let three_two_zones = match (copies_3, zones.0 >= 2) {
        (Judgement::Met, true) => Judgement::Met,
        (Judgement::Unmet, _) => Judgement::Unmet,
        _ => Judgement::Partial,
    };
    let text = |t: &'static str, j: Judgement, level: u8| cell("Storage", level, t, j, evidence.clone());
    vec![
        text("Have two complete copies in separate locations", reach(complete.len(), all.len(), 2), 1),
        text("Document all storage media where content is stored", Judgement::Met, 1),
        person("Storage", 1, "Put content into stable storage"),
        text("Have three complete copies with at least one copy in a separate geographic location", three_two_zones, 2),
        person(
            "Storage",
            2,
            "Document storage and storage media indicating the resources and dependencies they require to function",
        ),
        text(
            "Have at least one copy in a geographic location with a different disaster threat than the other copies",
            reach(zones.0, zones.1, 2),
            3,
        ),
        text("Have at least one copy on a different storage media type", reach(media.0, media.1, 2), 3),
        person("Storage", 3, "Track the obsolescence of storage and media"),
        text(
            "Have at least three copies in geographic locations, each with a different disaster threat",
            reach(zones.0, zones.1, 3),
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
    let damaged: u64 = report.places.iter().map(|p| p.damaged + p.divergent).sum();
    let stale: u64 = report.places.iter().map(|p| p.stale + p.never_checked).sum();
    let oldest: Vec<String> = report
        .places
        .iter()
        .map(|p| format!("{}: oldest check {}", p.url, p.oldest_check.as_deref().unwrap_or("none")))
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
    let repair_words = format!(
        "{damaged} damaged or divergent copies now (`ibi audit --repair` restores them by majority); {} repairs logged",
        count(evidence, &["repair"])
    );
    let repaired = if damaged == 0 { Judgement::Met } else { Judgement::Unmet };
    let backed_up = reach(complete_places(report).len(), report.places.len(), 2);
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
        i(2, TEXT_BACK_UP_INTEGRITY, backed_up, "the manifests travel inside each bag to every site".into()),
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
