//! `ibi`: a uniform-repository collection manager built on INPE's Internet
//! Based Identifiers. The library owns identifiers (`id`), durable file
//! primitives (`fsx`) and typed errors (`error`); it never sees clap or
//! indicatif, which stay in the binary.

pub mod error;
pub mod fsx;
pub mod id;

pub use error::{Error, ErrorClass, ParseError, Result};
pub use id::{Granularity, Handle, Ibip, Identifier, Minted, PilinSuffix, RepositoryName, Subsystem, Timestamp};
