//! Streaming, sorted walk over a collection's items: four directory levels,
//! one sorted listing per level held at a time (`Listing`: item folder names
//! as 8-byte keys, `time_key`; any other name front-coded). All of a year's
//! items share one folder, so that folder's listing is the most a walk holds;
//! nothing else grows with the collection, and each item's name is made only
//! as it is visited. Dot-entries (`.ibi`, `.ibip`) are
//! skipped; anything that is not an item, and any folder that cannot be
//! listed, is reported as a stray entry, so one bad entry never stops a walk.
//! Only an unreadable root is an error.

use std::fs;
use std::path::PathBuf;

use crate::error::{IoContext, Result};
use crate::id::RepositoryName;
use crate::store::local::time_key;

/// What the walk finds: an item's name (its path is the layout's to make, when
/// a caller needs it), or an entry that is not one, with its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Item(RepositoryName),
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

/// One folder's names as they are read: an item folder's name of the usual
/// form as its 8-byte key (`time_key`, with its kind in the low two bits) when
/// `keys` is set, any other packed into one buffer, with where each starts,
/// its length and what it is (8 bytes a name; a folder's names past 4 GiB of
/// text are not listed). `sorted` makes the `Listing`.
#[derive(Default)]
struct Gathered {
    keys: Option<Vec<u64>>,
    text: Vec<u8>,
    names: Vec<(u32, u16, Kind)>,
    /// Why a name's type could not be read, by where its text starts, for the
    /// rare `Kind::Unreadable`.
    unreadable: Vec<(u32, String)>,
}

/// One folder's names in order, handed out in turn: the keys sorted (a
/// year's folder holds every item of the year, so a million of them take
/// 8 MB, read, sorted and walked; as text and places they took 27 MB while
/// read and sorted, then 9 MB front-coded, and as a `String` and a `Result`
/// each, 70 MB), merged with the other names, each written as the length it
/// shares with the name before, then the rest (front coding).
#[derive(Default)]
struct Listing {
    keys: Vec<u64>,
    keys_at: usize,
    /// The name of `keys[keys_at]` once it has been compared.
    unpacked: Vec<u8>,
    /// Whether `current` holds the next name of `coded`, not yet handed out,
    /// and its kind.
    current_ready: Option<u8>,
    /// Per name: its kind, the bytes it shares with the name before, the
    /// length of the rest (two bytes, little-endian), the rest.
    coded: Vec<u8>,
    /// The reasons of the `Kind::Unreadable` names, in their order.
    unreadable: std::collections::VecDeque<String>,
    read_at: usize,
    current: Vec<u8>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    NotDir,
    Unreadable,
}

impl Gathered {
    fn push(&mut self, name: &str, is_dir: std::result::Result<bool, String>) -> std::result::Result<(), String> {
        if let (Some(keys), Ok(is_dir)) = (self.keys.as_mut(), &is_dir) {
            if let Some(key) = time_key::pack(name.as_bytes()) {
                let kind = if *is_dir { Kind::Dir } else { Kind::NotDir };
                keys.push(key << 2 | kind as u64);
                return Ok(());
            }
        }
        let (Ok(start), Ok(_)) = (u32::try_from(self.text.len()), u32::try_from(self.text.len() + name.len())) else {
            return Err("its names hold more than 4 GiB of text: not listed".to_string());
        };
        // No file system gives a name of more than 255 bytes.
        let Ok(length) = u16::try_from(name.len()) else {
            return Err("it holds a name of more than 64 KiB: not listed".to_string());
        };
        let kind = match is_dir {
            Ok(true) => Kind::Dir,
            Ok(false) => Kind::NotDir,
            Err(why) => {
                self.unreadable.push((start, why));
                Kind::Unreadable
            }
        };
        self.names.push((start, length, kind));
        self.text.extend_from_slice(name.as_bytes());
        Ok(())
    }

    fn text(&self, start: u32, length: u16) -> &[u8] {
        &self.text[start as usize..start as usize + usize::from(length)]
    }

