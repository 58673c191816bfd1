//! What a deposit will copy (`SourcePlan`): the files and folders given on the
//! command line, or an existing BagIt bag, turned into payload paths under
//! `data/`. Planning refuses what a bag cannot hold faithfully (symlinks
//! unless followed, FIFOs, sockets, devices, non-UTF-8 names, backslashes,
//! names equal under NFC) and lists every offender in one error.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use walkdir::WalkDir;

use crate::bag::{manifest, BagInfo, BAGIT_TXT, BAG_INFO_TXT, DATA, MANIFEST, TAGMANIFEST};
use crate::collection::guard;
use crate::error::{Error, IoContext, Result};
use crate::fsx::{read_capped, MAX_TAG_FILE};

/// One file to copy: from `source` to `data/<payload>`; `expected` is the digest a
/// source bag's manifest promises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFile {
    pub source: PathBuf,
    pub payload: String,
    pub expected: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct SourcePlan {
    pub files: Vec<PlannedFile>,
    /// Every folder under `data/`, parents before children.
    pub dirs: Vec<String>,
    pub empty_dirs: Vec<String>,
    /// bag-info fields of a source bag, to carry over.
    pub info: Option<BagInfo>,
    /// What was given on the command line.
    pub originals: Vec<PathBuf>,
    /// Every source folder, parents before children: `--move` removes those left empty.
    pub source_dirs: Vec<PathBuf>,
    /// Symlinks among the sources are read through (`--follow-symlinks`).
    pub follow_symlinks: bool,
}

/// Collects refusals so they can all be reported at once.
#[derive(Default)]
struct Refusals(Vec<String>);

impl Refusals {
    fn push(&mut self, path: &Path, why: &str) {
        self.0.push(format!("{} ({why})", path.display()));
    }

    fn into_result(self, hint: &str) -> Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        Err(Error::Invalid { what: "deposit".into(), problem: format!("cannot bag {}{hint}", self.0.join(", ")) })
    }
}

/// Adds one source (a file or a folder) under `prefix` (empty: straight into `data/`).
fn add_source(plan: &mut SourcePlan, source: &Path, prefix: &str, follow: bool, refusals: &mut Refusals) -> Result<()> {
    let mut seen_nfc: BTreeMap<String, PathBuf> = BTreeMap::new();
    for entry in WalkDir::new(source).follow_links(follow).follow_root_links(follow).sort_by_file_name() {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(source).to_path_buf();
            Error::io("read", path, e.into_io_error().unwrap_or_else(|| std::io::Error::other("filesystem loop")))
        })?;
        let rel = entry.path().strip_prefix(source).unwrap_or(Path::new(""));
        let Some(rel) = rel.to_str() else {
            refusals.push(entry.path(), "name is not UTF-8");
            continue;
        };
        if rel.contains('\\') {
            refusals.push(entry.path(), "name holds a backslash");
            continue;
        }
        let payload = [prefix, rel].iter().filter(|s| !s.is_empty()).copied().collect::<Vec<_>>().join("/");
        if let Some(other) = seen_nfc.insert(manifest::nfc(&payload), entry.path().to_path_buf()) {
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
            if !payload.is_empty() {
                plan.dirs.push(payload.clone());
            }
            let empty = fs::read_dir(entry.path()).with_path("list", entry.path())?.next().is_none();
            if empty && !payload.is_empty() {
                plan.empty_dirs.push(payload);
            }
        } else if ft.is_file() {
            plan.files.push(PlannedFile { source: entry.path().to_path_buf(), payload, expected: None });
        } else {
            refusals.push(entry.path(), crate::fsx::file_kind_name(&ft));
        }
    }
    Ok(())
}

