//! An OCFL storage root kept as a site of a collection (`ocfl:PATH`):
//! `site add` makes it (the root, then `ibi-site.toml` naming the collection
//! it copies), and `replicate` keeps it up to date, item by item, adding to
//! each object only the versions it lacks: an unchanged item writes nothing.
//! What OCFL 1.1 cannot hold (a purged version, a path with CR, LF or TAB) is
//! a problem of that item; the others go on.

use crate::error::{Error, Result};
use crate::ops::driver::TransferSummary;
use crate::ops::report::Reporter;
use crate::problem::{Problem, ProblemKind};
use crate::store::config::{CollectionConfig, Peer};
use crate::store::location::OcflPlace;
use crate::store::ocfl::{OcflStore, SITE_FILE};
use crate::store::{Connect, ItemRecord, Status, Store};

use super::export::OcflRoot;

/// The site's index of the objects it holds (`NAME<TAB>IDENTITY` lines, the
/// identity each object's head holds), rewritten at the end of each
/// `replicate`: a later run skips an item whose current identity it names
/// without reading its object, as `mirror` trusts the identities its
/// destination's inventory keeps. `verify` and `audit` of the site read the
/// objects themselves.
pub const INDEX_FILE: &str = "extensions/ibi-site/objects.tsv";

/// The site's file of IBIp aliases (`IBIP<TAB>NAME` lines), inside an
/// extension's folder: OCFL allows no links, and an alias is no object.
pub const ALIASES_FILE: &str = "extensions/ibi-site/aliases.tsv";

/// Makes `root` an OCFL site of `collection` (or checks that it is one),
/// and opens it.
pub fn make_site(collection: &dyn Store, root: &OcflPlace, connect: &Connect) -> Result<OcflStore> {
    let id = collection.inventory().collection_id();
    let files = crate::store::open_ocfl_root(root, connect)?;
    if files.read_small(SITE_FILE)?.is_some() {
        let site = OcflStore::open_on(files)?;
        let copies = site.inventory().current_config()?.and_then(|c| c.follows).map(|peer| peer.id);
        if copies != id {
            let problem = format!("it is an OCFL site of {}, not of this collection", copies.unwrap_or_default());
            return Err(Error::Invalid { what: root.to_string(), problem });
        }
        return Ok(site);
    }
    let writing = OcflRoot::open_for_writing(root, connect)?;
    let mut config = CollectionConfig::new(collection.subsystem(), collection.organisation().map(str::to_string));
    config.follows = Some(Peer { id: id.unwrap_or_default(), location: collection.location() });
    writing.files().replace(SITE_FILE, config.to_toml().as_bytes())?;
    writing.finish()?;
    OcflStore::open_on(crate::store::open_ocfl_root(root, connect)?)
}

/// Brings every item `collection` holds (present or withdrawn) into the
/// OCFL site at `root`: new objects are `copied`, objects given more versions
/// `replaced`, the rest `skipped`.
pub fn replicate(
    collection: &dyn Store,
    root: &OcflPlace,
    connect: &Connect,
    reporter: &dyn Reporter,
) -> Result<TransferSummary> {
    make_site(collection, root, connect)?;
    let writing = OcflRoot::open_for_writing(root, connect)?;
    let indexed = read_index(writing.files());
    let mut index = String::new();
    let mut summary = TransferSummary::default();
    let mut held = Vec::with_capacity(ITEMS_AT_ONCE);
    let mut aliases = String::new();
    let mut summaries = collection.inventory().record_summaries();
    loop {
        let next = summaries.next().transpose()?;
        if let Some(record) = next.as_ref().filter(|r| matches!(r.status, Status::Present | Status::Withdrawn)) {
            if let Some(ibip) = &record.ibip {
                aliases.push_str(&format!("{ibip}\t{}\n", record.name));
            }
            match indexed.get(record.name.to_string().as_str()) == Some(&record.identity) {
                true => {
                    summary.skipped += 1;
                    index.push_str(&format!("{}\t{}\n", record.name, record.identity));
                }
                false => held.push(record.name.clone()),
            }
        }
        if held.len() == ITEMS_AT_ONCE || (next.is_none() && !held.is_empty()) {
            let chunk = std::mem::take(&mut held);
            replicate_chunk(collection, &writing, &chunk, &mut summary, &mut index, reporter)?;
        }
        if next.is_none() {
            break;
        }
    }
    keep_file(&writing, ALIASES_FILE, &aliases)?;
    keep_file(&writing, INDEX_FILE, &index)?;
    writing.finish()?;
    Ok(summary)
}

/// The site's index of objects, name to identity; empty when it has none or
/// it does not read.
fn read_index(files: &dyn crate::store::ocfl::files::RootWrites) -> std::collections::HashMap<String, String> {
    let bytes = files.read_whole(INDEX_FILE).ok().flatten().unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(n, i)| (n.to_string(), i.to_string()))
        .collect()
}

/// Writes one of the site's own files when it differs from what it holds.
fn keep_file(writing: &OcflRoot, rel: &str, text: &str) -> Result<()> {
    let held = writing.files().read_whole(rel).ok().flatten();
    match held.as_deref() == Some(text.as_bytes()) {
        true => Ok(()),
        false => writing.files().replace(rel, text.as_bytes()),
    }
}

/// How many items are staged (in parallel) before one `syncfs` makes them
/// durable and they are committed.
const ITEMS_AT_ONCE: usize = 256;

/// Stages the versions each of `names` lacks in parallel, makes them durable
/// with one `syncfs`, then commits each.
fn replicate_chunk(
    collection: &dyn Store,
    writing: &OcflRoot,
    names: &[crate::id::RepositoryName],
    summary: &mut TransferSummary,
    index: &mut String,
    reporter: &dyn Reporter,
) -> Result<()> {
    use rayon::prelude::*;
    let staged: Vec<Result<_>> = names
        .par_iter()
        .map(|name| {
            let record = ItemRecord::from_bag(collection.item_files(name).as_ref(), name)?;
            writing.stage_item(collection, &record)
        })
        .collect();
    writing.make_staged_durable()?;
    for (name, committed) in names.iter().zip(writing.commit_batch(staged)) {
        if let Some(identity) = committed.as_ref().ok().and_then(|c| c.identity.as_ref()) {
            index.push_str(&format!("{name}\t{identity}\n"));
        }
        match committed {
            Ok(c) if c.added.is_empty() => summary.skipped += 1,
            Ok(c) if c.added.len() as u32 == c.head => summary.copied += 1,
            Ok(_) => summary.replaced += 1,
            // What OCFL cannot hold, or an object of another history: this item's problem.
            Err(e @ (Error::Invalid { .. } | Error::Data { .. })) => {
                summary.problems += 1;
                reporter.problem(&Problem::new(&name.to_string(), None, ProblemKind::Conflict, e.to_string()));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
