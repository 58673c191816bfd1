//! Handle System batch export: a collection's items as an hdl-genericbatch file
//! (`CREATE PREFIX/SUFFIX` blocks of typed values, each ending with a blank
//! line), so that an operator can register them with a Handle server. Each item
//! gets HS_ADMIN, URL (the resolver's landing page) and 10320/loc (this place
//! at weight 1, the mirrors at weight 0); a withdrawn item keeps its handle and
//! adds a DESC value with the tombstone (a handle is never deleted); an item
//! migrated away is left to the collection that now holds it. Each IBIp gets a
//! handle of its own holding an HS_ALIAS to the item's. No secret is written:
//! authentication is the operator's, at load time.

use std::collections::BTreeMap;
use std::io::Write;

use crate::error::{Error, Result};
use crate::id::{PilinSuffix, RepositoryName, Timestamp};
use crate::store::{ItemRecord, Status, Store};

/// What the handle suffix of an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuffixKind {
    /// The repository name (`sid.inpe.br/mtc-m18/2009/02.16.17.46`).
    Name,
    /// The IBIp (`8JMKD3MGP8W/34PGRBS`).
    Ibip,
    /// The PILIN suffix of the item's date, to the millisecond.
    Pilin,
}

/// How to export.
#[derive(Debug, Clone)]
pub struct HandleExport {
    /// The naming authority (`10.1000`).
    pub prefix: String,
    /// Prepended to a repository name to make its URL (`https://urlib.net/`).
    pub url_base: String,
    /// Other places serving the same collection, by URL base.
    pub mirrors: Vec<String>,
    /// The administrator handle (default `0.NA/PREFIX`).
    pub admin: Option<String>,
    pub suffix: SuffixKind,
    /// Only items whose current version is this new or newer.
    pub since: Option<Timestamp>,
}

/// What an export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportSummary {
    pub items: usize,
    pub withdrawn: usize,
    pub aliases: usize,
}

const TTL_AND_PERMS: &str = "86400 1110";

/// Writes the batch for every item `store` holds (and every withdrawn one).
pub fn export_handles(store: &dyn Store, options: &HandleExport, out: &mut dyn Write) -> Result<ExportSummary> {
    let records = selected_records(store, options)?;
    let suffixes = suffixes(&records, options.suffix)?;
    let mut summary = ExportSummary::default();
    let write_err = |e| Error::io("write the batch to", "standard output", e);
    for (record, suffix) in records.iter().zip(&suffixes) {
        let handle = format!("{}/{suffix}", options.prefix);
        out.write_all(item_block(record, &handle, options).as_bytes()).map_err(write_err)?;
        summary.items += 1;
        summary.withdrawn += usize::from(record.status == Status::Withdrawn);
        if let Some(block) = alias_block(record, &handle, options) {
            out.write_all(block.as_bytes()).map_err(write_err)?;
            summary.aliases += 1;
        }
    }
    Ok(summary)
}

/// The records to export, in name order: held or withdrawn, changed since `since`.
fn selected_records(store: &dyn Store, options: &HandleExport) -> Result<Vec<ItemRecord>> {
    let mut selected = Vec::new();
    for record in store.all_records() {
        let record = record?;
        if record.status == Status::Removed {
            continue;
        }
        let changed = Timestamp::parse_user(&record.current().date).unwrap_or(record.name.date());
        if options.since.is_none_or(|since| changed >= since) {
            selected.push(record);
        }
    }
    Ok(selected)
}

/// Each record's handle suffix; PILIN suffixes must not collide (two items in one millisecond).
fn suffixes(records: &[ItemRecord], kind: SuffixKind) -> Result<Vec<String>> {
    let mut seen: BTreeMap<String, &RepositoryName> = BTreeMap::new();
    let mut out = Vec::with_capacity(records.len());
    for record in records {
        let suffix = match (kind, record.ibip) {
            (SuffixKind::Name, _) => record.name.to_string(),
            (SuffixKind::Ibip, Some(ibip)) => ibip.to_string(),
            (SuffixKind::Ibip, None) => return Err(invalid(format!("{} has no IBIp", record.name))),
            (SuffixKind::Pilin, _) => PilinSuffix::from_date(record.name.date())
                .ok_or_else(|| invalid(format!("{} has a date before the PILIN epoch", record.name)))?
                .to_string(),
        };
        if let Some(other) = seen.insert(suffix.clone(), &record.name) {
            let problem = format!("{other} and {} share the suffix {suffix} (one millisecond)", record.name);
            return Err(invalid(problem + "; export with --suffix name or ibip"));
        }
        out.push(suffix);
    }
    Ok(out)
}

fn invalid(problem: String) -> Error {
    Error::Invalid { what: "handle export".into(), problem }
}

fn admin_line(options: &HandleExport) -> String {
    let admin = options.admin.clone().unwrap_or_else(|| format!("0.NA/{}", options.prefix));
    format!("100 HS_ADMIN {TTL_AND_PERMS} ADMIN 300:111111111111:{admin}\n")
}

/// The 10320/loc value: one `<location>` per place, the primary at weight 1.
pub fn locations(name: &RepositoryName, url_base: &str, mirrors: &[String]) -> String {
    let places = std::iter::once((url_base, 1)).chain(mirrors.iter().map(|m| (m.as_str(), 0)));
    let inner: String = places
        .enumerate()
        .map(|(id, (base, weight))| {
            format!("<location id=\"{id}\" href=\"{}{name}\" weight=\"{weight}\" />", xml(base))
        })
        .collect();
    format!("<locations>{inner}</locations>")
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;").replace('>', "&gt;")
}

fn item_block(record: &ItemRecord, handle: &str, options: &HandleExport) -> String {
    let name = &record.name;
    let mut block = format!("CREATE {handle}\n{}", admin_line(options));
    block.push_str(&format!("1 URL {TTL_AND_PERMS} UTF8 {}{name}\n", options.url_base));
    let locs = locations(name, &options.url_base, &options.mirrors);
    block.push_str(&format!("2 10320/loc {TTL_AND_PERMS} UTF8 {locs}\n"));
    if let Some(w) = &record.withdrawn {
        let reason = w.reason.replace(['\n', '\r'], " ");
        block.push_str(&format!("3 DESC {TTL_AND_PERMS} UTF8 withdrawn {}: {reason}\n", w.date));
    }
    block.push('\n');
    block
}

/// The IBIp's own handle, an alias of the item's; with IBIp suffixes, the
/// repository name's handle is the alias instead.
fn alias_block(record: &ItemRecord, handle: &str, options: &HandleExport) -> Option<String> {
    let alias = match options.suffix {
        SuffixKind::Ibip => record.name.to_string(),
        _ => record.ibip?.to_string(),
    };
    let admin = admin_line(options);
    Some(format!("CREATE {}/{alias}\n{admin}1 HS_ALIAS {TTL_AND_PERMS} UTF8 {handle}\n\n", options.prefix))
}
