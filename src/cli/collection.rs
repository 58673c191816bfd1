//! The collection commands: `init`, `deposit`, `verify`, `list`, `resolve`,
//! `watch`, `retire` and `handover`. Each opens the collection, calls the library operation with
//! the `Printer` as its reporter, prints results and a summary, and returns
//! the outcome that selects the exit code.

use std::path::Path;
use std::sync::atomic::Ordering;

use anyhow::Result;
use ibi::id::minter::SystemClock;
use ibi::ops::deposit::{deposit as deposit_items, DepositOptions, Deposited};
use ibi::ops::list::{list_marked, DateRange, ListEntry};
use ibi::ops::minting::{HandedOver, HandoverOptions};
use ibi::ops::verify::verify_confirming;
use ibi::ops::watch::{watch as watch_inbox, EntryOutcome, WatchOptions};
use ibi::Minted;
use serde_json::json;

use super::args::{DepositArgs, GlobalArgs, HandoverArgs, InitArgs, ListArgs, VerifyArgs, WatchArgs};
use super::ident::subsystem_from_args;
use super::printer::Printer;
use super::Outcome;

pub fn init(global: GlobalArgs, args: &InitArgs) -> Result<Outcome> {
    let connect = ibi::store::Connect::from_env();
    let mut options = ibi::store::InitOptions {
        unsafe_no_conditional_writes: args.unsafe_no_conditional_writes,
        ..Default::default()
    };
    let (subsystem, org) = match &args.like {
        Some(other) => {
            let other = super::open(other)?;
            options.follows = Some(ibi::ops::minting::peer_to_follow(other.as_ref())?);
            let s = other.subsystem();
            let ip = args.subsystem.ip.or(s.ip);
            let subsystem = ibi::Subsystem::new(&s.host, s.port, ip, s.ibip_port, s.granularity)?;
            (subsystem, args.org.clone().or_else(|| other.organisation().map(String::from)))
        }
        None => (subsystem_from_args(&args.subsystem)?, args.org.clone()),
    };
    let collection = ibi::store::init(&args.root, &connect, subsystem, org, options.clone())?;
    let printer = Printer::new(global);
    let prefix = collection.subsystem().prefix().to_string();
    let (who, follows) = match &options.follows {
        Some(peer) => (format!("it follows {} ({}), which mints them", peer.location, peer.id), Some(peer)),
        None => ("it mints them".to_string(), None),
    };
    let sharing = match (&options.follows, ibi::store::local::minter::machine_dir()) {
        (None, Some(dir)) => {
            ibi::store::registry::refuse_shared_ibip(&dir, collection.subsystem(), &collection.location())?
        }
        _ => Vec::new(),
    };
    let who = match sharing.is_empty() {
        true => who,
        false => format!(
            "{who}; its IBIp prefix is shared with {}, through one distributor on this machine, so no two of their \
             items get one IBIp",
            sharing.join(", ")
        ),
    };
    printer.summary(
        &format!("created collection {} (names {prefix}/…); {who}", args.root.display()),
        json!({"root": args.root, "prefix": prefix, "mints": follows.is_none(),
               "follows": follows.map(|p| json!({"id": p.id, "location": p.location}))}),
    );
    Ok(Outcome::Success)
}

fn print_minted(printer: &Printer, minted: &Minted) {
    if printer.json() {
        let ibip = minted.ibip.map(|i| i.to_string());
        printer.event("deposited", json!({"name": minted.name.to_string(), "ibip": ibip}));
    } else {
        printer.line(&minted.to_string());
    }
}

