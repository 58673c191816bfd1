//! Operations on collections: deposit, verify, list, the hot-folder watch,
//! and copy, migrate and mirror between collections.
//! Each takes a `Reporter` for progress and returns a summary or a typed error.

pub mod attest;
pub mod audit;
pub mod checkpoints;
pub mod confirmed;
pub mod copy;
pub mod deposit;
pub mod driver;
pub mod fixity;
pub mod foreign_bag;
pub mod handles;
pub mod item;
pub mod last_checks;
pub mod list;
pub mod log;
pub mod minting;
pub mod mirror;
pub mod ndsa;
pub mod ocfl;
mod over_any_store;
pub mod parts;
pub mod placement;
pub mod repair;
pub mod report;
pub mod resolution;
pub mod sites;
pub mod source;
pub mod survey;
pub mod transfer;
pub mod update;
pub mod upgrade;
pub mod verify;
pub mod watch;
pub mod witness;

pub use report::{Event, NoticedClock, Outcome, Reporter, Silent, Task};

/// A 64-bit hash of `value`, the same throughout the process: what a pass over
/// a whole collection keeps of each item (8 bytes) to know it again later.
pub(crate) fn hash64(value: &impl std::hash::Hash) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(value)
}
