//! Walks a four-level name tree in a bucket (the commit markers, or the inventory
//! records) by delimiter, level by level, never listing every key flat: the
//! folders of the first three levels first, then each year's leaves as the walk
//! reaches them. The leaves come out in `RepositoryName` order, as S3 lists keys
//! in byte order and each level sorts as `component/`.

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

/// The leaves of one year folder: names, or strays that do not parse.
fn leaves_of(objects: &Objects, root: &Key, year: &Key) -> Result<Vec<Listed>> {
    let listing = objects.run(objects.list_level(year))?;
    let mut leaves: Vec<Listed> = listing
        .objects
        .iter()
        .filter_map(|meta| Keys::relative(root, &meta.location, KeyForm::Names))
        .map(|rel| match RepositoryName::parse(&rel) {
            Ok(name) => Listed::Item(name),
            Err(e) => Listed::Stray { place: rel, why: e.to_string() },
        })
        .collect();
    leaves.extend(
        listing
            .common_prefixes
            .iter()
            .filter_map(|p| Keys::relative(root, p, KeyForm::Names))
            .map(|rel| Listed::Stray { place: rel, why: "a folder where an item's marker should be".into() }),
    );
    leaves.sort_by_key(sort_key);
    Ok(leaves)
}

fn sort_key(listed: &Listed) -> String {
    match listed {
        Listed::Item(name) => name.to_string(),
        Listed::Stray { place, .. } => place.clone(),
    }
}

/// Every leaf under `root`, streaming year by year; a failed listing is one error in the stream.
pub fn leaves<'a>(objects: &'a Objects, root: Key) -> Box<dyn Iterator<Item = Result<Listed>> + Send + 'a> {
    let years = match year_folders(objects, &root) {
        Ok(years) => years,
        Err(e) => return Box::new(std::iter::once(Err(e))),
    };
    Box::new(years.into_iter().flat_map(move |year| match leaves_of(objects, &root, &year) {
        Ok(found) => found.into_iter().map(Ok).collect::<Vec<_>>(),
        Err(e) => vec![Err(e)],
    }))
}
