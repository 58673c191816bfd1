//! OCFL copies (`export --ocfl`), judged by ocfl-py's `ocfl-validate.py` (by
//! its exit code and its VALID line, never by `ocfl-object.py`, which exits 0
//! on an invalid object) and read back with ocfl-py's own extraction.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::crash::{full_run_ms, run_and_kill, Dice};
use crate::env::{repo, TestEnv};

fn venv(tool: &str) -> PathBuf {
    repo().join("target/bagit-venv/bin").join(tool)
}

/// `ocfl-validate.py` on `path`: whether it exited 0 with no error line, and what it said.
fn validates(path: &Path) -> (bool, String) {
    let out = std::process::Command::new(venv("ocfl-validate.py")).arg(path).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success() && !said.contains("[E"), said)
}

/// The one object under an OCFL storage root (the folder holding `0=ocfl_object_1.1`).
fn the_object(root: &Path) -> PathBuf {
    let found = crate::env::sh(&format!("find '{}' -name '0=ocfl_object_1.1'", root.display()));
    let lines: Vec<&str> = found.lines().collect();
    assert_eq!(lines.len(), 1, "{found}");
    Path::new(lines[0]).parent().unwrap().to_path_buf()
}

fn inventory(object: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(object.join("inventory.json")).unwrap()).unwrap()
}

/// The digest version `v` holds for the logical path `path`.
fn digest_at(inventory: &Value, v: u64, path: &str) -> Option<String> {
    let state = inventory["versions"][format!("v{v}")]["state"].as_object()?;
    state.iter().find(|(_, paths)| paths.as_array().unwrap().iter().any(|p| p == path)).map(|(d, _)| d.clone())
}

/// An item with three versions (a deposit, an update, a withdrawal) exports as
/// one valid object: version N's state is the whole bag at version N, the
/// digest of its `tagmanifest-sha256.txt` is the item's identity at N, an
/// unchanged file is stored once, a version extracted by ocfl-py is the bag
/// `ibi export --version N` writes, and a second export adds only what is new.
#[test]
fn an_item_exports_to_ocfl_with_every_version_and_validates() {
    let env = TestEnv::new();
    let c = env.filled("c", 1, 3);
    let name = env.ok(&["list", &c]).stdout.split('\t').next().unwrap().to_string();
    env.ok(&["-q", "update", &c, &name, "--meta", "Round=2"]);
    env.ok(&["-q", "withdraw", &c, &name, "--reason", "a test"]);
    let root = env.path("ocfl");
    let out = env.ok(&["export", &c, &name, root.to_str().unwrap(), "--ocfl"]);
    assert!(out.stderr.contains("added v1, v2, v3"), "{}", out.stderr);
    let (valid, said) = validates(&root);
    assert!(valid, "{said}");
    let object = the_object(&root);
    let (valid, said) = validates(&object);
    assert!(valid && said.contains("is VALID"), "{said}");
    let inv = inventory(&object);
    assert_eq!(inv["id"], format!("http://urlib.net/{name}"));
    assert_eq!(inv["head"], "v3");
    let shown: Value = serde_json::from_str(&env.ok(&["--json", "show", &c, &name]).stdout).unwrap();
    for version in shown["versions"].as_array().unwrap() {
        let n = version["number"].as_u64().unwrap();
        assert_eq!(digest_at(&inv, n, "tagmanifest-sha256.txt").as_deref(), version["digest"].as_str(), "v{n}");
        assert!(digest_at(&inv, n, "ibi-versions/1/bagit.txt").is_none(), "never ibi-versions/");
    }
    let stored: usize = inv["manifest"].as_object().unwrap().values().map(|p| p.as_array().unwrap().len()).sum();
    let held: usize = (1..=3).map(|v| inv["versions"][format!("v{v}")]["state"].as_object().unwrap().len()).sum();
    assert!(stored < held, "unchanged files are stored once: {stored} stored for {held} held");

    let extracted = env.path("v1-by-ocfl-py");
    let run = std::process::Command::new(venv("ocfl-object.py"))
        .args(["extract", "--objver", "v1", "--objdir"])
        .arg(&object)
        .arg("--dstdir")
        .arg(&extracted)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let by_ibi = env.path("v1-by-ibi");
    env.ok(&["-q", "export", &c, &name, by_ibi.to_str().unwrap(), "--version", "1"]);
    let diff = crate::env::sh(&format!("diff -r '{}' '{}' && echo same", extracted.display(), by_ibi.display()));
    assert!(diff.contains("same"), "{diff}");

    let again = env.ok(&["export", &c, &name, root.to_str().unwrap(), "--ocfl"]);
    assert!(again.stderr.contains("already holds every version (v3)"), "{}", again.stderr);
    assert!(!root.join("extensions/ibi-staging").exists(), "no staging left behind");
}

