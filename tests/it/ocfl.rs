//! OCFL copies (`export --ocfl`), judged by ocfl-py's `ocfl-validate.py` (by
//! its exit code and its VALID line, never by `ocfl-object.py`, which exits 0
//! on an invalid object) and read back with ocfl-py's own extraction.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::crash::{full_run_ms, run_and_kill, Dice};
use crate::env::{repo, TestEnv};

/// The names `ibi list ROOT` prints, in its order.
fn listed_names(env: &TestEnv, root: &str) -> Vec<String> {
    env.ok(&["list", root]).stdout.lines().map(|l| l.split('\t').next().unwrap().to_string()).collect()
}

fn venv(tool: &str) -> PathBuf {
    repo().join("target/bagit-venv/bin").join(tool)
}

/// `ocfl-validate.py` on `path`: whether it exited 0 with no error line, and what it said.
fn validates(path: &Path) -> (bool, String) {
    let out = std::process::Command::new(venv("ocfl-validate.py")).arg(path).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success() && !said.contains("[E"), said)
}

/// A storage root ibi wrote, judged by both validators: `ocfl-validate.py`
/// and rocfl 1.7's `validate` (exit 0, "Invalid objects: 0"), each asserted.
pub fn assert_root_valid(root: &Path) {
    let (valid, said) = validates(root);
    assert!(valid, "ocfl-validate.py: {said}");
    let rocfl = repo().join("target/rocfl/bin/rocfl");
    let out = std::process::Command::new(rocfl).arg("-r").arg(root).arg("validate").output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.contains("Invalid objects: 0") && !said.contains("[E"), "rocfl: {said}");
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
    assert_root_valid(&root);
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
    assert!(inv["versions"]["v1"]["user"]["name"].as_str().is_some_and(|n| n.starts_with("ibi at ")), "{inv}");
    let log = std::fs::read_to_string(object.join("logs/premis.xml")).unwrap();
    assert!(log.matches("<premis:eventType>").count() >= 3 && log.contains(&name), "the item's events: {log}");

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
    let names = listed_names(&env, &c);
    env.ok(&["-q", "withdraw", &c, &names[0], "--reason", "court order", "--purge"]);
    let root = env.path("ocfl");
    let purged = env.fails(&["export", &c, &names[0], root.to_str().unwrap(), "--ocfl"], 2);
    assert!(purged.stderr.contains("purged") && purged.stderr.contains("OCFL 1.1"), "{}", purged.stderr);
    let other = env.write("not-ocfl/file.txt", b"x");
    let taken = env.fails(&["export", &c, &names[1], other.parent().unwrap().to_str().unwrap(), "--ocfl"], 2);
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
        assert_root_valid(&root);
        assert_eq!(inventory(&the_object(&root))["head"], "v4", "round {round}");
        assert!(!root.join("extensions/ibi-staging").exists(), "round {round}: staging left behind");
    }
    assert!(killed > 0, "no run was killed");
}

/// An OCFL object built in code, as a tool other than ibi would write it:
/// each version a list of (logical path, bytes), content stored once under
/// the version that first held it, `algorithm` sha512 or sha256.
struct Built {
    dir: PathBuf,
    inventory: Value,
    algorithm: &'static str,
}

fn digest(algorithm: &str, bytes: &[u8]) -> String {
    use sha2::Digest;
    match algorithm {
        "sha512" => hex::encode(sha2::Sha512::digest(bytes)),
        _ => hex::encode(sha2::Sha256::digest(bytes)),
    }
}

fn build_object(dir: &Path, id: &str, algorithm: &'static str, versions: &[Vec<(&str, &[u8])>]) -> Built {
    let mut manifest = serde_json::Map::new();
    let mut version_blocks = serde_json::Map::new();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("0=ocfl_object_1.1"), "ocfl_object_1.1\n").unwrap();
    for (i, files) in versions.iter().enumerate() {
        let v = format!("v{}", i + 1);
        let mut state = serde_json::Map::new();
        for (logical, bytes) in files {
            let d = digest(algorithm, bytes);
            if !manifest.contains_key(&d) {
                let content = format!("{v}/content/{logical}");
                let path = dir.join(&content);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, bytes).unwrap();
                manifest.insert(d.clone(), serde_json::json!([content]));
            }
            let paths = state.entry(d).or_insert_with(|| serde_json::json!([]));
            paths.as_array_mut().unwrap().push(serde_json::json!(logical));
        }
        let created = format!("2025-01-0{}T10:00:00Z", i + 1);
        version_blocks.insert(
            v.clone(),
            serde_json::json!({"created": created, "message": format!("version {}", i + 1),
            "user": {"name": "Someone Else", "address": "mailto:someone@example.org"}, "state": state}),
        );
        let inventory = serde_json::json!({"id": id, "type": "https://ocfl.io/1.1/spec/#inventory",
            "digestAlgorithm": algorithm, "head": v, "contentDirectory": "content", "manifest": manifest,
            "versions": version_blocks});
        write_inventory(&dir.join(&v), &inventory, algorithm);
    }
    let built = Built { dir: dir.to_path_buf(), inventory: Value::Null, algorithm };
    let last = format!("v{}", versions.len());
    let inventory: Value =
        serde_json::from_slice(&std::fs::read(dir.join(&last).join("inventory.json")).unwrap()).unwrap();
    write_inventory(dir, &inventory, algorithm);
    Built { inventory, ..built }
}

