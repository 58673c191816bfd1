//! The local backend: a collection in a folder of a POSIX filesystem
//! (ARCHITECTURE.md, "On-disk layout"). It owns the layout, the walk, the
//! aliases, the write lock, staging, placement, the trash, the journal,
//! recovery and the minter's state file, and implements `Store` and `WriteBackend` with them. What every backend
//! shares (the collection config, the state file, the overlap guard) is in `store/`.

pub mod alias;
pub mod collection;
mod cosign;
mod deposits;
mod events;
pub mod fixity;
mod held_floor;
mod identities;
pub mod inventory;
mod journal_identity;
mod kept;
pub mod layout;
pub mod minter;
pub mod place;
mod sqlite;
mod store_impl;
mod time_key;
pub mod walk;

pub use collection::{
    absolute, remove_live_staging, staging_guard, Collection, CollectionConfig, Entry, Intent, Item, ItemWalker,
    Layout, LockWait, Slot, StagingDir,
};
pub use place::{move_all, place_all, remove_all, same_filesystem, Staged};
