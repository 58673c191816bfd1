//! One name and one IBIp per item (issue 55): the machine's registry of
//! minting collections of every kind, one distributor per IBIp prefix, the
//! alias that names another item, and a minter restored from a backup.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;

use crate::env::{TestEnv, MINTER_DIR_ENV};
use crate::s3::Moto;

/// `init ROOT --host HOST --ip IP --granularity G`.
fn init<'a>(root: &'a str, host: &'a str, ip: &'a str, granularity: &'a str) -> Vec<&'a str> {
    vec!["-q", "init", root, "--host", host, "--ip", ip, "--granularity", granularity]
}

/// A shim for a far machine of its own: its minter folder is not this one's.
fn far_machine(env: &TestEnv) -> String {
    env.shim("rsh", &format!("export {MINTER_DIR_ENV}='{}'", env.path("far-minters").display()), None)
}

/// The first column of each line of `ibi list`.
fn names_of(env: &TestEnv, root: &str) -> Vec<String> {
    env.ok(&["list", root]).lines().iter().map(|l| l.split('\t').next().unwrap().to_string()).collect()
}

/// Issue 55, class 1: after `handover OLD NEW` (NEW over SSH), `init --host`
/// of OLD's subsystem on the old machine was accepted, and both minted one
/// name. Now the registry follows the handover to NEW, even once OLD is gone.
#[test]
fn regress_handed_over_subsystem_is_free_again() {
    let env = TestEnv::new();
    let rsh = far_machine(&env);
    let old = env.path("old").to_string_lossy().into_owned();
    env.ok(&init(&old, "nc4old.example.org", "192.0.2.40", "60"));
    let new = format!("lab:{}", env.path("new").display());
    env.far_ok(&rsh, &["-q", "init", &new, "--like", &old]);
    env.far_ok(&rsh, &["-q", "handover", &old, &new]);
    let again = env.path("again").to_string_lossy().into_owned();
    let refused = env.fails(&init(&again, "nc4old.example.org", "192.0.2.40", "60"), 2);
    assert!(refused.stderr.contains(&new), "the refusal names the successor: {}", refused.stderr);
    assert!(!Path::new(&again).exists(), "nothing was created");
    std::fs::remove_dir_all(&old).unwrap();
    let refused = env.fails(&init(&again, "nc4old.example.org", "192.0.2.40", "60"), 2);
    assert!(refused.stderr.contains(&new), "with OLD gone, the registry still names NEW: {}", refused.stderr);
}

/// Issue 55, class 2: a far or S3 collection made from this machine skipped the
/// registry, and minted the same name and IBIp as the local one. Both orders.
#[test]
fn regress_far_and_s3_init_skip_the_registry() {
    let env = TestEnv::new();
    let rsh = far_machine(&env);
    let local = env.path("library").to_string_lossy().into_owned();
    env.ok(&init(&local, "mtc-m18.sid.inpe.br", "150.163.34.243", "60"));
    let far = format!("lab:{}", env.path("lib-same").display());
    let refused = env.far_fails(&rsh, &init(&far, "mtc-m18.sid.inpe.br", "150.163.34.243", "60"), 2);
    assert!(refused.stderr.contains(&local), "{}", refused.stderr);
    assert!(!env.path("lib-same").exists(), "nothing was created far away");

    let moto = Moto::seaweedfs("library");
    let s3 = "s3://library/same";
    let refused = env.s3_fails(moto.port, &init(s3, "mtc-m18.sid.inpe.br", "150.163.34.243", "60"), 2);
    assert!(refused.stderr.contains(&local), "{}", refused.stderr);
    // The other order: S3 first, then a local one.
    env.s3_ok(moto.port, &init(s3, "other.sid.inpe.br", "150.163.34.244", "60"));
    let second = env.path("second").to_string_lossy().into_owned();
    let refused = env.s3_fails(moto.port, &init(&second, "other.sid.inpe.br", "150.163.34.244", "60"), 2);
    assert!(refused.stderr.contains(s3), "{}", refused.stderr);
    // Another machine (its own minter folder) in the same bucket: the bucket's record refuses it.
    let elsewhere = env
        .s3_command(moto.port, &init("s3://library/elsewhere", "other.sid.inpe.br", "150.163.34.244", "60"))
        .env(MINTER_DIR_ENV, env.path("third-machine"))
        .output()
        .unwrap();
    assert_eq!(elsewhere.status.code(), Some(2), "{}", String::from_utf8_lossy(&elsewhere.stderr));
    // Retired, the subsystem is free again.
    env.s3_ok(moto.port, &["retire", s3]);
    env.s3_ok(moto.port, &init(&second, "other.sid.inpe.br", "150.163.34.244", "60"));
}

