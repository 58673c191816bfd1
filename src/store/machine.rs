//! This machine's own folders for what ibi keeps outside any collection (the
//! minters' machine-wide states, the witness keys of collections in buckets):
//! each named by an environment variable, else under `/var/lib/ibi` for root,
//! else under `$XDG_STATE_HOME/ibi` (`~/.local/state/ibi`).

use std::path::PathBuf;

/// The folder `name` of this machine: `$env` when set and not empty, else
/// `/var/lib/ibi/<name>` for root, else `$XDG_STATE_HOME/ibi/<name>` (or
/// `~/.local/state/ibi/<name>`); `None` when no home is known.
pub fn folder(env: &str, name: &str) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(env).filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Some(PathBuf::from("/var/lib/ibi").join(name));
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(state.join("ibi").join(name))
}