pub fn deposit(global: GlobalArgs, args: &DepositArgs) -> Result<Outcome> {
    let collection = super::open(&args.root)?;
    let collection = collection.as_ref();
    let printer = Printer::new(global);
    if args.ocfl {
        let options = ibi::ops::ocfl::import::ImportOptions { take_mutable_head: args.take_mutable_head };
        return deposit_ocfl(&printer, collection, &args.paths, options);
    }
    let options = DepositOptions {
        each: args.each,
        bag: args.bag,
        move_sources: args.move_sources,
        follow_symlinks: args.follow_symlinks,
        duplicate: args.duplicate,
        meta: args.meta.clone(),
    };
    let mut done: Vec<Deposited> = Vec::new();
    let mut on_durable = |d: &Deposited| {
        print_minted(&printer, &d.minted);
        done.push(d.clone());
    };
    let result = deposit_items(collection, &args.paths, &options, &SystemClock, &printer, &mut on_durable);
    if super::stdout_failure().is_some() || (result.is_err() && !done.is_empty()) {
        // The names must not be lost with stdout, nor hidden by a later failure.
        for d in &done {
            super::stderr_line(&format!("ibi: deposited {}", d.minted));
        }
    }
    result?;
    let fresh = done.iter().filter(|d| !d.already).count();
    let seconds = printer.seconds();
    printer.summary(
        &format!("deposited {fresh} item(s), {} already held, in {seconds:.2} s", done.len() - fresh),
        json!({"deposited": fresh, "already": done.len() - fresh, "seconds": seconds}),
    );
    Ok(Outcome::Success)
}

pub fn verify(global: GlobalArgs, args: &VerifyArgs) -> Result<Outcome> {
    let collection = super::open(&args.root)?;
    let collection = collection.as_ref();
    let printer = Printer::new(global);
    if args.age {
        return fixity_age(collection, args.cycle, &printer);
    }
    if args.attested {
        return attested(collection, &printer);
    }
    let part = args.part.as_deref().map(ibi::ops::parts::Part::parse).transpose()?;
    let (mut s, confirmed) = match (args.budget, part) {
        (Some(budget), _) => ibi::ops::fixity::verify_rolling(collection, budget, &printer)?,
        (None, Some(part)) => {
            let names = part.names_in(collection)?;
            printer.note(&format!("part {}/{}: {} item(s) of the collection", part.k, part.n, names.len()));
            if names.is_empty() {
                return Ok(verified_summary(&printer, "verified ", &Default::default()));
            }
            verify_confirming(collection, &names, &printer)?
        }
        (None, None) => verify_confirming(collection, &args.names, &printer)?,
    };
    if args.names.is_empty() {
        s.problems += witness_after_verify(collection, &confirmed, &printer);
    }
    let label = if args.sites { format!("verified {}: ", collection.location()) } else { "verified ".into() };
    let mut outcome = verified_summary(&printer, &label, &s);
    if args.sites {
        outcome = outcome.worse(verify_sites(collection, args.budget, &printer)?);
    }
    Ok(outcome)
}

/// `verify --attested`: the store's checksums against the manifests.
fn attested(collection: &dyn ibi::store::Store, printer: &Printer) -> Result<Outcome> {
    let s = ibi::ops::attest::attest(collection, printer)?;
    printer.summary(
        &format!(
            "attested {} item(s) in {:.2} s: {} by the store's checksums (bytes not read), {} read whole (no checksum \
             kept); {} problem(s)",
            s.items,
            printer.seconds(),
            s.attested,
            s.read,
            s.problems
        ),
        json!({"items": s.items, "attested": s.attested, "read": s.read, "problems": s.problems}),
    );
    Ok(if s.problems == 0 { Outcome::Success } else { Outcome::Problems })
}

/// The summary of one verify, and its outcome.
fn verified_summary(printer: &Printer, label: &str, s: &ibi::ops::verify::VerifySummary) -> Outcome {
    let seconds = printer.seconds();
    printer.summary(
        &format!(
            "{label}{} item(s), {} file(s), {} in {seconds:.2} s: {} problem(s)",
            s.items,
            s.files,
            printer.size(s.bytes),
            s.problems
        ),
        json!({"items": s.items, "files": s.files, "bytes": s.bytes, "problems": s.problems, "seconds": seconds}),
    );
    if s.problems == 0 {
        Outcome::Success
    } else {
        Outcome::Problems
    }
}

