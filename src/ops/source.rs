//! What a deposit will copy (`SourcePlan`): the files and folders given on the
//! command line turned into payload paths under `data/` (a foreign BagIt bag is
//! planned by `foreign_bag`). Planning refuses what a bag cannot hold faithfully
//! (symlinks unless followed, FIFOs, sockets, devices, non-UTF-8 names,
//! backslashes, names equal under NFC) and lists every offender in one error.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use walkdir::WalkDir;

use crate::bag::{manifest, BagInfo, DATA};
use crate::digest::Algorithm;
use crate::error::{Error, IoContext, Result};
use crate::fsx::Stamp;
use crate::store::guard;

/// One file to copy: from `source` to `path` in the new bag (`data/…` for payload);
/// `expected` holds the digests a source bag's manifests promise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFile {
    pub source: PathBuf,
    pub path: String,
    pub expected: BTreeMap<Algorithm, String>,
}

#[derive(Debug, Clone, Default)]
pub struct SourcePlan {
    /// Payload files.
    pub files: Vec<PlannedFile>,
    /// Tag files a source bag brings besides those ibi writes (`mets.xml`, `metadata/dc.xml`).
    pub tag_files: Vec<PlannedFile>,
    /// Every folder in the new bag but `data/` itself, parents before children.
    pub dirs: Vec<String>,
    pub empty_dirs: Vec<String>,
    /// Algorithms the new bag gets manifests in besides sha256 (those of a source bag).
    pub algorithms: Vec<Algorithm>,
    /// Source files read while planning (a source bag's own tag files), for `--move`.
    pub read_stamps: Vec<(PathBuf, Stamp)>,
    /// bag-info fields of a source bag, to carry over.
    pub info: Option<BagInfo>,
    /// What was given on the command line.
    pub originals: Vec<PathBuf>,
    /// Every source folder, parents before children: `--move` removes those left empty.
    pub source_dirs: Vec<PathBuf>,
    /// Symlinks among the sources are read through (`--follow-symlinks`).
    pub follow_symlinks: bool,
    /// What a source bag does that BagIt tools warn about (a file listed twice,
    /// names differing only in case, system files), told before it is deposited.
    pub warnings: Vec<String>,
}

/// Collects refusals so they can all be reported at once.
#[derive(Default)]
pub(crate) struct Refusals {
    offenders: Vec<String>,
    /// Some offender is a symlink, which following symlinks would admit.
    symlinks: bool,
}

impl Refusals {
    pub(crate) fn push(&mut self, path: &Path, why: &str) {
        self.offenders.push(format!("{} ({why})", path.display()));
    }

    pub(crate) fn into_result(self, follow_symlinks: bool) -> Result<()> {
        if self.offenders.is_empty() {
            return Ok(());
        }
        Err(Error::Unbaggable { offenders: self.offenders, symlinks: self.symlinks && !follow_symlinks })
    }
}

