//! Copy policies across sites (issue 25): sites and a policy in the
//! collection's configuration, `replicate` bringing every site up to date, and
//! `audit` finding each fault at one site without moving payload bytes.

use std::path::Path;

use crate::env::{ibi_bin, sh, TestEnv, MINTER_DIR_ENV};

/// Replaces an item's bag with another whose manifests agree with themselves:
/// a swap no manifest check can see, only a comparison of copies.
fn swap_item(item: &Path, content: &[u8]) {
    crate::truth::reseal_forgery(item, content);
}

/// Every file under `root` but its `.ibi` state, with its bytes.
fn snapshot(root: &Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if entry.file_name() == ".ibi" {
                continue;
            }
            let kind = entry.file_type().unwrap();
            if kind.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                files.insert(path, target.to_string_lossy().into_owned().into_bytes());
            } else if kind.is_dir() {
                folders.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

fn names(env: &TestEnv, root: &str) -> Vec<String> {
    env.identities(root).into_keys().collect()
}

/// A three-site lab: the collection (zone a), a local site (zone b) and a far
/// one over a shim (zone c), policy 3 copies in 2 zones. Returns the roots and
/// the shim.
fn lab(env: &TestEnv, items: usize) -> (String, String, String, String) {
    let a = env.filled("a", items, 1);
    let (b, c) = (env.path("b").to_string_lossy().into_owned(), env.path("c").to_string_lossy().into_owned());
    for site in [&b, &c] {
        env.ok(&["-q", "init", site, "--like", &a]);
    }
    let rsh = env.shim("rsh", "", None);
    env.ok(&["site", "here", &a, "--zone", "zone-a"]);
    env.ok(&["site", "add", &a, &b, "--zone", "zone-b"]);
    env.far_ok(&rsh, &["site", "add", &a, &format!("lab:{c}"), "--zone", "zone-c"]);
    let listed = env.ok(&["site", "policy", &a, "--copies", "3", "--zones", "2"]).stdout;
    assert!(listed.contains("zone-b") && listed.contains("lab:") && listed.contains("3 copies in 2 zones"), "{listed}");
    (a, b, c, rsh)
}

#[test]
fn replicate_brings_new_sites_to_the_policy_and_audit_exits_0() {
    let env = TestEnv::new();
    let (a, b, c, rsh) = lab(&env, 4);
    let before = env.far_fails(&rsh, &["audit", &a], 1);
    assert_eq!(before.stdout.lines().count(), 4, "every item is short of copies: {}", before.stdout);
    let replicated = env.far_ok(&rsh, &["replicate", &a]);
    assert!(replicated.stderr.contains("copied 4"), "{}", replicated.stderr);
    assert_eq!(env.identities(&b), env.identities(&a));
    assert_eq!(env.identities(&c), env.identities(&a));
    let audit = env.far_ok(&rsh, &["audit", &a]);
    assert!(audit.stdout.is_empty() && audit.stderr.contains("0 short of the policy"), "{}", audit.stderr);
    let json = env.far_ok(&rsh, &["--json", "audit", &a]).stdout;
    let summary: serde_json::Value = serde_json::from_str(json.lines().last().unwrap()).unwrap();
    assert_eq!(summary["items"], 4);
    assert_eq!(summary["audit"].as_array().unwrap().len(), 3, "{summary}");
    assert!(summary["audit"].as_array().unwrap().iter().all(|p| p["held"] == 4), "{summary}");
    let again = env.far_ok(&rsh, &["replicate", &a]);
    assert!(again.stderr.matches("copied 0").count() == 2, "nothing left to do: {}", again.stderr);
}

/// Each fault at one site is found, named with the site and the reason, and the
/// audit changes nothing: a deleted item, a bag replaced behind ibi's back with
/// self-consistent manifests (forged: an identity the collection never
/// recorded), a damaged copy its own verify found, two sites that hold two
/// forgeries (the collection's own copy decides), and a site that cannot be
/// reached.
#[test]
fn audit_names_each_fault_at_one_site_and_changes_nothing() {
    let env = TestEnv::new();
    let (a, b, c, rsh) = lab(&env, 5);
    env.far_ok(&rsh, &["replicate", &a]);
    let items = names(&env, &a);
    std::fs::remove_dir_all(Path::new(&b).join(&items[0])).unwrap();
    swap_item(&Path::new(&c).join(&items[1]), b"another bag\n");
    swap_item(&Path::new(&b).join(&items[4]), b"one version\n");
    swap_item(&Path::new(&c).join(&items[4]), b"another version\n");
    let flipped = Path::new(&a).join(&items[2]).join("data/f0.txt");
    std::fs::write(&flipped, b"a item 2 file 1\n").unwrap();
    env.fails(&["verify", &a], 1);
    let before: Vec<_> = [&a, &b, &c].iter().map(|r| snapshot(Path::new(r))).collect();
    let audit = env.far_fails(&rsh, &["audit", &a], 1);
    // A name and its tab: one name can be a prefix of another (`….4`, `….403`).
    let line =
        |name: &str| audit.stdout.lines().find(|l| l.starts_with(&format!("{name}\t"))).unwrap_or_default().to_string();
    assert!(line(&items[0]).contains(&format!("{b}: missing")), "{}", audit.stdout);
    assert!(line(&items[1]).contains("lab:") && line(&items[1]).contains("forged"), "{}", audit.stdout);
    assert!(line(&items[2]).contains(&format!("{a}: damaged")), "{}", audit.stdout);
    assert!(line(&items[4]).contains(&format!("{b}: forged")) && line(&items[4]).contains("lab:"), "{}", audit.stdout);
    assert!(!line(&items[4]).contains(&format!("{a}:")), "the collection's own copy decides: {}", audit.stdout);
    assert_eq!(line(&items[3]), "", "the sound item meets the policy: {}", audit.stdout);
    // A far side of protocol version 3 is asked per item, with the same findings.
    let older = env.shim("rsh3", "export IBI_PROTOCOL_VERSIONS=3", None);
    assert_eq!(env.far_fails(&older, &["audit", &a], 1).stdout, audit.stdout, "protocol 3 finds the same");
    let after: Vec<_> = [&a, &b, &c].iter().map(|r| snapshot(Path::new(r))).collect();
    assert_eq!(before, after, "the audit changed nothing");

    let gone = env.path("gone").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &gone, "--like", &a]);
    env.ok(&["site", "add", &a, &gone, "--zone", "zone-d"]);
    std::fs::remove_dir_all(&gone).unwrap();
    let down = env.far_fails(&rsh, &["audit", &a], 1);
    assert!(down.stderr.contains(&format!("{gone} (zone zone-d, disk): unreachable")), "{}", down.stderr);
    let quiet = env.far_fails(&rsh, &["-q", "audit", &a], 1);
    assert!(quiet.stdout.contains(&format!("{gone}\tunreachable")), "told under -q too: {}", quiet.stdout);
    // One site down does not stop the others: b gets its item back. A site that
    // is not there is a configuration problem (exit 2), as mirror says of it.
    let replicated = env.far_fails(&rsh, &["replicate", &a], 2);
    assert!(replicated.stderr.contains(&format!("replicate {gone}: failed")), "{}", replicated.stderr);
    let quiet = env.far_fails(&rsh, &["-q", "replicate", &a], 2);
    assert!(quiet.stdout.contains(&format!("{gone}\tnot replicated")), "told under -q too: {}", quiet.stdout);
    assert!(Path::new(&b).join(&items[0]).is_dir(), "the reachable site was brought up to date");
}

