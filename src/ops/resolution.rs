//! Resolution: what an identifier written by anyone (a repository name in any
//! spelling, an IBIp in any letter case) leads to among one or more collections,
//! and what an item is, as typed values a resolver serves: its identifiers,
//! bag-info, history and files (`ItemView`), and the Handle values that point at it
//! (`handle_values`). No HTTP here: `ibi serve --listen` turns these into
//! responses. Views are cached, and re-read when the store's stamp of the item
//! changes (or, for stores without stamps, after `UNSTAMPED_TTL`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bag::files::{FileKind, TreeEntry};
use crate::bag::history::Withdrawal;
use crate::bag::{self, manifest, BagFiles};
use crate::error::{Error, Result};
use crate::id::{Ibip, RepositoryName};
use crate::store::inventory::Forward;
use crate::store::{Slot, Status, Store, VersionRecord};

/// How long a view of an item in a store without stamps is trusted.
pub const UNSTAMPED_TTL: Duration = Duration::from_secs(2);
/// Views kept at most; the cache is emptied when it grows past this. A view is
/// about a kilobyte and more (its files, its bag-info): at 100,000 (the limit
/// before) a crawl of every item could hold over 100 MiB.
const CACHE_LIMIT: usize = 10_000;

/// One file an item's manifests list, as served.
#[derive(Debug, Clone, Serialize)]
pub struct FileView {
    pub path: String,
    /// Its size, when the listing of the item has it.
    pub size: Option<u64>,
    pub sha256: String,
    /// A payload file (under `data/`) or a tag file.
    pub payload: bool,
}

/// What a resolver shows of one item.
#[derive(Debug, Clone, Serialize)]
pub struct ItemView {
    pub name: RepositoryName,
    pub ibip: Option<Ibip>,
    pub title: Option<String>,
    pub status: Status,
    pub withdrawn: Option<Withdrawal>,
    /// The sha256 of its tagmanifest.
    pub identity: String,
    /// Every version, oldest first; the last is current.
    pub versions: Vec<VersionRecord>,
    /// bag-info, label and value, in file order.
    pub info: Vec<(String, String)>,
    /// Payload files, then tag files, each in path order.
    pub files: Vec<FileView>,
    #[serde(skip)]
    by_path: HashMap<String, usize>,
}

impl ItemView {
    /// The file at `path`, if the item's manifests list it.
    pub fn file(&self, path: &str) -> Option<&FileView> {
        self.by_path.get(path).map(|&i| &self.files[i])
    }

    /// When the current version was made (RFC 3339).
    pub fn modified(&self) -> Option<&str> {
        self.versions.last().map(|v| v.date.as_str())
    }
}

/// Where an identifier leads.
#[derive(Debug, Clone)]
pub enum Resolution {
    /// An item in service, in the store at this index, asked for by its canonical name.
    Item { store: usize, view: Arc<ItemView> },
    /// A tombstone.
    Withdrawn { store: usize, view: Arc<ItemView> },
    /// Another spelling of a name held (an IBIp, other letter case, an `@port`
    /// prefix): the canonical name to go to.
    Redirect(RepositoryName),
    /// A collection here sent it away (migrate, or a handover of the subsystem).
    Moved { name: RepositoryName, to: Forward },
    /// No collection holds or held it.
    Unknown,
}

struct Cached {
    view: Arc<ItemView>,
    stamp: Option<String>,
    read_at: Instant,
}

/// Resolves identifiers among collections, first match wins.
pub struct Resolver {
    stores: Vec<Box<dyn Store>>,
    cache: Mutex<HashMap<(usize, RepositoryName), Cached>>,
}

impl Resolver {
    pub fn new(stores: Vec<Box<dyn Store>>) -> Resolver {
        Resolver { stores, cache: Mutex::new(HashMap::new()) }
    }

    pub fn stores(&self) -> &[Box<dyn Store>] {
        &self.stores
    }

