//! Deposit, list and resolve end to end: round trips, refusals of what a bag
//! cannot hold, bagit-python interoperability both ways, and failures (disk
//! full, unreadable source) that must leave nothing behind.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;

use crate::env::{bagit_py, control_empty, ibi_bin, sh, unprivileged_ibi, TestEnv};

fn items(env: &TestEnv, root: &str) -> Vec<(String, String)> {
    env.ok(&["list", root]).pairs()
}

#[test]
fn deposit_list_resolve_verify_round_trip() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("one/a.txt", b"alpha");
    env.write("two.txt", b"bravo");
    let run = env.ok(&["deposit", &root, "one", "two.txt", "--each", "--meta", "Contact-Name=Ana Silva"]);
    let printed = run.pairs();
    assert_eq!(printed.len(), 2);
    let listed = items(&env, &root);
    let mut sorted = printed.clone();
    sorted.sort();
    assert_eq!(listed, sorted);
    let (name, ibip) = &printed[0];
    let by_name = env.ok(&["resolve", &root, &name.to_uppercase()]).stdout;
    let by_ibip = env.ok(&["resolve", &root, &ibip.to_lowercase()]).stdout;
    assert_eq!(by_name, by_ibip);
    let item = std::path::PathBuf::from(by_name.trim());
    assert_eq!(fs::read(item.join("data/a.txt")).unwrap(), b"alpha");
    let info = fs::read_to_string(item.join("bag-info.txt")).unwrap();
    assert!(info.contains(&format!("External-Identifier: {name}\nExternal-Identifier: {ibip}\n")), "{info}");
    assert!(info.contains("Contact-Name: Ana Silva") && info.contains("Payload-Oxum: 5.1"), "{info}");
    env.ok(&["verify", &root]);
    let (_, two) = &printed[1];
    let two_path = env.ok(&["resolve", &root, two]).stdout;
    assert!(std::path::Path::new(two_path.trim()).join("data/two.txt").is_file());
}

#[test]
fn list_since_until_filters_by_name_date() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("x", b"x");
    env.ok(&["deposit", &root, "x"]);
    assert_eq!(env.ok(&["list", &root, "--since", "2000-01-01T00:00:00Z"]).lines().len(), 1);
    assert_eq!(env.ok(&["list", &root, "--until", "2000-01-01T00:00:00Z"]).lines().len(), 0);
}

#[test]
fn a_missing_path_or_a_non_identifier_is_invalid_input() {
    let env = TestEnv::new();
    let root = env.collection("col");
    let run = env.fails(&["deposit", &root, "nowhere"], 2);
    assert!(run.stderr.contains("nowhere does not exist"), "{}", run.stderr);
    let run = env.fails(&["resolve", &root, "garbage"], 2);
    assert!(run.stderr.contains("not a repository name or an IBIp"), "{}", run.stderr);
    assert!(control_empty(&root, "staging"));
}

#[test]
fn commands_refuse_a_root_that_is_not_a_collection() {
    let env = TestEnv::new();
    fs::create_dir(env.path("plain")).unwrap();
    env.write("f", b"f");
    for args in [
        &["deposit", "plain", "f"][..],
        &["verify", "plain"],
        &["list", "plain"],
        &["resolve", "plain", "a.b/c/2009/01.01.00.00"],
        &["mint", "-C", "plain"],
    ] {
        let run = env.fails(args, 2);
        assert!(run.stderr.contains("plain is not an ibi collection"), "{args:?}: {}", run.stderr);
    }
    let root = env.collection("col");
    let again = env.fails(&["init", &root, "--host", "a.b.c"], 2);
    assert!(again.stderr.contains("already a collection"), "{}", again.stderr);
}

