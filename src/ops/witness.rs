//! The witness: a signed Merkle root (`merkle`) over the identity digests the
//! collection's records hold, made at the end of a whole or rolling verify, so
//! that a third party holding an earlier witness and an inclusion proof can
//! tell that an item was not swapped, even for a bag whose manifests agree with
//! themselves. A present item is a leaf only when its bytes were confirmed to
//! match its record: by a check in that run, or by an unexpired check the log
//! holds while its bag still reads as recorded. Any other item (damaged,
//! replaced, unchecked) is left out, counted and named in the witness, and
//! `--prove` says so. Leaves are `NAME\nIDENTITY` in byte order of the names;
//! docs/formats.md says enough to recompute the root and check a proof
//! elsewhere (`tests/witness_check.py` does, in Python).

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::{RepositoryName, Timestamp};
use crate::merkle::{self, Hash};
use crate::ops::confirmed::Confirmed;
use crate::ops::last_checks::LastChecks;
use crate::store::{items, Store};

/// A signed statement of a collection's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Witness {
    /// The collection's id (a UUID URN) or, without one, its location.
    pub collection: String,
    /// When it was made (RFC 3339, UTC, to the second).
    pub date: String,
    pub items: u64,
    /// The Merkle root, hex.
    pub root: String,
    /// The Ed25519 public key, hex.
    pub public_key: String,
    /// The Ed25519 signature of `Witness::message`, hex.
    pub signature: String,
    /// How many events the log held when it was made (its last event's place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_events: Option<u64>,
    /// The hash of that last event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_head: Option<String>,
    /// How many present items were left out: their bytes were not confirmed to
    /// match their record (`ibi-witness-v3` signs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_out: Option<u64>,
    /// The first `LEFT_OUT_NAMED` of them, in byte order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out_names: Vec<String>,
}

/// How many left-out items a witness names: a proof can be made from the
/// collection while no more were left out.
pub const LEFT_OUT_NAMED: usize = 1000;

/// That one item is a leaf of a witness's tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    pub witness: Witness,
    pub name: String,
    pub identity: String,
    pub index: u64,
    /// The audit path, from the leaf up, hex.
    pub path: Vec<String>,
}

fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

fn unhex<const N: usize>(text: &str, what: &str) -> Result<[u8; N]> {
    hex::decode(text)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| Error::Invalid { what: what.into(), problem: format!("{text:?} is not {N} bytes in hex") })
}

impl Witness {
    /// The signed text: `ibi-witness-v1`, collection, date, items and root, one a
    /// line; `ibi-witness-v2` adds the log's event count and head hash.
    pub fn message(&self) -> String {
        let (collection, date, items, root) = (&self.collection, &self.date, self.items, &self.root);
        match (self.log_events, &self.log_head, self.left_out) {
            (events, head, Some(left_out)) => {
                let (events, head) = (events.unwrap_or(0), head.as_deref().unwrap_or("-"));
                format!("ibi-witness-v3\n{collection}\n{date}\n{items}\n{root}\n{events}\n{head}\n{left_out}\n")
            }
            (Some(events), Some(head), None) => {
                format!("ibi-witness-v2\n{collection}\n{date}\n{items}\n{root}\n{events}\n{head}\n")
            }
            _ => format!("ibi-witness-v1\n{collection}\n{date}\n{items}\n{root}\n"),
        }
    }

    /// The log's head it signed, for the chain check.
    pub fn log_anchor(&self) -> Option<crate::events::Anchor> {
        Some(crate::events::Anchor { seq: self.log_events?, hash: self.log_head.clone()?, signed: self.date.clone() })
    }

