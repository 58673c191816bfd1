//! What a verify remembers of the items it met, a few bytes an item: the
//! names and aliases its walk found (`Hashes`), and the identities it confirmed
//! (`Confirmed`), which the witness made after it trusts. Kept apart from
//! `verify` so that the witness depends on what a verify confirmed, not on
//! the verify itself.

use crate::id::RepositoryName;

/// Values a walk met (the names it found, the aliases it found right), as 64-bit
/// hashes of the parsed values (no text made per value; a collision, about one in
/// 10^13 for a million items, could hide one vanished item from one run), kept in
/// a plain list and sorted once the walk ends: 8 bytes an item, where a hash set
/// took about 19 (and 28 while it grew).
pub struct Hashes<T> {
    hashes: Vec<u64>,
    state: std::hash::RandomState,
    of: std::marker::PhantomData<fn(&T)>,
}

impl<T> Default for Hashes<T> {
    fn default() -> Self {
        Hashes { hashes: Vec::new(), state: Default::default(), of: std::marker::PhantomData }
    }
}

impl<T> Hashes<T> {
    /// Notes `value`: a `T`, or a borrowed form of one that hashes as it does.
    pub fn note(&mut self, value: &impl std::hash::Hash) {
        self.hashes.push(std::hash::BuildHasher::hash_one(&self.state, value));
    }

    /// Ends the walk: the hashes sorted, for `contains`.
    pub fn sorted(mut self) -> Hashes<T> {
        self.hashes.sort_unstable();
        self
    }

    pub fn contains(&self, value: &impl std::hash::Hash) -> bool {
        self.hashes.binary_search(&std::hash::BuildHasher::hash_one(&self.state, value)).is_ok()
    }
}

/// The items whose identity a verify read from the bag and found equal to the
/// inventory's record of a present item, each as a hash of its name and that
/// identity (8 bytes an item): a witness made right after the verify takes those
/// identities from the inventory instead of reading every bag again, and only
/// where the record still holds the very identity the check read. (A flag on
/// the walked names' hashes would spare the 8 bytes, but would trust whatever
/// the record says by the time the witness reads it: a record rewritten behind
/// ibi's back between the check and the witness would then be signed.)
#[derive(Default)]
pub struct Confirmed(pub(crate) Hashes<(RepositoryName, String)>);

impl Confirmed {
    /// Whether this run read `identity` from `name`'s bag, and the inventory recorded it.
    pub fn holds(&self, name: &RepositoryName, identity: &str) -> bool {
        self.0.contains(&(name, identity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The witness trusts a record only for the very identity the check read: a
    /// record rewritten after the check (another writer) is read from the bag.
    #[test]
    fn a_confirmed_name_holds_only_the_identity_its_check_read() {
        let name = |i: u32| RepositoryName::parse(&format!("a.b/c/2026/01.01.00.{:02}.{:02}", i / 60, i % 60)).unwrap();
        let mut noted = Hashes::<(RepositoryName, String)>::default();
        for i in 0..40 {
            noted.note(&(&name(i), format!("{i:064x}").as_str()));
        }
        let confirmed = Confirmed(noted.sorted());
        for i in 0..40 {
            assert!(confirmed.holds(&name(i), &format!("{i:064x}")), "{i} as read");
            assert!(!confirmed.holds(&name(i), &format!("{:064x}", i + 1000)), "{i} rewritten");
        }
        assert!(!confirmed.holds(&name(40), &format!("{:064x}", 40)), "never checked");
    }
}