/// `verify --sites`: each site in turn, rolling with `budget` or whole; a site
/// that cannot be opened or read is told (on stdout too, for cron) and the
/// others still go ahead.
fn verify_sites(
    collection: &dyn ibi::store::Store,
    budget: Option<ibi::ops::fixity::Budget>,
    printer: &Printer,
) -> Result<Outcome> {
    let config = ibi::ops::sites::configured(collection)?;
    let connect = ibi::store::Connect::from_env();
    let mut outcome = Outcome::Success;
    for site in &config.sites {
        let run = ibi::store::open(Path::new(&site.url), &connect).and_then(|opened| match budget {
            Some(budget) => ibi::ops::fixity::verify_rolling(opened.as_ref(), budget, printer).map(|(s, _)| s),
            None => ibi::ops::verify::verify(opened.as_ref(), &[], printer),
        });
        match run {
            Ok(s) => outcome = outcome.worse(verified_summary(printer, &format!("verified {}: ", site.url), &s)),
            Err(e) => {
                if !printer.json() {
                    printer.line(&format!("{}\tnot verified: {e}", site.url));
                }
                printer.summary(
                    &format!("verify {}: failed: {e}", site.url),
                    json!({ "site": site.url, "error": e.to_string() }),
                );
                outcome = outcome.worse(Outcome::Failed(e.class()));
            }
        }
    }
    Ok(outcome)
}

/// `verify --age`: the oldest successful check, and every item not found whole within the cycle.
fn fixity_age(collection: &dyn ibi::store::Store, cycle_days: u32, printer: &Printer) -> Result<Outcome> {
    let cycle = std::time::Duration::from_secs(u64::from(cycle_days) * 86_400);
    let now = ibi::id::Timestamp::now();
    let age = ibi::ops::fixity::fixity_age(collection, cycle, now, printer)?;
    let oldest = age.oldest.as_ref().map(|(date, _)| date.clone());
    let days = age.oldest.as_ref().and_then(|(date, _)| {
        let then = chrono::DateTime::parse_from_rfc3339(date).ok()?;
        Some((chrono::Utc::now() - then.with_timezone(&chrono::Utc)).num_days())
    });
    let said = match (&oldest, days) {
        (Some(date), Some(days)) => format!("the oldest successful check is {days} day(s) old ({date})"),
        _ => "no item was ever found whole".into(),
    };
    // What the checks rest on: reads of the bytes, or the store's own checksums.
    let kinds = match age.attested {
        0 => "every check within the cycle read the bytes".to_string(),
        n => format!(
            "{n} of them rest on store-attested checks (the store's SHA-256 of each file, kept from its upload; \
             they catch a replaced object, not a bit flip in the store's replica), the rest on reads"
        ),
    };
    printer.summary(
        &format!(
            "fixity of {} item(s): {said}; {} not found whole within the {cycle_days}-day cycle; {kinds}",
            age.items, age.stale
        ),
        json!({"items": age.items, "oldest_check": oldest, "oldest_days": days, "stale": age.stale,
            "cycle_days": cycle_days, "attested": age.attested}),
    );
    Ok(if age.stale == 0 { Outcome::Success } else { Outcome::Problems })
}

/// How many bytes of lines `list` gathers before writing them.
const LIST_BLOCK: usize = 64 * 1024;

