//! Which of a batch of names have objects in one of the collection's per-name
//! trees (`.ibi/items/`, `.ibi/inventory/`, `.ibi/log-items/`), found by listing
//! the keys from the batch's first name to its last instead of asking for each
//! name: a batch of new items (a first mirror, a copy) costs a page of a listing
//! where it cost a request per name. The listing stops past the batch's last
//! key, or after `cap` objects (names scattered over a large collection), and
//! says which names it did not reach; the caller asks for those one by one.

use std::collections::HashMap;

use futures_util::TryStreamExt;
use object_store::path::Path as Key;
use object_store::ObjectMeta;

use crate::error::Result;
use crate::store::s3::objects::Objects;

/// Where a name's objects are in relation to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Within {
    /// The name's one object is at its key (a marker, a record).
    At,
    /// The name's objects are under its key, as a folder (index entries).
    Under,
}

/// For each of `keys` (one per name, each the same number of levels deep, in any
/// order): the objects at it or under it, or `None` where the listing stopped
/// before reaching it.
pub async fn objects_of(
    objects: &Objects,
    keys: &[Key],
    within: Within,
    cap: usize,
) -> Result<Vec<Option<Vec<ObjectMeta>>>> {
    objects_kept(objects, keys, within, cap, &|_| true).await
}

/// `objects_of`, keeping of the objects found only those whose key `keep`
/// takes (the listing still counts every object toward `cap`): a caller that
/// asks for one object of each name holds that one only, not the name's other
/// objects (an item's files are about six).
pub async fn objects_kept(
    objects: &Objects,
    keys: &[Key],
    within: Within,
    cap: usize,
    keep: &(dyn Fn(&str) -> bool + Sync),
) -> Result<Vec<Option<Vec<ObjectMeta>>>> {
    let Some(span) = Span::of(keys) else { return Ok(vec![None; keys.len()]) };
    let index: HashMap<&str, usize> = keys.iter().enumerate().map(|(i, k)| (k.as_ref(), i)).collect();
    let mut found: Vec<Vec<ObjectMeta>> = vec![Vec::new(); keys.len()];
    let mut listed = objects.list_after(&span.folder, &span.offset);
    let mut seen = 0;
    while let Some(meta) = listed.try_next().await? {
        let location = meta.location.as_ref().to_string();
        if span.past(&location, within) {
            return Ok(found.into_iter().map(Some).collect());
        }
        if seen == cap {
            return Ok(reached_before(keys, found, &location, within));
        }
        seen += 1;
        if let Some(&i) = owner(&location, span.depth, within).and_then(|key| index.get(key)) {
            if keep(&location) {
                found[i].push(meta);
            }
        }
    }
    Ok(found.into_iter().map(Some).collect())
}

/// The folder a batch's keys share, where its listing starts and ends.
struct Span {
    folder: Key,
    offset: Key,
    last: String,
    /// The greatest of the keys as folders (`KEY/`): a name's objects under
    /// its key sort as `KEY/…`, and `…/01.02/` sorts after `…/01.02.5/` ('/'
    /// after '.'), so the last key is not always the last folder.
    last_folder: String,
    depth: usize,
}

impl Span {
    fn of(keys: &[Key]) -> Option<Span> {
        let first = keys.iter().map(|k| k.as_ref()).min()?;
        let last = keys.iter().map(|k| k.as_ref()).max()?;
        let depth = first.split('/').count();
        if keys.iter().any(|k| k.as_ref().split('/').count() != depth) {
            return None;
        }
        let common = first.bytes().zip(last.bytes()).take_while(|(a, b)| a == b).count();
        let folder = &first[..first[..common].rfind('/')?];
        // Just before the first key: it without its last character (a key sorts
        // after each of its prefixes), so the listing begins at it.
        let mut offset = first[..first.len() - 1].trim_end_matches('/').to_string();
        if offset.len() < folder.len() {
            offset = folder.to_string();
        }
        let last_folder = keys.iter().map(|k| format!("{}/", k.as_ref())).max()?;
        let (folder, offset) = (Key::parse(folder).ok()?, Key::parse(offset).ok()?);
        Some(Span { folder, offset, last: last.to_string(), last_folder, depth })
    }

    /// Whether `location` sorts after every object the batch's names can have.
    fn past(&self, location: &str, within: Within) -> bool {
        match within {
            Within::At => location > self.last.as_str(),
            Within::Under => location > self.last_folder.as_str() && !location.starts_with(self.last_folder.as_str()),
        }
    }
}

/// The key (`depth` levels) whose object `location` is: itself, or the folder
/// it lies under.
fn owner(location: &str, depth: usize, within: Within) -> Option<&str> {
    match within {
        Within::At => Some(location),
        Within::Under => {
            let end = location.match_indices('/').nth(depth - 1)?.0;
            Some(&location[..end])
        }
    }
}