/// OCFL 1.1 has no purge: a version whose bytes were purged cannot be an
/// OCFL version, so the item is refused, naming why; a path holding a tab
/// (which rocfl refuses, E092) is refused too; and a folder that is neither
/// empty nor an OCFL root is never written into.
#[test]
fn what_ocfl_cannot_hold_is_refused_and_named() {
    let env = TestEnv::new();
    let c = env.filled("c", 2, 1);
    let listed = env.ok(&["list", &c]).stdout;
    let names: Vec<&str> = listed.lines().map(|l| l.split('\t').next().unwrap()).collect();
    env.ok(&["-q", "withdraw", &c, names[0], "--reason", "court order", "--purge"]);
    let root = env.path("ocfl");
    let purged = env.fails(&["export", &c, names[0], root.to_str().unwrap(), "--ocfl"], 2);
    assert!(purged.stderr.contains("purged") && purged.stderr.contains("OCFL 1.1"), "{}", purged.stderr);
    let other = env.write("not-ocfl/file.txt", b"x");
    let taken = env.fails(&["export", &c, names[1], other.parent().unwrap().to_str().unwrap(), "--ocfl"], 2);
    assert!(taken.stderr.contains("neither an OCFL storage root nor empty"), "{}", taken.stderr);

    env.write("tabbed/a\tb.txt", b"tab\n");
    env.ok(&["-q", "deposit", &c, env.path("tabbed").to_str().unwrap()]);
    let tabbed = env.ok(&["list", &c]).stdout.lines().last().unwrap().split('\t').next().unwrap().to_string();
    let refused = env.fails(&["export", &c, &tabbed, root.to_str().unwrap(), "--ocfl"], 2);
    assert!(refused.stderr.contains("E092"), "{}", refused.stderr);
}

/// `export --ocfl` killed (SIGKILL) at random moments, then run again: the
/// object ends valid with every version, and nothing is left staged.
#[test]
fn an_ocfl_export_killed_at_random_moments_completes_on_rerun() {
    let env = TestEnv::new();
    let c = env.filled("c", 1, 60);
    let name = env.ok(&["list", &c]).stdout.split('\t').next().unwrap().to_string();
    for round in 2..=4 {
        env.ok(&["-q", "update", &c, &name, "--meta", &format!("Round={round}")]);
    }
    let mut dice = Dice::new();
    let probe = env.path("probe");
    let full = full_run_ms(&env, &["export", &c, &name, probe.to_str().unwrap(), "--ocfl"]);
    let mut killed = 0;
    for round in 0..12 {
        let root = env.path(&format!("ocfl-{round}"));
        let args = ["export", &c, &name, root.to_str().unwrap(), "--ocfl"];
        killed += run_and_kill(&env, &args, Duration::from_millis(dice.below(full + 5))) as usize;
        env.ok(&args);
        let (valid, said) = validates(&root);
        assert!(valid, "round {round}: {said}");
        assert_eq!(inventory(&the_object(&root))["head"], "v4", "round {round}");
        assert!(!root.join("extensions/ibi-staging").exists(), "round {round}: staging left behind");
    }
    assert!(killed > 0, "no run was killed");
}