pub fn list(global: GlobalArgs, args: &ListArgs) -> Result<Outcome> {
    use std::fmt::Write as _;
    let collection = super::open(&args.root)?;
    let collection = collection.as_ref();
    let printer = Printer::new(global);
    let range = DateRange { since: args.since, until: args.until };
    let mut degraded = 0u64;
    let mut outcome = Outcome::Success;
    // Lines are written a block at a time: one write per line cost more than the listing.
    let mut block = String::with_capacity(LIST_BLOCK + 256);
    for entry in list_marked(collection, range, args.withdrawn)? {
        if block.len() >= LIST_BLOCK {
            printer.lines(&mut block);
        }
        if super::stdout_gone() {
            break;
        }
        let entry = match entry {
            // One item's bad record is its problem: told, and the others still listed.
            Err(e @ ibi::Error::Data { .. }) => {
                super::stderr_line(&format!("ibi: problem: {e}"));
                outcome = Outcome::Problems;
                continue;
            }
            other => other?,
        };
        let ((name, ibip, status, identity), is_degraded) = match entry {
            ListEntry::Item(item, is_degraded) => (item, is_degraded),
            ListEntry::RedundancyUnknown(why) => {
                printer.note(&format!("ibi: warning: {why}"));
                continue;
            }
        };
        degraded += u64::from(is_degraded);
        if printer.json() {
            let ibip = ibip.map(|i| i.to_string());
            let mut line =
                json!({"name": name.to_string(), "ibip": ibip, "status": status.as_str(), "identity": identity});
            if is_degraded {
                line["degraded"] = json!(true);
            }
            writeln!(block, "{line}").expect("a String takes any text");
            continue;
        }
        write!(block, "{}", Minted { name, ibip }).expect("a String takes any text");
        if status == ibi::store::Status::Withdrawn {
            block.push_str("\twithdrawn");
        }
        if is_degraded {
            block.push_str("\tdegraded");
        }
        block.push('\n');
    }
    printer.lines(&mut block);
    if degraded > 0 {
        let why = ibi::ops::placement::DEGRADED;
        printer.note(&format!("ibi: warning: {degraded} item(s) degraded: {why}"));
    }
    Ok(outcome)
}

pub fn log(global: GlobalArgs, args: &super::args::LogArgs) -> Result<Outcome> {
    use ibi::ops::log;
    let collection = super::open(&args.root)?;
    let collection = collection.as_ref();
    let name = match &args.name {
        Some(text) => Some(match ibi::RepositoryName::parse(text) {
            Ok(name) => name,
            Err(_) => ibi::store::resolve(collection, text)?,
        }),
        None => None,
    };
    if args.premis {
        let name = name.as_ref().expect("clap requires NAME with --premis");
        super::write_stdout(&log::premis(collection, name)?)?;
        return Ok(Outcome::Success);
    }
    let since = args.since.map(ibi::store::inventory::fixity_date);
    let printer = Printer::new(global);
    let keeps = log::for_each(collection, name.as_ref(), &mut |stored| {
        let event = log::read(stored)?;
        if super::stdout_gone() || since.as_ref().is_some_and(|s| event.date < *s) {
            return Ok(());
        }
        if printer.json() {
            let mut value = serde_json::to_value(&event).expect("an event serialises");
            value["hash"] = json!(stored.hash);
            printer.line(&value.to_string());
        } else {
            let item = event.item.as_deref().unwrap_or("-");
            let carried = event.carried_from.as_ref().map(|f| format!(" (carried from {f})")).unwrap_or_default();
            printer.line(&format!(
                "{}\t{}\t{}\t{item}\t{}\t{}{carried}\t{}",
                event.seq,
                event.date,
                event.kind.as_str(),
                event.outcome,
                event.detail,
                event.agent.label()
            ));
        }
        Ok(())
    })?;
    if !keeps {
        let problem = format!("{} keeps no event log", collection.location());
        return Err(ibi::Error::Invalid { what: "log".into(), problem }.into());
    }
    Ok(Outcome::Success)
}

