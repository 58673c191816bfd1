//! Totals ahead of the work, for progress: a survey thread counts the items (or
//! source files) and their bytes while the operation runs, and reports them as
//! `Event::Found`, so a progress bar can show a percentage and an ETA. It runs
//! only when the reporter wants totals (someone watches a terminal), reads only
//! bag-info's Payload-Oxum or file sizes, and stops when the work does.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use walkdir::WalkDir;

use crate::ops::report::Reporter;
use crate::store::{item_info, selected, Store};

/// What to survey.
pub enum Survey<'a> {
    /// Items of a collection: the named ones, or all when none is named.
    Items(&'a dyn Store, &'a [String]),
    /// Files and folders to deposit: one item per path with `each`, else one for all.
    Paths { paths: &'a [PathBuf], follow: bool, each: bool },
}

/// Runs `work`, with the survey alongside it when the reporter wants totals.
pub fn while_surveying<T>(reporter: &dyn Reporter, survey: Survey, work: impl FnOnce() -> T) -> T {
    if !reporter.wants_totals() {
        return work();
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| run(&survey, reporter, &stop));
        let result = work();
        stop.store(true, Ordering::Relaxed);
        result
    })
}

fn run(survey: &Survey, reporter: &dyn Reporter, stop: &AtomicBool) {
    match survey {
        Survey::Items(store, names) => {
            for name in selected(*store, names).flatten() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let bytes = item_info(*store, &name).ok().and_then(|info| info.oxum()).map_or(0, |oxum| oxum.octets);
                reporter.found(1, bytes);
            }
        }
        Survey::Paths { paths, follow, each } => {
            if !each {
                reporter.found(1, 0);
            }
            for path in paths.iter() {
                let mut bytes = 0;
                for entry in WalkDir::new(path).follow_links(*follow).into_iter().flatten() {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if entry.file_type().is_file() {
                        bytes += entry.metadata().map_or(0, |m| m.len());
                    }
                }
                reporter.found(u64::from(*each), bytes);
            }
        }
    }
}
