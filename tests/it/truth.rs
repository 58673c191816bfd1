//! Issue 56: repair never trades an honest copy for a forged one, and what
//! audit, replicate and the cron lines report is true. Each `regress_` test
//! holds one class of the issue's faults; every one hashes the honest bytes
//! before and after, so a lost honest copy shows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::env::TestEnv;

/// Reseals `item` around a rewritten payload file: manifests, Payload-Oxum and
/// tagmanifest agree with themselves, as a forger's would.
pub fn reseal_forgery(item: &Path, content: &[u8]) {
    std::fs::write(item.join("data/f0.txt"), content).unwrap();
    let sha = |path: &Path| ibi::fsx::hash_file(path).unwrap().0;
    std::fs::write(item.join("manifest-sha256.txt"), format!("{}  data/f0.txt\n", sha(&item.join("data/f0.txt"))))
        .unwrap();
    for extra in ["manifest-sha512.txt", "tagmanifest-sha512.txt"] {
        let _ = std::fs::remove_file(item.join(extra));
    }
    let info = std::fs::read_to_string(item.join("bag-info.txt")).unwrap();
    let info: String = info
        .lines()
        .map(|l| match l.starts_with("Payload-Oxum:") {
            true => format!("Payload-Oxum: {}.1\n", content.len()),
            false => format!("{l}\n"),
        })
        .collect();
    std::fs::write(item.join("bag-info.txt"), info).unwrap();
    let tags: String = ["bag-info.txt", "bagit.txt", "manifest-sha256.txt"]
        .iter()
        .map(|n| format!("{}  {n}\n", sha(&item.join(n))))
        .collect();
    std::fs::write(item.join("tagmanifest-sha256.txt"), tags).unwrap();
}

/// A site's operator makes its forgery its own record: the inventory is moved
/// aside and rebuilt from the bags, and its own verify is clean.
fn adopt_forgery(env: &TestEnv, site: &str) {
    let inventory = Path::new(site).join(".ibi/inventory.sqlite");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", inventory.display()));
    }
    env.ok(&["-q", "upgrade", site]);
    env.ok(&["verify", site]);
}

/// The digest of every file of every copy of `name` under `roots` (kept copies
/// included), as a set: the honest bytes are among them or they are lost.
fn every_copy(roots: &[&str], name: &str) -> Vec<String> {
    let mut found = Vec::new();
    for root in roots {
        let mut dirs = vec![Path::new(root).join(name)];
        if let Ok(kept) = std::fs::read_dir(Path::new(root).join(".ibi/kept")) {
            dirs.extend(kept.map(|e| e.unwrap().path()).filter(|p| p.is_dir()));
        }
        for dir in dirs {
            if let Ok(bytes) = std::fs::read(dir.join("data/f0.txt")) {
                found.push(sha(&bytes));
            }
        }
    }
    found
}

fn at(env: &TestEnv, rel: &str) -> String {
    env.path(rel).to_string_lossy().into_owned()
}

fn sha(bytes: &[u8]) -> String {
    ibi::digest::of_bytes(bytes, &[]).sha256().to_string()
}

fn names(env: &TestEnv, root: &str) -> Vec<String> {
    env.identities(root).into_keys().collect()
}

/// The collection A and local sites B and C, policy 3 copies in 1 zone, replicated.
fn three_places(env: &TestEnv, items: usize) -> (String, String, String) {
    let a = env.filled("a", items, 1);
    let (b, c) = (at(env, "b"), at(env, "c"));
    for (site, zone) in [(&b, "zb"), (&c, "zc")] {
        env.ok(&["-q", "init", site, "--like", &a]);
        env.ok(&["site", "add", &a, site, "--zone", zone]);
    }
    env.ok(&["-q", "replicate", &a]);
    (a, b, c)
}