    /// Resolves `text`, a repository name or an IBIp as written (already decoded
    /// from a URL). Text that is neither is `Error::Invalid` or a parse error.
    pub fn resolve(&self, text: &str) -> Result<Resolution> {
        let first = text.split('/').next().unwrap_or("");
        if text.matches('/').count() == 1 && !first.contains('.') {
            let ibip = Ibip::parse(text)?;
            for store in &self.stores {
                if let Some(name) = store.aliases().alias(&ibip)? {
                    return Ok(Resolution::Redirect(name));
                }
            }
            for store in &self.stores {
                if let Some(name) = crate::store::own_name_for(store.as_ref(), &ibip) {
                    if let Some(to) = crate::store::forward_of(store.as_ref(), &name)? {
                        return Ok(Resolution::Moved { name, to });
                    }
                }
            }
            return Ok(Resolution::Unknown);
        }
        let name = RepositoryName::parse(text)?;
        for spelling in spellings(&name) {
            let found = self.find(&spelling)?;
            if matches!(found, Resolution::Unknown) {
                continue;
            }
            return Ok(if spelling.to_string() == text { found } else { Resolution::Redirect(spelling) });
        }
        Ok(Resolution::Unknown)
    }

    /// The item an OCFL object became (`deposit --ocfl`), by the object's
    /// id as its OCFL root names it (`info:fedora/…`), or the item an
    /// OCFL copy of ibi's names (`http://urlib.net/NAME`), in the first
    /// store that holds it; `None` when none does.
    pub fn resolve_ocfl_id(&self, id: &str) -> Result<Option<RepositoryName>> {
        let key = crate::ops::ocfl::import::object_key(id);
        let own = id.strip_prefix(crate::ops::ocfl::OBJECT_ID_BASE).and_then(|n| RepositoryName::parse(n).ok());
        for store in &self.stores {
            if let Some(name) = store.inventory().deposit_record(&key)? {
                return Ok(Some(name));
            }
            if let Some(name) = own.as_ref().filter(|n| matches!(store.slot(n), Ok(Slot::Item))) {
                return Ok(Some(name.clone()));
            }
        }
        Ok(None)
    }

    /// The item `name` (canonical) in the first store that holds or held it.
    fn find(&self, name: &RepositoryName) -> Result<Resolution> {
        for index in 0..self.stores.len() {
            let Some(view) = self.view(index, name)? else { continue };
            return Ok(match view.status {
                Status::Present => Resolution::Item { store: index, view },
                Status::Withdrawn => Resolution::Withdrawn { store: index, view },
                Status::Removed => continue,
            });
        }
        for store in &self.stores {
            if let Some(to) = crate::store::forward_of(store.as_ref(), name)? {
                return Ok(Resolution::Moved { name: name.clone(), to });
            }
        }
        Ok(Resolution::Unknown)
    }

    /// The view of `name` in store `index`, from the cache while it is fresh.
    pub fn view(&self, index: usize, name: &RepositoryName) -> Result<Option<Arc<ItemView>>> {
        let store = self.stores[index].as_ref();
        let stamp = store.item_stamp(name);
        let key = (index, name.clone());
        if let Some(cached) = self.cache.lock().expect("cache lock").get(&key) {
            let fresh = match (&stamp, &cached.stamp) {
                (Some(now), Some(then)) => now == then,
                // Stamped when read, unstamped now: the item is gone from its place.
                (None, Some(_)) => false,
                _ => cached.read_at.elapsed() < UNSTAMPED_TTL,
            };
            if fresh {
                return Ok(Some(cached.view.clone()));
            }
        }
        let Some(view) = load_view(store, name)? else { return Ok(None) };
        let view = Arc::new(view);
        let mut cache = self.cache.lock().expect("cache lock");
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(key, Cached { view: view.clone(), stamp, read_at: Instant::now() });
        Ok(Some(view))
    }

    /// Forgets the view of `name` (its bytes were found to differ from it).
    pub fn forget(&self, index: usize, name: &RepositoryName) {
        self.cache.lock().expect("cache lock").remove(&(index, name.clone()));
    }
}

/// The names `name` may stand for: itself, and for a legacy `word@port` prefix the
/// same name with `word.port` (or, for port 80, no port), as the standard writes it now.
fn spellings(name: &RepositoryName) -> Vec<RepositoryName> {
    let mut names = vec![name.clone()];
    if let Some((crate::id::name::PortSeparator::At, port)) = name.prefix().port() {
        let text = name.to_string();
        let modern = if port == 80 { String::new() } else { format!(".{port}") };
        let rewritten = text.replacen(&format!("@{port}/"), &format!("{modern}/"), 1);
        if let Ok(other) = RepositoryName::parse(&rewritten) {
            names.push(other);
        }
    }
    names
}

