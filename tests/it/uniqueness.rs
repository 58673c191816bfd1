//! Uniqueness under concurrency: processes minting at once against one state
//! file never produce the same name.

use std::collections::HashSet;
use std::fs;
use std::process::Stdio;

use crate::env::{example_mint_args, TestEnv};

#[test]
fn eight_processes_minting_at_once_never_share_a_name() {
    let env = TestEnv::new();
    let args = example_mint_args("minter.state", &["--count", "100", "--granularity", "0.001"]);
    let children: Vec<_> = (0..8)
        .map(|_| env.command(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn ibi"))
        .collect();
    let mut names = HashSet::new();
    let mut ibips = HashSet::new();
    let mut total = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let (name, ibip) = line.split_once('\t').expect("name<TAB>ibip");
            names.insert(name.to_string());
            ibips.insert(ibip.to_string());
            total += 1;
        }
    }
    assert_eq!(total, 800);
    assert_eq!(names.len(), 800, "duplicate names were minted");
    assert_eq!(ibips.len(), 800, "duplicate IBIps were minted");
    let last = fs::read_to_string(env.path("minter.state")).unwrap();
    let max = names.iter().map(|n| ibi::RepositoryName::parse(n).unwrap().date()).max().unwrap();
    assert_eq!(last.trim(), max.to_decimal(), "the state holds the last date handed out");
}
