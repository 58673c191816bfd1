//! Correctness at scale, never speed: a collection of 10,000 items (kept in
//! memory, `TestEnv::in_memory`), where verify, list and mirror must agree with
//! the inventory, and verify's peak memory must not grow with the number of
//! items (speed is `scripts/bench scale`'s business).

use std::collections::BTreeSet;

use crate::env::TestEnv;

/// Writes `from..to` one-line files into `dir` and deposits each as an item.
fn deposit_each(env: &TestEnv, col: &str, dir: &str, from: usize, to: usize) {
    let root = env.path(dir);
    std::fs::create_dir_all(&root).unwrap();
    let paths: Vec<String> = (from..to)
        .map(|i| {
            let path = root.join(format!("f{i:06}.txt"));
            std::fs::write(&path, format!("item {i}\n")).unwrap();
            path.to_string_lossy().into_owned()
        })
        .collect();
    for chunk in paths.chunks(5000) {
        let mut args = vec!["-q", "deposit", "--each", col];
        args.extend(chunk.iter().map(String::as_str));
        env.ok(&args);
    }
}

/// The peak resident memory (KiB) of one run of `ibi ARGS`, which must exit 0.
fn peak_rss_kib(env: &TestEnv, args: &[&str]) -> u64 {
    let mut command = env.command(args);
    // One hashing thread: the peak then depends on what is held, not on how the
    // threads' buffers happened to overlap (two threads moved it by ±6 MiB).
    command.env("RAYON_NUM_THREADS", "1");
    let (run, kib) = crate::env::run_measuring_peak_rss(&command);
    assert_eq!(run.code, 0, "ibi {args:?} failed: {}", run.stderr);
    kib
}

fn verify_rss_kib(env: &TestEnv, col: &str) -> u64 {
    peak_rss_kib(env, &["-q", "verify", col])
}

fn names(env: &TestEnv, col: &str) -> Vec<String> {
    env.ok(&["list", col]).lines().iter().map(|l| l.split('\t').next().unwrap().to_string()).collect()
}

/// verify kept every inventory record in a map for the whole run (about 1.1 KB an
/// item: 235 MiB at 203,000 items); it now pairs the walk with the inventory a
/// page at a time, so its peak at 10,000 items is within 10% of its peak at
/// 5,000 (the old code's would grow by about 5.5 MB over that span, a sixth).
///
/// Not 1,000 against 10,000: between those the caches (SQLite's pages, the
/// allocator's) are still filling, by about 5 MiB whatever the code, and with
/// transparent huge pages on that growth hid in 2 MiB steps until a CI machine
/// saw it (42.9 MiB at 1,000, 47.7 at 10,000). From 5,000 on the peak is flat:
/// 30.9, 32.4 and 33.4 MiB at 5,000, 10,000 and 30,000 items.
#[test]
fn regress_verify_memory_grows_with_the_collection() {
    let env = TestEnv::in_memory();
    let col = env.collection("big");
    deposit_each(&env, &col, "src", 0, 5_000);
    let small = verify_rss_kib(&env, &col);
    deposit_each(&env, &col, "src", 5_000, 10_000);
    let large = verify_rss_kib(&env, &col);
    assert!(large * 10 <= small * 11, "verify's peak grew from {small} KiB at 5,000 items to {large} KiB at 10,000");

    let listed = names(&env, &col);
    assert_eq!(listed.len(), 10_000);
    assert_eq!(listed.iter().collect::<BTreeSet<_>>().len(), 10_000, "a name listed twice");
    let copy = env.collection("copy");
    env.ok(&["-q", "mirror", &col, &copy]);
    assert_eq!(names(&env, &copy), listed, "the mirror holds other items than the source");
    let again = env.ok(&["mirror", &col, &copy]);
    assert!(again.stderr.contains("copied 0,"), "a second mirror copied again: {}", again.stderr);
}
