//! `.ibi/collection.toml`: the format version, the identification subsystem
//! (host, port, ip, ibip_port, granularity), the organisation, and the
//! collection's part in minting: it mints the subsystem's names, follows the
//! collection that does (`init --like`), or has stopped (`retire`, or `handover`
//! to a successor), and its copy policy: the sites that hold copies of it
//! (`[[site]]`), its own disaster zone and media, and how many copies in how
//! many zones it needs (`[policy]`). This module owns reading, checking and
//! writing it.

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
    /// A retired collection mints no names (its successor does); `ibi retire` and
    /// `ibi handover` set it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retired: bool,
    /// The minting collection this one follows (`init --like`): it holds copies of
    /// the subsystem's items and never mints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follows: Option<Peer>,
    /// Where minting went when this collection handed it over (`ibi handover`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successor: Option<Successor>,
    /// This collection's own disaster zone (`ibi site here`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// What this collection's copy is kept on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<Media>,
    /// The SeaweedFS cluster behind this collection, when it is in S3 (`ibi site
    /// here --seaweedfs-master … --seaweedfs-filer …`): verify then reports the
    /// items whose volumes keep fewer replicas than they ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seaweedfs: Option<SeaweedFs>,
    pub subsystem: SubsystemConfig,
    /// The other places holding copies of it (`ibi site add`).
    #[serde(default, rename = "site", skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<Site>,
    /// How many copies it needs (`ibi site policy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// The Ed25519 public key (hex) that signs the collection's witnesses, written
    /// when the key is made: what a proof's key is checked against
    /// (`ibi witness --check PROOF --key HEX`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub witness_key: Option<String>,
}

/// What a copy is kept on (NDSA's storage levels ask for more than one kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Media {
    #[default]
    Disk,
    Object,
    Tape,
    Other,
}

impl Media {
    pub fn parse(text: &str) -> Option<Media> {
        ["disk", "object", "tape", "other"]
            .iter()
            .position(|m| *m == text)
            .map(|i| [Media::Disk, Media::Object, Media::Tape, Media::Other][i])
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Media::Disk => "disk",
            Media::Object => "object",
            Media::Tape => "tape",
            Media::Other => "other",
        }
    }
}

/// Another place that holds copies of the collection: any location ibi opens
/// (local, HOST:PATH, ssh://, s3://), made with `init --like` so it never mints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Site {
    pub url: String,
    /// Its declared disaster zone.
    #[serde(default)]
    pub zone: String,
    #[serde(default)]
    pub media: Media,
    /// Where the public reaches its items over HTTP (`ibi serve` redirects there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// The SeaweedFS cluster behind an `s3://` site, whose master and filer say in
    /// which data centres its objects are (`ibi audit --placement`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seaweedfs: Option<SeaweedFs>,
}

/// The HTTP addresses of a SeaweedFS cluster's master (volume placement) and
/// filer (which volumes hold each object's chunks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeaweedFs {
    /// `http://HOST:9333`
    pub master: String,
    /// `http://HOST:8888`
    pub filer: String,
}

/// How many complete, verified copies the collection needs, in how many zones,
/// checked how recently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// This collection included.
    pub copies: u32,
    pub zones: u32,
    /// `90d`: a copy whose last good check is older is not counted as verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fixity_age: Option<String>,
    /// `365d`: a copy whose last check was store-attested (the store's
    /// checksums, no byte read) counts as verified only when its bytes were
    /// also read and found whole within this longer cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_read_age: Option<String>,
}

/// Reads `90d` (days; the only unit a preservation policy needs).
pub fn parse_days(text: &str) -> std::result::Result<u32, String> {
    let days = text.trim().strip_suffix('d').unwrap_or(text.trim());
    days.parse().map_err(|_| format!("{text:?} is not a number of days such as 90d"))
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

/// Another collection, as a config names it: its id and where it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    pub id: String,
    pub location: String,
}

/// The collection minting passed to: who, since when (RFC 3339, UTC), and its
/// public base URL if the handover gave one (resolvers send names there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Successor {
    pub id: String,
    pub location: String,
    pub since: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_url: Option<String>,
}

/// A collection's part in minting its subsystem's names (RTC-10: one label
/// generator per identification subsystem, so exactly one collection mints).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Minting {
    /// It mints (every collection made before `--like` existed does).
    Mints,
    /// It holds copies and follows the collection that mints.
    Follows(Peer),
    /// It stopped minting, and handed over to a successor if it names one.
    Retired(Option<Successor>),
}

impl Minting {
    pub fn mints(&self) -> bool {
        matches!(self, Minting::Mints)
    }

    /// Why a collection in this state mints no names, and what to do instead.
    pub fn why_not(&self, place: &str) -> String {
        match self {
            Minting::Mints => format!("{place} mints"),
            Minting::Follows(peer) => format!(
                "it follows {} ({}), the collection that mints this subsystem's names: deposit there, \
                 or move minting here with `ibi handover {} {place}`",
                peer.location, peer.id, peer.location
            ),
            Minting::Retired(Some(next)) => {
                format!(
                    "it handed minting over to {} ({}) on {}: deposit there",
                    next.location,
                    next.id,
                    crate::error::to_the_second(&next.since)
                )
            }
            Minting::Retired(None) => "it is retired: deposit into the collection that replaced it".into(),
        }
    }
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
            follows: None,
            successor: None,
            zone: None,
            media: None,
            seaweedfs: None,
            sites: Vec::new(),
            policy: None,
            witness_key: None,
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
        if let Some(policy) = &config.policy {
            // A copy spans several zones only where a cluster proves its data centres.
            let spanning = config.sites.iter().any(|site| site.seaweedfs.is_some());
            if policy.copies == 0 || policy.zones == 0 || (policy.zones > policy.copies && !spanning) {
                return Err(invalid(format!(
                    "[policy] asks for {} copies in {} zones: both must be at least 1, and zones at most copies \
                     (unless a site names the SeaweedFS cluster that proves its data centres)",
                    policy.copies, policy.zones
                )));
            }
            if let Some(age) = &policy.max_fixity_age {
                parse_days(age).map_err(|why| invalid(format!("[policy] max_fixity_age: {why}")))?;
            }
            if let Some(age) = &policy.max_read_age {
                parse_days(age).map_err(|why| invalid(format!("[policy] max_read_age: {why}")))?;
            }
        }
        let s = &config.subsystem;
        let granularity: Granularity = s.granularity.parse().map_err(|e: crate::ParseError| invalid(e.to_string()))?;
        let subsystem =
            Subsystem::new(&s.host, s.port, s.ip, s.ibip_port, granularity).map_err(|e| invalid(e.to_string()))?;
        Ok((config, subsystem))
    }

    /// The collection's part in minting.
    pub fn minting(&self) -> Minting {
        match (&self.follows, self.retired) {
            (_, true) => Minting::Retired(self.successor.clone()),
            (Some(peer), false) => Minting::Follows(peer.clone()),
            (None, false) => Minting::Mints,
        }
    }

    /// This config with its part in minting set to `minting`.
    pub fn with_minting(&self, minting: &Minting) -> CollectionConfig {
        let mut config = self.clone();
        (config.retired, config.follows, config.successor) = match minting {
            Minting::Mints => (false, None, None),
            Minting::Follows(peer) => (false, Some(peer.clone()), None),
            Minting::Retired(next) => (true, None, next.clone()),
        };
        config
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a config always serialises")
    }
}
