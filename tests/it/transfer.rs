//! copy, migrate and mirror end to end: incremental no-op runs, restoring and
//! replacing items, never deleting, conflicts, corrupt sources, the
//! write lock, symlink traps, cross-filesystem migrate, a full disk, a failing
//! fsync, and mirror --watch.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Stdio;

use crate::env::{control_empty, is_root, sh, snapshot, wait_until, Reaper, TestEnv};

fn first_item(env: &TestEnv, root: &str) -> String {
    env.ok(&["list", root]).stdout.lines().next().unwrap().split('\t').next().unwrap().to_string()
}

/// Rewrites an item's bag-info with an extra field and recomputes its tagmanifest:
/// a legitimate change that gives the item a new identity digest.
fn change_item(item: &Path, field: &str) {
    let info = item.join("bag-info.txt");
    let mut text = fs::read_to_string(&info).unwrap();
    text.push_str(&format!("{field}\n"));
    fs::write(&info, text).unwrap();
    let tags: String = ["bag-info.txt", "bagit.txt", "manifest-sha256.txt"]
        .iter()
        .map(|n| format!("{}  {n}\n", ibi::fsx::hash_file(&item.join(n)).unwrap().0))
        .collect();
    fs::write(item.join("tagmanifest-sha256.txt"), tags).unwrap();
}

#[test]
fn mirror_of_200_items_then_a_no_op_run_changes_nothing() {
    let env = TestEnv::new();
    let src = env.filled("src", 200, 1);
    let dst = env.collection("dst");
    let first = env.ok(&["mirror", &src, &dst]);
    assert!(first.stderr.contains("copied 200,"), "{}", first.stderr);
    assert_eq!(env.identities(&src), env.identities(&dst));
    let before = snapshot(Path::new(&dst));
    let second = env.ok(&["mirror", &src, &dst]);
    assert!(second.stderr.contains("copied 0,") && second.stderr.contains("skipped 200,"), "{}", second.stderr);
    assert_eq!(snapshot(Path::new(&dst)), before, "a no-op mirror must leave DST byte-identical, mtimes included");
    env.ok(&["verify", &dst]);
}

#[test]
fn mirror_restores_a_deleted_item_and_refuses_a_change_behind_its_back() {
    let env = TestEnv::new();
    let src = env.filled("src", 3, 2);
    let dst = env.collection("dst");
    env.ok(&["mirror", &src, &dst]);
    let name = first_item(&env, &src);
    fs::remove_dir_all(Path::new(&dst).join(&name)).unwrap();
    let run = env.ok(&["mirror", &src, &dst]);
    assert!(run.stderr.contains("copied 1,"), "{}", run.stderr);
    // A change made behind ibi's back is no new version: verify names it, and
    // mirror leaves DST's copy alone.
    let before = env.identities(&dst);
    change_item(&Path::new(&src).join(&name), "Contact-Name: New Curator");
    let run = env.fails(&["verify", &src], 1);
    assert!(run.stdout.contains(&name) && run.stdout.contains("changed behind ibi's back"), "{}", run.stdout);
    // A no-op mirror trusts SRC's inventory (verify is what reads every byte).
    env.ok(&["mirror", &src, &dst]);
    assert_eq!(env.identities(&dst), before);
    env.ok(&["verify", &dst]);
    assert!(control_empty(&dst, "staging") && control_empty(&dst, "trash"));
}

