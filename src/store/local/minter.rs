//! The minter state of a local collection (ARCHITECTURE.md, "Identifiers"): one
//! distributor state per identification subsystem on this machine, shared by
//! every collection of that subsystem, plus the collection's own state, plus a
//! floor: the newest name of its own subsystem the collection holds. Minting
//! locks both states (machine-wide first, always in that order), starts after
//! the latest of the three, and saves both. So two collections of one
//! subsystem never mint one name, and a state file restored from a backup or
//! left behind by a migration never hands out a name at or before one the
//! collection holds.

use std::fs;
use std::path::{Path, PathBuf};

use super::held_floor::FloorCache;
use super::Layout;
use crate::error::{Error, IoContext, Result};
use crate::fsx::{create_dir_all_durable, FileLock, Stamp};
use crate::id::minter::MinterState;
use crate::id::{RepositoryName, Subsystem, Timestamp};
use crate::store::StateFile;

/// The environment variable that chooses the folder of the machine-wide states.
pub const MINTER_DIR_ENV: &str = "IBI_MINTER_DIR";

/// Where machine-wide minter states live: `$IBI_MINTER_DIR`, else `/var/lib/ibi/minters`
/// for root, else `$XDG_STATE_HOME/ibi/minters` (`~/.local/state/ibi/minters`).
pub fn machine_dir() -> Option<PathBuf> {
    crate::store::machine::folder(MINTER_DIR_ENV, "minters")
}

/// Every machine-wide state a minter of `subsystem` locks, in order (`registry::machine_states`).
pub use crate::store::registry::machine_states;

/// Locks every one of `states` (in order) and reads the newest date they hold.
pub fn lock_machine_states(states: &[StateFile]) -> Result<(Vec<FileLock>, Option<Timestamp>)> {
    let first = states.first().ok_or_else(|| Error::Invalid {
        what: "minter".into(),
        problem: format!("no folder for the machine-wide minter state: set {MINTER_DIR_ENV} or HOME"),
    })?;
    create_dir_all_durable(crate::fsx::parent_dir(&first.state))?;
    let mut locks = Vec::with_capacity(states.len());
    let mut newest = None;
    for state in states {
        locks.push(FileLock::acquire(&state.lock)?);
        newest = newest.max(state.read()?);
    }
    Ok((locks, newest))
}

/// Writes `next` into each of `states` that does not hold it yet (under their locks).
pub fn write_machine_states(states: &[StateFile], next: Timestamp) -> Result<()> {
    for state in states {
        if state.read()? != Some(next) {
            state.write(next)?;
        }
    }
    Ok(())
}

/// The newest date any of `states` holds, locking nothing.
pub fn last_of_machine_states(states: &[StateFile]) -> Result<Option<Timestamp>> {
    let mut newest = None;
    // A machine whose minter folder is not made yet holds no state.
    for state in states.iter().filter(|state| crate::fsx::parent_dir(&state.state).is_dir()) {
        newest = newest.max(state.last()?);
    }
    Ok(newest)
}

/// The newest date among the names of `subsystem` that the collection holds:
/// the newest year folder that holds any, then the newest name in it. The
/// newest year folder's answer is kept with its stamp (`held_floor`).
pub fn newest_held(layout: &Layout, subsystem: &Subsystem) -> Result<Option<Timestamp>> {
    let base = layout.root.join(subsystem.prefix().to_string());
    let mut years = super::held_floor::years_in(&base)?;
    years.sort_unstable_by(|a, b| b.cmp(a));
    let cache = FloorCache::new(layout, subsystem);
    if let Some(newest) = years.first().and_then(|&year| cache.answer(year, &base.join(year.to_string()))) {
        return Ok(Some(newest));
    }
    let prefix = subsystem.prefix().to_string();
    for (at, &year) in years.iter().enumerate() {
        let dir = base.join(year.to_string());
        let before = Stamp::at(&dir).ok();
        if let Some(newest) = newest_in_year(&dir, &format!("{prefix}/{year}"))? {
            if let (0, Some(before)) = (at, before) {
                cache.keep_read(year, &dir, before, newest);
            }
            return Ok(Some(newest));
        }
    }
    Ok(None)
}

/// How many of a year folder's names, the greatest as text, are parsed first
/// to find its newest date.
const NEWEST_CANDIDATES: usize = 16;

