//! The local backend: collections on a POSIX filesystem. Today it holds the
//! minter's state file; the collection's layout, walk, aliases, lock, staging,
//! placement, trash, journal and recovery move here from `collection` as the
//! `Store` seam grows (ARCHITECTURE.md, "Storage").

pub mod place;
pub mod state_file;

pub use place::{move_all, place_all, remove_all, same_filesystem, Staged};
pub use state_file::StateFile;