/// A site must be a copy that never mints, of the same subsystem, and not the
/// collection itself; a policy must be possible.
#[test]
fn site_add_refuses_what_cannot_be_a_site() {
    let env = TestEnv::new();
    let a = env.filled("a", 1, 1);
    let other = env.own_subsystem("other");
    let refused = env.fails(&["site", "add", &a, &other, "--zone", "z"], 2);
    assert!(refused.stderr.contains("holds the names of") || refused.stderr.contains("mints"), "{}", refused.stderr);
    let itself = env.fails(&["site", "add", &a, &a, "--zone", "z"], 2);
    assert!(itself.stderr.contains("this collection itself"), "{}", itself.stderr);
    let impossible = env.fails(&["site", "policy", &a, "--copies", "1", "--zones", "2"], 2);
    assert!(impossible.stderr.contains("zones at most copies"), "{}", impossible.stderr);
    let age = env.fails(&["site", "policy", &a, "--copies", "2", "--max-fixity-age", "ninety"], 2);
    assert!(age.stderr.contains("max_fixity_age"), "{}", age.stderr);
    let b = env.path("b").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &b, "--like", &a]);
    let cluster = ["--seaweedfs-master", "http://127.0.0.1:9333", "--seaweedfs-filer", "http://127.0.0.1:8888"];
    let not_s3 = env.fails(&[&["site", "add", &a, &b, "--zone", "z"][..], &cluster].concat(), 2);
    assert!(not_s3.stderr.contains("only a collection in S3 (s3://) has a SeaweedFS"), "{}", not_s3.stderr);
    let here = env.fails(&[&["site", "here", &a, "--zone", "z"][..], &cluster].concat(), 2);
    assert!(here.stderr.contains(&format!("{a}: only a collection in S3")), "{}", here.stderr);
    let missing = env.fails(&["site", "remove", &a, "/nowhere"], 2);
    assert!(missing.stderr.contains("not a site of this collection"), "{}", missing.stderr);
}

