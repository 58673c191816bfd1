//! Each item's last fixity check in object storage, kept in a key's name so
//! that every item's check is read by listing, a thousand to a request, with
//! no object fetched: `.ibi/checks/<name path>/<date>!<pass|fail>!<files>!<bytes>!<seq>!<hash>!<signature>`
//! (an empty object), where seq and hash name the check's `fixity` event in
//! the hash-chained log, and the signature (Ed25519, hex) is the collection's
//! witness key's over `signed_text`. A check counts only when its signature
//! holds and the log holds that event for that item (`ObjectLog::holds`): a
//! key written by anyone without the key (a check dated as they please), or
//! by an ibi before checks named their event, counts as never checked. Keeping a check writes its key; the item's older keys
//! go at the next sweep (the first time a handle keeps checks), and until
//! then the newest is the check (at one date, a failure). Under a
//! store-attested check, the newest check that read the bytes and passed is
//! kept too, and read before it: a policy's read cycle asks for its date. Earlier, ibi kept each check as a JSON object
//! at `.ibi/fixity/<name path>`; those are still read (one request each),
//! until a sweep finds a key for the item, or its check is forgotten.

use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::path::Path as Key;
use std::collections::HashSet;

use crate::error::Result;
use crate::id::RepositoryName;
use crate::store::inventory::FixityCheck;
use crate::store::s3::keys::Keys;
use crate::store::s3::objects::{Objects, IN_FLIGHT};

pub const CHECKS: &str = ".ibi/checks";
/// Where ibi kept each check earlier, as JSON.
pub const OLD_FIXITY: &str = ".ibi/fixity";

/// The checks of one collection.
pub struct ObjectChecks<'a> {
    pub objects: &'a Objects,
    pub keys: &'a Keys,
    /// Whether this handle swept the superseded keys yet.
    pub swept: &'a std::sync::atomic::AtomicBool,
}

/// The log event a check names (its seq and hash) and the signature over both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub seq: u64,
    pub hash: String,
    /// Ed25519 over `signed_text`, hex.
    pub signature: String,
}

/// A check and the log event it claims, when its key names one.
pub type ClaimedCheck = (FixityCheck, Option<Logged>);

use crate::store::inventory::outcome_word;
pub use crate::store::inventory::signed_text;

/// Whether `logged`'s signature over `check` holds under `key`.
pub fn signed_by(check: &FixityCheck, logged: &Logged, key: &ed25519_dalek::VerifyingKey) -> bool {
    let Ok(Ok(signature)) = hex::decode(&logged.signature).map(|b| ed25519_dalek::Signature::from_slice(&b)) else {
        return false;
    };
    key.verify_strict(signed_text(check, logged.seq, &logged.hash).as_bytes(), &signature).is_ok()
}

/// The last segment of a check's key.
fn check_segment((check, logged): &ClaimedCheck) -> String {
    let outcome = outcome_word(check);
    let logged = logged.as_ref().map(|l| format!("!{}!{}!{}", l.seq, l.hash, l.signature)).unwrap_or_default();
    format!("{}!{outcome}!{}!{}{logged}", check.date, check.files, check.bytes)
}

/// The check a key names, under `prefix` (`<collection>/.ibi/checks`); none
/// for a key that is not one (written by another party, or a folder object).
fn parse_check_key(prefix: &str, key: &Key) -> Option<ClaimedCheck> {
    let rel = key.as_ref().strip_prefix(prefix)?.strip_prefix('/')?;
    let (name, segment) = rel.rsplit_once('/')?;
    let mut parts = segment.split('!');
    let date = parts.next()?.to_string();
    let (ok, attested) = match parts.next()? {
        "pass" => (true, false),
        "attest" => (true, true),
        "fail" => (false, false),
        _ => return None,
    };
    let (files, bytes) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
    let logged = match (parts.next(), parts.next(), parts.next()) {
        (None, ..) => None,
        (Some(seq), Some(hash), Some(signature)) => {
            Some(Logged { seq: seq.parse().ok()?, hash: hash.into(), signature: signature.into() })
        }
        _ => return None,
    };
    if parts.next().is_some() || chrono::DateTime::parse_from_rfc3339(&date).is_err() {
        return None;
    }
    let name = RepositoryName::parse(name).ok()?;
    Some((FixityCheck { name, date, ok, files, bytes, attested }, logged))
}

