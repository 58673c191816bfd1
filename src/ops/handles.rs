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
    /// Items that arrived while the export ran (after its check of the
    /// suffixes), left for the next export.
    pub arrived: usize,
}

const TTL_AND_PERMS: &str = "86400 1110";

/// Writes the batch for every item `store` holds (and every withdrawn one), in
/// name order, one item at a time: memory holds 16 bytes an item, not the
/// batch. A first pass checks that no two items share a suffix, so that a
/// batch that would be refused is never begun; the second writes the items
/// the first checked.
pub fn export_handles(store: &dyn Store, options: &HandleExport, out: &mut dyn Write) -> Result<ExportSummary> {
    let checked = checked_suffixes(store, options)?;
    let mut summary = ExportSummary::default();
    let write_err = |e| Error::io("write the batch to", "standard output", e);
    for record in selected_records(store, options) {
        let record = record?;
        let suffix = suffix_of(&record, options.suffix)?;
        if checked.binary_search(&(super::hash64(&suffix), super::hash64(&record.name))).is_err() {
            summary.arrived += 1;
            continue;
        }
        let handle = format!("{}/{suffix}", options.prefix);
        out.write_all(item_block(&record, &handle, options).as_bytes()).map_err(write_err)?;
        summary.items += 1;
        summary.withdrawn += usize::from(record.status == Status::Withdrawn);
        if let Some(block) = alias_block(&record, &handle, options) {
            out.write_all(block.as_bytes()).map_err(write_err)?;
            summary.aliases += 1;
        }
    }
    out.flush().map_err(write_err)?;
    Ok(summary)
}

/// The records to export, in name order: held or withdrawn, changed since `since`.
fn selected_records<'a>(
    store: &'a dyn Store,
    options: &'a HandleExport,
) -> impl Iterator<Item = Result<ItemRecord>> + 'a {
    store.inventory().all_records().filter(|record| match record {
        Err(_) => true,
        Ok(record) if record.status == Status::Removed => false,
        Ok(record) => {
            let changed = Timestamp::parse_user(&record.current().date).unwrap_or(record.name.date());
            options.since.is_none_or(|since| changed >= since)
        }
    })
}

/// A record's handle suffix.
fn suffix_of(record: &ItemRecord, kind: SuffixKind) -> Result<String> {
    match (kind, record.ibip) {
        (SuffixKind::Name, _) => Ok(record.name.to_string()),
        (SuffixKind::Ibip, Some(ibip)) => Ok(ibip.to_string()),
        (SuffixKind::Ibip, None) => Err(invalid(format!("{} has no IBIp", record.name))),
        (SuffixKind::Pilin, _) => PilinSuffix::from_date(record.name.date())
            .map(|suffix| suffix.to_string())
            .ok_or_else(|| invalid(format!("{} has a date before the PILIN epoch", record.name))),
    }
}

/// The (suffix, name) hashes of every record to export, sorted; refused when
/// two records share a suffix (PILIN suffixes of two items in one
/// millisecond). Hashes that coincide are looked at again in full, so no
/// batch is refused for a hash collision alone.
fn checked_suffixes(store: &dyn Store, options: &HandleExport) -> Result<Vec<(u64, u64)>> {
    let mut checked = Vec::new();
    for record in selected_records(store, options) {
        let record = record?;
        checked.push((super::hash64(&suffix_of(&record, options.suffix)?), super::hash64(&record.name)));
    }
    checked.sort_unstable();
    let mut shared: Vec<u64> = checked.windows(2).filter(|w| w[0].0 == w[1].0).map(|w| w[0].0).collect();
    if !shared.is_empty() {
        shared.dedup();
        refuse_shared_suffixes(store, options, &shared)?;
    }
    Ok(checked)
}