#[test]
fn checksum_repairs_a_damaged_dst_item_from_src() {
    let env = TestEnv::new();
    let src = env.filled("src", 2, 1);
    let dst = env.collection("dst");
    env.ok(&["mirror", &src, &dst]);
    let name = first_item(&env, &src);
    let payload = Path::new(&dst).join(&name).join("data/f0.txt");
    fs::write(&payload, b"bit rot").unwrap();
    let plain = env.ok(&["mirror", &src, &dst]);
    assert!(plain.stderr.contains("replaced 0,"), "without --checksum only tagmanifests are read");
    let run = env.fails(&["-q", "mirror", &src, &dst, "--checksum"], 1);
    assert!(
        run.stdout.contains("repaired") && run.stdout.contains("digest mismatch"),
        "reported under -q: {}",
        run.stdout
    );
    env.ok(&["verify", &dst]);
    // A rotten SRC copy is reported, and DST's good copy kept.
    let before = env.identities(&dst);
    let src_payload = Path::new(&src).join(&name).join("data/f0.txt");
    fs::write(&src_payload, b"rot in SRC").unwrap();
    let run = env.fails(&["mirror", &src, &dst, "--checksum", "--json"], 1);
    assert!(run.stdout.contains("in SRC"), "{}", run.stdout);
    assert_eq!(env.identities(&dst), before);
    env.ok(&["verify", &dst]);
}

#[test]
fn mirror_never_deletes_and_refuses_delete() {
    let env = TestEnv::new();
    let src = env.filled("src", 2, 1);
    let dst = env.filled("dst", 3, 1);
    let before = snapshot(Path::new(&dst));
    for flags in [&["--delete"][..], &["--delete", "--max-delete", "2"]] {
        let run = env.fails(&[&["mirror", &src, &dst][..], flags].concat(), 2);
        assert!(run.stderr.contains("no longer deletes") && run.stderr.contains("ibi withdraw"), "{}", run.stderr);
    }
    assert_eq!(snapshot(Path::new(&dst)), before, "a refused --delete changes nothing");
    let run = env.ok(&["mirror", &src, &dst]);
    assert!(run.stderr.contains("copied 2,"), "{}", run.stderr);
    assert_eq!(env.identities(&dst).len(), 5, "DST keeps the items SRC never had");
    env.ok(&["verify", &dst]);
}

#[test]
fn an_empty_or_unmounted_src_never_empties_dst() {
    let env = TestEnv::new();
    let empty = env.collection("empty");
    let dst = env.filled("dst", 2, 1);
    env.ok(&["mirror", &empty, &dst]);
    fs::create_dir(env.path("mnt")).unwrap();
    let run = env.fails(&["mirror", env.path("mnt").to_str().unwrap(), &dst], 2);
    assert!(run.stderr.contains("not an ibi collection"), "{}", run.stderr);
    assert_eq!(env.identities(&dst).len(), 2);
}

#[test]
fn a_conflict_is_reported_and_nothing_is_overwritten() {
    let env = TestEnv::new();
    let src = env.filled("src", 2, 1);
    let dst = env.collection("dst");
    env.ok(&["copy", &src, &dst]);
    let name = first_item(&env, &src);
    change_item(&Path::new(&dst).join(&name), "Note: edited in DST");
    let before = snapshot(Path::new(&dst).join(&name).as_path());
    let run = env.fails(&["copy", &src, &dst], 1);
    assert!(run.stdout.contains("conflict") && run.stdout.contains(&name), "{}", run.stdout);
    assert_eq!(snapshot(Path::new(&dst).join(&name).as_path()), before);
}

#[test]
fn a_corrupt_src_item_is_never_placed_and_the_rest_are() {
    let env = TestEnv::new();
    let src = env.filled("src", 3, 1);
    let dst = env.collection("dst");
    let name = first_item(&env, &src);
    fs::write(Path::new(&src).join(&name).join("data/f0.txt"), b"flipped").unwrap();
    let run = env.fails(&["copy", &src, &dst], 1);
    assert!(
        run.stdout.contains("digest mismatch") && run.stderr.contains("corrupt 1;"),
        "{}{}",
        run.stdout,
        run.stderr
    );
    let copied = env.identities(&dst);
    assert_eq!(copied.len(), 2);
    assert!(!copied.contains_key(&name));
    assert!(control_empty(&dst, "staging"));
}