#[test]
fn regress_sites_outvote_the_collection() {
    let env = TestEnv::new();
    let (a, b, c) = three_places(&env, 3);
    let item = names(&env, &a)[1].clone();
    let honest = std::fs::read(Path::new(&a).join(&item).join("data/f0.txt")).unwrap();
    let honest = sha(&honest);
    for site in [&b, &c] {
        reseal_forgery(&Path::new(site).join(&item), b"forged\n");
        adopt_forgery(&env, site);
    }
    let audit = env.fails(&["audit", &a], 1);
    let line = audit.stdout.lines().find(|l| l.starts_with(&format!("{item}\t"))).unwrap_or_default().to_string();
    assert!(line.contains(&format!("{b}: forged")) && line.contains(&format!("{c}: forged")), "{}", audit.stdout);
    assert!(!line.contains(&format!("{a}:")), "the collection's honest copy is not at fault: {line}");
    let repaired = env.ok(&["audit", &a, "--repair"]);
    assert!(repaired.stderr.contains("2 copies restored"), "{}", repaired.stderr);
    for root in [&a, &b, &c] {
        let now = std::fs::read(Path::new(root).join(&item).join("data/f0.txt")).unwrap();
        assert_eq!(sha(&now), honest, "{root} holds the honest copy");
    }
    env.ok(&["verify", &a]);
    let copies = every_copy(&[&b, &c], &item);
    assert_eq!(copies.iter().filter(|d| **d != honest).count(), 2, "both forgeries are kept for a person: {copies:?}");
}

#[test]
fn regress_damaged_collection_copy_repaired_from_the_recorded_majority() {
    let env = TestEnv::new();
    let (a, b, c) = three_places(&env, 2);
    let item = names(&env, &a)[0].clone();
    let honest = sha(&std::fs::read(Path::new(&b).join(&item).join("data/f0.txt")).unwrap());
    std::fs::write(Path::new(&a).join(&item).join("data/f0.txt"), b"bit rot\n").unwrap();
    env.fails(&["verify", &a], 1);
    let audit = env.fails(&["audit", &a], 1);
    assert!(audit.stdout.contains(&format!("{a}: damaged")), "{}", audit.stdout);
    env.ok(&["audit", &a, "--repair"]);
    env.ok(&["verify", &a]);
    for root in [&a, &b, &c] {
        let now = std::fs::read(Path::new(root).join(&item).join("data/f0.txt")).unwrap();
        assert_eq!(sha(&now), honest, "{root}");
    }
    let kept: Vec<PathBuf> =
        std::fs::read_dir(Path::new(&a).join(".ibi/kept")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(kept.len(), 1, "the damaged copy it replaced is kept: {kept:?}");
    assert_eq!(std::fs::read(kept[0].join("data/f0.txt")).unwrap(), b"bit rot\n");
    // Listed, and removed only when a person names it; the removal says what it removed.
    let listed = env.ok(&["kept", &a]).stdout;
    let id = kept[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(listed.starts_with(&format!("{id}\t{item}\t")), "{listed}");
    env.fails(&["kept", &a, "--remove", "../../etc@x"], 2);
    let removed = env.ok(&["kept", &a, "--remove", &id]).stdout;
    assert!(removed.starts_with(&format!("removed\t{id}\t{item}")), "{removed}");
    assert!(!kept[0].exists() && env.ok(&["kept", &a]).stdout.is_empty());
}

#[test]
fn regress_audit_quiet_about_a_known_bad_copy() {
    let env = TestEnv::new();
    let (a, b, _c) = three_places(&env, 2);
    env.ok(&["site", "policy", &a, "--copies", "2", "--zones", "1"]);
    env.ok(&["audit", &a]);
    let item = names(&env, &a)[0].clone();
    std::fs::write(Path::new(&b).join(&item).join("data/f0.txt"), b"bit rot\n").unwrap();
    env.fails(&["verify", &b], 1);
    let quiet = env.fails(&["-q", "audit", &a], 1);
    assert!(
        quiet.stdout.contains(&format!("{item}\t")) && quiet.stdout.contains(&format!("{b}: damaged")),
        "{}",
        quiet.stdout
    );
    let ndsa = env.fails(&["audit", &a, "--ndsa"], 1);
    assert!(ndsa.stdout.contains("damaged"), "{}", ndsa.stdout);
}

#[test]
fn regress_repair_misses_an_item_lost_with_its_alias() {
    let env = TestEnv::new();
    let c = env.filled("c", 3, 1);
    let d = at(&env, "d");
    env.ok(&["-q", "init", &d, "--like", &c]);
    env.ok(&["-q", "mirror", &c, &d]);
    let listed: BTreeMap<String, String> = env
        .ok(&["list", &c])
        .lines()
        .iter()
        .map(|l| {
            let mut parts = l.split('\t');
            (parts.next().unwrap().to_string(), parts.next().unwrap().to_string())
        })
        .collect();
    for lost in [1, 0] {
        let (name, ibip) = listed.iter().nth(lost).unwrap();
        std::fs::remove_dir_all(Path::new(&c).join(name)).unwrap();
        std::fs::remove_file(Path::new(&c).join(".ibip").join(ibip)).unwrap();
        env.fails(&["verify", &c], 1);
        let run = env.ok(&["--json", "repair", &c, "--from", &d]);
        let events: Vec<serde_json::Value> = run.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let items = events.iter().filter(|e| e["event"] == "item").count();
        assert_eq!(items, 3, "every item is looked at: {}", run.stdout);
        env.ok(&["verify", &c]);
        assert!(Path::new(&c).join(name).is_dir());
    }
}

/// A shim for `IBI_RSH` whose host says how the far side behaves: `lab` runs
/// the far command; `gate` runs it too unless the file `gate.mode` in the env
/// says `mute` (accepts, never greets) or `stall` (greets, then stops mid-reply).
fn gate_shim(env: &TestEnv) -> String {
    let mode = env.path("gate.mode");
    let script = format!(
        "#!/bin/sh\nhost=$1; shift\nmode=$(cat '{}' 2>/dev/null)\n\
         if [ \"$host\" = gate ] && [ \"$mode\" = mute ]; then exec sleep 30; fi\n\
         if [ \"$host\" = gate ] && [ \"$mode\" = stall ]; then \"$@\" | {{ head -c 700; exec sleep 30; }}; exit; fi\n\
         exec \"$@\"\n",
        mode.display()
    );
    let path = env.path("gate-rsh");
    std::fs::write(&path, script).unwrap();
    crate::env::sh(&format!("chmod +x '{}'", path.display()));
    path.to_string_lossy().into_owned()
}

/// Runs `ibi ARGS` through `rsh` with a two-second far timeout; fails the test
/// when it takes over 40 s (the hang the issue reports).
fn bounded(env: &TestEnv, rsh: &str, args: &[&str]) -> crate::env::Run {
    let mut command = env.far_command(rsh, args);
    command.env("IBI_FAR_TIMEOUT", "2").stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let started = std::time::Instant::now();
    let child = command.spawn().unwrap();
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(40));
        crate::env::sh(&format!("kill -9 {pid} 2>/dev/null || true"));
    });
    let run: crate::env::Run = child.wait_with_output().unwrap().into();
    assert!(started.elapsed().as_secs() < 40, "ibi {args:?} hung: {}", run.stderr);
    drop(watchdog);
    run
}

