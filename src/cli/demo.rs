//! `ibi demo [DIR]`: builds sample collections from fixtures bundled in the
//! binary and walks through init, deposit, list, resolve by IBIp, verify
//! (catching and repairing a flipped byte), mirror and migrate, narrating
//! each step.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ibi::id::minter::SystemClock;
use ibi::ops::copy::{transfer, TransferKind, TransferOptions};
use ibi::ops::deposit::{deposit, DepositOptions};
use ibi::ops::list::{list, DateRange};
use ibi::ops::mirror::{mirror, MirrorOptions};
use ibi::ops::verify::verify;
use ibi::ops::Silent;
use ibi::store::LockWait;
use ibi::store::Store;
use ibi::RepositoryName;
use ibi::{Granularity, Subsystem};

use super::args::GlobalArgs;
use super::printer::Printer;
use super::Outcome;

/// The bundled samples: (path under the demo's source folder, content).
const SAMPLES: &[(&str, &str)] = &[
    ("report-2009/README.txt", include_str!("../../fixtures/demo/report-2009/README.txt")),
    ("report-2009/measurements.csv", include_str!("../../fixtures/demo/report-2009/measurements.csv")),
    ("report-2009/figure 1 – 100% rain.txt", include_str!("../../fixtures/demo/report-2009/figure 1 – 100% rain.txt")),
    ("field-notes/notes.md", include_str!("../../fixtures/demo/field-notes/notes.md")),
];

fn demo_dir(dir: Option<&Path>) -> Result<PathBuf> {
    match dir {
        Some(d) if d.exists() && fs::read_dir(d)?.next().is_some() => {
            anyhow::bail!(ibi::Error::Invalid {
                what: "demo folder".into(),
                problem: format!("{} is not empty", d.display())
            })
        }
        Some(d) => Ok(d.to_path_buf()),
        None => Ok(tempfile::Builder::new().prefix("ibi-demo-").tempdir()?.keep()),
    }
}

fn say(printer: &Printer, step: &str) {
    printer.line(&format!("\n== {step}"));
}

/// Writes the bundled samples under `dir/samples`.
fn write_samples(dir: &Path) -> Result<PathBuf> {
    let sources = dir.join("samples");
    for (path, content) in SAMPLES {
        let file = sources.join(path);
        fs::create_dir_all(file.parent().context("sample path has a parent")?)?;
        fs::write(&file, content)?;
    }
    Ok(sources)
}

/// A new local collection of the demo.
fn init_local(root: &Path, subsystem: Subsystem, organisation: Option<String>) -> Result<Box<dyn Store>> {
    let connect = ibi::store::Connect::from_env();
    Ok(ibi::store::init(root, &connect, subsystem, organisation, Default::default())?)
}

/// A new local collection of A's subsystem that does not mint (`init --like`).
fn init_like(printer: &Printer, root: &Path, a: &dyn Store) -> Result<Box<dyn Store>> {
    say(printer, &format!("ibi init {} --like {}   (a copy that does not mint)", root.display(), a.location()));
    let connect = ibi::store::Connect::from_env();
    let follows = Some(ibi::ops::minting::peer_to_follow(a)?);
    let options = ibi::store::InitOptions { follows, ..Default::default() };
    Ok(ibi::store::init(root, &connect, a.subsystem().clone(), None, options)?)
}

/// Where an item of a local collection is: its name's four levels under the root.
fn item_path(collection: &dyn Store, name: &RepositoryName) -> std::path::PathBuf {
    collection.local_root().unwrap_or(Path::new(".")).join(name.to_string())
}

fn print_list(printer: &Printer, collection: &dyn Store) -> Result<()> {
    for entry in list(collection, DateRange::default(), false) {
        let (name, ibip, _, _) = entry?;
        printer.line(&ibi::Minted { name, ibip }.to_string());
    }
    Ok(())
}

/// An earlier demo's collection still minting the demo's subsystem on this
/// machine is retired (`ibi retire`: it keeps its items and mints no more), so
/// that this demo's collection may mint; the machine's minter state goes on
/// from where it was, so no name is handed out twice. A collection of the
/// subsystem that is not a demo's is left alone, and init refuses as ever.
fn retire_earlier_demo(printer: &Printer, subsystem: &Subsystem) -> Result<()> {
    let Some(dir) = ibi::store::local::minter::machine_dir() else { return Ok(()) };
    let Some(entry) = ibi::store::registry::holder(&dir, subsystem)? else { return Ok(()) };
    let Ok(earlier) = super::open(Path::new(&entry.location)) else { return Ok(()) };
    if earlier.organisation() != Some("ibi demo") {
        return Ok(());
    }
    ibi::ops::minting::retire(earlier.as_ref(), LockWait::No)?;
    printer.line(&format!("(retired the earlier demo's {}: it keeps its items and mints no more)", entry.location));
    Ok(())
}