/// Issue 55, class 3: two subsystems on one IP minted one IBIp for two items,
/// and a mirror between them re-pointed the destination's own alias. Now the
/// two share this machine's distributor for that IBIp prefix, and a copy whose
/// IBIp names another item is a conflict (exit 1) that leaves the alias.
#[test]
fn regress_two_subsystems_on_one_ip_share_ibips() {
    let env = TestEnv::new();
    let (x, y) = (env.path("x").to_string_lossy().into_owned(), env.path("y").to_string_lossy().into_owned());
    env.ok(&init(&x, "lib-a.example.org", "10.7.7.7", "1"));
    let shared = env.ok(&init(&y, "lib-b.example.org", "10.7.7.7", "1")[1..]);
    assert!(shared.stderr.contains("lib-a.example.org"), "init says the IBIp prefix is shared: {}", shared.stderr);
    let at = "2026-01-02T03:04:05Z";
    let a = env.ok(&["mint", "-C", &x, "--at", at]).pairs();
    let b = env.ok(&["mint", "-C", &y, "--at", at]).pairs();
    assert_ne!(a[0].1, b[0].1, "one IBIp for two subsystems on one IP");

    // Deposits racing into both, each process its own: every IBIp distinct.
    let children: Vec<_> = (0..6)
        .map(|i| {
            let root = if i % 2 == 0 { &x } else { &y };
            let file = env.write(&format!("race/{i}/f.txt"), format!("racing {i}\n").as_bytes());
            env.command(&["deposit", root, &file.to_string_lossy()]).stdout(Stdio::piped()).spawn().unwrap()
        })
        .collect();
    let mut ibips = BTreeSet::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(ibips.insert(line.split_whitespace().nth(1).unwrap().to_string()), "an IBIp twice: {line}");
    }
}

/// Issue 55, class 3: `ibi mirror Y X` re-pointed X's alias of its own item to
/// Y's item of the same IBIp (two libraries on one IP, made on two machines,
/// deposited into in one minute). Now the copy is a conflict (exit 1) and X's
/// alias stays.
#[test]
fn regress_mirror_repoints_an_alias_of_another_item() {
    let env = TestEnv::new();
    for attempt in 0..4 {
        let (p, q) = (env.path(&format!("p{attempt}")), env.path(&format!("q{attempt}")));
        let (p, q) = (p.to_string_lossy().into_owned(), q.to_string_lossy().into_owned());
        let (host_p, host_q) = (format!("lib-p{attempt}.example.org"), format!("lib-q{attempt}.example.org"));
        env.ok(&init(&p, &host_p, "10.8.8.8", "60"));
        let made = env.command(&init(&q, &host_q, "10.8.8.8", "60")).env(MINTER_DIR_ENV, env.path("other")).output();
        assert!(made.unwrap().status.success());
        let file = env.write(&format!("clash{attempt}/f.txt"), b"an item\n").to_string_lossy().into_owned();
        let other = env.command(&["-q", "deposit", &q, &file]).env(MINTER_DIR_ENV, env.path("other")).output();
        assert!(other.unwrap().status.success());
        env.ok(&["-q", "deposit", &p, &file]);
        let (p_name, p_ibip) = env.ok(&["list", &p]).pairs()[0].clone();
        let (_, q_ibip) = env.ok(&["list", &q]).pairs()[0].clone();
        if p_ibip != q_ibip {
            continue; // the two deposits straddled a minute: try again
        }
        let run = env.fails(&["mirror", &q, &p], 1);
        let said = format!("{}{}", run.stdout, run.stderr);
        assert!(said.contains(&p_ibip) && said.contains("conflicts 1"), "the conflict names the IBIp: {said}");
        let resolved = env.ok(&["resolve", &p, &p_ibip]).stdout;
        assert!(resolved.trim().ends_with(&format!("/{p_name}")), "P's alias still names P's item: {resolved}");
        env.ok(&["-q", "verify", &p]);
        return;
    }
    panic!("no two deposits in one minute in four tries");
}

