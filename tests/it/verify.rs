//! `ibi verify` against the damage fixtures in `fixtures/bags/`: each kind of
//! damage is reported exactly, hostile manifests never lead outside the item,
//! and nothing panics.

use std::collections::BTreeSet;

use crate::env::{bagit_py, repo, sh, TestEnv};

/// Copies a fixture collection (keeping its symlinks) into the temp dir.
fn fixture(env: &TestEnv, kind: &str) -> String {
    let src = repo().join("fixtures/bags").join(kind);
    let dest = env.path(kind);
    sh(&format!("cp -a '{}' '{}'", src.display(), dest.display()));
    dest.to_string_lossy().into_owned()
}

/// (kind, file) of every problem `verify --json` reports, and the exit code.
fn problems(env: &TestEnv, root: &str) -> (i32, BTreeSet<(String, String)>) {
    let run = env.run(&["--json", "verify", root]);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    let mut found = BTreeSet::new();
    for line in run.stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["event"] == "problem" {
            let file = v["file"].as_str().unwrap_or("").to_string();
            found.insert((v["kind"].as_str().unwrap().to_string(), file));
        }
    }
    (run.code, found)
}

fn expect(kind: &str, expected: &[(&str, &str)]) {
    let env = TestEnv::new();
    let root = fixture(&env, kind);
    let (code, found) = problems(&env, &root);
    let expected: BTreeSet<(String, String)> = expected.iter().map(|(k, f)| (k.to_string(), f.to_string())).collect();
    assert_eq!(found, expected, "fixture {kind}");
    assert_eq!(code, if expected.is_empty() { 0 } else { 1 }, "fixture {kind}");
}

