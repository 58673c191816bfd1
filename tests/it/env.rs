//! `TestEnv`: a temporary directory plus helpers that run the real `ibi`
//! binary in it and check exit codes, stdout and stderr.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct TestEnv {
    pub dir: tempfile::TempDir,
    /// The env's minting collection: `collection` makes the first, and every later
    /// one follows it (`init --like`), as one subsystem has one minting collection.
    pub(crate) minting: std::sync::Mutex<Option<String>>,
    /// The S3 server's port once an S3 collection is made: every command gets the
    /// AWS environment, so that `init --like s3://…` reaches it.
    pub(crate) aws_port: std::sync::Mutex<Option<u16>>,
}

/// `ibi mint` for the subsystem of the standard's Examples 1 and 2 (host
/// mtc-m18.sid.inpe.br, IP 150.163.34.243), with state file `state` and extra flags.
pub fn example_mint_args<'a>(state: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["mint", "--host", "mtc-m18.sid.inpe.br", "--ip", "150.163.34.243", "--state", state];
    args.extend_from_slice(extra);
    args
}

/// The finished run of one command, with its text already decoded.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    /// The `name<TAB>ibip` lines of stdout, as pairs.
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.stdout
            .lines()
            .map(|l| l.split_once('\t').map(|(a, b)| (a.to_string(), b.to_string())).expect("name<TAB>ibip"))
            .collect()
    }
}

impl From<Output> for Run {
    fn from(out: Output) -> Self {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The binary under test: this build's, or `IBI_TEST_BIN` (run the regression tests
/// against an older build with `IBI_TEST_BIN=/path/to/old/ibi cargo test regress_`).
pub use ibi::store::local::minter::MINTER_DIR_ENV;
pub use ibi::store::witness_key::KEY_DIR_ENV;

/// The machine-wide minter folder of one test: every `ibi` a test runs shares it,
/// as collections on one machine do, and no test touches the real machine's.
pub fn minter_dir(env_root: &Path) -> PathBuf {
    env_root.join(".ibi-minters")
}

/// This machine's folder of witness keys (for collections in a bucket), in the env.
pub fn key_dir(env_root: &Path) -> PathBuf {
    env_root.join(".ibi-keys")
}

pub fn ibi_bin() -> PathBuf {
    std::env::var_os("IBI_TEST_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_ibi")))
}

/// A `Command` running `ibi` as the unprivileged user nobody when the tests run
/// as root (CI does), so that file permissions apply; as itself otherwise.
pub fn unprivileged_ibi() -> Command {
    if is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(ibi_bin());
        c
    } else {
        Command::new(ibi_bin())
    }
}

pub fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("id -u");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

impl TestEnv {
    /// The id of the local collection at `root`, from its `collection.toml`.
    pub fn collection_id(&self, root: &str) -> String {
        let config = std::fs::read_to_string(Path::new(root).join(".ibi/collection.toml")).unwrap();
        let line = config.lines().find(|l| l.starts_with("id = ")).expect("the collection has an id");
        line.split('"').nth(1).unwrap().to_string()
    }

    pub fn new() -> Self {
        TestEnv {
            dir: tempfile::tempdir().expect("temp dir"),
            minting: Default::default(),
            aws_port: Default::default(),
        }
    }

    /// An env in memory (`/dev/shm`, where fsync costs nothing) when there is one:
    /// for tests of what a large collection holds, not of what reaches a disk.
    pub fn in_memory() -> Self {
        let shm = Path::new("/dev/shm");
        let dir = match shm.is_dir() {
            true => tempfile::tempdir_in(shm),
            false => tempfile::tempdir(),
        };
        TestEnv { dir: dir.expect("temp dir"), ..TestEnv::new() }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// A `Command` for `ibi ARGS` running in the temp dir, with no terminal.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(ibi_bin());
        cmd.args(args)
            .current_dir(self.dir.path())
            .env(MINTER_DIR_ENV, minter_dir(self.root()))
            .env(KEY_DIR_ENV, key_dir(self.root()))
            .env_remove("RUST_BACKTRACE");
        if let Some(port) = *self.aws_port.lock().unwrap() {
            cmd.env("AWS_ACCESS_KEY_ID", "test")
                .env("AWS_SECRET_ACCESS_KEY", "test")
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"))
                .env("AWS_ALLOW_HTTP", "true");
        }
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.command(args).output().expect("run ibi").into()
    }

    /// Runs and asserts exit 0 and no panic.
    pub fn ok(&self, args: &[&str]) -> Run {
        let run = self.run(args);
        assert_eq!(run.code, 0, "ibi {args:?} failed: {}", run.stderr);
        run
    }

    /// Runs and asserts the exit code, a one-line error, and no panic.
    pub fn fails(&self, args: &[&str], code: i32) -> Run {
        let run = self.run(args);
        assert_eq!(run.code, code, "ibi {args:?}: stdout {} stderr {}", run.stdout, run.stderr);
        assert!(!run.stderr.contains("panicked"), "panic: {}", run.stderr);
        run
    }
}

