//! Where a collection is, as a user writes it: a local folder, or a far one
//! reached over SSH, written `[USER@]HOST:PATH` (as rsync and scp write it: a
//! colon before the first slash) or `ssh://[USER@]HOST[:PORT]/PATH`, or one in
//! S3-compatible object storage, written `s3://BUCKET[/PREFIX]`. A local path
//! with a colon is written `./a:b`. This module owns telling them apart, so that
//! `HOST:PATH` and `s3://…` never become local folders.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A collection on another machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FarAddress {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
    /// The path on the far machine, as given (relative paths are relative to the far home).
    pub path: String,
}

impl fmt::Display for FarAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let user = self.user.as_deref().map(|u| format!("{u}@")).unwrap_or_default();
        match self.port {
            Some(port) => write!(f, "ssh://{user}{}:{port}/{}", self.host, self.path.trim_start_matches('/')),
            None => write!(f, "{user}{}:{}", self.host, self.path),
        }
    }
}

impl FarAddress {
    /// `[USER@]HOST`, as ssh takes it.
    pub fn destination(&self) -> String {
        match &self.user {
            Some(user) => format!("{user}@{}", self.host),
            None => self.host.clone(),
        }
    }
}

/// A collection in a bucket of S3-compatible object storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectAddress {
    pub bucket: String,
    /// The key prefix, without leading or trailing slashes (empty: the whole bucket).
    pub prefix: String,
}

impl fmt::Display for ObjectAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.prefix.is_empty() {
            true => write!(f, "s3://{}", self.bucket),
            false => write!(f, "s3://{}/{}", self.bucket, self.prefix),
        }
    }
}

/// Where a collection is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Local(PathBuf),
    Far(FarAddress),
    Object(ObjectAddress),
    /// An OCFL storage root kept as a site (`ocfl:PATH`, `ocfl:s3://BUCKET/PREFIX`).
    Ocfl(OcflPlace),
}

/// Where an OCFL storage root is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OcflPlace {
    /// A folder on this machine.
    Folder(PathBuf),
    /// A prefix in a bucket.
    Bucket(ObjectAddress),
    /// A folder on a far machine (`ocfl:HOST:PATH`), written through its `ibi serve --stdio`.
    Far(FarAddress),
}

impl OcflPlace {
    /// Where `export --ocfl` writes: `s3://BUCKET/PREFIX` or `ocfl:…` as
    /// a site's location reads, any other text a folder.
    pub fn parse(given: &Path) -> Result<OcflPlace> {
        let text = given.to_str().unwrap_or_default();
        if let Some(address) = text.strip_prefix("s3://") {
            return Ok(OcflPlace::Bucket(parse_s3_address(text, address)?));
        }
        match text.strip_prefix("ocfl:") {
            Some(rest) => match parse_ocfl(text, rest)? {
                Location::Ocfl(place) => Ok(place),
                _ => Err(invalid(text, "it is no OCFL storage root's place")),
            },
            None => Ok(OcflPlace::Folder(given.to_path_buf())),
        }
    }

    /// A place under it, for messages: `ocfl:ROOT/REL`.
    pub fn show(&self, rel: &str) -> String {
        match self {
            OcflPlace::Folder(path) => path.join(rel).display().to_string(),
            OcflPlace::Bucket(address) => format!("{address}/{rel}"),
            OcflPlace::Far(address) => format!("{address}/{rel}"),
        }
    }
}

impl fmt::Display for OcflPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OcflPlace::Folder(path) => write!(f, "ocfl:{}", path.display()),
            OcflPlace::Bucket(address) => write!(f, "ocfl:{address}"),
            OcflPlace::Far(address) => write!(f, "ocfl:{address}"),
        }
    }
}

/// A location as the collection there names itself (`Store::location`): a local
/// path as given, a far or S3 address in its canonical form.
impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Local(path) => write!(f, "{}", path.display()),
            Location::Far(address) => address.fmt(f),
            Location::Object(address) => address.fmt(f),
            Location::Ocfl(place) => place.fmt(f),
        }
    }
}

fn parse_s3(text: &str, rest: &str) -> Result<Location> {
    parse_s3_address(text, rest).map(Location::Object)
}

fn parse_s3_address(text: &str, rest: &str) -> Result<ObjectAddress> {
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    if bucket.len() < 3 || bucket.len() > 63 || !bucket.chars().all(valid) {
        return Err(invalid(text, "the bucket name must be 3 to 63 lowercase letters, digits, dots or hyphens"));
    }
    let prefix = prefix.trim_matches('/');
    if prefix.split('/').any(|part| part == "." || part == "..") || prefix.contains("//") {
        return Err(invalid(text, "the prefix holds an empty, \".\" or \"..\" part"));
    }
    Ok(ObjectAddress { bucket: bucket.to_string(), prefix: prefix.to_string() })
}

