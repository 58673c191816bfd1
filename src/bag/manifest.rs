//! BagIt manifests (RFC 8493 §2.1.3 and §2.2.1): lines of `<hex digest>  <path>`
//! with `%`, CR and LF percent-encoded in paths, as the RFC requires. (bagit-python
//! 1.9 encodes only CR and LF and never decodes `%25`, so it cannot validate an
//! item whose file names hold `%`; deposit warns about each such name.) Reading
//! decodes `%25`, `%0D` and `%0A` and leaves any other `%` as written. This module
//! owns reading and writing manifests and the path-safety rules: no absolute
//! paths, no `..`, no empty components, no backslashes, no NUL. Paths are compared
//! in NFC.

use unicode_normalization::UnicodeNormalization;

/// One manifest line: a lower-case hex digest and a decoded relative path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestEntry {
    pub digest: String,
    pub path: String,
}

/// A problem found on one manifest line (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineProblem {
    pub line: usize,
    /// The line names a path that would leave the bag (otherwise it is malformed).
    pub unsafe_path: bool,
    pub path: Option<String>,
    pub problem: String,
}

/// Percent-encodes `%`, CR and LF (RFC 8493 §2.1.3).
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            '%' => out.push_str("%25"),
            '\r' => out.push_str("%0D"),
            '\n' => out.push_str("%0A"),
            c => out.push(c),
        }
    }
    out
}

/// Reverses `encode_path` (hex digits in either case); other `%` sequences stay as written.
pub fn decode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 3).map(str::to_ascii_uppercase);
        match code.as_deref() {
            Some("25") => out.push('%'),
            Some("0D") => out.push('\r'),
            Some("0A") => out.push('\n'),
            _ => {
                out.push('%');
                rest = &rest[i + 1..];
                continue;
            }
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    out
}

/// How a writer that never encodes `%` (bagit-python) would have written the path
/// `decoded` was read from: a foreign bag's file may be named either way.
pub fn unencoded_alternative(decoded: &str) -> Option<String> {
    decoded.contains('%').then(|| decoded.replace('%', "%25"))
}

/// Checks that a manifest path stays inside the bag; `Err` says why not.
pub fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("empty path".into());
    }
    if path.starts_with('/') {
        return Err("absolute path".into());
    }
    if path.contains('\\') {
        return Err("backslash in path".into());
    }
    if path.contains('\0') {
        return Err("NUL in path".into());
    }
    for component in path.split('/') {
        match component {
            "" => return Err("empty path component".into()),
            ".." => return Err("\"..\" in path".into()),
            "." => return Err("\".\" component in path".into()),
            _ => {}
        }
    }
    Ok(())
}

/// The NFC form used to compare file names. ASCII text is already in NFC (no
/// ASCII character decomposes or composes), so it is copied as it is.
pub fn nfc(path: &str) -> String {
    if path.is_ascii() {
        return path.to_string();
    }
    path.nfc().collect()
}

/// The path of a manifest line, after its digest and one separator: the rest with
/// further blanks trimmed, md5sum's binary-mode marker (`digest *path`, one space)
/// dropped, and leading `./` components dropped (they stay inside the bag; bagit.py
/// reads them so).
fn manifest_path(rest: &str) -> String {
    let mut path = match rest.strip_prefix('*') {
        Some(binary) => binary,
        None => rest.trim_start_matches([' ', '\t']),
    };
    while let Some(inner) = path.strip_prefix("./") {
        path = inner;
    }
    path.to_string()
}