#[test]
fn good_fixture_verifies_with_ibi_and_bagit_python() {
    expect("good", &[]);
    let env = TestEnv::new();
    let root = fixture(&env, "good");
    let item = env.ok(&["list", &root]).stdout.split('\t').next().unwrap().to_string();
    let out =
        std::process::Command::new(bagit_py()).arg("--validate").arg(env.path("good").join(item)).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn flipped_byte() {
    expect("flipped-byte", &[("digest mismatch", "data/a.txt")]);
}

#[test]
fn truncated_file() {
    expect("truncated", &[("digest mismatch", "data/sub/b.txt"), ("oxum mismatch", "bag-info.txt")]);
}

#[test]
fn missing_file() {
    expect("missing-file", &[("missing", "data/c d.txt"), ("oxum mismatch", "bag-info.txt")]);
}

#[test]
fn extra_file() {
    expect("extra-file", &[("extra", "data/extra.txt"), ("oxum mismatch", "bag-info.txt")]);
}

#[test]
fn edited_manifest() {
    expect("edited-manifest", &[("bad tag file", "manifest-sha256.txt"), ("digest mismatch", "data/a.txt")]);
}

#[test]
fn edited_bag_info() {
    expect("edited-bag-info", &[("bad tag file", "bag-info.txt")]);
}

#[test]
fn deleted_alias() {
    expect("deleted-alias", &[("broken alias", "")]);
}

#[test]
fn alias_pointing_elsewhere() {
    expect("alias-elsewhere", &[("broken alias", "")]);
}

/// An alias folder (`.ibip/<PREFIX>`) moved out of the collection and replaced
/// by a symlink to it: verify read each alias link through it (`read_link` of
/// the whole path), so links outside the collection answered for its items and
/// it exited 0. The folder is now reached beneath the root without links: each
/// item's alias is reported broken, naming the link.
#[test]
fn regress_an_alias_read_through_a_symlinked_folder() {
    let env = TestEnv::new();
    let root = env.filled("lib", 2, 1);
    env.ok(&["verify", &root]);
    let aliases = std::path::Path::new(&root).join(".ibip");
    let prefix = std::fs::read_dir(&aliases).unwrap().next().unwrap().unwrap().path();
    let outside = env.path("outside-aliases");
    std::fs::rename(&prefix, &outside).unwrap();
    std::os::unix::fs::symlink(&outside, &prefix).unwrap();
    let (code, found) = problems(&env, &root);
    assert_eq!(code, 1, "{found:?}");
    assert_eq!(found, [("broken alias".to_string(), String::new())].into(), "{found:?}");
    let run = env.fails(&["verify", &root], 1);
    assert_eq!(run.stdout.matches("broken alias").count(), 2, "{}", run.stdout);
}

/// The search for dangling aliases skips the links the items' checks found right;
/// it must still read every other one. Here an alias of an item this collection
/// never held (as a lost item leaves it) sits among three right ones.
#[test]
fn an_alias_of_a_lost_item_is_found_among_right_ones() {
    let env = TestEnv::new();
    let root = env.filled("lib", 3, 1);
    let elsewhere = env.filled("elsewhere", 1, 1);
    let listed = env.ok(&["list", &elsewhere]).stdout;
    let (name, ibip) = listed.trim().split_once('\t').unwrap();
    let link = std::path::Path::new(&root).join(".ibip").join(ibip);
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(format!("../../{name}"), &link).unwrap();
    let run = env.fails(&["verify", &root], 1);
    assert!(run.stdout.contains(&format!("alias {ibip} names this item")), "{}", run.stdout);
    let (_, found) = problems(&env, &root);
    assert_eq!(found, [("missing".to_string(), String::new())].into(), "only the lost item: {found:?}");
}

#[test]
fn hostile_manifest_paths_are_reported_not_followed() {
    expect(
        "hostile-manifest",
        &[("unsafe path", "../../etc/passwd"), ("unsafe path", "/etc/passwd"), ("unsafe path", "data/../../x")],
    );
}

#[test]
fn symlink_inside_data_is_never_followed() {
    // Had verify followed data/evil, the manifest's digest of /etc/passwd would match
    // and only the special-file problem would show; "missing" proves it was not read.
    expect("symlink-outside", &[("special file", "data/evil"), ("missing", "data/evil")]);
}

#[test]
fn verify_by_name_and_ibip_and_text_output() {
    let env = TestEnv::new();
    let root = fixture(&env, "flipped-byte");
    let listed = env.ok(&["list", &root]).stdout;
    let (name, ibip) = listed.trim().split_once('\t').unwrap();
    for id in [name.to_uppercase(), ibip.to_lowercase()] {
        let run = env.fails(&["verify", &root, &id], 1);
        assert!(run.stdout.contains("digest mismatch") && run.stdout.contains("data/a.txt"), "{}", run.stdout);
    }
}

/// The names a `verify --json` run checked, from its item events.
fn checked_names(run: &crate::env::Run) -> BTreeSet<String> {
    run.stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["event"] == "item")
        .map(|event| event["name"].as_str().unwrap().to_string())
        .collect()
}

/// Rolling fixity (issue 24): three runs of `verify --budget` a third of the
/// collection's bytes check every item exactly once, oldest check first; a
/// damaged item is found by the run whose turn it is; `verify --age` proves the
/// cycle (exit 0) or names the items outside it (exit 1).
#[test]
fn rolling_verify_checks_every_item_once_per_cycle() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    rolling_rounds(&env, &root, &|args| env.run(args));
}

