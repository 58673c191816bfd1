//! Walks a four-level name tree in a bucket (the commit markers, or the inventory
//! records): the folders of the first three levels by delimiter, level by level,
//! then each year's leaves a page of its flat listing at a time, as the walk
//! reaches them (a year of a large collection is never held at once). The
//! leaves come out in `RepositoryName` order, as S3 lists keys in byte order.

use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as Key;

use crate::error::Result;
use crate::id::RepositoryName;
use crate::store::s3::keys::{KeyForm, Keys};
use crate::store::s3::objects::Objects;
use crate::store::Listed;

/// The year folders of the tree under `root`, in order.
fn year_folders(objects: &Objects, root: &Key) -> Result<Vec<Key>> {
    let mut level = vec![root.clone()];
    for _ in 0..3 {
        let mut next = Vec::new();
        for folder in &level {
            let mut found = objects.run(objects.list_level(folder))?.common_prefixes;
            found.sort_by(|a, b| format!("{a}/").cmp(&format!("{b}/")));
            next.extend(found);
        }
        level = next;
    }
    Ok(level)
}

/// How many keys one page of a year's listing holds (S3's own page).
const PAGE: usize = 1000;

/// The leaves of one year folder, a page of its flat listing at a time (a
/// year of a large collection is millions of keys, never held at once): names,
/// or strays, a key that does not parse as a name, or the keys under a name's
/// key (a folder where an item's marker should be), named once.
fn year_leaves(objects: &Objects, root: Key, year: Key) -> impl Iterator<Item = Result<Listed>> + '_ {
    let mut after = Some(year.clone());
    let mut last_folder: Option<String> = None;
    std::iter::from_fn(move || {
        let offset = after.take()?;
        let listed = objects.list_after(&year, &offset).take(PAGE).try_collect::<Vec<_>>();
        let page = match objects.run(listed) {
            Ok(page) => page,
            Err(e) => return Some(vec![Err(e)]),
        };
        if page.len() == PAGE {
            after = page.last().map(|meta| meta.location.clone());
        }
        // Some servers (SeaweedFS) list a folder as an object of its own key.
        let metas = page.iter().filter(|meta| meta.location != year);
        let rels = metas.filter_map(|m| Some((Keys::relative(&root, &m.location, KeyForm::Names)?, m.size == 0)));
        Some(rels.filter_map(|(rel, empty)| leaf_of(rel, empty, &mut last_folder)).map(Ok).collect::<Vec<_>>())
    })
    .flatten()
}

/// The leaf a key (relative to the tree's root) is, or none for a further key
/// under a folder already named. An empty object where a record or marker
/// should be (never one ibi writes: some servers list a folder so) is a stray.
fn leaf_of(rel: String, empty: bool, last_folder: &mut Option<String>) -> Option<Listed> {
    let depth = rel.split('/').count();
    if empty && depth == 4 {
        *last_folder = Some(rel.clone());
        return Some(Listed::Stray {
            place: rel,
            why: "an empty object (or a folder) where an item's marker should be".into(),
        });
    }
    if depth > 4 {
        let folder = rel.split('/').take(4).collect::<Vec<_>>().join("/");
        if last_folder.as_deref() == Some(folder.as_str()) {
            return None;
        }
        *last_folder = Some(folder.clone());
        return Some(Listed::Stray { place: folder, why: "a folder where an item's marker should be".into() });
    }
    Some(match RepositoryName::parse(&rel) {
        Ok(name) => Listed::Item(name),
        Err(e) => Listed::Stray { place: rel, why: e.to_string() },
    })
}

/// Every leaf under `root`, streaming year by year and page by page; a failed
/// listing is one error in the stream.
pub fn leaves<'a>(objects: &'a Objects, root: Key) -> Box<dyn Iterator<Item = Result<Listed>> + Send + 'a> {
    let years = match year_folders(objects, &root) {
        Ok(years) => years,
        Err(e) => return Box::new(std::iter::once(Err(e))),
    };
    Box::new(years.into_iter().flat_map(move |year| year_leaves(objects, root.clone(), year)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name's key is an item; a key that is no name, an empty object, and the
    /// keys under a name's key (named once) are strays.
    #[test]
    fn each_listed_key_is_an_item_or_a_stray_named_once() {
        let mut last = None;
        let mut leaf = |rel: &str, empty: bool| leaf_of(rel.to_string(), empty, &mut last);
        let name = "example.org/t/2026/11.28.19.45";
        assert!(matches!(leaf(name, false), Some(Listed::Item(n)) if n.to_string() == name));
        assert!(matches!(leaf("example.org/t/2026/notatime", false), Some(Listed::Stray { .. })));
        let folder = "example.org/t/2026/11.28.19.46";
        assert!(matches!(leaf(folder, true), Some(Listed::Stray { place, .. }) if place == folder));
        assert!(leaf(&format!("{folder}/x"), false).is_none(), "its folder was named");
        let other = "example.org/t/2026/11.28.19.47";
        assert!(matches!(leaf(&format!("{other}/a/b"), false), Some(Listed::Stray { place, .. }) if place == other));
        assert!(leaf(&format!("{other}/c"), false).is_none());
    }
}