#[test]
fn regress_silent_far_site_hangs_the_run() {
    let env = TestEnv::new();
    let rsh = gate_shim(&env);
    let a = env.filled("a", 3, 1);
    let b = at(&env, "b");
    let g = at(&env, "g");
    for site in [&b, &g] {
        env.ok(&["-q", "init", site, "--like", &a]);
    }
    env.ok(&["site", "add", &a, &b, "--zone", "zb"]);
    env.far_ok(&rsh, &["site", "add", &a, &format!("gate:{g}"), "--zone", "zg"]);
    for mode in ["mute", "stall"] {
        std::fs::write(env.path("gate.mode"), mode).unwrap();
        let replicated = bounded(&env, &rsh, &["replicate", &a]);
        assert_eq!(replicated.code, 3, "{mode}: {} {}", replicated.stdout, replicated.stderr);
        assert!(replicated.stdout.contains(&format!("gate:{g}\tnot replicated")), "{mode}: {}", replicated.stdout);
        assert!(replicated.stderr.contains("within 2 s"), "{mode}: the wait is stated: {}", replicated.stderr);
        assert_eq!(env.identities(&b), env.identities(&a), "{mode}: the site before it was done");
        let audit = bounded(&env, &rsh, &["-q", "audit", &a]);
        assert_eq!(audit.code, 1, "{mode}: {} {}", audit.stdout, audit.stderr);
        assert!(audit.stdout.contains(&format!("gate:{g}\tunreachable")), "{mode}: {}", audit.stdout);
        let other = at(&env, &format!("h-{mode}"));
        env.ok(&["-q", "init", &other, "--like", &a]);
        let added = bounded(&env, &rsh, &["site", "add", &a, &format!("gate:{other}"), "--zone", "zh"]);
        assert_eq!(added.code, 3, "{mode}: {}", added.stderr);
    }
}