/// The same over a far session: the far server keeps the dates of its own
/// checks, and the client plans its runs from them.
#[test]
fn rolling_verify_over_a_far_session_uses_the_far_servers_dates() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    let rsh = env.shim("rsh", "", None);
    let far = |args: &[&str]| {
        let args: Vec<String> =
            args.iter().map(|a| if *a == root { format!("lab:{root}") } else { a.to_string() }).collect();
        env.far_run(&rsh, &args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    rolling_rounds(&env, &root, &far);
    let fixity = env.log(&root).into_iter().filter(|e| e["type"] == "fixity").count();
    assert_eq!(fixity, 10, "the far server logged each of its own checks once");
}

fn rolling_rounds(env: &TestEnv, root: &str, ibi: &dyn Fn(&[&str]) -> crate::env::Run) {
    for i in 0..9 {
        env.write(&format!("src/{i}/f.bin"), &vec![i as u8; 100_000]);
        env.ok(&["-q", "deposit", root, env.path(&format!("src/{i}")).to_str().unwrap()]);
    }
    let never = ibi(&["verify", root, "--age"]);
    assert_eq!((never.code, never.stdout.matches("never checked").count()), (1, 9), "{}", never.stdout);
    let all: BTreeSet<String> = env.identities(root).into_keys().collect();
    let names: Vec<String> = all.iter().cloned().collect();
    // The last third's first item is damaged before any run: its turn is the third.
    let damaged = std::path::Path::new(root).join(&names[6]).join("data/f.bin");
    let total: u64 = 9 * 100_000;
    let budget = format!("{}", total / 3 - 1);
    let mut seen = BTreeSet::new();
    for round in 0..3 {
        if round == 2 {
            std::fs::write(&damaged, vec![9u8; 100_000]).unwrap();
        }
        let run = ibi(&["--json", "verify", root, "--budget", &budget]);
        let checked = checked_names(&run);
        assert_eq!(checked.len(), 3, "round {round}: {checked:?} {}", run.stderr);
        assert!(seen.is_disjoint(&checked), "round {round} checked an item again: {checked:?}");
        let expected: BTreeSet<String> = names[round * 3..round * 3 + 3].iter().cloned().collect();
        assert_eq!(checked, expected, "round {round} takes the items never checked, in name order");
        assert_eq!(run.code, if round == 2 { 1 } else { 0 }, "round {round}: {}", run.stdout);
        seen.extend(checked);
    }
    assert_eq!(seen, all, "three rounds checked every item");
    let stale = ibi(&["verify", root, "--age", "--cycle", "30"]);
    assert_eq!(stale.code, 1);
    assert!(stale.stdout.contains(&names[6]) && stale.stdout.contains("damaged"), "{}", stale.stdout);
    assert_eq!(stale.stdout.matches("stale fixity").count(), 1, "{}", stale.stdout);
    // The damaged item goes first in the next run.
    let next = ibi(&["--json", "verify", root, "--budget", "1"]);
    assert_eq!(checked_names(&next), [names[6].clone()].into_iter().collect());
}

/// Rewrites an item's payload and every manifest so that the bag agrees with
/// itself: a swap that no manifest check can see.
fn swap_item(item: &std::path::Path) {
    std::fs::write(item.join("data/f.bin"), b"another bag\n").unwrap();
    let sha = |path: &std::path::Path| ibi::fsx::hash_file(path).unwrap().0;
    let manifest = format!("{}  data/f.bin\n", sha(&item.join("data/f.bin")));
    std::fs::write(item.join("manifest-sha256.txt"), manifest).unwrap();
    let _ = std::fs::remove_file(item.join("manifest-sha512.txt"));
    let tags: String = ["bag-info.txt", "bagit.txt", "manifest-sha256.txt"]
        .iter()
        .map(|n| format!("{}  {n}\n", sha(&item.join(n))))
        .collect();
    std::fs::write(item.join("tagmanifest-sha256.txt"), tags).unwrap();
}

/// The witness (issue 24): a whole verify makes a signed Merkle root over every
/// item's identity; the Python script in tests/ recomputes it from `ibi list
/// --json` and checks proofs with hashlib alone; `ibi witness --check` checks them
/// and their signature; an item swapped for a bag that agrees with itself changes
/// the root, and its old proof no longer matches.
#[test]
fn the_witness_is_recomputed_and_proved_by_a_third_party() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    for i in 0..5 {
        env.write(&format!("src/{i}/f.bin"), format!("item {i}\n").as_bytes());
        env.ok(&["-q", "deposit", &root, env.path(&format!("src/{i}")).to_str().unwrap()]);
    }
    env.fails(&["witness", &root], 2);
    env.ok(&["-q", "verify", &root]);
    let witness = env.write("witness.json", env.ok(&["witness", &root]).stdout.as_bytes());
    let listed = env.write("list.jsonl", env.ok(&["--json", "list", &root]).stdout.as_bytes());
    let script = repo().join("tests/witness_check.py");
    let python_code = |args: &[&std::path::Path]| {
        let mut command = std::process::Command::new(repo().join("target/bagit-venv/bin/python"));
        command.arg(&script).args(args);
        command.output().unwrap().status.code()
    };
    let python = |args: &[&std::path::Path]| python_code(args) == Some(0);
    assert!(python(&[std::path::Path::new("root"), &witness, &listed]), "python recomputes the root");
    let key: serde_json::Value = serde_json::from_slice(&std::fs::read(&witness).unwrap()).unwrap();
    let key = key["public_key"].as_str().unwrap().to_string();
    let wrong_key = "ab".repeat(32);
    assert!(python(&[std::path::Path::new("root"), &witness, &listed, std::path::Path::new(&key)]));
    assert!(!python(&[std::path::Path::new("root"), &witness, &listed, std::path::Path::new(&wrong_key)]));
    assert_eq!(python_code(&[std::path::Path::new("prooff"), &witness]), Some(2), "an unknown word is refused");
    let names: Vec<String> = env.identities(&root).into_keys().collect();
    for name in &names {
        let proof = env.write(
            &format!("proof-{}.json", name.replace('/', "_")),
            env.ok(&["witness", &root, "--prove", name]).stdout.as_bytes(),
        );
        assert!(python(&[std::path::Path::new("proof"), &proof]), "python checks the proof of {name}");
        env.ok(&["witness", "--check", proof.to_str().unwrap()]);
    }
    let server = env.serve(&[&root], &[]);
    let published = crate::serve::get(&server.url("/.well-known/ibi/witness"), &[]);
    let published: serde_json::Value = serde_json::from_slice(&published.body).unwrap();
    let kept: serde_json::Value = serde_json::from_slice(&std::fs::read(&witness).unwrap()).unwrap();
    assert_eq!(published, kept, "serve publishes the latest witness");
    let served = crate::serve::get(&server.url(&format!("/.well-known/ibi/witness/{}", names[0])), &[]);
    assert_eq!(served.status, 200);
    let served_proof = env.write("served-proof.json", &served.body);
    env.ok(&["witness", "--check", served_proof.to_str().unwrap()]);
    assert_eq!(crate::serve::get(&server.url("/.well-known/ibi/witness/no.such/name/2020/01.01"), &[]).status, 404);
    drop(server);
    let victim = &names[2];
    let old_proof = env.path(&format!("proof-{}.json", victim.replace('/', "_")));
    let honest = env.identities(&root)[victim].clone();
    swap_item(&std::path::Path::new(&root).join(victim));
    // The witness vouched for the recorded identity; a proof from it still
    // names that one, never the forgery's.
    let still = env.ok(&["witness", &root, "--prove", victim]).stdout;
    let still: serde_json::Value = serde_json::from_str(&still).unwrap();
    assert_eq!(still["identity"], honest.as_str(), "a proof names the recorded identity");
    env.fails(&["-q", "verify", &root], 1);
    let after = env.ok(&["witness", &root]).stdout;
    let before: serde_json::Value = serde_json::from_slice(&std::fs::read(&witness).unwrap()).unwrap();
    let after: serde_json::Value = serde_json::from_str(&after).unwrap();
    assert_ne!(before["root"], after["root"], "the swapped item leaves the tree");
    assert_eq!(after["left_out"], 1, "{after}");
    assert_eq!(after["left_out_names"][0], victim.as_str(), "{after}");
    let refused = env.fails(&["witness", &root, "--prove", victim], 1);
    assert!(refused.stderr.contains("not in the witness"), "{}", refused.stderr);
    let mut proof: serde_json::Value = serde_json::from_slice(&std::fs::read(&old_proof).unwrap()).unwrap();
    proof["identity"] = serde_json::Value::String("0".repeat(64));
    let forged = env.write("forged.json", proof.to_string().as_bytes());
    env.fails(&["witness", "--check", forged.to_str().unwrap()], 1);
    assert!(!python(&[std::path::Path::new("proof"), &forged]), "python refuses the forged identity");
    proof["witness"]["root"] = after["root"].clone();
    let resigned = env.write("resigned.json", proof.to_string().as_bytes());
    let bad = env.fails(&["witness", "--check", resigned.to_str().unwrap()], 1);
    assert!(bad.stderr.contains("signature"), "{}", bad.stderr);
    assert!(!python(&[std::path::Path::new("proof"), &resigned]), "python checks the signature too");
}

