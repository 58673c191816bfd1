//! `ibi demo`: the README's "run it" command must work end to end.

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
        "ibi migrate",
        "done",
    ] {
        assert!(run.stdout.contains(step), "missing step {step:?} in {}", run.stdout);
    }
    assert!(run.stdout.contains("after repair: 0 problems"));
    assert_eq!(env.ok(&["list", dir.join("collection-b").to_str().unwrap()]).stdout, "", "migrate emptied B");
    assert_eq!(env.ok(&["list", dir.join("collection-c").to_str().unwrap()]).lines().len(), 2);
    env.ok(&["verify", dir.join("collection-a").to_str().unwrap()]);
    env.ok(&["verify", dir.join("collection-c").to_str().unwrap()]);
    let again = env.fails(&["demo", dir.to_str().unwrap()], 2);
    assert!(again.stderr.contains("is not empty"), "{}", again.stderr);
}