/// `audit --repair` restores each bad copy from the majority's (a deleted one,
/// a swapped one, a damaged one at the collection itself), verified on arrival,
/// and leaves an item no copy of which can be vouched for (the collection's own
/// damaged, the sites' two forgeries) unchanged for a person; it deletes
/// nothing, and the audit after it names only that item.
#[test]
fn audit_repair_restores_from_the_majority_and_never_decides_without_one() {
    let env = TestEnv::new();
    let (a, b, c, rsh) = lab(&env, 5);
    env.far_ok(&rsh, &["replicate", &a]);
    let items = names(&env, &a);
    let good = env.identities(&a);
    std::fs::remove_dir_all(Path::new(&b).join(&items[0])).unwrap();
    swap_item(&Path::new(&c).join(&items[1]), b"another bag\n");
    std::fs::write(Path::new(&a).join(&items[2]).join("data/f0.txt"), b"a item 2 file 1\n").unwrap();
    std::fs::write(Path::new(&a).join(&items[4]).join("data/f0.txt"), b"a item 4 file 1\n").unwrap();
    env.fails(&["verify", &a], 1);
    swap_item(&Path::new(&b).join(&items[4]), b"one version\n");
    swap_item(&Path::new(&c).join(&items[4]), b"another version\n");
    let undecided = [&a, &b, &c].map(|r| std::fs::read(Path::new(r).join(&items[4]).join("data/f0.txt")).unwrap());

    let run = env.far_fails(&rsh, &["audit", &a, "--repair"], 1);
    assert!(
        run.stdout.contains(&format!("{}\tnot repaired: no copy the collection can vouch for", items[4])),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("3 copies restored"), "{}", run.stderr);
    for root in [&a, &b, &c] {
        let held = env.identities(root);
        for name in &items[..4] {
            assert_eq!(held.get(name), good.get(name), "{root}: {name} holds the majority's copy");
        }
    }
    let at_a = env.fails(&["verify", &a], 1);
    assert_eq!(at_a.stdout.lines().filter(|l| !l.starts_with(&items[4])).count(), 0, "{}", at_a.stdout);
    let at_b = env.fails(&["verify", &b], 1);
    // Names are compared with the ':' after them: one name can be a prefix of another (`….34`, `….344`).
    let names_in = |name: &str| at_b.stdout.contains(&format!("{name}:"));
    assert!(names_in(&items[4]) && !names_in(&items[0]), "{}", at_b.stdout);
    let after = [&a, &b, &c].map(|r| std::fs::read(Path::new(r).join(&items[4]).join("data/f0.txt")).unwrap());
    assert_eq!(after, undecided, "no copy to vouch for, no change");
    let shortfalls: Vec<&str> = run.stdout.lines().filter(|l| !l.contains("not repaired")).collect();
    assert_eq!(shortfalls.len(), 1, "only the undecided item is still short: {}", run.stdout);
    assert!(shortfalls[0].starts_with(&items[4]));
    let repairs = env.own_events(&b, "repair");
    assert_eq!(repairs.get(&items[0]), Some(&1), "the restored copy's arrival is logged as a repair: {repairs:?}");
}

