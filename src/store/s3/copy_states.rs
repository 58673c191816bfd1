//! The copy-states facet in a bucket (`store::copy_states`): what a bucket
//! holds of a chunk of names, told from three listings (the chunk's commit
//! markers, its records, and its items' files, each a page of keys a request)
//! and one page of what this machine read of them before, where a read item by
//! item took three requests an item.
//!
//! A page, `.ibi/copy-states/<signer>/<chunk>` (the chunk named by its first
//! name's SHA-256), holds for each name the ETags of the marker, tagmanifest
//! and record this machine last read and what they said (the tagmanifest's
//! digest; the record's status and versions), signed with a key this machine
//! keeps for the collection (`copy-states-of-<id>`, beside the witness keys).
//! A page is trusted only where its signature holds and this run's listing
//! shows the very ETag it names: an object replaced since (by ibi, or by anyone
//! else who writes in the bucket) has another ETag (the store computes it from
//! the bytes) and is read again. A page written by anyone without the key, or
//! on another machine, is read past, and every item is read as before.

use std::collections::BTreeMap;

use futures_util::stream::{self, StreamExt, TryStreamExt};
use object_store::path::Path as Key;
use object_store::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::RepositoryName;
use crate::store::copy_states::{gist_of, read_now, CopyState, CopyStates, RecordGist};
use crate::store::inventory::ItemRecord;
use crate::store::s3::keys;
use crate::store::s3::objects::IN_FLIGHT;
use crate::store::s3::place::Marker;
use crate::store::s3::ranges::{self, Within};
use crate::store::s3::S3Store;

/// Where the pages are kept, under the collection's prefix.
pub const PAGES: &str = ".ibi/copy-states";
const FORMAT: &str = "ibi-copy-states-1";
/// How many names one listing of a chunk spans (the chunk's spans are listed at once).
const SPAN: usize = 250;
/// How many spans of one kind are listed at once.
const SPANS_AT_ONCE: usize = 4;
/// The longest page read (a page of 4,000 names is about 2 MiB).
const MAX_PAGE_BYTES: u64 = 32 * 1024 * 1024;

/// What this machine read of an item's bag: the marker's and tagmanifest's
/// ETags, and the tagmanifest's SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct BagSeen {
    marker: String,
    tagmanifest: String,
    identity: String,
}

/// What this machine read of an item's record, and the record's ETag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct RecordSeen {
    etag: String,
    gist: RecordGist,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Seen {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bag: Option<BagSeen>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    record: Option<RecordSeen>,
}

/// One page: the collection it is of, what was seen of each name, and the
/// signature (Ed25519, hex) over the page serialized with an empty signature.
#[derive(Debug, Serialize, Deserialize)]
struct Page {
    format: String,
    collection: String,
    seen: BTreeMap<String, Seen>,
    #[serde(default)]
    signature: String,
}

impl Page {
    fn signed_bytes(&self) -> Vec<u8> {
        let unsigned = Page {
            format: self.format.clone(),
            collection: self.collection.clone(),
            seen: self.seen.clone(),
            signature: String::new(),
        };
        serde_json::to_vec(&unsigned).expect("a page serializes")
    }

    /// The page in `bytes`, when it is one of `collection`'s signed by `key`.
    fn trusted(bytes: &[u8], collection: &str, key: &ed25519_dalek::VerifyingKey) -> Option<Page> {
        let page: Page = serde_json::from_slice(bytes).ok()?;
        if page.format != FORMAT || page.collection != collection {
            return None;
        }
        let signature = ed25519_dalek::Signature::from_slice(&hex::decode(&page.signature).ok()?).ok()?;
        key.verify_strict(&page.signed_bytes(), &signature).ok()?;
        Some(page)
    }
}

/// What a listing says of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Listed {
    /// The listing did not reach it, or gave no ETag: it must be read.
    Unknown,
    Absent,
    At(String),
}

/// The object at `key` among those a listing found for one name.
fn listed_at(found: &Option<Vec<ObjectMeta>>, key: &str) -> Listed {
    let Some(found) = found else { return Listed::Unknown };
    match found.iter().find(|meta| meta.location.as_ref() == key) {
        None => Listed::Absent,
        Some(meta) => meta.e_tag.clone().map_or(Listed::Unknown, Listed::At),
    }
}

