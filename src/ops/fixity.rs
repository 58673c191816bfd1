//! Rolling fixity (`verify --budget`) and its evidence (`verify --age`): the items
//! whose last successful check is oldest (never checked, or last found damaged,
//! first) are verified in turn until a budget of bytes or time is spent, each
//! check's date kept by the store; `fixity_age` states the oldest successful
//! check and names the items over a cycle. A nightly budget that covers the
//! collection's bytes within the cycle thus checks every item within it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::id::{RepositoryName, Timestamp};
use crate::ops::report::{Reporter, Task};
use crate::ops::verify::{known_items, verify_one, Counters, Recorded, VerifySummary};

/// How many items' records a rolling run reads at once.
const PAGE: usize = 256;
use crate::problem::{Problem, ProblemKind};
use crate::store::inventory::{fixity_date, FixityCheck};
use crate::store::{Listed, Store};

/// How much one rolling run may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Stop once this many bytes were hashed.
    Bytes(u64),
    /// Stop once this much time was spent.
    Time(Duration),
}

/// The store's last checks by name; refuses a store that keeps none.
fn last_checks(store: &dyn Store) -> Result<HashMap<RepositoryName, FixityCheck>> {
    let checks = store.fixity_checks()?.ok_or_else(|| Error::Invalid {
        what: "verify".into(),
        problem: format!(
            "{} keeps no fixity dates (local, far and S3 collections do; this one does not): verify it whole, without --budget or --age",
            store.location()
        ),
    })?;
    Ok(checks.into_iter().map(|check| (check.name.clone(), check)).collect())
}

/// When an item was last found whole: `""` (first in line) when never, or when
/// its last check found it damaged.
fn last_good(checks: &HashMap<RepositoryName, FixityCheck>, name: &RepositoryName) -> String {
    checks.get(name).filter(|check| check.ok).map(|check| check.date.clone()).unwrap_or_default()
}

/// The held items, those checked longest ago first (by name among equals).
fn in_turn(store: &dyn Store, checks: &HashMap<RepositoryName, FixityCheck>) -> Result<Vec<RepositoryName>> {
    let mut items: Vec<(String, RepositoryName)> = Vec::new();
    for listed in store.walk() {
        if let Listed::Item(name) = listed? {
            items.push((last_good(checks, &name), name));
        }
    }
    items.sort();
    Ok(items.into_iter().map(|(_, name)| name).collect())
}

/// Verifies items in turn, oldest check first, until `budget` is spent (the item
/// under way is finished); every check's date is kept.
pub fn verify_rolling(store: &dyn Store, budget: Budget, reporter: &dyn Reporter) -> Result<VerifySummary> {
    let checks = last_checks(store)?;
    let turn = in_turn(store, &checks)?;
    drop(checks);
    let counters = Counters::default();
    let started = Instant::now();
    reporter.begin(Task::Verify);
    'turns: for page in turn.chunks(PAGE) {
        let known = known_items(store, page)?;
        for name in page {
            let spent = match budget {
                Budget::Bytes(bytes) => counters.bytes() >= bytes,
                Budget::Time(time) => started.elapsed() >= time,
            };
            if spent {
                break 'turns;
            }
            verify_one(store, name, Recorded::taken_from(known.as_ref(), name), &counters, reporter);
        }
    }
    counters.flush(store, reporter);
    reporter.end();
    Ok(counters.summary())
}

/// What the fixity dates prove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FixityAge {
    pub items: u64,
    /// The oldest successful check among items that have one, and its item.
    pub oldest: Option<(String, RepositoryName)>,
    /// Items never checked, last found damaged, or last found whole before the cycle began.
    pub stale: u64,
}

/// Reports (as problems) every held item not found whole within `cycle` before `now`.
pub fn fixity_age(store: &dyn Store, cycle: Duration, now: Timestamp, reporter: &dyn Reporter) -> Result<FixityAge> {
    let checks = last_checks(store)?;
    let cycle_start =
        Timestamp::from_nanos(now.nanos().saturating_sub(cycle.as_nanos().min(i128::MAX as u128) as i128));
    let since = fixity_date(cycle_start);
    let mut age = FixityAge::default();
    for listed in store.walk() {
        let Listed::Item(name) = listed? else { continue };
        age.items += 1;
        let good = last_good(&checks, &name);
        if !good.is_empty() && age.oldest.as_ref().is_none_or(|(date, _)| good < *date) {
            age.oldest = Some((good.clone(), name.clone()));
        }
        let detail = match checks.get(&name) {
            None => "never checked".to_string(),
            Some(check) if !check.ok => format!("its last check ({}) found it damaged", check.date),
            Some(check) if check.date < since => {
                format!("last found whole {}, before the cycle began ({since})", check.date)
            }
            Some(_) => continue,
        };
        age.stale += 1;
        reporter.problem(&Problem::new(&name.to_string(), None, ProblemKind::StaleFixity, detail));
    }
    Ok(age)
}