fn invalid(text: &str, problem: impl Into<String>) -> Error {
    Error::Invalid { what: format!("collection location \"{text}\""), problem: problem.into() }
}

/// `ocfl:PATH` (a folder on this machine), `ocfl:HOST:PATH` or
/// `ocfl:ssh://…` (a far one) or `ocfl:s3://BUCKET/PREFIX`.
fn parse_ocfl(text: &str, rest: &str) -> Result<Location> {
    if let Some(address) = rest.strip_prefix("s3://") {
        return Ok(Location::Ocfl(OcflPlace::Bucket(parse_s3_address(text, address)?)));
    }
    if rest.is_empty() || (rest.contains("://") && !rest.starts_with("ssh://")) {
        let problem = "an OCFL site is a folder (ocfl:/srv/ocfl), a far folder (ocfl:HOST:/srv/ocfl) or a bucket \
                       (ocfl:s3://BUCKET/PREFIX)";
        return Err(invalid(text, problem));
    }
    match Location::parse(Path::new(rest))? {
        Location::Far(address) => Ok(Location::Ocfl(OcflPlace::Far(address))),
        _ => Ok(Location::Ocfl(OcflPlace::Folder(PathBuf::from(rest)))),
    }
}

/// Splits `[USER@]HOST`, refusing empty parts and characters ssh would read as options.
fn user_and_host(text: &str, whole: &str) -> Result<(Option<String>, String)> {
    let (user, host) = match text.rsplit_once('@') {
        Some((user, host)) => (Some(user.to_string()), host),
        None => (None, text),
    };
    if host.is_empty() || host.starts_with('-') || user.as_deref().is_some_and(|u| u.is_empty() || u.starts_with('-')) {
        return Err(invalid(whole, "the host (and user, if given) must be non-empty and not start with \"-\""));
    }
    if host.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(invalid(whole, "the host holds a space or a slash"));
    }
    Ok((user, host.to_string()))
}

fn parse_url(text: &str, rest: &str) -> Result<Location> {
    let (authority, path) = rest.split_once('/').ok_or_else(|| invalid(text, "ssh:// needs a path after the host"))?;
    let (authority, port) = match authority.rsplit_once(':') {
        Some((a, p)) => {
            (a, Some(p.parse::<u16>().map_err(|_| invalid(text, format!("port \"{p}\" is not a number")))?))
        }
        None => (authority, None),
    };
    let (user, host) = user_and_host(authority, text)?;
    if path.is_empty() {
        return Err(invalid(text, "ssh:// needs a path after the host"));
    }
    Ok(Location::Far(FarAddress { user, host, port, path: format!("/{path}") }))
}

impl Location {
    /// Reads a location. Text that is not UTF-8 is a local path.
    pub fn parse(given: &Path) -> Result<Location> {
        let Some(text) = given.to_str() else { return Ok(Location::Local(given.to_path_buf())) };
        if let Some(rest) = text.strip_prefix("ssh://") {
            return parse_url(text, rest);
        }
        if let Some(rest) = text.strip_prefix("s3://") {
            return parse_s3(text, rest);
        }
        if let Some(rest) = text.strip_prefix("ocfl:") {
            return parse_ocfl(text, rest);
        }
        if text.contains("://") {
            let scheme = text.split("://").next().unwrap_or_default();
            let problem = format!("\"{scheme}://\" is not a kind of location ibi knows (ssh:// and s3:// are)");
            return Err(invalid(text, problem));
        }
        let colon = text.find(':');
        let slash = text.find('/');
        match colon {
            Some(c) if slash.is_none_or(|s| c < s) => {
                let (user, host) = user_and_host(&text[..c], text)?;
                let path = &text[c + 1..];
                let path = if path.is_empty() { "." } else { path };
                Ok(Location::Far(FarAddress { user, host, port: None, path: path.to_string() }))
            }
            _ => Ok(Location::Local(given.to_path_buf())),
        }
    }
}

/// The command that reaches a far machine (default `ssh`).
pub const RSH_ENV: &str = "IBI_RSH";
/// The far `ibi` binary (default `ibi`).
pub const REMOTE_IBI_ENV: &str = "IBI_REMOTE_IBI";

/// How to reach far collections.
#[derive(Debug, Clone)]
pub struct Connect {
    pub rsh: String,
    pub remote_ibi: String,
    /// How long a far side may take to greet, and to send each next reply,
    /// before it is given up (`IBI_FAR_TIMEOUT`, seconds).
    pub timeout: std::time::Duration,
}

/// The far timeout in seconds, when not the default.
pub const FAR_TIMEOUT_ENV: &str = "IBI_FAR_TIMEOUT";
/// Five minutes: a far side hashing a large file sends nothing meanwhile.
pub const DEFAULT_FAR_TIMEOUT_SECS: u64 = 300;

