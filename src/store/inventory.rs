//! The inventory's records (ARCHITECTURE.md, "The inventory"): what a collection
//! knows of every item it holds or has held, by name: its IBIp, the collection
//! that minted it, its status, and each version with its date and identity
//! digest. Every backend keeps one record per name, updated in the same durable
//! step as each placement, replacement and removal. A record is derived from the
//! item's own bag (`ItemRecord::from_bag`), so an inventory can be rebuilt from
//! the bags; what a rebuild cannot restore is the knowledge of items that vanished.

use serde::{Deserialize, Serialize};

use crate::bag::history::{History, Withdrawal};
use crate::bag::{BagFiles, BagInfo, BAG_INFO_TXT, TAGMANIFEST};
use crate::error::{Error, Result};
use crate::id::{Ibip, RepositoryName};

/// Where an item stands in the collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// At its place, in service.
    Present,
    /// At its place as a tombstone: the name is never given again.
    Withdrawn,
    /// Taken away on purpose (moved to another collection by migrate).
    Removed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Present => "present",
            Status::Withdrawn => "withdrawn",
            Status::Removed => "removed",
        }
    }

    pub fn parse(text: &str) -> Option<Status> {
        [Status::Present, Status::Withdrawn, Status::Removed].into_iter().find(|s| s.as_str() == text)
    }

    /// Whether the item should be at its place.
    pub fn expected_on_disk(self) -> bool {
        self != Status::Removed
    }
}

/// One version of an item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRecord {
    pub number: u32,
    /// When it became current (RFC 3339, UTC).
    pub date: String,
    /// Its identity digest.
    pub digest: String,
}

/// Where an item went when `migrate` moved it away: the collection (as its
/// location), the date (RFC 3339, UTC), and that collection's public base URL
/// (`migrate --forward-url`), to which a resolver sends the name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forward {
    pub to: String,
    pub date: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// A forwarding URL is an absolute http(s) URL ending in a slash (names are
/// appended), with no white space or control character: what a resolver puts
/// in a `Location` header. Checked wherever one enters a collection (the
/// command line, and a far server for whatever a client sends).
pub fn check_forward_url(url: &str) -> crate::error::Result<()> {
    let good = (url.starts_with("https://") || url.starts_with("http://"))
        && url.ends_with('/')
        && !url.contains(|c: char| c.is_whitespace() || c.is_control());
    if good {
        return Ok(());
    }
    let problem = format!("{url:?} is not an http(s) URL ending in \"/\" (names are appended to it)");
    Err(crate::error::Error::Invalid { what: "forwarding URL".into(), problem })
}

impl Forward {
    /// Refuses a forward whose URL or place a resolver could not put in a header as it is.
    pub fn check(&self) -> crate::error::Result<()> {
        if let Some(url) = &self.url {
            check_forward_url(url)?;
        }
        if self.to.contains(char::is_control) || self.date.contains(char::is_control) {
            let problem = format!("{:?} holds a control character", self.to);
            return Err(crate::error::Error::Invalid { what: "forwarding place".into(), problem });
        }
        Ok(())
    }
}

/// One check of an item's fixity: when (RFC 3339, UTC, to the second, so that
/// dates sort as text: `fixity_date`) and whether every file matched its manifests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixityCheck {
    pub name: RepositoryName,
    pub date: String,
    pub ok: bool,
    /// The files and bytes checked (for the log).
    #[serde(default)]
    pub files: u64,
    #[serde(default)]
    pub bytes: u64,
    /// Store-attested: the store's own SHA-256 of each file (kept from the
    /// checksum it verified at upload) compared with the manifests, its bytes
    /// not read (`verify --attested`). It catches an object replaced behind
    /// ibi's back, never a bit flip inside the store's replica.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attested: bool,
}

/// A check's outcome as its key names it: `pass`, `fail`, or `attest` (a
/// store-attested pass).
pub fn outcome_word(check: &FixityCheck) -> &'static str {
    match (check.ok, check.attested) {
        (true, true) => "attest",
        (true, false) => "pass",
        (false, _) => "fail",
    }
}

/// What a signature over a fixity check signs: the check whole and the log
/// event it names (an S3 check key's; `0` and `-` where there is none, as on
/// an OCFL site).
pub fn signed_text(check: &FixityCheck, seq: u64, hash: &str) -> String {
    let outcome = outcome_word(check);
    format!(
        "ibi fixity check\n{}\n{}\n{outcome}\n{}\n{}\n{seq}\n{hash}\n",
        check.name, check.date, check.files, check.bytes
    )
}

impl FixityCheck {
    /// A check that read the item's bytes.
    pub fn read(name: RepositoryName, date: String, ok: bool, files: u64, bytes: u64) -> FixityCheck {
        FixityCheck { name, date, ok, files, bytes, attested: false }
    }