/// init, deposit --each, list and resolve by IBIp; returns the collection and the resolved item.
fn deposit_steps(printer: &Printer, dir: &Path, sources: &Path) -> Result<(Box<dyn Store>, RepositoryName)> {
    let root = dir.join("collection-a");
    say(printer, &format!("ibi init {} --host demo-a.ibi.example.org --ip 192.0.2.10", root.display()));
    let subsystem =
        Subsystem::new("demo-a.ibi.example.org", 80, Some("192.0.2.10".parse()?), 800, Granularity::SECOND)?;
    retire_earlier_demo(printer, &subsystem)?;
    let collection = init_local(&root, subsystem, Some("ibi demo".into()))?;
    printer.line(&format!("names will start with {}/", collection.subsystem().prefix()));

    say(printer, "ibi deposit --each (one item per folder; the minter may wait for the next free second)");
    let paths = vec![sources.join("report-2009"), sources.join("field-notes")];
    let options = DepositOptions { each: true, ..DepositOptions::default() };
    let mut minted = Vec::new();
    deposit(collection.as_ref(), &paths, &options, &SystemClock, &Silent, &mut |d| {
        printer.line(&d.minted.to_string());
        minted.push(d.minted.clone());
    })?;

    say(printer, "ibi list");
    print_list(printer, collection.as_ref())?;

    let ibip = minted[0].ibip.context("the demo collection has an IP")?.to_string().to_lowercase();
    say(printer, &format!("ibi resolve {} {ibip}   (an IBIp, in lower case)", root.display()));
    let name = ibi::store::resolve(collection.as_ref(), &ibip)?;
    printer.line(&item_path(collection.as_ref(), &name).display().to_string());
    Ok((collection, name))
}

/// verify the new collection.
fn verify_steps(printer: &Printer, collection: &dyn Store) -> Result<u64> {
    say(printer, "ibi verify");
    let summary = verify(collection, &[], printer)?;
    printer.line(&format!("{} items, {} files, {} problems", summary.items, summary.files, summary.problems));
    Ok(summary.problems)
}

/// Flips one bit of an item in the mirror, shows verify catching it, and repairs it
/// from the source with `mirror --checksum`.
fn repair_steps(printer: &Printer, a: &dyn Store, b: &dyn Store, item: &RepositoryName) -> Result<u64> {
    let victim = item_path(b, item).join("data/measurements.csv");
    let mut damaged = fs::read(&victim)?;
    damaged[10] ^= 0x01;
    fs::write(&victim, &damaged)?;
    say(printer, &format!("flip one bit of {}, then ibi verify {}", victim.display(), b.location()));
    let summary = verify(b, &[], printer)?;
    printer.line(&format!("{} problem(s) found", summary.problems));
    say(printer, &format!("ibi mirror --checksum {} {}   (repairs from the source)", a.location(), b.location()));
    let options = MirrorOptions { dry_run: false, wait: LockWait::No, checksum: true };
    let s = mirror(a, b, &options, printer)?;
    printer.line(&format!("replaced {}", s.replaced));
    let summary = verify(b, &[], &Silent)?;
    printer.line(&format!("after the repair: {} problems", summary.problems));
    Ok(summary.problems)
}

/// mirror A to B twice (the second run is a no-op), then migrate B to C.
fn transfer_steps(printer: &Printer, dir: &Path, a: &dyn Store, item: &RepositoryName) -> Result<u64> {
    let mirror_root = dir.join("collection-b");
    let b = init_like(printer, &mirror_root, a)?;
    say(
        printer,
        &format!("ibi mirror {} {}   (twice: the second run has nothing to do)", a.location(), mirror_root.display()),
    );
    let options = MirrorOptions { dry_run: false, wait: LockWait::No, checksum: false };
    for _ in 0..2 {
        let s = mirror(a, b.as_ref(), &options, &Silent)?;
        printer.line(&format!("copied {}, skipped {}, {}", s.copied, s.skipped, printer.size(s.bytes)));
    }
    let repaired = repair_steps(printer, a, b.as_ref(), item)?;
    let new_root = dir.join("collection-c");
    let c = init_like(printer, &new_root, a)?;
    say(
        printer,
        &format!(
            "ibi migrate {} {}   (copy, re-verify, then remove from the source)",
            mirror_root.display(),
            new_root.display()
        ),
    );
    let options = TransferOptions { dry_run: false, wait: LockWait::No, forward_url: None };
    let s = transfer(TransferKind::Migrate, b.as_ref(), c.as_ref(), &[], options, &Silent)?;
    printer.line(&format!("migrated {}; {} now holds:", s.migrated, new_root.display()));
    print_list(printer, c.as_ref())?;
    let summary = verify(c.as_ref(), &[], &Silent)?;
    printer.line(&format!("verify {}: {} items, {} problems", new_root.display(), summary.items, summary.problems));
    Ok(summary.problems + repaired)
}

pub fn run(global: GlobalArgs, dir: Option<&Path>) -> Result<Outcome> {
    let printer = Printer::new(global);
    let dir = demo_dir(dir)?;
    let sources = write_samples(&dir)?;
    let (collection, item) = deposit_steps(&printer, &dir, &sources)?;
    let collection = collection.as_ref();
    let problems = verify_steps(&printer, collection)? + transfer_steps(&printer, &dir, collection, &item)?;
    say(&printer, "done");
    printer.line(&format!("everything is in {}", dir.display()));
    Ok(if problems == 0 { Outcome::Success } else { Outcome::Problems })
}