/// A browse request: filters (each optional) and the page wanted (0-based).
#[derive(Debug, Clone, Default)]
pub struct BrowseQuery {
    /// The start of the repository name, in any letter case.
    pub prefix: Option<String>,
    /// The start of the item's date (RFC 3339: `2009`, `2009-02-16`).
    pub date: Option<String>,
    /// Words that must all appear in the item's bag-info (any letter case).
    pub text: Option<String>,
    pub page: usize,
    pub per_page: usize,
}

/// One line of a browse page.
#[derive(Debug, Clone, Serialize)]
pub struct BrowseEntry {
    pub name: RepositoryName,
    pub ibip: Option<Ibip>,
    /// When the name was minted (RFC 3339).
    pub date: String,
    pub title: Option<String>,
    pub version: u32,
}

/// A page of items in service, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct BrowsePage {
    pub items: Vec<BrowseEntry>,
    pub page: usize,
    /// How many items match in all.
    pub total: usize,
}

/// How deep browse pages go: the items up to the end of the page asked for are
/// kept while every record is read, so a page beyond this many items is
/// refused (a search by name prefix or date finds older items).
pub const BROWSE_DEPTH: usize = 10_000;

/// An item on its way to a browse page: what the page shows of it but its title.
struct Candidate {
    first: String,
    index: usize,
    ibip: Option<Ibip>,
    version: u32,
}

/// The order of a browse page: newest first by the date the name encodes
/// (RFC 3339 texts do not sort: "50Z" > "50.2Z"), then by name.
type BrowseKey = (std::cmp::Reverse<crate::id::Timestamp>, RepositoryName);

impl Resolver {
    /// Items in service of every collection (each name once, from the first
    /// collection that holds it), newest first, filtered and cut into pages,
    /// from the inventories; bag-info is read only to search it and for the
    /// titles of the page shown. Memory holds the items up to the page asked
    /// for (at most `BROWSE_DEPTH`), and with several collections 8 bytes an
    /// item to see each name once; never every record.
    pub fn browse(&self, query: &BrowseQuery) -> Result<BrowsePage> {
        let per_page = query.per_page.max(1);
        let keep = query.page.saturating_add(1).saturating_mul(per_page);
        if keep > BROWSE_DEPTH.max(per_page) {
            let problem =
                format!("pages end at the {BROWSE_DEPTH}th item; search by name prefix or date for older items");
            return Err(Error::Invalid { what: format!("browse page {}", query.page + 1), problem });
        }
        let words: Option<Vec<String>> = query
            .text
            .as_deref()
            .filter(|t| !t.trim().is_empty())
            .map(|text| text.split_whitespace().map(folded).collect());
        let mut seen = (self.stores.len() > 1).then(std::collections::HashSet::<u64>::new);
        let (mut best, mut total) = (std::collections::BTreeMap::<BrowseKey, Candidate>::new(), 0);
        for (index, store) in self.stores.iter().enumerate() {
            for record in store.inventory().all_records() {
                let record = record?;
                let first = record.versions.first().map(|v| v.date.clone()).unwrap_or_default();
                if record.status != Status::Present || !matches_name(query, &record.name, &first) {
                    continue;
                }
                // A hash of each name, not the name: a collision hides one item
                // from a page (about one chance in 10^7 at a million items).
                if seen.as_mut().is_some_and(|seen| !seen.insert(super::hash64(&record.name))) {
                    continue;
                }
                if words.as_ref().is_some_and(|words| !self.info_has(index, &record.name, words)) {
                    continue;
                }
                total += 1;
                let version = record.versions.last().map_or(1, |v| v.number);
                let key = (std::cmp::Reverse(record.name.date()), record.name);
                if best.len() < keep || best.last_key_value().is_some_and(|(last, _)| key < *last) {
                    best.insert(key, Candidate { first, index, ibip: record.ibip, version });
                    if best.len() > keep {
                        best.pop_last();
                    }
                }
            }
        }
        let items = best
            .into_iter()
            .skip(query.page.saturating_mul(per_page))
            .map(|((_, name), c)| BrowseEntry {
                title: self.view(c.index, &name).ok().flatten().and_then(|v| v.title.clone()),
                name,
                ibip: c.ibip,
                version: c.version,
                date: c.first,
            })
            .collect();
        Ok(BrowsePage { items, page: query.page, total })
    }

