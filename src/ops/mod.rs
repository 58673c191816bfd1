//! Operations on collections: deposit, verify, list and the hot-folder watch.
//! Each takes a `Reporter` for progress and returns a summary or a typed error.

pub mod deposit;
pub mod list;
pub mod report;
pub mod source;
pub mod transfer;
pub mod verify;
pub mod watch;

pub use report::{Reporter, Silent};
