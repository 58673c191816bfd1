//! Identifiers of the IBI standard and their neighbours: repository names,
//! IBIps, the temporal distributor and minter, PILIN suffixes and handles.
//! Everything here is pure except the minter's state file and lock.
//! `Identifier::parse` tells the kinds apart for `ibi parse`.

pub mod base;
pub mod distributor;
pub mod handle;
pub mod ibip;
pub mod minter;
pub mod name;
pub mod pilin;
pub mod subsystem;
pub mod time;
pub mod vectors;

pub use distributor::{Distributor, Granularity};
pub use handle::Handle;
pub use ibip::Ibip;
pub use minter::{Clock, Minter, MinterState, ReplayClock, SystemClock};
pub use name::{Prefix, RepositoryName, Suffix};
pub use pilin::PilinSuffix;
pub use subsystem::{Minted, Subsystem};
pub use time::Timestamp;

use crate::error::ParseError;

/// Any identifier `ibi parse` understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identifier {
    Name(RepositoryName),
    Ibip(Ibip),
    Pilin(PilinSuffix),
    Handle(Handle),
}

impl Identifier {
    /// Tells the kind from the shape (a numeric naming authority before `/` is a handle;
    /// four `/`-separated parts a repository name; two an IBIp unless the first part
    /// holds a `.`, which makes it a lone repository-name prefix; none a PILIN suffix),
    /// then parses it as that kind so the error speaks of what the text resembles.
    pub fn parse(text: &str) -> Result<Identifier, ParseError> {
        let slashes = text.matches('/').count();
        let first = text.split('/').next().unwrap_or("");
        if slashes >= 1 && handle::is_handle_prefix(first) {
            return Handle::parse(text).map(Identifier::Handle);
        }
        match slashes {
            0 => PilinSuffix::parse(text).map(Identifier::Pilin),
            1 if !first.contains('.') => Ibip::parse(text).map(Identifier::Ibip),
            _ => RepositoryName::parse(text).map(Identifier::Name),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Identifier::Name(_) => "repository name",
            Identifier::Ibip(_) => "IBIp",
            Identifier::Pilin(_) => "PILIN suffix",
            Identifier::Handle(_) => "handle",
        }
    }
}

/// Serialises an identifier as its text and reads it back with its parser, so
/// that records and the far protocol carry names as users write them.
macro_rules! serde_as_text {
    ($type:ty) => {
        impl serde::Serialize for $type {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $type {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                <$type>::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

serde_as_text!(RepositoryName);
serde_as_text!(Ibip);