#[test]
fn special_files_are_refused_and_listed_symlinks_follow_on_request() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("src/real.txt", b"real");
    symlink("real.txt", env.path("src/link")).unwrap();
    sh(&format!("mkfifo '{}'", env.path("src/pipe").display()));
    let run = env.fails(&["deposit", &root, "src"], 2);
    assert!(run.stderr.contains("link (symlink)") && run.stderr.contains("pipe (FIFO)"), "{}", run.stderr);
    assert!(items(&env, &root).is_empty());
    fs::remove_file(env.path("src/pipe")).unwrap();
    env.ok(&["deposit", &root, "src", "--follow-symlinks"]);
    let (name, _) = &items(&env, &root)[0];
    let path = env.ok(&["resolve", &root, name]).stdout;
    assert_eq!(fs::read(std::path::Path::new(path.trim()).join("data/link")).unwrap(), b"real");
}

#[test]
fn empty_folders_are_kept_with_a_warning() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("src/f", b"f");
    fs::create_dir_all(env.path("src/empty")).unwrap();
    let run = env.ok(&["deposit", &root, "src"]);
    assert!(run.stderr.contains("empty folder data/empty is kept"), "{}", run.stderr);
    let path = env.ok(&["resolve", &root, &items(&env, &root)[0].0]).stdout;
    assert!(std::path::Path::new(path.trim()).join("data/empty").is_dir());
}

#[test]
fn move_removes_originals_only_after_the_item_is_placed() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("src/a", b"a");
    env.ok(&["deposit", &root, "src", "--move"]);
    assert!(!env.path("src").exists());
    assert_eq!(items(&env, &root).len(), 1);
    env.ok(&["verify", &root]);
}

#[test]
fn bagit_python_validates_items_with_awkward_names() {
    let env = TestEnv::new();
    let root = env.collection("col");
    for name in ["with space.txt", "new\nline.txt", "ção/ñandú 名前.txt", "tab\there.txt"] {
        env.write(&format!("src/{name}"), name.as_bytes());
    }
    env.ok(&["deposit", &root, "src"]);
    let path = env.ok(&["resolve", &root, &items(&env, &root)[0].0]).stdout;
    let out = Command::new(bagit_py()).arg("--validate").arg(path.trim()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    env.ok(&["verify", &root]);
}

#[test]
fn bags_made_by_bagit_python_deposit_with_bag_and_verify() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("pybag/a.txt", b"alpha");
    env.write("pybag/deep/b c.txt", b"bravo");
    let out =
        Command::new(bagit_py()).args(["--sha256", "--contact-name", "Ana"]).arg(env.path("pybag")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    env.ok(&["deposit", &root, "--bag", "pybag"]);
    env.ok(&["verify", &root]);
    let path = env.ok(&["resolve", &root, &items(&env, &root)[0].0]).stdout;
    let info = fs::read_to_string(std::path::Path::new(path.trim()).join("bag-info.txt")).unwrap();
    assert!(info.contains("Contact-Name: Ana"), "{info}");
    // A bag whose payload no longer matches its manifest is not deposited.
    fs::write(env.path("pybag/data/a.txt"), b"tampered").unwrap();
    let run = env.fails(&["deposit", &root, "--bag", "pybag"], 1);
    assert!(run.stderr.contains("does not match its manifest"), "{}", run.stderr);
    assert_eq!(items(&env, &root).len(), 1);
}

fn assert_nothing_left(env: &TestEnv, root: &str) {
    assert!(items(env, root).is_empty(), "no item may appear");
    let staging = std::path::Path::new(root).join(".ibi/staging");
    assert_eq!(fs::read_dir(&staging).map(|d| d.count()).unwrap_or(0), 0, "staging must be empty");
    assert!(!std::path::Path::new(root).join(".ibi/minter.state").exists(), "the minter state must be unchanged");
    let _ = env;
}

#[test]
fn disk_full_fails_with_exit_3_and_leaves_nothing() {
    let env = TestEnv::new();
    let small = env.tmpfs("small", "512k");
    let root = small.at("col");
    env.ok(&["-q", "init", &root, "--host", "a.b.c", "--granularity", "0.001"]);
    env.write("big/blob", &vec![7u8; 2 * 1024 * 1024]);
    let run = env.run(&["deposit", &root, "big"]);
    let ok = run.code == 3 && run.stderr.contains("No space left on device");
    assert!(ok, "exit {} stderr {}", run.code, run.stderr);
    assert_nothing_left(&env, &root);
}

#[test]
fn unreadable_source_fails_with_exit_3_and_leaves_nothing() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("src/ok", b"ok");
    let secret = env.write("src/secret", b"secret");
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o000)).unwrap();
    sh(&format!(
        "chmod 755 '{}' && chown -R 65534:65534 '{}' '{}'",
        env.root().display(),
        root,
        env.path("src").display()
    ));
    // Root ignores permissions, so drop to nobody for this run.
    let mut cmd = unprivileged_ibi();
    let out = cmd.args(["deposit", &root]).arg(env.path("src")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("src/secret") && stderr.contains("ermission denied"), "{stderr}");
    assert_nothing_left(&env, &root);
}