/// `audit --ndsa` (issue 25): the NDSA v2.0 cells the collection's facts prove,
/// each with its judgement and evidence; the cells no fact proves are a person's.
/// A damaged copy at one site takes the repair cell to unmet and three complete
/// copies to partial.
#[test]
fn audit_ndsa_judges_the_cells_the_facts_prove() {
    let env = TestEnv::new();
    let (a, b, c, rsh) = lab(&env, 3);
    env.far_ok(&rsh, &["replicate", &a]);
    for root in [&a, &b, &c] {
        env.ok(&["-q", "verify", root]);
    }
    let cell = |out: &str, text: &str| out.lines().find(|l| l.contains(text)).unwrap_or_default().to_string();
    let judged = |out: &str, text: &str, judgement: &str| {
        let line = cell(out, text);
        assert!(line.contains(&format!("\t{judgement}\t")), "{text}: {judgement} expected: {line:?} in\n{out}");
    };
    let run = env.far_ok(&rsh, &["audit", &a, "--ndsa"]).stdout;
    judged(&run, "Have two complete copies in separate locations", "met");
    judged(&run, "Have three complete copies with at least one copy", "met");
    // Three zones declared, two localities measured (a and b share one filesystem).
    judged(&run, "each with a different disaster threat", "partial");
    judged(&run, "on a different storage media type", "unmet");
    judged(&run, "Maintain logs and identify", "met");
    judged(&run, "Verify integrity information of content at fixed intervals", "partial");
    judged(&run, "Virus check all content", "person");
    assert!(cell(&run, "Have two complete copies").contains("3 of 3 places"), "{run}");

    let json = env.far_ok(&rsh, &["--json", "audit", &a, "--ndsa"]).stdout;
    let cells: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["event"] == "ndsa")
        .map(|v| v["cell"].clone())
        .collect();
    let areas: std::collections::BTreeSet<_> = cells.iter().map(|c| c["area"].as_str().unwrap().to_string()).collect();
    assert_eq!(areas.into_iter().collect::<Vec<_>>(), ["Control", "Integrity", "Metadata", "Storage"]);
    assert!(cells.iter().all(|c| ["met", "partial", "unmet", "person"].contains(&c["judgement"].as_str().unwrap())));

    let item = names(&env, &a).remove(0);
    std::fs::write(Path::new(&b).join(&item).join("data/f0.txt"), b"flipped\n").unwrap();
    env.fails(&["-q", "verify", &b], 1);
    let after = env.far_fails(&rsh, &["audit", &a, "--ndsa"], 1).stdout;
    judged(&after, "Replace or repair corrupted content", "unmet");
    judged(&after, "Have three complete copies with at least one copy", "partial");
    judged(&after, "Have two complete copies in separate locations", "met");
}