    /// Whether the item's bag-info holds every word, read from the store (not
    /// through the cache of views, which a search of every item would flush).
    fn info_has(&self, index: usize, name: &RepositoryName, words: &[String]) -> bool {
        let Ok(info) = crate::store::item_info(self.stores[index].as_ref(), name) else { return false };
        let text = folded(&info.fields.iter().map(|(l, v)| format!("{l}: {v}\n")).collect::<String>());
        words.iter().all(|w| text.contains(w.as_str()))
    }
}

/// Text as search compares it: lower case, without accents (decomposed, the
/// combining marks dropped), so that `relatorio` finds `Relatório`.
pub fn folded(text: &str) -> String {
    use unicode_normalization::{char::is_combining_mark, UnicodeNormalization};
    text.nfkd().filter(|c| !is_combining_mark(*c)).collect::<String>().to_lowercase()
}

fn matches_name(query: &BrowseQuery, name: &RepositoryName, date: &str) -> bool {
    let prefix_ok = query.prefix.as_deref().is_none_or(|p| {
        let name = name.to_string();
        name.len() >= p.len() && name.is_char_boundary(p.len()) && name[..p.len()].eq_ignore_ascii_case(p)
    });
    prefix_ok && query.date.as_deref().is_none_or(|d| date.starts_with(d))
}

/// Reads what `store` holds and records of `name`; `None` when it does not hold
/// it (never did, or it was taken away). An item at its place is served even if
/// the inventory records it as removed (`verify` reports that disagreement).
pub fn load_view(store: &dyn Store, name: &RepositoryName) -> Result<Option<ItemView>> {
    let record = store.inventory().records(std::slice::from_ref(name))?.pop().flatten();
    match store.slot(name)? {
        Slot::Item => {}
        Slot::Empty => return Ok(None),
        Slot::Foreign(place) => {
            return Err(Error::Data {
                what: format!("item {name}"),
                problem: format!("{place} is a symlink or a file, not an item folder; refusing to serve it"),
            })
        }
    }
    let files = store.item_files(name);
    let info = crate::store::item_info(store, name)?;
    let tagmanifest = read_text(files.as_ref(), name, bag::TAGMANIFEST)?;
    let identity = crate::digest::of_bytes(tagmanifest.as_bytes(), &[]).sha256().to_string();
    // A record that says "removed" of an item at its place is wrong (verify says so):
    // the bag is what is served.
    let record = match record {
        Some(record) if record.status != Status::Removed => record,
        _ => crate::store::ItemRecord::from_bag(files.as_ref(), name)?,
    };
    let listed = listed_files(files.as_ref(), name, &tagmanifest, &identity)?;
    let by_path = listed.iter().enumerate().map(|(i, f)| (f.path.clone(), i)).collect();
    Ok(Some(ItemView {
        name: name.clone(),
        ibip: crate::store::ibip_in(&info),
        title: info
            .first("Title")
            .or_else(|| info.first("External-Description"))
            .or_else(|| listed.iter().find(|f| f.payload).map(|f| f.path.strip_prefix("data/").unwrap_or(&f.path)))
            .map(str::to_string),
        status: record.status,
        withdrawn: record.withdrawn.clone(),
        identity,
        versions: record.versions.clone(),
        info: info.fields.clone(),
        files: listed,
        by_path,
    }))
}

fn read_text(files: &dyn BagFiles, name: &RepositoryName, rel: &str) -> Result<String> {
    let bad = |problem: String| Error::Data { what: format!("{name}/{rel}"), problem };
    let bytes = files.read(rel).map_err(|e| bad(e.to_string()))?;
    String::from_utf8(bytes).map_err(|_| bad("it is not UTF-8".into()))
}