fn write_inventory(dir: &Path, inventory: &Value, algorithm: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let bytes = serde_json::to_vec_pretty(inventory).unwrap();
    std::fs::write(dir.join("inventory.json"), &bytes).unwrap();
    std::fs::write(
        dir.join(format!("inventory.json.{algorithm}")),
        format!("{} inventory.json\n", digest(algorithm, &bytes)),
    )
    .unwrap();
}

impl Built {
    /// Rewrites the root inventory after `change` (its sidecar kept right).
    fn edit(&self, change: impl FnOnce(&mut Value)) {
        let mut inventory = self.inventory.clone();
        change(&mut inventory);
        write_inventory(&self.dir, &inventory, self.algorithm);
    }
}

/// A change that makes an object invalid.
type Spoil = Box<dyn Fn(&Built)>;

/// Three versions of another tool's object: a file changed, one added, one
/// removed, a Fedora-like `.fcrepo/` header among them.
fn three_versions() -> Vec<Vec<(&'static str, &'static [u8])>> {
    vec![
        vec![
            ("a.txt", b"first\n" as &[u8]),
            ("b.txt", b"bee\n"),
            (".fcrepo/fcr-root.json", b"{\"id\":\"info:fedora/x\"}\n"),
        ],
        vec![
            ("a.txt", b"second\n"),
            ("b.txt", b"bee\n"),
            ("sub/c.txt", b"sea\n"),
            (".fcrepo/fcr-root.json", b"{\"id\":\"info:fedora/x\"}\n"),
        ],
        vec![
            ("a.txt", b"second\n"),
            ("sub/c.txt", b"sea\n"),
            (".fcrepo/fcr-root.json", b"{\"id\":\"info:fedora/x\"}\n"),
        ],
    ]
}