/// The signing key this machine keeps for the pages of collection `id`, made when missing.
fn page_seed(id: &str) -> Option<[u8; 32]> {
    crate::store::witness_key::machine_seed(&format!("copy-states-of-{id}"), true)
}

impl CopyStates for S3Store {
    fn copy_states(&self, names: &[RepositoryName]) -> Result<Vec<CopyState>> {
        let signer = self.config.id.as_deref().and_then(|id| Some((id, page_seed(id)?)));
        match signer {
            Some((id, seed)) if names.len() >= super::LISTED_FROM => {
                let key = ed25519_dalek::SigningKey::from_bytes(&seed);
                self.objects.run(self.paged_states(names, id, &key))
            }
            _ => read_now(self, names),
        }
    }
}

impl S3Store {
    /// The states of `names` from the listings and this machine's page,
    /// reading what the page does not vouch for, and keeping a new page when
    /// anything was read.
    async fn paged_states(
        &self,
        names: &[RepositoryName],
        collection: &str,
        key: &ed25519_dalek::SigningKey,
    ) -> Result<Vec<CopyState>> {
        let signer = hex::encode(key.verifying_key().as_bytes());
        let chunk = crate::digest::of_bytes(names[0].to_string().as_bytes(), &[]).sha256()[..32].to_string();
        let page_key = self.keys.at(&format!("{PAGES}/{}/{chunk}", &signer[..16]));
        let markers: Vec<Key> = names.iter().map(|name| self.keys.marker(name)).collect();
        let records: Vec<Key> = names.iter().map(|name| self.keys.record(name)).collect();
        let items: Vec<Key> = names.iter().map(|name| self.keys.item(name)).collect();
        let (markers_found, records_found, items_found, page) = futures_util::try_join!(
            self.listed_in_spans(&markers, Within::At),
            self.listed_in_spans(&records, Within::At),
            self.listed_in_spans(&items, Within::Under),
            self.page_at(&page_key),
        )?;
        let page = page.and_then(|bytes| Page::trusted(&bytes, collection, &key.verifying_key()));
        let old = page.map(|p| p.seen).unwrap_or_default();
        let looked = stream::iter(names.iter().enumerate())
            .map(|(i, name)| {
                let tagmanifest = format!("{}/{}", items[i].as_ref(), crate::bag::TAGMANIFEST);
                let listed = (
                    listed_at(&markers_found[i], markers[i].as_ref()),
                    listed_at(&items_found[i], &tagmanifest),
                    listed_at(&records_found[i], records[i].as_ref()),
                );
                self.state_of(name, listed, old.get(&name.to_string()))
            })
            .buffered(IN_FLIGHT)
            .try_collect::<Vec<(CopyState, Seen)>>()
            .await?;
        let seen: BTreeMap<String, Seen> = names
            .iter()
            .zip(&looked)
            .filter(|(_, (_, seen))| *seen != Seen::default())
            .map(|(name, (_, seen))| (name.to_string(), seen.clone()))
            .collect();
        if seen != old {
            let mut page =
                Page { format: FORMAT.into(), collection: collection.into(), seen, signature: String::new() };
            use ed25519_dalek::Signer;
            page.signature = hex::encode(key.sign(&page.signed_bytes()).to_bytes());
            let bytes = serde_json::to_vec(&page).expect("a page serializes");
            // A page saves requests only: one that cannot be written (a read-only
            // key, a store down) leaves the next audit to read the items again.
            let _ = self.objects.overwrite(&page_key, bytes).await;
        }
        Ok(looked.into_iter().map(|(state, _)| state).collect())
    }

