//! Rolling fixity (`verify --budget`) and its evidence (`verify --age`): the items
//! whose last successful check is oldest (never checked, or last found damaged,
//! first) are verified in turn until a budget of bytes or time is spent, each
//! check's date kept by the store; `fixity_age` states the oldest successful
//! check and names the items over a cycle. A nightly budget that covers the
//! collection's bytes within the cycle thus checks every item within it.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::id::{RepositoryName, Timestamp};
use crate::ops::last_checks::NEVER;
pub use crate::ops::last_checks::{LastCheck, LastChecks};
use crate::ops::report::Reporter;
use crate::ops::verify::{checking, known_items, verify_one, Confirmed, Counters, Recorded, VerifySummary};

/// How many items' records a rolling run reads at once.
const PAGE: usize = 256;
use crate::problem::{Problem, ProblemKind};
use crate::store::inventory::fixity_date;
use crate::store::{Listed, Store};

/// How much one rolling run may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Stop once this many bytes were hashed.
    Bytes(u64),
    /// Stop once this much time was spent.
    Time(Duration),
}

/// The store's last checks; refuses a store that keeps none.
fn last_checks(store: &dyn Store) -> Result<LastChecks> {
    LastChecks::read(store)?.ok_or_else(|| Error::Invalid {
        what: "verify".into(),
        problem: format!(
            "{} keeps no fixity dates (local, far and S3 collections do; this one does not): verify it whole, without --budget or --age",
            store.location()
        ),
    })
}

/// The first turn's length; each turn after is twice the last, up to `MOST_IN_TURN`.
const FIRST_TURN: usize = 4096;
/// The most items a turn holds (their names in memory, about 80 bytes each).
const MOST_IN_TURN: usize = 1 << 18;

/// An item's place in the rolling order: its last good check (never first), then its name.
type InTurn = (i64, RepositoryName);

/// The next `count` items in turn after `after`, oldest check first: one walk,
/// keeping only the `count` first (a heap), so a turn's memory is bounded
/// whatever the collection holds.
fn next_turn(store: &dyn Store, checks: &LastChecks, after: Option<&InTurn>, count: usize) -> Result<Vec<InTurn>> {
    let mut first: std::collections::BinaryHeap<InTurn> = std::collections::BinaryHeap::new();
    for listed in store.walk() {
        let Listed::Item(name) = listed? else { continue };
        let item = (checks.good(&name).unwrap_or(NEVER), name);
        if after.is_some_and(|after| item <= *after)
            || first.len() == count && first.peek().is_some_and(|last| item >= *last)
        {
            continue;
        }
        first.push(item);
        if first.len() > count {
            first.pop();
        }
    }
    Ok(first.into_sorted_vec())
}

/// Verifies items in turn, oldest check first, until `budget` is spent (the item
/// under way is finished); every check's date is kept. The order is the dates as
/// the run began; each turn is found by a walk that holds only that turn.
/// With the identities it confirmed, for the witness made after it.
pub fn verify_rolling(
    store: &dyn Store,
    budget: Budget,
    reporter: &dyn Reporter,
) -> Result<(VerifySummary, Confirmed)> {
    let checks = last_checks(store)?;
    checking(store, reporter, |counters| verify_turns(store, (&checks, budget), counters, reporter))
}

/// `verify_rolling`'s turns, counted in `counters`.
fn verify_turns(
    store: &dyn Store,
    (checks, budget): (&LastChecks, Budget),
    counters: &Counters,
    reporter: &dyn Reporter,
) -> Result<()> {
    let started = Instant::now();
    let (mut after, mut count) = (None, FIRST_TURN);
    'turns: loop {
        let turn = next_turn(store, checks, after.as_ref(), count)?;
        for page in turn.chunks(PAGE) {
            let names: Vec<RepositoryName> = page.iter().map(|(_, name)| name.clone()).collect();
            let known = known_items(store, &names)?;
            for name in &names {
                let spent = match budget {
                    Budget::Bytes(bytes) => counters.bytes() >= bytes,
                    Budget::Time(time) => started.elapsed() >= time,
                };
                if spent {
                    break 'turns;
                }
                verify_one(store, name, Recorded::taken_from(known.as_ref(), name), counters, reporter);
            }
        }
        if turn.len() < count {
            break;
        }
        after = turn.into_iter().last();
        count = (count * 2).min(MOST_IN_TURN);
    }
    Ok(())
}