#[test]
fn a_second_mirror_exits_75_while_the_first_holds_the_lock() {
    let env = TestEnv::new();
    let src = env.filled("src", 3, 1);
    let dst = env.collection("dst");
    let mut first =
        Reaper(Some(env.command(&["mirror", &src, &dst, "--watch"]).stderr(Stdio::piped()).spawn().unwrap()));
    assert!(wait_until(20, || env.identities(&dst).len() == 3));
    let second = env.fails(&["mirror", &src, &dst], 75);
    assert!(second.stderr.contains("locked"), "{}", second.stderr);
    let waited = env.fails(&["mirror", &src, &dst, "--wait", "0.5"], 75);
    assert!(waited.stderr.contains("locked"));
    let child = first.0.as_mut().unwrap();
    sh(&format!("kill -TERM {}", child.id()));
    assert!(child.wait().unwrap().success(), "the first mirror finishes cleanly");
    first.0 = None;
    assert_eq!(env.identities(&src), env.identities(&dst));
    env.ok(&["mirror", &src, &dst]);
}

#[test]
fn mirror_watch_delivers_a_new_item_within_seconds() {
    let env = TestEnv::new();
    let src = env.filled("src", 1, 1);
    let dst = env.collection("dst");
    let mut watcher =
        Reaper(Some(env.command(&["mirror", &src, &dst, "--watch"]).stderr(Stdio::piped()).spawn().unwrap()));
    assert!(wait_until(20, || env.identities(&dst).len() == 1));
    env.write("late/new.txt", b"deposited while mirror --watch runs");
    env.ok(&["deposit", &src, env.path("late").to_str().unwrap()]);
    assert!(wait_until(15, || env.identities(&dst).len() == 2), "the new item did not arrive");
    let child = watcher.0.as_mut().unwrap();
    sh(&format!("kill -TERM {}", child.id()));
    assert!(child.wait().unwrap().success());
    watcher.0 = None;
    env.ok(&["verify", &dst]);
}

#[test]
fn symlink_traps_in_dst_never_reach_the_sentinel() {
    let env = TestEnv::new();
    let src = env.filled("src", 3, 1);
    let dst = env.collection("dst");
    env.write("sentinel/keep.txt", b"must not change");
    let sentinel = env.path("sentinel");
    let before = snapshot(&sentinel);
    let name = first_item(&env, &src);
    let item_path = Path::new(&dst).join(&name);
    fs::create_dir_all(item_path.parent().unwrap()).unwrap();
    symlink(&sentinel, &item_path).unwrap();
    for dir in ["staging", "trash"] {
        let path = Path::new(&dst).join(".ibi").join(dir);
        fs::remove_dir_all(&path).ok();
        symlink(&sentinel, &path).unwrap();
        let run = env.fails(&["copy", &src, &dst], 2);
        assert!(run.stderr.contains(&format!(".ibi/{dir} is a symlink")), "{}", run.stderr);
        assert_eq!(snapshot(&sentinel), before);
        fs::remove_file(&path).unwrap();
    }
    let run = env.fails(&["copy", &src, &dst], 1);
    assert!(run.stdout.contains("not an item directory"), "{}", run.stdout);
    assert_eq!(snapshot(&sentinel), before);
    env.ok(&["mirror", &src, &dst]);
    assert_eq!(snapshot(&sentinel), before);
    assert_eq!(env.identities(&src), env.identities(&dst));
    env.ok(&["migrate", &src, &dst]);
    assert_eq!(snapshot(&sentinel), before);
    env.ok(&["verify", &dst]);
}

