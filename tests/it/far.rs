//! Far collections (`HOST:PATH`): every command through `ibi serve --stdio`.
//! Most tests reach the far side through an `IBI_RSH` shim that runs the far
//! command on this machine (fast); `Sshd` runs a real OpenSSH server with no
//! daemon and no port (`ProxyCommand sshd -i`), as OpenSSH's own regression
//! suite does, for the tests that need real ssh.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::env::{control_empty, ibi_bin, minter_dir, sh, TestEnv};

impl TestEnv {
    /// Writes a shim for `IBI_RSH`: drops the host argument and runs the far
    /// command here, after `before` (shell lines); `forced` replaces the far
    /// command, as an authorized_keys forced command does.
    pub fn shim(&self, name: &str, before: &str, forced: Option<&str>) -> String {
        let run = match forced {
            Some(command) => format!("exec {command}"),
            None => "exec \"$@\"".to_string(),
        };
        let path = self.path(name);
        std::fs::write(&path, format!("#!/bin/sh\nshift\n{before}\n{run}\n")).unwrap();
        sh(&format!("chmod +x '{}'", path.display()));
        path.to_string_lossy().into_owned()
    }

    /// `ibi ARGS` with far collections reached through the shim at `rsh`.
    pub fn far_command(&self, rsh: &str, args: &[&str]) -> Command {
        let mut command = self.command(args);
        command.env("IBI_RSH", rsh).env("IBI_REMOTE_IBI", ibi_bin());
        command
    }

    pub fn far_run(&self, rsh: &str, args: &[&str]) -> crate::env::Run {
        self.far_command(rsh, args).output().expect("run ibi").into()
    }

    pub fn far_ok(&self, rsh: &str, args: &[&str]) -> crate::env::Run {
        let run = self.far_run(rsh, args);
        assert_eq!(run.code, 0, "ibi {args:?} failed: {}", run.stderr);
        run
    }

    pub fn far_fails(&self, rsh: &str, args: &[&str], code: i32) -> crate::env::Run {
        let run = self.far_run(rsh, args);
        assert_eq!(run.code, code, "ibi {args:?}: stdout {} stderr {}", run.stdout, run.stderr);
        assert!(!run.stderr.contains("panicked"), "panic: {}", run.stderr);
        run
    }
}

/// `lab:` + the absolute path of `root`.
fn far(root: &str) -> String {
    format!("lab:{root}")
}

fn init_args(root: &str) -> Vec<&str> {
    vec!["-q", "init", root, "--host", "test.ibi.example.org", "--ip", "192.0.2.30", "--granularity", "0.001"]
}

#[test]
fn mirror_copy_and_migrate_in_both_directions() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "", None);
    let a = env.filled("a", 12, 3);
    let expected = env.identities(&a);
    let b = env.path("b").to_string_lossy().into_owned();
    env.far_ok(&rsh, &["-q", "init", &far(&b), "--like", &a]);
    env.far_ok(&rsh, &["-q", "mirror", &a, &far(&b)]);
    assert_eq!(env.identities(&b), expected, "local -> far");
    env.far_ok(&rsh, &["-q", "verify", &far(&b)]);
    let again = env.far_ok(&rsh, &["mirror", &a, &far(&b)]);
    assert!(again.stderr.contains("copied 0") && again.stderr.contains("skipped 12"), "{}", again.stderr);

    let c = env.collection("c");
    env.far_ok(&rsh, &["-q", "mirror", &far(&b), &c]);
    assert_eq!(env.identities(&c), expected, "far -> local");

    let d = env.path("d").to_string_lossy().into_owned();
    env.far_ok(&rsh, &["-q", "init", &far(&d), "--like", &a]);
    env.far_ok(&rsh, &["-q", "copy", &far(&b), &far(&d)]);
    assert_eq!(env.identities(&d), expected, "far -> far through this machine");

    let e = env.collection("e");
    env.far_ok(&rsh, &["-q", "migrate", &far(&d), &e]);
    assert_eq!(env.identities(&e), expected, "far -> local migrate");
    assert!(env.ok(&["list", &d]).stdout.is_empty(), "migrate emptied the far source");
    env.far_ok(&rsh, &["-q", "migrate", &e, &far(&d)]);
    assert_eq!(env.identities(&d), expected, "local -> far migrate");
    env.ok(&["-q", "verify", &d]);
    assert!(control_empty(&d, "staging") && control_empty(&d, "trash"));
}