    /// The names sorted, or sorted with a `/` after each (the folders of a
    /// level above the items), front-coded.
    fn sorted(mut self, as_folders: bool) -> Listing {
        let mut names = std::mem::take(&mut self.names);
        let mut unreadable = std::mem::take(&mut self.unreadable);
        let name = |&(start, length, _): &(u32, u16, Kind)| self.text(start, length);
        match as_folders {
            true => names.sort_unstable_by(|a, b| name(a).iter().chain(b"/").cmp(name(b).iter().chain(b"/"))),
            false => names.sort_unstable_by(|a, b| name(a).cmp(name(b))),
        }
        let mut keys = self.keys.take().unwrap_or_default();
        keys.sort_unstable();
        let mut listing = Listing { keys, coded: Vec::with_capacity(names.len() * 10), ..Listing::default() };
        let mut before: &[u8] = &[];
        for &(start, length, kind) in &names {
            let text = self.text(start, length);
            let shared = text.iter().zip(before).take_while(|(a, b)| a == b).count().min(usize::from(u8::MAX));
            let rest = u16::try_from(text.len() - shared).expect("a name's length fits its u16");
            listing.coded.extend_from_slice(&[kind as u8, shared as u8]);
            listing.coded.extend_from_slice(&rest.to_le_bytes());
            listing.coded.extend_from_slice(&text[shared..]);
            if kind == Kind::Unreadable {
                let at = unreadable.iter().position(|(from, _)| *from == start);
                listing.unreadable.push_back(at.map(|at| unreadable.swap_remove(at).1).unwrap_or_default());
            }
            before = text;
        }
        listing
    }
}

impl Listing {
    /// Decodes the next front-coded name into `current`; its kind, or `None` at the end.
    fn decode_next(&mut self) -> Option<u8> {
        let &[kind, shared, rest_low, rest_high] = self.coded.get(self.read_at..self.read_at + 4)? else {
            return None;
        };
        let rest = self.read_at + 4..self.read_at + 4 + usize::from(u16::from_le_bytes([rest_low, rest_high]));
        self.current.truncate(usize::from(shared));
        self.current.extend_from_slice(&self.coded[rest.clone()]);
        self.read_at = rest.end;
        Some(kind)
    }

    /// The next key's name and kind, if it comes before the next text name.
    fn next_key(&mut self) -> Option<Listed> {
        let key = *self.keys.get(self.keys_at)?;
        time_key::unpack(key >> 2, &mut self.unpacked);
        if self.current_ready.is_some() && self.current < self.unpacked {
            return None;
        }
        self.keys_at += 1;
        // Unpacked names are ASCII digits and dots.
        let name = String::from_utf8_lossy(&self.unpacked).into_owned();
        Some((name, Ok(key & 3 == Kind::Dir as u64)))
    }
}

impl Iterator for Listing {
    type Item = Listed;

    fn next(&mut self) -> Option<Listed> {
        if self.current_ready.is_none() {
            self.current_ready = self.decode_next();
        }
        if let Some(listed) = self.next_key() {
            return Some(listed);
        }
        let kind = self.current_ready.take()?;
        let name = String::from_utf8_lossy(&self.current).into_owned();
        let is_dir = match kind {
            k if k == Kind::Dir as u8 => Ok(true),
            k if k == Kind::NotDir as u8 => Ok(false),
            _ => Err(self.unreadable.pop_front().unwrap_or_default()),
        };
        Some((name, is_dir))
    }
}

