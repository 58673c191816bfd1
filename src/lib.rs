//! `ibi`: a uniform-repository collection manager built on INPE's Internet
//! Based Identifiers. The library owns identifiers (`id`), BagIt items
//! (`bag`), collections and their storage (`store`), operations (`ops`), durable file
//! primitives (`fsx`), the event log's format (`events`), text made safe for markup (`markup`), problems found in data (`problem`) and typed errors
//! (`error`); it never sees clap or indicatif, which stay in the binary. It
//! never prints either: what it has to say goes through a `Reporter` or an error.

#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod bag;
pub mod checkpoint;
pub mod digest;
pub mod error;
pub mod events;
pub mod fsx;
pub mod id;
pub mod markup;
pub mod merkle;
pub mod ops;
pub mod problem;
pub mod store;
pub mod sync;

pub use error::{Error, ErrorClass, ParseError, Result};
pub use id::{Granularity, Handle, Ibip, Identifier, Minted, PilinSuffix, RepositoryName, Subsystem, Timestamp};
pub use problem::{Problem, ProblemKind};