    /// Whether the signature is the public key's over the message.
    pub fn signed(&self) -> Result<()> {
        if self.left_out.is_some_and(|n| (self.left_out_names.len() as u64) > n) {
            return Err(Error::Data {
                what: "witness".into(),
                problem: "it names more left-out items than it says it left out".into(),
            });
        }
        let key = VerifyingKey::from_bytes(&unhex::<32>(&self.public_key, "public key")?)
            .map_err(|e| Error::Invalid { what: "public key".into(), problem: e.to_string() })?;
        let signature = Signature::from_bytes(&unhex::<64>(&self.signature, "signature")?);
        key.verify(self.message().as_bytes(), &signature).map_err(|_| Error::Data {
            what: "witness".into(),
            problem: "its signature does not match its public key and contents".into(),
        })
    }
}

/// The leaf of an item.
pub fn leaf(name: &str, identity: &str) -> Hash {
    merkle::leaf_hash(format!("{name}\n{identity}").as_bytes())
}

/// How many items' identities are read at once (in parallel) for a witness.
const LEAVES_AT_ONCE: usize = 1024;

/// An item a witness covers, with the identity its record holds (none in a
/// collection without an inventory).
type Covered = (RepositoryName, Option<String>);

/// The items a witness covers: the inventory's present records, each with its
/// identity, read in one pass (in S3 one GET a record, where reading the names
/// and then the states took two), or every item walked in a collection without
/// an inventory.
fn covered(store: &dyn Store) -> Box<dyn Iterator<Item = Result<Covered>> + Send + '_> {
    if !store.inventory().has_inventory() {
        return Box::new(items(store).map(|name| name.map(|name| (name, None))));
    }
    Box::new(store.inventory().record_summaries().filter_map(|summary| match summary {
        Ok(s) => (s.status == crate::store::Status::Present).then_some(Ok((s.name, Some(s.identity)))),
        Err(e) => Some(Err(e)),
    }))
}

/// How the leaves are chosen: when a witness is made, by what vouches for each
/// item's bytes; when a proof is made, as the witness chose them (the recorded
/// identities, but for the items it names as left out).
enum Choice<'a> {
    Making(&'a Vouchers<'a>),
    Replaying(&'a std::collections::BTreeSet<String>),
}

/// What vouches for an item's bytes when a witness is made: this run's checks,
/// and the passed checks the log holds from `since` on (seconds since 1970)
/// while the bag's tagmanifest still reads as recorded.
pub struct Vouchers<'a> {
    store: &'a dyn Store,
    confirmed: Option<&'a Confirmed>,
    /// The log's last checks, read at the first item this run did not confirm:
    /// after a whole verify of a sound collection, never (at 200,000 items the
    /// read was three quarters of the witness's time).
    checks: std::cell::OnceCell<Option<LastChecks>>,
    since: i64,
}

/// How long a check vouches for an item without a policy's `max_fixity_age`.
const DEFAULT_VOUCHING_DAYS: i64 = 90;

impl<'a> Vouchers<'a> {
    /// The vouchers of `store` at `now`: the checks within its policy's
    /// `max_fixity_age` (90 days without one), and what this run `confirmed`.
    pub fn of(store: &'a dyn Store, now: Timestamp, confirmed: Option<&'a Confirmed>) -> Result<Vouchers<'a>> {
        let days = store
            .inventory()
            .current_config()?
            .and_then(|c| c.policy)
            .and_then(|p| p.max_fixity_age)
            .and_then(|age| crate::store::config::parse_days(&age).ok())
            .map_or(DEFAULT_VOUCHING_DAYS, i64::from);
        let since = now.whole_seconds() as i64 - days * 86_400;
        Ok(Vouchers { store, confirmed, checks: std::cell::OnceCell::new(), since })
    }

    /// Whether `name`'s bytes are vouched to match `recorded`, its bag reading as `read`.
    fn vouch(&self, name: &RepositoryName, recorded: &str, read: Option<&str>) -> Result<bool> {
        if self.confirmed.is_some_and(|c| c.holds(name, recorded)) {
            return Ok(true);
        }
        if read != Some(recorded) {
            return Ok(false);
        }
        if self.checks.get().is_none() {
            let read = LastChecks::read(self.store)?;
            let _ = self.checks.set(read);
        }
        // A store-attested check never vouches: it did not read the bytes.
        let last = self.checks.get().and_then(Option::as_ref).and_then(|c| c.get(name));
        Ok(last.is_some_and(|c| c.passed() && !c.attested && c.at >= self.since))
    }
}

