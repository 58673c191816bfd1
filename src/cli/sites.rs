//! `ibi site`, `ibi replicate` and `ibi audit`: the command-line faces of
//! `ops::sites` and `ops::audit` (the copy policy across sites).

use std::path::Path;

use anyhow::Result;
use ibi::ops::audit::{repair_toward_authority, AuditReport};
use ibi::ops::mirror::MirrorOptions;
use ibi::ops::repair::RepairOptions;
use ibi::ops::sites::{self, SiteChange};
use ibi::store::config::{CollectionConfig, Policy, SeaweedFs, Site};
use ibi::store::{Connect, LockWait};
use serde_json::json;

use super::args::{GlobalArgs, SiteCommand, TransferFlags};
use super::printer::Printer;
use super::Outcome;

pub fn site(global: GlobalArgs, command: &SiteCommand) -> Result<Outcome> {
    let printer = Printer::new(global);
    let connect = Connect::from_env();
    let (root, change) = match command {
        SiteCommand::List { root } => {
            let config = sites::configured(super::open(root)?.as_ref())?;
            list(&printer, &config);
            return Ok(Outcome::Success);
        }
        SiteCommand::Add { root, url, zone, media, public_url, seaweedfs_master, seaweedfs_filer } => {
            let seaweedfs = cluster(seaweedfs_master, seaweedfs_filer);
            let (url, zone, media, public_url) = (url.clone(), zone.clone(), *media, public_url.clone());
            let site = Site { url, zone, media, public_url, seaweedfs };
            (root, SiteChange::Add(site))
        }
        SiteCommand::Remove { root, url } => (root, SiteChange::Remove(url.clone())),
        SiteCommand::Here { root, zone, media, seaweedfs_master, seaweedfs_filer } => {
            let seaweedfs = cluster(seaweedfs_master, seaweedfs_filer);
            (root, SiteChange::Here { zone: zone.clone(), media: *media, seaweedfs })
        }
        SiteCommand::Policy { root, copies, zones, max_fixity_age, max_read_age } => {
            let (max_fixity_age, max_read_age) = (max_fixity_age.clone(), max_read_age.clone());
            let policy = Policy { copies: *copies, zones: *zones, max_fixity_age, max_read_age };
            (root, SiteChange::Policy(policy))
        }
    };
    let config = sites::change(super::open(root)?.as_ref(), change, &connect)?;
    list(&printer, &config);
    Ok(Outcome::Success)
}

/// A SeaweedFS cluster named by its master and filer (clap asks for both or neither).
fn cluster(master: &Option<String>, filer: &Option<String>) -> Option<SeaweedFs> {
    match (master, filer) {
        (Some(master), Some(filer)) => Some(SeaweedFs { master: master.clone(), filer: filer.clone() }),
        _ => None,
    }
}

fn list(printer: &Printer, config: &CollectionConfig) {
    let here = config.zone.as_deref().unwrap_or("-");
    let media = config.media.unwrap_or_default().as_str();
    if printer.json() {
        printer.line(
            &json!({ "zone": config.zone, "media": media, "seaweedfs": config.seaweedfs, "sites": config.sites,
                "policy": config.policy })
            .to_string(),
        );
        return;
    }
    let cluster = config.seaweedfs.as_ref().map(|c| format!("\tseaweedfs {} {}", c.master, c.filer));
    printer.line(&format!("here\tzone {here}\tmedia {media}{}", cluster.unwrap_or_default()));
    for site in &config.sites {
        let public = site.public_url.as_deref().map(|u| format!("\tpublic {u}")).unwrap_or_default();
        let cluster = site.seaweedfs.as_ref().map(|c| format!("\tseaweedfs {} {}", c.master, c.filer));
        let (url, zone, media) = (&site.url, &site.zone, site.media.as_str());
        printer.line(&format!("{url}\tzone {zone}\tmedia {media}{public}{}", cluster.unwrap_or_default()));
    }
    if let Some(policy) = &config.policy {
        let age = policy.max_fixity_age.as_deref().map(|a| format!(", fixity within {a}")).unwrap_or_default();
        let read = policy.max_read_age.as_deref().map(|a| format!(", bytes read within {a}")).unwrap_or_default();
        printer.line(&format!("policy\t{} copies in {} zones{age}{read}", policy.copies, policy.zones));
    }
}