impl ItemWalker {
    /// The items only, in name order: for callers that do not report strays
    /// (`verify` does, walking `Entry`s itself).
    pub fn items(self) -> impl Iterator<Item = Result<RepositoryName>> + Send {
        self.filter_map(|entry| match entry {
            Ok(Entry::Item(name)) => Some(Ok(name)),
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
        let mut listing = Gathered::default();
        // A folder's size foretells about how many names it holds (tmpfs counts
        // 20 bytes a name, ext4 its blocks of entries of 12 bytes and more), so a
        // year's folder is listed into room made once, not grown by doubling.
        let hint = fs::symlink_metadata(&dir).map_or(0, |m| m.len() / 20).min(1 << 22) as usize;
        if components.len() + 1 == DEPTH {
            listing.keys = Some(Vec::with_capacity(hint));
        } else {
            listing.names.reserve(hint);
            listing.text.reserve(hint * 20);
        }
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
        Ok(listing.sorted(components.len() + 1 < DEPTH))
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

/// The entry `time` in the year folder `folder`: an item, or a stray (with
/// its path). Its name is parsed from its time alone when the last item lies
/// in the same folder (the same canonical prefix and year), kept as written;
/// otherwise whole, and it becomes the last.
fn visit_item(
    (root, folder): (&std::path::Path, &[String]),
    time: String,
    is_dir: std::result::Result<bool, String>,
    last: &mut Option<(RepositoryName, Vec<String>)>,
) -> Entry {
    let stray = |time: &str, why: String| Entry::Stray { path: path_of(root, folder, Some(time)), why };
    match is_dir {
        Err(e) => return stray(&time, format!("cannot be inspected: {e}")),
        Ok(false) => return stray(&time, "not a directory".into()),
        Ok(true) => {}
    }
    let sibling = last.as_ref().filter(|(_, in_folder)| in_folder.as_slice() == folder);
    if let Some(name) = sibling.and_then(|(name, _)| name.sibling(&time)) {
        return Entry::Item(name);
    }
    let mut components = folder.to_vec();
    components.push(time);
    let parsed = RepositoryName::parse(&components.join("/"));
    let time = components.last().map_or("", String::as_str);
    match parsed {
        Ok(name) if name.components().as_slice() == components.as_slice() => {
            *last = Some((name.clone(), folder.to_vec()));
            Entry::Item(name)
        }
        Ok(_) => stray(time, "not in canonical (lower-case) form".into()),
        Err(e) => stray(time, format!("not a repository name: {}", e.problem)),
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

#[cfg(test)]
mod tests {
    /// A listed name costs its text and 8 bytes (a million names of a year's
    /// folder: 8 MB of places, where 16 bytes a name took 16 MB).
    #[test]
    fn a_listed_names_place_is_eight_bytes() {
        assert_eq!(std::mem::size_of::<(u32, u16, super::Kind)>(), 8);
    }

    /// A listing hands out the names it gathered, sorted, each whole and with
    /// its kind (front coding drops the bytes a name shares with the one before).
    #[test]
    fn a_listing_hands_out_each_name_sorted_and_whole() {
        // Two long names share more bytes than a shared length holds (255).
        let (long, longer) = ("x".repeat(300), format!("{}y", "x".repeat(300)));
        let names = [
            "11.27.00.46.58.2107",
            "11.27.00.46.58.21",
            "11.27.00.46.58.2",
            "a",
            "",
            "11.27.00.46.58.2108",
            &long,
            &longer,
        ];
        let mut gathered = super::Gathered::default();
        for (i, name) in names.iter().enumerate() {
            let kind = match i % 3 {
                0 => Ok(true),
                1 => Ok(false),
                _ => Err(format!("why {i}")),
            };
            gathered.push(name, kind).unwrap();
        }
        let listed: Vec<_> = gathered.sorted(false).collect();
        let mut expected: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let kind = match i % 3 {
                    0 => Ok(true),
                    1 => Ok(false),
                    _ => Err(format!("why {i}")),
                };
                (name.to_string(), kind)
            })
            .collect();
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(listed, expected);
    }

    /// An item folder's listing keeps names of the usual form as keys and the
    /// rest as text, and hands them out merged in the order of their text.
    #[test]
    fn a_listing_of_keys_and_text_hands_out_one_order() {
        let names = [
            "11.27.00.46.58.2107",
            "11.27.00.46.58.21",
            "11.27.00.46.58",
            "11.27.00.46.58.",
            "11.27.00.46",
            "11.27.00.46.58.2",
            "11.27.00.46.58.2x",
            "stray",
            "11.27.00.46.58.21070",
            "01.01.00.00",
            "00.stray",
            "12.31.23.59.59.999999999",
            "12.31.23.59.59.9999999999",
        ];
        let kind_of = |i: usize| match i % 4 {
            0 | 3 => Ok(true),
            1 => Ok(false),
            _ => Err(format!("why {i}")),
        };
        let mut gathered = super::Gathered { keys: Some(Vec::new()), ..Default::default() };
        for (i, name) in names.iter().enumerate() {
            gathered.push(name, kind_of(i)).unwrap();
        }
        assert!(gathered.keys.as_ref().is_some_and(|keys| keys.len() >= 7), "the usual forms are kept as keys");
        let listed: Vec<_> = gathered.sorted(false).collect();
        let mut expected: Vec<_> = names.iter().enumerate().map(|(i, n)| (n.to_string(), kind_of(i))).collect();
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(listed, expected);
    }
}
