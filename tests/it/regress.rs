//! Regression tests named after the classes of bugs that lost data or escaped
//! a collection (ripgrep style): each failed on the code before its fix, which
//! `IBI_TEST_BIN=/path/to/old/ibi cargo test regress_` shows.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::env::{assert_code, ibi_bin, is_root, sh, sh_in, wait_until, Reaper, TestEnv};

fn item_count(env: &TestEnv, root: &str) -> usize {
    env.ok(&["list", root]).lines().len()
}

/// `deposit --move` removes a file only if it is unchanged since it was read, and
/// a folder only if it is empty: late files and appended bytes stay.
#[test]
fn regress_move_changed_source() {
    let env = TestEnv::new();
    let root = env.collection("col");
    for i in 0..3 {
        env.write(&format!("d/f{i}"), &vec![b'a' + i as u8; 100_000]);
    }
    // Every rename waits 1.5 s, which holds the deposit between reading and removing.
    let mut strace = std::process::Command::new("strace");
    strace
        .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=renameat2", "-e", "inject=renameat2:delay_enter=1500000"])
        .arg(ibi_bin())
        .env(crate::env::MINTER_DIR_ENV, crate::env::minter_dir(env.root()))
        .args(["deposit", &root, "d", "--move"])
        .current_dir(env.root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut running = Reaper(Some(strace.spawn().expect("strace")));
    std::thread::sleep(Duration::from_millis(700));
    env.write("d/late.txt", b"important");
    fs::OpenOptions::new().append(true).open(env.path("d/f0")).unwrap().write_all(b"more").unwrap();
    let out: crate::env::Run = running.0.take().unwrap().wait_with_output().unwrap().into();
    assert_code(&out, 0, "deposit --move");
    assert_eq!(out.lines().len(), 1, "the item's name is printed: {}", out.stdout);
    assert_eq!(fs::read(env.path("d/late.txt")).unwrap(), b"important", "a late file is kept");
    assert!(fs::read(env.path("d/f0")).unwrap().ends_with(b"more"), "an appended file is kept");
    assert!(!env.path("d/f1").exists() && !env.path("d/f2").exists(), "unchanged files are moved");
    assert!(out.stderr.contains("late.txt") && out.stderr.contains("f0"), "warnings name what stayed: {}", out.stderr);
    env.ok(&["verify", &root]);
}

/// Asserts the collection still holds `n` valid items.
fn intact(env: &TestEnv, root: &str, n: usize) {
    assert_eq!(item_count(env, root), n, "items of {root}");
    env.ok(&["verify", root]);
}

/// Sources, inboxes and roots that lie inside a collection or contain one are
/// refused with exit 2 before anything is touched.
#[test]
fn regress_overlapping_sources_and_collections() {
    let env = TestEnv::new();
    let root = env.filled("lib", 2, 1);
    let item = env.ok(&["list", &root]).lines()[0].split('\t').next().unwrap().to_string();
    let subdomain = item.split('/').next().unwrap().to_string();
    let refused: Vec<Vec<String>> = vec![
        vec!["deposit".into(), root.clone(), root.clone(), "--move".into()],
        vec!["deposit".into(), root.clone(), format!("{root}/{subdomain}"), "--move".into()],
        vec!["deposit".into(), root.clone(), format!("{root}/{item}"), "--move".into()],
        vec!["deposit".into(), root.clone(), format!("{root}/{item}"), "--move".into(), "--follow-symlinks".into()],
        vec!["init".into(), format!("{root}/{subdomain}/new"), "--host".into(), "x.example.org".into()],
        vec!["init".into(), env.path("lib-src").display().to_string(), "--host".into(), "x.example.org".into()],
    ];
    for args in &refused {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = env.fails(&args, 2);
        assert!(
            run.stderr.contains("refusing") || run.stderr.contains("not empty") || run.stderr.contains("inside"),
            "{args:?}: {}",
            run.stderr
        );
        intact(&env, &root, 2);
    }
    let inner = env.collection("inbox/lib");
    let other = env.collection("other");
    for (inbox, target, extra) in [
        (root.clone(), root.clone(), "--remove"),
        (env.path("inbox").display().to_string(), inner.clone(), "--remove"),
        (format!("{root}/{subdomain}"), other.clone(), ""),
    ] {
        let script = format!("timeout 10 \"$IBI\" watch '{inbox}' '{target}' --settle 0.2 {extra}");
        let run = sh_in(env.root(), &script);
        assert_code(&run, 2, &script);
        intact(&env, &root, 2);
    }
    let run = env.fails(&["copy", &inner, &env.path("inbox").display().to_string()], 2);
    assert!(run.stderr.contains("not an ibi collection"), "{}", run.stderr);
    // A collection moved inside another (init refuses to make one there).
    let moved = env.collection("moved");
    let nested = format!("{root}/{subdomain}/nested");
    fs::rename(&moved, &nested).unwrap();
    for (a, b) in [(&root, &nested), (&nested, &root)] {
        for verb in ["copy", "mirror", "migrate"] {
            let run = env.fails(&[verb, a, b], 2);
            assert!(run.stderr.contains("nested"), "{verb} {a} {b}: {}", run.stderr);
        }
    }
    fs::remove_dir_all(&nested).unwrap();
    assert!(env.path("inbox/lib/.ibi/collection.toml").exists(), "the inner collection is untouched");
    std::os::unix::fs::symlink(&root, env.path("lib-link")).unwrap();
    let run = env.fails(&["migrate", &root, "lib-link"], 2);
    assert!(run.stderr.contains("same collection"), "{}", run.stderr);
    intact(&env, &root, 2);
}

/// One collection reached twice through a bind mount is still one collection.
#[test]
fn regress_overlapping_collection_through_bind_mount() {
    if !is_root() {
        eprintln!("skipped: bind mounts need root (CI runs as root)");
        return;
    }
    let env = TestEnv::new();
    let root = env.filled("lib", 2, 1);
    fs::create_dir(env.path("bind")).unwrap();
    sh(&format!("mount --bind '{root}' '{}'", env.path("bind").display()));
    let bind = env.path("bind").display().to_string();
    let run = sh_in(env.root(), &format!("timeout 20 \"$IBI\" migrate '{root}' '{bind}'"));
    let _ = sh(&format!("umount '{bind}'"));
    assert_code(&run, 2, "migrate A bind-of-A");
    assert!(run.stderr.contains("same collection"), "{}", run.stderr);
    intact(&env, &root, 2);
}

/// The hot folder's receipts and records never collide with entry names, and
/// nothing it archives is ever overwritten.
#[test]
fn regress_hotfolder_names_collide_with_records() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("inbox/report.pending", b"a user's file named like a record");
    env.write("inbox/scans.pending/page1.txt", b"a user's folder named like a record");
    env.write("inbox/a.receipt", b"a user's file named like a receipt");
    let mut watcher = Reaper(Some(
        env.command(&["watch", "inbox", &root, "--settle", "0.3"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    assert!(wait_until(30, || item_count(&env, &root) == 3), "three entries deposited");
    env.write("inbox/a", b"entry a");
    env.write("inbox/report.pdf", b"first report");
    assert!(wait_until(30, || item_count(&env, &root) == 5), "five deposited");
    env.write("inbox/report.pdf", b"second report");
    assert!(wait_until(30, || item_count(&env, &root) == 6), "the second report.pdf deposited");
    sh(&format!("kill -TERM {}", watcher.0.as_ref().unwrap().id()));
    watcher.0.take().unwrap().wait().unwrap();
    // A restart must not trip over user entries named like records.
    let mut again = Reaper(Some(
        env.command(&["watch", "inbox", &root, "--settle", "0.3"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(again.0.as_mut().unwrap().try_wait().unwrap().is_none(), "a restart keeps running");
    sh(&format!("kill -TERM {}", again.0.as_ref().unwrap().id()));
    again.0.take().unwrap().wait().unwrap();
    let archived = sh(&format!("cd '{}' && find . -type f | sort", env.path("inbox/.deposited").display()));
    for content in [
        "a user's file named like a record",
        "page1",
        "a user's file named like a receipt",
        "entry a",
        "first report",
        "second report",
    ] {
        let all = sh(&format!(
            "cd '{}' && cat $(find . -type f -not -path './.receipts/*' -not -path './.pending/*')",
            env.path("inbox/.deposited").display()
        ));
        let want = if content == "page1" { "a user's folder named like a record" } else { content };
        assert!(all.contains(want), "{want} is archived: {archived}");
    }
    let receipts = fs::read_dir(env.path("inbox/.deposited/.receipts")).unwrap().count();
    assert_eq!(receipts, 6, "one receipt per deposit, none overwritten: {archived}");
    assert_eq!(item_count(&env, &root), 6);
}

/// `--meta` cannot forge the labels ibi writes itself.
#[test]
fn regress_meta_forges_reserved_labels() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("x", b"x");
    for label in [
        "Payload-Oxum=1.1",
        "External-Identifier=a.b/c/2009/01.01.00.00",
        "Bagging-Date=1999-01-01",
        "Source-Organization=Forged",
        "payload-oxum=2.2",
    ] {
        let run = env.fails(&["deposit", &root, "x", "--meta", label], 2);
        assert!(run.stderr.contains("written by ibi"), "{label}: {}", run.stderr);
    }
    assert_eq!(item_count(&env, &root), 0);
}

/// A deposit killed at any moment, then run again, never deposits the same content twice.
#[test]
fn regress_deposit_rerun_duplicates() {
    // strace counts each system call on its own: `unlink` is ibi's journal record
    // and then SQLite's files, `unlinkat` the sources removed beneath their folder,
    // `symlink` the aliases, made at their places after the items were placed.
    let points = [
        ("unlink", 1),
        ("unlink", 2),
        ("unlinkat", 1),
        ("unlinkat", 2),
        ("unlinkat", 3),
        ("symlink", 1),
        ("symlink", 3),
    ];
    for (call, when) in points {
        let env = TestEnv::new();
        let root = env.collection("col");
        for f in ["f1", "f2", "f3"] {
            env.write(f, format!("content of {f}").as_bytes());
        }
        let when = format!("{call} {when}");
        let (call, nth) = when.split_once(' ').unwrap();
        let script = format!(
            "strace -f -qq -o /dev/null -e trace={call} -e inject={call}:signal=KILL:when={nth} \"$IBI\" deposit {root} f1 f2 f3 --each --move"
        );
        let killed = sh_in(env.root(), &script);
        assert_ne!(killed.code, 0, "when={when}: the kill happened: {}", killed.stderr);
        // The rerun deposits what is left; with nothing left, it is a write that recovers.
        let left: Vec<&str> = ["f1", "f2", "f3"].into_iter().filter(|f| env.path(f).exists()).collect();
        let rerun = match left.is_empty() {
            false => sh_in(env.root(), &format!("\"$IBI\" deposit {root} {} --each --move", left.join(" "))),
            true => sh_in(env.root(), &format!("\"$IBI\" upgrade {root}")),
        };
        assert_code(&rerun, 0, &format!("rerun after kill at {when}"));
        assert_eq!(item_count(&env, &root), 3, "when={when}: every file exactly once; rerun said {}", rerun.stderr);
        assert!(["f1", "f2", "f3"].iter().all(|f| !env.path(f).exists()), "when={when}: sources moved");
        env.ok(&["verify", &root]);
    }
}

/// Results that cannot be written are an error (exit 3) that says what was done;
/// a closed pipe ends quietly; a full stderr never panics.
#[test]
fn regress_results_lost_on_output_errors() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("x", b"x");
    env.write("y", b"y");
    let run = sh_in(env.root(), &format!("\"$IBI\" deposit {root} x >/dev/full"));
    assert_code(&run, 3, "deposit >/dev/full");
    let name = env.ok(&["list", &root]).stdout.split('\t').next().unwrap().to_string();
    assert!(run.stderr.contains(&name), "the minted name is not lost: {}", run.stderr);
    assert_code(&sh_in(env.root(), &format!("\"$IBI\" list {root} >/dev/full")), 3, "list >/dev/full");
    assert_code(&sh_in(env.root(), &format!("\"$IBI\" deposit {root} y 2>/dev/full")), 0, "deposit 2>/dev/full");
    assert_code(&sh_in(env.root(), &format!("\"$IBI\" list {root} 2>/dev/full >/dev/full")), 3, "both full");
    let piped = sh_in(env.root(), &format!("\"$IBI\" list {root} | head -1; exit ${{PIPESTATUS:-0}}"));
    assert_code(&piped, 0, "list | head");
    let run = sh_in(env.root(), "\"$IBI\" completions fish | head -1");
    assert_code(&run, 0, "completions | head");
}

/// Extreme counts and a clock before 1970 give errors, never a panic or an abort,
/// and a refused deposit leaves the minter state as it was.
#[test]
fn regress_panics_on_extreme_input() {
    let env = TestEnv::new();
    for count in ["18446744073709551615", "1000000000000"] {
        let run = env.run(&["mint", "--host", "a.example.org", "--state", "s", "--count", count]);
        assert_code(&run, 2, &format!("mint --count {count}"));
        let run = env.run(&["pilin", "mint", "--state", "p", "--count", count]);
        assert_code(&run, 2, &format!("pilin mint --count {count}"));
    }
    let root = env.collection("col");
    env.write("x", b"x");
    let run = sh_in(env.root(), &format!("faketime '1969-06-01 00:00:05' \"$IBI\" deposit {root} x"));
    assert!(run.code == 2 || run.code == 3, "{run:?}");
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    assert!(!Path::new(&root).join(".ibi/minter.state").exists(), "the refused deposit minted nothing");
    let run = sh_in(env.root(), &format!("faketime '1990-06-01 00:00:05' \"$IBI\" deposit {root} x"));
    assert_code(&run, 2, "deposit before the IBIp epoch");
    assert!(!Path::new(&root).join(".ibi/minter.state").exists(), "a date before 1995 does not advance the state");
    assert_eq!(item_count(&env, &root), 0);
}

/// A bag as a writer that never encodes `%` makes it: bagit.txt, one payload file
/// and its manifest-sha256.txt line written raw; no bag-info.
fn minimal_bag(env: &TestEnv, dir: &str, file: &str, content: &[u8]) {
    env.write(&format!("{dir}/bagit.txt"), b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n");
    env.write(&format!("{dir}/data/{file}"), content);
    let digest = ibi::fsx::hash_bytes(content);
    env.write(&format!("{dir}/manifest-sha256.txt"), format!("{digest}  data/{file}\n").as_bytes());
}

fn first_name(env: &TestEnv, root: &str) -> String {
    env.ok(&["list", root]).lines()[0].split('\t').next().unwrap().to_string()
}

/// Symlinks planted where ibi keeps its own files and folders are errors naming
/// them; nothing is written, read or deleted through them.
#[test]
fn regress_symlinked_internals() {
    let env = TestEnv::new();
    env.write("outside/keep.txt", b"must not change");
    let outside = env.path("outside");
    let before = crate::env::snapshot(&outside);
    env.write("x", b"x");
    for (own, dangling) in [
        (".ibip", false),
        (".ibi/journal", false),
        (".ibi/write.lock", true),
        (".ibi/minter.lock", true),
        (".ibi/deposited", false),
    ] {
        let root = env.own_subsystem(&format!("col-{}", own.replace(['/', '.'], "")));
        let path = Path::new(&root).join(own);
        let _ = fs::remove_dir_all(&path);
        let _ = fs::remove_file(&path);
        let target = if dangling { outside.join("created-by-ibi") } else { outside.clone() };
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let run = env.fails(&["deposit", &root, "x"], 2);
        assert!(run.stderr.contains(own) && run.stderr.contains("symlink"), "{own}: {}", run.stderr);
        assert_eq!(crate::env::snapshot(&outside), before, "{own}: nothing written outside");
    }
    // A symlinked alias folder `.ibip/<PREFIX>`.
    let root = env.own_subsystem("col-prefix");
    env.write("y", b"y");
    env.ok(&["deposit", &root, "y"]);
    let prefix_dir = fs::read_dir(Path::new(&root).join(".ibip")).unwrap().next().unwrap().unwrap().path();
    fs::remove_dir_all(&prefix_dir).unwrap();
    std::os::unix::fs::symlink(&outside, &prefix_dir).unwrap();
    let run = env.fails(&["deposit", &root, "x"], 2);
    assert!(run.stderr.contains("symlink"), "{}", run.stderr);
    assert_eq!(crate::env::snapshot(&outside), before, "no alias written outside");
}

/// An item folder, or its `data/`, that is a symlink is reported by verify and
/// refused by copy, migrate and resolve; what it points to is never read.
#[test]
fn regress_items_reached_through_symlinks() {
    let env = TestEnv::new();
    let src = env.filled("src", 2, 1);
    let dst = env.collection("dst");
    let name = first_name(&env, &src);
    let item = Path::new(&src).join(&name);
    fs::rename(&item, env.path("bag-outside")).unwrap();
    std::os::unix::fs::symlink(env.path("bag-outside"), &item).unwrap();
    let run = env.fails(&["verify", &src], 1);
    assert!(run.stdout.contains("stray entry"), "{}", run.stdout);
    assert!(env.run(&["resolve", &src, &name]).code != 0, "resolve refuses a symlinked item");
    for verb in ["copy", "migrate"] {
        let run = env.run(&[verb, &src, &dst, &name]);
        assert!(run.code == 1 || run.code == 2, "{verb}: {run:?}");
        assert!(env.path("bag-outside/bagit.txt").exists(), "{verb} left the outside bag alone");
        assert!(fs::symlink_metadata(&item).unwrap().file_type().is_symlink(), "{verb} did not move the link");
    }
    assert_eq!(env.ok(&["list", &dst]).lines().len(), 0);
    // data -> an outside folder: reported, never walked.
    // (list serves from the inventory, which still records the item now behind a link)
    let listed = env.ok(&["list", &src]);
    let other = listed.lines().iter().map(|l| l.split('\t').next().unwrap()).find(|n| *n != name).unwrap().to_string();
    let data = Path::new(&src).join(&other).join("data");
    fs::rename(&data, env.path("data-outside")).unwrap();
    env.write("data-outside/extra-secret.txt", b"secret");
    std::os::unix::fs::symlink(env.path("data-outside"), &data).unwrap();
    let run = env.fails(&["verify", &src, &other], 1);
    assert!(run.stdout.contains("special file") && !run.stdout.contains("extra-secret"), "{}", run.stdout);
    // --bag never reads bag-info.txt through a symlink.
    minimal_bag(&env, "bag", "f.txt", b"f");
    env.write("secret-info.txt", b"Secret: leaked\n");
    std::os::unix::fs::symlink(env.path("secret-info.txt"), env.path("bag/bag-info.txt")).unwrap();
    let run = env.run(&["deposit", &dst, "bag", "--bag"]);
    assert!(run.code != 0, "{run:?}");
    assert_eq!(env.ok(&["list", &dst]).lines().len(), 0);
}

/// FIFOs and endless files in items and bags never hang a run or exhaust memory.
#[test]
fn regress_special_files_hang() {
    let env = TestEnv::new();
    let src = env.filled("src", 3, 1);
    let names: Vec<String> =
        env.ok(&["list", &src]).lines().iter().map(|l| l.split('\t').next().unwrap().to_string()).collect();
    let fifo_tag = Path::new(&src).join(&names[0]).join("bag-info.txt");
    fs::remove_file(&fifo_tag).unwrap();
    sh(&format!("mkfifo '{}'", fifo_tag.display()));
    let payload = Path::new(&src).join(&names[1]).join("data/f0.txt");
    fs::remove_file(&payload).unwrap();
    sh(&format!("mkfifo '{}'", payload.display()));
    let zero = Path::new(&src).join(&names[2]).join("bag-info.txt");
    fs::remove_file(&zero).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let dst = env.collection("dst");
    for script in [
        format!("timeout 20 \"$IBI\" verify {src}"),
        format!("timeout 20 \"$IBI\" mirror {src} {dst}"),
        format!("timeout 20 \"$IBI\" copy {src} {dst}"),
    ] {
        let run = sh_in(env.root(), &script);
        assert_code(&run, 1, &script);
    }
    env.write("bag/bagit.txt", b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n");
    env.write("bag/manifest-sha256.txt", b"");
    fs::create_dir_all(env.path("bag/data")).unwrap();
    sh(&format!("mkfifo '{}'", env.path("bag/bag-info.txt").display()));
    let run = sh_in(env.root(), &format!("timeout 20 \"$IBI\" deposit {dst} bag --bag"));
    assert!(run.code == 1 || run.code == 2, "deposit --bag of a FIFO bag-info: {run:?}");
}

/// One entry that cannot be named or walked is reported; the rest of the run goes on.
#[test]
fn regress_one_bad_entry_stops_the_run() {
    let env = TestEnv::new();
    let src = env.filled("src", 3, 1);
    sh(&format!("mkdir \"{src}/$(printf 'bad\\377name')\""));
    let run = env.fails(&["verify", &src], 1);
    assert!(run.stdout.contains("not UTF-8"), "{}", run.stdout);
    assert_eq!(env.ok(&["list", &src]).lines().len(), 3);
    // One item with a folder too deep to walk.
    let name = first_name(&env, &src);
    let deep = Path::new(&src).join(&name).join("data");
    sh(&format!("cd '{}' && i=0 && while [ $i -lt 2100 ]; do mkdir a && cd a; i=$((i+1)); done", deep.display()));
    let dst = env.collection("dst");
    let run = env.run(&["mirror", &src, &dst]);
    assert_code(&run, 1, "mirror with one unwalkable item");
    assert_eq!(env.ok(&["list", &dst]).lines().len(), 2, "the healthy items are copied");
    let dst2 = env.collection("dst2");
    assert_code(&env.run(&["copy", &src, &dst2]), 1, "copy with one unwalkable item");
    assert_eq!(env.ok(&["list", &dst2]).lines().len(), 2);
}

/// Mirror never deletes what SRC holds but could not see (then with `--delete`;
/// now mirror never deletes at all).
#[test]
fn regress_mirror_delete_trusts_unseen() {
    let env = TestEnv::new();
    let src = env.filled("src", 3, 1);
    let dst = env.collection("dst");
    env.ok(&["mirror", &src, &dst]);
    // One SRC item reached through a symlinked folder; the other two are plain.
    let name = first_name(&env, &src);
    let real = env.path("moved-item");
    fs::rename(Path::new(&src).join(&name), &real).unwrap();
    std::os::unix::fs::symlink(&real, Path::new(&src).join(&name)).unwrap();
    let run = env.run(&["mirror", &src, &dst]);
    assert_code(&run, 1, "mirror over a symlinked SRC item");
    assert!(run.stdout.contains("stray entry"), "{}", run.stdout);
    assert_eq!(env.ok(&["list", &dst]).lines().len(), 3, "DST keeps every item");
    // A whole SRC folder behind a symlink: refused or reported, never deleted.
    let subdomain = name.split('/').next().unwrap().to_string();
    fs::remove_file(Path::new(&src).join(&name)).unwrap();
    fs::rename(&real, Path::new(&src).join(&name)).unwrap();
    fs::rename(Path::new(&src).join(&subdomain), env.path("moved-subdomain")).unwrap();
    std::os::unix::fs::symlink(env.path("moved-subdomain"), Path::new(&src).join(&subdomain)).unwrap();
    let run = env.run(&["mirror", &src, &dst]);
    assert!(run.code == 1 || run.code == 2, "{run:?}");
    assert_eq!(env.ok(&["list", &dst]).lines().len(), 3, "DST keeps every item");
}

/// The same item named twice, by name or by IBIp, is one item.
#[test]
fn regress_same_item_named_twice() {
    let env = TestEnv::new();
    let src = env.filled("src", 2, 1);
    let line = env.ok(&["list", &src]).lines()[0].to_string();
    let (name, ibip) = line.split_once('\t').unwrap();
    let dst = env.collection("dst");
    let run = env.ok(&["copy", &src, &dst, name, name, ibip]);
    assert!(run.stderr.contains("copied 1,"), "{}", run.stderr);
    env.ok(&["verify", &dst, name, ibip]);
    let dst2 = env.collection("dst2");
    let run = env.ok(&["migrate", &src, &dst2, name, &ibip.to_lowercase()]);
    assert!(run.stderr.contains("migrated 1,"), "{}", run.stderr);
    for root in [&src, &dst2] {
        assert!(crate::env::control_empty(root, "journal"), "{root}: no journal record left");
    }
}

/// A mirror into a DST too small for the whole batch copies what fits, then exits 3.
#[test]
fn regress_small_dst_copies_nothing() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root (CI runs as root)");
        return;
    }
    let env = TestEnv::new();
    let src = env.collection("src");
    for i in 0..30 {
        env.write(&format!("s/{i:02}/f.bin"), &vec![i as u8; 150_000]);
    }
    let paths: Vec<String> = (0..30).map(|i| env.path(&format!("s/{i:02}")).display().to_string()).collect();
    let mut args = vec!["-q", "deposit", "--each", src.as_str()];
    args.extend(paths.iter().map(String::as_str));
    env.ok(&args);
    let small = env.tmpfs("small", "2m");
    let dst = small.at("dst");
    env.ok(&["-q", "init", &dst, "--host", "small.example.org", "--ip", "192.0.2.9", "--granularity", "0.001"]);
    let run = env.run(&["mirror", &src, &dst]);
    let copied = env.ok(&["list", &dst]).lines().len();
    env.ok(&["verify", &dst]);
    assert_code(&run, 3, "mirror into a small DST");
    assert!(copied >= 3, "what fits is copied: {copied} of 30");
}

/// `mirror --checksum` repairs even where the filesystem cannot exchange two names.
#[test]
fn regress_exchange_unsupported() {
    let env = TestEnv::new();
    let src = env.filled("src", 2, 1);
    let dst = env.collection("dst");
    env.ok(&["mirror", &src, &dst]);
    let name = first_name(&env, &src);
    fs::write(Path::new(&dst).join(&name).join("data/f0.txt"), b"rotten").unwrap();
    let script = format!("strace -f -qq -o /dev/null -e trace=renameat2 -e inject=renameat2:error=EINVAL \"$IBI\" mirror --checksum {src} {dst}");
    let run = sh_in(env.root(), &script);
    assert!(run.code == 0 || run.code == 1, "{run:?}");
    env.ok(&["verify", &dst]);
    assert_eq!(env.identities(&src), env.identities(&dst));
}

/// A one-item deposit of a 4 MB file under strace, with `injects` (strace's
/// `-e inject=…` values); the rename into place always waits 3 s, so an
/// interrupt can be sent while it is under way.
fn traced_deposit(env: &TestEnv, root: &str, injects: &[&str]) -> Reaper {
    env.write("big/f.bin", &vec![7u8; 4_000_000]);
    let mut strace = std::process::Command::new("strace");
    strace.args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=renameat2,futex"]);
    strace.args(["-e", "inject=renameat2:delay_enter=3000000"]);
    for inject in injects {
        strace.args(["-e", &format!("inject={inject}")]);
    }
    strace
        .arg(ibi_bin())
        .env(crate::env::MINTER_DIR_ENV, crate::env::minter_dir(env.root()))
        .args(["-q", "deposit", root, "big"])
        .current_dir(env.root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Reaper(Some(strace.spawn().unwrap()))
}

/// Sends SIGINT to the traced deposit once its staged item is whole (its
/// tagmanifest written), so it lands in the 3-second rename into place.
fn interrupt_at_the_rename(root: &str, running: &mut Reaper) -> crate::env::Run {
    let tracer = running.0.as_ref().unwrap().id();
    let staged_whole = || {
        let staging = Path::new(root).join(".ibi/staging");
        fs::read_dir(staging).into_iter().flatten().flatten().any(|e| e.path().join("tagmanifest-sha256.txt").exists())
    };
    assert!(wait_until(10, staged_whole), "the item was staged");
    std::thread::sleep(Duration::from_millis(300));
    sh(&format!("pkill -INT -P {tracer} ibi || true"));
    running.0.take().unwrap().wait_with_output().unwrap().into()
}

/// SIGINT removes the command's own staging before exit 130; verify reports what a
/// killed writer left, with its size; killed atomic writes leave no temp files.
#[test]
fn regress_leftovers_after_interrupt() {
    let env = TestEnv::new();
    let root = env.collection("col");
    let mut running = traced_deposit(&env, &root, &[]);
    let out = interrupt_at_the_rename(&root, &mut running);
    assert_eq!(out.code, 130, "{out:?}");
    assert!(crate::env::control_empty(&root, "staging"), "staging removed on SIGINT");
    // What SIGKILL leaves is reported by verify, then cleared by the next writer.
    env.write_at(&Path::new(&root).join(".ibi/staging/item-killed/data/f.bin"), &vec![1u8; 1000]);
    env.write_at(&Path::new(&root).join(".ibi/journal/.ibi-tmp-killed"), b"half a record");
    let run = env.fails(&["verify", &root], 1);
    assert!(run.stdout.contains("leftover") && run.stdout.contains("1000 bytes"), "{}", run.stdout);
    env.write("x", b"x");
    env.ok(&["deposit", &root, "x"]);
    assert!(crate::env::control_empty(&root, "staging") && crate::env::control_empty(&root, "journal"));
    env.ok(&["verify", &root]);
}

/// An interrupt taken during the rename into place waits for the rename; the
/// run went on, finished its work and exited 0 before the handler's thread
/// (woken late on a loaded CI machine) could exit 130, after it had printed
/// "interrupted". Here the handler's wake-up is held 0.7 s by strace: its fourth
/// futex call is its wait for the staging guard (the signal is delivered to it,
/// the first thread that is not stopped in the traced rename; it posts and then
/// waits on ctrlc's semaphore first). The finished run now waits for the
/// handler's exit. The name on stdout shows the run did finish first.
#[test]
fn regress_a_run_finished_after_an_interrupt_exits_0() {
    let env = TestEnv::new();
    let root = env.collection("col");
    let mut running = traced_deposit(&env, &root, &["futex:delay_exit=700000:when=4"]);
    let out = interrupt_at_the_rename(&root, &mut running);
    assert!(out.stdout.contains("/20"), "the run finished its work while the handler was held: {out:?}");
    assert_eq!(out.code, 130, "{out:?}");
    assert!(out.stderr.contains("interrupted"), "{out:?}");
    assert!(crate::env::control_empty(&root, "staging"), "{out:?}");
    env.ok(&["verify", &root]);
}

/// A corrupt minter state is named, never echoed whole into the message.
#[test]
fn regress_corrupt_state_echoed() {
    let env = TestEnv::new();
    let root = env.collection("col");
    fs::write(Path::new(&root).join(".ibi/minter.state"), vec![b'9'; 100_000]).unwrap();
    let run = env.fails(&["mint", "-C", &root], 3);
    assert!(
        run.stderr.len() < 1000 && run.stderr.contains("minter.state"),
        "{} bytes: {}",
        run.stderr.len(),
        &run.stderr[..200.min(run.stderr.len())]
    );
}

/// A literal `%XX` in a file name: ibi writes RFC 8493 manifests and warns about each
/// such name; a bagit-python bag written the other way still deposits.
#[test]
fn regress_literal_percent_names() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("src/100% pure.txt", b"pure");
    env.write("src/My%20Report.pdf", b"report");
    let run = env.ok(&["deposit", &root, "src"]);
    assert!(run.stderr.contains("100% pure.txt") && run.stderr.contains("My%20Report.pdf"), "{}", run.stderr);
    let item = env.ok(&["resolve", &root, &first_name(&env, &root)]).stdout;
    let manifest = fs::read_to_string(Path::new(item.trim()).join("manifest-sha256.txt")).unwrap();
    assert!(manifest.contains("data/100%25 pure.txt") && manifest.contains("data/My%2520Report.pdf"), "{manifest}");
    env.ok(&["verify", &root]);
    // A bag made by a writer that never encodes `%` (bagit-python).
    minimal_bag(&env, "pybag", "My%25Report.pdf", b"raw");
    env.ok(&["deposit", &root, "pybag", "--bag"]);
    env.ok(&["verify", &root]);
}

/// Payload files keep their source's mtime, in deposit and in every transfer.
#[test]
fn regress_payload_mtimes_lost() {
    let env = TestEnv::new();
    let src = env.collection("src");
    env.write("d/old.txt", b"old");
    sh(&format!("touch -d '2001-02-03 04:05:06' '{}'", env.path("d/old.txt").display()));
    env.ok(&["deposit", &src, "d"]);
    let dst = env.collection("dst");
    env.ok(&["mirror", &src, &dst]);
    let name = first_name(&env, &src);
    for root in [&src, &dst] {
        let meta = fs::metadata(Path::new(root).join(&name).join("data/old.txt")).unwrap();
        let secs = meta.modified().unwrap().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let expected = sh("date -d '2001-02-03 04:05:06' +%s").trim().parse::<u64>().unwrap();
        assert_eq!(secs, expected, "{root}: the payload keeps its mtime");
    }
}

/// Rough edges of the command line: messages that fit the command, day-only
/// dates, JSON where asked.
#[test]
fn regress_cli_rough_edges() {
    let env = TestEnv::new();
    let run = env.fails(&["init", "new"], 2);
    assert!(run.stderr.contains("--host HOST is required") && !run.stderr.contains("-C ROOT"), "{}", run.stderr);
    let root = env.collection("col");
    env.write("x", b"x");
    env.ok(&["deposit", &root, "x"]);
    let today = sh("date -u +%Y-%m-%d").trim().to_string();
    assert_eq!(env.ok(&["list", &root, "--since", &today]).lines().len(), 1);
    assert_eq!(env.ok(&["list", &root, "--until", &today]).lines().len(), 1, "--until a day includes that day");
    assert_eq!(env.ok(&["list", &root, "--until", "2000-01-01"]).lines().len(), 0);
    let name = first_name(&env, &root);
    let run = env.ok(&["--json", "resolve", &root, &name]);
    let value: serde_json::Value = serde_json::from_str(run.stdout.trim()).expect("resolve --json prints JSON");
    assert_eq!(value["name"], name.as_str());
    let run = sh_in(env.root(), "\"$IBI\" -q mirror nowhere-a nowhere-b; true");
    assert!(run.stderr.contains("not an ibi collection"), "errors other than busy still print under -q");
}

/// Under -q, a busy lock (exit 75) prints nothing: cron mails any output.
#[test]
fn regress_quiet_busy_prints() {
    let env = TestEnv::new();
    let src = env.filled("src", 1, 1);
    let dst = env.collection("dst");
    let holder = std::process::Command::new("flock")
        .arg(Path::new(&dst).join(".ibi/write.lock"))
        .args(["sleep", "5"])
        .spawn()
        .unwrap();
    let _reaper = Reaper(Some(holder));
    assert!(wait_until(5, || env.run(&["mirror", &src, &dst]).code == 75));
    let run = env.run(&["-q", "mirror", &src, &dst]);
    assert_eq!(run.code, 75);
    assert_eq!((run.stdout.as_str(), run.stderr.as_str()), ("", ""), "silent under -q");
}

/// Makes a bag with bagit-python in `algorithms`, with tag files `mets.xml` and
/// `metadata/dc.xml` that its tagmanifests cover.
fn python_bag_with_tag_files(env: &TestEnv, dir: &str, algorithms: &[&str]) -> std::path::PathBuf {
    env.write(&format!("{dir}/report.txt"), b"the report");
    env.write(&format!("{dir}/figures/one.csv"), b"1,2,3\n");
    let python = crate::env::bagit_py().with_file_name("python");
    let script = format!(
        "import bagit, os\n\
         b = bagit.make_bag({dir:?}, checksums={algorithms:?}, bag_info={{'Contact-Name': 'Ana'}})\n\
         os.makedirs({dir:?} + '/metadata')\n\
         open({dir:?} + '/metadata/dc.xml', 'w').write('<dc>title</dc>')\n\
         open({dir:?} + '/mets.xml', 'w').write('<mets/>')\n\
         bagit.Bag({dir:?}).save(manifests=True)\n"
    );
    let out = std::process::Command::new(python).arg("-c").arg(script).current_dir(env.root()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    env.path(dir)
}

/// `deposit --bag` keeps the whole bag: tag files and folders, every manifest and
/// tagmanifest algorithm (adding sha256 to an md5-only bag), and `verify` checks
/// them all. A bag that fails any of its own digests is refused.
#[test]
fn regress_bag_deposited_partially() {
    let env = TestEnv::new();
    let root = env.collection("col");
    let md5_bag = python_bag_with_tag_files(&env, "md5bag", &["md5"]);
    let wide_bag = python_bag_with_tag_files(&env, "widebag", &["sha256", "sha512"]);
    let run = env.run(&["deposit", &root, "md5bag", "widebag", "--bag", "--move"]);
    assert_code(&run, 0, "deposit --bag of bags with tag files and other algorithms");
    assert!(!md5_bag.exists() && !wide_bag.exists(), "--move removed both bags whole: {}", run.stderr);
    let names: Vec<String> =
        env.ok(&["list", &root]).lines().iter().map(|l| l.split('\t').next().unwrap().into()).collect();
    assert_eq!(names.len(), 2);
    for (name, algorithms) in names.iter().zip([&["md5", "sha256"][..], &["sha256", "sha512"][..]]) {
        let item = std::path::PathBuf::from(env.ok(&["resolve", &root, name]).stdout.trim());
        assert_eq!(fs::read(item.join("metadata/dc.xml")).unwrap(), b"<dc>title</dc>", "{name} keeps tag folders");
        assert_eq!(fs::read(item.join("mets.xml")).unwrap(), b"<mets/>", "{name} keeps tag files");
        for algorithm in algorithms {
            assert!(item.join(format!("manifest-{algorithm}.txt")).is_file(), "{name}: manifest-{algorithm}.txt");
            let tags = fs::read_to_string(item.join(format!("tagmanifest-{algorithm}.txt"))).unwrap();
            for tag in ["metadata/dc.xml", "mets.xml", "bag-info.txt", "manifest-sha256.txt"] {
                assert!(tags.contains(tag), "{name}: tagmanifest-{algorithm}.txt covers {tag}: {tags}");
            }
        }
        let out = std::process::Command::new(crate::env::bagit_py()).arg("--validate").arg(&item).output().unwrap();
        assert!(out.status.success(), "bagit.py validates {name}: {}", String::from_utf8_lossy(&out.stderr));
    }
    env.ok(&["verify", &root]);
    let copy = env.path("copy");
    env.ok(&["init", copy.to_str().unwrap(), "--host", "copy.example.org"]);
    env.ok(&["copy", &root, copy.to_str().unwrap()]);
    env.ok(&["verify", copy.to_str().unwrap()]);

    // verify checks every tag file and every algorithm.
    let item = std::path::PathBuf::from(env.ok(&["resolve", &root, &names[0]]).stdout.trim());
    fs::write(item.join("metadata/dc.xml"), b"<dc>forged</dc>").unwrap();
    let run = env.fails(&["verify", &root], 1);
    assert!(run.stdout.contains("metadata/dc.xml"), "{}", run.stdout);
    fs::write(item.join("metadata/dc.xml"), b"<dc>title</dc>").unwrap();
    let md5 = fs::read_to_string(item.join("manifest-md5.txt")).unwrap();
    fs::write(item.join("manifest-md5.txt"), md5.replacen(&md5[..4], "0000", 1)).unwrap();
    let run = env.fails(&["verify", &root], 1);
    assert!(run.stdout.contains("manifest-md5.txt") && run.stdout.contains("md5: expected"), "{}", run.stdout);

    // Bags that fail their own digests in any algorithm are refused, and kept.
    let bad_md5 = python_bag_with_tag_files(&env, "badmd5", &["md5"]);
    fs::write(bad_md5.join("data/report.txt"), b"the rep0rt").unwrap();
    let run = env.fails(&["deposit", &root, "badmd5", "--bag", "--move"], 1);
    assert!(run.stderr.contains("md5") && run.stderr.contains("does not match"), "{}", run.stderr);
    let bad_tag = python_bag_with_tag_files(&env, "badtag", &["sha512"]);
    fs::write(bad_tag.join("metadata/dc.xml"), b"<dc>edited</dc>").unwrap();
    let run = env.fails(&["deposit", &root, "badtag", "--bag", "--move"], 1);
    assert!(run.stderr.contains("metadata/dc.xml") || run.stderr.contains("sha512"), "{}", run.stderr);
    for (dir, file, content) in
        [("holey", "fetch.txt", &b"http://x 1 data/y\n"[..]), ("sha3", "manifest-sha3.txt", b"")]
    {
        minimal_bag(&env, dir, "f.txt", b"f");
        env.write(&format!("{dir}/{file}"), content);
        let run = env.fails(&["deposit", &root, dir, "--bag", "--move"], 2);
        assert!(run.stderr.contains(file.trim_end_matches(".txt")), "{}", run.stderr);
    }
    assert!(bad_md5.join("data/report.txt").exists() && bad_tag.join("mets.xml").exists(), "refused bags stay");
    assert_eq!(env.ok(&["list", &root]).lines().len(), 2);
}

/// Subcommand names listed in the "Commands:" section of `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.split("Commands:")
        .nth(1)
        .unwrap_or("")
        .split("\n\n")
        .next()
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|name| name != "help")
        .collect()
}

/// Every command's help describes each positional argument and ends with examples;
/// `ibi man --dir` writes a page per command, and the main page lists exit codes.
#[test]
fn regress_help_without_examples() {
    let env = TestEnv::new();
    let top = env.ok(&["--help"]).stdout;
    assert!(top.contains("Exit codes:") && top.contains("75"), "{top}");
    let mut commands: Vec<Vec<String>> = subcommands(&top).into_iter().map(|c| vec![c]).collect();
    for nested in ["ibip", "pilin"] {
        let help = env.ok(&[nested, "--help"]).stdout;
        commands.extend(subcommands(&help).into_iter().map(|c| vec![nested.to_string(), c]));
    }
    assert!(commands.len() >= 18, "{commands:?}");
    for command in &commands {
        let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
        args.push("--help");
        let help = env.ok(&args).stdout;
        let examples = help.rsplit("Examples:").next().unwrap_or("");
        assert!(help.contains("\nExamples:\n") && examples.contains("ibi "), "{command:?} ends with examples:\n{help}");
        let positionals = help.split("Arguments:").nth(1).map(|s| s.split("\n\n").next().unwrap_or(""));
        let argument_lines = positionals.unwrap_or("").lines().filter(|l| l.trim_start().starts_with(['<', '[']));
        for line in argument_lines {
            let described = line.trim().split_once("  ").is_some_and(|(_, rest)| !rest.trim().is_empty());
            assert!(described, "{command:?}: positional without a description: {line:?}");
        }
    }
    let pages = env.path("man");
    env.ok(&["man", "--dir", pages.to_str().unwrap()]);
    for command in &commands {
        let page = pages.join(format!("ibi-{}.1", command.join("-")));
        assert!(page.is_file(), "{} is written", page.display());
    }
    let main = fs::read_to_string(pages.join("ibi.1")).unwrap();
    assert!(main.contains("Exit codes") && main.contains("130"), "the main page lists the exit codes");
}

/// On a terminal, progress shows items and bytes done and total, a percentage and
/// an ETA, and sizes are human-readable; a coarse minter says when it waits.
#[test]
fn regress_progress_without_totals() {
    let env = TestEnv::new();
    let root = env.collection("col");
    sh(&format!("head -c 400M /dev/zero > '{}'", env.path("big.bin").display()));
    env.ok(&["deposit", &root, "big.bin", "--move"]);
    // `script` gives ibi a terminal; COLUMNS keeps the bar on one wide line.
    let run = sh_in(env.root(), &format!("COLUMNS=200 script -qec '\"$IBI\" verify {root}' /dev/null"));
    assert_code(&run, 0, "verify on a terminal");
    let screen = run.stdout.replace('\r', "\n");
    assert!(screen.contains("verify 0/1 items") || screen.contains("verify 1/1 items"), "item totals: {screen}");
    assert!(screen.contains("%") && screen.contains("ETA") && screen.contains("/400.00 MiB"), "{screen}");
    assert!(screen.contains("400.00 MiB in "), "human-readable summary on a terminal: {screen}");
    let plain = env.ok(&["verify", &root]);
    assert!(plain.stderr.contains("419430400 bytes in "), "exact when no terminal: {}", plain.stderr);

    let args = ["mint", "--state", "s", "--host", "a.b.c", "--granularity", "60", "--count", "2"];
    let at = ["--at", "2026-01-01T00:00:30Z"];
    let run = env.ok(&[&args[..], &at[..]].concat());
    assert!(run.stderr.contains("waiting 30.0 s for the minter"), "{}", run.stderr);
    let run = env.ok(&[&["-q"][..], &args[..], &["--at", "2026-01-01T00:02:30Z"][..]].concat());
    assert_eq!(run.stderr, "", "silent under -q");
}

/// A file written over while the hot folder deposits it is not archived as if it
/// had been deposited: it stays in the inbox and becomes an item of its own.
#[test]
fn regress_hotfolder_changed_during_deposit() {
    let env = TestEnv::new();
    let root = env.collection("col");
    fs::create_dir_all(env.path("inbox")).unwrap();
    // Every renameat2 (placement, archiving) waits 1.5 s: the file is rewritten
    // after its item is placed and before the original is archived.
    let mut strace = std::process::Command::new("strace");
    strace
        .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=renameat2", "-e", "inject=renameat2:delay_enter=1500000"])
        .arg(ibi_bin())
        .env(crate::env::MINTER_DIR_ENV, crate::env::minter_dir(env.root()))
        .args(["watch", "inbox", &root, "--settle", "0.3"])
        .current_dir(env.root())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _watcher = Reaper(Some(strace.spawn().unwrap()));
    env.write("inbox/report.txt", b"first report");
    assert!(wait_until(30, || item_count(&env, &root) == 1), "first version deposited");
    env.write("inbox/report.txt", b"second report, written over the first");
    assert!(wait_until(40, || item_count(&env, &root) == 2), "the rewritten file is deposited too");
    let contents: Vec<Vec<u8>> = env
        .ok(&["list", &root])
        .stdout
        .lines()
        .map(|l| {
            let path = env.ok(&["resolve", &root, l.split('\t').next().unwrap()]).stdout;
            fs::read(Path::new(path.trim()).join("data/report.txt")).unwrap()
        })
        .collect();
    assert!(
        contents.contains(&b"first report".to_vec())
            && contents.contains(&b"second report, written over the first".to_vec())
    );
}

/// Two collections of one subsystem on one machine share its distributor state, so
/// they never mint one name, even at one instant and from concurrent processes.
#[test]
fn regress_two_collections_of_one_subsystem_share_names() {
    let env = TestEnv::new();
    let roots: Vec<String> = ["a", "b"].iter().map(|n| env.path(n).to_string_lossy().into_owned()).collect();
    // Two collections made minting before one machine refused the second (the
    // second is made with another machine's minter folder, so its init passes):
    // both share this machine's distributor state when they mint here.
    let init = |root: &str, granularity: &str, machine: &str| {
        let args = ["-q", "init", root, "--host", "shared.example.org", "--granularity", granularity];
        let out = env.command(&args).env(crate::env::MINTER_DIR_ENV, env.path(machine)).output().unwrap();
        assert_code(&crate::env::Run::from(out), 0, "init");
    };
    init(&roots[0], "1", ".ibi-minters");
    init(&roots[1], "1", "other-machine");
    let at = "2026-03-01T12:00:00Z";
    let first = env.ok(&["mint", "-C", &roots[0], "--at", at]).stdout;
    let second = env.ok(&["mint", "-C", &roots[1], "--at", at]).stdout;
    assert_ne!(first, second, "one instant, two collections of one subsystem, two names");

    for (root, machine) in roots.iter().zip([".ibi-minters", "other-machine"]) {
        std::fs::remove_dir_all(root).unwrap();
        init(root, "0.01", machine);
    }
    let workers: Vec<_> = (0..4)
        .map(|p| {
            let root = roots[p % 2].clone();
            let file = env.write(&format!("src/{p}/f.txt"), format!("worker {p}").as_bytes());
            let mut cmd = env.command(&["-q", "deposit", "--duplicate", &root]);
            cmd.arg(&file);
            std::thread::spawn(move || {
                (0..8)
                    .map(|_| {
                        let out = cmd.output().unwrap();
                        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                        String::from_utf8_lossy(&out.stdout).split('\t').next().unwrap().trim().to_string()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut names: Vec<String> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    assert_eq!(names.len(), 32);
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 32, "every name distinct across both collections");
}

/// The minter never hands out a name at or before one the collection holds, whatever
/// its state files say: restored from a backup, or left behind by a migration.
#[test]
fn regress_minter_behind_held_names() {
    let env = TestEnv::new();
    let fresh_machine = |args: &[&str], dir: &str| {
        let out = env.command(args).env(crate::env::MINTER_DIR_ENV, env.path(dir)).output().unwrap();
        crate::env::Run::from(out)
    };
    let root = env.collection("col");
    env.write("x", b"x");
    let held = env.ok(&["deposit", &root, "x"]).stdout.split('\t').next().unwrap().trim().to_string();
    let date = env.ok(&["--json", "parse", &held]).stdout;
    let date: serde_json::Value = serde_json::from_str(date.lines().next().unwrap()).unwrap();
    let date = date["date"].as_str().unwrap().to_string();
    // A restored state: the collection's file is gone, and so is the machine's.
    fs::remove_file(Path::new(&root).join(".ibi/minter.state")).unwrap();
    let run = fresh_machine(&["mint", "-C", &root, "--at", &date], "restored-machine");
    assert_code(&run, 0, "mint after a restore");
    let minted = run.stdout.split('\t').next().unwrap().trim().to_string();
    assert_ne!(minted, held, "never the name of an item the collection holds");
    assert!(minted > held, "{minted} comes after {held}");

    // A migration to a new machine: the new collection's states know nothing of the items.
    let new = env.path("new").to_string_lossy().into_owned();
    let run = fresh_machine(&["-q", "init", &new, "--like", &root], "new-machine");
    assert_code(&run, 0, "init on the new machine");
    assert_code(&fresh_machine(&["-q", "migrate", &root, &new], "new-machine"), 0, "migrate");
    assert_code(&fresh_machine(&["-q", "handover", &root, &new], "new-machine"), 0, "handover");
    let run = fresh_machine(&["mint", "-C", &new, "--at", &date], "new-machine");
    let minted = run.stdout.split('\t').next().unwrap().trim().to_string();
    assert!(minted > held, "after a migration the new collection mints after {held}, not {minted}");
}

/// The minter's floor kept in `.ibi/held-floor` (a deposit at a million items
/// read its year's folder whole, 0.3 s, before its first item): a name placed
/// behind ibi's back after the floor was kept changes the folder's stamp, so
/// the kept floor is not trusted and the name is found; a restored state never
/// mints at or before it.
#[test]
fn regress_held_floor_hides_a_name_placed_after_it_was_kept() {
    let env = TestEnv::new();
    let (root, held) = one_item_deposited(&env);
    let kept = fs::read_to_string(Path::new(&root).join(".ibi/held-floor")).expect("the deposit kept its floor");
    assert!(kept.starts_with("ibi-held-floor-v1\t"), "{kept}");
    let (year_dir, _) = held.rsplit_once('/').unwrap();
    let placed = format!("{year_dir}/{}", suffix_of(seconds_after(&held, 5)));
    fs::create_dir(Path::new(&root).join(&placed)).unwrap();
    let minted = mint_after_a_restore(&env, &root, &held);
    let date = |name: &str| ibi::RepositoryName::parse(name).unwrap().date();
    assert!(date(&minted) > date(&placed), "{minted} comes after the folder {placed}");
}

/// While the newest year's folder keeps its stamp, the kept floor answers
/// without a read of the folder: a kept floor moved later by hand (the stamp
/// left as it was) is what a restored minter starts after.
#[test]
fn the_held_floor_is_answered_from_its_cache_while_the_folder_is_unchanged() {
    let env = TestEnv::new();
    let (root, held) = one_item_deposited(&env);
    let cache = Path::new(&root).join(".ibi/held-floor");
    let kept = fs::read_to_string(&cache).unwrap();
    let (fields, _) = kept.trim_end().rsplit_once('\t').unwrap();
    let moved = seconds_after(&held, 5);
    fs::write(&cache, format!("{fields}\t{}\n", moved.to_decimal())).unwrap();
    let minted = ibi::RepositoryName::parse(&mint_after_a_restore(&env, &root, &held)).unwrap();
    assert!(minted.date() > moved, "{minted} starts after the kept floor {moved}");
}

/// A new collection with one item deposited: its root and the item's name.
fn one_item_deposited(env: &TestEnv) -> (String, String) {
    let root = env.collection("col");
    env.write("x", b"x");
    let held = env.ok(&["deposit", &root, "x"]).stdout.split('\t').next().unwrap().trim().to_string();
    (root, held)
}

/// The date `seconds` after the name `held`'s.
fn seconds_after(held: &str, seconds: i128) -> ibi::Timestamp {
    ibi::RepositoryName::parse(held).unwrap().date().checked_add_nanos(seconds * 1_000_000_000)
}

/// A name's suffix for `date`, to the second (the test needs the same year as now).
fn suffix_of(date: ibi::Timestamp) -> String {
    let c = date.calendar().unwrap();
    format!("{:02}.{:02}.{:02}.{:02}.{:02}", c.month, c.day, c.hour, c.minute, c.second)
}

/// Mints from `root` with its own state file removed and a new machine-wide
/// state, as a restore from a backup leaves them, asking for `held`'s date.
fn mint_after_a_restore(env: &TestEnv, root: &str, held: &str) -> String {
    let _ = fs::remove_file(Path::new(root).join(".ibi/minter.state"));
    let date = ibi::RepositoryName::parse(held).unwrap().date().to_rfc3339();
    let out = env
        .command(&["mint", "-C", root, "--at", &date])
        .env(crate::env::MINTER_DIR_ENV, env.path("restored-machine"))
        .output()
        .unwrap();
    let run = crate::env::Run::from(out);
    assert_code(&run, 0, "mint after a restore");
    run.stdout.split('\t').next().unwrap().trim().to_string()
}

/// An item that vanished from a collection (its folder deleted, its alias left) is
/// reported by verify, and mirror never takes its backup with it.
#[test]
fn regress_vanished_item_takes_its_backup() {
    let env = TestEnv::new();
    let src = env.filled("src", 3, 1);
    let dst = env.collection("dst");
    env.ok(&["mirror", &src, &dst]);
    let victim = first_name(&env, &src);
    fs::remove_dir_all(Path::new(&src).join(&victim)).unwrap();
    let run = env.fails(&["verify", &src], 1);
    assert!(run.stdout.contains(&victim) && run.stdout.contains("missing"), "{}", run.stdout);
    let run = env.fails(&["mirror", &src, &dst], 1);
    assert!(run.stdout.contains(&victim) && run.stdout.contains("vanished"), "{}", run.stdout);
    assert_eq!(item_count(&env, &dst), 3, "DST keeps the vanished item's copy");
    env.ok(&["verify", &dst]);
    let run = env.fails(&["mirror", &src, &dst], 1);
    assert_eq!(item_count(&env, &dst), 3, "and keeps it on the next run too: {}", run.stdout);
}

/// `repair --from` brings back a lost item, replaces a damaged one only with a copy
/// of the same identity, and restores a lost alias; a copy of another identity is
/// never used.
#[test]
fn regress_no_way_to_repair_from_a_mirror() {
    let env = TestEnv::new();
    let src = env.filled("src", 4, 2);
    let backup = env.collection("backup");
    env.ok(&["mirror", &src, &backup]);
    let before = env.identities(&src);
    let names: Vec<String> = before.keys().cloned().collect();
    // Lost: the folder is gone, the alias is left. Damaged: a flipped payload file.
    fs::remove_dir_all(Path::new(&src).join(&names[0])).unwrap();
    fs::write(Path::new(&src).join(&names[1]).join("data/f0.txt"), b"rotten").unwrap();
    // A lost alias.
    let ibip = env
        .ok(&["list", &src])
        .stdout
        .lines()
        .find(|l| l.starts_with(&names[2]))
        .unwrap()
        .split('\t')
        .nth(1)
        .unwrap()
        .to_string();
    fs::remove_file(Path::new(&src).join(".ibip").join(&ibip)).unwrap();
    env.fails(&["verify", &src], 1);
    let dry = env.ok(&["repair", &src, "--from", &backup, "--dry-run"]);
    assert!(dry.stderr.contains("dry run"), "{}", dry.stderr);
    env.fails(&["verify", &src], 1);
    let run = env.ok(&["repair", &src, "--from", &backup]);
    assert!(run.stderr.contains("copied 1") && run.stderr.contains("replaced 1"), "{}", run.stderr);
    env.ok(&["verify", &src]);
    assert_eq!(env.identities(&src), before, "every item is back, unchanged");

    // A damaged item whose only other copy is of another identity is left alone.
    let other = env.collection("other");
    env.ok(&["mirror", &src, &other]);
    let info = Path::new(&other).join(&names[3]).join("bag-info.txt");
    let mut text = fs::read_to_string(&info).unwrap();
    text.push_str("Note: edited elsewhere\n");
    fs::write(&info, text).unwrap();
    sh(&format!(
        "cd '{}' && sha256sum bagit.txt bag-info.txt manifest-sha256.txt > tagmanifest-sha256.txt",
        Path::new(&other).join(&names[3]).display()
    ));
    fs::write(Path::new(&src).join(&names[3]).join("data/f0.txt"), b"rotten").unwrap();
    let run = env.fails(&["repair", &src, "--from", &other, &names[3]], 1);
    assert!(run.stdout.contains("identity digest"), "{}", run.stdout);
    assert_eq!(fs::read(Path::new(&src).join(&names[3]).join("data/f0.txt")).unwrap(), b"rotten", "left untouched");
}

/// After a migration the old collection can be retired: it keeps serving what it
/// holds, but mints no name its successor could also mint.
#[test]
fn regress_old_collection_keeps_minting() {
    let env = TestEnv::new();
    let old = env.filled("old", 2, 1);
    let new = env.collection("new");
    env.ok(&["mirror", &old, &new]);
    env.ok(&["retire", &old]);
    env.write("late.txt", b"late");
    let run = env.fails(&["deposit", &old, "late.txt"], 2);
    assert!(run.stderr.contains("retired"), "{}", run.stderr);
    assert!(env.path("late.txt").exists(), "the source is untouched");
    env.fails(&["mint", "-C", &old], 2);
    env.ok(&["verify", &old]);
    assert_eq!(env.ok(&["list", &old]).lines().len(), 2);
    env.ok(&["mirror", &old, &new]);
    env.ok(&["handover", &old, &new]);
    env.ok(&["deposit", &new, "late.txt"]);
}

/// A wrong SRC (another collection, holding one item) given to the README's old
/// cron line `mirror --delete --max-delete 100` deleted the mirror's items. Mirror
/// never deletes now: `--delete` is refused with the reason, and a plain mirror
/// from the wrong SRC only adds what it holds.
#[test]
fn regress_wrong_src_empties_the_mirror() {
    let env = TestEnv::new();
    let real = env.filled("real", 20, 1);
    let wrong = env.filled("wrong", 1, 1);
    let dst = env.collection("dst");
    env.ok(&["-q", "mirror", &real, &dst]);
    let before = env.identities(&dst);
    let run = env.run(&["-q", "mirror", &wrong, &dst, "--delete", "--max-delete", "100"]);
    assert_code(&run, 2, "mirror --delete from a wrong SRC");
    assert_eq!(env.identities(&dst), before, "not one mirror item is deleted");
    env.ok(&["-q", "mirror", &wrong, &dst]);
    let mut expected = before;
    expected.extend(env.identities(&wrong));
    assert_eq!(env.identities(&dst), expected, "DST keeps every item and gains the wrong SRC's one");
}

/// Two collections that minted one name for different items (as two collections
/// of one subsystem could, each with its own minter state): mirror replaced DST's
/// item with SRC's and said "replaced 1". Now it is a conflict and DST's item stays.
/// (Minute granularity: both deposits take the minute's name even when a loaded
/// machine lets the faked clock pass a second between them.)
#[test]
fn regress_mirror_replaces_an_unrelated_item() {
    let env = TestEnv::new();
    let (a, b) = (env.path("a"), env.path("b"));
    for (root, content) in [(&a, "item of A"), (&b, "item of B")] {
        let root = root.display();
        let script = format!(
            "IBI_MINTER_DIR={root}-minters \"$IBI\" -q init {root} --host shared.example.org --ip 192.0.2.9 --granularity 60 && echo '{content}' > f.txt && \
             IBI_MINTER_DIR={root}-minters faketime '2026-03-01 12:00:00' \"$IBI\" -q deposit {root} f.txt"
        );
        assert_code(&sh_in(env.root(), &script), 0, "deposit at one faked instant");
    }
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    assert_eq!(first_name(&env, a), first_name(&env, b), "the same name, for different items");
    // Two minting collections are refused at first contact now; B stops minting, so
    // that mirror meets the clash its two machines made before it could see them.
    env.ok(&["retire", b]);
    let before = env.identities(b);
    let run = env.run(&["mirror", a, b]);
    assert_code(&run, 1, "mirror of an unrelated item under one name");
    assert!(run.stdout.contains("conflict") && run.stderr.contains("replaced 0,"), "{run:?}");
    assert_eq!(env.identities(b), before, "B's item is untouched");
    let name = first_name(&env, b);
    assert_eq!(fs::read_to_string(Path::new(b).join(&name).join("data/f.txt")).unwrap(), "item of B\n");
}

/// There was no way to correct an item's metadata, add a file, withdraw an item,
/// see an item's metadata, or take one version out as a bag.
#[test]
fn regress_no_way_to_correct_or_withdraw_an_item() {
    let env = TestEnv::new();
    let lib = env.filled("lib", 2, 1);
    let name = first_name(&env, &lib);
    let extra = env.write("extra.txt", b"extra\n");
    env.ok(&["update", &lib, &name, "--meta", "Title=Corrected", "--add", extra.to_str().unwrap()]);
    let shown = env.ok(&["show", &lib, &name]).stdout;
    assert!(shown.contains("Title: Corrected") && shown.contains("version:  2 of 2"), "{shown}");
    env.ok(&["export", &lib, &name, env.path("out").to_str().unwrap(), "--version", "1"]);
    assert!(env.path("out/bagit.txt").is_file() && !env.path("out/data/extra.txt").exists());
    env.ok(&["withdraw", &lib, &name, "--reason", "superseded"]);
    assert_code(&env.run(&["resolve", &lib, &name]), 1, "resolve of a withdrawn item");
    assert_eq!(item_count(&env, &lib), 1);
    env.ok(&["verify", &lib]);
}

/// `HOST:PATH` was taken for a local path: `ibi init lab:/srv/x` made a local
/// folder named `lab:`. It must reach the far host or fail, never make a folder.
#[test]
fn regress_host_path_becomes_a_local_folder() {
    let env = TestEnv::new();
    let run = env.far_run(
        "false",
        &["init", "lab:x", "--host", "test.ibi.example.org", "--ip", "192.0.2.30", "--granularity", "0.001"],
    );
    assert_code(&run, 3, "init of an unreachable far collection");
    assert!(!env.path("lab:x").exists(), "init made a local folder named lab:x");
}

/// A far collection was "not an ibi collection": mirroring to or from one over
/// ssh could not be done at all (only an unverified rsync of the whole tree).
#[test]
fn regress_far_collection_unreachable() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "", None);
    let src = env.filled("src", 4, 2);
    let dst = env.collection("dst");
    env.far_ok(&rsh, &["-q", "mirror", &src, &format!("lab:{dst}")]);
    assert_eq!(env.identities(&dst), env.identities(&src));
}

/// `deposit --move` read and removed its sources by path: a source folder swapped
/// for a symlink after planning made ibi copy the outside file into the item, then
/// delete it. Driven through the library, so that the swap falls exactly between
/// planning and copying: the outside file must be neither deposited nor removed.
#[test]
fn regress_move_follows_a_source_folder_swapped_for_a_symlink() {
    use ibi::ops::deposit::{deposit_batch, remove_moved, DepositOptions};
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("src/keep.txt", b"keep");
    env.write("src/sub/f.txt", b"inside");
    let outside = env.write("outside/f.txt", b"SECRET");
    let plan = ibi::ops::source::plan_paths(&[env.path("src")], false).unwrap();
    fs::rename(env.path("src/sub"), env.path("sub.moved")).unwrap();
    std::os::unix::fs::symlink(env.path("outside"), env.path("src/sub")).unwrap();
    let store = ibi::store::local::Collection::open(Path::new(&root)).unwrap();
    let writer = ibi::store::Store::begin_write(&store, ibi::store::LockWait::No).unwrap();
    let options = DepositOptions { move_sources: true, ..DepositOptions::default() };
    let clock = ibi::id::minter::SystemClock;
    let done = deposit_batch(writer.as_ref(), std::slice::from_ref(&plan), &options, &clock, &ibi::ops::Silent, None);
    if let Ok(outcomes) = &done {
        remove_moved(&plan, &outcomes[0].stamps, &ibi::ops::Silent);
    }
    drop(writer);
    assert_eq!(fs::read(&outside).unwrap(), b"SECRET", "the outside file was removed through the symlink");
    for line in env.ok(&["list", &root]).lines() {
        let name = line.split('\t').next().unwrap();
        let copied = fs::read(Path::new(&root).join(name).join("data/sub/f.txt")).unwrap_or_default();
        assert_ne!(copied, b"SECRET", "the outside file was deposited through the symlink");
    }
}

/// A file rewritten in place with its modification time put back looked unchanged
/// to `--move`, which deleted it although its bytes were never deposited.
#[test]
fn regress_move_removes_a_file_rewritten_with_its_mtime_restored() {
    use ibi::ops::deposit::{deposit_batch, remove_moved, DepositOptions};
    let env = TestEnv::new();
    let root = env.collection("col");
    let file = env.write("src/f.txt", b"version one");
    let plan = ibi::ops::source::plan_paths(&[env.path("src")], false).unwrap();
    let store = ibi::store::local::Collection::open(Path::new(&root)).unwrap();
    let writer = ibi::store::Store::begin_write(&store, ibi::store::LockWait::No).unwrap();
    let options = DepositOptions { move_sources: true, ..DepositOptions::default() };
    let clock = ibi::id::minter::SystemClock;
    let outcomes =
        deposit_batch(writer.as_ref(), std::slice::from_ref(&plan), &options, &clock, &ibi::ops::Silent, None).unwrap();
    drop(writer);
    // Rewritten in place, same length, its mtime put back (as `cp -p` or `touch -r` would).
    let mtime = fs::metadata(&file).unwrap().modified().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    fs::write(&file, b"version two").unwrap();
    fs::File::options().write(true).open(&file).unwrap().set_modified(mtime).unwrap();
    remove_moved(&plan, &outcomes[0].stamps, &ibi::ops::Silent);
    assert_eq!(fs::read(&file).unwrap(), b"version two", "a file changed after its copy was removed");
}

/// `ibi show` wrote ESC and BEL from bag-info straight to the terminal (a title
/// can set the window title or worse). Control characters are now escaped in every
/// human output.
#[test]
fn regress_terminal_escapes_from_bag_info() {
    use sha2::{Digest, Sha256};
    let env = TestEnv::new();
    let root = env.collection("col");
    let payload = b"payload\n";
    env.write("bag/bagit.txt", b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n");
    env.write("bag/bag-info.txt", "Contact-Name: \u{1b}]0;owned\u{7}\u{1b}[31mred\n".as_bytes());
    env.write("bag/data/a.txt", payload);
    env.write("bag/manifest-sha256.txt", format!("{:x}  data/a.txt\n", Sha256::digest(payload)).as_bytes());
    let name = env.ok(&["deposit", "--bag", &root, "bag"]).pairs()[0].0.clone();
    let shown = env.ok(&["show", &root, &name]).stdout;
    assert!(shown.contains("Contact-Name"), "{shown}");
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
        "raw control characters reached the terminal: {shown:?}"
    );
    assert!(shown.contains("\\x1b]0;owned\\x07"), "{shown:?}");
}

/// Exit codes disagreed between commands for one kind of request: an export to a
/// folder that exists said 1 (problems in data) while an unknown name said 2. The
/// rule: what the command names is missing or taken is invalid input, exit 2;
/// exit 1 is for problems found in the data.
#[test]
fn regress_exit_codes_disagree_across_commands() {
    let env = TestEnv::new();
    let root = env.filled("lib", 1, 1);
    let name = env.ok(&["list", &root]).pairs()[0].0.clone();
    let unknown = "ibi.example.org/test/2001/01.01.00.00";
    for args in [vec!["resolve", &root, unknown], vec!["show", &root, unknown], vec!["export", &root, unknown, "x"]] {
        env.fails(&args, 2);
    }
    fs::create_dir_all(env.path("taken")).unwrap();
    let taken = env.path("taken").to_string_lossy().into_owned();
    let run = env.fails(&["export", &root, &name, &taken], 2);
    assert!(run.stderr.contains("already exists"), "{}", run.stderr);
}

/// The item folders on disk under a collection (the four levels of a name).
fn items_on_disk(root: &str) -> usize {
    let out = sh(&format!("find '{root}' -mindepth 4 -maxdepth 4 -type d -not -path '*/.ibi/*' | wc -l"));
    out.trim().parse().unwrap()
}

/// With the inventory locked by another program, `deposit` waited a minute, then
/// placed the item, exited 1 ("database is locked") and never printed its name;
/// with it read-only, the same. A write now asks the inventory first: a lock held
/// elsewhere is busy (exit 75) within seconds and a read-only inventory is an
/// operational failure (exit 3), both before anything is placed.
#[test]
fn regress_locked_inventory_places_the_item_and_hides_its_name() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    env.write("src/a.txt", b"alpha\n");
    let src = env.path("src/a.txt").to_string_lossy().into_owned();
    let inventory = format!("{root}/.ibi/inventory.sqlite");
    let hold = "import sqlite3, sys, time\n\
        c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
        c.execute('BEGIN EXCLUSIVE')\n\
        print('locked', flush=True)\n\
        time.sleep(25)\n";
    let mut holder =
        std::process::Command::new("python3").args(["-c", hold, &inventory]).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "locked");
    let _holder = Reaper(Some(holder));
    let started = std::time::Instant::now();
    let locked = env.run(&["deposit", &root, &src]);
    assert_code(&locked, 75, "deposit with the inventory locked elsewhere");
    assert!(started.elapsed() < Duration::from_secs(20), "it said so promptly: {:?}", started.elapsed());
    assert!(locked.stderr.contains("inventory.sqlite"), "{}", locked.stderr);
    assert_eq!(items_on_disk(&root), 0, "nothing was placed: {}", locked.stderr);
    drop(_holder);
    if is_root() {
        sh(&format!("mount --bind '{inventory}' '{inventory}' && mount -o remount,ro,bind '{inventory}'"));
        let read_only = env.run(&["deposit", &root, &src]);
        sh(&format!("umount '{inventory}'"));
        assert_code(&read_only, 3, "deposit with a read-only inventory");
        assert!(read_only.stderr.contains("inventory.sqlite"), "{}", read_only.stderr);
        assert_eq!(items_on_disk(&root), 0, "nothing was placed: {}", read_only.stderr);
    }
    env.ok(&["-q", "deposit", &root, &src]);
    assert_eq!(item_count(&env, &root), 1);
    env.ok(&["verify", &root]);
}

/// Issue 59 (smaller traps): with `--follow-symlinks`, a link whose target
/// was gone stopped the deposit as an I/O error (exit 3) naming only the first
/// such link, so a folder of them took a run each. Every dangling link is now
/// named in one refusal (exit 2).
#[test]
fn regress_dangling_links_reported_one_per_run() {
    let env = TestEnv::new();
    let c = env.collection("c");
    let src = env.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("kept.txt"), b"kept\n").unwrap();
    for (link, target) in [("a", "gone-1"), ("b", "gone-2")] {
        std::os::unix::fs::symlink(env.path(target), src.join(link)).unwrap();
    }
    let run = env.fails(&["deposit", &c, src.to_str().unwrap(), "--follow-symlinks"], 2);
    assert!(
        run.stderr.contains("src/a (symlink to a missing target)")
            && run.stderr.contains("src/b (symlink to a missing target)"),
        "{}",
        run.stderr
    );
}

/// Issue 59 (smaller traps): dates in messages for people carried
/// nanoseconds (`moved to … on 2026-11-28T15:30:37.031483365Z`, `handed
/// minting over to … on …`). They are to the second.
#[test]
fn regress_dates_for_people_carry_nanoseconds() {
    let env = TestEnv::new();
    let a = env.filled("a", 1, 1);
    let b = env.path("b").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &b, "--like", &a]);
    env.ok(&["-q", "handover", &a, &b]);
    env.ok(&["-q", "migrate", &a, &b]);
    let name = env.ok(&["list", &b]).stdout.split('\t').next().unwrap().to_string();
    let moved = env.fails(&["show", &a, &name], 1);
    let refused = env.fails(&["deposit", &a, env.write("x/f.txt", b"x\n").to_str().unwrap()], 2);
    for said in [moved.stderr, refused.stderr] {
        let date = said.split(" on ").nth(1).unwrap_or_default();
        assert!(date.len() >= 20 && !date[..20].contains('.') && date.as_bytes()[19] == b'Z', "{said}");
    }
}

/// Issue 59 (smaller traps): on a terminal, progress began with frames of
/// `deposit 0/0 items 0 B/0 B 100%` while the survey counted: a finished bar
/// for work not yet started. Until there is a total, the line says it is
/// counting; the bar and its percentage come with the first bytes to count.
#[test]
fn regress_progress_starts_at_0_of_0() {
    let env = TestEnv::new();
    let root = env.collection("col");
    for i in 0..3000 {
        env.write(&format!("src/f{i}.txt"), format!("{i}\n").as_bytes());
    }
    let run = sh_in(env.root(), &format!("COLUMNS=200 script -qec '\"$IBI\" deposit {root} src' /dev/null"));
    assert_code(&run, 0, "deposit on a terminal");
    let screen = run.stdout.replace('\r', "\n");
    assert!(!screen.contains("0/0 items") && !screen.contains("0 B/0 B"), "{screen}");
    assert!(screen.contains("deposit 0/1 items") || screen.contains("deposit 1/1 items"), "{screen}");
}

/// Issue 59 (smaller traps): a first version is dated by its name, which may
/// be up to the subsystem's granularity (a minute, the standard's shortest
/// date) before the deposit; `show` gave it as the version's date without a
/// word. It says so now.
#[test]
fn regress_show_presents_the_name_date_as_the_deposit_date() {
    let env = TestEnv::new();
    let root = env.path("coarse").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &root, "--host", "coarse.example.org", "--ip", "192.0.2.44", "--granularity", "60"]);
    env.write("src/a.txt", b"a\n");
    let name = env.ok(&["deposit", &root, env.path("src").to_str().unwrap()]).pairs()[0].0.clone();
    env.ok(&["-q", "update", &root, &name, "--meta", "Round=2"]);
    let shown = env.ok(&["show", &root, &name]).stdout;
    let history: Vec<&str> = shown.lines().skip_while(|l| *l != "history:").skip(1).take(2).collect();
    assert!(history[0].starts_with("  1 ") && history[0].ends_with("(the name's date)"), "{shown}");
    assert!(!history[1].contains("the name's date"), "a later version has its own date: {shown}");
}
