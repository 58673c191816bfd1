//! The witness's signing key as a file: a 32-byte Ed25519 seed in hex, mode
//! 0600, made once from the OS's random source and never replaced (two
//! processes making one at once keep the first). A local collection keeps it in
//! `.ibi/witness.key`; a collection in a bucket, where no file mode protects a
//! secret, keeps it on the machine that signs for it (`machine_key_path`).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The environment variable that chooses the folder of this machine's witness keys.
pub const KEY_DIR_ENV: &str = "IBI_KEY_DIR";

/// Where this machine keeps the witness keys of collections that cannot hold
/// their own (in a bucket): `$IBI_KEY_DIR`, else `/var/lib/ibi/keys` for root,
/// else `$XDG_STATE_HOME/ibi/keys` (`~/.local/state/ibi/keys`).
pub fn machine_key_dir() -> Option<PathBuf> {
    crate::store::machine::folder(KEY_DIR_ENV, "keys")
}

/// The key file of the collection with id `id` in this machine's key folder: the
/// id with every character but letters, digits and `-` written as `_`.
pub fn machine_key_path(dir: &Path, id: &str) -> PathBuf {
    let file: String = id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    dir.join(format!("{file}.witness.key"))
}

/// The seed of a key this machine keeps under `name` in its key folder (not a
/// collection's witness key: one of its own, such as the signer of an OCFL
/// site's checks or of an audit's pages); made when `make` and it is missing.
/// `None` when no key folder is known, or none is kept and `make` is false.
pub fn machine_seed(name: &str, make: bool) -> Option<[u8; 32]> {
    let dir = machine_key_dir()?;
    if make {
        crate::fsx::create_dir_all_durable(&dir).ok()?;
    }
    witness_seed(&machine_key_path(&dir, name), make).ok().flatten()
}

/// The public key (hex) of `seed`.
pub fn public_key(seed: &[u8; 32]) -> String {
    hex::encode(ed25519_dalek::SigningKey::from_bytes(seed).verifying_key().as_bytes())
}

/// The witness key's seed at `path`: read, or (when `may_write`) made from the
/// OS's random source and kept with mode 0600, never over a key another process
/// made first.
pub fn witness_seed(path: &std::path::Path, may_write: bool) -> Result<Option<[u8; 32]>> {
    let parse = |text: &str| -> Option<[u8; 32]> { hex::decode(text.trim()).ok()?.try_into().ok() };
    let read = || -> Result<Option<[u8; 32]>> {
        match crate::fsx::read_capped(path, 1024) {
            Ok(bytes) => parse(&String::from_utf8_lossy(&bytes)).map(Some).ok_or_else(|| Error::CorruptState {
                path: path.to_path_buf(),
                problem: "it is not a 32-byte key in hex".into(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("read", path, e)),
        }
    };
    if let Some(seed) = read()? {
        return Ok(Some(seed));
    }
    if !may_write {
        return Ok(None);
    }
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed)
        .map_err(|e| Error::io("draw a key from", path, std::io::Error::other(e.to_string())))?;
    let hex = hex::encode(seed);
    let dir = crate::fsx::parent_dir(path);
    let temp = dir.join(format!("{}witness.key", crate::fsx::TEMP_PREFIX));
    crate::fsx::remove_tree(&temp)?;
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| Error::io("create", &temp, e))?;
        file.write_all(hex.as_bytes()).and_then(|()| file.sync_all()).map_err(|e| Error::io("write", &temp, e))?;
    }
    match crate::fsx::rename_noreplace(&temp, path) {
        Ok(()) => crate::fsx::fsync_dir(dir).map(|()| Some(seed)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            crate::fsx::remove_tree(&temp)?;
            read()
        }
        Err(e) => Err(Error::io("rename a temporary file onto", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key file's decoder skipped pairs that were not hex, so a damaged file
    /// (here a key with "zz" written into it) read as another 32-byte key and
    /// signed witnesses with it; it is now refused as corrupt.
    #[test]
    fn regress_damaged_witness_key_read_as_another_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("witness.key");
        let key = "11".repeat(32);
        std::fs::write(&path, format!("{}zz{}\n", &key[..32], &key[32..])).unwrap();
        let read = witness_seed(&path, false);
        assert!(matches!(read, Err(crate::Error::CorruptState { .. })), "{read:?}");
        std::fs::write(&path, format!("{key}\n")).unwrap();
        assert_eq!(witness_seed(&path, false).unwrap(), Some([0x11; 32]));
    }
}
