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
//!   `.ibi/removing/<name>`: intents;
//! - `.ibi/collection.toml`, `.ibi/lease`, `.ibi/minter`, `.ibi/deposits/<key digest>`.

use object_store::path::Path as Key;

use crate::id::{Ibip, RepositoryName};
use crate::store::StageId;

pub const MARKERS: &str = ".ibi/items";
pub const INVENTORY: &str = ".ibi/inventory";
pub const ALIASES: &str = ".ibip";
pub const STAGING: &str = ".ibi/staging";
pub const PLACING: &str = ".ibi/placing";
pub const REMOVING: &str = ".ibi/removing";
pub const DIRECT: &str = ".ibi/direct";

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
    pub fn item_file(&self, name: &RepositoryName, rel: &str) -> Key {
        self.at(&format!("{name}/{rel}"))
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
    pub fn staged_file(&self, stage: StageId, rel: &str) -> Key {
        self.at(&format!("{STAGING}/{}/{rel}", stage_token(stage)))
    }
    pub fn placing(&self, stage: StageId) -> Key {
        self.at(&format!("{PLACING}/{}", stage_token(stage)))
    }
    pub fn direct(&self, stage: StageId) -> Key {
        self.at(&format!("{DIRECT}/{}", stage_token(stage)))
    }
    pub fn removing(&self, name: &RepositoryName) -> Key {
        self.at(&format!("{REMOVING}/{}", name.to_string().replace('/', "+")))
    }

    /// The path of `key` relative to `base` (a folder key), decoded as written.
    pub fn relative(base: &Key, key: &Key) -> Option<String> {
        let parts: Vec<String> = key.prefix_match(base)?.map(|p| decode(p.as_ref())).collect();
        (!parts.is_empty()).then(|| parts.join("/"))
    }
}

/// A stage's token in keys.
pub fn stage_token(stage: StageId) -> String {
    format!("{:016x}", stage.0)
}

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
        let key = keys.at(&format!("sid.example.org/w/2026/01.01/{rel}"));
        assert_eq!(Keys::relative(&base, &key).as_deref(), Some(rel));
        assert!(key.as_ref().starts_with("lib/sid.example.org/"));
    }

    #[test]
    fn stage_tokens_round_trip() {
        let stage = StageId(0xdead_beef_0042);
        assert_eq!(parse_stage(&stage_token(stage)), Some(stage));
        assert_eq!(parse_stage("xyz"), None);
    }
}