/// What was found, the names whose objects all sort before `stopped_at` (where
/// the listing was cut off) reached, the others not.
fn reached_before(
    keys: &[Key],
    found: Vec<Vec<ObjectMeta>>,
    stopped_at: &str,
    within: Within,
) -> Vec<Option<Vec<ObjectMeta>>> {
    keys.iter()
        .zip(found)
        .map(|(key, objects)| {
            let key = key.as_ref();
            let before = match within {
                Within::At => key < stopped_at,
                Within::Under => {
                    let folder = format!("{key}/");
                    folder.as_str() < stopped_at && !stopped_at.starts_with(&folder)
                }
            };
            before.then_some(objects)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_starts_at_its_first_key_and_ends_at_its_last() {
        let keys: Vec<Key> =
            ["c/.ibi/items/a.b/w/2020/01.02", "c/.ibi/items/a.b/w/2020/01.01", "c/.ibi/items/a.b/w/2021/3"]
                .iter()
                .map(|k| Key::parse(*k).unwrap())
                .collect();
        let span = Span::of(&keys).unwrap();
        assert_eq!(span.folder.as_ref(), "c/.ibi/items/a.b/w");
        assert_eq!(span.offset.as_ref(), "c/.ibi/items/a.b/w/2020/01.0");
        assert!(span.offset.as_ref() < "c/.ibi/items/a.b/w/2020/01.01", "the first key is listed");
        assert_eq!(span.last, "c/.ibi/items/a.b/w/2021/3");
        assert!(!span.past("c/.ibi/items/a.b/w/2021/3", Within::At));
        assert!(span.past("c/.ibi/items/a.b/w/2021/3/x", Within::At));
        assert!(!span.past("c/.ibi/items/a.b/w/2021/3/x", Within::Under));
        // `3.5` sorts before `3/`: the objects under 3 are still to come.
        assert!(!span.past("c/.ibi/items/a.b/w/2021/3.5", Within::Under));
        assert!(span.past("c/.ibi/items/a.b/w/2021/30", Within::Under));
        // A one-character last part starts the listing at the folder.
        let one = [Key::parse("c/.ibi/items/a.b/w/2021/3").unwrap(), Key::parse("c/.ibi/items/a.b/w/2021/4").unwrap()];
        assert_eq!(Span::of(&one).unwrap().offset.as_ref(), "c/.ibi/items/a.b/w/2021");
    }

    #[test]
    fn an_object_under_a_key_belongs_to_that_key_only() {
        let depth = "r/.ibi/log-items/h/w/2020/1".split('/').count();
        let owns = |location| owner(location, depth, Within::Under);
        assert_eq!(owns("r/.ibi/log-items/h/w/2020/1/0001!a!b"), Some("r/.ibi/log-items/h/w/2020/1"));
        assert_eq!(owns("r/.ibi/log-items/h/w/2020/1.5/0001!a!b"), Some("r/.ibi/log-items/h/w/2020/1.5"));
        assert_eq!(owns("r/.ibi/log-items/h/w/2020/1"), None, "a folder object is no entry");
        assert_eq!(owner("r/x", 2, Within::At), Some("r/x"));
    }

    /// Names where one is the start of another (`…36` and `…36.001`): the
    /// objects under `…36/` sort after those under `…36.001/` ('/' after '.').
    /// The listing stopped at the last key's folder and never reached `…36/`:
    /// its S3 log index was read as empty, and an item that came back had its
    /// carried history logged twice.
    #[test]
    fn regress_a_name_that_starts_another_is_read_as_having_no_objects() {
        let keys: Vec<Key> = ["r/i/36", "r/i/36.001", "r/i/36.002"].iter().map(|k| Key::parse(*k).unwrap()).collect();
        let span = Span::of(&keys).unwrap();
        assert!(!span.past("r/i/36.002/e", Within::Under));
        assert!(!span.past("r/i/36/e", Within::Under), "36/… comes after 36.002/…, and is still 36's");
        assert!(span.past("r/i/37/e", Within::Under));
        let reached = reached_before(&keys, vec![Vec::new(); 3], "r/i/36.002/e", Within::Under);
        assert_eq!(reached.iter().map(Option::is_some).collect::<Vec<_>>(), vec![false, true, false]);
    }

    #[test]
    fn a_listing_cut_short_reaches_only_the_names_before_it() {
        let keys: Vec<Key> = ["r/i/1", "r/i/2", "r/i/3"].iter().map(|k| Key::parse(*k).unwrap()).collect();
        let reached = reached_before(&keys, vec![Vec::new(); 3], "r/i/2", Within::At);
        assert_eq!(reached.iter().map(Option::is_some).collect::<Vec<_>>(), vec![true, false, false]);
        let reached = reached_before(&keys, vec![Vec::new(); 3], "r/i/2/0007", Within::Under);
        assert_eq!(reached.iter().map(Option::is_some).collect::<Vec<_>>(), vec![true, false, false]);
    }
}