#[test]
fn regress_replicate_exit_hides_a_full_or_missing_disk() {
    let env = TestEnv::new();
    let a = env.filled("a", 4, 1);
    for i in 0..4 {
        env.write(&format!("big/{i}/blob"), &vec![i as u8; 300 * 1024]);
    }
    let bigs: Vec<String> = (0..4).map(|i| env.path(&format!("big/{i}")).to_string_lossy().into_owned()).collect();
    let mut deposit = vec!["-q", "deposit", "--each", a.as_str()];
    deposit.extend(bigs.iter().map(String::as_str));
    env.ok(&deposit);
    let small = env.tmpfs("small", "1m");
    let full = small.path.join("site").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &full, "--like", &a]);
    env.ok(&["site", "add", &a, &full, "--zone", "zf"]);
    let mirrored = env.run(&["-q", "mirror", &a, &full]);
    let replicated = env.run(&["-q", "replicate", &a]);
    assert_eq!(replicated.code, 3, "a full disk: {} {}", replicated.stdout, replicated.stderr);
    assert_eq!(replicated.code, mirrored.code, "replicate and mirror agree on a full disk");
    env.ok(&["site", "remove", &a, &full]);
    drop(small);

    let gone = at(&env, "unmounted");
    env.ok(&["-q", "init", &gone, "--like", &a]);
    env.ok(&["site", "add", &a, &gone, "--zone", "zu"]);
    std::fs::remove_dir_all(&gone).unwrap();
    let mirrored = env.run(&["-q", "mirror", &a, &gone]);
    let replicated = env.run(&["-q", "replicate", &a]);
    assert_eq!(replicated.code, mirrored.code, "an unmounted disk: {} / {}", replicated.stderr, mirrored.stderr);
    assert_eq!(replicated.code, 2, "{}", replicated.stderr);
}

#[test]
fn regress_repaired_far_copy_still_counts_damaged() {
    let env = TestEnv::new();
    let a = env.filled("a", 2, 1);
    let c = at(&env, "c");
    env.ok(&["-q", "init", &c, "--like", &a]);
    let rsh = env.shim("rsh", "", None);
    env.far_ok(&rsh, &["site", "add", &a, &format!("lab:{c}"), "--zone", "zc"]);
    env.far_ok(&rsh, &["-q", "replicate", &a]);
    let item = names(&env, &a)[0].clone();
    std::fs::write(Path::new(&c).join(&item).join("data/f0.txt"), b"bit rot\n").unwrap();
    env.far_fails(&rsh, &["verify", &format!("lab:{c}")], 1);
    let before = env.far_fails(&rsh, &["audit", &a], 1);
    assert!(before.stdout.contains("damaged"), "{}", before.stdout);
    let repaired = env.far_ok(&rsh, &["audit", &a, "--repair"]);
    assert!(repaired.stderr.contains("1 copies restored"), "{}", repaired.stderr);
    let after = env.far_ok(&rsh, &["audit", &a]);
    assert!(after.stderr.contains("0 damaged"), "{}", after.stderr);
    let log = env.log(&c);
    let last_of_item: Vec<&serde_json::Value> = log.iter().filter(|e| e["item"] == item.as_str()).collect();
    let last = last_of_item.last().unwrap();
    assert!(last["type"] != "fixity" || last["outcome"] != "fail", "the last event is not a failure: {last_of_item:?}");
}

#[test]
fn regress_ndsa_claims_without_evidence() {
    let env = TestEnv::new();
    let a = env.filled("a", 2, 1);
    let b = at(&env, "b");
    env.ok(&["-q", "init", &b, "--like", &a]);
    env.ok(&["site", "here", &a, "--zone", "mars", "--media", "disk"]);
    env.ok(&["site", "add", &a, &b, "--zone", "venus", "--media", "tape"]);
    env.ok(&["-q", "replicate", &a]);
    for root in [&a, &b] {
        env.ok(&["-q", "verify", root]);
    }
    let run = env.ok(&["audit", &a, "--ndsa"]).stdout;
    let cell = |text: &str| run.lines().find(|l| l.contains(text)).unwrap_or_default().to_string();
    for text in [
        "Have two complete copies in separate locations",
        "with a different disaster threat than the other copies",
        "on a different storage media type",
    ] {
        let line = cell(text);
        assert!(line.contains("\tpartial\t"), "two folders on one disk are declared apart, not measured: {line}");
    }
    let apart = cell("Back up integrity information");
    assert!(!apart.contains("\tmet\t") && apart.contains("measured: 0"), "{apart}");
    let repair = cell("Replace or repair corrupted content");
    assert!(repair.contains("last check"), "it says what its count rests on: {repair}");

    let item = names(&env, &a)[0].clone();
    std::fs::write(Path::new(&b).join(&item).join("data/f0.txt"), b"flipped\n").unwrap();
    env.fails(&["-q", "verify", &b], 1);
    env.ok(&["-q", "audit", &a, "--repair"]);
    let after = env.ok(&["audit", &a, "--ndsa"]).stdout;
    let repair = after.lines().find(|l| l.contains("Replace or repair corrupted")).unwrap_or_default();
    assert!(repair.contains("1 at the sites"), "the site's repair counts: {repair}");
}