/// One step of the leaves, in byte order of the names.
enum Step<'a> {
    Leaf(&'a str, &'a str),
    LeftOut(&'a str),
    /// Every step handed on so far is void: they follow again from the first.
    Restart,
}

/// Calls `each` with every covered item, in byte order of the names, a page at
/// a time, as `choice` says: a leaf of its recorded identity, or left out.
fn each_leaf(store: &dyn Store, choice: &Choice, each: &mut dyn FnMut(Step)) -> Result<()> {
    in_leaf_order(&|| covered(store), &mut |leaves| match leaves {
        Leaves::Page(page) => leaves_of(store, page, choice, each),
        Leaves::Restart => {
            each(Step::Restart);
            Ok(())
        }
    })
}

/// What `in_leaf_order` hands on.
enum Leaves<'a> {
    /// The next page of names, in byte order.
    Page(&'a [Named]),
    /// Every page handed on so far is void: the names follow again from the first.
    Restart,
}

/// The names `names()` lists, handed to `page_each` a page at a time in byte order
/// of their text, as they are listed. Stores list in that order but for nested
/// prefixes (`…/mtc-m18/…` sorts after `…/mtc-m18.8080/…`, since `.` is before
/// `/`): when a name comes out of order, the pages handed on are void
/// (`Leaves::Restart`) and every name follows again, sorted in memory. Names in
/// order thus cost one pass and a page of memory.
fn in_leaf_order<'s>(
    names: &dyn Fn() -> Box<dyn Iterator<Item = Result<Covered>> + Send + 's>,
    page_each: &mut dyn FnMut(Leaves) -> Result<()>,
) -> Result<()> {
    let mut last = String::new();
    let mut handed_on = false;
    let in_order = in_pages(names(), &mut |page: Vec<Named>| {
        if !page.iter().all(|(text, _, _)| std::mem::replace(&mut last, text.clone()) < *text) {
            return Ok(false);
        }
        page_each(Leaves::Page(&page))?;
        handed_on = true;
        Ok(true)
    })?;
    if in_order {
        return Ok(());
    }
    if handed_on {
        page_each(Leaves::Restart)?;
    }
    let mut all: Vec<Named> = names().map(named).collect::<Result<_>>()?;
    all.sort();
    all.chunks(LEAVES_AT_ONCE).try_for_each(|page| page_each(Leaves::Page(page)))
}

/// Hands `each` the names `listed` yields, a page at a time; stops early, with
/// `false`, when `each` says so. The pages are read on a thread of their own,
/// one ahead: reading the records and hashing the leaves each take about half
/// of a witness's time, and after a verify the other core is idle.
fn in_pages(
    listed: Box<dyn Iterator<Item = Result<Covered>> + Send + '_>,
    each: &mut dyn FnMut(Vec<Named>) -> Result<bool>,
) -> Result<bool> {
    let (send, pages) = std::sync::mpsc::sync_channel::<Result<Vec<Named>>>(1);
    std::thread::scope(|scope| {
        scope.spawn(move || read_pages(listed, &send));
        for page in pages {
            let page = page?;
            if page.is_empty() {
                return Ok(true);
            }
            if !each(page)? {
                // Dropping `pages` ends the reader at its next page.
                return Ok(false);
            }
        }
        Ok(true)
    })
}

/// Sends each page of `listed` (an empty one at its end), until a page fails or
/// nobody takes them.
fn read_pages(
    mut listed: Box<dyn Iterator<Item = Result<Covered>> + Send + '_>,
    send: &std::sync::mpsc::SyncSender<Result<Vec<Named>>>,
) {
    loop {
        let page: Result<Vec<Named>> = listed.by_ref().take(LEAVES_AT_ONCE).map(named).collect();
        let last = page.as_ref().map_or(true, Vec::is_empty);
        if send.send(page).is_err() || last {
            return;
        }
    }
}