    /// The check as an event of the log.
    pub fn event(&self) -> crate::events::Event {
        let outcome = if self.ok { "pass" } else { "fail" };
        let how = if self.attested { ", store-attested (the store's checksums, bytes not read)" } else { "" };
        let detail = format!("{} files, {} bytes{how}", self.files, self.bytes);
        let (kind, item) = (crate::events::EventKind::Fixity, Some(self.name.to_string()));
        crate::events::Event::dated(self.date.clone(), kind, item, outcome, detail)
    }
}

/// The date of a fixity check made at `at`: RFC 3339 to the whole second.
pub fn fixity_date(at: crate::id::Timestamp) -> String {
    at.to_rfc3339_seconds()
}

/// What a collection knows of one item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemRecord {
    pub name: RepositoryName,
    pub ibip: Option<Ibip>,
    /// The UUID URN of the collection that minted the name, when known.
    pub origin: Option<String>,
    pub status: Status,
    /// Every version, oldest first; the last is current. Never empty: a record
    /// with none is refused wherever it is read (the wire, an object, a row).
    #[serde(deserialize_with = "at_least_one_version")]
    pub versions: Vec<VersionRecord>,
    pub withdrawn: Option<Withdrawal>,
    /// Where the item went, once `migrate` moved it (also noted just before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved: Option<Forward>,
    /// The content keys of the deposits made as this item, so that a collection
    /// holding it by any route (copy, mirror, migrate) recognises a repeated
    /// deposit. They only say where to look: a deposit is "already deposited" only
    /// when the item's current manifest holds exactly its bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deposit_keys: Vec<String>,
}

/// What a listing shows of a record: its name, IBIp, status and current
/// identity digest, read without decoding the rest (versions, keys, forward).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSummary {
    pub name: RepositoryName,
    pub ibip: Option<Ibip>,
    pub status: Status,
    pub identity: String,
}

impl From<ItemRecord> for RecordSummary {
    fn from(record: ItemRecord) -> Self {
        let identity = record.current().digest.clone();
        RecordSummary { name: record.name, ibip: record.ibip, status: record.status, identity }
    }
}

impl ItemRecord {
    /// Where the item went, if it is no longer here because migrate moved it.
    pub fn gone_to(&self) -> Option<&Forward> {
        self.moved.as_ref().filter(|_| self.status == Status::Removed)
    }
}

fn at_least_one_version<'de, D: serde::Deserializer<'de>>(
    from: D,
) -> std::result::Result<Vec<VersionRecord>, D::Error> {
    let versions = Vec::<VersionRecord>::deserialize(from)?;
    if versions.is_empty() {
        return Err(serde::de::Error::custom("an item record with no versions"));
    }
    Ok(versions)
}

fn bad_bag(name: &RepositoryName, file: &str, problem: String) -> Error {
    Error::Data { what: format!("{name}/{file}"), problem }
}

impl ItemRecord {
    /// The current version.
    pub fn current(&self) -> &VersionRecord {
        self.versions.last().expect("a record has at least one version")
    }

    /// Whether `digest` is the identity of one of this item's versions before the current one.
    pub fn follows(&self, digest: &str) -> bool {
        self.versions[..self.versions.len() - 1].iter().any(|v| v.digest == digest)
    }

    /// The record an item's bag implies: bag-info's identifiers and history, and
    /// its identity digest, computed where the bytes are.
    pub fn from_bag(files: &dyn BagFiles, name: &RepositoryName) -> Result<ItemRecord> {
        let info = crate::bag::info::read_info(files, &name.to_string())?;
        let digest = files.digests(TAGMANIFEST, &[]).map_err(|e| bad_bag(name, TAGMANIFEST, e.to_string()))?;
        Self::from_info(name, &info, digest.sha256())
    }

    /// The record of an item whose bag-info is `info` and identity digest `digest`.
    pub fn from_info(name: &RepositoryName, info: &BagInfo, digest: &str) -> Result<ItemRecord> {
        let history = History::of(info).map_err(|why| bad_bag(name, BAG_INFO_TXT, why))?;
        let mut versions: Vec<VersionRecord> = history
            .earlier
            .iter()
            .map(|e| VersionRecord { number: e.number, date: e.date.clone(), digest: e.digest.clone() })
            .collect();
        let date = history.date.clone().unwrap_or_else(|| name.date().to_rfc3339());
        versions.push(VersionRecord { number: history.version, date, digest: digest.to_string() });
        let status = if history.withdrawn.is_some() { Status::Withdrawn } else { Status::Present };
        Ok(ItemRecord {
            name: name.clone(),
            ibip: crate::store::ibip_in(info),
            origin: history.origin,
            status,
            versions,
            withdrawn: history.withdrawn,
            moved: None,
            deposit_keys: Vec::new(),
        })
    }
}