#[test]
fn every_collection_command_works_on_a_far_collection() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "", None);
    let root = env.path("lib").to_string_lossy().into_owned();
    let lib = far(&root);
    env.far_ok(&rsh, &init_args(&lib));
    let file = env.write("report.txt", b"first\n");
    let minted = env.far_ok(&rsh, &["deposit", &lib, &file.to_string_lossy()]);
    let (name, ibip) = minted.pairs()[0].clone();
    assert_eq!(env.far_ok(&rsh, &["list", &lib]).pairs(), vec![(name.clone(), ibip.clone())]);
    let resolved = env.far_ok(&rsh, &["resolve", &lib, &ibip]);
    assert_eq!(resolved.stdout.trim(), format!("{lib}/{name}"));
    env.far_ok(&rsh, &["update", &lib, &name, "--meta", "Title=Far"]);
    let shown = env.far_ok(&rsh, &["--json", "show", &lib, &name]);
    assert!(shown.stdout.contains("\"version\":2") || shown.stdout.contains("\"version\": 2"), "{}", shown.stdout);
    let export = env.path("export").to_string_lossy().into_owned();
    env.far_ok(&rsh, &["export", &lib, &name, &export, "--version", "1"]);
    assert_eq!(std::fs::read(env.path("export/data/report.txt")).unwrap(), b"first\n");
    env.far_ok(&rsh, &["withdraw", &lib, &name, "--reason", "test"]);
    env.far_fails(&rsh, &["resolve", &lib, &name], 1);
    env.far_ok(&rsh, &["-q", "verify", &lib]);

    // Damage the far item behind ibi's back: verify there finds it, repair restores it from a mirror.
    // Another subsystem on another IP: the far one mints 192.0.2.30's IBIps through its own distributor.
    let backup = env.path("backup").to_string_lossy().into_owned();
    env.ok(&[
        "-q",
        "init",
        &backup,
        "--host",
        "backup.ibi.example.org",
        "--ip",
        "192.0.2.31",
        "--granularity",
        "0.001",
    ]);
    env.far_ok(&rsh, &["-q", "mirror", &lib, &backup]);
    std::fs::write(Path::new(&root).join(&name).join("data/report.txt"), b"changed\n").unwrap_or_default();
    let damaged = env.far_fails(&rsh, &["verify", &lib], 1);
    assert!(damaged.stdout.contains(&name) || damaged.stderr.contains(&name), "{}", damaged.stderr);
}

#[test]
fn far_location_never_becomes_a_local_folder() {
    let env = TestEnv::new();
    let run = env.far_fails("false", &init_args("lab:x"), 3);
    assert!(run.stderr.contains("lab:x"), "{}", run.stderr);
    env.fails(&["list", "lab:/nowhere"], 3);
    assert!(!env.path("lab:x").exists() && !env.path("lab:").exists(), "a local folder was made");
    let local = env.collection("./a:b");
    assert!(Path::new(&local).join(".ibi").is_dir(), "./a:b is a local path");
}

#[test]
fn a_banner_before_the_greeting_is_skipped() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "echo 'Welcome to lab'; echo 'Last login: never'", None);
    let root = env.path("lib").to_string_lossy().into_owned();
    env.far_ok(&rsh, &init_args(&far(&root)));
    assert!(env.far_ok(&rsh, &["list", &far(&root)]).stdout.is_empty());
}

#[test]
fn a_missing_far_ibi_is_named() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "echo 'sh: 1: ibi: not found' >&2", Some("/nonexistent/ibi serve --stdio"));
    let run = env.far_fails(&rsh, &["list", "lab:/srv/x"], 3);
    assert!(run.stderr.contains("--remote-ibi") && run.stderr.contains("lab:/srv/x"), "{}", run.stderr);
}