#[test]
fn four_processes_times_25_deposits_give_100_distinct_valid_items() {
    let env = TestEnv::new();
    let root = env.collection("col");
    for p in 0..4 {
        for i in 0..25 {
            env.write(&format!("src/{p}/{i}.txt"), format!("{p}-{i}").as_bytes());
        }
    }
    let workers: Vec<_> = (0..4)
        .map(|p| {
            let (root, dir) = (root.clone(), env.path(&format!("src/{p}")));
            let minters = crate::env::minter_dir(env.root());
            std::thread::spawn(move || {
                let mut names = Vec::new();
                for i in 0..25 {
                    let out = Command::new(ibi_bin())
                        .env(crate::env::MINTER_DIR_ENV, &minters)
                        .args(["deposit", &root])
                        .arg(dir.join(format!("{i}.txt")))
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                    names.push(String::from_utf8(out.stdout).unwrap());
                }
                names
            })
        })
        .collect();
    let names: std::collections::HashSet<String> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    assert_eq!(names.len(), 100);
    assert_eq!(items(&env, &root).len(), 100);
    let run = env.ok(&["verify", &root]);
    assert!(run.stderr.contains("verified 100 item(s), 100 file(s)"), "{}", run.stderr);
}

/// Whether a present item of `root` holds `content` at `data/<file>`.
fn in_service(env: &TestEnv, root: &str, file: &str, content: &[u8]) -> bool {
    items(env, root)
        .iter()
        .any(|(name, _)| fs::read(Path::new(root).join(name).join("data").join(file)).ok().as_deref() == Some(content))
}

/// "Already deposited" trusted the deposit record: after a withdrawal (with or
/// without --purge) or an update that removed the file, `deposit --move` of the same
/// files said "already deposited", exited 0 and deleted the originals, leaving the
/// bytes nowhere in service. Now they are deposited anew, and only then removed.
#[test]
fn regress_already_deposited_deletes_the_only_copy() {
    for how in ["withdraw", "withdraw --purge", "update --remove"] {
        let env = TestEnv::new();
        let root = env.collection("col");
        env.write("src/keep.txt", b"keep");
        env.write("src/precious.txt", b"the only copy");
        let name = env.ok(&["deposit", &root, "src"]).pairs()[0].0.clone();
        let mut args: Vec<&str> = how.split(' ').collect();
        args.insert(1, &root);
        args.insert(2, &name);
        match args[0] {
            "update" => args.push("precious.txt"),
            _ => args.extend(["--reason", "test"]),
        }
        env.ok(&args);
        assert!(!in_service(&env, &root, "precious.txt", b"the only copy"), "{how}: the content left service");
        let run = env.ok(&["deposit", &root, "src", "--move"]);
        assert!(!env.path("src").exists(), "{how}: --move removes the originals once its item is durable");
        assert!(!run.stderr.contains("already deposited"), "{how}: {}", run.stderr);
        assert!(in_service(&env, &root, "precious.txt", b"the only copy"), "{how}: the bytes are nowhere in service");
        env.ok(&["-q", "verify", &root]);
    }
}

