//! The hot folder: a slowly written file is deposited once and complete, ten
//! entries dropped at once become ten items, entries left while it was down
//! are picked up at start, and SIGTERM stops it cleanly.

use std::fs;
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use crate::env::{sh, wait_until, Reaper, TestEnv};

fn start_watch(env: &TestEnv, root: &str, extra: &[&str]) -> Reaper {
    let mut args = vec!["watch", "inbox", root, "--settle", "1"];
    args.extend_from_slice(extra);
    Reaper(Some(env.command(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn watch")))
}

fn receipts(env: &TestEnv) -> Vec<String> {
    let mut found: Vec<String> = fs::read_dir(env.path("inbox/.deposited/.receipts"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| n.ends_with(".receipt")).collect())
        .unwrap_or_default();
    found.sort();
    found
}

fn item_count(env: &TestEnv, root: &str) -> usize {
    env.ok(&["list", root]).lines().len()
}

/// Stops the watcher with SIGTERM and checks it exits 0.
fn stop(mut reaper: Reaper) {
    let child = reaper.0.as_mut().unwrap();
    sh(&format!("kill -TERM {}", child.id()));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "watch exited with {status}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "watch did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    }
    reaper.0 = None;
}

#[test]
fn a_slowly_written_file_is_deposited_once_and_complete() {
    let env = TestEnv::new();
    let root = env.collection("col");
    fs::create_dir(env.path("inbox")).unwrap();
    let watcher = start_watch(&env, &root, &[]);
    let mut file = fs::File::create(env.path("inbox/slow.dat")).unwrap();
    let mut expected = Vec::new();
    for i in 0..8u8 {
        let chunk = vec![i; 4096];
        file.write_all(&chunk).unwrap();
        file.flush().unwrap();
        expected.extend_from_slice(&chunk);
        std::thread::sleep(Duration::from_millis(400));
    }
    drop(file);
    assert!(wait_until(30, || receipts(&env).len() == 1), "no receipt");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(item_count(&env, &root), 1, "deposited exactly once");
    let receipt = fs::read_to_string(env.path("inbox/.deposited/.receipts/slow.dat.receipt")).unwrap();
    let name = receipt.split('\t').next().unwrap();
    let path = env.ok(&["resolve", &root, name]).stdout;
    assert_eq!(fs::read(std::path::Path::new(path.trim()).join("data/slow.dat")).unwrap(), expected);
    assert_eq!(fs::read(env.path("inbox/.deposited/slow.dat")).unwrap(), expected, "original moved aside");
    stop(watcher);
    env.ok(&["verify", &root]);
}

#[test]
fn ten_entries_dropped_at_once_become_ten_items() {
    let env = TestEnv::new();
    let root = env.collection("col");
    fs::create_dir(env.path("inbox")).unwrap();
    let watcher = start_watch(&env, &root, &["--remove"]);
    for i in 0..10 {
        if i % 2 == 0 {
            env.write(&format!("inbox/file-{i}.txt"), format!("entry {i}").as_bytes());
        } else {
            env.write(&format!("inbox/folder-{i}/inside.txt"), format!("entry {i}").as_bytes());
        }
    }
    assert!(wait_until(60, || receipts(&env).len() == 10), "receipts: {:?}", receipts(&env));
    assert_eq!(item_count(&env, &root), 10);
    let left: Vec<_> = fs::read_dir(env.path("inbox")).unwrap().filter_map(|e| e.ok()).collect();
    assert_eq!(left.len(), 1, "with --remove only .deposited stays");
    stop(watcher);
}

#[test]
fn entries_waiting_at_start_are_picked_up() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("inbox/waiting.txt", b"arrived while ibi watch was down");
    let watcher = start_watch(&env, &root, &[]);
    assert!(wait_until(30, || receipts(&env).len() == 1));
    assert_eq!(item_count(&env, &root), 1);
    stop(watcher);
}

/// Stops the watcher with SIGTERM; returns its JSON summary once it exits 0.
fn stop_with_summary(mut reaper: Reaper) -> serde_json::Value {
    let child = reaper.0.take().unwrap();
    sh(&format!("kill -TERM {}", child.id()));
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "watch exited with {}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

/// The hot folder counted an entry the collection already held as a new deposit
/// and wrote it the receipt of one; the hand-offs it finished at start were done
/// silently, and entries it refused were counted nowhere. Each entry's receipt
/// and the run's counts now say what became of it.
#[test]
fn regress_hotfolder_receipts_and_counts_disagree_with_what_happened() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("held/dup.txt", b"deposited before\n");
    env.ok(&["-q", "deposit", &root, env.path("held/dup.txt").to_str().unwrap()]);
    let earlier = env.ok(&["list", &root]).lines()[0].split('\t').next().unwrap().to_string();
    // A hand-off a killed run left between placing and receipting.
    env.write("inbox/.deposited/.pending/interrupted.txt", format!("{earlier}\t\n").as_bytes());
    env.write("inbox/interrupted.txt", b"deposited before\n");
    env.write("inbox/dup.txt", b"deposited before\n");
    env.write("inbox/new.txt", b"a new item\n");
    sh(&format!("mkfifo '{}'", env.path("inbox/pipe").display()));
    let watcher = start_watch(&env, &root, &["--json"]);
    assert!(wait_until(30, || receipts(&env).len() == 3), "receipts: {:?}", receipts(&env));
    std::thread::sleep(Duration::from_millis(1500));
    let summary = stop_with_summary(watcher);
    assert_eq!(summary["deposited"], 1, "{summary}");
    assert_eq!(summary["already_deposited"], 1, "{summary}");
    assert_eq!(summary["recovered"], 1, "{summary}");
    assert_eq!(summary["refused"], 1, "{summary}");
    assert_eq!(item_count(&env, &root), 2);
    let receipt = |entry: &str| fs::read_to_string(env.path(&format!("inbox/.deposited/.receipts/{entry}.receipt")));
    assert!(receipt("dup.txt").unwrap().trim_end().ends_with("\tdup.txt\talready deposited"));
    assert!(receipt("new.txt").unwrap().trim_end().ends_with("\tnew.txt"));
    assert!(receipt("interrupted.txt").unwrap().starts_with(&format!("{earlier}\t")));
    assert!(env.path("inbox/pipe").exists() && receipt("pipe").is_err(), "a refused entry stays, with no receipt");
}