/// Objects of other tools (sha512 and sha256, three versions each) are
/// deposited with every version: each ibi version's payload is the OCFL
/// version's state, the OCFL id and version in bag-info, a sha512 object's
/// digests kept in a sha512 manifest; a rerun adds nothing; a bad object is
/// named with its OCFL code and skipped (exit 1), never half taken; a mutable
/// HEAD is refused, naming the extension.
#[test]
fn objects_of_other_tools_are_deposited_with_every_version_and_bad_ones_named() {
    let env = TestEnv::new();
    let c = env.collection("c");
    let root = env.path("objects");
    for algorithm in ["sha512", "sha256"] {
        let built =
            build_object(&root.join(algorithm), &format!("info:fedora/{algorithm}"), algorithm, &three_versions());
        let (valid, said) = validates(&built.dir);
        assert!(valid, "the test's own object is valid: {said}");
    }
    let run = env.ok(&[
        "deposit",
        &c,
        "--ocfl",
        root.join("sha512").to_str().unwrap(),
        root.join("sha256").to_str().unwrap(),
    ]);
    assert_eq!(run.stdout.matches("deposited v1, v2, v3").count(), 2, "{}", run.stdout);
    let names: Vec<String> = run.stdout.lines().map(|l| l.split('\t').next().unwrap().to_string()).collect();
    for (name, algorithm) in names.iter().zip(["sha512", "sha256"]) {
        let item = Path::new(&c).join(name);
        let mut payload = crate::env::sh(&format!("cd '{}' && find data -type f | sort", item.display()));
        payload = payload.trim().to_string();
        assert_eq!(payload, "data/.fcrepo/fcr-root.json\ndata/a.txt\ndata/sub/c.txt", "{algorithm}");
        assert_eq!(std::fs::read(item.join("data/a.txt")).unwrap(), b"second\n");
        let info = std::fs::read_to_string(item.join("bag-info.txt")).unwrap();
        assert!(
            info.contains(&format!("Ocfl-Object-Id: info:fedora/{algorithm}")) && info.contains("Ocfl-Version: v3"),
            "{info}"
        );
        assert_eq!(item.join("manifest-sha512.txt").exists(), algorithm == "sha512", "{algorithm}");
        let earlier = std::fs::read(item.join("ibi-versions/1/data/a.txt")).unwrap();
        assert_eq!(earlier, b"first\n");
    }
    env.ok(&["-q", "verify", &c]);
    let objects = [root.join("sha512"), root.join("sha256")];
    let again = env.ok(&["deposit", &c, "--ocfl", objects[0].to_str().unwrap(), objects[1].to_str().unwrap()]);
    assert_eq!(again.stdout.matches("deposited nothing new").count(), 2, "a rerun continues: {}", again.stdout);
    let not_ocfl = env.fails(&["deposit", &c, "--ocfl", root.to_str().unwrap()], 2);
    assert!(not_ocfl.stderr.contains("neither an OCFL storage root"), "{}", not_ocfl.stderr);

    let bad = env.path("bad");
    let cases: Vec<(&str, Spoil)> = vec![
        (
            "E060",
            Box::new(|b: &Built| std::fs::write(b.dir.join("inventory.json.sha512"), "00 inventory.json\n").unwrap()),
        ),
        ("E040", Box::new(|b: &Built| b.edit(|i| i["head"] = "v2".into()))),
        (
            "E010|E046",
            Box::new(|b: &Built| {
                b.edit(|i| {
                    let v3 = i["versions"]["v3"].take();
                    i["versions"].as_object_mut().unwrap().remove("v3");
                    i["versions"]["v4"] = v3;
                    i["head"] = "v4".into();
                })
            }),
        ),
        (
            "E050a",
            Box::new(|b: &Built| {
                b.edit(|i| {
                    let state = i["versions"]["v1"]["state"].as_object_mut().unwrap();
                    state.insert("ab".repeat(64), serde_json::json!(["ghost.txt"]));
                })
            }),
        ),
        ("E092a", Box::new(|b: &Built| std::fs::write(b.dir.join("v1/content/b.txt"), b"changed\n").unwrap())),
        ("E092b", Box::new(|b: &Built| std::fs::remove_file(b.dir.join("v1/content/b.txt")).unwrap())),
        ("E034", Box::new(|b: &Built| std::fs::remove_file(b.dir.join("inventory.json")).unwrap())),
        (
            "0005-mutable-head",
            Box::new(|b: &Built| std::fs::create_dir_all(b.dir.join("extensions/0005-mutable-head/head")).unwrap()),
        ),
    ];
    let before = env.ok(&["list", &c]).stdout;
    for (code, spoil) in &cases {
        let label = code.replace('|', "-");
        let built = build_object(&bad.join(&label), &format!("info:fedora/bad-{label}"), "sha512", &three_versions());
        spoil(&built);
        let refused = env.fails(&["deposit", &c, "--ocfl", built.dir.to_str().unwrap()], 1);
        let named = code.split('|').any(|one| refused.stdout.contains(&format!("{one}: ")));
        assert!(named, "{code}: {}", refused.stdout);
        if !code.starts_with("0005") {
            let (valid, said) = validates(&built.dir);
            assert!(!valid, "ocfl-py agrees {code} is invalid: {said}");
        }
    }
    assert_eq!(env.ok(&["list", &c]).stdout, before, "nothing of a bad object was taken");

    // In one batch with sound objects, a first version whose content fails its
    // digest (found only as the deposit stages it) is refused with its code and
    // the others are taken.
    let mixed = env.path("mixed");
    let dirs: Vec<String> = ["good-1", "bad", "good-2"]
        .iter()
        .map(|label| {
            let built = build_object(&mixed.join(label), &format!("info:fedora/{label}"), "sha256", &three_versions());
            if *label == "bad" {
                std::fs::write(built.dir.join("v1/content/a.txt"), b"rotten\n").unwrap();
            }
            built.dir.to_string_lossy().into_owned()
        })
        .collect();
    let mut args = vec!["deposit", c.as_str(), "--ocfl"];
    args.extend(dirs.iter().map(String::as_str));
    let run = env.fails(&args, 1);
    assert_eq!(run.stdout.matches("deposited v1, v2, v3").count(), 2, "{}", run.stdout);
    assert!(run.stdout.contains("E092a: ") && run.stdout.contains("bad"), "{}", run.stdout);
    assert_eq!(env.ok(&["list", &c]).stdout.lines().count(), before.lines().count() + 2);
}