/// The repository's root, for fixtures and the bagit-python venv.
/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// bagit-python's command, installed by `scripts/setup`.
pub fn bagit_py() -> PathBuf {
    let path = repo().join("target/bagit-venv/bin/bagit.py");
    assert!(path.exists(), "bagit-python is missing: run scripts/setup (scripts/test does)");
    path
}

/// Runs a shell command line, asserting success.
pub fn sh(script: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(script).output().expect("sh");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A child process that is killed if the test ends early.
pub struct Reaper(pub Option<std::process::Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `check` every 100 ms for up to `seconds`.
pub fn wait_until(seconds: u64, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    check()
}

impl TestEnv {
    /// `ibi init NAME --host … --ip … --granularity 0.001` for the env's first
    /// collection, `ibi init NAME --like FIRST` for every later one; returns the
    /// root path as text.
    pub fn collection(&self, name: &str) -> String {
        let root = self.path(name).to_string_lossy().into_owned();
        let mut minting = self.minting.lock().unwrap();
        match minting.as_ref() {
            Some(first) => drop(self.ok(&["-q", "init", &root, "--like", first])),
            None => {
                self.minting_collection(&root, "test.ibi.example.org");
                *minting = Some(root.clone());
            }
        }
        root
    }

    /// A collection that mints a subsystem of its own, `NAME.ibi.example.org` (its
    /// names share the first folder, `ibi.example.org`, with the test subsystem's).
    pub fn own_subsystem(&self, name: &str) -> String {
        let root = self.path(name).to_string_lossy().into_owned();
        let label: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        self.minting_collection(&root, &format!("{label}.ibi.example.org"));
        root
    }

    /// `ibi init ROOT --host HOST --ip … --granularity 0.001`: a minting collection.
    pub fn minting_collection(&self, root: &str, host: &str) {
        self.ok(&["-q", "init", root, "--host", host, "--ip", "192.0.2.30", "--granularity", "0.001"]);
    }

    /// Deposits `n` new one-file items into `root` (`deposit --each`), their
    /// sources `FOLDER-I/f.txt` under the temp dir.
    pub fn deposit_new_items(&self, root: &str, folder: &str, n: usize) {
        let sources: Vec<String> = (0..n)
            .map(|i| {
                let file = self.write(&format!("{folder}-{i}/f.txt"), format!("{folder} item {i}\n").as_bytes());
                file.parent().unwrap().to_string_lossy().into_owned()
            })
            .collect();
        let mut args = vec!["-q", "deposit", "--each", root];
        args.extend(sources.iter().map(String::as_str));
        self.ok(&args);
    }

    /// Writes a file (creating parents) under the temp dir.
    pub fn write(&self, rel: &str, content: &[u8]) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    }
}

impl TestEnv {
    /// A collection holding `n` items of `files` small files each; returns its root.
    /// The env's first collection mints `test.ibi.example.org`; a later one mints a
    /// subsystem of its own (`NAME.ibi.example.org`), one subsystem having one
    /// minting collection.
    pub fn filled(&self, name: &str, n: usize, files: usize) -> String {
        let first = self.minting.lock().unwrap().is_none();
        let root = if first { self.collection(name) } else { self.own_subsystem(name) };
        let mut paths = Vec::new();
        for i in 0..n {
            for j in 0..files {
                self.write(
                    &format!("{name}-src/{i:03}/f{j}.txt"),
                    format!("{name} item {i} file {j}\n").repeat(j + 1).as_bytes(),
                );
            }
            paths.push(self.path(&format!("{name}-src/{i:03}")).to_string_lossy().into_owned());
        }
        let mut args = vec!["-q", "deposit", "--each", root.as_str()];
        args.extend(paths.iter().map(String::as_str));
        self.ok(&args);
        root
    }

    /// `name -> identity digest` of every item, from `ibi list` and the tagmanifests.
    /// The collection's event log (`ibi --json log`), one value per event.
    pub fn log(&self, root: &str) -> Vec<serde_json::Value> {
        self.ok(&["--json", "log", root]).stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// How many of the collection's own events (not carried from elsewhere) of
    /// type `kind` each item has.
    pub fn own_events(&self, root: &str, kind: &str) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for event in self.log(root) {
            if event["type"] == kind && event.get("carried_from").is_none() {
                *counts.entry(event["item"].as_str().unwrap_or("-").to_string()).or_default() += 1;
            }
        }
        counts
    }

    pub fn identities(&self, root: &str) -> std::collections::BTreeMap<String, String> {
        self.ok(&["list", root])
            .lines()
            .iter()
            .map(|line| {
                let name = line.split('\t').next().unwrap().to_string();
                let tag = std::path::Path::new(root).join(&name).join("tagmanifest-sha256.txt");
                let (digest, _) = ibi::fsx::hash_file(&tag).unwrap();
                (name, digest)
            })
            .collect()
    }
}

/// Whether a control folder (`.ibi/staging`, `.ibi/trash`) is empty or absent.
/// Runs a Python snippet on the inventory of `root` (its path is `sys.argv[1]`,
/// `c` a connection to it) and returns what it printed.
pub fn on_inventory(root: &str, snippet: &str) -> String {
    let inventory = Path::new(root).join(".ibi/inventory.sqlite");
    let script = format!("import sqlite3, sys, os; c = sqlite3.connect(sys.argv[1]); {snippet}; c.commit()");
    let out = std::process::Command::new("python3").args(["-c", &script]).arg(&inventory).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn control_empty(root: &str, dir: &str) -> bool {
    std::fs::read_dir(std::path::Path::new(root).join(".ibi").join(dir)).map(|mut d| d.next().is_none()).unwrap_or(true)
}

/// Every path under `dir` with its size, mtime and content digest (symlinks as their target).
pub fn snapshot(dir: &Path) -> Vec<(String, u64, i128, String)> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(dir).follow_links(false).sort_by_file_name() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        // The control folder's own mtime moves when SQLite opens and closes its
        // write-ahead log; what it holds is compared file by file.
        let control = entry.file_name() == ".ibi" && entry.file_type().is_dir();
        let mtime = if control {
            0
        } else {
            meta.modified().unwrap().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i128
        };
        let content = if entry.file_type().is_file() {
            ibi::fsx::hash_file(entry.path()).unwrap().0
        } else if entry.file_type().is_symlink() {
            std::fs::read_link(entry.path()).unwrap().display().to_string()
        } else {
            String::new()
        };
        out.push((entry.path().display().to_string(), meta.len(), mtime, content));
    }
    out
}