#[test]
fn protocol_version_skew_names_both_versions() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "export IBI_PROTOCOL_VERSIONS=97-99", None);
    let run = env.far_fails(&rsh, &["list", "lab:/srv/x"], 3);
    let ours = format!("{0}-{1}", ibi::store::far::wire::VERSIONS.0, ibi::store::far::wire::VERSIONS.1);
    assert!(run.stderr.contains("97-99") && run.stderr.contains(&ours), "{}", run.stderr);
    assert!(run.stderr.contains("same ibi release"), "{}", run.stderr);
}

/// A first mirror into a far collection asked the server for each new item's
/// slot in a request of its own: a frame, a reply and a wake-up of both ends
/// per item. A version-7 session asks for a batch's slots in one `Slots`
/// request; the bytes the far side read show it.
#[test]
fn regress_far_mirror_asks_a_slot_per_new_item() {
    let env = TestEnv::new();
    let a = env.filled("a", 300, 1);
    let b = env.collection("b");
    let heard = env.path("heard");
    let forced = format!("tee '{}' | '{}' serve --stdio", heard.display(), ibi_bin().display());
    let rsh = env.shim("rsh-tee", "", Some(&forced));
    env.far_ok(&rsh, &["-q", "mirror", &a, &far(&b)]);
    assert_eq!(env.identities(&b), env.identities(&a));
    let heard = String::from_utf8_lossy(&std::fs::read(&heard).unwrap()).into_owned();
    let one_by_one = heard.matches(r#"{"Slot":"#).count();
    let batched = heard.matches(r#"{"Slots":"#).count();
    assert_eq!(one_by_one, 0, "{one_by_one} single Slot requests for 300 new items");
    assert!((1..=2).contains(&batched), "{batched} Slots requests for 300 new items");
}

#[test]
fn a_held_far_lock_exits_75() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "", None);
    let a = env.filled("a", 2, 1);
    let b = env.collection("b");
    let lock = Path::new(&b).join(".ibi/write.lock");
    let mut holder = Command::new("flock").arg("--no-fork").arg(&lock).args(["sleep", "30"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let run = env.far_fails(&rsh, &["mirror", &a, &far(&b)], 75);
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(run.stderr.contains("locked"), "{}", run.stderr);
    env.far_ok(&rsh, &["-q", "mirror", &a, &far(&b)]);
    assert_eq!(env.identities(&b), env.identities(&a));
}

#[test]
fn forced_command_restrictions_are_kept() {
    let env = TestEnv::new();
    let a = env.filled("a", 3, 1);
    let library = env.collection("srv/library");
    let library2 = env.collection("srv/library2");
    let srv_lib = env.path("srv/lib").to_string_lossy().into_owned();
    let restricted = env.shim(
        "restricted",
        "",
        Some(&format!("{} serve --stdio --restrict-to-path {srv_lib}", ibi_bin().display())),
    );
    std::fs::create_dir_all(&srv_lib).unwrap();
    let run = env.far_fails(&restricted, &["list", &far(&library2)], 2);
    assert!(run.stderr.contains("restrict-to-path"), "{}", run.stderr);
    env.far_fails(&restricted, &["list", &far(&library)], 2);
    env.far_fails(&restricted, &["list", &far(&format!("{srv_lib}/../library"))], 2);

    let read_only = env.shim("ro", "", Some(&format!("{} serve --stdio --read-only", ibi_bin().display())));
    let run = env.far_fails(&read_only, &["mirror", &a, &far(&library)], 2);
    assert!(run.stderr.contains("read-only"), "{}", run.stderr);
    assert!(env.ok(&["list", &library]).stdout.is_empty(), "a read-only server took writes");
    env.far_ok(&read_only, &["-q", "mirror", &far(&a), &library2]);

    let append = env.shim("ao", "", Some(&format!("{} serve --stdio --append-only", ibi_bin().display())));
    env.far_ok(&append, &["-q", "mirror", &a, &far(&library)]);
    let name = env.ok(&["list", &a]).pairs()[0].0.clone();
    env.ok(&["-q", "update", &a, &name, "--meta", "Title=newer"]);
    let run = env.far_fails(&append, &["mirror", &a, &far(&library)], 1);
    assert!(run.stderr.contains("append-only") || run.stdout.contains("append-only"), "{}", run.stderr);
    env.far_fails(&append, &["withdraw", &far(&library), &name, "--reason", "wipe"], 2);
    env.far_fails(&append, &["migrate", &far(&library), &library2], 2);
    assert_eq!(env.ok(&["list", &library]).lines().len(), 3, "an append-only server lost items");
    env.ok(&["-q", "verify", &library]);
}

/// Kills the local ibi, or the shim standing for ssh, at random moments during
/// mirrors and migrations to and from a far collection; a final run completes
/// with every item exactly once.
#[test]
fn killed_far_transfers_complete_on_rerun() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "", None);
    let a = env.filled("a", 60, 2);
    let expected = env.identities(&a);
    let b = env.collection("b");
    let c = env.collection("c");
    let mut dice = crate::crash::Dice::new();
    for round in 0..12 {
        let far_b = far(&b);
        let args: Vec<&str> = match round % 3 {
            0 => vec!["-q", "mirror", &a, &far_b],
            1 => vec!["-q", "mirror", &far_b, &c],
            _ => vec!["-q", "migrate", &far_b, &c],
        };
        let delay = dice.below(400);
        let mut child = env
            .far_command(&rsh, &args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        if round % 2 == 0 {
            child.kill().unwrap();
        } else {
            // Kill the transport under it: every process of the shim's session but ibi itself.
            let _ = Command::new("pkill").args(["-KILL", "-P", &child.id().to_string()]).status();
        }
        child.wait().unwrap();
    }
    // The far server of the last killed run ends when it reads the end of its
    // input, releasing B's lease: the reruns wait for it rather than exit 75.
    env.far_ok(&rsh, &["-q", "mirror", &a, &far(&b), "--wait", "30"]);
    env.far_ok(&rsh, &["-q", "mirror", &far(&b), &c, "--wait", "30"]);
    assert_eq!(env.identities(&b), expected);
    assert_eq!(env.identities(&c), expected);
    for root in [&b, &c] {
        env.ok(&["-q", "verify", root]);
        assert!(control_empty(root, "staging") && control_empty(root, "trash"), "{root}");
    }
}

/// A real OpenSSH server with no daemon and no port: `ssh -F cfg lab` runs
/// `sshd -i` as its ProxyCommand, with a generated host key and user key.
pub struct Sshd {
    pub config: PathBuf,
}

impl Sshd {
    /// `None` when sshd is not installed (scripts/setup installs it).
    pub fn new(env: &TestEnv, forced: Option<&str>) -> Sshd {
        let sshd = Path::new("/usr/sbin/sshd");
        assert!(sshd.exists(), "sshd is missing: run scripts/setup (scripts/test does)");
        let dir = env.path("ssh");
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.display();
        sh(&format!(
            "cd '{d}' && rm -f host_key* user_key* && ssh-keygen -q -t ed25519 -N '' -f host_key && ssh-keygen -q -t ed25519 -N '' -f user_key"
        ));
        let key = std::fs::read_to_string(dir.join("user_key.pub")).unwrap();
        let options = forced.map(|c| format!("command=\"{c}\",restrict ")).unwrap_or_default();
        std::fs::write(dir.join("authorized_keys"), format!("{options}{key}")).unwrap();
        std::fs::write(
            dir.join("sshd_config"),
            format!(
                "HostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\nPidFile none\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nAcceptEnv IBI_*\nLogLevel ERROR\n"
            ),
        )
        .unwrap();
        let user = sh("id -un").trim().to_string();
        let config = dir.join("ssh_config");
        std::fs::write(
            &config,
            format!(
                "Host lab\n  User {user}\n  IdentityFile {d}/user_key\n  IdentitiesOnly yes\n  BatchMode yes\n  \
                 ProxyCommand {} -i -f {d}/sshd_config\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  \
                 LogLevel ERROR\n  SetEnv IBI_MINTER_DIR={}\n",
                sshd.display(),
                minter_dir(env.root()).display()
            ),
        )
        .unwrap();
        Sshd { config }
    }

    /// The `IBI_RSH` value that goes through this server.
    pub fn rsh(&self) -> String {
        format!("ssh -F {}", self.config.display())
    }
}

#[test]
fn mirror_over_real_ssh_both_ways() {
    let env = TestEnv::new();
    let sshd = Sshd::new(&env, None);
    let a = env.filled("a", 8, 2);
    let b = env.path("b").to_string_lossy().into_owned();
    env.far_ok(&sshd.rsh(), &["-q", "init", &far(&b), "--like", &a]);
    env.far_ok(&sshd.rsh(), &["-q", "mirror", &a, &far(&b)]);
    assert_eq!(env.identities(&b), env.identities(&a));
    let c = env.collection("c");
    env.far_ok(&sshd.rsh(), &["-q", "mirror", &format!("ssh://lab/{}", b.trim_start_matches('/')), &c]);
    assert_eq!(env.identities(&c), env.identities(&a));
}

#[test]
fn append_only_forced_command_over_real_ssh() {
    let env = TestEnv::new();
    let forced = format!("{} serve --stdio --append-only", ibi_bin().display());
    let sshd = Sshd::new(&env, Some(&forced));
    let a = env.filled("a", 3, 1);
    let b = env.collection("b");
    env.far_ok(&sshd.rsh(), &["-q", "mirror", &a, &far(&b)]);
    let name = env.ok(&["list", &b]).pairs()[0].0.clone();
    let run = env.far_fails(&sshd.rsh(), &["withdraw", &far(&b), &name, "--reason", "wipe"], 2);
    assert!(run.stderr.contains("append-only"), "{}", run.stderr);
    assert_eq!(env.ok(&["list", &b]).lines().len(), 3);
}

#[test]
fn mirror_watch_delivers_to_a_far_collection() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "", None);
    let src = env.filled("src", 1, 1);
    let dst = env.collection("dst");
    let command =
        env.far_command(&rsh, &["mirror", &src, &far(&dst), "--watch"]).stderr(std::process::Stdio::null()).spawn();
    let mut watcher = crate::env::Reaper(Some(command.unwrap()));
    assert!(crate::env::wait_until(20, || env.identities(&dst).len() == 1));
    env.write("late/new.txt", b"deposited while mirror --watch runs");
    env.ok(&["deposit", &src, env.path("late").to_str().unwrap()]);
    assert!(crate::env::wait_until(15, || env.identities(&dst).len() == 2), "the new item did not arrive");
    let child = watcher.0.as_mut().unwrap();
    sh(&format!("kill -TERM {}", child.id()));
    assert!(child.wait().unwrap().success());
    watcher.0 = None;
    env.ok(&["-q", "verify", &dst]);
}

