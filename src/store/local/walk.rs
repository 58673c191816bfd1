//! Streaming, sorted walk over a collection's items: four directory levels,
//! one sorted listing per level held at a time, packed (`Listing`, about 36
//! bytes a name). All of a year's items share one folder, so that folder's
//! listing is the most a walk holds; nothing else grows with the collection,
//! and each item's name is made only as it is visited. Dot-entries (`.ibi`, `.ibip`) are
//! skipped; anything that is not an item, and any folder that cannot be
//! listed, is reported as a stray entry, so one bad entry never stops a walk.
//! Only an unreadable root is an error.

use std::fs;
use std::path::PathBuf;

use crate::error::{IoContext, Result};
use crate::id::RepositoryName;
use crate::store::local::Item;

/// What the walk finds: an item, or an entry that is not one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Item(Item),
    Stray { path: PathBuf, why: String },
}

pub struct ItemWalker {
    root: PathBuf,
    /// Per open level: the components so far and the remaining sorted names, each
    /// with whether it is a real directory (from the listing's file type, or `Err`).
    stack: Vec<(Vec<String>, Listing)>,
    started: bool,
    /// Entries met in a listing that are strays before they are visited (names that
    /// are not UTF-8), returned before the walk goes on.
    pending: Vec<Entry>,
    /// The last item found and its folder's components: the next in that folder
    /// shares its prefix and year, so only its time is parsed (`RepositoryName::sibling`).
    last: Option<(RepositoryName, Vec<String>)>,
}

const DEPTH: usize = 4;

/// One name of a listing and whether it is a real directory (never through a link).
type Listed = (String, std::result::Result<bool, String>);

/// One folder's names, packed into one buffer and sorted, handed out in turn.
/// A year's folder holds every item of the year: a million names are some
/// 20 MB of text here, where a `String` and a `Result` each took about 70 MB.
#[derive(Default)]
struct Listing {
    text: Vec<u8>,
    /// Each name: where its text starts and ends in `text`, and what it is
    /// (16 bytes a name; a folder's names past 4 GiB of text are not listed).
    names: Vec<(u32, u32, Kind)>,
    /// Why a name's type could not be read, for the rare `Kind::Unreadable`.
    unreadable: Vec<String>,
    next: usize,
}

#[derive(Clone, Copy)]
enum Kind {
    Dir,
    NotDir,
    Unreadable(u32),
}

impl Listing {
    fn push(&mut self, name: &str, is_dir: std::result::Result<bool, String>) -> std::result::Result<(), String> {
        let (start, end) = (self.text.len(), self.text.len() + name.len());
        let (Ok(start), Ok(end)) = (u32::try_from(start), u32::try_from(end)) else {
            return Err("its names hold more than 4 GiB of text: not listed".to_string());
        };
        let kind = match is_dir {
            Ok(true) => Kind::Dir,
            Ok(false) => Kind::NotDir,
            Err(why) => {
                self.unreadable.push(why);
                Kind::Unreadable(self.unreadable.len() as u32 - 1)
            }
        };
        self.names.push((start, end, kind));
        self.text.extend_from_slice(name.as_bytes());
        Ok(())
    }

    fn text(&self, (start, end): (u32, u32)) -> &[u8] {
        &self.text[start as usize..end as usize]
    }

    /// Sorts by name, or by name and a `/` after it (a folder of a level above the items).
    fn sort(&mut self, as_folders: bool) {
        let mut names = std::mem::take(&mut self.names);
        let name = |&(start, end, _): &(u32, u32, Kind)| self.text((start, end));
        match as_folders {
            true => names.sort_unstable_by(|a, b| name(a).iter().chain(b"/").cmp(name(b).iter().chain(b"/"))),
            false => names.sort_unstable_by(|a, b| name(a).cmp(name(b))),
        }
        self.names = names;
    }
}

impl Iterator for Listing {
    type Item = Listed;

    fn next(&mut self) -> Option<Listed> {
        let &(start, end, kind) = self.names.get(self.next)?;
        self.next += 1;
        let name = String::from_utf8_lossy(self.text((start, end))).into_owned();
        let is_dir = match kind {
            Kind::Dir => Ok(true),
            Kind::NotDir => Ok(false),
            Kind::Unreadable(at) => Err(std::mem::take(&mut self.unreadable[at as usize])),
        };
        Some((name, is_dir))
    }
}

impl ItemWalker {
    /// The items only, in name order: for callers that do not report strays
    /// (`verify` does, walking `Entry`s itself).
    pub fn items(self) -> impl Iterator<Item = Result<Item>> + Send {
        self.filter_map(|entry| match entry {
            Ok(Entry::Item(item)) => Some(Ok(item)),
            Ok(Entry::Stray { .. }) => None,
            Err(e) => Some(Err(e)),
        })
    }
}

impl ItemWalker {
    pub fn new(root: PathBuf) -> Self {
        ItemWalker { root, stack: Vec::new(), started: false, pending: Vec::new(), last: None }
    }

