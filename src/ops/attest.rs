//! Store-attested checks (`verify --attested`, ARCHITECTURE.md "Store-attested
//! checks"): each present item's tagmanifest is read and held to the identity
//! its record keeps, its sha256 manifest read and held to the tagmanifest,
//! and every other file's SHA-256 *as the store keeps it* (`store::attest`)
//! compared with the manifests, its bytes not read. Such a check is recorded
//! as store-attested (`FixityCheck::attested`): `verify --age` says how many
//! items rest on one, and the witness never counts one as confirming bytes.
//! It catches an object replaced behind ibi's back (its checksum differs) or
//! gone, never a bit flip inside the store's replica. An item one of whose
//! files has no checksum kept (uploaded without one, or in parts) is read
//! and verified whole instead, and recorded as a read check.

use rayon::prelude::*;

use crate::bag::manifest::{self, ManifestEntry};
use crate::bag::TAGMANIFEST;
use crate::error::{Error, Result};
use crate::id::RepositoryName;
use crate::ops::report::{Outcome, Reporter, Task};
use crate::problem::{Problem, ProblemKind};
use crate::store::attest::StoreChecksums;
use crate::store::inventory::FixityCheck;
use crate::store::{Status, Store};

/// What `verify --attested` did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AttestSummary {
    pub items: u64,
    /// Items whose every file the store attested.
    pub attested: u64,
    /// Items read and verified whole, some file of theirs having no checksum kept.
    pub read: u64,
    pub problems: u64,
}

/// What one item's attestation found.
enum Attestation {
    /// Every file as the manifests say: how many files.
    Whole(u64),
    /// Files that differ or are gone.
    Damaged(Vec<Problem>),
    /// A file whose checksum the store does not keep.
    Unattestable,
}

/// Items attested at once, their checks then kept in one batch.
const ITEMS_AT_ONCE: usize = 256;

/// Attests every present item of `store`, whose store must keep checksums.
pub fn attest(store: &dyn Store, reporter: &dyn Reporter) -> Result<AttestSummary> {
    let Some(checksums) = store.store_checksums() else {
        return Err(Error::Refused {
            what: format!("a store-attested check of {}", store.location()),
            why: "its store keeps no checksums of its own (S3 stores that verify x-amz-checksum-sha256 do): \
                  run verify without --attested"
                .into(),
        });
    };
    reporter.begin(Task::Verify);
    let mut summary = AttestSummary::default();
    let mut chunk = Vec::with_capacity(ITEMS_AT_ONCE);
    let mut summaries = store.inventory().record_summaries();
    loop {
        let next = summaries.next().transpose()?;
        if let Some(record) = next.as_ref().filter(|r| r.status == Status::Present) {
            chunk.push((record.name.clone(), record.identity.clone()));
        }
        if chunk.len() == ITEMS_AT_ONCE || (next.is_none() && !chunk.is_empty()) {
            attest_chunk(store, checksums, &std::mem::take(&mut chunk), &mut summary, reporter);
        }
        if next.is_none() {
            break;
        }
    }
    reporter.end();
    Ok(summary)
}

/// Attests a chunk of items in parallel, reads those it cannot attest, and
/// keeps every check.
fn attest_chunk(
    store: &dyn Store,
    checksums: &dyn StoreChecksums,
    chunk: &[(RepositoryName, String)],
    summary: &mut AttestSummary,
    reporter: &dyn Reporter,
) {
    let date = crate::store::inventory::fixity_date(crate::id::Timestamp::now());
    let outcomes: Vec<(FixityCheck, Vec<Problem>, bool)> = chunk
        .par_iter()
        .map(|(name, identity)| match attest_item(store, checksums, name, identity) {
            Attestation::Whole(files) => (
                FixityCheck { attested: true, ..FixityCheck::read(name.clone(), date.clone(), true, files, 0) },
                Vec::new(),
                false,
            ),
            Attestation::Damaged(problems) => (
                FixityCheck { attested: true, ..FixityCheck::read(name.clone(), date.clone(), false, 0, 0) },
                problems,
                false,
            ),
            Attestation::Unattestable => {
                let (check, problems) = store.check_item(name, &|n| reporter.bytes(n));
                let ok = problems.is_empty();
                (FixityCheck::read(name.clone(), date.clone(), ok, check.files, check.bytes), problems, true)
            }
        })
        .collect();
    let mut checks = Vec::with_capacity(outcomes.len());
    for (check, problems, read) in outcomes {
        summary.items += 1;
        match (read, check.ok) {
            (true, _) => summary.read += 1,
            (false, true) => summary.attested += 1,
            (false, false) => {}
        }
        summary.problems += problems.len() as u64;
        problems.iter().for_each(|p| reporter.problem(p));
        reporter.item(&check.name, if check.ok { Outcome::Ok } else { Outcome::Damaged });
        checks.push(check);
    }
    if let Some(writer) = store.ledger().writer() {
        if let Err(e) = writer.record_fixity(&checks) {
            reporter.warning(&format!("the dates of {} fixity check(s) were not kept: {e}", checks.len()));
        }
    }
}