/// Issue 55, class 4: a minter state restored from a backup handed out names it
/// had handed out before. Now `mint -C` logs what it hands out, the minter
/// starts after the log's newest, and first contact with a site holding newer
/// names raises it and says so.
#[test]
fn regress_restored_minter_reissues_names() {
    let env = TestEnv::new();
    let root = env.collection("c");
    let state = Path::new(&root).join(".ibi/minter.state");
    let machine = crate::env::minter_dir(env.root());
    // Replayed at a past time, so that the names do not follow the clock (as
    // names minted ahead of it, at a coarse granularity, do not).
    let at = "2026-01-01T00:00:00Z";
    env.ok(&["mint", "-C", &root, "--at", at]);
    let backup = env.path("backup");
    std::fs::create_dir_all(&backup).unwrap();
    crate::env::sh(&format!("cp -a '{}' '{}' '{}'", state.display(), machine.display(), backup.display()));
    let handed: Vec<String> = (0..3).map(|_| env.ok(&["mint", "-C", &root, "--at", at]).pairs()[0].0.clone()).collect();
    // Restore the collection's and the machine's states (not the log).
    crate::env::sh(&format!(
        "cp -a '{}/minter.state' '{}' && rm -rf '{}' && cp -a '{}/.ibi-minters' '{}'",
        backup.display(),
        state.display(),
        machine.display(),
        backup.display(),
        machine.parent().unwrap().display()
    ));
    let again = env.ok(&["mint", "-C", &root, "--at", at]).pairs()[0].0.clone();
    assert!(handed.iter().all(|h| again > *h), "{again} sorts after every name handed out: {handed:?}");

    // With a site: the whole collection and machine restored, the site ahead.
    let site = env.collection("site");
    env.deposit_new_items(&root, "before", 1);
    let whole = env.path("whole");
    crate::env::sh(&format!("mkdir -p '{0}' && cp -a '{1}' '{2}' '{0}/'", whole.display(), root, machine.display()));
    env.deposit_new_items(&root, "after", 2);
    env.ok(&["-q", "mirror", &root, &site]);
    let at_site = names_of(&env, &site);
    crate::env::sh(&format!(
        "rm -rf '{0}' '{1}' && cp -a '{2}/c' '{0}' && cp -a '{2}/.ibi-minters' '{1}'",
        root,
        machine.display(),
        whole.display()
    ));
    let contact = env.ok(&["mirror", &root, &site]);
    assert!(contact.stderr.contains("was behind"), "first contact says so: {}", contact.stderr);
    let minted = env.ok(&["deposit", &root, &env.write("new/f.txt", b"new\n").to_string_lossy()]).stdout;
    let name = minted.split_whitespace().next().unwrap();
    assert!(at_site.iter().all(|held| name > held.as_str()), "{name} sorts after the site's {at_site:?}");
}