/// `serve` of a collection with sites (issue 25): every site's public URL is in
/// the 10320/loc value; when this server cannot read an item's bytes (a file
/// damaged here, the item gone from here) it answers 307 to the first site
/// holding a verified copy (the same identity, its own record agreeing, its last
/// check passed), and with no such site it still fails rather than send the
/// client to a damaged copy. Unknown names never make it ask the sites.
#[test]
fn serve_redirects_to_a_site_with_a_verified_copy() {
    use crate::serve::get;
    let env = TestEnv::new();
    let a = env.filled("a", 3, 1);
    let (b, c) = (env.path("b").to_string_lossy().into_owned(), env.path("c").to_string_lossy().into_owned());
    for site in [&b, &c] {
        env.ok(&["-q", "init", site, "--like", &a]);
    }
    let bad = env.fails(&["site", "add", &a, &c, "--zone", "zone-c", "--public-url", "javascript:alert(1)"], 2);
    assert!(bad.stderr.contains("--public-url") && bad.stderr.contains("http"), "{}", bad.stderr);
    env.ok(&["-q", "site", "add", &a, &c, "--zone", "zone-c", "--public-url", "https://c.example/"]);
    env.ok(&["-q", "site", "add", &a, &b, "--zone", "zone-b", "--public-url", "http://b.example/lib"]);
    env.ok(&["-q", "replicate", &a]);
    let items = names(&env, &a);
    // c's copies of items 0 and 2 are damaged, and its verify found them so; b has no item 2.
    for item in [&items[0], &items[2]] {
        std::fs::write(Path::new(&c).join(item).join("data/f0.txt"), b"flipped at c\n").unwrap();
    }
    env.fails(&["-q", "verify", &c], 1);
    env.ok(&["-q", "verify", &b]);
    std::fs::remove_dir_all(Path::new(&b).join(&items[2])).unwrap();

    let server = env.serve(&[&a], &[]);
    let loc = get(&server.url(&format!("/api/handles/{}?type=10320/loc", items[1])), &[]).text();
    for href in [format!("https://c.example/{}", items[1]), format!("http://b.example/lib/{}", items[1])] {
        assert!(loc.contains(&href), "{href} in {loc}");
    }
    assert_eq!(get(&server.url(&format!("/{}", items[0])), &[]).status, 200);

    // Damaged here (never served before: small files are kept by digest once checked): c's copy failed its check, so b's.
    std::fs::write(Path::new(&a).join(&items[0]).join("data/f0.txt"), b"flipped at a\n").unwrap();
    let damaged = get(&server.url(&format!("/{}/data/f0.txt", items[0])), &[]);
    assert_eq!(damaged.status, 307, "{}", damaged.text());
    assert_eq!(damaged.header("location"), format!("http://b.example/lib/{}/data/f0.txt", items[0]));
    // Gone from here: c's copy is the first verified one.
    std::fs::remove_dir_all(Path::new(&a).join(&items[1])).unwrap();
    let gone = get(&server.url(&format!("/{}", items[1])), &[]);
    assert_eq!(gone.status, 307, "{}", gone.text());
    assert_eq!(gone.header("location"), format!("https://c.example/{}", items[1]));
    // Damaged here, damaged at c, missing at b: no site to send the client to.
    std::fs::write(Path::new(&a).join(&items[2]).join("data/f0.txt"), b"flipped at a\n").unwrap();
    assert_eq!(get(&server.url(&format!("/{}/data/f0.txt", items[2])), &[]).status, 500);
    let never = items[0].replacen("/20", "/19", 1);
    assert_eq!(get(&server.url(&format!("/{never}")), &[]).status, 404);
}

/// A shim for `IBI_RSH` that serves host `vault` through an append-only forced
/// command (as an authorized_keys line would) and every other host plainly.
fn vault_shim(env: &TestEnv) -> String {
    let path = env.path("rsh-vault");
    let forced = format!("{} serve --stdio --append-only", ibi_bin().display());
    let script = format!("#!/bin/sh\nhost=$1\nshift\n[ \"$host\" = vault ] && exec {forced}\nexec \"$@\"\n");
    std::fs::write(&path, script).unwrap();
    sh(&format!("chmod +x '{}'", path.display()));
    path.to_string_lossy().into_owned()
}

