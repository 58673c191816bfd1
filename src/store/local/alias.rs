//! IBIp alias links: one relative symlink `.ibip/<PREFIX>/<SUFFIX>` →
//! `../../<four-part name>` per item, so a collection still works after
//! `cp -a` or `rsync -a`. A new link is made in place; one already there is
//! replaced atomically (new link beside, then rename); their directory is fsynced.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::fsx::{create_dir_all_durable, fsync_dir, parent_dir, Beneath, TEMP_PREFIX};
use crate::id::{Ibip, RepositoryName};
use crate::store::local::layout::{Layout, ALIAS_DIR};

/// Creates or repairs the alias of `name`, durably.
pub fn create(layout: &Layout, ibip: &Ibip, name: &RepositoryName) -> Result<()> {
    match create_unsynced(layout, ibip, name, &BTreeSet::new())? {
        Some(dir) => fsync_dir(&dir),
        None => Ok(()),
    }
}

/// Creates or repairs the alias of `name`; returns the directory to fsync (the caller
/// fsyncs each once after a batch), or `None` when the link was already right.
/// `known` holds the directories this batch already made or found whole.
pub fn create_unsynced(
    layout: &Layout,
    ibip: &Ibip,
    name: &RepositoryName,
    known: &BTreeSet<PathBuf>,
) -> Result<Option<PathBuf>> {
    let link = layout.alias(ibip);
    let target = Layout::alias_target(name);
    let dir = parent_dir(&link).to_path_buf();
    if !known.contains(&dir) {
        refuse_symlinked_dir(&dir)?;
        create_dir_all_durable(&dir)?;
    }
    // A new alias is made where it goes (symlink(2) either makes it whole or not
    // at all); only one already there is read, and replaced through a temporary.
    match symlink(&target, &link) {
        Ok(()) => return Ok(Some(dir)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io("create symlink", &link, e)),
    }
    if fs::read_link(&link).is_ok_and(|t| t == target) {
        return Ok(None);
    }
    let temp = dir.join(format!("{TEMP_PREFIX}{}", ibip.suffix()));
    let _ = fs::remove_file(&temp);
    symlink(&target, &temp).with_path("create symlink", &temp)?;
    fs::rename(&temp, &link).with_path("rename symlink onto", &link)?;
    Ok(Some(dir))
}

/// The alias folders (`.ibip/<PREFIX>`) read so far, each held open once found
/// beneath the root (never through a link): a subsystem's aliases share one
/// prefix, so each link is then read by its one name, not by a path from `/`.
#[derive(Debug, Default)]
pub struct HeldFolders(std::sync::Mutex<Vec<(String, Beneath)>>);

impl HeldFolders {
    /// The folder of `prefix`: as held, or found now (always when `again`: a
    /// folder removed and made anew since is found at its path).
    fn get(&self, root: &Beneath, prefix: &str, again: bool) -> io::Result<Beneath> {
        let mut held = crate::sync::lock(&self.0);
        if let Some((_, folder)) = held.iter().find(|(p, _)| p == prefix).filter(|_| !again) {
            return Ok(folder.clone());
        }
        let folder = root.folder(&format!("{ALIAS_DIR}/{prefix}"))?;
        held.retain(|(p, _)| p != prefix);
        held.push((prefix.to_string(), folder.clone()));
        Ok(folder)
    }

    /// The target of the alias link of `ibip`.
    fn read_link(&self, root: &Beneath, ibip: &Ibip) -> io::Result<PathBuf> {
        let (prefix, suffix) = (ibip.prefix(), ibip.suffix());
        match self.get(root, &prefix, false)?.read_link(&suffix) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.get(root, &prefix, true)?.read_link(&suffix),
            read => read,
        }
    }
}

/// Why the alias of `name` is broken, if it is; read beneath `root` through the
/// alias folders `held`.
pub fn check(
    layout: &Layout,
    (root, held): (&Beneath, &HeldFolders),
    ibip: &Ibip,
    name: &RepositoryName,
) -> Option<String> {
    let link = layout.alias(ibip);
    let expected = Layout::alias_target(name);
    match held.read_link(root, ibip) {
        Ok(target) if target == expected => None,
        Ok(target) => {
            Some(format!("{} points to {}, expected {}", rel(layout, &link), target.display(), expected.display()))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(format!("{} is missing", rel(layout, &link))),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Some(format!("{} is not a symlink", rel(layout, &link))),
        Err(e) => Some(format!("{}: {e}", rel(layout, &link))),
    }
}

/// Removes the alias of `name` if it points to `name`, durably.
pub fn remove(layout: &Layout, ibip: &Ibip, name: &RepositoryName) -> Result<()> {
    match remove_unsynced(layout, ibip, name)? {
        Some(dir) => fsync_dir(&dir),
        None => Ok(()),
    }
}

/// Removes the alias of `name` if it points to `name`; returns the directory to fsync.
pub fn remove_unsynced(layout: &Layout, ibip: &Ibip, name: &RepositoryName) -> Result<Option<PathBuf>> {
    let link = layout.alias(ibip);
    refuse_symlinked_dir(parent_dir(&link))?;
    if fs::read_link(&link).is_ok_and(|t| t == Layout::alias_target(name)) {
        fs::remove_file(&link).with_path("remove", &link)?;
        return Ok(Some(parent_dir(&link).to_path_buf()));
    }
    Ok(None)
}

/// Every alias link whose item `holds` says is absent, with the IBIp and the name it
/// names; a link `checked` says was found right is not read (only its name is
/// listed). Only a link whose IBIp and name encode the same date counts (an alias
/// retargeted elsewhere is a broken alias, which verify reports at its item).
/// Folders and links are read without following anything; what is not an alias
/// (a stray file, an unparsable name) is skipped here.
pub fn dangling(
    layout: &Layout,
    beneath: &Beneath,
    checked: &dyn Fn(&Ibip) -> bool,
    holds: &dyn Fn(&RepositoryName) -> bool,
) -> Result<Vec<(Ibip, RepositoryName)>> {
    let root = layout.aliases();
    let prefixes = match fs::read_dir(&root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other.with_path("list", &root)?,
    };
    let mut found = Vec::new();
    for prefix in prefixes.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
        let prefix_name = prefix.file_name().to_string_lossy().into_owned();
        let folder = beneath.folder(&format!("{ALIAS_DIR}/{prefix_name}")).with_path("open", prefix.path())?;
        for link in fs::read_dir(prefix.path()).with_path("list", prefix.path())?.flatten() {
            let suffix = link.file_name().to_string_lossy().into_owned();
            let Ok(ibip) = Ibip::parse(&format!("{prefix_name}/{suffix}")) else { continue };
            if checked(&ibip) {
                continue;
            }
            let Ok(target) = folder.read_link(&suffix) else { continue };
            let Ok(rel) = target.strip_prefix("../..") else { continue };
            if let Ok(name) = RepositoryName::parse(&rel.to_string_lossy()) {
                if ibip.date() == name.date() && !holds(&name) {
                    found.push((ibip, name));
                }
            }
        }
    }
    found.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(found)
}

/// An alias folder (`.ibip/<PREFIX>`) that is a symlink would take writes outside
/// the collection: it is an error naming it.
fn refuse_symlinked_dir(dir: &Path) -> Result<()> {
    if fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(Error::Invalid {
            what: "collection".into(),
            problem: format!(
                "{} is not a folder (a symlink?); ibi never follows symlinks inside a collection",
                dir.display()
            ),
        });
    }
    Ok(())
}

fn rel(layout: &Layout, path: &Path) -> String {
    layout.relative(path).display().to_string()
}