/// A covered name with its text, which orders the leaves, and its recorded identity.
type Named = (String, RepositoryName, Option<String>);

fn named(covered: Result<Covered>) -> Result<Named> {
    covered.map(|(name, identity)| (name.to_string(), name, identity))
}

/// The leaves of one page of names. With an inventory, each leaf is the
/// identity the record holds (a bag swapped behind ibi's back never becomes a
/// leaf); the bags' identities are read (at once: in parallel, or in one round
/// trip to a far server) only for items this run did not confirm. Without an
/// inventory the bags' identities are the leaves.
fn leaves_of(store: &dyn Store, page: &[Named], choice: &Choice, each: &mut dyn FnMut(Step)) -> Result<()> {
    let unread: Vec<RepositoryName> = page
        .iter()
        .filter(|(_, name, recorded)| match (choice, recorded) {
            (Choice::Making(v), Some(id)) => !v.confirmed.is_some_and(|c| c.holds(name, id)),
            (Choice::Replaying(_), Some(_)) => false,
            (_, None) => true,
        })
        .map(|(_, name, _)| name.clone())
        .collect();
    let read = store.bag_identities(&unread);
    if read.len() != unread.len() {
        let problem = format!("{} identities came back for {} names asked", read.len(), unread.len());
        return Err(Error::Data { what: format!("{}'s identities", store.location()), problem });
    }
    let mut read: std::collections::HashMap<&RepositoryName, Option<String>> =
        unread.iter().zip(read).map(|(name, identity)| (name, identity.ok())).collect();
    for (text, name, recorded) in page {
        let bag = read.remove(name).flatten();
        let vouched = match (choice, recorded) {
            (Choice::Making(v), Some(id)) => v.vouch(name, id, bag.as_deref())?,
            _ => false,
        };
        let step = match (choice, recorded, &bag) {
            (Choice::Replaying(left_out), _, _) if left_out.contains(text) => Step::LeftOut(text),
            (Choice::Replaying(_), Some(id), _) => Step::Leaf(text, id),
            (Choice::Making(_), Some(id), _) if vouched => Step::Leaf(text, id),
            (Choice::Making(_), Some(_), _) => Step::LeftOut(text),
            (_, None, Some(id)) => Step::Leaf(text, id),
            (_, None, None) => Step::LeftOut(text),
        };
        each(step);
    }
    Ok(())
}

/// Makes, signs and keeps a new witness of `store`; `None` when the store keeps no key.
/// A backend that makes its own (a far server) is asked to, and what it sends
/// must carry a good signature.
pub fn make(store: &dyn Store, now: Timestamp) -> Result<Option<Witness>> {
    make_after(store, now, None)
}

/// `make`, right after a verify that `confirmed` the identities it read: those
/// are taken from the inventory, every other identity from its bag.
pub fn make_after(store: &dyn Store, now: Timestamp, confirmed: Option<&Confirmed>) -> Result<Option<Witness>> {
    let Some(writer) = store.ledger().writer() else { return Ok(None) };
    if store.ledger().makes_own_witness() {
        let Some(json) = writer.make_own_witness()? else { return Ok(None) };
        let witness = parse(store, &json)?;
        witness.signed()?;
        return Ok(Some(witness));
    }
    let Some(seed) = writer.witness_seed()? else { return Ok(None) };
    let key = SigningKey::from_bytes(&seed);
    let log = store.ledger().log_head()?;
    let vouchers = Vouchers::of(store, now, confirmed)?;
    let mut tree = merkle::Builder::default();
    let (mut left_out, mut left_out_names) = (0u64, Vec::new());
    each_leaf(store, &Choice::Making(&vouchers), &mut |step| match step {
        Step::Leaf(name, identity) => tree.push(leaf(name, identity)),
        Step::LeftOut(name) => {
            left_out += 1;
            if left_out_names.len() < LEFT_OUT_NAMED {
                left_out_names.push(name.to_string());
            }
        }
        Step::Restart => {
            tree = merkle::Builder::default();
            (left_out, left_out_names) = (0, Vec::new());
        }
    })?;
    let mut witness = Witness {
        collection: store.inventory().collection_id().unwrap_or_else(|| store.location()),
        date: crate::store::inventory::fixity_date(now),
        items: tree.count(),
        root: hex(&tree.root()),
        public_key: hex(key.verifying_key().as_bytes()),
        signature: String::new(),
        log_events: log.as_ref().map(|(seq, _)| *seq),
        log_head: log.map(|(_, hash)| hash),
        left_out: Some(left_out),
        left_out_names,
    };
    witness.signature = hex(&key.sign(witness.message().as_bytes()).to_bytes());
    let json = serde_json::to_string_pretty(&witness).expect("a witness serialises");
    writer.keep_witness(&json)?;
    Ok(Some(witness))
}

