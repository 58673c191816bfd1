//! What a SeaweedFS cluster says about where an S3 collection's objects are
//! (`ibi audit --placement`). Its master's volume status gives each volume's
//! live replicas by data centre and the replication the volume asks for; its
//! filer's JSON listing of the item's folder (`/buckets/BUCKET/KEY/`) gives the
//! volume of each chunk of each object. An item is held in a data centre when
//! every chunk of every object under its folder has a live replica there, and
//! degraded when one of those volumes has fewer live replicas than it asks for.
//! What the filer keeps itself (content inlined in its metadata, a list of
//! chunks kept as a manifest chunk) or a volume the master does not know is
//! proven nowhere: the item counts only as its site's declared zone.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::store::config::SeaweedFs;
use crate::store::placement::ItemPlacement;

/// Entries asked for per filer listing request.
const LISTED_AT_ONCE: usize = 1000;
/// Items whose folders are listed at once.
const ITEMS_IN_FLIGHT: usize = 16;
/// How long one request to the master or the filer may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Go's `os.ModeDir`, as the filer reports an entry's mode.
const MODE_DIR: u64 = 1 << 31;
/// What a path segment of a filer URL escapes (a `/` separates them).
const PATH: &AsciiSet = &CONTROLS.add(b' ').add(b'"').add(b'#').add(b'%').add(b'<').add(b'>').add(b'?').add(b'`');

/// One volume as the master sees it.
#[derive(Debug, Default)]
struct Volume {
    data_centres: BTreeSet<String>,
    live: u32,
    wanted: u32,
}

/// The master's `/vol/status`: data centre → rack → node → volumes.
#[derive(Deserialize)]
struct VolStatus {
    #[serde(rename = "Volumes")]
    volumes: Topology,
}

/// A rack's nodes and their volumes (either may be `null`).
type Nodes = HashMap<String, Option<Vec<VolumeInfo>>>;
/// A data centre's racks.
type Racks = HashMap<String, Option<Nodes>>;

#[derive(Deserialize)]
struct Topology {
    #[serde(rename = "DataCenters", default)]
    data_centres: Option<HashMap<String, Option<Racks>>>,
}

#[derive(Deserialize)]
struct VolumeInfo {
    #[serde(rename = "Id")]
    id: u32,
    #[serde(rename = "ReplicaPlacement", default)]
    replication: Option<Replication>,
}

/// Copies in other data centres, other racks and other nodes, besides the first.
#[derive(Deserialize, Default)]
struct Replication {
    #[serde(default)]
    dc: u32,
    #[serde(default)]
    rack: u32,
    #[serde(default)]
    node: u32,
}

/// One page of a filer folder's listing.
#[derive(Deserialize)]
struct Listing {
    #[serde(rename = "Entries", default)]
    entries: Option<Vec<Entry>>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "FullPath")]
    path: String,
    #[serde(rename = "Mode", default)]
    mode: u64,
    #[serde(default)]
    chunks: Option<Vec<Chunk>>,
    #[serde(rename = "FileSize", default)]
    size: u64,
    #[serde(rename = "Content", default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    fid: Option<Fid>,
    #[serde(default)]
    file_id: String,
    #[serde(default)]
    is_chunk_manifest: bool,
}

#[derive(Deserialize)]
struct Fid {
    volume_id: u32,
}

/// A cluster's volumes, read once, and the filer to ask about objects.
pub struct Cluster {
    client: reqwest::Client,
    filer: String,
    volumes: HashMap<u32, Volume>,
}

/// Where each of `folders` (object keys of item folders in `bucket`) is held.
pub async fn placements(cluster: &SeaweedFs, bucket: &str, folders: &[String]) -> Result<Vec<ItemPlacement>> {
    let cluster = Cluster::read(cluster).await?;
    let asked = folders.iter().map(|folder| cluster.item(bucket, folder));
    let found: Vec<Result<ItemPlacement>> = stream::iter(asked).buffered(ITEMS_IN_FLIGHT).collect().await;
    found.into_iter().collect()
}