/// A collection holding one deposited item, verified (which makes a witness),
/// then audited once its tagmanifest has settled (only a stat unchanged for two
/// seconds is cached), so that the identity cache holds it; its root and the
/// item's name. An audit reads every bag's identity, through the cache.
fn one_item_cached(env: &TestEnv) -> (String, String) {
    let root = env.collection("lib");
    env.write("src/a/f.txt", b"an item\n");
    env.ok(&["-q", "deposit", &root, env.path("src/a").to_str().unwrap()]);
    env.ok(&["-q", "verify", &root]);
    let name = env.identities(&root).into_keys().next().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2200));
    env.ok(&["audit", &root]);
    (root, name)
}

/// The identity cache (a witness or an audit answers an item whose tagmanifest's
/// stat is the cached one without reading it): a tagmanifest rewritten in place,
/// same size and same inode, its modification time set back, must still be read
/// again, so that the audit sees the bag no longer matches its record. A cache
/// keyed on size and modification time would hide the edit; the change time,
/// which no program sets back, shows it.
#[test]
fn regress_an_in_place_edit_hidden_by_the_identity_cache() {
    let env = TestEnv::new();
    let (root, name) = one_item_cached(&env);
    let inventory = std::path::Path::new(&root).join(".ibi/inventory.sqlite");
    let cached: i64 = rusqlite::Connection::open(&inventory)
        .unwrap()
        .query_row("SELECT count(*) FROM identities WHERE name = ?1", [&name], |row| row.get(0))
        .unwrap();
    assert_eq!(cached, 1, "an audit cached the identity of {name}");
    env.ok(&["audit", &root]);

    let tags = std::path::Path::new(&root).join(&name).join("tagmanifest-sha256.txt");
    let modified = std::fs::metadata(&tags).unwrap().modified().unwrap();
    let mut lines: Vec<String> = std::fs::read_to_string(&tags).unwrap().lines().map(|l| format!("{l}\n")).collect();
    lines.reverse();
    let file = std::fs::File::options().write(true).open(&tags).unwrap();
    std::io::Write::write_all(&mut &file, lines.concat().as_bytes()).unwrap();
    file.set_modified(modified).unwrap();
    drop(file);
    assert_eq!(std::fs::metadata(&tags).unwrap().modified().unwrap(), modified);
    let refused = env.fails(&["audit", &root], 1);
    assert!(refused.stdout.contains("no longer matches its own record"), "{}", refused.stdout);
}