    /// The bytes of the page at `key`, if any: one too long to read (written
    /// by another party) is as none, and the chunk is read item by item.
    async fn page_at(&self, key: &Key) -> Result<Option<bytes::Bytes>> {
        match self.objects.get_capped(key, MAX_PAGE_BYTES).await {
            Ok(found) => Ok(found.map(|f| f.bytes)),
            Err(Error::CorruptState { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The objects at or under each of `keys` (sorted), listed in spans of
    /// `SPAN` keys at once: a listing pages one request after another, and an
    /// item's files are several keys, so one span would wait on each page in turn.
    async fn listed_in_spans(&self, keys: &[Key], within: Within) -> Result<Vec<Option<Vec<ObjectMeta>>>> {
        let per_key = if within == Within::Under { 16 } else { 4 };
        // Of an item's files only its tagmanifest is asked about.
        let tagmanifest = format!("/{}", crate::bag::TAGMANIFEST);
        let keep = |location: &str| within == Within::At || location.ends_with(&tagmanifest);
        let spans =
            keys.chunks(SPAN).map(|span| ranges::objects_kept(&self.objects, span, within, per_key * SPAN, &keep));
        // A page of a listing is a few hundred KiB of XML until it is read:
        // a few spans at once, not every span of a chunk of 4,000 names.
        let listed: Vec<_> = stream::iter(spans).buffered(SPANS_AT_ONCE).try_collect().await?;
        Ok(listed.into_iter().flatten().collect())
    }

    /// One name's state, from `old` where the listing shows each object it
    /// names unchanged, else read; and what is seen of it now.
    async fn state_of(
        &self,
        name: &RepositoryName,
        (marker, tagmanifest, record): (Listed, Listed, Listed),
        old: Option<&Seen>,
    ) -> Result<(CopyState, Seen)> {
        let old_bag = old.and_then(|o| o.bag.as_ref());
        let (identity, bag, from_page) = match (&marker, &tagmanifest, old_bag) {
            (Listed::Absent, Listed::Absent, _) => {
                let gone = Error::Data {
                    what: format!("{name}/{}", crate::bag::TAGMANIFEST),
                    problem: "it is not there".into(),
                };
                (Err(gone), None, false)
            }
            (Listed::At(m), Listed::At(t), Some(seen)) if *m == seen.marker && *t == seen.tagmanifest => {
                (Ok(seen.identity.clone()), Some(seen.clone()), true)
            }
            _ => {
                let (identity, bag) = self.read_bag(name).await?;
                (identity, bag, false)
            }
        };
        let old_record = old.and_then(|o| o.record.as_ref());
        let (gist, record) = match (&record, old_record) {
            (Listed::Absent, _) => (None, None),
            (Listed::At(etag), Some(seen)) if *etag == seen.etag => (Some(seen.gist.clone()), Some(seen.clone())),
            _ => self.read_record(name).await?,
        };
        Ok((CopyState { identity, record: gist, from_page }, Seen { bag, record }))
    }

    /// An item's identity read now, with what may be kept of it: the marker's
    /// and tagmanifest's ETags, for an item not being placed.
    async fn read_bag(&self, name: &RepositoryName) -> Result<(Result<String>, Option<BagSeen>)> {
        let marker_key = self.keys.marker(name);
        let Some(found) = self.objects.get(&marker_key).await? else {
            return Ok((self.identity(name).await, None));
        };
        let marker: Marker = super::place::parse(&found.bytes, &self.objects, &marker_key)?;
        if marker.placing {
            return Ok((self.identity(name).await, None));
        }
        let tag_key = keys::key_under(&self.keys.item(name), crate::bag::TAGMANIFEST, marker.keys);
        let Some(tag) = self.objects.get(&tag_key).await? else {
            let gone =
                Error::Data { what: format!("{name}/{}", crate::bag::TAGMANIFEST), problem: "it is not there".into() };
            return Ok((Err(gone), None));
        };
        let identity = crate::digest::of_bytes(&tag.bytes, &[]).sha256().to_string();
        let seen = match (found.version.e_tag, tag.version.e_tag) {
            (Some(marker), Some(tagmanifest)) => Some(BagSeen { marker, tagmanifest, identity: identity.clone() }),
            _ => None,
        };
        Ok((Ok(identity), seen))
    }

    /// An item's record read now (one that does not read, or that names another
    /// item, is none), with its ETag.
    async fn read_record(&self, name: &RepositoryName) -> Result<(Option<RecordGist>, Option<RecordSeen>)> {
        let Some(found) = self.objects.get(&self.keys.record(name)).await? else { return Ok((None, None)) };
        let record = serde_json::from_slice::<ItemRecord>(&found.bytes).ok().filter(|r| r.name == *name);
        let Some(gist) = record.map(gist_of) else { return Ok((None, None)) };
        let seen = found.version.e_tag.map(|etag| RecordSeen { etag, gist: gist.clone() });
        Ok((Some(gist), seen))
    }
}
