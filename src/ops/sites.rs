//! A collection's sites and copy policy (ARCHITECTURE.md, "Sites and the copy
//! policy"): editing the `[[site]]`, `[policy]`, `zone` and `media` parts of a
//! local collection's configuration (`ibi site`), and `replicate`, which brings
//! every site up to date with the forward-only mirror, one site after another,
//! a site that fails never stopping the others.

use std::path::Path;

use crate::error::{Error, Result};
use crate::ops::copy::TransferSummary;
use crate::ops::mirror::{mirror, MirrorOptions};
use crate::ops::report::Reporter;
use crate::store::config::Minting;
use crate::store::config::{CollectionConfig, Media, Policy, Site};
use crate::store::local::Collection;
use crate::store::{Connect, Store};

/// One change to a collection's sites.
#[derive(Debug, Clone)]
pub enum SiteChange {
    Add(Site),
    Remove(String),
    /// The collection's own zone and media.
    Here {
        zone: String,
        media: Media,
    },
    Policy(Policy),
}

/// The configuration of the collection `store` is: sites live in a local
/// collection's `collection.toml`, read on the machine that holds it.
pub fn configured(store: &dyn Store) -> Result<CollectionConfig> {
    let root = store.local_root().ok_or_else(|| Error::Invalid {
        what: store.location(),
        problem: "sites and the copy policy are kept in a local collection's configuration: run this on the \
                  machine that holds the collection"
            .into(),
    })?;
    Ok(CollectionConfig::read(&root.join(".ibi/collection.toml"))?.0)
}

/// Applies `change` to the local collection at `root`; a site added must be a
/// collection of the same subsystem that does not mint (made with `init --like`).
pub fn change(root: &Path, change: SiteChange, connect: &Connect) -> Result<CollectionConfig> {
    let collection = Collection::open(root)?;
    if let SiteChange::Add(site) = &change {
        check_site(&collection, site, connect)?;
    }
    collection.change_config(|config| apply(config, change))
}

fn apply(config: &mut CollectionConfig, change: SiteChange) -> Result<()> {
    let invalid = |what: &str, problem: String| Err(Error::Invalid { what: what.into(), problem });
    match change {
        SiteChange::Add(site) if config.sites.iter().any(|s| s.url == site.url) => {
            return invalid(&site.url, "it is already a site of this collection".into());
        }
        SiteChange::Add(site) => config.sites.push(site),
        SiteChange::Remove(url) => {
            let before = config.sites.len();
            config.sites.retain(|s| s.url != url);
            if config.sites.len() == before {
                return invalid(&url, "it is not a site of this collection (`ibi site list` names them)".into());
            }
        }
        SiteChange::Here { zone, media } => (config.zone, config.media) = (Some(zone), Some(media)),
        SiteChange::Policy(policy) => config.policy = Some(policy),
    }
    Ok(())
}

/// A site is a collection of the same subsystem that never mints.
fn check_site(collection: &Collection, site: &Site, connect: &Connect) -> Result<()> {
    let opened = crate::store::open(Path::new(&site.url), connect)?;
    let refuse = |problem: String| Err(Error::Invalid { what: format!("site {}", site.url), problem });
    if opened.collection_id().is_some() && opened.collection_id() == collection.collection_id() {
        return refuse("it is this collection itself".into());
    }
    if opened.subsystem().prefix() != collection.subsystem().prefix() {
        return refuse(format!(
            "it holds the names of {}, not of {}: make it with `ibi init {} --like {}`",
            opened.subsystem().prefix(),
            collection.subsystem().prefix(),
            site.url,
            collection.root().display()
        ));
    }
    if opened.minting()? == Minting::Mints {
        return refuse(format!(
            "it mints names of its own; a site holds copies and never mints (make it with `ibi init {} --like {}`)",
            site.url,
            collection.root().display()
        ));
    }
    Ok(())
}

/// What replicating to one site came to.
pub struct SiteRun {
    pub site: Site,
    pub result: std::result::Result<TransferSummary, Error>,
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
    let one = |site: &Site| -> std::result::Result<TransferSummary, Error> {
        let dst = crate::store::open(Path::new(&site.url), connect)?;
        mirror(store, dst.as_ref(), options, reporter).map_err(|stopped| stopped.error)
    };
    config.sites.iter().map(|site| SiteRun { site: site.clone(), result: one(site) }).collect()
}
