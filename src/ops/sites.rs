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
use crate::store::config::{CollectionConfig, Media, Policy, Site};
use crate::store::inventory::Status;
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
        SiteChange::Add(mut site) => {
            if let Some(url) = &site.public_url {
                let checked = crate::ops::handles::url_base(url).map_err(|why| Error::Invalid {
                    what: format!("--public-url {url}"),
                    problem: format!("it {why}"),
                })?;
                site.public_url = Some(checked);
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
    let recorded = match site.records(std::slice::from_ref(name)) {
        Ok(mut records) => records.pop().flatten(),
        Err(_) => return false,
    };
    if !recorded.is_some_and(|r| r.status == Status::Present && r.current().digest == identity) {
        return false;
    }
    match site.fixity_checks() {
        Ok(checks) => !checks.unwrap_or_default().iter().any(|c| &c.name == name && !c.ok),
        Err(_) => false,
    }
}