/// Retire (and handover) reach a far collection: its server changes its own config.
#[test]
fn retire_of_a_far_collection_stops_its_minting() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "", None);
    let lib = far(&env.path("lib").to_string_lossy());
    env.far_ok(&rsh, &init_args(&lib));
    env.far_ok(&rsh, &["-q", "retire", &lib]);
    let file = env.write("f.txt", b"f").to_string_lossy().into_owned();
    let run = env.far_fails(&rsh, &["deposit", &lib, &file], 2);
    assert!(run.stderr.contains("retired"), "{}", run.stderr);
}

#[test]
fn a_far_collection_is_served_over_http() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "", None);
    let root = env.filled("lib", 2, 2);
    let name = env.ok(&["list", &root]).lines()[0].split('\t').next().unwrap().to_string();
    let far = format!("lab:{root}");
    let server = crate::serve::Server::start(env.far_command(&rsh, &["serve", &far, "--listen", "127.0.0.1:0"]));
    let landing = crate::serve::get(&server.url(&format!("/{name}")), &[]);
    assert_eq!(landing.status, 200, "{}", landing.text());
    let file = crate::serve::get(&server.url(&format!("/{name}/data/f1.txt")), &[("Range", "bytes=-4")]);
    assert_eq!((file.status, file.text().as_str()), (206, "e 1\n"));
}

