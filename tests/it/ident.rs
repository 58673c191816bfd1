//! The identifier commands end to end: the standard's vectors through the CLI,
//! JSON output, and the minter's failure modes (clock behind, corrupt state,
//! read-only state).

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::env::{example_mint_args, unprivileged_ibi, TestEnv};
use ibi::id::vectors::table_6_2;

#[test]
fn table_6_2_through_the_cli_with_at() {
    let env = TestEnv::new();
    for row in table_6_2() {
        let at = row.request.to_decimal();
        let run = env.ok(&["mint", "--host", "mtc-m18.sid.inpe.br", "--state", "s", "--at", &at]);
        assert_eq!(run.stdout, format!("sid.inpe.br/mtc-m18/{}\n", row.suffix), "row {}", row.item);
    }
    assert_eq!(fs::read_to_string(env.path("s")).unwrap(), format!("{}\n", row_last()));
}

fn row_last() -> String {
    table_6_2().last().unwrap().date.to_decimal()
}

#[test]
fn examples_1_and_2_minted_together() {
    let env = TestEnv::new();
    let run = env.ok(&example_mint_args("s", &["--at", "2009-02-16T17:46:00Z"]));
    assert_eq!(run.stdout, "sid.inpe.br/mtc-m18/2009/02.16.17.46\t8JMKD3MGP8W/34PGRBS\n");
}

#[test]
fn count_mints_in_one_hold_and_at_never_sleeps() {
    let env = TestEnv::new();
    let started = std::time::Instant::now();
    let run = env.ok(&["mint", "--host", "a.example.org", "--state", "s", "--at", "1287588115", "--count", "50"]);
    let lines = run.lines();
    assert_eq!(lines.len(), 50);
    assert_eq!(lines[0], "example.org/a/2010/10.20.15.21.55");
    assert_eq!(lines[49], "example.org/a/2010/10.20.15.22.44");
    assert!(started.elapsed().as_secs() < 30, "--at must replay without waiting 50 s");
    assert_eq!(fs::read_to_string(env.path("s")).unwrap(), "1287588164\n");
}

#[test]
fn json_mint_and_decode() {
    let env = TestEnv::new();
    let run = env.ok(&[
        "--json",
        "mint",
        "--host",
        "a.b.c",
        "--ip",
        "2001:db8::7",
        "--state",
        "s",
        "--at",
        "1300000000.25",
        "--granularity",
        "0.01",
    ]);
    let v: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(v["name"], "b.c/a/2011/03.13.07.06.40.25");
    let ibip = v["ibip"].as_str().unwrap().to_string();
    let run = env.ok(&["ibip", "decode", &ibip.to_lowercase(), "--json"]);
    let d: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(d, serde_json::json!({"ip": "2001:db8::7", "port": 800, "date": "2011-03-13T07:06:40.25Z"}));
}

#[test]
fn ibip_encode_from_a_name_gives_example_2() {
    let env = TestEnv::new();
    let run = env.ok(&["ibip", "encode", "--ip", "150.163.34.243", "--name", "sid.inpe.br/mtc-m18/2009/02.16.17.46"]);
    assert_eq!(run.stdout, "8JMKD3MGP8W/34PGRBS\n");
    let early = env.fails(&["ibip", "encode", "--ip", "150.163.34.243", "--date", "1995-07-31T23:59:59Z"], 2);
    assert!(early.stderr.contains("1995-08-01"), "{}", early.stderr);
}

#[test]
fn pilin_example_and_mint() {
    let env = TestEnv::new();
    assert_eq!(env.ok(&["pilin", "decode", "Y35XYS0QH"]).stdout, "2007-05-25T03:49:52.865Z\n");
    let run = env.ok(&["pilin", "mint", "--state", "p", "--at", "2007-05-25T03:49:52.865Z", "--count", "2"]);
    assert_eq!(run.lines(), ["Y35XYS0QH", "Z35XYS0QH"]);
    let again = env.ok(&["pilin", "mint", "--state", "p", "--at", "2007-05-25T03:49:52.865Z"]);
    assert_eq!(again.lines(), ["045XYS0QH"], "a millisecond is never used twice");
}

#[test]
fn clock_behind_state_beyond_max_wait_names_both_dates_and_keeps_state() {
    let env = TestEnv::new();
    fs::write(env.path("s"), "1300000000\n").unwrap();
    let run = env.fails(&["mint", "--host", "a.b.c", "--state", "s", "--at", "1299999000"], 3);
    assert!(
        run.stderr.contains("2011-03-13T07:06:40Z") && run.stderr.contains("2011-03-13T06:50:00Z"),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 1);
    assert_eq!(fs::read_to_string(env.path("s")).unwrap(), "1300000000\n");
    // Within max_wait, the same request waits (virtually) and succeeds.
    env.ok(&["mint", "--host", "a.b.c", "--state", "s", "--at", "1299999995"]);
}

#[test]
fn corrupt_state_is_an_error_and_is_left_alone() {
    let env = TestEnv::new();
    for bad in ["", "yesterday\n", "1300000000\n1300000001\n", "13e8\n"] {
        fs::write(env.path("s"), bad).unwrap();
        let run = env.fails(&["mint", "--host", "a.b.c", "--state", "s", "--at", "1300000000"], 3);
        assert!(run.stderr.contains("s is corrupt: minter state"), "{}", run.stderr);
        assert_eq!(fs::read_to_string(env.path("s")).unwrap(), bad);
    }
}

#[test]
fn state_on_a_read_only_path_is_an_error_and_unchanged() {
    let env = TestEnv::new();
    let dir = env.path("ro");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(env.root(), fs::Permissions::from_mode(0o755)).unwrap();
    let state = dir.join("minter.state");
    let state_arg = state.to_str().unwrap();
    env.ok(&["mint", "--host", "a.b.c", "--state", state_arg, "--at", "1300000000"]);
    fs::set_permissions(&state, fs::Permissions::from_mode(0o444)).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o555)).unwrap();
    // Root ignores permissions, so drop to nobody for this run.
    let mut cmd = unprivileged_ibi();
    let out = cmd.args(["mint", "--host", "a.b.c", "--state", state_arg, "--at", "1300000100"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(dir.to_str().unwrap()) && stderr.contains("ermission denied"), "{stderr}");
    assert_eq!(fs::read_to_string(&state).unwrap(), "1300000000\n");
}
