//! Where everything lives in a bucket under a collection's prefix (ARCHITECTURE.md,
//! "Collections in object storage"). Items follow the name path, as on disk, so a
//! bucket stays browsable; the control objects live under `.ibi/` and the aliases
//! under `.ibip/`, which no repository name can begin with:
//!
//! - `<name path>/<bag files>`: an item's files;
//! - `.ibi/items/<name path>`: its commit marker (it exists exactly when this does);
//! - `.ibi/inventory/<name path>`: its inventory record;
//! - `.ibip/<IBIp>`: an alias, holding the name;
//! - `.ibi/staging/<stage>/…`: staged files; `.ibi/placing/<stage>`, `.ibi/direct/<stage>`,
//!   `.ibi/direct/g<token>` (several direct stages), `.ibi/direct-batches/<token>`,
//!   `.ibi/removing/<name>`: intents;
//! - `.ibi/collection.toml`, `.ibi/lease`, `.ibi/minter`, `.ibi/deposits/<key digest>`.
//!
//! A file's key below its item is the file's own path, byte for byte
//! (`KeyForm::Names`), so aws-cli, rclone and boto3 download it under its name.
//! Items written before that kept `object_store`'s percent-encoding
//! (`KeyForm::Encoded`: `café.txt` as `caf%C3%A9.txt`); each item's commit
//! marker says which form its keys take, and `ibi upgrade` rewrites the old ones.

use object_store::path::Path as Key;
use serde::{Deserialize, Serialize};

use crate::id::{Ibip, RepositoryName};
use crate::store::StageId;

pub const MARKERS: &str = ".ibi/items";
pub const INVENTORY: &str = ".ibi/inventory";
pub const ALIASES: &str = ".ibip";
pub const STAGING: &str = ".ibi/staging";
pub const PLACING: &str = ".ibi/placing";
pub const REMOVING: &str = ".ibi/removing";
pub const DIRECT: &str = ".ibi/direct";
pub const DIRECT_BATCHES: &str = ".ibi/direct-batches";
pub const KEPT: &str = ".ibi/kept";

/// S3 holds keys of up to 1,024 bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// How the file paths of one item (or one stage) are spelled in its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyForm {
    /// Percent-encoded by `object_store` (items written before names were kept):
    /// the form a marker or intent without a `keys` field means.
    #[default]
    Encoded,
    /// The file's path itself.
    Names,
}

/// The keys of one collection: everything under its prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    pub prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        Keys { prefix: prefix.trim_matches('/').to_string() }
    }

    /// `rel` under the prefix.
    pub fn at(&self, rel: &str) -> Key {
        match self.prefix.is_empty() {
            true => Key::from(rel),
            false => Key::from(format!("{}/{rel}", self.prefix)),
        }
    }

    pub fn config(&self) -> Key {
        self.at(".ibi/collection.toml")
    }
    pub fn lease(&self) -> Key {
        self.at(".ibi/lease")
    }
    pub fn minter(&self) -> Key {
        self.at(".ibi/minter")
    }
    pub fn probe(&self, token: &str) -> Key {
        self.at(&format!(".ibi/probe-{token}"))
    }
    pub fn deposit(&self, key_digest: &str) -> Key {
        self.at(&format!(".ibi/deposits/{key_digest}"))
    }
    pub fn item(&self, name: &RepositoryName) -> Key {
        self.at(&name.to_string())
    }
    pub fn item_file(&self, name: &RepositoryName, rel: &str, form: KeyForm) -> Key {
        key_under(&self.item(name), rel, form)
    }
    pub fn marker(&self, name: &RepositoryName) -> Key {
        self.at(&format!("{MARKERS}/{name}"))
    }
    pub fn record(&self, name: &RepositoryName) -> Key {
        self.at(&format!("{INVENTORY}/{name}"))
    }
    pub fn alias(&self, ibip: &Ibip) -> Key {
        self.at(&format!("{ALIASES}/{ibip}"))
    }
    pub fn stage(&self, stage: StageId) -> Key {
        self.at(&format!("{STAGING}/{}", stage_token(stage)))
    }
    pub fn staged_file(&self, stage: StageId, rel: &str, form: KeyForm) -> Key {
        key_under(&self.stage(stage), rel, form)
    }
    pub fn placing(&self, stage: StageId) -> Key {
        self.at(&format!("{PLACING}/{}", stage_token(stage)))
    }
    pub fn direct(&self, stage: StageId) -> Key {
        self.at(&format!("{DIRECT}/{}", stage_token(stage)))
    }
    /// The one intent of several direct stages begun together (`Writer::stages_for`):
    /// a `g` before the token, so that an older ibi's recovery passes it by.
    pub fn direct_group(&self, token: &str) -> Key {
        self.at(&format!("{DIRECT}/{GROUP_MARK}{token}"))
    }
    pub fn direct_batch(&self, token: &str) -> Key {
        self.at(&format!("{DIRECT_BATCHES}/{token}"))
    }
    /// Where a replacement keeps the objects it displaces (`ibi kept`).
    pub fn kept(&self, name: &RepositoryName, token: &str) -> Key {
        self.at(&format!("{KEPT}/{}@{token}", name.to_string().replace('/', "+")))
    }
    pub fn removing(&self, name: &RepositoryName) -> Key {
        self.at(&format!("{REMOVING}/{}", name.to_string().replace('/', "+")))
    }

    /// The path of `key` relative to `base` (a folder key), as the file was named.
    pub fn relative(base: &Key, key: &Key, form: KeyForm) -> Option<String> {
        let parts: Vec<String> = match form {
            KeyForm::Encoded => key.prefix_match(base)?.map(|p| decode(p.as_ref())).collect(),
            KeyForm::Names => key.prefix_match(base)?.map(|p| p.as_ref().to_string()).collect(),
        };
        (!parts.is_empty()).then(|| parts.join("/"))
    }
}

