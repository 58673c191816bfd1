//! Each item's last fixity check as the store keeps it (for a local collection,
//! only the checks its hash-chained log holds), packed a few bytes an item:
//! what the rolling order, `verify --age`, the audit and the witness read. A
//! check dated in the future of this machine's clock counts as never made.

use crate::error::Result;
use crate::id::{RepositoryName, Timestamp};
use crate::store::Store;

/// When an item's last check was, in seconds, when its date does not read.
pub(crate) const NEVER: i64 = i64::MIN;
/// When an item's last check was, when its date is in the future of this
/// machine's clock (a clock that once ran ahead): as if never checked.
const FUTURE: i64 = i64::MIN + 1;
/// How far past this machine's clock a check's date may be and still count:
/// two clocks a little apart.
const FUTURE_SLACK_SECS: i64 = 300;

/// One item's last check: when (seconds since 1970), whether it passed, and
/// whether it was store-attested (`FixityCheck::attested`) rather than a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastCheck {
    pub at: i64,
    pub ok: bool,
    pub attested: bool,
}

impl LastCheck {
    /// It passed, and its date reads.
    pub fn passed(&self) -> bool {
        self.ok && self.at != NEVER && self.at != FUTURE
    }

    /// Its date does not read (written by another party): as if never checked.
    pub fn undated(&self) -> bool {
        self.at == NEVER
    }

    /// Its date is in the future of this machine's clock: as if never checked.
    pub fn future(&self) -> bool {
        self.at == FUTURE
    }

    /// Its date as `fixity_date` writes it.
    pub fn date(&self) -> String {
        chrono::DateTime::from_timestamp(self.at, 0)
            .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default()
    }
}

/// Every item's last check, sixteen bytes an item (a 64-bit hash of the name,
/// the check's second and result), read from the store one check at a time:
/// what a plan or a report over a large collection holds. Two names whose hashes
/// collide share an answer, which can only misplace one item in a rolling turn
/// or in a report of ages, never lose one. Beside them, for an item whose last
/// check was store-attested, when a check last read its bytes and found them
/// whole (a store keeps that check too: `Ledger::fixity_checks`).
pub struct LastChecks {
    last: Vec<(u64, i64)>,
    /// Seconds of the newest passing read check, of store-attested items only.
    reads: Vec<(u64, i64)>,
}

impl LastChecks {
    /// Checks given in a test, as a store would hand them over.
    #[cfg(test)]
    pub(crate) fn of<'a>(checks: impl Iterator<Item = (&'a RepositoryName, LastCheck)>) -> LastChecks {
        let mut packed: Vec<(u64, i64)> = checks.map(|(name, check)| (name_key(name), pack(check))).collect();
        packed.sort_by_key(|&(key, _)| key);
        LastChecks { last: packed, reads: Vec::new() }
    }

    /// The store's last checks; `None` when it keeps none.
    pub fn read(store: &dyn Store) -> Result<Option<LastChecks>> {
        let (mut checks, mut reads) = (Vec::new(), Vec::new());
        let latest = Timestamp::now().whole_seconds() as i64 + FUTURE_SLACK_SECS;
        let kept = store.ledger().each_fixity_check(&mut |check| {
            let at = chrono::DateTime::parse_from_rfc3339(&check.date).map_or(NEVER, |date| date.timestamp());
            let at = if at != NEVER && at > latest { FUTURE } else { at };
            let last = LastCheck { at, ok: check.ok, attested: check.attested };
            if last.passed() && !last.attested {
                reads.push((name_key(&check.name), at));
            }
            checks.push((name_key(&check.name), pack(last)));
        })?;
        // The last one read of a name (or of two whose hashes collide) answers.
        checks.reverse();
        checks.sort_by_key(|&(key, _)| key);
        checks.dedup_by_key(|&mut (key, _)| key);
        checks.shrink_to_fit();
        // The newest read of each name, kept only where the last check was attested.
        reads.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        reads.dedup_by_key(|&mut (key, _)| key);
        let mut checks = LastChecks { last: checks, reads: Vec::new() };
        reads.retain(|&(key, _)| checks.get_key(key).is_some_and(|check| check.attested));
        reads.shrink_to_fit();
        checks.reads = reads;
        Ok(kept.then_some(checks))
    }

    pub fn get(&self, name: &RepositoryName) -> Option<LastCheck> {
        self.get_key(name_key(name))
    }

    fn get_key(&self, key: u64) -> Option<LastCheck> {
        let at = self.last.binary_search_by_key(&key, |&(k, _)| k).ok()?;
        Some(unpack(self.last[at].1))
    }

    /// When `name`'s bytes were last read and found whole, for an item whose
    /// last check was store-attested (for any other, its last check says).
    pub fn read_at(&self, name: &RepositoryName) -> Option<i64> {
        let key = name_key(name);
        let at = self.reads.binary_search_by_key(&key, |&(k, _)| k).ok()?;
        Some(self.reads[at].1)
    }

    /// The oldest of the checks that passed.
    pub fn oldest_good(&self) -> Option<LastCheck> {
        self.last.iter().map(|&(_, packed)| unpack(packed)).filter(LastCheck::passed).min_by_key(|check| check.at)
    }

    /// When `name` was last found whole, if it was.
    pub fn good(&self, name: &RepositoryName) -> Option<i64> {
        self.get(name).filter(LastCheck::passed).map(|check| check.at)
    }
}

/// A check in eight bytes: its second shifted left by two, whether it was
/// store-attested in the next bit and its result in the lowest; `NEVER` (an
/// unreadable date) as itself.
fn pack(check: LastCheck) -> i64 {
    match check.at {
        NEVER | FUTURE => check.at,
        at => (at << 2) | (i64::from(check.attested) << 1) | i64::from(check.ok),
    }
}

fn unpack(packed: i64) -> LastCheck {
    match packed {
        NEVER | FUTURE => LastCheck { at: packed, ok: false, attested: false },
        packed => LastCheck { at: packed >> 2, ok: packed & 1 == 1, attested: packed & 2 == 2 },
    }
}

/// A name's 64-bit hash.
fn name_key(name: &RepositoryName) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A check packed into eight bytes reads back as it was: either result, dates
    /// before and after 1970, and an unreadable date.
    #[test]
    fn a_packed_check_reads_back() {
        for at in [0, 1, -1, -5, 1_764_000_000, 253_402_300_799, -62_135_596_800] {
            for (ok, attested) in [(true, false), (false, false), (true, true)] {
                let check = LastCheck { at, ok, attested };
                assert_eq!(unpack(pack(check)), check, "{at} {ok} {attested}");
            }
        }
        assert!(unpack(pack(LastCheck { at: NEVER, ok: true, attested: false })).undated());
    }
}