/// A four-site lab (issue 25): the collection, a local site, a far site and a
/// far "vault" whose key only appends, a key an attacker also holds. Through it
/// the attacker's forged new version and withdrawal are refused, and the item
/// they plant under the collection's names (minted by a collection of their own
/// that claims the subsystem) is named by the audit for a person. A damaged copy
/// at b and an item deleted at c are found and repaired from the majority; the
/// vault loses nothing, not even the planted item, and the collection is unchanged.
#[test]
fn four_sites_withstand_an_attacker_with_an_append_only_key() {
    let env = TestEnv::new();
    let (a, b, c, _) = lab(&env, 4);
    let d = env.path("d").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &d, "--like", &a]);
    let rsh = vault_shim(&env);
    let vault = format!("vault:{d}");
    env.far_ok(&rsh, &["-q", "site", "add", &a, &vault, "--zone", "zone-d"]);
    env.ok(&["-q", "site", "policy", &a, "--copies", "4", "--zones", "3"]);
    env.far_ok(&rsh, &["-q", "replicate", &a]);
    env.far_ok(&rsh, &["-q", "audit", &a]);
    let items = names(&env, &a);
    let good = env.identities(&a);

    // The attacker's own collection of the subsystem, on a machine of their own.
    let evil = env.path("evil").to_string_lossy().into_owned();
    let attacker = |args: &[&str]| {
        let mut command = env.far_command(&rsh, args);
        command.env(MINTER_DIR_ENV, env.path("evil-minter"));
        crate::env::Run::from(command.output().unwrap())
    };
    let init = ["-q", "init", &evil, "--host", "test.ibi.example.org", "--ip", "192.0.2.30", "--granularity", "0.001"];
    assert_eq!(attacker(&init).code, 0);
    assert_eq!(attacker(&["-q", "mirror", &vault, &evil]).code, 0, "the vault's key reads");
    assert_eq!(attacker(&["-q", "update", &evil, &items[0], "--meta", "Title=forged"]).code, 0);
    let planted_src = env.write("planted/x.txt", b"planted\n");
    let planted = attacker(&["deposit", &evil, planted_src.parent().unwrap().to_str().unwrap()]).pairs()[0].0.clone();
    let pushed = attacker(&["mirror", &evil, &vault]);
    assert_ne!(pushed.code, 0, "the forged version was refused: {}", pushed.stderr);
    assert!(pushed.stderr.contains("append-only") || pushed.stdout.contains("append-only"), "{}", pushed.stderr);
    let withdrawn = attacker(&["withdraw", &vault, &items[1], "--reason", "wipe"]);
    assert_eq!(withdrawn.code, 2, "{}", withdrawn.stderr);
    assert!(Path::new(&d).join(&planted).is_dir(), "the key let a new item in");

    // Faults of wear at two other sites.
    std::fs::write(Path::new(&b).join(&items[2]).join("data/f0.txt"), b"a item 2 file 0 \n").unwrap();
    env.fails(&["-q", "verify", &b], 1);
    std::fs::remove_dir_all(Path::new(&c).join(&items[3])).unwrap();
    let (a_before, d_before) = (snapshot(Path::new(&a)), snapshot(Path::new(&d)));

    let audit = env.far_fails(&rsh, &["-q", "audit", &a], 1);
    let line = |name: &str| audit.stdout.lines().find(|l| l.starts_with(&format!("{name}\t"))).unwrap_or_default();
    assert!(
        line(&planted).contains(&format!("{vault}: held there, but this collection has no record")),
        "{}",
        audit.stdout
    );
    assert!(line(&items[2]).contains(&format!("{b}: damaged")), "{}", audit.stdout);
    assert!(line(&items[3]).contains(&format!("{c}: missing")), "{}", audit.stdout);
    assert_eq!(audit.stdout.lines().count(), 3, "detected: the planted item and the two faults, nothing else");

    let repaired = env.far_fails(&rsh, &["audit", &a, "--repair"], 1);
    assert!(repaired.stderr.contains("2 copies restored"), "{}", repaired.stderr);
    for root in [&a, &b, &c, &vault] {
        let held = match root.strip_prefix("vault:") {
            Some(path) => env.identities(path),
            None => env.identities(root),
        };
        for name in &items {
            assert_eq!(held.get(name), good.get(name), "{root}: {name} holds the collection's copy");
        }
    }
    assert_eq!(snapshot(Path::new(&a)), a_before, "the collection is unchanged");
    assert_eq!(snapshot(Path::new(&d)), d_before, "the vault lost nothing, the planted item included");
    let after = env.far_fails(&rsh, &["-q", "audit", &a], 1);
    assert_eq!(after.stdout.lines().count(), 1, "only the planted item is left, for a person: {}", after.stdout);
    assert!(after.stdout.starts_with(&format!("{planted}\t")), "{}", after.stdout);
}