/// The latest witness kept.
pub fn latest(store: &dyn Store) -> Result<Option<Witness>> {
    let Some(json) = store.ledger().latest_witness()? else { return Ok(None) };
    parse(store, &json).map(Some)
}

/// A witness's JSON, as `store` kept or sent it.
fn parse(store: &dyn Store, json: &str) -> Result<Witness> {
    serde_json::from_str(json).map_err(|e| Error::CorruptState {
        path: format!("{}/.ibi/witness.json", store.location()).into(),
        problem: e.to_string(),
    })
}

/// Makes a witness of `store` now, as the JSON it is kept as: what a far server
/// hands its sessions (`ServeOptions::witness`).
pub fn make_json(store: &dyn Store) -> Result<Option<String>> {
    let made = make(store, Timestamp::now())?;
    Ok(made.map(|w| serde_json::to_string_pretty(&w).expect("a witness serialises")))
}

/// The proof that `name` is in `witness`'s tree, from the collection as it is now;
/// refused when the collection no longer matches the witness.
pub fn prove(store: &dyn Store, witness: &Witness, name: &str) -> Result<Proof> {
    if witness.left_out_names.iter().any(|n| n == name) {
        return Err(Error::Data {
            what: name.to_string(),
            problem: format!(
                "it is not in the witness of {}: its bytes were not confirmed to match its record then (damaged, \
                 replaced or not checked within the cycle); `ibi verify` checks it",
                witness.date
            ),
        });
    }
    let named = witness.left_out_names.len() as u64;
    if witness.left_out.is_some_and(|n| n > named) {
        return Err(Error::Data {
            what: "witness".into(),
            problem: format!(
                "it left out {} items and names only {named}: no proof can be made from the collection until a \
                 verify confirms them",
                witness.left_out.unwrap_or_default()
            ),
        });
    }
    let excluded: std::collections::BTreeSet<String> = witness.left_out_names.iter().cloned().collect();
    let mut hashes: Vec<Hash> = Vec::new();
    let mut found: Option<(usize, String)> = None;
    each_leaf(store, &Choice::Replaying(&excluded), &mut |step| match step {
        Step::Leaf(n, identity) => {
            if n == name {
                found = Some((hashes.len(), identity.to_string()));
            }
            hashes.push(leaf(n, identity));
        }
        Step::LeftOut(_) => {}
        Step::Restart => {
            hashes.clear();
            found = None;
        }
    })?;
    if hex(&merkle::root(&hashes)) != witness.root {
        return Err(Error::Data {
            what: "witness".into(),
            problem: format!(
                "{} no longer matches its latest witness ({}): run `ibi verify`",
                store.location(),
                witness.date
            ),
        });
    }
    let (index, identity) = found.ok_or_else(|| Error::NotFound {
        what: "item",
        name: name.to_string(),
        place: store.location().into(),
    })?;
    let path = merkle::proof(&hashes, index).unwrap_or_default().iter().map(|h| hex(h)).collect();
    Ok(Proof { witness: witness.clone(), name: name.to_string(), identity, index: index as u64, path })
}