/// Adds one source (a file or a folder) as `prefix` in the new bag (`data` for
/// straight into `data/`).
pub(crate) fn add_source(
    plan: &mut SourcePlan,
    source: &Path,
    prefix: &str,
    follow: bool,
    refusals: &mut Refusals,
) -> Result<()> {
    let mut seen_nfc: BTreeMap<String, PathBuf> = BTreeMap::new();
    for entry in WalkDir::new(source).follow_links(follow).follow_root_links(follow).sort_by_file_name() {
        let entry = match entry {
            Ok(entry) => entry,
            // A link whose target is gone: named with every other offender, not one per run.
            Err(e) if e.path().is_some_and(|p| fs::symlink_metadata(p).is_ok_and(|m| m.is_symlink())) => {
                let link = e.path().unwrap_or(source);
                refusals.symlinks = true;
                refusals.push(link, "symlink to a missing target");
                continue;
            }
            Err(e) => {
                let path = e.path().unwrap_or(source).to_path_buf();
                let why = e.into_io_error().unwrap_or_else(|| std::io::Error::other("filesystem loop"));
                return Err(Error::io("read", path, why));
            }
        };
        let rel = entry.path().strip_prefix(source).unwrap_or(Path::new(""));
        let Some(rel) = rel.to_str() else {
            refusals.push(entry.path(), "name is not UTF-8");
            continue;
        };
        if rel.contains('\\') {
            refusals.push(entry.path(), "name holds a backslash");
            continue;
        }
        let path = [prefix, rel].iter().filter(|s| !s.is_empty()).copied().collect::<Vec<_>>().join("/");
        if let Some(other) = seen_nfc.insert(manifest::nfc(&path), entry.path().to_path_buf()) {
            refusals.push(entry.path(), &format!("same name as {} in Unicode NFC", other.display()));
            continue;
        }
        let ft = entry.file_type();
        if ft.is_dir() && guard::is_control_dir_of_collection(entry.path()) {
            let root = entry.path().parent().unwrap_or(entry.path());
            return Err(Error::Invalid {
                what: "deposit source".into(),
                problem: format!(
                    "{} contains the collection {}; refusing to touch it",
                    source.display(),
                    root.display()
                ),
            });
        }
        if ft.is_dir() {
            plan.source_dirs.push(entry.path().to_path_buf());
            if path != DATA {
                plan.dirs.push(path.clone());
            }
            let empty = fs::read_dir(entry.path()).with_path("list", entry.path())?.next().is_none();
            if empty && path != DATA {
                plan.empty_dirs.push(path);
            }
        } else if ft.is_file() {
            plan.files.push(PlannedFile { source: entry.path().to_path_buf(), path, expected: BTreeMap::new() });
        } else {
            refusals.symlinks |= ft.is_symlink();
            refusals.push(entry.path(), crate::fsx::file_kind_name(&ft));
        }
    }
    Ok(())
}

/// Plans a deposit of files and folders as one item. A single folder's contents go
/// straight into `data/`; otherwise each path goes to `data/<its name>`.
/// An OCFL object or storage root given to a plain deposit: as files its
/// versions, digests and id would be lost, so it is refused, naming
/// `--ocfl`, which takes it with every version.
fn refuse_ocfl(path: &Path) -> Result<()> {
    let declarations = ["0=ocfl_object_1.1", "0=ocfl_object_1.0", "0=ocfl_1.1", "0=ocfl_1.0"];
    match declarations.iter().find(|d| path.join(d).is_file()) {
        Some(declaration) => Err(Error::Invalid {
            what: path.display().to_string(),
            problem: format!(
                "it is an OCFL {} ({declaration}): deposit it with --ocfl, which takes every version with its \
                 digests and id; as plain files they would be lost",
                if declaration.contains("object") { "object" } else { "storage root" }
            ),
        }),
        None => Ok(()),
    }
}

pub fn plan_paths(paths: &[PathBuf], follow_symlinks: bool) -> Result<SourcePlan> {
    let mut plan = SourcePlan { originals: paths.to_vec(), follow_symlinks, ..SourcePlan::default() };
    let mut refusals = Refusals::default();
    let mut names = BTreeMap::new();
    for path in paths {
        let meta = match fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let problem = format!("{} does not exist", path.display());
                return Err(Error::Invalid { what: "deposit".into(), problem });
            }
            other => other.with_path("read", path)?,
        };
        // Only a folder (or a link to one) can be an OCFL object or root: a
        // file's four declarations are not looked for (a deposit --each of a
        // million files would ask four million times).
        if !meta.is_file() {
            refuse_ocfl(path)?;
        }
        // One folder (or a link to one) alone is the payload itself; asked of
        // the link's target only when it is a link (one `statx` a file fewer).
        let single_dir =
            paths.len() == 1 && (meta.is_dir() || meta.is_symlink() && fs::metadata(path).is_ok_and(|m| m.is_dir()));
        let prefix = if single_dir {
            DATA.to_string()
        } else {
            let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| Error::Invalid {
                what: "deposit".into(),
                problem: format!("{} has no usable file name", path.display()),
            })?;
            if let Some(other) = names.insert(manifest::nfc(name), path.clone()) {
                let problem = format!("{} and {} would both be data/{name}", other.display(), path.display());
                return Err(Error::Invalid { what: "deposit".into(), problem });
            }
            format!("{DATA}/{name}")
        };
        add_source(&mut plan, path, &prefix, follow_symlinks, &mut refusals)?;
    }
    refusals.into_result(follow_symlinks)?;
    Ok(plan)
}