impl Connect {
    /// From `IBI_RSH`, `IBI_REMOTE_IBI` and `IBI_FAR_TIMEOUT`, defaulting to
    /// `ssh`, `ibi` and five minutes (an unreadable timeout is the default).
    pub fn from_env() -> Connect {
        let get = |name: &str, default: &str| {
            std::env::var(name).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.to_string())
        };
        let secs = get(FAR_TIMEOUT_ENV, "").trim().parse::<u64>().ok().filter(|s| *s > 0);
        let timeout = std::time::Duration::from_secs(secs.unwrap_or(DEFAULT_FAR_TIMEOUT_SECS));
        Connect { rsh: get(RSH_ENV, "ssh"), remote_ibi: get(REMOTE_IBI_ENV, "ibi"), timeout }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn far(text: &str) -> FarAddress {
        match Location::parse(Path::new(text)).unwrap() {
            Location::Far(far) => far,
            other => panic!("{text} read as {other:?}"),
        }
    }

    #[test]
    fn host_colon_path_is_far() {
        let f = far("root@old:/srv/library");
        assert_eq!(
            (f.user.as_deref(), f.host.as_str(), f.port, f.path.as_str()),
            (Some("root"), "old", None, "/srv/library")
        );
        assert_eq!(far("lab:").path, ".");
        assert_eq!(far("lab:x").to_string(), "lab:x");
    }

    /// An OCFL root is a folder, a far folder or a bucket, as a site's
    /// location (`ocfl:…`) or as `export --ocfl` takes it; anything else
    /// after `ocfl:` is refused by name.
    #[test]
    fn an_ocfl_place_is_a_folder_a_far_folder_or_a_bucket() {
        let ocfl = |text: &str| match Location::parse(Path::new(text)).unwrap() {
            Location::Ocfl(place) => place,
            other => panic!("{text} read as {other:?}"),
        };
        assert_eq!(ocfl("ocfl:/srv/ocfl"), OcflPlace::Folder(PathBuf::from("/srv/ocfl")));
        assert!(matches!(ocfl("ocfl:lab:/srv/ocfl"), OcflPlace::Far(f) if f.host == "lab" && f.path == "/srv/ocfl"));
        let bucket = ObjectAddress { bucket: "lib".into(), prefix: "ocfl/site".into() };
        assert_eq!(ocfl("ocfl:s3://lib/ocfl/site/"), OcflPlace::Bucket(bucket.clone()));
        assert_eq!(ocfl("ocfl:s3://lib/ocfl/site").to_string(), "ocfl:s3://lib/ocfl/site");
        assert_eq!(OcflPlace::parse(Path::new("s3://lib/ocfl/site")).unwrap(), OcflPlace::Bucket(bucket));
        assert_eq!(OcflPlace::parse(Path::new("out")).unwrap(), OcflPlace::Folder(PathBuf::from("out")));
        for bad in ["ocfl:", "ocfl:http://x/y", "ocfl:s3://x"] {
            assert!(Location::parse(Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn ssh_url_is_far_with_port() {
        let f = far("ssh://ana@lab:2222/srv/x");
        assert_eq!(
            (f.user.as_deref(), f.host.as_str(), f.port, f.path.as_str()),
            (Some("ana"), "lab", Some(2222), "/srv/x")
        );
        assert_eq!(f.to_string(), "ssh://ana@lab:2222/srv/x");
    }

    #[test]
    fn a_slash_before_the_colon_is_local() {
        for text in ["./a:b", "/srv/a:b", "plain", "dir/sub:x"] {
            assert_eq!(Location::parse(Path::new(text)).unwrap(), Location::Local(PathBuf::from(text)));
        }
    }

    #[test]
    fn s3_url_is_a_bucket_and_prefix() {
        let parsed = Location::parse(Path::new("s3://lib-bucket/collections/main/")).unwrap();
        let expected = ObjectAddress { bucket: "lib-bucket".into(), prefix: "collections/main".into() };
        assert_eq!(parsed, Location::Object(expected.clone()));
        assert_eq!(expected.to_string(), "s3://lib-bucket/collections/main");
        for text in ["s3://B/x", "s3://ab/x", "s3://bucket/a/../b", "s3://bucket/a//b", "s3:///x"] {
            assert!(Location::parse(Path::new(text)).is_err(), "{text} was accepted");
        }
    }

    #[test]
    fn bad_far_locations_are_refused() {
        for text in [":/x", "-oProxyCommand=x:/y", "ssh://host", "ssh://h:port/x", "s3x://b/p", "@h:/x"] {
            assert!(Location::parse(Path::new(text)).is_err(), "{text} was accepted");
        }
    }
}
