//! `ibi demo`, the README's "run it" command, end to end; and the generated
//! shell completions and man page.

use crate::env::TestEnv;

#[test]
fn demo_runs_every_step_and_leaves_valid_collections() {
    let env = TestEnv::new();
    let dir = env.path("demo");
    let run = env.ok(&["demo", dir.to_str().unwrap()]);
    for step in [
        "ibi init",
        "ibi deposit",
        "ibi list",
        "ibi resolve",
        "ibi verify",
        "digest mismatch",
        "ibi mirror",
        "ibi mirror --checksum",
        "repaired",
        "ibi migrate",
        "done",
    ] {
        assert!(run.stdout.contains(step), "missing step {step:?} in {}", run.stdout);
    }
    assert!(run.stdout.contains("after the repair: 0 problems"), "{}", run.stdout);
    assert_eq!(env.ok(&["list", dir.join("collection-b").to_str().unwrap()]).stdout, "", "migrate emptied B");
    assert_eq!(env.ok(&["list", dir.join("collection-c").to_str().unwrap()]).lines().len(), 2);
    env.ok(&["verify", dir.join("collection-a").to_str().unwrap()]);
    env.ok(&["verify", dir.join("collection-c").to_str().unwrap()]);
    let again = env.fails(&["demo", dir.to_str().unwrap()], 2);
    assert!(again.stderr.contains("is not empty"), "{}", again.stderr);
}

#[test]
fn completions_and_man_page_name_every_command() {
    let env = TestEnv::new();
    let bash = env.ok(&["completions", "bash"]).stdout;
    let man = env.ok(&["man"]).stdout;
    assert!(man.contains(".TH ibi 1"), "{man}");
    for command in
        ["init", "deposit", "verify", "list", "resolve", "copy", "migrate", "mirror", "watch", "demo", "mint", "parse"]
    {
        assert!(bash.contains(command), "bash completion lacks {command}");
        assert!(man.contains(command), "man page lacks {command}");
    }
    env.fails(&["completions", "tcsh"], 2);
}

/// Issue 59: a second `ibi demo` while the first demo's folder still existed
/// failed (exit 2): the first demo's collection held the demo subsystem in the
/// machine's registry. A later demo retires the earlier demo's collection (it
/// keeps its items, mints no more) and runs whole; no name is handed out twice.
#[test]
fn regress_demo_runs_once() {
    let env = TestEnv::new();
    let (first, second, third) = (env.path("first"), env.path("second"), env.path("third"));
    env.ok(&["demo", first.to_str().unwrap()]);
    let again = env.ok(&["demo", second.to_str().unwrap()]);
    assert!(again.stdout.contains("retired the earlier demo"), "{}", again.stdout);
    env.ok(&["demo", third.to_str().unwrap()]);
    let names = |dir: &std::path::Path| -> Vec<String> {
        let mut all = Vec::new();
        // Collection A holds every name its demo minted (C holds copies of them).
        all.extend(env.ok(&["list", dir.join("collection-a").to_str().unwrap()]).lines().iter().map(|l| l.to_string()));
        all
    };
    let mut all: Vec<String> = [&first, &second, &third].iter().flat_map(|d| names(d)).collect();
    let count = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), count, "no name or IBIp twice across the demos: {all:?}");
    env.ok(&["verify", second.join("collection-a").to_str().unwrap()]);
    // A collection of the demo's subsystem that is not a demo's is never retired.
    env.ok(&["retire", third.join("collection-a").to_str().unwrap()]);
    let mine = env.path("mine").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &mine, "--host", "demo-a.ibi.example.org", "--ip", "192.0.2.10"]);
    let refused = env.fails(&["demo", env.path("fourth").to_str().unwrap()], 2);
    assert!(!refused.stdout.contains("retired the earlier demo"), "{}", refused.stdout);
    env.ok(&["-q", "mint", "-C", &mine]);
}

/// Issue 59: `cargo install --path .` printed "profile package spec `proptest`
/// in profile `test` did not match any packages" (and three more): the manifest
/// named dev-dependencies in its profiles, which an install never resolves.
/// Every package a profile in Cargo.toml names is in the normal dependency graph.
#[test]
fn regress_install_warns_of_profiles_for_test_only_packages() {
    let manifest = std::fs::read_to_string(crate::env::repo().join("Cargo.toml")).unwrap();
    let named: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("[profile.")?.split(".package.").nth(1)?.strip_suffix(']'))
        .map(|p| p.trim_matches('"'))
        .filter(|p| *p != "*")
        .collect();
    assert!(named.contains(&"object_store"), "the profiles are read: {named:?}");
    let tree = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["tree", "--locked", "--offline", "-e", "normal", "--prefix", "none", "--format", "{p}"])
        .current_dir(crate::env::repo())
        .output()
        .unwrap();
    assert!(tree.status.success(), "{}", String::from_utf8_lossy(&tree.stderr));
    let tree = String::from_utf8_lossy(&tree.stdout);
    let in_graph: std::collections::BTreeSet<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
    for package in named {
        assert!(in_graph.contains(package), "Cargo.toml's profiles name {package}, which an install never builds");
    }
}
