//! `.ibi/collection.toml`: the format version, the identification subsystem
//! (host, port, ip, ibip_port, granularity), the organisation, and whether the
//! collection is retired (mints no more names). This module
//! owns reading, checking and writing it.

use std::net::IpAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::id::{Granularity, Subsystem};

pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectionConfig {
    pub format_version: u32,
    /// The collection's own id, a UUID URN given at init (or on the first write of a
    /// collection made before ids): the origin recorded in the items it mints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organisation: Option<String>,
    /// A retired collection mints no names (its successor does); `ibi retire` sets it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retired: bool,
    pub subsystem: SubsystemConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubsystemConfig {
    pub host: String,
    #[serde(default = "default_port")]
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    #[serde(default = "default_ibip_port")]
    pub ibip_port: u16,
    /// Decimal seconds, exact: "60", "1", "0.001".
    #[serde(default = "default_granularity")]
    pub granularity: String,
}

fn default_port() -> u16 {
    80
}
fn default_ibip_port() -> u16 {
    800
}
fn default_granularity() -> String {
    "1".into()
}

/// A new collection id: a random (version 4) UUID as a URN.
pub fn new_collection_id() -> String {
    uuid::Uuid::new_v4().urn().to_string()
}

impl CollectionConfig {
    pub fn new(subsystem: &Subsystem, organisation: Option<String>) -> Self {
        CollectionConfig {
            format_version: FORMAT_VERSION,
            id: Some(new_collection_id()),
            organisation,
            retired: false,
            subsystem: SubsystemConfig {
                host: subsystem.host.clone(),
                port: subsystem.port,
                ip: subsystem.ip,
                ibip_port: subsystem.ibip_port,
                granularity: subsystem.granularity.to_decimal(),
            },
        }
    }

    /// Reads and checks the file; every problem names the path.
    pub fn read(path: &Path) -> Result<(CollectionConfig, Subsystem)> {
        let text = std::fs::read_to_string(path).with_path("read", path)?;
        Self::parse(&text, &format!("collection config {}", path.display()))
    }

    /// Reads and checks a config's text; every problem names `what`.
    pub fn parse(text: &str, what: &str) -> Result<(CollectionConfig, Subsystem)> {
        let invalid = |problem: String| Error::Invalid { what: what.to_string(), problem };
        let config: CollectionConfig = toml::from_str(text).map_err(|e| invalid(e.message().to_string()))?;
        if config.format_version != FORMAT_VERSION {
            return Err(invalid(format!(
                "format_version {} is not supported (expected {FORMAT_VERSION})",
                config.format_version
            )));
        }
        let s = &config.subsystem;
        let granularity: Granularity = s.granularity.parse().map_err(|e: crate::ParseError| invalid(e.to_string()))?;
        let subsystem =
            Subsystem::new(&s.host, s.port, s.ip, s.ibip_port, granularity).map_err(|e| invalid(e.to_string()))?;
        Ok((config, subsystem))
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a config always serialises")
    }
}
