//! The one place that names the backends: a location (a path, `HOST:PATH`,
//! `s3://…`) becomes a collection of the backend it names, opened or created.
//! A backend left out of the build (a cargo feature) is refused by name.

use std::path::Path;

use crate::error::{Error, Result};
use crate::id::Subsystem;
use crate::store::config::{CollectionConfig, Peer};
#[cfg(feature = "far")]
use crate::store::far;
#[cfg(feature = "s3")]
use crate::store::s3;
use crate::store::{local, location, registry, Connect, Store};

/// Opens the collection at `location`: a local folder, or a far one (`HOST:PATH`,
/// `ssh://…`) reached as `connect` says.
pub fn open(location: &Path, connect: &Connect) -> Result<Box<dyn Store>> {
    Ok(match location::Location::parse(location)? {
        location::Location::Local(path) => Box::new(local::Collection::open(&path)?),
        location::Location::Ocfl(place) => {
            Box::new(crate::store::ocfl::OcflStore::open_on(open_ocfl_root(&place, connect)?)?)
        }
        #[cfg(feature = "far")]
        location::Location::Far(address) => Box::new(far::FarStore::open(&address, connect)?),
        #[cfg(feature = "s3")]
        location::Location::Object(address) => Box::new(s3::S3Store::open(&address)?),
        #[allow(unreachable_patterns)]
        other => return Err(not_built(&other, connect)),
    })
}

/// The files of the OCFL storage root at `place`, for reading and writing:
/// a folder here, a prefix in a bucket, or a folder on a far machine.
pub fn open_ocfl_root(
    place: &location::OcflPlace,
    connect: &Connect,
) -> Result<Box<dyn crate::store::ocfl::files::RootWrites>> {
    use location::OcflPlace;
    #[cfg(not(feature = "far"))]
    let _ = connect;
    match place {
        OcflPlace::Folder(path) => Ok(Box::new(crate::store::ocfl::files::LocalRoot::new(path))),
        #[cfg(feature = "s3")]
        OcflPlace::Bucket(address) => Ok(Box::new(crate::store::ocfl::s3::S3Root::connect(address)?)),
        #[cfg(feature = "far")]
        OcflPlace::Far(address) => Ok(Box::new(far::ocfl_root::FarRoot::open(address, connect)?)),
        #[allow(unreachable_patterns)]
        other => Err(Error::Invalid {
            what: other.to_string(),
            problem: "this ibi was built without the backend it needs (cargo feature \"s3\" or \"far\")".into(),
        }),
    }
}

/// The error for a location whose backend this build leaves out (a cargo feature).
fn not_built(location: &location::Location, _connect: &Connect) -> Error {
    let (kind, feature) = match location {
        location::Location::Far(_) => ("far collections (HOST:PATH)", "far"),
        location::Location::Object(_) => ("collections in object storage (s3://)", "s3"),
        location::Location::Local(_) | location::Location::Ocfl(_) => ("local collections", "default"),
    };
    let problem = format!("this ibi was built without {kind}: build it with the cargo feature `{feature}`");
    Error::Invalid { what: "collection location".into(), problem }
}

/// How `init` may create a collection.
#[derive(Debug, Clone, Default)]
pub struct InitOptions {
    /// Create one in object storage whose server ignores conditional writes.
    pub unsafe_no_conditional_writes: bool,
    /// The minting collection the new one follows (`init --like`): it will not mint.
    pub follows: Option<Peer>,
}

/// Creates a collection at `location` (local, far or in object storage) and opens it.
/// A minting one of any kind is first checked against this machine's registry
/// of minting collections (`registry`) and recorded there: a local one by its
/// backend, a far or S3 one here, around its creation.
pub fn init(
    location: &Path,
    connect: &Connect,
    subsystem: Subsystem,
    organisation: Option<String>,
    options: InitOptions,
) -> Result<Box<dyn Store>> {
    let mut config = CollectionConfig::new(&subsystem, organisation);
    config.follows = options.follows.clone();
    let parsed = location::Location::parse(location)?;
    if let location::Location::Ocfl(_) = parsed {
        let problem = "an OCFL site is made by `ibi site add ROOT ocfl:LOCATION`, not by init".to_string();
        return Err(Error::Invalid { what: parsed.to_string(), problem });
    }
    if let location::Location::Local(path) = parsed {
        return Ok(Box::new(local::Collection::init(&path, &config, local::minter::machine_dir())?));
    }
    // Checked, then recorded once made; the registry's lock is not held across
    // the creation, which a far server on this very machine locks for itself.
    let registering = match (local::minter::machine_dir(), config.minting().mints()) {
        (Some(dir), true) => Some(refuse_held_elsewhere(dir, &subsystem, &parsed.to_string(), config.id.as_deref())?),
        _ => None,
    };
    let store = init_elsewhere(parsed, connect, &config, &options)?;
    if let (Some(dir), Some(id)) = (&registering, store.inventory().collection_id()) {
        let _lock = registry::lock(dir, &subsystem)?;
        registry::register(dir, &subsystem, &id, &store.location())?;
    }
    Ok(store)
}

/// Creates a far or S3 collection (a local one is the caller's).
fn init_elsewhere(
    location: location::Location,
    connect: &Connect,
    config: &CollectionConfig,
    options: &InitOptions,
) -> Result<Box<dyn Store>> {
    let _ = (config, options);
    match location {
        #[cfg(feature = "far")]
        location::Location::Far(address) => Ok(Box::new(far::FarStore::init(&address, connect, config)?)),
        #[cfg(feature = "s3")]
        location::Location::Object(address) => {
            Ok(Box::new(s3::S3Store::init(&address, config, options.unsafe_no_conditional_writes)?))
        }
        #[allow(unreachable_patterns)]
        other => Err(not_built(&other, connect)),
    }
}

/// Refuses, before a far or S3 minting collection is made at `location`, a
/// subsystem (or IBIp prefix) this machine's registry in `dir` holds elsewhere;
/// returns the folder.
fn refuse_held_elsewhere(
    dir: std::path::PathBuf,
    subsystem: &Subsystem,
    location: &str,
    id: Option<&str>,
) -> Result<std::path::PathBuf> {
    let _lock = registry::lock(&dir, subsystem)?;
    registry::refuse_if_held(&dir, subsystem, location, id)?;
    registry::refuse_shared_ibip(&dir, subsystem, location)?;
    Ok(dir)
}
