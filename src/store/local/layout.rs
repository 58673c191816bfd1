//! Where everything lives under a collection root (ARCHITECTURE.md, "On-disk layout"): the `.ibi/`
//! control files, the `.ibip/` alias tree, and an item's four-level path.
//! A repository name can never begin with `.`, so neither tree clashes with items.

use std::path::{Path, PathBuf};

use crate::id::{Ibip, RepositoryName};

pub const CONTROL_DIR: &str = ".ibi";
pub const ALIAS_DIR: &str = ".ibip";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub root: PathBuf,
}

impl Layout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Layout { root: root.into() }
    }

    pub fn control(&self) -> PathBuf {
        self.root.join(CONTROL_DIR)
    }
    pub fn config(&self) -> PathBuf {
        self.control().join("collection.toml")
    }
    pub fn minter_state(&self) -> PathBuf {
        self.control().join("minter.state")
    }
    pub fn minter_lock(&self) -> PathBuf {
        self.control().join("minter.lock")
    }
    pub fn write_lock(&self) -> PathBuf {
        self.control().join("write.lock")
    }
    pub fn staging(&self) -> PathBuf {
        self.control().join("staging")
    }
    pub fn trash(&self) -> PathBuf {
        self.control().join("trash")
    }
    /// The copies that replacements displaced, kept until a person removes them.
    pub fn kept(&self) -> PathBuf {
        self.control().join("kept")
    }
    pub fn journal(&self) -> PathBuf {
        self.control().join("journal")
    }
    /// The seed of the witness signing key (hex; mode 0600).
    pub fn witness_key(&self) -> PathBuf {
        self.control().join("witness.key")
    }
    /// The latest witness (JSON).
    pub fn witness(&self) -> PathBuf {
        self.control().join("witness.json")
    }
    /// The inventory: every item held or ever held (SQLite).
    pub fn inventory(&self) -> PathBuf {
        self.control().join("inventory.sqlite")
    }
    pub fn aliases(&self) -> PathBuf {
        self.root.join(ALIAS_DIR)
    }
    /// Content records of deposits: `<key>` holds the name the content was deposited as.
    pub fn deposit_records(&self) -> PathBuf {
        self.control().join("deposited")
    }

    /// Every file and folder ibi keeps for itself, none of which may be a symlink.
    pub fn own_paths(&self) -> Vec<PathBuf> {
        vec![
            self.control(),
            self.config(),
            self.minter_state(),
            self.minter_lock(),
            self.write_lock(),
            self.staging(),
            self.trash(),
            self.journal(),
            self.aliases(),
            self.deposit_records(),
            self.inventory(),
        ]
    }

    /// `ROOT/<subdomain>/<word[.port]>/<year>/<MM.DD.hh.mm[.ss[.f]]>`
    pub fn item(&self, name: &RepositoryName) -> PathBuf {
        let mut path = self.root.clone();
        path.extend(name.components());
        path
    }

    /// `ROOT/.ibip/<PREFIX>/<SUFFIX>`
    pub fn alias(&self, ibip: &Ibip) -> PathBuf {
        self.aliases().join(ibip.prefix()).join(ibip.suffix())
    }

    /// The relative target of an alias link: `../../<four-part name>`.
    pub fn alias_target(name: &RepositoryName) -> PathBuf {
        let mut target = PathBuf::from("../..");
        target.extend(name.components());
        target
    }

    /// The path of `path` relative to the root, for messages.
    pub fn relative<'a>(&self, path: &'a Path) -> &'a Path {
        path.strip_prefix(&self.root).unwrap_or(path)
    }
}