/// Items with several versions, a withdrawal and a `--bag` deposit with md5
/// and sha512 manifests go to OCFL and come back into a new collection of the
/// same subsystem under their own names: every version's identity digest and
/// the witness root are the same; a second import holds them already.
#[test]
fn items_come_back_from_ocfl_with_every_identity_and_the_same_witness_root() {
    let env = TestEnv::new();
    let c = env.filled("c", 3, 2);
    let names = listed_names(&env, &c);
    env.ok(&["-q", "update", &c, &names[0], "--meta", "Round=2"]);
    env.ok(&["-q", "withdraw", &c, &names[1], "--reason", "a test"]);
    let bag = env.write("bag/x.txt", b"x\n").parent().unwrap().to_path_buf();
    let made =
        std::process::Command::new(crate::env::bagit_py()).args(["--md5", "--sha512"]).arg(&bag).output().unwrap();
    assert!(made.status.success(), "bagit-python made the bag: {}", String::from_utf8_lossy(&made.stderr));
    env.ok(&["-q", "deposit", &c, "--bag", bag.to_str().unwrap()]);
    let all = listed_names(&env, &c);
    let root = env.path("ocfl");
    for name in &all {
        env.ok(&["-q", "export", &c, name, root.to_str().unwrap(), "--ocfl"]);
    }
    assert_root_valid(&root);
    // The bag's md5 and sha512 manifests, in the fixity block of its object.
    let bagged = all.iter().find(|n| !names.contains(n)).unwrap();
    let object = root.join(ibi::ops::ocfl::object_path(&format!("http://urlib.net/{bagged}")));
    let fixity = &inventory(&object)["fixity"];
    let md5 = hex::encode(<md5::Md5 as sha2::Digest>::digest(b"x\n"));
    assert_eq!(fixity["md5"][&md5], serde_json::json!(["v1/content/data/x.txt"]), "{fixity}");
    assert!(fixity["sha512"].as_object().is_some_and(|b| b.len() == 1), "{fixity}");
    let d = env.path("d").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &d, "--like", &c]);
    let run = env.ok(&["deposit", &d, "--ocfl", root.to_str().unwrap()]);
    assert_eq!(run.stdout.matches("copied back with every version").count(), all.len(), "{}", run.stdout);
    for name in &all {
        let shown =
            |root: &str| -> Value { serde_json::from_str(&env.ok(&["--json", "show", root, name]).stdout).unwrap() };
        assert_eq!(shown(&c)["versions"], shown(&d)["versions"], "{name}: every version's identity");
    }
    env.ok(&["-q", "verify", &c]);
    env.ok(&["-q", "verify", &d]);
    let root_of = |r: &str| -> Value { serde_json::from_str(&env.ok(&["witness", r]).stdout).unwrap() };
    assert_eq!(root_of(&c)["root"], root_of(&d)["root"], "the same witness root");
    let again = env.ok(&["deposit", &d, "--ocfl", root.to_str().unwrap()]);
    assert_eq!(again.stdout.matches("already held").count(), all.len(), "{}", again.stdout);
}

/// `deposit --ocfl` killed (SIGKILL) at random moments, then run again: each
/// object ends as exactly one item holding every version, never two.
#[test]
fn an_ocfl_import_killed_at_random_moments_takes_each_object_once() {
    let env = TestEnv::new();
    let mut dice = Dice::new();
    let objects: Vec<PathBuf> = (0..4)
        .map(|i| {
            build_object(&env.path(&format!("objects/o{i}")), &format!("info:fedora/o{i}"), "sha512", &three_versions())
                .dir
        })
        .collect();
    let paths: Vec<&str> = objects.iter().map(|p| p.to_str().unwrap()).collect();
    let probe = env.collection("probe");
    let mut args = vec!["deposit", &probe, "--ocfl"];
    args.extend(&paths);
    let full = full_run_ms(&env, &args);
    let mut killed = 0;
    for round in 0..6 {
        let c = env.own_subsystem(&format!("c{round}"));
        let mut args = vec!["deposit", c.as_str(), "--ocfl"];
        args.extend(&paths);
        killed += run_and_kill(&env, &args, Duration::from_millis(dice.below(full + 5))) as usize;
        env.ok(&args);
        let listed = env.ok(&["list", &c]).stdout;
        assert_eq!(listed.lines().count(), objects.len(), "round {round}: one item per object: {listed}");
        for line in listed.lines() {
            let name = line.split('\t').next().unwrap();
            let shown: Value = serde_json::from_str(&env.ok(&["--json", "show", &c, name]).stdout).unwrap();
            assert_eq!(shown["version"], 3, "round {round}: {name} holds every version");
        }
        env.ok(&["-q", "verify", &c]);
    }
    assert!(killed > 0, "no run was killed");
}