/// A check whose signature held, while the log is asked whether it holds the
/// check's event (every item's check is held at once: read whole, with its
/// event's hash, a check took about 350 bytes, 70 MB at 200,000 items): its
/// name and date in one text, and its event as a seq and a tag
/// (`log::event_tag`), in about 120 bytes.
pub struct SignedCheck {
    /// `<name>!<date>` (neither holds a `!`).
    name_date: Box<str>,
    pub seq: u64,
    pub tag: u64,
    files: u64,
    bytes: u64,
    ok: bool,
    attested: bool,
}

impl SignedCheck {
    pub fn of(check: FixityCheck, logged: &Logged, tags: &std::hash::RandomState) -> SignedCheck {
        let token = crate::store::s3::log::item_token(&check.name);
        SignedCheck {
            name_date: format!("{}!{}", check.name, check.date).into_boxed_str(),
            seq: logged.seq,
            tag: crate::store::s3::log::event_tag(tags, logged.seq, &token, &logged.hash),
            files: check.files,
            bytes: check.bytes,
            ok: check.ok,
            attested: check.attested,
        }
    }

    /// The check again (its name was parsed once already, so it parses).
    pub fn into_check(self) -> Option<FixityCheck> {
        let (name, date) = self.name_date.rsplit_once('!')?;
        let name = RepositoryName::parse(name).ok()?;
        let (date, ok, files, bytes, attested) = (date.to_string(), self.ok, self.files, self.bytes, self.attested);
        Some(FixityCheck { name, date, ok, files, bytes, attested })
    }
}

/// How a check ranks among its item's: the newer; at one date, a failure.
fn rank(check: &FixityCheck) -> (Option<chrono::DateTime<chrono::FixedOffset>>, bool) {
    (chrono::DateTime::parse_from_rfc3339(&check.date).ok(), !check.ok)
}

/// What one item's check keys come to: the check that stands (the newest; at
/// one date, a failure); when that one is store-attested, the newest check
/// that read the bytes and passed, kept beside it (a policy's read cycle asks
/// when the bytes were last read); and the keys those two supersede.
#[derive(Debug, PartialEq)]
struct ItemChecks {
    stands: (ClaimedCheck, Key),
    read: Option<(ClaimedCheck, Key)>,
    gone: Vec<Key>,
}

/// The check keys of one item as a listing passes them (an item's keys are
/// adjacent in key order; an item has the few keys of the runs since the last sweep).
#[derive(Default)]
struct ItemRun(Vec<(ClaimedCheck, Key)>);

impl ItemRun {
    /// Takes the next listed check; the item before, finished, when this one
    /// is of another item.
    fn push(&mut self, check: ClaimedCheck, key: Key) -> Option<ItemChecks> {
        let finished = match self.0.first() {
            Some((first, _)) if first.0.name != check.0.name => self.finish(),
            _ => None,
        };
        self.0.push((check, key));
        finished
    }

    fn finish(&mut self) -> Option<ItemChecks> {
        let mut all = std::mem::take(&mut self.0);
        let newest = (0..all.len()).max_by(|&a, &b| rank(&all[a].0 .0).cmp(&rank(&all[b].0 .0)))?;
        let stands = all.swap_remove(newest);
        let read = match stands.0 .0.attested {
            true => (0..all.len())
                .filter(|&i| all[i].0 .0.ok && !all[i].0 .0.attested)
                .max_by(|&a, &b| rank(&all[a].0 .0).cmp(&rank(&all[b].0 .0)))
                .map(|i| all.swap_remove(i)),
            false => None,
        };
        Some(ItemChecks { stands, read, gone: all.into_iter().map(|(_, key)| key).collect() })
    }
}