/// The newest date among the item folders of the year folder `dir`, whose names
/// are `year_name/<folder>`. A suffix's fields are fixed-width but for the
/// fraction, whose digits compare as text as they do as numbers, so of two valid
/// suffixes the greater as text is the later or the same date: the greatest few
/// names as text are parsed, and every name only when none of those is a name
/// (strays sorting above every item). Parsing every name of the folder cost
/// each deposit process 0.2 s in a folder of 200,000 items.
fn newest_in_year(dir: &Path, year_name: &str) -> Result<Option<Timestamp>> {
    use std::cmp::Reverse;
    let mut greatest: std::collections::BinaryHeap<Reverse<String>> = Default::default();
    let mut folders = 0usize;
    for entry in fs::read_dir(dir).with_path("list", dir)?.flatten() {
        let name = entry.file_name();
        let (Ok(kind), Some(suffix)) = (entry.file_type(), name.to_str()) else { continue };
        if !kind.is_dir() {
            continue;
        }
        folders += 1;
        if greatest.len() == NEWEST_CANDIDATES && greatest.peek().is_some_and(|Reverse(least)| least.as_str() >= suffix)
        {
            continue;
        }
        greatest.push(Reverse(suffix.to_owned()));
        if greatest.len() > NEWEST_CANDIDATES {
            greatest.pop();
        }
    }
    let date_of = |suffix: &str| RepositoryName::parse(&format!("{year_name}/{suffix}")).ok().map(|n| n.date());
    // Ascending order of Reverse is descending order of the names.
    if let Some(newest) = greatest.into_sorted_vec().iter().find_map(|Reverse(suffix)| date_of(suffix)) {
        return Ok(Some(newest));
    }
    if folders <= NEWEST_CANDIDATES {
        return Ok(None);
    }
    let every = fs::read_dir(dir).with_path("list", dir)?.flatten();
    let dates = every.filter(|e| e.file_type().is_ok_and(|t| t.is_dir()));
    Ok(dates.filter_map(|e| date_of(e.file_name().to_str()?)).max())
}

/// The collection's minter state as the `Store` seam sees it.
pub struct CollectionMinter<'a> {
    /// The machine-wide states (`machine_states`); empty when no machine-wide
    /// folder can be named (no HOME): minting then fails.
    pub machine: Vec<StateFile>,
    pub own: StateFile,
    /// The newest date held or handed out, computed under the locks (once per collection handle).
    pub floor: Box<dyn Fn() -> Result<Option<Timestamp>> + 'a>,
}

impl MinterState for CollectionMinter<'_> {
    fn update(&self, step: &mut dyn FnMut(Option<Timestamp>) -> Result<Timestamp>) -> Result<()> {
        let (_machine_locks, shared) = lock_machine_states(&self.machine)?;
        let _own_lock = FileLock::acquire(&self.own.lock)?;
        let own = self.own.read()?;
        let last = [shared, own, (self.floor)()?].into_iter().flatten().max();
        let next = step(last)?;
        write_machine_states(&self.machine, next)?;
        if Some(next) != own {
            self.own.write(next)?;
        }
        Ok(())
    }
    fn last(&self) -> Result<Option<Timestamp>> {
        let machine = last_of_machine_states(&self.machine)?;
        Ok([machine, self.own.last()?, (self.floor)()?].into_iter().flatten().max())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn year_folder(suffixes: &[String]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for suffix in suffixes {
            fs::create_dir(dir.path().join(suffix)).unwrap();
        }
        dir
    }

    fn newest_by_parsing_all(suffixes: &[String]) -> Option<Timestamp> {
        suffixes.iter().filter_map(|s| RepositoryName::parse(&format!("a.b/c/2026/{s}")).ok()).map(|n| n.date()).max()
    }

    /// More strays than candidates, all greater as text than every item: the
    /// newest item is still found, by parsing every name.
    #[test]
    fn strays_above_every_item_as_text_are_passed_over() {
        let mut suffixes: Vec<String> = (0..NEWEST_CANDIDATES + 4).map(|i| format!("zz-stray-{i}")).collect();
        suffixes.extend(["01.02.03.04", "11.26.22.33.37.6021", "11.26.22.33.37.602", "99.99.99.99"].map(String::from));
        let dir = year_folder(&suffixes);
        let newest = newest_in_year(dir.path(), "a.b/c/2026").unwrap();
        assert_eq!(newest, newest_by_parsing_all(&suffixes));
        assert!(newest.is_some());
        let only_strays = year_folder(&suffixes[..3]);
        assert_eq!(newest_in_year(only_strays.path(), "a.b/c/2026").unwrap(), None);
    }

    /// Item folder names of every form a minter writes (days to the 28th).
    pub(in crate::store::local) fn any_suffix() -> impl Strategy<Value = String> {
        let fields =
            (1u32..=12, 1u32..=28, 0u32..24, 0u32..60, prop::option::of((0u32..60, prop::option::of("[0-9]{1,9}"))));
        fields.prop_map(|(month, day, hour, minute, rest)| {
            let mut suffix = format!("{month:02}.{day:02}.{hour:02}.{minute:02}");
            if let Some((second, fraction)) = rest {
                suffix.push_str(&format!(".{second:02}"));
                if let Some(fraction) = fraction {
                    suffix.push_str(&format!(".{fraction}"));
                }
            }
            suffix
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The newest date found from the greatest names as text is the newest
        /// date of all, for names with and without seconds and fractions of any
        /// length (trailing zeros included).
        #[test]
        fn the_newest_by_text_is_the_newest_by_date(suffixes in prop::collection::btree_set(any_suffix(), 1..60)) {
            let suffixes: Vec<String> = suffixes.into_iter().collect();
            let dir = year_folder(&suffixes);
            prop_assert_eq!(newest_in_year(dir.path(), "a.b/c/2026").unwrap(), newest_by_parsing_all(&suffixes));
        }
    }
}