/// An OCFL site (`site add ROOT ocfl:PATH`) is kept by `replicate`
/// incrementally: new items make objects, a new version appends one OCFL
/// version, an unchanged item writes nothing; the root stays valid. `audit`
/// counts its copies (from the objects' inventories), `verify ocfl:PATH`
/// finds a content file changed behind ibi's back, and what OCFL 1.1 cannot
/// hold (a purged item) is named as that item's problem (exit 1).
#[test]
fn an_ocfl_site_is_replicated_incrementally_audited_and_verified() {
    let env = TestEnv::new();
    let c = env.filled("c", 4, 2);
    let names = listed_names(&env, &c);
    let root = env.path("ocfl-site");
    let site = format!("ocfl:{}", root.display());
    env.ok(&["-q", "site", "add", &c, &site, "--zone", "vault"]);
    env.ok(&["-q", "site", "policy", &c, "--copies", "2"]);
    let first = env.ok(&["replicate", &c]);
    assert!(first.stderr.contains("copied 4, replaced 0, skipped 0"), "{}", first.stderr);
    assert_root_valid(&root);
    let again = env.ok(&["replicate", &c]);
    assert!(again.stderr.contains("copied 0, replaced 0, skipped 4"), "{}", again.stderr);
    env.ok(&["-q", "update", &c, &names[0], "--meta", "Round=2"]);
    env.ok(&["-q", "withdraw", &c, &names[1], "--reason", "a test"]);
    let more = env.ok(&["replicate", &c]);
    assert!(more.stderr.contains("copied 0, replaced 2, skipped 2"), "{}", more.stderr);
    assert_root_valid(&root);
    assert_eq!(env.ok(&["list", &site]).stdout.lines().count(), 4);

    let audit = env.ok(&["audit", &c]);
    assert!(
        audit.stdout.is_empty() && audit.stderr.contains(&format!("{site} (zone vault, disk): 3 held")),
        "{}",
        audit.stderr
    );

    env.ok(&["-q", "withdraw", &c, &names[2], "--reason", "court order", "--purge"]);
    let purged = env.fails(&["replicate", &c], 1);
    assert!(purged.stdout.contains(&names[2]) && purged.stdout.contains("purged"), "{}", purged.stdout);

    env.ok(&["-q", "verify", &site]);
    let object = root.join(ibi::ops::ocfl::object_path(&format!("http://urlib.net/{}", names[3])));
    let content = crate::env::sh(&format!("find '{}' -path '*content/data/*' -type f | head -n 1", object.display()));
    std::fs::write(content.trim(), b"changed behind ibi's back\n").unwrap();
    let damaged = env.fails(&["verify", &site], 1);
    assert!(damaged.stdout.contains(&names[3]), "{}", damaged.stdout);
}

/// `replicate` to an OCFL site killed (SIGKILL) at random moments, then run
/// again: the root validates and each object holds every version of its item.
#[test]
fn an_ocfl_replicate_killed_at_random_moments_completes_on_rerun() {
    let env = TestEnv::new();
    let c = env.filled("c", 12, 8);
    let names = listed_names(&env, &c);
    for name in names.iter().step_by(3) {
        env.ok(&["-q", "update", &c, name, "--meta", "Round=2"]);
    }
    let mut dice = Dice::new();
    let probe = env.path("probe");
    env.ok(&["-q", "site", "add", &c, &format!("ocfl:{}", probe.display()), "--zone", "z"]);
    let full = full_run_ms(&env, &["replicate", &c]);
    env.ok(&["-q", "site", "remove", &c, &format!("ocfl:{}", probe.display())]);
    let mut killed = 0;
    for round in 0..6 {
        let root = env.path(&format!("ocfl-{round}"));
        let site = format!("ocfl:{}", root.display());
        env.ok(&["-q", "site", "add", &c, &site, "--zone", "z"]);
        killed += run_and_kill(&env, &["replicate", &c], Duration::from_millis(dice.below(full + 5))) as usize;
        env.ok(&["-q", "replicate", &c]);
        assert_root_valid(&root);
        for (i, name) in names.iter().enumerate() {
            let object = root.join(ibi::ops::ocfl::object_path(&format!("http://urlib.net/{name}")));
            let head = if i % 3 == 0 { "v2" } else { "v1" };
            assert_eq!(inventory(&object)["head"], head, "round {round}: {name}");
        }
        env.ok(&["-q", "site", "remove", &c, &site]);
    }
    assert!(killed > 0, "no run was killed");
}

/// Adds a mutable HEAD (extension 0005-mutable-head, as Fedora 6 keeps
/// uncommitted changes) to `built`: version N+1 whose new content is in the
/// extension's `head/content/r2/`, revision markers r1 and r2, and a copy of
/// the root inventory's sidecar.
fn add_mutable_head(built: &Built, files: &[(&str, &[u8])]) {
    let ext = built.dir.join("extensions/0005-mutable-head");
    let algorithm = built.algorithm;
    let sidecar = format!("inventory.json.{algorithm}");
    std::fs::create_dir_all(ext.join("revisions")).unwrap();
    for r in ["r1", "r2"] {
        std::fs::write(ext.join("revisions").join(r), r).unwrap();
    }
    std::fs::copy(built.dir.join(&sidecar), ext.join(format!("root-{sidecar}"))).unwrap();
    let mut inventory = built.inventory.clone();
    let head = inventory["head"].as_str().unwrap().trim_start_matches('v').parse::<u32>().unwrap() + 1;
    let mut state = serde_json::Map::new();
    for (logical, bytes) in files {
        let d = digest(algorithm, bytes);
        if inventory["manifest"].get(&d).is_none() {
            let content = format!("extensions/0005-mutable-head/head/content/r2/{logical}");
            let path = built.dir.join(&content);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, bytes).unwrap();
            inventory["manifest"][&d] = serde_json::json!([content]);
        }
        state
            .entry(d)
            .or_insert_with(|| serde_json::json!([]))
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!(logical));
    }
    inventory["head"] = serde_json::json!(format!("v{head}"));
    inventory["versions"][format!("v{head}")] =
        serde_json::json!({"created": "2025-02-01T10:00:00Z", "message": "uncommitted", "state": state});
    write_inventory(&ext.join("head"), &inventory, algorithm);
}