impl ObjectChecks<'_> {
    fn item_prefix(&self, name: &RepositoryName) -> Key {
        self.keys.at(&format!("{CHECKS}/{name}"))
    }

    fn old_key(&self, name: &RepositoryName) -> Key {
        self.keys.at(&format!("{OLD_FIXITY}/{name}"))
    }

    /// Keeps each item's last check (the caller holds the lease): one write
    /// each. The first time a handle keeps checks, it sweeps the keys that
    /// newer ones supersede (a listing of every check, deletes a thousand to
    /// a request), so an item has at most the keys of the runs since the last
    /// sweep, and reading takes the newest.
    pub async fn keep(&self, checks: &[ClaimedCheck]) -> Result<()> {
        if !self.swept.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.sweep().await?;
        }
        stream::iter(checks)
            .map(|check| async move {
                let key = self.item_prefix(&check.0.name).join(check_segment(check));
                self.objects.overwrite(&key, Vec::new()).await
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect()
            .await
    }

    /// Deletes every check key a newer one of its item supersedes, a thousand
    /// at a time as the listing goes, and every check an earlier ibi kept as an
    /// object for an item with a key.
    async fn sweep(&self) -> Result<()> {
        let old = self.objects.list_all(&self.keys.at(OLD_FIXITY)).await?;
        let mut with_keys = HashSet::new();
        let mut superseded = Vec::new();
        let prefix = self.keys.at(CHECKS);
        let mut listed = self.objects.list_after(&prefix, &prefix);
        let mut run = ItemRun::default();
        loop {
            let meta = listed.try_next().await?;
            let done = match &meta {
                Some(meta) => parse_check_key(prefix.as_ref(), &meta.location)
                    .and_then(|check| run.push(check, meta.location.clone())),
                None => run.finish(),
            };
            if let Some(item) = done {
                if !old.is_empty() {
                    with_keys.insert(item.stands.0 .0.name);
                }
                superseded.extend(item.gone);
            }
            if superseded.len() >= 1000 || meta.is_none() {
                self.objects.delete_many(std::mem::take(&mut superseded)).await?;
            }
            if meta.is_none() {
                break;
            }
        }
        let old_prefix = self.keys.at(OLD_FIXITY);
        let named = |key: &Key| key.as_ref().strip_prefix(old_prefix.as_ref())?.strip_prefix('/')?.parse().ok();
        let swept = old.into_iter().map(|m| m.location);
        let swept = swept.filter(|key| named(key).is_some_and(|name: RepositoryName| with_keys.contains(&name)));
        self.objects.delete_many(swept.collect()).await
    }

    /// Forgets the last check of `name`: it was of a copy being replaced or
    /// removed (the new copy was verified on arrival; the next rolling run
    /// takes it first, as never checked). Forgetting a check that is not there
    /// is no error, so a replayed placement forgets again harmlessly.
    pub async fn forget(&self, name: &RepositoryName) -> Result<()> {
        let listed = self.objects.list_all(&self.item_prefix(name)).await?;
        let mut keys: Vec<Key> = listed.into_iter().map(|m| m.location).collect();
        keys.push(self.old_key(name));
        self.objects.delete_many(keys).await
    }

    /// Every item's last check, as the keys under `.ibi/checks/` claim it,
    /// after (for an item whose last check was store-attested) its newest
    /// passing read check, handed to `each` a page of about a thousand at a
    /// time, so that a caller keeps only what it needs of each. A check an
    /// older ibi kept as an object names no event in the log, so it is not
    /// read: the item counts as never checked.
    pub async fn each_page(&self, each: &mut (dyn FnMut(Vec<ClaimedCheck>) + Send)) -> Result<()> {
        let prefix = self.keys.at(CHECKS);
        let mut listed = self.objects.list_after(&prefix, &prefix);
        let (mut run, mut page) = (ItemRun::default(), Vec::new());
        let take = |item: ItemChecks, page: &mut Vec<ClaimedCheck>| {
            page.extend(item.read.map(|(check, _)| check));
            page.push(item.stands.0);
        };
        while let Some(meta) = listed.try_next().await? {
            let Some(check) = parse_check_key(prefix.as_ref(), &meta.location) else { continue };
            if let Some(item) = run.push(check, meta.location) {
                take(item, &mut page);
            }
            if page.len() >= CHECKS_A_PAGE {
                each(std::mem::take(&mut page));
            }
        }
        if let Some(item) = run.finish() {
            take(item, &mut page);
        }
        each(page);
        Ok(())
    }
}