fn is_hex_digest(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Parses a manifest whose digests have `digest_len` hex digits. Unsafe or malformed
/// lines become problems; the other entries are still returned.
pub fn parse(text: &str, digest_len: usize) -> (Vec<ManifestEntry>, Vec<LineProblem>) {
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            continue;
        }
        let problem =
            |path: Option<String>, problem: String| LineProblem { line: i + 1, unsafe_path: false, path, problem };
        let Some((digest, rest)) = line.split_once([' ', '\t']) else {
            problems.push(problem(None, "expected \"<digest> <path>\"".into()));
            continue;
        };
        let path = decode_path(&manifest_path(rest));
        if !is_hex_digest(digest, digest_len) {
            problems.push(problem(Some(path), format!("\"{digest}\" is not a {digest_len}-digit hex digest")));
            continue;
        }
        match check_path(&path) {
            Ok(()) => entries.push(ManifestEntry { digest: digest.to_ascii_lowercase(), path }),
            Err(why) => {
                problems.push(LineProblem { unsafe_path: true, ..problem(Some(path), format!("unsafe path: {why}")) })
            }
        }
    }
    (entries, problems)
}

/// Formats entries as a manifest, sorted by path, `sha256sum`-compatible (two spaces).
pub fn format(entries: &[ManifestEntry]) -> String {
    let mut sorted: Vec<&ManifestEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    sorted.iter().map(|e| format!("{}  {}\n", e.digest, encode_path(&e.path))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn md5sum_binary_marks_and_dot_slash_prefixes_are_read_as_the_path() {
        let digest = "d41d8cd98f00b204e9800998ecf8427e";
        let text = format!("{digest} *data/a\n{digest}  ./data/b\n{digest}  *data/literal\n");
        let (entries, problems) = parse(&text, 32);
        assert!(problems.is_empty(), "{problems:?}");
        let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["data/a", "data/b", "*data/literal"]);
    }

    #[test]
    fn hostile_paths_are_refused() {
        let hex = "a".repeat(64);
        let text = ["../../etc/passwd", "/etc/passwd", "data/../../x", "data//x", "data\\x", "data/./x", "data/ok"]
            .iter()
            .map(|p| format!("{hex}  {p}\n"))
            .collect::<String>();
        let (entries, problems) = parse(&text, 64);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].path, "data/ok");
        assert_eq!(problems.len(), 6);
        assert!(problems.iter().all(|p| p.unsafe_path && p.problem.starts_with("unsafe path")));
    }

    #[test]
    fn percent_encoding_of_the_three_characters() {
        assert_eq!(encode_path("data/100%\r\n x"), "data/100%25%0D%0A x");
        assert_eq!(encode_path("data/100% pure"), "data/100%25 pure");
        assert_eq!(encode_path("data/%0A-%41-%2"), "data/%250A-%2541-%252");
        assert_eq!(unencoded_alternative("data/My%Report"), Some("data/My%25Report".into()));
        assert_eq!(decode_path("data/%250A-%2541-%2"), "data/%0A-%41-%2");
        assert_eq!(decode_path("data/100%25%0d%0A x"), "data/100%\r\n x");
        assert_eq!(decode_path("data/%41"), "data/%41");
    }

    #[test]
    fn bad_digests_and_lines() {
        let (e, p) = parse("xyz data/a\nnot-a-line\n", 64);
        assert!(e.is_empty());
        assert_eq!(p.len(), 2);
    }

    proptest! {

        /// The ASCII shortcut gives what full normalisation gives.
        #[test]
        fn nfc_of_ascii_is_the_full_normal_form(path in "[ -~]{0,40}") {
            prop_assert_eq!(nfc(&path), path.nfc().collect::<String>());
        }
        #[test]
        fn encode_round_trips(path in "\\PC*[%\r\n]?\\PC*") {
            prop_assert_eq!(decode_path(&encode_path(&path)), path);
        }

        #[test]
        fn format_then_parse(paths in proptest::collection::btree_set("[a-z%\n\r é]{1,8}(/[a-z%\n é]{1,8}){0,2}", 1..10)) {
            let entries: Vec<ManifestEntry> = paths.iter().map(|p| ManifestEntry { digest: "0".repeat(64), path: format!("data/{p}") }).collect();
            let (parsed, problems) = parse(&format(&entries), 64);
            prop_assert!(problems.is_empty());
            prop_assert_eq!(parsed, entries);
        }
    }
}
