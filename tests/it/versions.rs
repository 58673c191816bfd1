//! Collections that remember: versions (`update`, `show`, `export`), withdrawal
//! with tombstones, mirror that only moves forward, and the inventory (verify
//! against it, rebuilt when lost).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::Value;

use crate::env::{bagit_py, sh, TestEnv};

fn first(env: &TestEnv, root: &str) -> String {
    env.ok(&["list", root]).lines()[0].split('\t').next().unwrap().to_string()
}

fn show(env: &TestEnv, root: &str, name: &str) -> Value {
    serde_json::from_str(env.ok(&["--json", "show", root, name]).stdout.trim()).unwrap()
}

fn bagit_valid(path: &Path) -> bool {
    std::process::Command::new(bagit_py()).arg("--validate").arg(path).output().unwrap().status.success()
}

#[test]
fn update_makes_a_new_version_and_keeps_every_earlier_one() {
    let env = TestEnv::new();
    let lib = env.collection("lib");
    let a = env.write("src/a.txt", b"first file\n");
    let b = env.write("src/b.txt", b"second file\n");
    let name = env.ok(&["deposit", &lib, a.to_str().unwrap(), b.to_str().unwrap()]).pairs()[0].0.clone();
    let v1 = show(&env, &lib, &name);
    let added = env.write("errata.txt", b"errata\n");
    let added = format!("{}=notes/errata.txt", added.display());
    let run = env.ok(&["update", &lib, &name, "--meta", "Title=Corrected", "--add", &added, "--remove", "b.txt"]);
    assert!(run.stdout.contains("version 2"), "{}", run.stdout);
    let v2 = show(&env, &lib, &name);
    assert_eq!(
        (v2["version"].as_u64(), v2["status"].as_str(), v2["file_count"].as_u64()),
        (Some(2), Some("present"), Some(2))
    );
    let paths: Vec<&str> = v2["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["data/a.txt", "data/notes/errata.txt"], "show lists the current version's files");
    assert_eq!(v2["versions"][0]["digest"], v1["identity"], "version 1's identity is kept in the history");
    let item = Path::new(&lib).join(&name);
    assert!(fs::read_to_string(item.join("bag-info.txt")).unwrap().contains("Title: Corrected"));
    assert!(!item.join("data/b.txt").exists() && item.join("ibi-versions/1/data/b.txt").exists());
    assert_eq!(fs::metadata(item.join("data/a.txt")).unwrap().nlink(), 2, "unchanged files are shared, not copied");
    env.ok(&["verify", &lib]);
    assert!(bagit_valid(&item), "the current version is a plain bag");
    // Export both versions; each is a standalone bag holding what that version held.
    env.ok(&["export", &lib, &name, env.path("v1").to_str().unwrap(), "--version", "1"]);
    env.ok(&["export", &lib, &name, env.path("v2").to_str().unwrap()]);
    assert!(bagit_valid(&env.path("v1")) && bagit_valid(&env.path("v2")));
    assert_eq!(fs::read(env.path("v1/data/b.txt")).unwrap(), b"second file\n");
    assert_eq!(fs::read(env.path("v2/data/notes/errata.txt")).unwrap(), b"errata\n");
    assert!(!env.path("v2/ibi-versions").exists());
    let run = env.fails(&["export", &lib, &name, env.path("v1").to_str().unwrap()], 2);
    assert!(run.stderr.contains("already exists"), "{}", run.stderr);
    let run = env.fails(&["export", &lib, &name, env.path("v9").to_str().unwrap(), "--version", "9"], 2);
    assert!(run.stderr.contains("versions 1 to 2"), "{}", run.stderr);
    // Damage to an earlier version is found by verify.
    fs::remove_file(item.join("ibi-versions/1/data/b.txt")).unwrap();
    let run = env.fails(&["verify", &lib], 1);
    assert!(run.stdout.contains("ibi-versions/1/data/b.txt"), "{}", run.stdout);
}

#[test]
fn update_refuses_what_makes_no_sense() {
    let env = TestEnv::new();
    let lib = env.filled("lib", 1, 1);
    let name = first(&env, &lib);
    let before = env.identities(&lib);
    for (args, says) in [
        (&[][..], "nothing to change"),
        (&["--meta", "Ibi-Version=7"], "written by ibi"),
        (&["--meta", "External-Identifier=x"], "written by ibi"),
        (&["--remove", "no-such.txt"], "no payload file"),
        (&["--add", "/no/such/file"], "is not a file"),
        (&["--add", "x.txt=../escape.txt"], ".."),
    ] {
        let run = env.fails(&[&["update", &lib, &name][..], args].concat(), 2);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
    }
    assert_eq!(env.identities(&lib), before, "a refused update changes nothing");
}

#[test]
fn withdrawal_is_a_tombstone_that_mirror_carries_and_minting_respects() {
    let env = TestEnv::new();
    let lib = env.filled("lib", 2, 1);
    let dst = env.collection("dst");
    env.ok(&["mirror", &lib, &dst]);
    let name = first(&env, &lib);
    let states = sh(&format!("cat '{lib}/.ibi/minter.state' {}/*.state", crate::env::minter_dir(env.root()).display()));
    env.ok(&["withdraw", &lib, &name, "--reason", "duplicate of another item"]);
    let run = env.fails(&["resolve", &lib, &name], 1);
    assert!(run.stderr.contains("withdrawn") && run.stderr.contains("duplicate of another item"), "{}", run.stderr);
    assert_eq!(env.ok(&["list", &lib]).lines().len(), 1, "list omits withdrawn items");
    let all = env.ok(&["list", &lib, "--withdrawn"]).stdout;
    assert!(all.contains(&format!("{name}\t")) && all.contains("withdrawn"), "{all}");
    assert_eq!(show(&env, &lib, &name)["status"], "withdrawn");
    let item = Path::new(&lib).join(&name);
    assert!(item.join("ibi-versions/1/data").is_dir(), "the bytes are kept out of service");
    env.ok(&["verify", &lib]);
    // The tombstone reaches the mirror as a later version.
    let run = env.ok(&["mirror", &lib, &dst]);
    assert!(run.stderr.contains("replaced 1,"), "{}", run.stderr);
    assert!(env.fails(&["resolve", &dst, &name], 1).stderr.contains("withdrawn"));
    let run = env.fails(&["update", &lib, &name, "--meta", "Title=back"], 1);
    assert!(run.stderr.contains("withdrawn"), "{}", run.stderr);
    // Roll the minter states back to before the withdrawal: the name is still never given again.
    let dir = crate::env::minter_dir(env.root());
    let state = fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let mut lines = states.lines();
    fs::write(format!("{lib}/.ibi/minter.state"), format!("{}\n", lines.next().unwrap())).unwrap();
    fs::write(&state, format!("{}\n", lines.next().unwrap())).unwrap();
    let again = env.write("again.txt", b"new\n");
    let minted = env.ok(&["deposit", &lib, again.to_str().unwrap()]).pairs()[0].0.clone();
    assert!(minted > name, "{minted} after the withdrawn {name}");
    // Purge: the tombstone stays, the bytes go.
    let other = first(&env, &dst);
    assert_ne!(other, name, "list omits the withdrawn item in DST too");
    env.ok(&["withdraw", &dst, &other, "--reason", "court order", "--purge"]);
    let gone = Path::new(&dst).join(&other);
    assert!(!gone.join("ibi-versions").exists() && fs::read_dir(gone.join("data")).unwrap().next().is_none());
    env.ok(&["verify", &dst]);
    assert!(bagit_valid(&gone));
}

#[test]
fn mirror_fast_forwards_and_refuses_divergence() {
    let env = TestEnv::new();
    let a = env.filled("a", 3, 1);
    let b = env.collection("b");
    env.ok(&["mirror", &a, &b]);
    let name = first(&env, &a);
    env.ok(&["update", &a, &name, "--meta", "Title=Second"]);
    let run = env.ok(&["mirror", &a, &b]);
    assert!(run.stderr.contains("replaced 1,") && run.stderr.contains("skipped 2,"), "{}", run.stderr);
    assert_eq!(show(&env, &b, &name)["versions"], show(&env, &a, &name)["versions"], "history is replicated");
    env.ok(&["verify", &b]);
    // B ahead of A: a conflict, B untouched.
    env.ok(&["update", &b, &name, "--meta", "Title=Third in B"]);
    let before = env.identities(&b);
    let run = env.fails(&["mirror", &a, &b], 1);
    assert!(run.stdout.contains("DST is ahead"), "{}", run.stdout);
    assert_eq!(env.identities(&b), before);
    // Diverged: each made its own version 3.
    env.ok(&["update", &a, &name, "--meta", "Title=Third in A"]);
    let run = env.fails(&["mirror", &a, &b], 1);
    assert!(run.stdout.contains("diverged"), "{}", run.stdout);
    assert_eq!(env.identities(&b), before);
    assert!(run.stderr.contains("conflicts 1,"), "{}", run.stderr);
}

#[test]
fn verify_compares_the_collection_with_its_inventory() {
    let env = TestEnv::new();
    let lib = env.filled("lib", 2, 1);
    let other = env.filled("other", 1, 1);
    let stranger = first(&env, &other);
    // An item placed behind ibi's back.
    let from = Path::new(&other).join(&stranger);
    let to = Path::new(&lib).join(&stranger);
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    sh(&format!("cp -a '{}' '{}'", from.display(), to.display()));
    let run = env.fails(&["verify", &lib], 1);
    assert!(run.stdout.contains(&stranger) && run.stdout.contains("unknown item"), "{}", run.stdout);
    fs::remove_dir_all(&to).unwrap();
    // An item gone, alias and all: the inventory still knows it.
    let name = first(&env, &lib);
    fs::remove_dir_all(Path::new(&lib).join(&name)).unwrap();
    sh(&format!("find '{lib}/.ibip' -type l -delete"));
    let run = env.fails(&["verify", &lib], 1);
    assert!(run.stdout.contains(&name) && run.stdout.contains("missing"), "{}", run.stdout);
}

#[test]
fn a_lost_inventory_is_rebuilt_from_the_bags() {
    let env = TestEnv::new();
    let lib = env.filled("lib", 3, 1);
    let name = first(&env, &lib);
    env.ok(&["update", &lib, &name, "--meta", "Title=Second"]);
    let expected = show(&env, &lib, &name);
    let listed = env.ok(&["list", &lib]).stdout;
    sh(&format!("rm -f '{lib}'/.ibi/inventory.sqlite*"));
    // Read-only commands walk the bags meanwhile; the next write rebuilds the inventory.
    assert_eq!(env.ok(&["list", &lib]).stdout, listed);
    env.ok(&["verify", &lib]);
    let extra = env.write("extra.txt", b"extra\n");
    env.ok(&["-q", "deposit", &lib, extra.to_str().unwrap()]);
    assert!(Path::new(&lib).join(".ibi/inventory.sqlite").is_file());
    assert_eq!(env.ok(&["list", &lib]).lines().len(), 4);
    assert_eq!(show(&env, &lib, &name)["versions"], expected["versions"]);
    env.ok(&["verify", &lib]);
}

#[test]
fn a_name_migrated_away_is_never_minted_again() {
    let env = TestEnv::new();
    let a = env.collection("a");
    let b = env.collection("b");
    let file = env.write("f.txt", b"f\n");
    let name = env.ok(&["deposit", &a, file.to_str().unwrap()]).pairs()[0].0.clone();
    env.ok(&["-q", "migrate", &a, &b]);
    assert_eq!(env.ok(&["list", &a]).lines().len(), 0);
    // Lose every minter state A has; its inventory still remembers the name it held.
    sh(&format!("rm -f '{a}/.ibi/minter.state' {}/*.state", crate::env::minter_dir(env.root()).display()));
    let shown = show(&env, &b, &name);
    let at = shown["versions"][0]["date"].as_str().unwrap().to_string();
    let minted = env.ok(&["mint", "-C", &a, "--at", &at]).stdout;
    let minted = minted.split('\t').next().unwrap().trim();
    assert!(minted > name.as_str(), "after losing its state, A mints {minted}, not again {name}");
}

/// A tombstone in SRC whose earlier versions are gone (`withdraw --purge`, or a
/// history written by hand) listed DST's identity as an earlier version, so mirror
/// replaced DST's item with it and the only remaining copy of those bytes was
/// destroyed, exit 0. Such a replacement is now a conflict, and DST keeps its copy.
#[test]
fn regress_purged_tombstone_drops_dsts_only_copy() {
    let env = TestEnv::new();
    let a = env.filled("a", 1, 1);
    let b = env.collection("b");
    env.ok(&["-q", "mirror", &a, &b]);
    let name = env.ok(&["list", &a]).pairs()[0].0.clone();
    let data = std::path::Path::new(&b).join(&name).join("data/f0.txt");
    let bytes = std::fs::read(&data).unwrap();
    env.ok(&["-q", "withdraw", &a, &name, "--reason", "taken down", "--purge"]);
    let run = env.fails(&["mirror", &a, &b], 1);
    assert!(
        run.stdout.contains("drop a version only DST holds") || run.stderr.contains("drop a version only DST holds"),
        "{run:?}"
    );
    assert_eq!(std::fs::read(&data).unwrap(), bytes, "DST's only copy of the bytes was destroyed");
    // A withdrawal that keeps the bytes as an earlier version still goes forward.
    let c = env.filled("c", 1, 1);
    let d = env.collection("d");
    env.ok(&["-q", "mirror", &c, &d]);
    let kept = env.ok(&["list", &c]).pairs()[0].0.clone();
    env.ok(&["-q", "withdraw", &c, &kept, "--reason", "taken down"]);
    env.ok(&["-q", "mirror", &c, &d]);
    assert!(env.run(&["list", &d]).stdout.is_empty(), "the withdrawal reached DST");
    env.ok(&["-q", "verify", &d]);
}

/// A truncated, non-SQLite or zero-byte inventory made commands exit 1 with
/// SQLite's words ("file is not a database", "no such table"), as if data were
/// damaged. It is corrupt state: exit 3, saying what to do.
#[test]
fn regress_damaged_inventory_exits_1_with_sqlites_words() {
    let env = TestEnv::new();
    let lib = env.filled("lib", 2, 1);
    let inventory = Path::new(&lib).join(".ibi/inventory.sqlite");
    let whole = fs::read(&inventory).unwrap();
    for (what, bytes) in [
        ("empty", Vec::new()),
        ("not sqlite", b"not a database at all".repeat(50)),
        ("truncated", whole[..100].to_vec()),
    ] {
        sh(&format!("rm -f '{lib}'/.ibi/inventory.sqlite*"));
        fs::write(&inventory, &bytes).unwrap();
        for args in [vec!["list", &lib], vec!["verify", &lib]] {
            let run = env.fails(&args, 3);
            assert!(
                run.stderr.contains("move it aside") && run.stderr.contains("rebuilds"),
                "{what} {args:?}: {}",
                run.stderr
            );
        }
    }
    // Moved aside, as the message says: the next write rebuilds it.
    fs::rename(&inventory, inventory.with_extension("sqlite.damaged")).unwrap();
    let extra = env.write("extra.txt", b"extra\n");
    env.ok(&["-q", "deposit", &lib, extra.to_str().unwrap()]);
    assert_eq!(env.ok(&["list", &lib]).lines().len(), 3);
    env.ok(&["-q", "verify", &lib]);
}

/// `show` gave a count of the item's files and never named them (JSON: a number):
/// it lists each payload file with its size, text and JSON.
#[test]
fn regress_show_counts_files_without_naming_them() {
    let env = TestEnv::new();
    let lib = env.collection("lib");
    env.write("src/a.txt", b"alpha\n");
    env.write("src/sub/b.txt", b"beta!\n");
    let name = env.ok(&["deposit", &lib, "src"]).pairs()[0].0.clone();
    let text = env.ok(&["show", &lib, &name]).stdout;
    assert!(text.contains("data/a.txt") && text.contains("data/sub/b.txt"), "{text}");
    let json = show(&env, &lib, &name);
    let files: Vec<(String, u64)> = json["files"]
        .as_array()
        .unwrap_or_else(|| panic!("files is a list: {json}"))
        .iter()
        .map(|f| (f["path"].as_str().unwrap().to_string(), f["size"].as_u64().unwrap()))
        .collect();
    assert_eq!(files, [("data/a.txt".to_string(), 6), ("data/sub/b.txt".to_string(), 6)]);
}

/// `update` dropped the empty folders of the version it replaced, silently: the
/// new version is a different tree from the one the depositor made. They are now
/// kept; a folder that this update's removals leave empty goes.
#[test]
fn regress_update_drops_empty_folders() {
    let env = TestEnv::new();
    let lib = env.collection("lib");
    env.write("src/full/a.txt", b"a\n");
    env.write("src/gone/b.txt", b"b\n");
    fs::create_dir_all(env.path("src/empty/deeper")).unwrap();
    env.ok(&["-q", "deposit", &lib, env.path("src").to_str().unwrap()]);
    let name = first(&env, &lib);
    let item = Path::new(&lib).join(&name);
    assert!(item.join("data/empty/deeper").is_dir(), "the deposit keeps empty folders");
    env.ok(&["-q", "update", &lib, &name, "--meta", "Title=second", "--remove", "gone/b.txt"]);
    assert!(item.join("data/empty/deeper").is_dir(), "the new version keeps the empty folders");
    assert!(!item.join("data/gone").exists(), "a folder the update emptied goes");
    assert!(item.join("ibi-versions/1/data/empty/deeper").is_dir());
    assert!(bagit_valid(&item));
    env.ok(&["verify", &lib]);
}