impl Cluster {
    /// Reads the master's volume status.
    pub async fn read(config: &SeaweedFs) -> Result<Cluster> {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| Error::Connection { place: config.master.clone(), problem: e.to_string() })?;
        let url = format!("{}/vol/status", config.master.trim_end_matches('/'));
        let status: VolStatus = get_json(&client, &url).await?.ok_or_else(|| Error::Connection {
            place: url.clone(),
            problem: "the master has no volume status (is it a SeaweedFS master?)".into(),
        })?;
        let mut volumes: HashMap<u32, Volume> = HashMap::new();
        let data_centres = status.volumes.data_centres.unwrap_or_default();
        for (data_centre, racks) in data_centres {
            let held = racks.unwrap_or_default().into_values().flatten().flat_map(|nodes| nodes.into_values());
            for info in held.flatten().flatten() {
                let volume = volumes.entry(info.id).or_default();
                let replication = info.replication.unwrap_or_default();
                volume.wanted = volume.wanted.max(1 + replication.dc + replication.rack + replication.node);
                volume.live += 1;
                volume.data_centres.insert(data_centre.clone());
            }
        }
        Ok(Cluster { client, filer: config.filer.trim_end_matches('/').to_string(), volumes })
    }

    /// Where the objects under `folder` in `bucket` are held.
    async fn item(&self, bucket: &str, folder: &str) -> Result<ItemPlacement> {
        let mut proof = Proof::default();
        let mut folders = vec![format!("/buckets/{bucket}/{}", folder.trim_matches('/'))];
        while let Some(path) = folders.pop() {
            let mut after = String::new();
            loop {
                let entries = self.list(&path, &after).await?;
                let full = entries.len() == LISTED_AT_ONCE;
                for entry in entries {
                    after = entry.path.rsplit('/').next().unwrap_or_default().to_string();
                    match entry.mode & MODE_DIR != 0 {
                        true => folders.push(entry.path),
                        false => proof.object(&entry, &self.volumes),
                    }
                }
                if !full {
                    break;
                }
            }
        }
        Ok(proof.into_placement())
    }

    /// One page of the folder `path`'s entries after `after`; none when it is not there.
    async fn list(&self, path: &str, after: &str) -> Result<Vec<Entry>> {
        let path = utf8_percent_encode(path, PATH);
        let after = utf8_percent_encode(after, percent_encoding::NON_ALPHANUMERIC);
        let url = format!("{}{path}/?limit={LISTED_AT_ONCE}&lastFileName={after}", self.filer);
        let listing: Option<Listing> = get_json(&self.client, &url).await?;
        Ok(listing.and_then(|l| l.entries).unwrap_or_default())
    }
}

/// What the objects of one item seen so far prove.
#[derive(Default)]
struct Proof {
    /// The data centres holding everything so far (`None` before the first chunk).
    data_centres: Option<BTreeSet<String>>,
    degraded: bool,
    unproven: Option<String>,
    objects: u64,
}

impl Proof {
    fn object(&mut self, entry: &Entry, volumes: &HashMap<u32, Volume>) {
        self.objects += 1;
        let chunks = entry.chunks.as_deref().unwrap_or_default();
        if chunks.is_empty() && (entry.size > 0 || entry.content.as_deref().is_some_and(|c| !c.is_empty())) {
            self.unproven.get_or_insert(format!("{} is kept in the filer's own store", entry.path));
        }
        for chunk in chunks {
            if chunk.is_chunk_manifest {
                self.unproven.get_or_insert(format!("{} lists its chunks in a manifest chunk", entry.path));
            }
            let volume_id = chunk.fid.as_ref().map(|f| f.volume_id).or_else(|| volume_of(&chunk.file_id));
            let Some(volume) = volume_id.and_then(|id| volumes.get(&id)) else {
                let why = format!("{}'s chunk {} is in a volume the master does not know", entry.path, chunk.file_id);
                self.unproven.get_or_insert(why);
                continue;
            };
            self.degraded |= volume.live < volume.wanted;
            let held = self.data_centres.get_or_insert_with(|| volume.data_centres.clone());
            held.retain(|dc| volume.data_centres.contains(dc));
        }
    }

    fn into_placement(self) -> ItemPlacement {
        if self.objects == 0 {
            return ItemPlacement::unproven("the filer holds no object in its folder");
        }
        match self.unproven {
            Some(why) => ItemPlacement { degraded: self.degraded, ..ItemPlacement::unproven(why) },
            // Only empty files: nothing to lose anywhere, held wherever the cluster is.
            None => ItemPlacement {
                data_centres: self.data_centres.unwrap_or_default(),
                degraded: self.degraded,
                unproven: None,
            },
        }
    }
}