/// Plans a deposit of files and folders as one item. A single folder's contents go
/// straight into `data/`; otherwise each path goes to `data/<its name>`.
pub fn plan_paths(paths: &[PathBuf], follow_symlinks: bool) -> Result<SourcePlan> {
    let mut plan = SourcePlan { originals: paths.to_vec(), follow_symlinks, ..SourcePlan::default() };
    let mut refusals = Refusals::default();
    let single_dir = paths.len() == 1 && fs::metadata(&paths[0]).is_ok_and(|m| m.is_dir());
    let mut names = BTreeMap::new();
    for path in paths {
        match fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let problem = format!("{} does not exist", path.display());
                return Err(Error::Invalid { what: "deposit".into(), problem });
            }
            other => {
                other.with_path("read", path)?;
            }
        }
        let prefix = if single_dir {
            String::new()
        } else {
            let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| Error::Invalid {
                what: "deposit".into(),
                problem: format!("{} has no usable file name", path.display()),
            })?;
            if let Some(other) = names.insert(manifest::nfc(name), path.clone()) {
                let problem = format!("{} and {} would both be data/{name}", other.display(), path.display());
                return Err(Error::Invalid { what: "deposit".into(), problem });
            }
            name.to_string()
        };
        add_source(&mut plan, path, &prefix, follow_symlinks, &mut refusals)?;
    }
    refusals.into_result("; symlinks can be copied with --follow-symlinks")?;
    Ok(plan)
}

/// What a bag may hold for `--bag` to deposit it without dropping anything.
const KEPT_TOP_LEVEL: [&str; 5] = [BAGIT_TXT, BAG_INFO_TXT, MANIFEST, TAGMANIFEST, DATA];

/// Reads a tag file of a foreign bag as UTF-8 text (never through a link, capped).
fn read_foreign_tag(bag: &Path, name: &str) -> std::io::Result<String> {
    let bytes = read_capped(&bag.join(name), MAX_TAG_FILE)?;
    String::from_utf8(bytes).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "is not UTF-8"))
}

/// Refuses, before anything is copied, a bag that `--bag` cannot deposit faithfully:
/// no `bagit.txt`, an unsupported version, a holey bag (`fetch.txt`), tag files or
/// manifests ibi would not keep, or tag files that fail the bag's own tagmanifest.
fn check_foreign_bag(bag: &Path) -> Result<()> {
    let refuse =
        |problem: String| Error::Invalid { what: "bag".into(), problem: format!("{} {problem}", bag.display()) };
    let declaration =
        read_foreign_tag(bag, BAGIT_TXT).map_err(|e| refuse(format!("is not a BagIt bag: {BAGIT_TXT} {e}")))?;
    let declared =
        BagInfo::parse(&declaration).map_err(|line| refuse(format!("has a malformed {BAGIT_TXT} (line {line})")))?;
    let version = declared.first("BagIt-Version").unwrap_or("");
    if !matches!(version, "0.97" | "1.0") {
        return Err(refuse(format!("declares BagIt-Version {version:?}; ibi reads 0.97 and 1.0")));
    }
    if !declared.first("Tag-File-Character-Encoding").is_some_and(|e| e.eq_ignore_ascii_case("UTF-8")) {
        return Err(refuse("does not declare Tag-File-Character-Encoding UTF-8".into()));
    }
    for entry in fs::read_dir(bag).with_path("list", bag)? {
        let name = entry.with_path("list", bag)?.file_name();
        let name = name.to_string_lossy();
        if name == "fetch.txt" {
            return Err(refuse("is a holey bag (fetch.txt): fetch its files first".into()));
        }
        if !KEPT_TOP_LEVEL.contains(&name.as_ref()) {
            return Err(refuse(format!(
                "holds {name}, which ibi cannot yet keep in an item (only {}); nothing was deposited",
                KEPT_TOP_LEVEL.join(", ")
            )));
        }
    }
    if fs::symlink_metadata(bag.join(BAG_INFO_TXT)).is_ok() {
        read_foreign_tag(bag, BAG_INFO_TXT).map_err(|e| refuse(format!("has an unreadable {BAG_INFO_TXT}: it {e}")))?;
    }
    check_foreign_tagmanifest(bag).map_err(refuse)
}