/// An object with a mutable HEAD is refused by default, naming the
/// extension; with `--take-mutable-head` its head becomes the item's last
/// version, marked uncommitted with its revision in bag-info; a HEAD made
/// on another root inventory (a version conflict), or whose content does
/// not have its digest, is refused.
#[test]
fn a_mutable_head_is_refused_or_taken_as_a_marked_last_version() {
    let env = TestEnv::new();
    let c = env.collection("c");
    let two = &three_versions()[..2];
    let head: &[(&str, &[u8])] = &[("a.txt", b"third, not committed\n"), (".fcrepo/fcr-root.json", b"{}\n")];
    let built = build_object(&env.path("fedora"), "info:fedora/mutable", "sha512", two);
    add_mutable_head(&built, head);
    let object = built.dir.to_str().unwrap();
    let refused = env.fails(&["deposit", &c, "--ocfl", object], 1);
    assert!(
        refused.stdout.contains("0005-mutable-head") && refused.stdout.contains("--take-mutable-head"),
        "{}",
        refused.stdout
    );
    assert!(env.ok(&["list", &c]).stdout.is_empty(), "nothing taken");

    let taken = env.ok(&["deposit", &c, "--ocfl", "--take-mutable-head", object]);
    assert!(taken.stdout.contains("deposited v1, v2, v3"), "{}", taken.stdout);
    let name = taken.stdout.split('\t').next().unwrap();
    let item = Path::new(&c).join(name);
    assert_eq!(std::fs::read(item.join("data/a.txt")).unwrap(), b"third, not committed\n");
    assert!(!item.join("data/b.txt").exists() && item.join("ibi-versions/2/data/b.txt").exists());
    let info = std::fs::read_to_string(item.join("bag-info.txt")).unwrap();
    assert!(
        info.contains("Ocfl-Version: v3") && info.contains("Ocfl-Mutable-Head: uncommitted, revision r2"),
        "{info}"
    );
    let earlier = std::fs::read_to_string(item.join("ibi-versions/2/bag-info.txt")).unwrap();
    assert!(!earlier.contains("Ocfl-Mutable-Head"), "{earlier}");
    env.ok(&["-q", "verify", &c]);
    // The resolver forwards the object's OCFL id to the item it became.
    let server = crate::serve::Server::start(env.command(&["serve", &c, "--listen", "127.0.0.1:0"]));
    let by_id = crate::serve::get(&server.url("/.well-known/ibi/ocfl/info:fedora%2Fmutable"), &[]);
    assert_eq!((by_id.status, by_id.header("location")), (303, format!("/{name}").as_str()));
    let unknown = crate::serve::get(&server.url("/.well-known/ibi/ocfl/info:fedora%2Fnever"), &[]);
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    drop(server);

    let conflict = build_object(&env.path("conflict"), "info:fedora/conflict", "sha512", two);
    add_mutable_head(&conflict, head);
    std::fs::write(conflict.dir.join("extensions/0005-mutable-head/root-inventory.json.sha512"), "0 inventory.json\n")
        .unwrap();
    let out = env.fails(&["deposit", &c, "--ocfl", "--take-mutable-head", conflict.dir.to_str().unwrap()], 1);
    assert!(out.stdout.contains("version conflict"), "{}", out.stdout);
    let rotten = build_object(&env.path("rotten"), "info:fedora/rotten", "sha512", two);
    add_mutable_head(&rotten, head);
    std::fs::write(rotten.dir.join("extensions/0005-mutable-head/head/content/r2/a.txt"), b"changed\n").unwrap();
    let out = env.fails(&["deposit", &c, "--ocfl", "--take-mutable-head", rotten.dir.to_str().unwrap()], 1);
    assert!(out.stdout.contains("E093"), "{}", out.stdout);
    assert_eq!(env.ok(&["list", &c]).stdout.lines().count(), 1, "only the sound object taken");
}