pub fn replicate(global: GlobalArgs, root: &Path, flags: &TransferFlags) -> Result<Outcome> {
    let store = super::open(root)?;
    let config = sites::configured(store.as_ref())?;
    let printer = Printer::new(global);
    let wait = flags.wait.map_or(LockWait::No, |secs| LockWait::For(secs.0));
    let options = MirrorOptions { dry_run: flags.dry_run, wait, checksum: false };
    let runs = sites::replicate(store.as_ref(), &config, &options, &Connect::from_env(), &printer);
    let mut outcome = Outcome::Success;
    for run in &runs {
        let url = &run.site.url;
        match &run.result {
            Ok(s) => {
                let text =
                    format!("replicate {url}: copied {}, replaced {}, skipped {}", s.copied, s.replaced, s.skipped);
                let fields = json!({ "site": url, "copied": s.copied, "replaced": s.replaced, "skipped": s.skipped, "problems": s.problems });
                printer.summary(&text, fields);
                if s.problems > 0 {
                    outcome = outcome.worse(Outcome::Problems);
                }
                outcome = outcome.worse(carried(&printer, url, run.checkpoint.as_ref()));
            }
            Err(e) => {
                // On stdout too: under -q (cron) a failed site must still be told.
                if !printer.json() {
                    printer.line(&format!("{url}\tnot replicated: {e}"));
                }
                printer
                    .summary(&format!("replicate {url}: failed: {e}"), json!({ "site": url, "error": e.to_string() }));
                outcome = outcome.worse(Outcome::Failed(e.class()));
            }
        }
    }
    if config.sites.is_empty() {
        printer.summary("replicate: the collection has no sites (`ibi site add` adds one)", json!({ "sites": 0 }));
    }
    Ok(outcome)
}

/// Tells what carrying the checkpoint to a site did; a refusal is a problem
/// (on stdout, under -q too): the site found the log cut short or rewritten.
fn carried(
    printer: &Printer,
    url: &str,
    checkpoint: Option<&std::result::Result<ibi::ops::checkpoints::Carried, ibi::Error>>,
) -> Outcome {
    use ibi::ops::checkpoints::Carried;
    match checkpoint {
        None => Outcome::Success,
        Some(Ok(Carried::Cosigned(size))) => {
            printer.note(&format!("replicate {url}: it cosigned the log's checkpoint at {size} events"));
            Outcome::Success
        }
        Some(Ok(Carried::Skipped(why))) => {
            printer.note(&format!("replicate {url}: no checkpoint carried: {why}"));
            Outcome::Success
        }
        Some(Err(e)) => {
            if !printer.json() {
                printer.line(&format!("{url}\tcheckpoint not cosigned: {e}"));
            }
            printer.event("checkpoint", json!({ "site": url, "error": e.to_string() }));
            Outcome::Failed(e.class())
        }
    }
}

pub fn audit(global: GlobalArgs, root: &Path, repair: bool, ndsa: bool, placement: bool) -> Result<Outcome> {
    let store = super::open(root)?;
    let config = sites::configured(store.as_ref())?;
    let printer = Printer::new(global);
    let connect = Connect::from_env();
    let report = match repair {
        false => ibi::ops::audit::audit(store.as_ref(), &config, &connect, placement)?,
        true => {
            let options = RepairOptions { dry_run: false, wait: LockWait::No };
            let (done, after) =
                repair_toward_authority(store.as_ref(), &config, &connect, options, placement, &printer)?;
            for name in &done.undecided {
                printer.line(&format!("{name}\tnot repaired: no copy the collection can vouch for; a person decides"));
            }
            for failed in &done.failed {
                printer.line(&format!("repair failed at {failed}"));
            }
            printer.note(&format!("audit --repair: {} copies restored", done.repaired));
            after
        }
    };
    print_audit(&printer, &report);
    if ndsa {
        let evidence = ibi::ops::ndsa::evidence(store.as_ref(), &config, &connect)?;
        print_ndsa(&printer, &ibi::ops::ndsa::cells(&report, &evidence));
    }
    Ok(if report.meets_policy() { Outcome::Success } else { Outcome::Problems })
}