/// The guide's cron block for sites: its assignments and its command lines.
fn guide_cron_lines() -> (Vec<(String, String)>, Vec<String>) {
    let guide = std::fs::read_to_string(crate::env::repo().join("docs/guide.md")).unwrap();
    let section = &guide[guide.find("## Copies at other sites, checked from cron").expect("the cron section")..];
    let start = section.find("```cron\n").expect("a cron block") + "```cron\n".len();
    let block = &section[start..start + section[start..].find("```").unwrap()];
    let (mut assignments, mut commands) = (Vec::new(), Vec::new());
    for line in block.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        match line.split_once('=') {
            Some((name, value)) if !name.contains(' ') => assignments.push((name.to_string(), value.to_string())),
            _ => commands.push(line.split_whitespace().skip(5).collect::<Vec<_>>().join(" ")),
        }
    }
    (assignments, commands)
}

/// Runs one cron command line as cron runs it: `sh -c` in an environment of
/// the block's assignments alone (their values given by `values`) and cron's
/// own few variables; returns its exit code and output.
fn as_cron(command: &str, assignments: &[(String, String)], values: &BTreeMap<&str, String>) -> (i32, String) {
    let mut run = std::process::Command::new("env");
    run.arg("-i").arg("HOME=/root").arg("LOGNAME=root").arg("SHELL=/bin/sh").arg("PATH=/usr/bin:/bin");
    for (name, _) in assignments {
        run.arg(format!("{name}={}", values.get(name.as_str()).unwrap_or_else(|| panic!("a value for {name}"))));
    }
    for (name, value) in values.iter().filter(|(n, _)| assignments.iter().all(|(a, _)| a != *n)) {
        run.arg(format!("{name}={value}"));
    }
    let out = run.args(["sh", "-c", command]).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), said)
}