pub fn resolve(global: GlobalArgs, root: &Path, name: &str) -> Result<Outcome> {
    let collection = super::open(root)?;
    let collection = collection.as_ref();
    let name = ibi::store::resolve(collection, name)?;
    ibi::ops::item::in_service(collection, &name)?;
    let place = match collection.local_root() {
        Some(root) => root.join(name.to_string()).display().to_string(),
        None => format!("{}/{name}", collection.location()),
    };
    if global.json {
        let ibip = ibi::store::item_ibip(collection, &name).ok().flatten().map(|i| i.to_string());
        let line = json!({"name": name.to_string(), "ibip": ibip, "path": place}).to_string();
        super::write_stdout(&format!("{line}\n"))?;
    } else {
        super::write_stdout(&format!("{place}\n"))?;
    }
    Ok(Outcome::Success)
}

pub fn watch(global: GlobalArgs, args: &WatchArgs) -> Result<Outcome> {
    let collection = super::open(&args.root)?;
    let collection = collection.as_ref();
    if !args.inbox.is_dir() {
        anyhow::bail!(ibi::Error::Invalid {
            what: "inbox".into(),
            problem: format!("{} is not a folder", args.inbox.display())
        });
    }
    let printer = Printer::new(global);
    super::GRACEFUL.store(true, Ordering::SeqCst);
    let stop = &super::STOP;
    let options = WatchOptions {
        settle: args.settle.0,
        remove: args.remove,
        poll: std::time::Duration::from_millis(250),
        deposit: DepositOptions {
            follow_symlinks: args.follow_symlinks,
            meta: args.meta.clone(),
            ..DepositOptions::default()
        },
    };
    printer.note(&format!("watching {} (settle {:?}); stop with Ctrl-C", args.inbox.display(), args.settle.0));
    let mut on_entry = |entry: &str, outcome: &EntryOutcome| {
        let (event, said, minted) = match outcome {
            EntryOutcome::Deposited(minted) => ("deposited", "", minted),
            EntryOutcome::AlreadyDeposited(minted) => ("already_deposited", "\talready deposited", minted),
            EntryOutcome::Recovered(minted) => ("recovered", "\tdeposited (hand-off finished)", minted),
        };
        if printer.json() {
            let ibip = minted.ibip.map(|i| i.to_string());
            printer.event(event, json!({"entry": entry, "name": minted.name.to_string(), "ibip": ibip}));
        } else {
            printer.line(&format!("{minted}\t{entry}{said}"));
        }
    };
    let done = watch_inbox(collection, &args.inbox, &options, &SystemClock, &printer, stop, &mut on_entry)?;
    let text = format!(
        "stopped; deposited {} item(s), {} already held, {} finished from an earlier run, {} refused (left in the inbox)",
        done.deposited, done.already_deposited, done.recovered, done.refused
    );
    let fields = json!({"deposited": done.deposited, "already_deposited": done.already_deposited,
        "recovered": done.recovered, "refused": done.refused});
    printer.summary(&text, fields);
    Ok(Outcome::Success)
}

pub fn retire(global: GlobalArgs, root: &Path) -> Result<Outcome> {
    let collection = super::open(root)?;
    ibi::ops::minting::retire(collection.as_ref(), ibi::store::LockWait::No)?;
    Printer::new(global).note(&format!("retired {}: it mints no more names", collection.location()));
    Ok(Outcome::Success)
}

/// `ibi witness --check PROOF [--key HEX]`: the proof's signature and path, and
/// that the signing key is the collection's when `key` names it.
pub fn check_proof(global: GlobalArgs, file: &Path, key: Option<&str>) -> Result<Outcome> {
    use ibi::ops::witness;
    let printer = Printer::new(global);
    let text = std::fs::read_to_string(file).map_err(|e| ibi::Error::io("read", file, e))?;
    let proof: witness::Proof = serde_json::from_str(&text)
        .map_err(|e| ibi::Error::Invalid { what: file.display().to_string(), problem: format!("not a proof: {e}") })?;
    witness::check(&proof, key)?;
    if key.is_none() {
        printer.note("ibi: note: the proof is signed by its own key; give --key (collection.toml's witness_key) to check that it is the collection's");
    }
    printer.summary(
        &format!(
            "{} is leaf {} of the root {} that key {} signed on {}",
            proof.name, proof.index, proof.witness.root, proof.witness.public_key, proof.witness.date
        ),
        json!({"name": proof.name, "ok": true, "root": proof.witness.root, "public_key": proof.witness.public_key,
               "key_checked": key.is_some()}),
    );
    Ok(Outcome::Success)
}