/// Every reading command works through a `--read-only` key, and the collection is
/// left exactly as it was (no lock file, no SQLite log).
#[test]
fn reading_commands_work_through_a_read_only_key() {
    let env = TestEnv::new();
    let a = env.filled("a", 2, 2);
    let (name, ibip) = env.ok(&["list", &a]).pairs()[0].clone();
    let _ = std::fs::remove_file(Path::new(&a).join(".ibi/write.lock"));
    let before = crate::env::snapshot(Path::new(&a));
    let ro = env.shim("ro", "", Some(&format!("{} serve --stdio --read-only", ibi_bin().display())));
    assert_eq!(env.far_ok(&ro, &["list", &far(&a)]).pairs().len(), 2);
    assert!(env.far_ok(&ro, &["show", &far(&a), &name]).stdout.contains(&ibip));
    assert!(env.far_ok(&ro, &["resolve", &far(&a), &ibip]).stdout.contains(&name));
    assert!(env.far_ok(&ro, &["verify", &far(&a)]).stderr.contains("0 problem"));
    let out = env.path("out");
    env.far_ok(&ro, &["-q", "export", &far(&a), &name, out.to_str().unwrap()]);
    assert!(out.join("bagit.txt").exists());
    let refused = env.far_fails(&ro, &["withdraw", &far(&a), &name, "--reason", "x"], 2);
    assert!(refused.stderr.contains("read-only"), "{}", refused.stderr);
    assert_eq!(crate::env::snapshot(Path::new(&a)), before, "a read-only key changed the collection");
}

