//! The commands on one item and its versions: `show`, `update`, `withdraw` and
//! `export`. Each turns its arguments into one library call and prints the
//! result as text or JSON.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::json;

use super::args::{GlobalArgs, Seconds, UpdateArgs, WithdrawArgs};
use super::printer::Printer;
use super::Outcome;
use ibi::id::minter::SystemClock;
use ibi::ops::item::{export as export_item, show as show_item, ItemView};
use ibi::ops::update::{update as update_item, Changes, Updated, Withdraw};
use ibi::store::{LockWait, Minting};

fn lock_wait(wait: Option<Seconds>) -> LockWait {
    wait.map_or(LockWait::No, |secs| LockWait::For(secs.0))
}

fn view_json(view: &ItemView) -> serde_json::Value {
    let r = &view.record;
    json!({
        "name": r.name.to_string(),
        "ibip": r.ibip.map(|i| i.to_string()),
        "status": r.status.as_str(),
        "version": r.current().number,
        "identity": r.current().digest,
        "origin": r.origin,
        "withdrawn": r.withdrawn.as_ref().map(|w| json!({"date": w.date, "reason": w.reason})),
        "versions": r.versions,
        "files": view.payload.iter().map(|(path, size)| json!({"path": path, "size": size})).collect::<Vec<_>>(),
        "file_count": view.files,
        "bytes": view.bytes,
        "bag_info": view.info.fields.iter().map(|(l, v)| json!([l, v])).collect::<Vec<_>>(),
    })
}

fn view_text(printer: &Printer, view: &ItemView) {
    let r = &view.record;
    printer.line(&format!("name:     {}", r.name));
    printer.line(&format!("ibip:     {}", r.ibip.map_or("-".into(), |i| i.to_string())));
    printer.line(&format!("status:   {}", r.status.as_str()));
    if let Some(w) = &r.withdrawn {
        printer.line(&format!("withdrawn: {} — {}", ibi::error::to_the_second(&w.date), w.reason));
    }
    printer.line(&format!("version:  {} of {}", r.current().number, r.versions.len()));
    printer.line(&format!("payload:  {} files, {}", view.files, printer.size(view.bytes)));
    printer.line(&format!("origin:   {}", r.origin.as_deref().unwrap_or("unknown")));
    printer.line("history:");
    for v in &r.versions {
        // A first version is dated by its name: the minted date, which may be
        // up to the subsystem's granularity before the deposit itself.
        let named = ibi::Timestamp::parse_user(&v.date).is_ok_and(|d| d == r.name.date());
        let note = if named { "  (the name's date)" } else { "" };
        printer.line(&format!("  {}  {}  {}{note}", v.number, v.date, v.digest));
    }
    printer.line("bag-info:");
    for (label, value) in &view.info.fields {
        printer.line(&format!("  {label}: {value}"));
    }
    printer.line("files:");
    for (path, size) in &view.payload {
        printer.line(&format!("  {path}  {}", printer.size(*size)));
    }
}

pub fn show(global: GlobalArgs, root: &Path, name: &str) -> Result<Outcome> {
    let store = super::open(root)?;
    let view = show_item(store.as_ref(), name)?;
    let minting = store.inventory().minting()?;
    let printer = Printer::new(global);
    if printer.json() {
        let mut json = view_json(&view);
        json["collection"] = minting_json(&minting);
        printer.line(&json.to_string());
    } else {
        view_text(&printer, &view);
        printer.line(&format!("minting:  {}", minting_text(&minting)));
    }
    Ok(Outcome::Success)
}

/// Which collection mints the subsystem, as `show` says it.
fn minting_text(minting: &Minting) -> String {
    match minting {
        Minting::Mints => "this collection mints its subsystem's names".into(),
        Minting::Follows(peer) => format!("{} ({}) mints; this collection follows it", peer.location, peer.id),
        Minting::Retired(Some(next)) => format!("handed over to {} ({}) on {}", next.location, next.id, next.since),
        Minting::Retired(None) => "retired: this collection mints no names".into(),
    }
}

fn minting_json(minting: &Minting) -> serde_json::Value {
    match minting {
        Minting::Mints => json!({"mints": true}),
        Minting::Follows(peer) => json!({"mints": false, "follows": {"id": peer.id, "location": peer.location}}),
        Minting::Retired(next) => json!({"mints": false, "retired": true,
            "successor": next.as_ref().map(|n| json!({"id": n.id, "location": n.location, "since": n.since}))}),
    }
}

fn print_updated(printer: &Printer, updated: &Updated, what: &str) {
    if printer.json() {
        let line = json!({"name": updated.name.to_string(), "version": updated.version, "identity": updated.digest,
            "status": what, "files": updated.files, "bytes": updated.bytes});
        printer.line(&line.to_string());
    } else {
        printer.line(&format!("{}\tversion {}\t{what}", updated.name, updated.version));
    }
}