/// The identity cache and a symlink (hostile): an item folder moved out of the
/// collection and replaced by a symlink to it keeps its tagmanifest's inode and
/// change time, so a stat through the link matched the cached one and the
/// witness answered for an item that is no longer in the collection. The item
/// folder itself is now checked, never followed: the audit finds no copy.
#[test]
fn regress_a_symlinked_item_answered_from_the_identity_cache() {
    let env = TestEnv::new();
    let (root, name) = one_item_cached(&env);
    let item = std::path::Path::new(&root).join(&name);
    let outside = env.path("outside-item");
    std::fs::rename(&item, &outside).unwrap();
    std::os::unix::fs::symlink(&outside, &item).unwrap();
    let refused = env.fails(&["audit", &root], 1);
    assert!(refused.stdout.contains(&format!("{name}\t")) && refused.stdout.contains("missing"), "{}", refused.stdout);
}

/// The witness key (issue 24, "the public key is in `collection.toml`"): a proof
/// carried its own public key and `witness --check` trusted it, so any key could
/// sign a proof of any tree, and a collection's key could be swapped unseen. The
/// key is published in collection.toml when it is made; `--check --key` holds a
/// proof to it; a signing key that is not the published one is a problem of verify.
#[test]
fn regress_a_witness_key_of_anyone_is_trusted() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    env.write("src/a/f.txt", b"an item\n");
    env.ok(&["-q", "deposit", &root, env.path("src/a").to_str().unwrap()]);
    env.ok(&["-q", "verify", &root]);
    let config = std::fs::read_to_string(std::path::Path::new(&root).join(".ibi/collection.toml")).unwrap();
    let witness: serde_json::Value = serde_json::from_str(&env.ok(&["witness", &root]).stdout).unwrap();
    let key = witness["public_key"].as_str().unwrap().to_string();
    assert!(config.contains(&format!("witness_key = \"{key}\"")), "the key is published: {config}");

    let name = env.identities(&root).into_keys().next().unwrap();
    let proof = env.write("proof.json", env.ok(&["witness", &root, "--prove", &name]).stdout.as_bytes());
    let proof = proof.to_str().unwrap();
    env.ok(&["witness", "--check", proof, "--key", &key]);
    let unanchored = env.ok(&["witness", "--check", proof]);
    assert!(unanchored.stderr.contains("--key"), "says the key was not checked: {}", unanchored.stderr);

    // Another collection's key signs a true proof of the same item: not this collection's.
    let copy = env.collection("copy");
    env.ok(&["-q", "mirror", &root, &copy]);
    env.ok(&["-q", "verify", &copy]);
    let other = env.write("other.json", env.ok(&["witness", &copy, "--prove", &name]).stdout.as_bytes());
    env.ok(&["witness", "--check", other.to_str().unwrap()]);
    let refused = env.fails(&["witness", "--check", other.to_str().unwrap(), "--key", &key], 1);
    assert!(refused.stderr.contains("not by the collection's key"), "{}", refused.stderr);
    env.fails(&["witness", "--check", proof, "--key", "not-hex"], 2);

    // The signing key swapped behind ibi's back: verify says so and signs nothing.
    let key_file = std::path::Path::new(&root).join(".ibi/witness.key");
    std::fs::write(&key_file, "11".repeat(32)).unwrap();
    let swapped = env.fails(&["verify", &root], 1);
    assert!(swapped.stderr.contains("replaced"), "{}", swapped.stderr);
    let kept: serde_json::Value = serde_json::from_str(&env.ok(&["witness", &root]).stdout).unwrap();
    assert_eq!(kept, witness, "no witness was signed with the swapped key");
}