/// The files the manifests list (payload) and the tagmanifest lists (tag files),
/// plus the tagmanifest itself, whose sha256 is the item's identity.
fn listed_files(
    files: &dyn BagFiles,
    name: &RepositoryName,
    tagmanifest: &str,
    identity: &str,
) -> Result<Vec<FileView>> {
    let payload = read_text(files, name, bag::MANIFEST)?;
    let sizes: HashMap<String, u64> = files
        .entries()
        .into_iter()
        .filter_map(|entry| match entry.ok()? {
            TreeEntry { rel: Ok(rel), kind: FileKind::File { size } } => Some((rel, size)),
            _ => None,
        })
        .collect();
    let sha256_len = crate::digest::Algorithm::Sha256.hex_len();
    let mut listed = Vec::new();
    for (text, is_payload) in [(payload.as_str(), true), (tagmanifest, false)] {
        let (mut entries, _problems) = manifest::parse(text, sha256_len);
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        listed.extend(entries.into_iter().filter(|e| manifest::check_path(&e.path).is_ok()).map(|e| FileView {
            size: sizes.get(&e.path).copied(),
            path: e.path,
            sha256: e.digest,
            payload: is_payload,
        }));
    }
    listed.push(FileView {
        path: bag::TAGMANIFEST.to_string(),
        size: sizes.get(bag::TAGMANIFEST).copied(),
        sha256: identity.to_string(),
        payload: false,
    });
    Ok(listed)
}

/// One Handle value, as the Handle proxy's JSON API gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HandleValue {
    pub index: u32,
    #[serde(rename = "type")]
    pub kind: String,
    pub data: HandleData,
    pub ttl: u32,
    pub timestamp: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HandleData {
    pub format: String,
    pub value: String,
}

/// The Handle type of an item's identity digest value.
pub const IDENTITY_TYPE: &str = "IBI_IDENTITY_SHA256";
const TTL: u32 = 86400;

fn value(index: u32, kind: &str, value: String, timestamp: &str) -> HandleValue {
    let data = HandleData { format: "string".into(), value };
    HandleValue { index, kind: kind.into(), data, ttl: TTL, timestamp: timestamp.into() }
}

/// The values of an item's handle: its URL at `url_base`, the 10320/loc list of
/// this place and `mirrors`, and its identity digest (the same indexes as `ibi handles`).
pub fn handle_values(view: &ItemView, url_base: &str, mirrors: &[String]) -> Vec<HandleValue> {
    let stamp = view.modified().unwrap_or_default();
    let name = &view.name;
    let mut values = vec![
        value(1, "URL", format!("{url_base}{name}"), stamp),
        value(2, "10320/loc", super::handles::locations(name, url_base, mirrors), stamp),
    ];
    if let Some(w) = &view.withdrawn {
        values.push(value(3, "DESC", format!("withdrawn {}: {}", w.date, w.reason), stamp));
    }
    values.push(value(4, IDENTITY_TYPE, view.identity.clone(), stamp));
    values
}

/// The one value of an IBIp's handle: an HS_ALIAS to the item's name.
pub fn alias_values(view: &ItemView) -> Vec<HandleValue> {
    vec![value(1, "HS_ALIAS", view.name.to_string(), view.modified().unwrap_or_default())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_values_of_a_withdrawn_item_say_why() {
        let name = RepositoryName::parse("sid.inpe.br/mtc-m18/2009/02.16.17.46").unwrap();
        let view = ItemView {
            name,
            ibip: None,
            title: None,
            status: Status::Withdrawn,
            withdrawn: Some(Withdrawal { date: "2026-01-01T00:00:00Z".into(), reason: "duplicate".into() }),
            identity: "ab".repeat(32),
            versions: vec![VersionRecord { number: 1, date: "2009-02-16T17:46:00Z".into(), digest: "cd".repeat(32) }],
            info: Vec::new(),
            files: Vec::new(),
            by_path: HashMap::new(),
        };
        let values = handle_values(&view, "http://h/", &["http://m/".into()]);
        let kinds: Vec<&str> = values.iter().map(|v| v.kind.as_str()).collect();
        assert_eq!(kinds, ["URL", "10320/loc", "DESC", IDENTITY_TYPE]);
        assert_eq!(values[0].data.value, "http://h/sid.inpe.br/mtc-m18/2009/02.16.17.46");
        assert!(values[1].data.value.contains("href=\"http://m/sid.inpe.br/mtc-m18/2009/02.16.17.46\" weight=\"0\""));
        assert_eq!(values[2].data.value, "withdrawn 2026-01-01T00:00:00Z: duplicate");
    }
}