/// Checks a proof: that `trusted_key` (hex, the collection's published key), when
/// given, signed it; the witness's signature; then the path to its root.
pub fn check(proof: &Proof, trusted_key: Option<&str>) -> Result<()> {
    if let Some(trusted) = trusted_key {
        let trusted = hex(&unhex::<32>(trusted.trim(), "--key")?);
        if trusted != proof.witness.public_key.to_ascii_lowercase() {
            return Err(Error::Data {
                what: "proof".into(),
                problem: format!(
                    "it is signed by key {}, not by the collection's key {trusted}",
                    proof.witness.public_key
                ),
            });
        }
    }
    proof.witness.signed()?;
    let root = unhex::<32>(&proof.witness.root, "root")?;
    let path: Vec<Hash> = proof.path.iter().map(|h| unhex::<32>(h, "proof path")).collect::<Result<_>>()?;
    let leaf = leaf(&proof.name, &proof.identity);
    if merkle::check(&leaf, proof.index, proof.witness.items, &path, &root) {
        return Ok(());
    }
    Err(Error::Data {
        what: "proof".into(),
        problem: format!(
            "{} with identity {} is not leaf {} of the witnessed tree",
            proof.name, proof.identity, proof.index
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` names under `prefix`, one a second from 2009-02-16 00:00:00, in order.
    fn names_under(prefix: &str, n: usize) -> Vec<RepositoryName> {
        (0..n)
            .map(|i| {
                let (h, m, s) = (i / 3600, (i / 60) % 60, i % 60);
                RepositoryName::parse(&format!("{prefix}/2009/02.16.{h:02}.{m:02}.{s:02}")).unwrap()
            })
            .collect()
    }

    /// The order a store lists in, (prefix, suffix), is not the leaves' byte order
    /// when one prefix starts another (`…/mtc-m18/…` sorts after `…/mtc-m18.8080/…`).
    /// When that shows only past the first page, no page may have been handed on:
    /// every name once, in byte order.
    #[test]
    fn regress_nested_prefixes_past_the_first_page_hand_a_page_on_twice() {
        let mut listed = names_under("sid.inpe.br/mtc-m18", LEAVES_AT_ONCE + 100);
        listed.extend(names_under("sid.inpe.br/mtc-m18.8080", 50));
        let names = || -> Box<dyn Iterator<Item = Result<Covered>> + Send> {
            Box::new(listed.clone().into_iter().map(|name| Ok((name, None))))
        };
        let mut handed: Vec<String> = Vec::new();
        in_leaf_order(&names, &mut |leaves| {
            match leaves {
                Leaves::Page(page) => handed.extend(page.iter().map(|(text, _, _)| text.clone())),
                Leaves::Restart => handed.clear(),
            }
            Ok(())
        })
        .unwrap();
        let mut expected: Vec<String> = listed.iter().map(|n| n.to_string()).collect();
        expected.sort();
        assert_eq!(handed.len(), listed.len(), "each name once");
        assert_eq!(handed, expected, "in byte order of the names");
        assert!(handed[0].contains("mtc-m18.8080"), "the nested prefix sorts first");
    }

    /// Names already in byte order are handed on as listed, a page at a time.
    #[test]
    fn names_in_order_are_handed_on_in_pages() {
        let listed = names_under("sid.inpe.br/mtc-m18", LEAVES_AT_ONCE * 2 + 1);
        let names = || -> Box<dyn Iterator<Item = Result<Covered>> + Send> {
            Box::new(listed.clone().into_iter().map(|name| Ok((name, None))))
        };
        let mut pages = Vec::new();
        in_leaf_order(&names, &mut |leaves| {
            match leaves {
                Leaves::Page(page) => pages.push(page.len()),
                Leaves::Restart => panic!("names in order never restart"),
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(pages, [LEAVES_AT_ONCE, LEAVES_AT_ONCE, 1]);
    }
}