/// A far server's fixity checks (protocol 5) come a page of 1,024 at a time,
/// not in one reply: a reply of every check outgrows a frame (64 MiB) near
/// 600,000 items, and both sides held every check. Over three pages the client
/// reads the same ages as a version-4 session reads from its one reply.
#[test]
fn far_fixity_checks_come_in_pages_and_read_as_one_reply_did() {
    let env = TestEnv::new();
    let root = env.filled("lib", 2100, 1);
    env.ok(&["-q", "verify", &root]);
    let far = format!("lab:{root}");
    let paged = env.far_ok(&env.shim("rsh", "", None), &["--json", "verify", &far, "--age"]);
    let older = env.shim("rsh4", "export IBI_PROTOCOL_VERSIONS=4", None);
    let whole = env.far_ok(&older, &["--json", "verify", &far, "--age"]);
    assert!(paged.stdout.contains("\"items\":2100") && paged.stdout.contains("\"stale\":0"), "{}", paged.stdout);
    assert_eq!(paged.stdout, whole.stdout);
    let local = env.ok(&["--json", "verify", &root, "--age"]);
    assert_eq!(paged.stdout, local.stdout, "the far ages are the collection's own");
}

/// Issue 57, class 1: the witness signed a replaced item. Item X's bag swapped
/// for a resealed forgery: a rolling `verify --budget 1B` checked another item
/// and signed a root in which `--prove X` gave the forged identity; a whole
/// verify reported X changed and still signed the forged identity. No witness
/// now vouches for either identity of X: it is left out, named, and `--prove`
/// says why.
#[test]
fn regress_witness_signs_a_replaced_item() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    for i in 0..3 {
        env.write(&format!("src/{i}/f.bin"), format!("item {i}\n").as_bytes());
        env.ok(&["-q", "deposit", &root, env.path(&format!("src/{i}")).to_str().unwrap()]);
    }
    env.ok(&["-q", "verify", &root]);
    let names: Vec<String> = env.identities(&root).into_keys().collect();
    let victim = &names[1];
    let forged_identity = {
        swap_item(&std::path::Path::new(&root).join(victim));
        env.identities(&root)[victim].clone()
    };
    for run in [&["-q", "verify", &root, "--budget", "1B"][..], &["-q", "verify", &root][..]] {
        let _ = env.run(run);
        let witness: serde_json::Value = serde_json::from_str(&env.ok(&["witness", &root]).stdout).unwrap();
        assert_eq!(witness["left_out"], 1, "{run:?}: {witness}");
        assert_eq!(witness["left_out_names"][0], victim.as_str(), "{run:?}: {witness}");
        assert_eq!(witness["items"], 2, "{run:?}");
        let refused = env.fails(&["witness", &root, "--prove", victim], 1);
        assert!(refused.stderr.contains("not in the witness"), "{run:?}: {}", refused.stderr);
        assert!(!refused.stdout.contains(&forged_identity));
        for other in names.iter().filter(|n| *n != victim) {
            env.ok(&["witness", &root, "--prove", other]);
        }
    }
}

