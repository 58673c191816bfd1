//! A collection's sites and copy policy (ARCHITECTURE.md, "Sites and the copy
//! policy"): editing the `[[site]]`, `[policy]`, `zone` and `media` parts of a
//! local collection's configuration (`ibi site`), and `replicate`, which brings
//! every site up to date with the forward-only mirror, one site after another,
//! a site that fails never stopping the others.

use std::path::Path;

use crate::error::{Error, Result};
use crate::id::RepositoryName;
use crate::ops::copy::TransferSummary;
use crate::ops::mirror::{mirror, MirrorOptions};
use crate::ops::report::Reporter;
use crate::store::config::Minting;
use crate::store::config::{CollectionConfig, Media, Policy, SeaweedFs, Site};
use crate::store::inventory::Status;
use crate::store::location::Location;
use crate::store::{Connect, Store};

/// One change to a collection's sites.
#[derive(Debug, Clone)]
pub enum SiteChange {
    Add(Site),
    Remove(String),
    /// The collection's own zone and media, and for one in S3, the SeaweedFS
    /// cluster behind it.
    Here {
        zone: String,
        media: Media,
        seaweedfs: Option<SeaweedFs>,
    },
    Policy(Policy),
}

/// The configuration of the collection `store` is, where its sites and policy
/// are kept: read from the folder, the bucket, or the far server (protocol 4).
/// A far collection's site that is a folder is one on the far machine, never
/// opened here: it is refused, and named.
pub fn configured(store: &dyn Store) -> Result<CollectionConfig> {
    let config = store.inventory().current_config()?.ok_or_else(|| Error::Invalid {
        what: store.location(),
        problem: "the far ibi is older than this one and cannot send the collection's configuration (its sites \
                  and policy): install the same ibi there, or run this on the machine that holds the collection"
            .into(),
    })?;
    let is = |url: &str, far: bool| match Location::parse(Path::new(url)) {
        Ok(Location::Far(_)) => far,
        Ok(Location::Local(_)) => !far,
        _ => false,
    };
    if is(&store.location(), true) {
        if let Some(site) = config.sites.iter().find(|site| is(&site.url, false)) {
            return Err(Error::Invalid {
                what: format!("site {}", site.url),
                problem: format!(
                    "it is a folder on the machine that holds {}, not on this one: run this there",
                    store.location()
                ),
            });
        }
    }
    Ok(config)
}

/// Applies `change` to the configuration of the collection `store` is (a local
/// or S3 one; a far one is edited on its own machine); a site added must be a
/// collection of the same subsystem that does not mint (made with `init --like`).
pub fn change(store: &dyn Store, mut change: SiteChange, connect: &Connect) -> Result<CollectionConfig> {
    match &mut change {
        SiteChange::Add(site) => check_site(store, site, connect)?,
        SiteChange::Here { seaweedfs: Some(cluster), .. } => check_cluster(&store.location(), cluster)?,
        _ => (),
    }
    let writer = store
        .ledger()
        .writer()
        .ok_or_else(|| Error::Invalid { what: store.location(), problem: "this handle may not write".into() })?;
    writer.change_config(&mut |config| apply(config, change.clone()))?.ok_or_else(|| Error::Invalid {
        what: store.location(),
        problem: "a far collection's sites and policy are edited on the machine that holds it (`ibi site` there)"
            .into(),
    })
}

fn apply(config: &mut CollectionConfig, change: SiteChange) -> Result<()> {
    let invalid = |what: &str, problem: String| Err(Error::Invalid { what: what.into(), problem });
    match change {
        SiteChange::Add(site) if config.sites.iter().any(|s| s.url == site.url) => {
            return invalid(&site.url, "it is already a site of this collection".into());
        }
        SiteChange::Add(mut site) => {
            if let Some(url) = &site.public_url {
                let checked = crate::ops::handles::url_base(url).map_err(|why| Error::Invalid {
                    what: format!("--public-url {url}"),
                    problem: format!("it {why}"),
                })?;
                site.public_url = Some(checked);
            }
            if let Some(cluster) = &mut site.seaweedfs {
                check_cluster(&site.url, cluster)?;
            }
            config.sites.push(site)
        }
        SiteChange::Remove(url) => {
            let before = config.sites.len();
            config.sites.retain(|s| s.url != url);
            if config.sites.len() == before {
                return invalid(&url, "it is not a site of this collection (`ibi site list` names them)".into());
            }
        }
        SiteChange::Here { zone, media, seaweedfs } => {
            (config.zone, config.media, config.seaweedfs) = (Some(zone), Some(media), seaweedfs)
        }
        SiteChange::Policy(policy) => config.policy = Some(policy),
    }
    Ok(())
}

/// A SeaweedFS cluster is named for an `s3://` site only, by two http(s) base
/// URLs (kept without their trailing `/`).
fn check_cluster(url: &str, cluster: &mut SeaweedFs) -> Result<()> {
    if !url.starts_with("s3://") {
        return Err(Error::Invalid {
            what: url.to_string(),
            problem: "only a collection in S3 (s3://) has a SeaweedFS cluster behind it".into(),
        });
    }
    for (flag, address) in [("--seaweedfs-master", &mut cluster.master), ("--seaweedfs-filer", &mut cluster.filer)] {
        let base = crate::ops::handles::url_base(address)
            .map_err(|why| Error::Invalid { what: format!("{flag} {address}"), problem: format!("it {why}") })?;
        *address = base.trim_end_matches('/').to_string();
    }
    Ok(())
}