/// What the fixity dates prove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FixityAge {
    pub items: u64,
    /// The oldest successful check among items that have one, and its item.
    pub oldest: Option<(String, RepositoryName)>,
    /// Items never checked, last found damaged, or last found whole before the cycle began.
    pub stale: u64,
    /// Items found whole within the cycle by a store-attested check (the
    /// store's checksums, their bytes not read), not by a read.
    pub attested: u64,
}

/// Reports (as problems) every held item not found whole within `cycle` before `now`.
pub fn fixity_age(store: &dyn Store, cycle: Duration, now: Timestamp, reporter: &dyn Reporter) -> Result<FixityAge> {
    let checks = last_checks(store)?;
    let cycle_start =
        Timestamp::from_nanos(now.nanos().saturating_sub(cycle.as_nanos().min(i128::MAX as u128) as i128));
    let since = fixity_date(cycle_start);
    let since_at = cycle_start.nanos().div_euclid(1_000_000_000) as i64;
    let mut age = FixityAge::default();
    let mut oldest: Option<(i64, RepositoryName)> = None;
    for listed in store.walk() {
        let Listed::Item(name) = listed? else { continue };
        age.items += 1;
        if let Some(good) = checks.good(&name) {
            if oldest.as_ref().is_none_or(|(at, _)| good < *at) {
                oldest = Some((good, name.clone()));
            }
        }
        let detail = match checks.get(&name) {
            None => "never checked".to_string(),
            Some(check) if check.undated() => "its last check's date does not read".to_string(),
            Some(check) if check.future() => "its last check is dated in the future of this machine's clock (a \
                                              clock that ran ahead?): taken as never checked"
                .to_string(),
            Some(check) if !check.ok => format!("its last check ({}) found it damaged", check.date()),
            Some(check) if check.at < since_at => {
                format!("last found whole {}, before the cycle began ({since})", check.date())
            }
            Some(check) => {
                age.attested += u64::from(check.attested);
                continue;
            }
        };
        age.stale += 1;
        reporter.problem(&Problem::new(&name.to_string(), None, ProblemKind::StaleFixity, detail));
    }
    age.oldest = oldest.map(|(at, name)| (LastCheck { at, ok: true, attested: false }.date(), name));
    Ok(age)
}

#[cfg(test)]
mod turns {
    use super::*;
    use crate::id::minter::SystemClock;
    use crate::ops::deposit::{deposit, DepositOptions};
    use crate::ops::Silent;
    use crate::store::conformance::subsystem;
    use crate::store::memory::MemoryStore;

    /// Rolling verify held every item's name to sort them all (about 180 MiB at a
    /// million items, measured); it now takes turns of a bounded length, each
    /// found by a walk after the last item of the turn before. Turns of three
    /// over eleven items give every item once, oldest check first, never-checked first of all.
    #[test]
    fn regress_a_rolling_turn_holds_every_name() {
        let sources = tempfile::tempdir().unwrap();
        let paths: Vec<_> = (0..11)
            .map(|i| {
                let path = sources.path().join(format!("f{i}"));
                std::fs::write(&path, format!("file {i}")).unwrap();
                path
            })
            .collect();
        let store = MemoryStore::new(subsystem());
        let options = DepositOptions { each: true, ..DepositOptions::default() };
        deposit(&store, &paths, &options, &SystemClock, &Silent, &mut |_| {}).unwrap();
        let names: Vec<RepositoryName> = crate::store::items(&store).collect::<Result<_>>().unwrap();
        // Every other item checked, at dates that run against the names' order.
        let checks = names
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(i, name)| (name, LastCheck { at: 1_000_000 - i as i64, ok: i % 4 == 0, attested: false }));
        let checks = LastChecks::of(checks);
        let mut expected: Vec<InTurn> =
            names.iter().map(|name| (checks.good(name).unwrap_or(NEVER), name.clone())).collect();
        expected.sort();
        let (mut seen, mut after) = (Vec::new(), None);
        loop {
            let turn = next_turn(&store, &checks, after.as_ref(), 3).unwrap();
            assert!(turn.len() <= 3);
            seen.extend(turn.iter().cloned());
            if turn.len() < 3 {
                break;
            }
            after = turn.last().cloned();
        }
        assert_eq!(seen, expected, "every item once, in the order of its last good check");
        assert_eq!(seen.iter().take_while(|(at, _)| *at == NEVER).count(), 8, "unchecked and damaged first");
    }
}