#[test]
fn regress_cron_lines_never_verify_the_sites() {
    let env = TestEnv::new();
    let moto = crate::s3::Moto::start("lib");
    *env.aws_port.lock().unwrap() = Some(moto.port);
    let a = env.filled("a", 3, 1);
    let (b, c, s) = (at(&env, "b"), at(&env, "c"), "s3://lib/site".to_string());
    let rsh = env.shim("rsh", "", None);
    for site in [&b, &c] {
        env.ok(&["-q", "init", site, "--like", &a]);
    }
    env.ok(&["-q", "init", &s, "--like", &a]);
    env.ok(&["site", "add", &a, &b, "--zone", "zb"]);
    env.far_ok(&rsh, &["site", "add", &a, &format!("lab:{c}"), "--zone", "zc"]);
    env.ok(&["site", "add", &a, &s, "--zone", "zs", "--media", "object"]);
    env.ok(&["site", "policy", &a, "--copies", "4", "--zones", "1", "--max-fixity-age", "30d"]);

    let (assignments, commands) = guide_cron_lines();
    let ibi = crate::env::ibi_bin().to_string_lossy().into_owned();
    let commands: Vec<String> =
        commands.iter().map(|c| c.replace("/usr/local/bin/ibi", &ibi).replace("/srv/library", &a)).collect();
    let port = moto.port.to_string();
    let values: BTreeMap<&str, String> = [
        ("IBI_MINTER_DIR", crate::env::minter_dir(env.root()).to_string_lossy().into_owned()),
        ("IBI_KEY_DIR", crate::env::key_dir(env.root()).to_string_lossy().into_owned()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("IBI_RSH", rsh.clone()),
        ("IBI_REMOTE_IBI", ibi.clone()),
    ]
    .into_iter()
    .collect();
    let night = |expect_clean: bool| -> Vec<(i32, String)> {
        let ran: Vec<(i32, String)> = commands.iter().map(|c| as_cron(c, &assignments, &values)).collect();
        if expect_clean {
            assert!(ran.iter().all(|(code, _)| *code == 0), "a clean night: {ran:#?}");
        }
        ran
    };
    night(true);
    let item = names(&env, &a)[1].clone();
    let honest = std::fs::read(Path::new(&a).join(&item).join("data/f0.txt")).unwrap();
    let flip_local =
        |root: &str| std::fs::write(Path::new(root).join(&item).join("data/f0.txt"), b"flipped\n").unwrap();
    for (label, place) in [("local", b.clone()), ("far", format!("lab:{c}")), ("S3", s.clone())] {
        match label {
            "local" => flip_local(&b),
            "far" => flip_local(&c),
            _ => crate::s3::put_object(moto.port, "lib", &format!("site/{item}/data/f0.txt"), b"flipped\n"),
        }
        let ran = night(false);
        let audit = ran.iter().zip(&commands).find(|(_, c)| c.ends_with(&format!("audit -q {a}"))).unwrap().0;
        assert_eq!(audit.0, 1, "{label}: the audit line reports the flipped byte: {ran:#?}");
        assert!(audit.1.contains(&format!("{place}: damaged")), "{label}: {}", audit.1);
        // The restored copy is not yet checked at its site (exit 1 under a fixity
        // age); the next night's verify checks it first, and that night is clean.
        let repaired = env.far_run(&rsh, &["-q", "audit", &a, "--repair"]);
        assert!(repaired.stderr.is_empty() && !repaired.stdout.contains("damaged"), "{label}: {}", repaired.stdout);
        night(true);
        assert_eq!(std::fs::read(Path::new(&a).join(&item).join("data/f0.txt")).unwrap(), honest, "{label}");
    }
}

#[test]
fn regress_append_only_keys_plant_forgeries_before_replicate() {
    let env = TestEnv::new();
    let a = env.filled("a", 2, 1);
    let forced = format!("{} serve --stdio --append-only", crate::env::ibi_bin().display());
    let rsh = env.path("rsh-vaults");
    std::fs::write(
        &rsh,
        format!("#!/bin/sh\nhost=$1\nshift\ncase $host in vault*) exec {forced};; esac\nexec \"$@\"\n"),
    )
    .unwrap();
    crate::env::sh(&format!("chmod +x '{}'", rsh.display()));
    let rsh = rsh.to_string_lossy().into_owned();
    let (d1, d2) = (at(&env, "d1"), at(&env, "d2"));
    let vaults = [format!("vault1:{d1}"), format!("vault2:{d2}")];
    for (dir, vault) in [&d1, &d2].iter().zip(&vaults) {
        env.ok(&["-q", "init", dir, "--like", &a]);
        env.far_ok(&rsh, &["-q", "site", "add", &a, vault, "--zone", "zv"]);
    }
    env.far_ok(&rsh, &["-q", "replicate", &a]);
    let late = env.write("late/item/f0.txt", b"late and honest\n");
    let item = env.ok(&["deposit", &a, late.parent().unwrap().to_str().unwrap()]).pairs()[0].0.clone();
    let honest = std::fs::read(Path::new(&a).join(&item).join("data/f0.txt")).unwrap();

    // The attacker copies the new item, reseals a forgery of it and pushes it
    // through both append-only keys before replicate gets there.
    let evil = at(&env, "evil");
    env.ok(&["-q", "init", &evil, "--like", &a]);
    env.ok(&["-q", "copy", &a, &evil, &item]);
    reseal_forgery(&Path::new(&evil).join(&item), b"forged\n");
    adopt_forgery(&env, &evil);
    for vault in &vaults {
        env.far_ok(&rsh, &["-q", "mirror", &evil, vault]);
    }
    let replicated = env.far_run(&rsh, &["-q", "replicate", &a]);
    assert_eq!(replicated.code, 1, "a conflict at each vault: {} {}", replicated.stdout, replicated.stderr);
    let audit = env.far_fails(&rsh, &["-q", "audit", &a], 1);
    for vault in &vaults {
        assert!(audit.stdout.contains(&format!("{vault}: forged")), "{}", audit.stdout);
    }
    let _ = env.far_run(&rsh, &["-q", "audit", &a, "--repair"]);
    assert_eq!(std::fs::read(Path::new(&a).join(&item).join("data/f0.txt")).unwrap(), honest, "A keeps its copy");
    env.ok(&["verify", &a]);
    assert!(!Path::new(&a).join(".ibi/kept").exists(), "nothing of A's was replaced");
}