/// An OCFL site on a far machine (`ocfl:HOST:PATH`, through the `IBI_RSH`
/// shim): made by `site add`, replicated incrementally, judged by both
/// validators on the far side's folder, read back by `verify` and `audit`;
/// `replicate` killed (SIGKILL) at random moments completes on rerun; a
/// read-only key writes nothing there, and a step that names a path outside
/// the root is refused by the server.
#[test]
fn an_ocfl_site_on_a_far_machine_is_replicated_killed_and_completed() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "", None);
    let c = env.filled("c", 5, 2);
    let names = listed_names(&env, &c);
    env.ok(&["-q", "update", &c, &names[0], "--meta", "Round=2"]);
    let root = env.path("far-ocfl");
    let site = format!("ocfl:lab:{}", root.display());
    env.far_ok(&rsh, &["-q", "site", "add", &c, &site, "--zone", "far"]);
    let started = std::time::Instant::now();
    let first = env.far_ok(&rsh, &["replicate", &c]);
    let full_ms = started.elapsed().as_millis() as u64;
    assert!(first.stderr.contains("copied 5, replaced 0, skipped 0"), "{}", first.stderr);
    assert_root_valid(&root);
    let again = env.far_ok(&rsh, &["replicate", &c]);
    assert!(again.stderr.contains("copied 0, replaced 0, skipped 5"), "{}", again.stderr);
    env.ok(&["-q", "update", &c, &names[1], "--meta", "Round=2"]);
    let more = env.far_ok(&rsh, &["replicate", &c]);
    assert!(more.stderr.contains("copied 0, replaced 1, skipped 4"), "{}", more.stderr);
    assert_root_valid(&root);
    assert_eq!(env.far_ok(&rsh, &["list", &site]).stdout.lines().count(), 5);
    env.far_ok(&rsh, &["-q", "verify", &site]);
    let audit = env.far_ok(&rsh, &["audit", &c]);
    assert!(audit.stderr.contains(&format!("{site} (zone far")) && audit.stderr.contains("5 held"), "{}", audit.stderr);

    let read_only = env.shim("ro", "", Some(&format!("{} serve --stdio --read-only", crate::env::ibi_bin().display())));
    env.ok(&["-q", "update", &c, &names[2], "--meta", "Round=2"]);
    let refused = env.far_run(&read_only, &["replicate", &c]);
    assert_ne!(refused.code, 0, "a read-only key wrote: {}", refused.stderr);
    assert!(refused.stderr.contains("read-only"), "{}", refused.stderr);
    assert_root_valid(&root);

    let mut dice = Dice::new();
    let mut killed = 0;
    for round in 0..4 {
        let root = env.path(&format!("far-kill-{round}"));
        let site = format!("ocfl:lab:{}", root.display());
        env.far_ok(&rsh, &["-q", "site", "add", &c, &site, "--zone", "z"]);
        let mut child = env
            .far_command(&rsh, &["-q", "replicate", &c])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(dice.below(full_ms)));
        if child.try_wait().unwrap().is_none() {
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            killed += 1;
        }
        let _ = child.wait();
        env.far_ok(&rsh, &["-q", "replicate", &c]);
        assert_root_valid(&root);
        for (i, name) in names.iter().enumerate() {
            let object = root.join(ibi::ops::ocfl::object_path(&format!("http://urlib.net/{name}")));
            let head = if i < 3 { "v2" } else { "v1" };
            assert_eq!(inventory(&object)["head"], head, "round {round}: {name}");
        }
        env.far_ok(&rsh, &["-q", "site", "remove", &c, &site]);
    }
    assert!(killed > 0, "no run was killed");
}