    /// The sorted non-dot names in a directory. Levels 1–3 sort with a trailing `/`
    /// so the walk order equals the order of whole names.
    fn listing(&mut self, components: &[String]) -> Result<Listing> {
        let mut dir = self.root.clone();
        dir.extend(components);
        let mut listing = Listing::default();
        // A folder's size foretells about how many names it holds (tmpfs counts
        // 20 bytes a name, ext4 its blocks of entries of 12 bytes and more), so a
        // year's folder is listed into room made once, not grown by doubling.
        let hint = fs::symlink_metadata(&dir).map_or(0, |m| m.len() / 20).min(1 << 22) as usize;
        listing.names.reserve(hint);
        listing.text.reserve(hint * 20);
        for entry in fs::read_dir(&dir).with_path("list", &dir)? {
            let entry = entry.with_path("list", &dir)?;
            match entry.file_name().into_string() {
                Ok(name) if name.starts_with('.') => {}
                // The type comes with the listing (d_type); a symlink is never a directory.
                Ok(name) => {
                    let is_dir = entry.file_type().map(|t| t.is_dir()).map_err(|e| e.to_string());
                    if let Err(why) = listing.push(&name, is_dir) {
                        self.pending.push(Entry::Stray { path: dir.clone(), why });
                        break;
                    }
                }
                Err(raw) => {
                    let why = "its name is not UTF-8, so it cannot be part of a repository name".to_string();
                    self.pending.push(Entry::Stray { path: dir.join(raw), why });
                }
            }
        }
        listing.sort(components.len() + 1 < DEPTH);
        Ok(listing)
    }

    /// A folder above the items' depth: listed, and its names visited next.
    fn visit(&mut self, components: Vec<String>, is_dir: std::result::Result<bool, String>) -> Option<Result<Entry>> {
        let path = path_of(&self.root, &components, None);
        match is_dir {
            Err(e) => return Some(Ok(Entry::Stray { path, why: format!("cannot be inspected: {e}") })),
            Ok(false) => return Some(Ok(Entry::Stray { path, why: "not a directory".into() })),
            Ok(true) => {}
        }
        match self.listing(&components) {
            Ok(names) => self.stack.push((components, names)),
            Err(e) => return Some(Ok(Entry::Stray { path, why: format!("cannot be listed: {e}") })),
        }
        None
    }
}

/// The path of `components` (and `last`) under `root`, made at its length at once.
fn path_of(root: &std::path::Path, components: &[String], last: Option<&str>) -> PathBuf {
    let parts = components.iter().map(String::as_str).chain(last);
    let length = root.as_os_str().len() + parts.clone().map(|part| part.len() + 1).sum::<usize>();
    let mut path = PathBuf::with_capacity(length);
    path.push(root);
    parts.for_each(|part| path.push(part));
    path
}

/// The entry `time` in the year folder `folder`: an item, or a stray. Its name
/// is parsed from its time alone when the last item lies in the same folder
/// (the same canonical prefix and year), kept as written; otherwise whole,
/// and it becomes the last. Neither the folder's components nor the root are
/// copied but into the item's path.
fn visit_item(
    (root, folder): (&std::path::Path, &[String]),
    time: String,
    is_dir: std::result::Result<bool, String>,
    last: &mut Option<(RepositoryName, Vec<String>)>,
) -> Entry {
    let path = path_of(root, folder, Some(&time));
    match is_dir {
        Err(e) => return Entry::Stray { path, why: format!("cannot be inspected: {e}") },
        Ok(false) => return Entry::Stray { path, why: "not a directory".into() },
        Ok(true) => {}
    }
    let sibling = last.as_ref().filter(|(_, in_folder)| in_folder.as_slice() == folder);
    if let Some(name) = sibling.and_then(|(name, _)| name.sibling(&time)) {
        return Entry::Item(Item { name, path });
    }
    let mut components = folder.to_vec();
    components.push(time);
    match RepositoryName::parse(&components.join("/")) {
        Ok(name) if name.components().as_slice() == components.as_slice() => {
            *last = Some((name.clone(), folder.to_vec()));
            Entry::Item(Item { name, path })
        }
        Ok(_) => Entry::Stray { path, why: "not in canonical (lower-case) form".into() },
        Err(e) => Entry::Stray { path, why: format!("not a repository name: {}", e.problem) },
    }
}

impl Iterator for ItemWalker {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            self.started = true;
            match self.listing(&[]) {
                Ok(names) => self.stack.push((Vec::new(), names)),
                Err(e) => return Some(Err(e)),
            }
        }
        loop {
            if let Some(entry) = self.pending.pop() {
                return Some(Ok(entry));
            }
            let (components, names) = self.stack.last_mut()?;
            let Some((name, is_dir)) = names.next() else {
                self.stack.pop();
                continue;
            };
            if components.len() + 1 == DEPTH {
                return Some(Ok(visit_item((&self.root, components), name, is_dir, &mut self.last)));
            }
            let mut child = components.clone();
            child.push(name);
            if let Some(found) = self.visit(child, is_dir) {
                return Some(found);
            }
        }
    }
}