/// How many checks `each_page` hands on at once.
const CHECKS_A_PAGE: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn check(date: &str, ok: bool) -> FixityCheck {
        let name = RepositoryName::parse("example.org/t/2026/11.25.10.19.59.986").unwrap();
        FixityCheck::read(name, date.into(), ok, 3, 1234)
    }

    fn claimed(check: &FixityCheck) -> ClaimedCheck {
        (check.clone(), Some(Logged { seq: 7, hash: "ab".repeat(32), signature: "cd".repeat(64) }))
    }

    #[test]
    fn a_signature_holds_for_its_check_only() {
        let seed = [5u8; 32];
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        let check = check("2026-11-25T10:00:00Z", true);
        let sign = |c: &FixityCheck| {
            hex::encode(ed25519_dalek::Signer::sign(&key, signed_text(c, 7, "ab").as_bytes()).to_bytes())
        };
        let logged = Logged { seq: 7, hash: "ab".into(), signature: sign(&check) };
        assert!(signed_by(&check, &logged, &key.verifying_key()));
        let mut later = check.clone();
        later.date = "2026-11-26T10:00:00Z".into();
        assert!(!signed_by(&later, &logged, &key.verifying_key()), "another date is not signed");
        let other = ed25519_dalek::SigningKey::from_bytes(&[6u8; 32]).verifying_key();
        assert!(!signed_by(&check, &logged, &other), "another key does not hold");
    }

    #[test]
    fn a_signed_check_kept_compactly_reads_back_and_tags_its_event_only() {
        let tags = std::hash::RandomState::new();
        for (date, ok, attested) in [("2026-11-25T10:00:00Z", true, false), ("2026-11-26T11:00:00+01:00", false, true)]
        {
            let mut check = check(date, ok);
            check.attested = attested;
            let logged = Logged { seq: 7, hash: "ab".repeat(32), signature: String::new() };
            let signed = SignedCheck::of(check.clone(), &logged, &tags);
            let token = crate::store::s3::log::item_token(&check.name);
            let tag = |seq, token: &str, hash: &str| crate::store::s3::log::event_tag(&tags, seq, token, hash);
            assert_eq!((signed.seq, signed.tag), (7, tag(7, &token, &logged.hash)));
            assert_ne!(signed.tag, tag(7, &token, &"ac".repeat(32)), "another event's hash");
            assert_ne!(signed.tag, tag(7, "example.org+t+2026+11.25.10.19.59.987", &logged.hash), "another item");
            assert_eq!(signed.into_check(), Some(check));
        }
    }

    #[test]
    fn a_check_reads_back_from_its_key() {
        let keys = Keys::new("lib/c");
        let kept = claimed(&check("2026-11-25T10:00:00Z", true));
        let key = keys.at(&format!("{CHECKS}/{}", kept.0.name)).join(check_segment(&kept));
        let prefix = keys.at(CHECKS);
        assert_eq!(parse_check_key(prefix.as_ref(), &key), Some(kept.clone()));
        let failed = (check("2026-11-25T10:00:00Z", false), None);
        let key = keys.at(&format!("{CHECKS}/{}", failed.0.name)).join(check_segment(&failed));
        assert_eq!(parse_check_key(prefix.as_ref(), &key), Some(failed), "an older key names no event");
    }

    #[test]
    fn keys_that_are_no_check_are_passed_over() {
        let keys = Keys::new("c");
        let prefix = keys.at(CHECKS);
        let name = "example.org/t/2026/11.25.10.19.59.986";
        for bad in [
            format!("{name}/2026-11-25T10:00:00Z!maybe!3!4"),
            format!("{name}/2026-11-25T10:00:00Z!pass!3"),
            format!("{name}/2026-11-25T10:00:00Z!pass!3!4!5"),
            format!("{name}/2026-11-25T10:00:00Z!pass!3!4!x!ab!cd"),
            format!("{name}/2026-11-25T10:00:00Z!pass!3!4!5!ab"),
            format!("{name}/2026-11-25T10:00:00Z!pass!3!4!5!ab!cd!ef"),
            format!("{name}/yesterday!pass!3!4"),
            "not a name/2026-11-25T10:00:00Z!pass!3!4".to_string(),
            name.to_string(),
        ] {
            assert_eq!(parse_check_key(prefix.as_ref(), &keys.at(&format!("{CHECKS}/{bad}"))), None, "{bad}");
        }
    }

    #[test]
    fn a_listing_gives_each_item_once_with_the_keys_its_check_supersedes() {
        let keys = Keys::new("c");
        let at = |check: &ClaimedCheck| keys.at(&format!("{CHECKS}/{}", check.0.name)).join(check_segment(check));
        let (a_old, a_new) =
            (claimed(&check("2026-11-24T10:00:00Z", true)), claimed(&check("2026-11-25T10:00:00Z", true)));
        let mut b = claimed(&check("2026-11-23T10:00:00Z", false));
        b.0.name = RepositoryName::parse("example.org/t/2026/11.25.10.20").unwrap();
        let mut run = ItemRun::default();
        assert!(run.push(a_old.clone(), at(&a_old)).is_none());
        assert!(run.push(a_new.clone(), at(&a_new)).is_none());
        let item = run.push(b.clone(), at(&b)).expect("a new item finishes the one before");
        assert_eq!(item, ItemChecks { stands: (a_new.clone(), at(&a_new)), read: None, gone: vec![at(&a_old)] });
        let last = ItemChecks { stands: (b.clone(), at(&b)), read: None, gone: Vec::new() };
        assert_eq!(run.finish(), Some(last));
        assert_eq!(run.finish(), None);
    }

    /// A store-attested check stands, and the newest read check that passed
    /// stays beside it; an older read and a failed read go.
    #[test]
    fn under_an_attested_check_the_newest_passing_read_is_kept() {
        let keys = Keys::new("c");
        let at = |check: &ClaimedCheck| keys.at(&format!("{CHECKS}/{}", check.0.name)).join(check_segment(check));
        let old_read = claimed(&check("2026-11-20T10:00:00Z", true));
        let read = claimed(&check("2026-11-22T10:00:00Z", true));
        let failed_read = claimed(&check("2026-11-21T10:00:00Z", false));
        let mut attested = claimed(&check("2026-11-25T10:00:00Z", true));
        attested.0.attested = true;
        let mut run = ItemRun::default();
        for c in [&old_read, &failed_read, &read, &attested] {
            assert!(run.push(c.clone(), at(c)).is_none());
        }
        let item = run.finish().unwrap();
        assert_eq!(item.stands, (attested.clone(), at(&attested)));
        assert_eq!(item.read, Some((read.clone(), at(&read))));
        let mut gone = item.gone.clone();
        gone.sort();
        let mut expected = vec![at(&old_read), at(&failed_read)];
        expected.sort();
        assert_eq!(gone, expected);
    }

    #[test]
    fn of_two_checks_the_newer_stands_and_at_one_date_a_failure() {
        let stands = |a: &FixityCheck, b: &FixityCheck| {
            let mut run = ItemRun::default();
            for c in [a, b] {
                let c = claimed(c);
                run.push(c.clone(), Key::from(c.0.date.clone() + if c.0.ok { "p" } else { "f" }));
            }
            run.finish().unwrap().stands.0 .0
        };
        let (old, new) = (check("2026-11-24T10:00:00Z", false), check("2026-11-25T10:00:00Z", true));
        assert_eq!(stands(&old, &new), new);
        assert_eq!(stands(&new, &old), new);
        let (pass, fail) = (check("2026-11-25T10:00:00Z", true), check("2026-11-25T10:00:00Z", false));
        assert_eq!(stands(&pass, &fail), fail);
        assert_eq!(stands(&fail, &pass), fail);
    }
}