/// Runs a shell command line in `dir` with `IBI` set to the binary under test.
pub fn sh_in(dir: &Path, script: &str) -> Run {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("IBI", ibi_bin())
        .env(MINTER_DIR_ENV, minter_dir(dir))
        .env(KEY_DIR_ENV, key_dir(dir))
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("sh")
        .into()
}

/// Asserts a run ended with `code` and did not panic.
pub fn assert_code(run: &Run, code: i32, what: &str) {
    assert_eq!(run.code, code, "{what}: stdout {} stderr {}", run.stdout, run.stderr);
    assert!(!run.stderr.contains("panicked"), "{what} panicked: {}", run.stderr);
}

impl TestEnv {
    /// Writes a file at an absolute path, creating its parents.
    pub fn write_at(&self, path: &Path, content: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
}

/// A tmpfs of its own, mounted under the test's temp dir and unmounted when dropped
/// (also when the test fails), so a test that crosses filesystems or fills a disk
/// never shares space with other work. Needs root, as CI has.
pub struct Tmpfs {
    pub path: PathBuf,
}

impl Tmpfs {
    /// The mount point as text, for command lines.
    pub fn at(&self, rel: &str) -> String {
        self.path.join(rel).to_string_lossy().into_owned()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("--lazy").arg(&self.path).status();
    }
}

impl TestEnv {
    /// Mounts a tmpfs of `size` (as mount(8) writes it: `2m`, `256m`) at `name`.
    pub fn tmpfs(&self, name: &str, size: &str) -> Tmpfs {
        assert!(is_root(), "this test mounts a tmpfs of its own and must run as root (CI does; scripts/test says so)");
        let path = self.path(name);
        std::fs::create_dir_all(&path).unwrap();
        sh(&format!("mount -t tmpfs -o size={size},mode=0755 tmpfs '{}'", path.display()));
        Tmpfs { path }
    }
}

/// Runs `command` under a small Python parent and returns how it ended and its
/// peak resident memory in KiB (`RUSAGE_CHILDREN`: the largest of the command and
/// the processes it ran). Not `wait4` from this process: std spawns with vfork, and
/// Linux carries the spawning process's high-water RSS into the child at exec, so
/// a child of this test process (large and long-lived, with other tests running
/// in it) reported this process's peak: 76.7 MiB for a 33 MiB verify in CI.
pub fn run_measuring_peak_rss(command: &Command) -> (Run, u64) {
    // Transparent huge pages off for the child (prctl PR_SET_THP_DISABLE, which
    // it inherits): where the kernel makes them always, resident memory grows in
    // 2 MiB steps that depend on where the allocator's arenas fall.
    let parent = "import ctypes, resource, subprocess, sys\n\
        ctypes.CDLL(None, use_errno=True).prctl(41, 1, 0, 0, 0)\n\
        code = subprocess.run(sys.argv[2:]).returncode\n\
        open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n\
        sys.exit(code)\n";
    let report = tempfile::NamedTempFile::new().unwrap();
    let run: Run = Command::new("python3")
        .args(["-c", parent, report.path().to_str().unwrap()])
        .arg(command.get_program())
        .args(command.get_args())
        .envs(command.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(command.get_current_dir().unwrap_or(Path::new(".")))
        .output()
        .expect("run python3")
        .into();
    let kib = std::fs::read_to_string(report.path()).unwrap_or_default().trim().parse().unwrap_or(0);
    (run, kib)
}