/// Checks the tag files a foreign bag's tagmanifest-sha256.txt lists.
fn check_foreign_tagmanifest(bag: &Path) -> std::result::Result<(), String> {
    if fs::symlink_metadata(bag.join(TAGMANIFEST)).is_err() {
        return Ok(());
    }
    let text = read_foreign_tag(bag, TAGMANIFEST).map_err(|e| format!("has an unreadable {TAGMANIFEST}: it {e}"))?;
    let (entries, problems) = manifest::parse(&text, 64);
    if let Some(p) = problems.first() {
        return Err(format!("has a bad {TAGMANIFEST} (line {}: {})", p.line, p.problem));
    }
    for entry in entries {
        match crate::fsx::hash_file(&bag.join(&entry.path)) {
            Ok((digest, _)) if digest == entry.digest => {}
            Ok(_) => return Err(format!("fails its own {TAGMANIFEST}: {} does not match", entry.path)),
            Err(e) => return Err(format!("fails its own {TAGMANIFEST}: {}: {e}", entry.path)),
        }
    }
    Ok(())
}

/// Plans a deposit of an existing BagIt bag: its manifest-sha256.txt says what to
/// copy and what each file must hash to; its bag-info is carried over.
pub fn plan_bag(bag: &Path) -> Result<SourcePlan> {
    check_foreign_bag(bag)?;
    let invalid = |problem: String| Error::Data { what: format!("bag {}", bag.display()), problem };
    let text = read_capped(&bag.join(MANIFEST), MAX_TAG_FILE)
        .map_err(|e| invalid(format!("cannot read {MANIFEST}: {e}")))
        .and_then(|b| String::from_utf8(b).map_err(|_| invalid(format!("{MANIFEST} is not UTF-8"))))?;
    let (entries, problems) = manifest::parse(&text, 64);
    if let Some(p) = problems.first() {
        return Err(invalid(format!("{MANIFEST} line {}: {}", p.line, p.problem)));
    }
    let mut walked = SourcePlan::default();
    let mut refusals = Refusals::default();
    add_source(&mut walked, &bag.join(DATA), "", false, &mut refusals)?;
    refusals.into_result("")?;
    let mut on_disk: BTreeMap<String, PlannedFile> =
        walked.files.into_iter().map(|f| (manifest::nfc(&format!("{DATA}/{}", f.payload)), f)).collect();
    let mut files = Vec::new();
    for entry in entries {
        // A path read as RFC 8493 says, or as a writer that never encodes `%` meant it,
        // when exactly one of the two names a file.
        let direct = on_disk.contains_key(&manifest::nfc(&entry.path));
        let other = manifest::unencoded_alternative(&entry.path).filter(|p| on_disk.contains_key(&manifest::nfc(p)));
        let key = match (direct, other) {
            (true, None) => manifest::nfc(&entry.path),
            (false, Some(alt)) => manifest::nfc(&alt),
            (true, Some(alt)) => {
                return Err(invalid(format!("{} could name {} or {alt}; refusing to guess", entry.path, entry.path)))
            }
            (false, None) => return Err(invalid(format!("{} is missing", entry.path))),
        };
        let mut file = on_disk.remove(&key).ok_or_else(|| invalid(format!("{} is missing", entry.path)))?;
        file.expected = Some(entry.digest);
        files.push(file);
    }
    if let Some(extra) = on_disk.keys().next() {
        return Err(invalid(format!("{extra} is not in {MANIFEST}")));
    }
    // bag-info.txt is optional in BagIt; check_foreign_bag refused an unreadable one.
    let info_text = match read_foreign_tag(bag, BAG_INFO_TXT) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        other => other.map_err(|e| invalid(format!("cannot read {BAG_INFO_TXT}: {e}")))?,
    };
    let info =
        BagInfo::parse(&info_text).map_err(|line| invalid(format!("{BAG_INFO_TXT} line {line} is malformed")))?;
    Ok(SourcePlan {
        files,
        dirs: walked.dirs,
        empty_dirs: walked.empty_dirs,
        info: Some(info),
        originals: vec![bag.to_path_buf()],
        source_dirs: Vec::new(),
        follow_symlinks: false,
    })
}