pub fn witness(global: GlobalArgs, root: Option<&Path>, prove: Option<&str>) -> Result<Outcome> {
    use ibi::ops::witness;
    let printer = Printer::new(global);
    let collection = super::open(root.expect("clap requires ROOT without --check"))?;
    let collection = collection.as_ref();
    let latest = witness::latest(collection)?.ok_or_else(|| ibi::Error::Invalid {
        what: "witness".into(),
        problem: format!("{} has no witness yet: `ibi verify` makes one", collection.location()),
    })?;
    let value = match prove {
        Some(name) => serde_json::to_value(witness::prove(collection, &latest, name)?)?,
        None => serde_json::to_value(&latest)?,
    };
    printer.line(&serde_json::to_string_pretty(&value)?);
    Ok(Outcome::Success)
}

/// Makes a new witness after a whole or rolling verify and says so. A failure to
/// make one is told, never a problem of the collection, but for a signing key that
/// is not the published one (replaced): that is a problem, counted in the result.
fn witness_after_verify(
    collection: &dyn ibi::store::Store,
    confirmed: &ibi::ops::verify::Confirmed,
    printer: &Printer,
) -> u64 {
    let started = std::time::Instant::now();
    match ibi::ops::witness::make_after(collection, ibi::id::Timestamp::now(), Some(confirmed)) {
        Ok(Some(w)) => printer.note(&format!(
            "witness: root {} over {} item(s), signed by {}, made in {:.2} s",
            w.root,
            w.items,
            w.public_key,
            started.elapsed().as_secs_f64()
        )),
        Ok(None) => {}
        Err(e @ ibi::Error::Data { .. }) => {
            printer.event("problem", json!({"what": "witness key", "problem": e.to_string()}));
            printer.note(&format!("ibi: problem: no witness was made: {e}"));
            return 1;
        }
        Err(e) => printer.note(&format!("ibi: warning: no witness was made: {e}")),
    }
    0
}

/// `ibi kept`: the copies replacements displaced, or `--remove` some of them.
pub fn kept(global: GlobalArgs, root: &Path, remove: &[String]) -> Result<Outcome> {
    let collection = super::open(root)?;
    let printer = Printer::new(global);
    let Some(kept) = collection.kept_copies() else {
        return Err(ibi::Error::Refused {
            what: format!("ibi kept {}", collection.location()),
            why: "its kept copies are listed and removed on its own machine (`ibi kept PATH` there)".into(),
        }
        .into());
    };
    let describe = |k: &ibi::store::kept::KeptCopy| format!("{}\t{}\t{}\t{}", k.id, k.name, k.displaced, k.bytes);
    if remove.is_empty() {
        for copy in kept.list_kept()? {
            match printer.json() {
                true => printer.line(&json!({ "event": "kept", "copy": copy }).to_string()),
                false => printer.line(&describe(&copy)),
            }
        }
        return Ok(Outcome::Success);
    }
    let _lock = collection.begin_write(ibi::store::LockWait::No)?;
    for id in remove {
        let copy = kept.remove_kept(id)?;
        match printer.json() {
            true => printer.event("removed", json!({ "copy": copy })),
            false => printer.line(&format!("removed\t{}", describe(&copy))),
        }
    }
    Ok(Outcome::Success)
}