/// A site is a collection of the same subsystem that never mints, or an OCFL
/// storage root made here as one (`ocfl:PATH`).
fn check_site(collection: &dyn Store, site: &Site, connect: &Connect) -> Result<()> {
    if let Ok(Location::Ocfl(root)) = Location::parse(Path::new(&site.url)) {
        return crate::ops::ocfl::site::make_site(collection, &root, connect).map(drop);
    }
    let opened = crate::store::open(Path::new(&site.url), connect)?;
    let refuse = |problem: String| Err(Error::Invalid { what: format!("site {}", site.url), problem });
    if opened.inventory().collection_id().is_some()
        && opened.inventory().collection_id() == collection.inventory().collection_id()
    {
        return refuse("it is this collection itself".into());
    }
    if opened.subsystem().prefix() != collection.subsystem().prefix() {
        return refuse(format!(
            "it holds the names of {}, not of {}: make it with `ibi init {} --like {}`",
            opened.subsystem().prefix(),
            collection.subsystem().prefix(),
            site.url,
            collection.location()
        ));
    }
    if opened.inventory().minting()? == Minting::Mints {
        return refuse(format!(
            "it mints names of its own; a site holds copies and never mints (make it with `ibi init {} --like {}`)",
            site.url,
            collection.location()
        ));
    }
    Ok(())
}

/// What replicating to one site came to.
pub struct SiteRun {
    pub site: Site,
    pub result: std::result::Result<TransferSummary, Error>,
    /// What carrying the collection's checkpoint to the site did, after its mirror.
    pub checkpoint: Option<std::result::Result<crate::ops::checkpoints::Carried, Error>>,
}

/// Mirrors `store` into each of its sites in turn; a site that cannot be opened
/// or whose mirror stops is reported and the next one goes ahead.
pub fn replicate(
    store: &dyn Store,
    config: &CollectionConfig,
    options: &MirrorOptions,
    connect: &Connect,
    reporter: &dyn Reporter,
) -> Vec<SiteRun> {
    let one = |site: &Site| -> SiteRun {
        if let Ok(Location::Ocfl(root)) = Location::parse(Path::new(&site.url)) {
            // An OCFL copy is written by the exporter, and keeps no checkpoints.
            let result = match options.dry_run {
                true => Ok(TransferSummary::default()),
                false => crate::ops::ocfl::site::replicate(store, &root, connect, reporter),
            };
            return SiteRun { site: site.clone(), result, checkpoint: None };
        }
        let dst = match crate::store::open(Path::new(&site.url), connect) {
            Ok(dst) => dst,
            Err(e) => return SiteRun { site: site.clone(), result: Err(e), checkpoint: None },
        };
        let result = mirror(store, dst.as_ref(), options, reporter).map_err(|stopped| stopped.error);
        let checkpoint =
            (result.is_ok() && !options.dry_run).then(|| crate::ops::checkpoints::carry(store, dst.as_ref()));
        SiteRun { site: site.clone(), result, checkpoint }
    };
    config.sites.iter().map(one).collect()
}

/// The sites of the collection `store` is that have a public URL, each with that
/// URL as a base (ending in `/`; one that is not an http or https base URL is
/// left out), in the configuration's order; none when it keeps no sites here.
pub fn public_sites(store: &dyn Store) -> Vec<(Site, String)> {
    let Ok(config) = configured(store) else { return Vec::new() };
    let with_base = |site: Site| {
        let base = crate::ops::handles::url_base(site.public_url.as_ref()?).ok()?;
        Some((site, base))
    };
    config.sites.into_iter().filter_map(with_base).collect()
}

/// The public URLs of `public_sites`.
pub fn public_urls(store: &dyn Store) -> Vec<String> {
    public_sites(store).into_iter().map(|(_, url)| url).collect()
}

/// Whether `site` holds a verified copy of `name`: a bag whose identity digest
/// (read from its tagmanifest there) is `expected` when that is known, that the
/// site's own record names present with that identity, and whose last fixity
/// check at the site, if any, passed. A site that cannot answer holds none.
pub fn holds_verified_copy(site: &dyn Store, name: &RepositoryName, expected: Option<&str>) -> bool {
    let Ok(identity) = crate::store::identity_digest(site, name) else { return false };
    if expected.is_some_and(|e| e != identity) {
        return false;
    }
    let recorded = match site.inventory().records(std::slice::from_ref(name)) {
        Ok(mut records) => records.pop().flatten(),
        Err(_) => return false,
    };
    if !recorded.is_some_and(|r| r.status == Status::Present && r.current().digest == identity) {
        return false;
    }
    let mut failed = false;
    match site.ledger().each_fixity_check(&mut |check| failed |= &check.name == name && !check.ok) {
        Ok(_) => !failed,
        Err(_) => false,
    }
}