/// A batch is named and tagged while the batch before it is placed, so its own
/// look-up of content already deposited can miss what that batch deposits: the
/// same content in the two batches of one run must still make one item, not two.
#[test]
fn regress_content_of_the_batch_before_deposited_twice() {
    let env = TestEnv::new();
    let root = env.collection("col");
    let mut args = vec!["deposit".to_string(), "--each".into(), root.clone()];
    for i in 0..300 {
        // The first file of the second batch (of 256) repeats files of the first.
        let content = if (256..264).contains(&i) { format!("item {}", i - 256) } else { format!("item {i}") };
        env.write(&format!("src/d{i:03}/x.txt"), content.as_bytes());
        args.push(env.path(&format!("src/d{i:03}")).display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = env.ok(&args);
    let pairs = run.pairs();
    assert_eq!(pairs.len(), 300, "{}", run.stdout);
    for i in 0..8 {
        assert_eq!(pairs[256 + i].0, pairs[i].0, "d{:03} and d{i:03} hold the same content", 256 + i);
    }
    assert_eq!(run.stderr.matches("already deposited").count(), 8, "{}", run.stderr);
    assert_eq!(items(&env, &root).len(), 292);
    env.ok(&["-q", "verify", &root]);
}

/// A deposit record that names an item holding other bytes (written by another
/// party, or left by a changed item) never makes a deposit "already deposited".
#[test]
fn regress_a_forged_deposit_record_removes_the_source() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("other/x.txt", b"other content");
    let other = env.ok(&["deposit", &root, "other"]).pairs()[0].0.clone();
    env.write("src/precious.txt", b"the only copy");
    env.ok(&["deposit", &root, "src"]);
    // Every record now names the other item.
    crate::env::on_inventory(&root, &format!("c.execute(\"UPDATE deposits SET name = '{other}'\")"));
    env.write("again/precious.txt", b"the only copy");
    env.ok(&["deposit", &root, "again", "--move"]);
    assert!(!env.path("again").exists());
    assert_eq!(items(&env, &root).len(), 3, "deposited anew, not taken for the other item");
}

/// "not a bag" ended in "(os error 2)", and a bag declaring another encoding was
/// said to declare "": the message now names the missing file and what a bag needs,
/// or what the bag declares.
#[test]
fn regress_not_a_bag_says_os_error() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("plain/data/a.txt", b"a");
    let run = env.fails(&["deposit", "--bag", &root, "plain"], 2);
    assert!(!run.stderr.contains("os error"), "{}", run.stderr);
    assert!(run.stderr.contains("has no bagit.txt") && run.stderr.contains("data/"), "{}", run.stderr);
    for (declaration, said) in [
        ("BagIt-Version: 1.0\nTag-File-Character-Encoding: ISO-8859-1\n", "ISO-8859-1"),
        ("\u{feff}BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n", "byte-order mark"),
        ("Tag-File-Character-Encoding: UTF-8\n", "no BagIt-Version"),
    ] {
        env.write("odd/bagit.txt", declaration.as_bytes());
        env.write("odd/data/a.txt", b"a");
        let run = env.fails(&["deposit", "--bag", &root, "odd"], 2);
        assert!(run.stderr.contains(said), "{said}: {}", run.stderr);
    }
}

