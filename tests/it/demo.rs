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
