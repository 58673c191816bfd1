//! Disjoint parts of a collection for many verify workers (`verify --part
//! K/N`): an item belongs to part `1 + (first 8 bytes of SHA-256 of its name,
//! big-endian) mod N`, computed from the name alone, so N workers on N
//! machines share the work with no coordinator and every item is in exactly
//! one part. Each part's checks are kept in the collection's ledger as any
//! verify's are, so the parts of one cycle together make `verify --age`,
//! `audit` and the witness see every item checked, and a part that did not
//! run shows as items not checked within the cycle.

use sha2::Digest;

use crate::error::{Error, Result};
use crate::id::RepositoryName;
use crate::store::Store;

/// Part `k` of `n` (from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub k: u32,
    pub n: u32,
}

impl Part {
    /// Reads `K/N`, 1 ≤ K ≤ N.
    pub fn parse(text: &str) -> Result<Part> {
        let invalid = |problem: &str| Error::Invalid { what: format!("part {text:?}"), problem: problem.into() };
        let (k, n) = text.split_once('/').ok_or_else(|| invalid("give it as K/N, such as 2/7"))?;
        let (k, n): (u32, u32) = match (k.trim().parse(), n.trim().parse()) {
            (Ok(k), Ok(n)) => (k, n),
            _ => return Err(invalid("K and N are whole numbers, such as 2/7")),
        };
        if n == 0 || k == 0 || k > n {
            return Err(invalid("K runs from 1 to N"));
        }
        Ok(Part { k, n })
    }

    /// The part `name` belongs to when the collection is cut in `n`.
    pub fn of(name: &RepositoryName, n: u32) -> u32 {
        let digest = sha2::Sha256::digest(name.to_string().as_bytes());
        let head = u64::from_be_bytes(digest[..8].try_into().expect("eight bytes"));
        (head % u64::from(n)) as u32 + 1
    }

    pub fn holds(&self, name: &RepositoryName) -> bool {
        Part::of(name, self.n) == self.k
    }

    /// The present items of `store` in this part, by name.
    pub fn names_in(&self, store: &dyn Store) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for name in store.inventory().present_names() {
            let name = name?;
            if self.holds(&name) {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(count: usize) -> Vec<RepositoryName> {
        (0..count)
            .map(|i| {
                RepositoryName::parse(&format!(
                    "example.org/t/2026/11.28.{:02}.{:02}.{:02}",
                    i / 3600 % 24,
                    i / 60 % 60,
                    i % 60
                ))
                .unwrap()
            })
            .collect()
    }

    /// For several N the parts cover every name exactly once, none empty for
    /// a few thousand names, and a name's part never depends on the others.
    #[test]
    fn the_parts_cover_every_name_exactly_once() {
        let all = names(5_000);
        for n in [1, 2, 3, 7] {
            let mut counts = vec![0usize; n as usize];
            for name in &all {
                let parts: Vec<u32> = (1..=n).filter(|k| Part { k: *k, n }.holds(name)).collect();
                assert_eq!(parts.len(), 1, "{name} in {parts:?} of {n}");
                counts[parts[0] as usize - 1] += 1;
            }
            assert!(counts.iter().all(|c| *c > 5_000 / (n as usize) / 2), "{n}: {counts:?}");
        }
        assert_eq!(Part::of(&all[17], 7), Part::of(&names(18)[17], 7));
    }

    #[test]
    fn a_part_is_read_as_k_of_n() {
        assert_eq!(Part::parse("2/7").unwrap(), Part { k: 2, n: 7 });
        for bad in ["0/3", "4/3", "1/0", "3", "a/b", "1/-2"] {
            assert!(Part::parse(bad).is_err(), "{bad}");
        }
    }
}