/// An OCFL site keeps the dates of its checks (`verify ocfl:PATH`) as lines
/// signed by the collection's witness key on this machine: `verify --age` of
/// the site then finds every copy checked within the cycle; a line whose date
/// was moved, or one written for an item never checked, counts as never
/// checked; and a machine without the key trusts none of them.
#[test]
fn an_ocfl_sites_fixity_dates_are_signed_and_forgeries_count_for_nothing() {
    let env = TestEnv::new();
    let c = env.filled("c", 3, 1);
    env.ok(&["-q", "verify", &c]);
    let root = env.path("ocfl-site");
    let site = format!("ocfl:{}", root.display());
    env.ok(&["-q", "site", "add", &c, &site, "--zone", "vault"]);
    env.ok(&["-q", "replicate", &c]);
    let never = env.fails(&["verify", &site, "--age", "--cycle", "90"], 1);
    assert_eq!(never.stdout.matches("never checked").count(), 3, "{}", never.stdout);
    env.ok(&["-q", "verify", &site]);
    env.ok(&["-q", "verify", &site, "--age", "--cycle", "90"]);

    let files: Vec<_> = std::fs::read_dir(root.join("extensions/ibi-site/checks")).unwrap().flatten().collect();
    assert_eq!(files.len(), 1, "one batch, one file");
    let file = files[0].path();
    let lines: Vec<String> = std::fs::read_to_string(&file).unwrap().lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    let mut moved: Vec<String> = lines[0].split('\t').map(str::to_string).collect();
    moved[1] = "2099-01-01T00:00:00Z".into();
    let forged = [moved.join("\t"), lines[1].clone(), lines[2].clone()].join("\n") + "\n";
    std::fs::write(&file, forged).unwrap();
    let found = env.fails(&["verify", &site, "--age", "--cycle", "90"], 1);
    let name = lines[0].split('\t').next().unwrap();
    assert!(found.stdout.contains(name) && found.stdout.contains("never checked"), "{}", found.stdout);
    assert_eq!(found.stdout.lines().count(), 1, "only the forged line: {}", found.stdout);
    // A line added for the item, dated a minute on but signed by no key of this
    // machine's, stands over the true one and counts as never checked too.
    let now = (chrono::Utc::now() + chrono::Duration::seconds(60)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut added: Vec<String> = lines[1].split('\t').map(str::to_string).collect();
    added[1] = now;
    std::fs::write(root.join("extensions/ibi-site/checks/99-added.tsv"), added.join("\t") + "\n").unwrap();
    let found = env.fails(&["verify", &site, "--age", "--cycle", "90"], 1);
    assert_eq!(found.stdout.matches("never checked").count(), 2, "{}", found.stdout);

    let elsewhere = env.path("another-machine-keys");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let run: crate::env::Run = env
        .command(&["verify", &site, "--age", "--cycle", "90"])
        .env("IBI_KEY_DIR", &elsewhere)
        .output()
        .unwrap()
        .into();
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.stdout.matches("never checked").count(), 3, "no key here, no check trusted: {}", run.stdout);
}

/// Each verify of an OCFL site keeps its checks in a file of their own, and
/// past 64 files they are merged into one, each item's newest check kept.
#[test]
fn an_ocfl_sites_check_files_are_merged_and_keep_the_newest() {
    let env = TestEnv::new();
    let c = env.filled("c", 2, 1);
    let root = env.path("ocfl-site");
    let site = format!("ocfl:{}", root.display());
    env.ok(&["-q", "site", "add", &c, &site, "--zone", "vault"]);
    env.ok(&["-q", "replicate", &c]);
    let count = || std::fs::read_dir(root.join("extensions/ibi-site/checks")).unwrap().count();
    for run in 1..=70 {
        env.ok(&["-q", "verify", &site]);
        assert!(count() <= 65, "run {run}: {} files", count());
    }
    assert!(count() < 10, "merged: {} files", count());
    let lines: usize = std::fs::read_dir(root.join("extensions/ibi-site/checks"))
        .unwrap()
        .flatten()
        .map(|f| std::fs::read_to_string(f.path()).unwrap().lines().count())
        .sum();
    assert!(lines < 20, "the merge kept each item's newest, not every line: {lines}");
    env.ok(&["-q", "verify", &site, "--age", "--cycle", "90"]);
}

/// An OCFL object, or a storage root, given to a plain `deposit` was stored
/// as opaque files, its versions, digests and id lost to ibi: it is refused,
/// naming `--ocfl`, and nothing is deposited.
#[test]
fn regress_ocfl_object_deposited_as_opaque_files() {
    let env = TestEnv::new();
    let c = env.collection("c");
    let built = build_object(&env.path("objects/one"), "info:fedora/one", "sha512", &three_versions());
    let refused = env.run(&["deposit", &c, built.dir.to_str().unwrap()]);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(refused.stderr.contains("OCFL object") && refused.stderr.contains("--ocfl"), "{}", refused.stderr);
    let root = env.path("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("0=ocfl_1.1"), "ocfl_1.1\n").unwrap();
    let refused = env.run(&["deposit", "--each", &c, root.to_str().unwrap()]);
    assert!(refused.code != 0 && refused.stderr.contains("OCFL storage root"), "{}", refused.stderr);
    assert!(env.ok(&["list", &c]).stdout.is_empty(), "nothing deposited");
}

/// Nothing in ibi wrote an OCFL inventory (ocfl-py's `--srcbag` import of an
/// ibi export built an invalid object, E037a): `export --ocfl` writes an item
/// with every version as an object both validators take.
#[test]
fn regress_ibi_export_makes_no_valid_ocfl_object() {
    let env = TestEnv::new();
    let c = env.filled("c", 1, 2);
    let name = listed_names(&env, &c).remove(0);
    env.ok(&["-q", "update", &c, &name, "--meta", "Round=2"]);
    let root = env.path("ocfl");
    env.ok(&["-q", "export", &c, &name, root.to_str().unwrap(), "--ocfl"]);
    assert_root_valid(&root);
    assert_eq!(inventory(&the_object(&root))["head"], "v2");
}
