//! An OCFL site's fixity dates (`verify ocfl:…`, `verify --sites`): each
//! check is one line (`NAME<TAB>DATE<TAB>pass|fail<TAB>FILES<TAB>BYTES<TAB>SIGNATURE`)
//! of a file under `extensions/ibi-site/checks/`, one file per batch a verify
//! keeps (named by the time, so a batch costs its own lines, not a rewrite of
//! every item's), merged into one when they pass `MERGE_AT`; an item's check
//! is its newest line (at one date, a failure),
//! signed, as an S3 collection's check keys are (`store::inventory::signed_text`,
//! with no log event), by a key of the site's that lives on this machine
//! beside the witness keys (`witness_key::machine_key_path` of `ocfl-site-of-`
//! and the collection's id), made by the first check kept. A line this machine
//! cannot verify (no key here, another key, a date changed) counts as never
//! checked, so whoever can write the root cannot make a copy look checked. An
//! OCFL site keeps no log: the check is bound to the key, not to an event.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::id::RepositoryName;
use crate::store::inventory::{signed_text, FixityCheck};

use super::OcflStore;

/// The site's folder of checks.
pub const CHECKS_DIR: &str = "extensions/ibi-site/checks";
/// How many files of checks the folder holds before they are merged into one.
const MERGE_AT: usize = 64;

impl OcflStore {
    /// The seed of the key this machine signs the site's checks with; made
    /// when `make` and it is missing.
    fn check_seed_here(&self, make: bool) -> Option<[u8; 32]> {
        let id = &self.config.follows.as_ref()?.id;
        crate::store::witness_key::machine_seed(&format!("ocfl-site-of-{id}"), make)
    }

    /// The files of checks, oldest first (by name: the time each was written).
    fn check_files(&self) -> Result<Vec<String>> {
        let files = self.files.sizes_under(CHECKS_DIR)?;
        Ok(files.into_keys().filter(|f| f.ends_with(".tsv") && !f.contains('/')).collect())
    }

    /// Each item's standing check among the lines `files` hold (signature not
    /// yet checked): the newest, and at one date a failure.
    fn checks_held(&self, files: &[String]) -> Result<BTreeMap<String, (FixityCheck, String)>> {
        let mut held: BTreeMap<String, (FixityCheck, String)> = BTreeMap::new();
        for file in files {
            let rel = format!("{CHECKS_DIR}/{file}");
            // None: merged away meanwhile, its lines in the merged file.
            let Some(bytes) = self.files.read_whole(&rel).map_err(|e| Error::io("read", Path::new(&rel), e))? else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes);
            for (check, signature) in text.lines().filter_map(parse_line) {
                let name = check.name.to_string();
                let stands = held.get(&name).is_none_or(|(old, _)| outranks(&check, old));
                if stands {
                    held.insert(name, (check, signature));
                }
            }
        }
        Ok(held)
    }

    /// Writes one file of lines, named by the time and a random tail.
    fn write_checks(&self, lines: &str) -> Result<String> {
        let nanos = crate::id::Timestamp::now().nanos();
        let file = format!("{nanos:024}-{}.tsv", uuid::Uuid::new_v4().simple());
        self.files.replace(&format!("{CHECKS_DIR}/{file}"), lines.as_bytes())?;
        Ok(file)
    }
}

/// Whether `check` stands over `other` of the same item: newer, or at one date a failure.
fn outranks(check: &FixityCheck, other: &FixityCheck) -> bool {
    let rank = |c: &FixityCheck| (chrono::DateTime::parse_from_rfc3339(&c.date).ok(), !c.ok);
    rank(check) > rank(other)
}

/// One line: the check and its signature (hex); `None` for a line that is not one.
fn parse_line(line: &str) -> Option<(FixityCheck, String)> {
    let parts: Vec<&str> = line.split('\t').collect();
    let [name, date, outcome, files, bytes, signature] = parts[..] else { return None };
    let ok = match outcome {
        "pass" => true,
        "fail" => false,
        _ => return None,
    };
    let name = RepositoryName::parse(name).ok()?;
    let check = FixityCheck::read(name, date.to_string(), ok, files.parse().ok()?, bytes.parse().ok()?);
    Some((check, signature.to_string()))
}

fn line(check: &FixityCheck, signature: &str) -> String {
    let outcome = if check.ok { "pass" } else { "fail" };
    format!("{}\t{}\t{outcome}\t{}\t{}\t{signature}\n", check.name, check.date, check.files, check.bytes)
}

/// Whether `signature` (hex) is `key`'s over the check.
fn signed_by(check: &FixityCheck, signature: &str, key: &ed25519_dalek::VerifyingKey) -> bool {
    let Ok(Ok(signature)) = hex::decode(signature).map(|b| ed25519_dalek::Signature::from_slice(&b)) else {
        return false;
    };
    key.verify_strict(signed_text(check, 0, "-").as_bytes(), &signature).is_ok()
}

impl crate::store::ledger::Ledger for OcflStore {
    /// Every item's last check whose signature this machine's key for the
    /// site verifies; none without that key.
    fn fixity_checks(&self) -> Result<Option<Vec<FixityCheck>>> {
        let Some(seed) = self.check_seed_here(false) else { return Ok(Some(Vec::new())) };
        let key = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
        // A line that does not verify never stands, not even over an older true one.
        let held = self.checks_held(&self.check_files()?)?;
        Ok(Some(held.into_values().filter(|(c, s)| signed_by(c, s, &key)).map(|(c, _)| c).collect()))
    }

    fn writer(&self) -> Option<&dyn crate::store::ledger::LedgerWriter> {
        Some(self)
    }
}

impl crate::store::ledger::LedgerWriter for OcflStore {
    /// Signs each check with this machine's key for the site (made on first
    /// use) and keeps it as its item's line, under the root's lock.
    fn record_fixity(&self, checks: &[FixityCheck]) -> Result<()> {
        if checks.is_empty() {
            return Ok(());
        }
        let Some(seed) = self.check_seed_here(true) else {
            return Err(Error::Refused {
                what: format!("the fixity dates of {}", self.files.place()),
                why: "this machine has no folder for its keys (IBI_KEY_DIR), or cannot write one there".into(),
            });
        };
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        let sign = |check: &FixityCheck| {
            let signature = ed25519_dalek::Signer::sign(&key, signed_text(check, 0, "-").as_bytes());
            line(check, &hex::encode(signature.to_bytes()))
        };
        let _lock = self.files.lock()?;
        self.write_checks(&checks.iter().map(sign).collect::<String>())?;
        let files = self.check_files()?;
        if files.len() > MERGE_AT {
            // The merged file first, durably; then the files it holds go.
            let held = self.checks_held(&files)?;
            self.write_checks(&held.values().map(|(c, s)| line(c, s)).collect::<String>())?;
            for file in &files {
                self.files.remove(&format!("{CHECKS_DIR}/{file}"))?;
            }
        }
        Ok(())
    }
}