/// `base` (a folder key) with the file path `rel` under it, spelled as `form` says.
/// A path no key can hold as it is (`check_file_key` refuses it before anything is
/// written) falls back to the encoded form, which names no object of a `Names` item.
pub fn key_under(base: &Key, rel: &str, form: KeyForm) -> Key {
    if form == KeyForm::Names {
        if let Ok(key) = Key::parse(format!("{base}/{rel}")) {
            return key;
        }
    }
    let mut key = base.clone();
    key.extend(rel.split('/'));
    key
}

/// Why the file path `rel` cannot be a key under `base` as it is named, if it cannot:
/// a control character (the S3 client refuses them), or a key over S3's 1,024 bytes.
pub fn check_file_key(base: &Key, rel: &str) -> Result<(), String> {
    if let Some(c) = rel.chars().find(|c| c.is_control()) {
        return Err(format!(
            "{rel:?} holds the control character {c:?}, which this collection's object keys cannot hold; rename the file"
        ));
    }
    let length = base.as_ref().len() + 1 + rel.len();
    if length > MAX_KEY_BYTES {
        return Err(format!("{rel:?} would make a key of {length} bytes, over S3's {MAX_KEY_BYTES}; shorten its path"));
    }
    Ok(())
}

/// Whether `rel` is spelled differently in the two forms (an item holding such a
/// path needs its keys rewritten by `ibi upgrade`).
pub fn spelled_differently(rel: &str) -> bool {
    let base = Key::from("b");
    key_under(&base, rel, KeyForm::Encoded) != key_under(&base, rel, KeyForm::Names)
}

/// A stage's token in keys.
pub fn stage_token(stage: StageId) -> String {
    format!("{:016x}", stage.0)
}

/// What begins the name of a group of direct intents (`Keys::direct_group`).
pub const GROUP_MARK: &str = "g";

/// The stage a token names.
pub fn parse_stage(token: &str) -> Option<StageId> {
    u64::from_str_radix(token, 16).ok().map(StageId)
}

/// A key part as it was written (`object_store` percent-encodes a few characters).
pub fn decode(part: &str) -> String {
    percent_encoding::percent_decode_str(part).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_path_with_reserved_characters_comes_back_as_written() {
        let keys = Keys::new("/lib/");
        let base = keys.at("sid.example.org/w/2026/01.01");
        let rel = "data/a {b}%c#.txt";
        for form in [KeyForm::Encoded, KeyForm::Names] {
            let key = key_under(&base, rel, form);
            assert_eq!(Keys::relative(&base, &key, form).as_deref(), Some(rel));
            assert!(key.as_ref().starts_with("lib/sid.example.org/"));
        }
    }

    #[test]
    fn names_keys_are_the_file_names_byte_for_byte() {
        let base = Keys::new("lib").at("sid.example.org/w/2026/01.01");
        for rel in ["data/café.txt", "data/100%.txt", "data/a#b?c[d]{e}~*\"'<>|`.txt", "data/ja/日本語.txt"] {
            assert_eq!(key_under(&base, rel, KeyForm::Names).as_ref(), format!("{base}/{rel}"));
            assert!(spelled_differently(rel), "{rel}");
        }
        assert!(!spelled_differently("data/plain-name_1.txt"));
        assert_eq!(key_under(&base, "data/café.txt", KeyForm::Encoded).as_ref(), format!("{base}/data/caf%C3%A9.txt"));
    }

    #[test]
    fn paths_no_key_holds_are_refused_by_name() {
        let base = Key::from("lib/x");
        assert!(check_file_key(&base, "data/a\tb").unwrap_err().contains("control character"));
        assert!(check_file_key(&base, &format!("data/{}", "n".repeat(1100))).unwrap_err().contains("1024"));
        assert!(check_file_key(&base, "data/café.txt").is_ok());
    }

    #[test]
    fn stage_tokens_round_trip() {
        let stage = StageId(0xdead_beef_0042);
        assert_eq!(parse_stage(&stage_token(stage)), Some(stage));
        assert_eq!(parse_stage("xyz"), None);
    }
}