/// Refuses the export if two records whose suffixes hash alike share the suffix itself.
fn refuse_shared_suffixes(store: &dyn Store, options: &HandleExport, shared: &[u64]) -> Result<()> {
    let mut holders: BTreeMap<String, RepositoryName> = BTreeMap::new();
    for record in selected_records(store, options) {
        let record = record?;
        let suffix = suffix_of(&record, options.suffix)?;
        if shared.binary_search(&super::hash64(&suffix)).is_err() {
            continue;
        }
        match holders.get(&suffix) {
            Some(other) if *other != record.name => {
                let problem = format!("{other} and {} share the suffix {suffix} (one millisecond)", record.name);
                return Err(invalid(problem + "; export with --suffix name or ibip"));
            }
            _ => drop(holders.insert(suffix, record.name)),
        }
    }
    Ok(())
}

fn invalid(problem: String) -> Error {
    Error::Invalid { what: "handle export".into(), problem }
}

/// The admin index used when `--admin` names none: 300, what this export always
/// wrote (HANDLE.NET's own tools default to 300 for a prefix's admin too), so that
/// re-exporting an existing batch changes no value.
const DEFAULT_ADMIN_INDEX: u32 = 300;

fn admin_line(options: &HandleExport) -> String {
    let admin = options.admin.clone().unwrap_or_else(|| format!("0.NA/{}", options.prefix));
    let admin = if admin.contains(':') { admin } else { format!("{DEFAULT_ADMIN_INDEX}:{admin}") };
    let (index, handle) = admin.split_once(':').expect("holds a colon");
    format!("100 HS_ADMIN {TTL_AND_PERMS} ADMIN {index}:111111111111:{handle}\n")
}

impl HandleExport {
    /// The options checked and put in their one form: the prefix is one segment, a
    /// URL base (and each mirror) is `http(s)://host/…` and ends with `/` (one is
    /// added), the admin is `HANDLE` or `INDEX:HANDLE`. Anything else is refused,
    /// naming the option and the value.
    pub fn checked(mut self) -> Result<HandleExport> {
        let bad = |what: &str, value: &str, why: &str| Error::Invalid {
            what: what.to_string(),
            problem: format!("{value:?} {why}"),
        };
        let segment_ok = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_graphic() && c != '/');
        if !segment_ok(&self.prefix) {
            return Err(bad(
                "--prefix",
                &self.prefix,
                "is not one handle prefix segment (like 10.1000 or 20.500.12345)",
            ));
        }
        self.url_base = url_base(&self.url_base).map_err(|why| bad("--url-base", &self.url_base, why))?;
        for mirror in &mut self.mirrors {
            *mirror = url_base(mirror).map_err(|why| bad("--mirror", mirror, why))?;
        }
        if let Some(admin) = &self.admin {
            let (index, handle) = admin.split_once(':').map_or((None, admin.as_str()), |(i, h)| (Some(i), h));
            let index_ok = index.is_none_or(|i| i.parse::<u32>().is_ok_and(|i| i > 0));
            let handle_ok = handle.split_once('/').is_some_and(|(p, s)| segment_ok(p) && !s.is_empty());
            if !index_ok || !handle_ok {
                return Err(bad(
                    "--admin",
                    admin,
                    "is not HANDLE or INDEX:HANDLE (like 0.NA/10.1000 or 200:0.NA/10.1000)",
                ));
            }
        }
        Ok(self)
    }
}

/// A URL base in its one form: `http://` or `https://`, a host, no spaces, ending with `/`.
/// `text` as a base URL a name is appended to (http or https, a host, no query
/// or fragment), ending in `/`; else why not.
pub fn url_base(text: &str) -> std::result::Result<String, &'static str> {
    let rest = text.strip_prefix("https://").or_else(|| text.strip_prefix("http://"));
    let Some(rest) = rest else { return Err("is not an http:// or https:// URL") };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("has no host, or holds spaces");
    }
    if text.contains(['?', '#']) {
        return Err("has a query or fragment: a name is appended to it");
    }
    Ok(if text.ends_with('/') { text.to_string() } else { format!("{text}/") })
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

pub(crate) fn xml(text: &str) -> String {
    crate::markup::escape(text)
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