/// The NDSA cells, one a line (`AREA LEVEL JUDGEMENT TEXT — EVIDENCE`), or as JSON.
fn print_ndsa(printer: &Printer, cells: &[ibi::ops::ndsa::Cell]) {
    for cell in cells {
        match printer.json() {
            true => printer.line(&json!({ "event": "ndsa", "cell": cell }).to_string()),
            false => printer.line(&format!(
                "NDSA {} {}\t{}\t{} — {}",
                cell.area,
                cell.level,
                cell.judgement.as_str(),
                cell.text,
                cell.evidence
            )),
        }
    }
}

/// What a reachable place's counts rest on beyond reads of this run: store-
/// attested checks, and identities this machine read before (its pages, the
/// listing showing each tagmanifest unchanged since).
fn evidence_of(place: &ibi::ops::audit::PlaceFacts) -> String {
    let mut said = String::new();
    if place.attested > 0 {
        said += &format!("; {} passed store-attested checks (the store's checksums, not a read)", place.attested);
    }
    if place.from_pages > 0 {
        said += &format!(
            "; {} identities from what this machine read before, the listing showing each tagmanifest unchanged since",
            place.from_pages
        );
    }
    said
}

fn print_audit(printer: &Printer, report: &AuditReport) {
    if printer.json() {
        for shortfall in &report.shortfalls {
            printer.line(&json!({ "event": "shortfall", "item": shortfall }).to_string());
        }
        for stray in &report.strays {
            printer.line(&json!({ "event": "stray", "item": stray }).to_string());
        }
        for problem in &report.log_problems {
            printer.line(&json!({ "event": "log", "problem": problem }).to_string());
        }
        printer.line(
            &json!({ "event": "summary", "audit": report.places, "items": report.items,
            "policy": report.policy, "short": report.short, "known_bad": report.known_bad,
            "short_named": report.shortfalls.len() })
            .to_string(),
        );
        return;
    }
    for shortfall in &report.shortfalls {
        printer.line(&format!("{}\t{}", shortfall.name, shortfall.reasons.join("; ")));
    }
    let unnamed = report.listed - report.shortfalls.len() as u64;
    if unnamed > 0 {
        printer.line(&format!(
            "... and {unnamed} more item(s) short of the policy or with a bad copy, not named (the first {} are)",
            report.shortfalls.len()
        ));
    }
    for stray in &report.strays {
        printer.line(&format!(
            "{}\t{}: held there, but this collection has no record of it (planted there, or its record lost \
             here): a person decides",
            stray.name, stray.place
        ));
    }
    for problem in &report.log_problems {
        printer.line(&format!("log\t{problem}"));
    }
    // An unreachable site is a problem: told on stdout, as the items are, even under -q.
    for place in report.places.iter().filter(|p| p.unreachable.is_some()) {
        printer.line(&format!("{}\tunreachable: {}", place.url, place.unreachable.as_deref().unwrap_or_default()));
    }
    // What `--placement` asked for, even under -q.
    for place in &report.places {
        if let Some(facts) = &place.placement {
            printer.line(&format!("{}\t{}", place.url, ibi::ops::placement::describe(facts)));
        }
    }
    for place in &report.places {
        let state = match &place.unreachable {
            Some(why) => format!("unreachable: {why}"),
            None => format!(
                "{} held, {} missing, {} divergent, {} damaged, {} stale, {} never checked, {} unknown here, oldest check {}",
                place.held,
                place.missing,
                place.divergent,
                place.damaged,
                place.stale,
                place.never_checked,
                place.strays,
                place.oldest_check.as_deref().unwrap_or("-")
            ) + &evidence_of(place),
        };
        printer.note(&format!("{} (zone {}, {}): {state}", place.url, place.zone, place.media));
    }
    let p = &report.policy;
    printer.note(&format!(
        "audit: {} item(s), {} short of the policy ({} copies in {} zones), {} with a copy known bad",
        report.items, report.short, p.copies, p.zones, report.known_bad
    ));
}