/// Issue 57, class 5: a third party could not check the witness from the
/// documents alone. docs/formats.md specifies the log, the witness and the
/// proof with a worked example; `tests/witness_check.py`, written from it,
/// checks the example (signature, log chain, proof), refuses it tampered, and
/// checks a live collection's log and witness.
#[test]
fn regress_witness_not_checkable_from_the_documents() {
    let env = TestEnv::new();
    let python = |args: &[&str]| {
        std::process::Command::new(repo().join("target/bagit-venv/bin/python"))
            .arg(repo().join("tests/witness_check.py"))
            .args(args)
            .output()
            .unwrap()
            .status
            .code()
    };
    let example_path = repo().join("tests/formats_example.json");
    let example: serde_json::Value = serde_json::from_slice(&std::fs::read(&example_path).unwrap()).unwrap();
    let doc = std::fs::read_to_string(repo().join("docs/formats.md")).unwrap();
    for field in ["root", "signature", "public_key", "log_head"] {
        let value = example["witness"][field].as_str().unwrap();
        assert!(doc.contains(value), "docs/formats.md shows the example's {field}");
    }
    assert_eq!(python(&["example", example_path.to_str().unwrap()]), Some(0));
    for (what, path, value) in [
        ("a signature", "/witness/root", serde_json::json!("00".repeat(32))),
        ("a chain", "/log/0/detail", serde_json::json!("edited")),
        ("a proof", "/proof/identity", serde_json::json!("11".repeat(32))),
    ] {
        let mut tampered = example.clone();
        *tampered.pointer_mut(path).unwrap() = value;
        let file = env.write(&format!("tampered-{}.json", what.replace(' ', "-")), tampered.to_string().as_bytes());
        assert_eq!(python(&["example", file.to_str().unwrap()]), Some(1), "{what} tampered is refused");
    }

    let root = env.collection("lib");
    env.write("src/a/f.txt", b"a\n");
    env.ok(&["-q", "deposit", &root, env.path("src/a").to_str().unwrap()]);
    env.ok(&["-q", "verify", &root]);
    let log = env.write("log.jsonl", env.ok(&["--json", "log", &root]).stdout.as_bytes());
    let witness = env.write("witness.json", env.ok(&["witness", &root]).stdout.as_bytes());
    assert_eq!(python(&["chain", log.to_str().unwrap(), witness.to_str().unwrap()]), Some(0));

    // A site's cosigned checkpoint, checked with both keys from collection.toml.
    let site = env.path("site").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &site, "--like", &root]);
    env.ok(&["-q", "site", "add", &root, &site, "--zone", "z"]);
    env.ok(&["-q", "replicate", &root]);
    let key_of = |root: &str| {
        let config = std::fs::read_to_string(std::path::Path::new(root).join(".ibi/collection.toml")).unwrap();
        let line = config.lines().find(|l| l.starts_with("witness_key")).unwrap().to_string();
        line.split('"').nth(1).unwrap().to_string()
    };
    let (key, site_key) = (key_of(&root), key_of(&site));
    let notes: Vec<_> = std::fs::read_dir(std::path::Path::new(&site).join(".ibi/checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "note"))
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let note = std::fs::read_to_string(&notes[0]).unwrap();
    let site_name = note.lines().last().unwrap().split(' ').nth(1).unwrap().to_string();
    let note_path = notes[0].to_str().unwrap();
    assert_eq!(python(&["checkpoint", note_path, &key, &site_name, &site_key]), Some(0), "{note}");
    assert_eq!(python(&["checkpoint", note_path, &site_key]), Some(1), "another key's signature is refused");
    assert_eq!(
        python(&["checkpoint", note_path, &key, &site_name, &key]),
        Some(1),
        "a cosignature needs the site's key"
    );
}

/// `verify --part K/N`: the N parts of a collection, run at once by N
/// processes, check every item exactly once, their checks are all kept, and
/// together they count as one cycle for `verify --age`; a part that did not
/// run shows as items never checked.
#[test]
fn verify_parts_run_at_once_cover_the_collection_and_count_as_one_cycle() {
    let env = TestEnv::new();
    let a = env.filled("a", 30, 1);
    env.fails(&["verify", &a, "--age", "--cycle", "90"], 1);
    let workers: Vec<_> = (1..=3)
        .map(|k| {
            env.command(&["verify", &a, "--part", &format!("{k}/3")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut covered = 0;
    for worker in workers {
        let out = worker.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{said}");
        let count = said.split("item(s) of the collection").next().unwrap().trim_end().rsplit(' ').next().unwrap();
        covered += count.parse::<usize>().unwrap_or_else(|_| panic!("{said}"));
    }
    assert_eq!(covered, 30, "every item in exactly one part");
    env.ok(&["-q", "verify", &a, "--age", "--cycle", "90"]);

    let b = env.filled("b", 30, 1);
    env.ok(&["-q", "verify", &b, "--part", "1/3"]);
    env.ok(&["-q", "verify", &b, "--part", "2/3"]);
    let missing = env.fails(&["verify", &b, "--age", "--cycle", "90"], 1);
    assert!(missing.stdout.contains("never checked"), "the part that did not run shows: {}", missing.stdout);
    env.fails(&["verify", &b, "--part", "4/3"], 2);
}

/// Three verifies of disjoint items of one local collection run at once (as
/// parallel workers do) keep every check: before, a deferred SQLite
/// transaction that read and then wrote got "database is locked" at once,
/// and a worker's fixity dates were dropped with a warning.
#[test]
fn regress_concurrent_verifies_lose_fixity_dates() {
    let env = TestEnv::new();
    let a = env.filled("a", 45, 1);
    let names: Vec<String> =
        env.ok(&["list", &a]).stdout.lines().map(|l| l.split('\t').next().unwrap().to_string()).collect();
    for round in 0..3 {
        let workers: Vec<_> = names
            .chunks(15)
            .map(|part| {
                let mut args = vec!["verify", a.as_str()];
                args.extend(part.iter().map(String::as_str));
                env.command(&args)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for worker in workers {
            let out = worker.wait_with_output().unwrap();
            let said = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(out.status.success() && !said.contains("were not kept"), "round {round}: {said}");
        }
    }
    env.ok(&["-q", "verify", &a, "--age", "--cycle", "90"]);
}