#[test]
fn cross_filesystem_migrate_from_a_tmpfs() {
    let env = TestEnv::new();
    let other_fs = env.tmpfs("other-fs", "16m");
    let src = other_fs.at("src");
    env.ok(&["-q", "init", &src, "--host", "shm.example.org", "--ip", "192.0.2.40", "--granularity", "0.001"]);
    for i in 0..5 {
        env.write(&format!("s/{i}/f.txt"), format!("shm item {i}").as_bytes());
        env.ok(&["-q", "deposit", &src, env.path(&format!("s/{i}")).to_str().unwrap()]);
    }
    let expected = env.identities(&src);
    let dst = env.collection("dst");
    let run = env.ok(&["migrate", &src, &dst]);
    assert!(run.stderr.contains("migrated 5,"), "{}", run.stderr);
    assert!(env.identities(&src).is_empty());
    assert_eq!(env.identities(&dst), expected);
    env.ok(&["verify", &dst]);
    env.ok(&["verify", &src]);
}

/// A collection of three items of 700 KiB each: more than a 1 MiB tmpfs holds.
fn three_items_of_700_kib() -> (TestEnv, String) {
    assert!(is_root(), "this test mounts a small tmpfs and must run as root (CI does)");
    let env = TestEnv::new();
    let src = env.collection("src");
    for i in 0..3 {
        env.write(&format!("big/{i}/blob"), &vec![i as u8; 700 * 1024]);
        env.ok(&["-q", "deposit", &src, env.path(&format!("big/{i}")).to_str().unwrap()]);
    }
    (env, src)
}

#[test]
fn disk_full_dst_exits_3_keeps_src_and_leaves_no_partial_item() {
    let (env, src) = three_items_of_700_kib();
    let expected = env.identities(&src);
    let src_before = snapshot(Path::new(&src));
    let small = env.tmpfs("small", "1m");
    let dst = small.at("dst");
    env.ok(&["-q", "init", &dst, "--host", "a.b.c"]);
    let mirror = env.run(&["mirror", &src, &dst]);
    let src_after_mirror = snapshot(Path::new(&src));
    let migrate = env.run(&["migrate", &src, &dst]);
    let dst_valid = env.run(&["verify", &dst]).code == 0 && control_empty(&dst, "staging");
    let in_dst = env.identities(&dst);
    for run in [&mirror, &migrate] {
        assert_eq!(run.code, 3, "{}", run.stderr);
        assert!(run.stderr.contains("No space left on device"), "{}", run.stderr);
    }
    assert_eq!(src_after_mirror, src_before, "mirror leaves SRC byte-identical");
    assert!(dst_valid, "DST holds only complete, valid items and an empty staging");
    let in_src = env.identities(&src);
    assert!(in_src.keys().all(|k| !in_dst.contains_key(k)), "migrate kept no item in both places");
    let mut union = in_src.clone();
    union.extend(in_dst);
    assert_eq!(union, expected, "every item is in SRC or DST, unchanged");
    env.ok(&["verify", &src]);
}