pub fn upgrade(global: GlobalArgs, root: &Path, wait: Option<super::args::Seconds>) -> Result<Outcome> {
    let collection = super::open(root)?;
    let wait = wait.map_or(ibi::store::LockWait::No, |secs| ibi::store::LockWait::For(secs.0));
    let summary = ibi::ops::upgrade::upgrade(collection.as_ref(), wait)?;
    let printer = Printer::new(global);
    for name in &summary.rewritten {
        printer.event("rewritten", json!({"name": name.to_string()}));
    }
    for (name, why) in &summary.kept {
        printer.event("kept", json!({"name": name.to_string(), "why": why}));
        printer.note(&format!("ibi: warning: {name} keeps its old keys (it stays readable): {why}"));
    }
    let text = format!(
        "upgraded {}: {} item(s) rewritten, {} kept as they were",
        collection.location(),
        summary.rewritten.len(),
        summary.kept.len()
    );
    let fields = json!({"rewritten": summary.rewritten.len(), "kept": summary.kept.len()});
    printer.summary(&text, fields);
    Ok(if summary.kept.is_empty() { Outcome::Success } else { Outcome::Problems })
}

pub fn handover(global: GlobalArgs, args: &HandoverArgs) -> Result<Outcome> {
    let (from, to) = (super::open(&args.from)?, super::open(&args.to)?);
    let wait = if args.wait { ibi::store::LockWait::Forever } else { ibi::store::LockWait::No };
    let options = HandoverOptions { forward_url: args.forward_url.clone(), wait: Some(wait) };
    if let Some(url) = &options.forward_url {
        check_forward_url(url)?;
    }
    let done = ibi::ops::minting::handover(from.as_ref(), to.as_ref(), &options)?;
    let printer = Printer::new(global);
    let (from, to) = (from.location(), to.location());
    let (text, floor) = match done {
        HandedOver::Already => (format!("{to} already mints; {from} handed over to it earlier"), None),
        HandedOver::Moved { floor } => {
            let after = floor.map_or("".into(), |f| format!(", after {}", f.to_rfc3339()));
            (format!("{to} now mints the names {from} minted{after}; {from} mints no more"), floor)
        }
    };
    printer.summary(&text, json!({"from": from, "to": to, "floor": floor.map(|f| f.to_rfc3339())}));
    Ok(Outcome::Success)
}

/// A forwarding URL is an absolute http(s) URL ending in a slash (the library's check).
pub fn check_forward_url(url: &str) -> Result<()> {
    Ok(ibi::store::inventory::check_forward_url(url)?)
}

/// `deposit --ocfl`: one line per object taken, a problem line per object refused.
fn deposit_ocfl(
    printer: &Printer,
    collection: &dyn ibi::store::Store,
    paths: &[std::path::PathBuf],
    options: ibi::ops::ocfl::import::ImportOptions,
) -> Result<Outcome> {
    use ibi::ops::ocfl::import::{import, Taken};
    let imported = import(collection, paths, options, &SystemClock, printer)?;
    for (object, taken) in &imported.taken {
        let line = match taken {
            Taken::Copied(name) => format!("{name}\tcopied back with every version\t{}", object.display()),
            Taken::Held(name) => format!("{name}\talready held with the same identity\t{}", object.display()),
            Taken::Deposited(name, added) => {
                let added: Vec<String> = added.iter().map(|n| format!("v{n}")).collect();
                let added = if added.is_empty() { "nothing new".to_string() } else { added.join(", ") };
                format!("{name}\tdeposited {added}\t{}", object.display())
            }
        };
        printer.line(&line);
    }
    for refused in &imported.refused {
        printer.line(&format!("{}\t{}: {}", refused.object.display(), refused.code, refused.problem));
    }
    let summary = format!("{} OCFL object(s) taken, {} refused", imported.taken.len(), imported.refused.len());
    let counts = serde_json::json!({"taken": imported.taken.len(), "refused": imported.refused.len()});
    printer.summary(&summary, counts);
    Ok(if imported.refused.is_empty() { Outcome::Success } else { Outcome::Problems })
}