/// BagIt conformance: a manifest written by md5sum in binary mode (`digest *data/x`)
/// made ibi claim the file was missing (exit 1, as if data were damaged), and a
/// `./data/x` path was refused as unsafe; bagit.py reads both. Both are read as
/// the path they name, and the bag is deposited and verifies.
#[test]
fn regress_md5sum_binary_and_dot_slash_manifest_lines() {
    let env = TestEnv::new();
    let root = env.collection("col");
    let lines = [
        ("binary", "*data/a.txt", "a", "0cc175b9c0f1b6a831c399e269772661"),
        ("dotted", " ./data/a.txt", "b", "92eb5ffee6ae2fec3ad71c777531578f"),
    ];
    for (name, line, content, md5) in lines {
        env.write(&format!("{name}/bagit.txt"), b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n");
        env.write(&format!("{name}/data/a.txt"), content.as_bytes());
        env.write(&format!("{name}/manifest-md5.txt"), format!("{md5} {line}\n").as_bytes());
        let run = env.run(&["deposit", "--bag", &root, name]);
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
    }
    env.ok(&["-q", "verify", &root]);
    assert_eq!(env.ok(&["list", &root]).lines().len(), 2);
}

/// `deposit --move` of a folder warned that it could not fsync the folder it had
/// just removed ("cannot fsync directory src: No such file or directory").
#[test]
fn regress_move_warns_it_cannot_fsync_a_removed_folder() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("src/sub/a.txt", b"a");
    env.write("src/b.txt", b"b");
    let run = env.ok(&["deposit", &root, "src", "--move"]);
    assert!(!env.path("src").exists(), "the sources are removed");
    assert!(!run.stderr.contains("fsync"), "{}", run.stderr);
}

/// Plain deposits of names ending in a space or TAB made items bagit-python
/// rejects (it strips the manifest line), with no warning. Now ibi warns, as it
/// does for `%`; bagit-python's verdict shows the warning is true.
#[test]
fn regress_trailing_space_names_make_bags_bagit_py_rejects() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("src/report.txt ", b"trailing space");
    env.write("src/notes.txt\t", b"trailing tab");
    let run = env.ok(&["deposit", &root, "src"]);
    assert_eq!(run.stderr.matches("ends with a space or TAB").count(), 2, "{}", run.stderr);
    let name = run.pairs()[0].0.clone();
    let item = std::path::Path::new(&root).join(&name);
    let checked = std::process::Command::new(crate::env::bagit_py()).arg("--validate").arg(&item).output().unwrap();
    assert!(!checked.status.success(), "bagit-python rejects what ibi warned about");
    env.ok(&["-q", "verify", &root]);
}

/// BagIt conformance: a manifest listing one file twice, payload names differing
/// only in letter case, and system files were deposited without a word; the LoC
/// suite expects a validator to warn about each (in a BagIt 0.97 bag: 1.0
/// forbids the first, `regress_v1_manifest_listing_a_file_twice_is_accepted`).
#[test]
fn regress_bagit_warning_cases_pass_silently() {
    let env = TestEnv::new();
    let root = env.collection("col");
    env.write("bag/bagit.txt", b"BagIt-Version: 0.97\nTag-File-Character-Encoding: UTF-8\n");
    let mut manifest = String::new();
    for (path, content) in [("data/a.txt", "a"), ("data/B.txt", "B"), ("data/b.txt", "b"), ("data/.DS_Store", "x")] {
        env.write(&format!("bag/{path}"), content.as_bytes());
        let digest = ibi::fsx::hash_bytes(content.as_bytes());
        manifest.push_str(&format!("{digest}  {path}\n"));
        if path == "data/a.txt" {
            manifest.push_str(&format!("{digest}  {path}\n"));
        }
    }
    env.write("bag/manifest-sha256.txt", manifest.as_bytes());
    let run = env.ok(&["deposit", "--bag", &root, "bag"]);
    for said in ["more than once", "differ only in letter case", "system file"] {
        assert!(run.stderr.contains(said), "{said}: {}", run.stderr);
    }
    env.ok(&["-q", "verify", &root]);
}