#[test]
fn a_failing_fsync_commits_nothing_and_exits_3() {
    let env = TestEnv::new();
    let src = env.filled("src", 2, 1);
    let dst = env.collection("dst");
    let expected = env.identities(&src);
    let out = std::process::Command::new("strace")
        .args(["-f", "-o", "/dev/null", "-e", "inject=fsync,syncfs:error=EIO"])
        .arg(crate::env::ibi_bin())
        .args(["migrate", &src, &dst])
        .output()
        .expect("strace (installed by scripts/setup)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    // A file's fsync says the OS's words; SQLite's (the inventory) says its own.
    let io_words = stderr.contains("Input/output error") || stderr.contains("disk I/O error");
    assert!(stderr.contains("sync") && io_words, "{stderr}");
    assert!(env.identities(&dst).is_empty(), "no item is committed");
    assert_eq!(env.identities(&src), expected, "SRC keeps every item");
    assert!(control_empty(&dst, "staging"));
    env.ok(&["migrate", &src, &dst]);
    assert_eq!(env.identities(&dst), expected);
}

#[test]
fn dry_run_changes_nothing() {
    let env = TestEnv::new();
    let src = env.filled("src", 2, 1);
    let dst = env.filled("dst", 1, 1);
    let before = (snapshot(Path::new(&src)), snapshot(Path::new(&dst)));
    for cmd in [
        &["mirror", &src, &dst, "--dry-run"][..],
        &["migrate", &src, &dst, "--dry-run"],
        &["copy", &src, &dst, "--dry-run"],
    ] {
        let run = env.ok(cmd);
        assert!(run.stderr.contains("dry run"), "{}", run.stderr);
    }
    assert_eq!((snapshot(Path::new(&src)), snapshot(Path::new(&dst))), before);
}

/// The counts of a run's JSON summary, without its timing and dry-run flag.
fn summary_counts(run: &crate::env::Run) -> String {
    let last = run.stdout.lines().last().unwrap_or_default();
    let mut summary: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(summary["event"], "summary", "{}", run.stdout);
    for key in ["seconds", "dry_run"] {
        summary.as_object_mut().unwrap().remove(key);
    }
    summary.to_string()
}

/// `migrate --dry-run` counted differently from the run it previewed: on one
/// filesystem the real run said "copied 0, migrated 3, 6 bytes" and the dry run
/// "copied 3, migrated 0, 0 bytes". A dry run now counts what the real run does,
/// on one filesystem (rename) and across two (copy, then remove), an item DST
/// already holds included.
#[test]
fn regress_migrate_dry_run_counts_differently() {
    let env = TestEnv::new();
    let src = env.filled("src", 3, 2);
    let mut destinations = vec![env.collection("dst")];
    let _mounted = is_root().then(|| {
        let tmpfs = env.tmpfs("other-fs", "8m");
        destinations.push(env.collection("other-fs/dst"));
        tmpfs
    });
    for dst in &destinations {
        let one = first_item(&env, &src);
        env.ok(&["-q", "copy", &src, dst, &one]);
        let dry = env.ok(&["--json", "migrate", &src, dst, "--dry-run"]);
        let real = env.ok(&["--json", "migrate", &src, dst]);
        assert_eq!(summary_counts(&dry), summary_counts(&real), "into {dst}");
        assert!(summary_counts(&real).contains(r#""migrated":3"#), "{}", real.stdout);
        env.ok(&["-q", "migrate", dst, &src]);
    }
}

/// A mirror that filled DST's disk said only "cannot write DST/.ibi/staging/item-…
/// /data/blob: No space left on device": not which items were left behind, and with
/// `--json` no `summary` event at all. Each item not copied is now named (an item
/// event in JSON, a line on stderr in text), the error names the item's own path,
/// and the summary comes last either way.
#[test]
fn regress_disk_full_mirror_names_no_item_and_no_summary() {
    let (env, src) = three_items_of_700_kib();
    let names: Vec<String> = env.identities(&src).into_keys().collect();
    let small = env.tmpfs("small", "1m");
    let dst = small.at("dst");
    env.ok(&["-q", "init", &dst, "--like", &src]);
    let run = env.run(&["--json", "mirror", &src, &dst]);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(!run.stderr.contains("staging"), "the error names a staging path: {}", run.stderr);
    let events: Vec<serde_json::Value> = run.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.last().unwrap()["event"], "summary", "{}", run.stdout);
    let held = env.identities(&dst);
    for name in &names {
        let told = events
            .iter()
            .any(|e| e["name"] == name.as_str() && e["outcome"].as_str().unwrap_or_default().starts_with("not copied"));
        assert!(held.contains_key(name) || told, "{name} was neither copied nor named: {}", run.stdout);
    }
    assert!(held.len() < names.len(), "the disk was too small for every item");
    let text = env.run(&["mirror", &src, &dst]);
    assert_eq!(text.code, 3, "{}", text.stderr);
    let held = env.identities(&dst);
    for name in names.iter().filter(|name| !held.contains_key(*name)) {
        assert!(text.stderr.contains(&format!("{name} was not copied")), "{}", text.stderr);
    }
    assert!(text.stderr.contains("mirror stopped early: copied"), "{}", text.stderr);
}