/// `PATH` (stored under its own file name) or `PATH=DATA_PATH`.
fn parse_add(text: &str) -> Result<(PathBuf, String)> {
    if let Some((from, to)) = text.split_once('=') {
        return Ok((PathBuf::from(from), to.to_string()));
    }
    let from = PathBuf::from(text);
    let name = from.file_name().and_then(|n| n.to_str()).ok_or_else(|| ibi::Error::Invalid {
        what: "--add".into(),
        problem: format!("{text} has no file name; write PATH=DATA_PATH"),
    })?;
    Ok((from.clone(), name.to_string()))
}

pub fn update(global: GlobalArgs, args: &UpdateArgs) -> Result<Outcome> {
    let store = super::open(&args.root)?;
    let changes = Changes {
        set: args.meta.clone(),
        unset: args.unset.clone(),
        add: args.add.iter().map(|a| parse_add(a)).collect::<Result<_>>()?,
        remove: args.remove.clone(),
        withdraw: None,
    };
    let updated = update_item(store.as_ref(), &args.name, &changes, &SystemClock, lock_wait(args.wait))?;
    print_updated(&Printer::new(global), &updated, "updated");
    Ok(Outcome::Success)
}

pub fn withdraw(global: GlobalArgs, args: &WithdrawArgs) -> Result<Outcome> {
    let store = super::open(&args.root)?;
    let printer = Printer::new(global);
    let changes =
        Changes { withdraw: Some(Withdraw { reason: args.reason.clone(), purge: args.purge }), ..Changes::default() };
    for name in &args.names {
        let updated = update_item(store.as_ref(), name, &changes, &SystemClock, lock_wait(args.wait))?;
        print_updated(&printer, &updated, if args.purge { "withdrawn, purged" } else { "withdrawn" });
    }
    Ok(Outcome::Success)
}

pub fn export(global: GlobalArgs, root: &Path, name: &str, dir: &Path, version: Option<u32>) -> Result<Outcome> {
    let store = super::open(root)?;
    let exported = export_item(store.as_ref(), name, dir, version)?;
    let printer = Printer::new(global);
    if printer.json() {
        let line = json!({"name": exported.name.to_string(), "version": exported.version,
            "path": exported.path.display().to_string(), "files": exported.files});
        printer.line(&line.to_string());
    } else {
        printer.line(&exported.path.display().to_string());
    }
    Ok(Outcome::Success)
}

/// `ibi export --ocfl`: every version the OCFL object lacks, into the storage root `dir`.
pub fn export_ocfl(global: GlobalArgs, root: &Path, name: &str, dir: &Path) -> Result<Outcome> {
    let store = super::open(root)?;
    let place = ibi::store::location::OcflPlace::parse(dir)?;
    let exported = ibi::ops::ocfl::export(store.as_ref(), name, &place, &ibi::store::Connect::from_env())?;
    let printer = Printer::new(global);
    let object = place.show(&exported.object);
    let added: Vec<String> = exported.added.iter().map(|n| format!("v{n}")).collect();
    let line = match added.is_empty() {
        true => format!("{object}: the OCFL object already holds every version (v{})", exported.head),
        false => format!("{object}: added {}", added.join(", ")),
    };
    let counts = json!({"name": exported.name.to_string(), "object": object,
        "added": exported.added, "head": exported.head});
    printer.summary(&line, counts);
    Ok(Outcome::Success)
}

/// `ibi handles`: the batch file on stdout, a summary on stderr.
pub fn handles(global: GlobalArgs, args: &super::args::HandlesArgs) -> Result<Outcome> {
    use super::args::HandleSuffix;
    use ibi::ops::handles::{export_handles, HandleExport, SuffixKind};
    ibi::id::Handle::new(&args.prefix, "x")?;
    let since = args.since.as_deref().map(ibi::Timestamp::parse_user).transpose()?;
    let suffix = match args.suffix {
        HandleSuffix::Name => SuffixKind::Name,
        HandleSuffix::Ibip => SuffixKind::Ibip,
        HandleSuffix::Pilin => SuffixKind::Pilin,
    };
    let store = super::open(&args.root)?;
    let mut mirrors = args.mirrors.clone();
    for site in ibi::ops::sites::public_urls(store.as_ref()) {
        if !mirrors.contains(&site) {
            mirrors.push(site);
        }
    }
    let options = HandleExport {
        prefix: args.prefix.clone(),
        url_base: args.url_base.clone(),
        mirrors,
        admin: args.admin.clone(),
        suffix,
        since,
    }
    .checked()?;
    let mut batch = std::io::BufWriter::with_capacity(1 << 16, super::Stdout);
    let summary = export_handles(store.as_ref(), &options, &mut batch)?;
    let mut line = format!(
        "exported {} item handle(s) ({} withdrawn) and {} alias(es)",
        summary.items, summary.withdrawn, summary.aliases
    );
    if summary.arrived > 0 {
        line.push_str(&format!("; {} item(s) arrived during the export and are left for the next", summary.arrived));
    }
    let counts = json!({"items": summary.items, "withdrawn": summary.withdrawn, "aliases": summary.aliases,
        "arrived": summary.arrived});
    Printer::new(global).summary(&line, counts);
    Ok(Outcome::Success)
}