/// `deposit --bag` replaced a bag's Source-Organization and Bagging-Date with the
/// collection's and today's, and dropped its Bag-Size, silently, while other labels
/// (Organization-Address) stayed: the record became false. The bag's values are
/// kept now; ibi adds its own only where the bag has none, and says what it renames.
#[test]
fn regress_deposit_bag_rewrites_provenance() {
    let env = TestEnv::new();
    let root = env.path("lib").to_string_lossy().into_owned();
    let args = ["-q", "init", &root, "--host", "test.ibi.example.org", "--ip", "192.0.2.30", "--org", "INPE Library"];
    env.ok(&args);
    let payload = b"museum record\n";
    env.write("bag/bagit.txt", b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n");
    env.write("bag/data/record.txt", payload);
    let digest = ibi::digest::of_bytes(payload, &[]).sha256().to_string();
    env.write("bag/manifest-sha256.txt", format!("{digest}  data/record.txt\n").as_bytes());
    let info = "Source-Organization: Museu Nacional\nOrganization-Address: Rio de Janeiro\n\
                Bagging-Date: 1999-12-31\nBag-Size: 14 bytes\nPayload-Oxum: 14.1\nExternal-Identifier: MN-1999-42\n";
    env.write("bag/bag-info.txt", info.as_bytes());
    let deposited = env.ok(&["deposit", "--bag", &root, "bag"]);
    assert!(
        deposited.stderr.contains("MN-1999-42") && deposited.stderr.contains("Source-External-Identifier"),
        "{}",
        deposited.stderr
    );
    let name = deposited.pairs()[0].0.clone();
    let kept = std::fs::read_to_string(env.path(&format!("lib/{name}/bag-info.txt"))).unwrap();
    for line in [
        "Source-Organization: Museu Nacional",
        "Bagging-Date: 1999-12-31",
        "Bag-Size: 14 bytes",
        "Organization-Address: Rio de Janeiro",
    ] {
        assert!(kept.contains(line), "{line:?} lost: {kept}");
    }
    assert!(!kept.contains("INPE Library"), "{kept}");
    assert_eq!(kept.matches("Bagging-Date").count(), 1, "{kept}");
    env.ok(&["-q", "verify", &root]);
    let path = env.ok(&["resolve", &root, &name]).stdout;
    let out = Command::new(bagit_py()).arg("--validate").arg(path.trim()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// An empty source folder made an item with no payload, silently (and a second
/// empty folder was "already deposited" as it): a warning now says so.
#[test]
fn regress_empty_source_folder_deposits_silently() {
    let env = TestEnv::new();
    let root = env.collection("col");
    fs::create_dir_all(env.path("empty")).unwrap();
    let run = env.ok(&["deposit", &root, "empty"]);
    assert!(run.stderr.contains("holds no files") && run.stderr.contains("empty"), "{}", run.stderr);
    env.write("full/a.txt", b"a");
    let full = env.ok(&["deposit", &root, "full"]);
    assert!(!full.stderr.contains("holds no files"), "{}", full.stderr);
}

/// Issue 59 (a BagIt edge): `BagIt-Version : 1.0`, a space before the colon,
/// was accepted; RFC 8493 gives bagit.txt's lines as `LABEL: VALUE`, and the
/// Library of Congress conformance suite holds such a bag invalid
/// (`bagit-with-invalid-whitespace`). `deposit --bag` refuses it (exit 2) and
/// verify reports it in a held item (exit 1).
#[test]
fn regress_bagit_txt_whitespace_before_the_colon_is_accepted() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    let bag = bagged_by_bagit_python(&env);
    env.ok(&["-q", "deposit", "--bag", &root, bag.to_str().unwrap()]);
    let name = env.identities(&root).into_keys().next().unwrap();
    std::fs::write(bag.join("bagit.txt"), "BagIt-Version : 1.0\nTag-File-Character-Encoding: UTF-8\n").unwrap();
    let refused = env.fails(&["deposit", "--bag", &root, bag.to_str().unwrap()], 2);
    assert!(refused.stderr.contains("whitespace around the label"), "{}", refused.stderr);
    let held = std::path::Path::new(&root).join(&name).join("bagit.txt");
    std::fs::write(&held, "BagIt-Version : 1.0\nTag-File-Character-Encoding: UTF-8\n").unwrap();
    let verified = env.fails(&["verify", &root], 1);
    assert!(verified.stdout.contains("whitespace around the label"), "{}", verified.stdout);
}

/// Issue 59 (a BagIt edge): a payload manifest listing a path outside `data/`
/// gave exit 1 ("missing"), as if a file were lost; RFC 8493 §2.1.3 forbids the
/// line, so the bag is invalid: refused, exit 2, naming the path.
#[test]
fn regress_manifest_path_outside_data_reads_as_missing() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    let bag = bagged_by_bagit_python(&env);
    let manifest = bag.join("manifest-sha256.txt");
    let mut text = std::fs::read_to_string(&manifest).unwrap();
    text.push_str(&format!("{}  bag-info.txt\n", "0".repeat(64)));
    std::fs::write(&manifest, text).unwrap();
    let refused = env.fails(&["deposit", "--bag", &root, bag.to_str().unwrap()], 2);
    assert!(refused.stderr.contains("outside data/"), "{}", refused.stderr);
}

/// Issue 59 (a BagIt edge): a BagIt 1.0 manifest listing one file twice was
/// accepted with a warning; BagIt 1.0 allows each payload file once in a
/// manifest, so the bag is refused (exit 2), naming the file.
#[test]
fn regress_v1_manifest_listing_a_file_twice_is_accepted() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    let bag = bagged_by_bagit_python(&env);
    drop_tagmanifests(&bag);
    std::fs::write(bag.join("bagit.txt"), "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n").unwrap();
    let manifest = bag.join("manifest-sha256.txt");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, format!("{text}{text}")).unwrap();
    let refused = env.fails(&["deposit", "--bag", &root, bag.to_str().unwrap()], 2);
    assert!(refused.stderr.contains("data/a.txt more than once"), "{}", refused.stderr);
    assert!(env.ok(&["list", &root]).stdout.is_empty(), "nothing deposited");
}