/// The volume of a file id `VOLUME,KEYCOOKIE`.
fn volume_of(file_id: &str) -> Option<u32> {
    file_id.split(',').next()?.parse().ok()
}

/// GETs `url` as JSON; `None` for a 404.
async fn get_json<T: serde::de::DeserializeOwned>(client: &reqwest::Client, url: &str) -> Result<Option<T>> {
    let failed = |problem: String| Error::Connection { place: url.to_string(), problem };
    let reply = client
        .get(url)
        .header("Accept", "application/json")
        .send()
        .await
        .map_err(|e| failed(crate::store::s3::objects::with_causes(&e)))?;
    if reply.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !reply.status().is_success() {
        return Err(failed(format!("it answered {}", reply.status())));
    }
    let body = reply.bytes().await.map_err(|e| failed(e.to_string()))?;
    serde_json::from_slice(&body).map(Some).map_err(|e| failed(format!("its answer is not what SeaweedFS sends: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volumes() -> HashMap<u32, Volume> {
        let volume = |dcs: &[&str], wanted| Volume {
            data_centres: dcs.iter().map(|d| d.to_string()).collect(),
            live: dcs.len() as u32,
            wanted,
        };
        HashMap::from([(1, volume(&["dc1", "dc2"], 2)), (2, volume(&["dc1"], 2)), (3, volume(&["dc2"], 1))])
    }

    fn entry(path: &str, chunks: &[u32]) -> Entry {
        let chunk =
            |v: &u32| Chunk { fid: Some(Fid { volume_id: *v }), file_id: format!("{v},01"), is_chunk_manifest: false };
        Entry {
            path: path.into(),
            mode: 0o644,
            chunks: Some(chunks.iter().map(chunk).collect()),
            size: 1,
            content: None,
        }
    }

    #[test]
    fn an_item_is_held_where_every_chunk_is() {
        let mut proof = Proof::default();
        proof.object(&entry("/a", &[1]), &volumes());
        proof.object(&entry("/b", &[1, 2]), &volumes());
        let placed = proof.into_placement();
        assert_eq!(placed.data_centres, BTreeSet::from(["dc1".to_string()]));
        assert!(placed.degraded, "volume 2 has one live replica of two");
    }

    #[test]
    fn chunks_in_disjoint_data_centres_prove_none() {
        let mut proof = Proof::default();
        proof.object(&entry("/a", &[2, 3]), &volumes());
        let placed = proof.into_placement();
        assert!(placed.data_centres.is_empty() && placed.unproven.is_none(), "{placed:?}");
    }

    #[test]
    fn what_the_filer_keeps_itself_or_an_unknown_volume_proves_nothing() {
        for entry in
            [Entry { content: Some("aGk=".into()), chunks: None, ..entry("/inline", &[]) }, entry("/lost", &[9])]
        {
            let mut proof = Proof::default();
            proof.object(&entry, &volumes());
            let placed = proof.into_placement();
            assert!(placed.unproven.is_some() && placed.data_centres.is_empty(), "{placed:?}");
        }
        assert!(Proof::default().into_placement().unproven.is_some(), "an empty folder proves nothing");
    }

    #[test]
    fn the_masters_volume_status_reads_as_seaweedfs_4_writes_it() {
        let text = r#"{"Version":"4.48","Volumes":{"DataCenters":{"dc1":{"DefaultRack":{"127.0.0.1:8080":[
            {"Id":6,"ReplicaPlacement":{"dc":1},"Collection":"b"}]}},"dc2":{"DefaultRack":{"127.0.0.1:8081":null}},
            "dc3":{}}}}"#;
        let status: VolStatus = serde_json::from_str(text).unwrap();
        let dcs = status.volumes.data_centres.unwrap();
        assert_eq!(dcs.len(), 3);
        let info = &dcs["dc1"].as_ref().unwrap()["DefaultRack"].as_ref().unwrap()["127.0.0.1:8080"];
        assert_eq!(info.as_ref().unwrap()[0].replication.as_ref().unwrap().dc, 1);
    }
}