/// One item's attestation: its two sha256 manifests read and held to its
/// recorded identity, every other file's kept checksum compared.
fn attest_item(
    store: &dyn Store,
    checksums: &dyn StoreChecksums,
    name: &RepositoryName,
    identity: &str,
) -> Attestation {
    let item = name.to_string();
    let damaged = |file: &str, kind: ProblemKind, detail: String| {
        Attestation::Damaged(vec![Problem::new(&item, Some(file), kind, detail)])
    };
    let bag = store.item_files(name);
    let Ok(tags) = bag.read(TAGMANIFEST) else {
        return damaged(TAGMANIFEST, ProblemKind::Missing, "it does not read".into());
    };
    let read_identity = crate::fsx::hash_bytes(&tags);
    if read_identity != identity {
        let detail = format!("its digest {read_identity} is not the identity {identity} the record keeps");
        return damaged(TAGMANIFEST, ProblemKind::Changed, detail);
    }
    let tag_entries = manifest::parse(&String::from_utf8_lossy(&tags), 64).0;
    let Some(payload_manifest) = tag_entries.iter().find(|e| e.path == "manifest-sha256.txt") else {
        return damaged(TAGMANIFEST, ProblemKind::BadTagFile, "it lists no manifest-sha256.txt".into());
    };
    let payload = match bag.read(&payload_manifest.path) {
        Ok(bytes) if crate::fsx::hash_bytes(&bytes) == payload_manifest.digest => bytes,
        _ => return damaged(&payload_manifest.path, ProblemKind::DigestMismatch, "it fails the tagmanifest".into()),
    };
    let payload_entries = manifest::parse(&String::from_utf8_lossy(&payload), 64).0;
    let others = tag_entries.iter().filter(|e| e.path != payload_manifest.path).chain(&payload_entries);
    compare_kept(checksums, name, others.collect())
}

/// Each file's kept checksum against its manifest entry.
fn compare_kept(checksums: &dyn StoreChecksums, name: &RepositoryName, entries: Vec<&ManifestEntry>) -> Attestation {
    let item = name.to_string();
    let mut problems = Vec::new();
    for entry in &entries {
        match checksums.stored_sha256(name, &entry.path) {
            Ok(Some(kept)) if kept.eq_ignore_ascii_case(&entry.digest) => {}
            Ok(Some(kept)) => problems.push(Problem::new(
                &item,
                Some(&entry.path),
                ProblemKind::DigestMismatch,
                format!(
                    "the store keeps SHA-256 {kept} for it, the manifest says {}: replaced behind ibi's back",
                    entry.digest
                ),
            )),
            Ok(None) => return Attestation::Unattestable,
            Err(Error::NotFound { .. }) => problems.push(Problem::new(
                &item,
                Some(&entry.path),
                ProblemKind::Missing,
                "the store holds no such object",
            )),
            Err(e) => problems.push(Problem::new(&item, Some(&entry.path), ProblemKind::Unreadable, e.to_string())),
        }
    }
    match problems.is_empty() {
        true => Attestation::Whole(entries.len() as u64 + 2),
        false => Attestation::Damaged(problems),
    }
}