/// Issue 59 (a BagIt edge): manifest lines written as `md5sum` writes them, a
/// `*` before the path (binary mode) or a path starting `./`, were taken
/// without a word; the LoC suite expects a warning. The bag is deposited, and
/// each such line is named.
#[test]
fn regress_checksum_tool_lines_pass_silently() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    let bag = bagged_by_bagit_python(&env);
    drop_tagmanifests(&bag);
    let manifest = bag.join("manifest-sha256.txt");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("  data/a.txt", " *data/a.txt")).unwrap();
    let run = env.ok(&["deposit", "--bag", &root, bag.to_str().unwrap()]);
    assert!(run.stderr.contains("data/a.txt is marked '*'"), "{}", run.stderr);
    let other = env.write("other/b.txt", b"beta\n").parent().unwrap().to_path_buf();
    let made = std::process::Command::new(crate::env::bagit_py()).arg(&other).output().unwrap();
    assert!(made.status.success());
    drop_tagmanifests(&other);
    let manifest = other.join("manifest-sha256.txt");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("  data/b.txt", "  ./data/b.txt")).unwrap();
    let run = env.ok(&["deposit", "--bag", &root, other.to_str().unwrap()]);
    assert!(run.stderr.contains("./data/b.txt starts with ./"), "{}", run.stderr);
    env.ok(&["-q", "verify", &root]);
}

/// Removes a bag's tagmanifests, so that its manifests can be edited.
fn drop_tagmanifests(bag: &std::path::Path) {
    for entry in std::fs::read_dir(bag).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with("tagmanifest-") {
            std::fs::remove_file(path).unwrap();
        }
    }
}

/// A bag of one file made by bagit-python, at `bag/` in the env.
fn bagged_by_bagit_python(env: &TestEnv) -> std::path::PathBuf {
    let bag = env.write("bag/a.txt", b"alpha\n").parent().unwrap().to_path_buf();
    let made = std::process::Command::new(crate::env::bagit_py()).arg(&bag).output().unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    bag
}