/// Issue 55, class 4: a successor restored to its pre-handover copy, on a
/// machine with an empty minter folder, after the handover was run again,
/// minted the name it had minted before. Its mirror holds that name: first
/// contact raises it.
#[test]
fn regress_restored_successor_after_rerun_handover() {
    let env = TestEnv::new();
    let old = env.collection("old");
    let new = env.collection("new");
    let mirror = env.collection("mirror");
    env.deposit_new_items(&old, "old", 1);
    let backup = env.path("new-backup");
    crate::env::sh(&format!("cp -a '{new}' '{}'", backup.display()));
    env.ok(&["handover", &old, &new]);
    env.deposit_new_items(&new, "new", 1);
    env.ok(&["-q", "mirror", &new, &mirror]);
    let held = names_of(&env, &mirror);
    let machine = crate::env::minter_dir(env.root());
    crate::env::sh(&format!(
        "rm -rf '{new}' '{0}' && mkdir '{0}' && cp -a '{1}' '{new}'",
        machine.display(),
        backup.display()
    ));
    env.ok(&["handover", &old, &new]);
    let contact = env.ok(&["mirror", &new, &mirror]);
    assert!(contact.stderr.contains("was behind"), "first contact says so: {}", contact.stderr);
    let minted = env.ok(&["deposit", &new, &env.write("later/f.txt", b"later\n").to_string_lossy()]).stdout;
    let name = minted.split_whitespace().next().unwrap();
    assert!(held.iter().all(|h| name > h.as_str()), "{name} sorts after every name the mirror holds: {held:?}");
}

/// Issue 55, class 5: `mint -C --at` in the future wrote that date into the
/// collection's and the machine's states, and every deposit failed until then.
#[test]
fn regress_mint_at_in_the_future_stops_deposits() {
    let env = TestEnv::new();
    let root = env.collection("c");
    let run = env.fails(&["mint", "-C", &root, "--at", "2030-01-01T00:00:00Z"], 2);
    assert!(run.stderr.contains("--at"), "{}", run.stderr);
    env.ok(&["mint", "-C", &root, "--at", "2020-01-01T00:00:00Z"]);
    env.deposit_new_items(&root, "after", 1);
}

/// Many processes depositing into many collections of one subsystem and IP at
/// once (a minting one, and followers that cannot mint; S3 and far ones of
/// other subsystems on the same IP): every name and every IBIp distinct.
#[test]
fn many_deposits_into_many_collections_of_one_ip_never_share_a_name_or_ibip() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "", None);
    let moto = Moto::seaweedfs("lib");
    let local = env.path("local").to_string_lossy().into_owned();
    env.ok(&init(&local, "a.ibi.example.org", "192.0.2.77", "0.001"));
    let s3 = "s3://lib/b";
    *env.aws_port.lock().unwrap() = Some(moto.port);
    env.s3_ok(moto.port, &init(s3, "b.ibi.example.org", "192.0.2.77", "0.001"));
    let far = format!("lab:{}", env.path("far").display());
    // A far one on this very machine (the shim keeps this machine's minter folder).
    env.far_ok(&rsh, &init(&far, "c.ibi.example.org", "192.0.2.78", "0.001"));
    let roots = [local.as_str(), s3, far.as_str()];
    let children: Vec<_> = (0..9)
        .map(|i| {
            let root = roots[i % 3];
            let files: Vec<String> = (0..4)
                .map(|j| env.write(&format!("p{i}/{j}.txt"), format!("{i} {j}").as_bytes()).to_string_lossy().into())
                .collect();
            let mut args = vec!["deposit", "--each", root];
            args.extend(files.iter().map(String::as_str));
            env.far_command(&rsh, &args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
        })
        .collect();
    let (mut names, mut ibips) = (BTreeSet::new(), BTreeSet::new());
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let mut fields = line.split_whitespace();
            assert!(names.insert(fields.next().unwrap().to_string()), "a name twice: {line}");
            assert!(ibips.insert(fields.next().unwrap().to_string()), "an IBIp twice: {line}");
        }
    }
    assert_eq!(names.len(), 36);
}