/// Migrating out of a collection behind an append-only key copied every item into
/// DST, then exited 2 "refused" at the first removal. The refusal now comes first,
/// and DST is left as it was.
#[test]
fn regress_refused_migrate_copies_first() {
    let env = TestEnv::new();
    let a = env.filled("a", 4, 1);
    let dst = env.collection("dst");
    let append = env.shim("ao", "", Some(&format!("{} serve --stdio --append-only", ibi_bin().display())));
    let run = env.far_fails(&append, &["migrate", &far(&a), &dst], 2);
    assert!(run.stderr.contains("append-only"), "{}", run.stderr);
    assert!(env.ok(&["list", &dst]).stdout.is_empty(), "a refused migrate copied items into DST");
    assert_eq!(env.ok(&["list", &a]).lines().len(), 4);
}

/// `HOST:~/library` made a folder named `~` wherever the far side started, instead
/// of meaning the far account's home folder, as scp and rsync read it.
#[test]
fn regress_home_folder_path_makes_a_tilde_folder() {
    let env = TestEnv::new();
    let home = env.path("home");
    std::fs::create_dir_all(&home).unwrap();
    let rsh = env.shim("rsh", &format!("export HOME='{}'", home.display()), None);
    let mut args = init_args("lab:~/library");
    args[0] = "-q";
    env.far_ok(&rsh, &args);
    assert!(home.join("library/.ibi/collection.toml").is_file(), "the collection is in the far home folder");
    assert!(!env.path("~").exists(), "a folder named ~ was made");
    env.write("src/a.txt", b"a");
    env.far_ok(&rsh, &["-q", "deposit", "lab:~/library", env.path("src").to_str().unwrap()]);
    assert_eq!(env.far_ok(&rsh, &["list", "lab:~/library"]).lines().len(), 1);
}

/// A mirror's raise of the far minter after placing is covered by the names it
/// placed, so names dated by a source clock running ahead (two days here) are
/// copied, not refused as a minter pushed past the far clock.
#[test]
fn names_dated_ahead_of_the_far_clock_mirror_into_it() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "unset LD_PRELOAD FAKETIME", None);
    let a = env.collection("a");
    env.write("ahead.txt", b"ahead");
    let run = crate::env::sh_in(env.root(), &format!("faketime -f +2d \"$IBI\" -q deposit {a} ahead.txt"));
    crate::env::assert_code(&run, 0, "a deposit two days ahead");
    let b = far(&env.path("b").to_string_lossy());
    env.far_ok(&rsh, &["-q", "init", &b, "--like", &a]);
    env.far_ok(&rsh, &["-q", "mirror", &a, &b]);
    assert_eq!(env.far_ok(&rsh, &["list", &b]).lines().len(), 1);
}