/// Sites kept by a far collection (issue 25): read through its server (protocol
/// 4), so `site list`, `replicate` and `audit` run from another machine; a site
/// that is a folder on the far machine is refused rather than opened here, the
/// sites are edited on the far machine, and an older far ibi is named.
#[test]
fn a_far_collections_sites_are_read_through_its_server() {
    let env = TestEnv::new();
    let a = env.filled("a", 3, 1);
    let c = env.path("c").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &c, "--like", &a]);
    let rsh = env.shim("rsh", "", None);
    env.far_ok(&rsh, &["-q", "site", "add", &a, &format!("lab:{c}"), "--zone", "zone-c"]);
    let far_a = format!("lab:{a}");
    assert!(env.far_ok(&rsh, &["site", "list", &far_a]).stdout.contains(&format!("lab:{c}\tzone zone-c")));
    env.far_ok(&rsh, &["-q", "replicate", &far_a]);
    assert_eq!(env.identities(&c), env.identities(&a), "the far collection's site got every item");
    env.far_ok(&rsh, &["-q", "audit", &far_a]);

    env.ok(&["-q", "init", &format!("{c}2"), "--like", &a]);
    let refused = env.far_fails(&rsh, &["site", "add", &far_a, &format!("lab:{c}2"), "--zone", "z"], 2);
    assert!(refused.stderr.contains("edited on the machine that holds it"), "{}", refused.stderr);
    let b = env.path("b").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &b, "--like", &a]);
    env.ok(&["-q", "site", "add", &a, &b, "--zone", "zone-b"]);
    let folder = env.far_fails(&rsh, &["audit", &far_a], 2);
    assert!(folder.stderr.contains("is a folder on the machine that holds"), "{}", folder.stderr);
    let older = env.shim("rsh3", "export IBI_PROTOCOL_VERSIONS=3", None);
    let old = env.far_fails(&older, &["site", "list", &far_a], 2);
    assert!(old.stderr.contains("older than this one"), "{}", old.stderr);
}

/// The audit takes the collection's items a thousand at a time, so that what it
/// holds is one chunk's copies and not every copy of every item: items missing
/// at a site in the first, second and third chunk are each counted and named.
#[test]
fn audit_counts_faults_in_every_chunk_of_a_thousand_items() {
    let env = TestEnv::new();
    let a = env.filled("a", 2300, 1);
    let b = env.path("b").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &b, "--like", &a]);
    env.ok(&["site", "add", &a, &b, "--zone", "zone-b"]);
    env.ok(&["-q", "replicate", &a]);
    let all = names(&env, &a);
    assert_eq!(all.len(), 2300);
    let gone = [&all[10], &all[1500], &all[2200]];
    for name in gone {
        std::fs::remove_dir_all(Path::new(&b).join(name)).unwrap();
    }
    let audit = env.fails(&["audit", &a], 1);
    assert_eq!(audit.stdout.lines().count(), 3, "{}", audit.stdout);
    for name in gone {
        let line = audit.stdout.lines().find(|l| l.starts_with(&format!("{name}\t"))).unwrap_or_default();
        assert!(line.contains(&format!("{b}: missing")), "{name}: {}", audit.stdout);
    }
    assert!(audit.stderr.contains("2300 item(s), 3 short of the policy"), "{}", audit.stderr);
    assert!(audit.stderr.contains("2297 held, 3 missing"), "{}", audit.stderr);
}