/// An ssh that refused the host key (exit 255, "Host key verification failed.")
/// was reported as "the far side never greeted … Is ibi installed there?": the
/// message now starts with ssh's failure and its own words.
#[test]
fn regress_ssh_host_key_failure_says_the_far_side_never_greeted() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "echo 'Host key verification failed.' >&2; exit 255", None);
    let run: crate::env::Run = env.far_command(&rsh, &["list", "lab:/srv/library"]).output().unwrap().into();
    assert_eq!(run.code, 3, "{}", run.stderr);
    let error = run.stderr.lines().find(|l| l.starts_with("ibi: error")).unwrap_or_default().to_string();
    assert!(error.contains("ssh could not connect (exit 255): Host key verification failed."), "{}", run.stderr);
    assert!(!error.contains("never greeted") && !error.contains("Is ibi installed"), "{error}");
}

/// The witness of a far collection (issue 24): a verify run from another machine
/// has the far server make it from its own bags and sign it with its own key,
/// which never crosses the wire; `ibi witness HOST:PATH` reads it, a proof made
/// through the server checks against the key published at the far end, and a
/// read-only key makes none. A version-3 far side makes none either.
#[test]
fn a_far_verify_has_the_server_make_and_sign_the_witness() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "", None);
    let library = env.filled("library", 4, 1);
    let far_library = far(&library);
    let read_only = env.shim("ro", "", Some(&format!("{} serve --stdio --read-only", ibi_bin().display())));
    env.far_ok(&read_only, &["-q", "verify", &far_library]);
    env.far_fails(&rsh, &["witness", &far_library], 2);
    let verified = env.far_ok(&rsh, &["verify", &far_library]);
    assert!(verified.stderr.contains("witness: root"), "{}", verified.stderr);
    let from_afar: serde_json::Value =
        serde_json::from_str(&env.far_ok(&rsh, &["witness", &far_library]).stdout).unwrap();
    let here: serde_json::Value = serde_json::from_str(&env.ok(&["witness", &library]).stdout).unwrap();
    assert_eq!(from_afar, here, "the far server kept what it made");
    assert_eq!(here["items"], 4);
    let config = std::fs::read_to_string(Path::new(&library).join(".ibi/collection.toml")).unwrap();
    let key = here["public_key"].as_str().unwrap();
    assert!(config.contains(key), "the far end published its own key");
    let name = env.identities(&library).into_keys().next().unwrap();
    let proof =
        env.write("proof.json", env.far_ok(&rsh, &["witness", &far_library, "--prove", &name]).stdout.as_bytes());
    env.ok(&["witness", "--check", proof.to_str().unwrap(), "--key", key]);
    let older = env.shim("rsh3", "export IBI_PROTOCOL_VERSIONS=3", None);
    let old = env.far_ok(&older, &["verify", &far_library]);
    assert!(!old.stderr.contains("witness: root"), "{}", old.stderr);
}

/// A far server mints at most `MAX_MINT` (1,024) names a request; the client
/// asks for more in several requests, and the names are still all distinct.
#[test]
fn a_far_mint_of_more_than_a_request_holds_is_asked_in_parts() {
    let env = TestEnv::new();
    let rsh = env.shim("rsh", "", None);
    let lib = far(&env.path("lib").to_string_lossy());
    let host = ["--host", "test.ibi.example.org", "--ip", "192.0.2.30", "--granularity", "0.0001"];
    env.far_ok(&rsh, &[&["-q", "init", lib.as_str()][..], &host].concat());
    let run = env.far_ok(&rsh, &["mint", "-C", &lib, "--count", "2500"]);
    let names: std::collections::BTreeSet<&str> =
        run.lines().into_iter().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(names.len(), 2500, "{} distinct names of 2,500", names.len());
}
