//! A hostile client against `ibi serve --stdio`: hand-made frames (JSON headers
//! written here, not through the library's message types), each trying one
//! attack a restricted key must not get past. Every attack is refused with a
//! typed error and changes nothing; sentinels outside the collection are hashed
//! before and after; threads and memory stay bounded.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::env::{ibi_bin, minter_dir, snapshot, TestEnv, MINTER_DIR_ENV};

mod fuzz;

/// One session with a far server, spoken frame by frame.
struct Hostile {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    next: u64,
}

/// A reply: its JSON header and raw payload.
type Answer = (Value, Vec<u8>);

impl Hostile {
    /// Starts `ibi serve --stdio ARGS` and answers its greeting with the highest version it offers.
    fn start(env: &TestEnv, args: &[&str]) -> Hostile {
        let mut child = Command::new(ibi_bin())
            .args(["serve", "--stdio"])
            .args(args)
            .env(MINTER_DIR_ENV, minter_dir(env.root()))
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(env.path("serve.stderr")).unwrap())
            .spawn()
            .expect("start ibi serve");
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut greeting = String::new();
        output.read_line(&mut greeting).unwrap();
        let max = greeting.split_whitespace().nth(2).expect("IBI-SERVE MIN MAX").to_string();
        let mut input = child.stdin.take().unwrap();
        input.write_all(format!("IBI-CLIENT {max}\n").as_bytes()).unwrap();
        Hostile { child, input, output, next: 1 }
    }

    /// Sends one frame without waiting; returns its id.
    fn send(&mut self, header: Value, payload: &[u8]) -> u64 {
        let id = self.next;
        self.next += 1;
        let frame = frame(id, &serde_json::to_vec(&header).unwrap(), payload);
        // A server that ended the session is seen by the next read.
        let _ = self.input.write_all(&frame).and_then(|_| self.input.flush());
        id
    }

    /// The next reply frame, whatever its id; `None` when the server has closed.
    fn next_reply(&mut self) -> Option<(u64, Answer)> {
        let mut head = [0u8; 16];
        self.output.read_exact(&mut head).ok()?;
        let header_len = u32::from_be_bytes(head[..4].try_into().unwrap()) as usize;
        let payload_len = u32::from_be_bytes(head[4..8].try_into().unwrap()) as usize;
        let id = u64::from_be_bytes(head[8..].try_into().unwrap());
        let mut header = vec![0; header_len];
        self.output.read_exact(&mut header).ok()?;
        let mut payload = vec![0; payload_len];
        self.output.read_exact(&mut payload).ok()?;
        Some((id, (serde_json::from_slice(&header).unwrap(), payload)))
    }

    /// Sends a request and returns its first reply (`Value::Null` if the server closed).
    fn call(&mut self, header: Value) -> Answer {
        let id = self.send(header, &[]);
        self.reply_to(id)
    }

    /// The first reply to request `id`, skipping replies to others.
    fn reply_to(&mut self, id: u64) -> Answer {
        while let Some((got, answer)) = self.next_reply() {
            if got == id {
                return answer;
            }
        }
        (Value::Null, Vec::new())
    }

    /// Every reply of a stream, up to and including its `End` or error.
    fn stream(&mut self, header: Value) -> Vec<Answer> {
        let id = self.send(header, &[]);
        let mut all = Vec::new();
        loop {
            let answer = self.reply_to(id);
            let last = answer.0 == json!("End") || answer.0.get("Error").is_some() || answer.0.is_null();
            all.push(answer);
            if last {
                return all;
            }
        }
    }

    fn open(&mut self, root: &str) -> Answer {
        self.call(json!({"Open": {"path": root}}))
    }

    /// Stages a bag's files under client stage `stage`.
    fn stage(&mut self, stage: u64, files: &[(String, Vec<u8>)]) {
        let mut dirs = std::collections::BTreeSet::new();
        for (rel, _) in files {
            if let Some((dir, _)) = rel.rsplit_once('/') {
                if dirs.insert(dir.to_string()) {
                    self.send(json!({"StageDir": {"stage": stage, "rel": dir}}), &[]);
                }
            }
        }
        for (file, (rel, bytes)) in files.iter().enumerate() {
            let file = stage * 1000 + file as u64;
            self.send(json!({"FileBegin": {"stage": stage, "file": file, "rel": rel, "mtime": null, "also": []}}), &[]);
            self.send(json!({"FileData": {"file": file}}), bytes);
            self.send(json!({"FileEnd": {"file": file}}), &[]);
        }
    }

    /// Places one staged item.
    fn place(&mut self, stage: u64, name: &str, ibip: Option<&str>, record: Value) -> Answer {
        let placement = json!({"stage": stage, "name": name, "ibip": ibip, "replace": false, "record": record});
        self.call(json!({"Place": [placement]}))
    }

    /// The server's process id, for /proc.
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// One frame as the wire carries it: the header's and payload's lengths, the
/// request's id, the JSON header, the payload.
fn frame(id: u64, header: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(16 + header.len() + payload.len());
    frame.extend_from_slice(&(header.len() as u32).to_be_bytes());
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&id.to_be_bytes());
    frame.extend_from_slice(header);
    frame.extend_from_slice(payload);
    frame
}

impl Drop for Hostile {
    /// Ends the session as a client that goes away does (its input closes), then
    /// makes sure the server is gone.
    fn drop(&mut self) {
        let _ = self.input.flush();
        // SAFETY-free close: replace the pipe with one whose write end is dropped at once.
        drop(std::mem::replace(&mut self.input, closed_stdin()));
        let ended = crate::env::wait_until(5, || self.child.try_wait().ok().flatten().is_some());
        if !ended {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The write end of a pipe nobody reads, standing in for a closed input.
fn closed_stdin() -> ChildStdin {
    let mut child = Command::new("true").stdin(Stdio::piped()).spawn().unwrap();
    let input = child.stdin.take().unwrap();
    let _ = child.wait();
    input
}

/// Whether an answer is a refusal of the kind that names the problem (never a reply with data).
fn refused(answer: &Answer) -> bool {
    answer.0.get("Error").is_some_and(|e| e.get("Refused").is_some() || e.get("Invalid").is_some())
}

/// Whether a placement's answer placed nothing: an error, or every name listed with a refusal.
fn placed_nothing(answer: &Answer) -> bool {
    match answer.0.get("Placed").and_then(Value::as_array) {
        Some(all) => all.iter().all(|pair| !pair[1].is_null()),
        None => answer.0.get("Error").is_some(),
    }
}

/// The lab: `srv/lib` (the admitted collection, 2 items), `other` (outside, 2
/// items of the same subsystem), a secret file outside both, and a source
/// collection whose items the attacker re-sends.
struct Lab {
    env: TestEnv,
    lib: String,
    other: String,
    secret: std::path::PathBuf,
    srv: String,
}

impl Lab {
    fn new() -> Lab {
        let env = TestEnv::new();
        let lib = env.filled("srv/lib", 2, 1);
        // Another collection of the same subsystem on this machine, as one made
        // minting before the second was refused (with another machine's folder).
        let other = env.path("other").to_string_lossy().into_owned();
        let args =
            ["-q", "init", &other, "--host", "test.ibi.example.org", "--ip", "192.0.2.30", "--granularity", "0.001"];
        let init = env.command(&args).env(crate::env::MINTER_DIR_ENV, env.path("other-machine")).output().unwrap();
        assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
        for i in 0..2 {
            let file = env.write(&format!("other-src/{i}/f0.txt"), format!("other item {i}\n").as_bytes());
            env.ok(&["-q", "deposit", &other, &file.parent().unwrap().to_string_lossy()]);
        }
        let secret = env.write("secret.txt", b"the outside secret\n");
        let srv = env.path("srv").to_string_lossy().into_owned();
        Lab { env, lib, other, secret, srv }
    }

    /// Every file of the test's folder but the server's own stderr, with content digests.
    fn outside(&self) -> Vec<(String, u64, i128, String)> {
        // The test's own folder changes as the server's stderr file is made in it.
        let own = self.env.root().display().to_string();
        snapshot(self.env.root()).into_iter().filter(|(p, ..)| !p.ends_with("serve.stderr") && *p != own).collect()
    }

    fn names(&self, root: &str) -> Vec<(String, String)> {
        self.env.ok(&["list", root]).pairs()
    }

    /// The files of an item of a collection, as a client would stage them.
    fn files_of(&self, root: &str, name: &str) -> Vec<(String, Vec<u8>)> {
        let dir = Path::new(root).join(name);
        walkdir::WalkDir::new(&dir)
            .sort_by_file_name()
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_file() && !e.path().starts_with(dir.join("ibi-versions")))
            .map(|e| {
                let rel = e.path().strip_prefix(&dir).unwrap().to_string_lossy().into_owned();
                (rel, std::fs::read(e.path()).unwrap())
            })
            .collect()
    }

    /// A writable session on `lib` that holds the lease.
    fn writer(&self) -> Hostile {
        let mut far = self.serve(&[]);
        assert!(far.open(&self.lib).0.get("Opened").is_some());
        assert_eq!(far.call(json!({"Lease": "No"})).0, json!("Done"));
        far
    }

    fn serve(&self, flags: &[&str]) -> Hostile {
        let mut args = vec!["--restrict-to-path", self.srv.as_str()];
        args.extend_from_slice(flags);
        Hostile::start(&self.env, &args)
    }
}

/// `..` steps out of an item's folder to the test's root, then the secret's name.
fn escape_from_item(lab: &Lab) -> String {
    let depth = lab.names(&lab.lib)[0].0.split('/').count() + 2; // the item's four levels, lib, srv
    format!("{}secret.txt", "../".repeat(depth))
}

#[test]
fn regress_read_only_key_hashes_files_outside_its_collection() {
    let lab = Lab::new();
    let before = lab.outside();
    let mut far = lab.serve(&["--read-only"]);
    assert!(far.open(&lab.lib).0.get("Opened").is_some());
    let name = lab.names(&lab.lib)[0].0.clone();
    let secret = lab.secret.to_string_lossy().into_owned();
    for rel in [escape_from_item(&lab), secret.clone(), "data/../../../../../../secret.txt".into()] {
        let digests = far.call(json!({"Digests": {"target": {"Item": name}, "rel": rel, "also": []}}));
        assert!(refused(&digests), "Digests of {rel} answered {:?}", digests.0);
        let read = far.stream(json!({"Read": {"name": name, "rel": rel}}));
        assert!(refused(&read[0]), "Read of {rel} answered {:?}", read[0].0);
        assert!(read.iter().all(|(_, bytes)| bytes.is_empty()), "bytes of {rel} came back");
    }
    // A content key is one word: never a path to another collection's records.
    let other_record = format!("{}/.ibi/deposited/x", lab.other);
    for key in [other_record.as_str(), "../../other/.ibi/deposited/x", "a/b", ""] {
        let answer = far.call(json!({"DepositRecord": key}));
        assert!(refused(&answer), "DepositRecord {key:?} answered {:?}", answer.0);
    }
    // Still served: an honest read works.
    let honest = far.call(json!({"Digests": {"target": {"Item": name}, "rel": "bagit.txt", "also": []}}));
    assert!(honest.0.get("Digests").is_some(), "{:?}", honest.0);
    drop(far);
    assert_same_files(&before, &lab.outside(), "a read-only session");
}

#[test]
fn regress_restricted_root_swapped_for_a_symlink_after_open() {
    let lab = Lab::new();
    let mut far = lab.serve(&["--read-only"]);
    assert!(far.open(&lab.lib).0.get("Opened").is_some());
    let own: Vec<String> = lab.names(&lab.lib).into_iter().map(|p| p.0).collect();
    let outside: Vec<String> = lab.names(&lab.other).into_iter().map(|p| p.0).collect();
    std::fs::rename(&lab.lib, format!("{}.moved", lab.lib)).unwrap();
    std::os::unix::fs::symlink(&lab.other, &lab.lib).unwrap();
    let walked = serde_json::to_string(&far.stream(json!("Walk")).iter().map(|a| &a.0).collect::<Vec<_>>()).unwrap();
    assert!(
        outside.iter().all(|n| !walked.contains(n.as_str())),
        "the walk went through the swapped symlink: {walked}"
    );
    let read = far.stream(json!({"Read": {"name": outside[0], "rel": "bagit.txt"}}));
    assert!(read.iter().all(|(_, bytes)| bytes.is_empty()), "read an outside item through the swapped symlink");
    let digests = far.call(json!({"Digests": {"target": {"Item": outside[0]}, "rel": "bagit.txt", "also": []}}));
    assert!(digests.0.get("Digests").is_none(), "hashed an outside item: {:?}", digests.0);
    let records = far.call(json!({"Records": outside}));
    assert!(!serde_json::to_string(&records.0).unwrap().contains("present"), "read outside records: {:?}", records.0);
    // The session's own items are still there under its handle.
    assert!(walked.contains(own[0].as_str()) || walked.contains("Error"), "{walked}");
}

/// Stages an item of the source collection `src` under stage 1 and returns its name and files.
fn foreign_item(lab: &Lab) -> (String, Vec<(String, Vec<u8>)>) {
    let src = lab.env.filled("src", 1, 1);
    let name = lab.names(&src)[0].0.clone();
    (name.clone(), lab.files_of(&src, &name))
}

/// A bag made by hand for `name`: one payload file, bag-info naming it (and `ibip`), both manifests.
fn forged_bag(name: &str, ibip: Option<&str>, payload: &[u8]) -> Vec<(String, Vec<u8>)> {
    use sha2::{Digest, Sha256};
    let hex = |bytes: &[u8]| format!("{:x}", Sha256::digest(bytes));
    let mut info = format!("External-Identifier: {name}\nPayload-Oxum: {}.1\n", payload.len());
    if let Some(ibip) = ibip {
        info.push_str(&format!("External-Identifier: {ibip}\n"));
    }
    let bagit = b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n".to_vec();
    let manifest = format!("{}  data/forged.txt\n", hex(payload));
    let tags = format!(
        "{}  bag-info.txt\n{}  bagit.txt\n{}  manifest-sha256.txt\n",
        hex(info.as_bytes()),
        hex(&bagit),
        hex(manifest.as_bytes())
    );
    vec![
        ("bagit.txt".into(), bagit),
        ("bag-info.txt".into(), info.into_bytes()),
        ("data/forged.txt".into(), payload.to_vec()),
        ("manifest-sha256.txt".into(), manifest.into_bytes()),
        ("tagmanifest-sha256.txt".into(), tags.into_bytes()),
    ]
}

#[test]
fn regress_append_only_placement_touches_another_items_alias_or_record() {
    let lab = Lab::new();
    let victims = lab.names(&lab.lib);
    let (victim, victim_ibip) = victims[0].clone();
    let (name, files) = foreign_item(&lab);
    let before = lab.env.ok(&["show", "--json", &lab.lib, &victim]).stdout;
    let mut far = lab.serve(&["--append-only"]);
    assert!(far.open(&lab.lib).0.get("Opened").is_some());
    assert_eq!(far.call(json!({"Lease": "No"})).0, json!("Done"));
    // The new item claims the victim's IBIp: its alias would be re-pointed.
    far.stage(1, &files);
    let answer = far.place(1, &name, Some(&victim_ibip), Value::Null);
    assert!(placed_nothing(&answer), "placed over another item's alias: {:?}", answer.0);
    // The new item's record names the victim as removed: the victim would vanish from list.
    far.stage(2, &files);
    let record = json!({"name": victim, "ibip": victim_ibip, "origin": null, "status": "removed",
        "versions": [{"number": 1, "date": "2026-01-01T00:00:00Z", "digest": "00"}], "withdrawn": null});
    let answer = far.place(2, &name, None, record);
    // Refused, or placed with the record the server made from the bag (the client's is never taken).
    let placed = !placed_nothing(&answer);
    drop(far);
    let resolved = lab.env.ok(&["resolve", &lab.lib, &victim_ibip]).stdout;
    assert!(resolved.contains(&victim), "the victim's alias moved: {resolved}");
    assert_eq!(lab.env.ok(&["show", "--json", &lab.lib, &victim]).stdout, before, "the victim's record changed");
    let held: Vec<String> = lab.names(&lab.lib).into_iter().map(|p| p.0).collect();
    assert!(held.contains(&victim), "the victim vanished from list: {held:?}");
    assert_eq!(held.contains(&name), placed, "{held:?}");
    let verified = lab.env.run(&["verify", &lab.lib]);
    assert_eq!(verified.code, 0, "{} {}", verified.stdout, verified.stderr);
}

#[test]
fn regress_append_only_key_reuses_a_name_migrated_away() {
    let lab = Lab::new();
    let gone = lab.names(&lab.lib)[0].0.clone();
    let elsewhere = lab.env.collection("elsewhere");
    lab.env.ok(&["-q", "migrate", &lab.lib, &elsewhere, &gone]);
    let files = forged_bag(&gone, None, b"not the item that had this name\n");
    let mut far = lab.serve(&["--append-only"]);
    assert!(far.open(&lab.lib).0.get("Opened").is_some());
    assert_eq!(far.call(json!({"Lease": "No"})).0, json!("Done"));
    far.stage(1, &files);
    let answer = far.place(1, &gone, None, Value::Null);
    assert!(placed_nothing(&answer), "a name recorded as migrated away was placed again: {:?}", answer.0);
    drop(far);
    assert!(lab.names(&lab.lib).iter().all(|(n, _)| *n != gone), "the migrated-away name is held again");
}

#[test]
fn regress_staging_and_placing_without_the_lease() {
    let lab = Lab::new();
    let (name, files) = foreign_item(&lab);
    let mut far = lab.serve(&[]);
    assert!(far.open(&lab.lib).0.get("Opened").is_some());
    far.stage(1, &files);
    let answer = far.place(1, &name, None, Value::Null);
    assert!(placed_nothing(&answer), "placed without the lease: {:?}", answer.0);
    let removed = far.call(json!({"Remove": [lab.names(&lab.lib)[0].0]}));
    assert!(refused(&removed), "removed without the lease: {:?}", removed.0);
    drop(far);
    assert_eq!(lab.names(&lab.lib).len(), 2);
    assert!(crate::env::control_empty(&lab.lib, "staging"), "staging left behind");
}

#[test]
fn regress_restricted_key_writes_the_machine_minter_state() {
    let lab = Lab::new();
    let mut far = lab.writer();
    // The old protocol's way: take the minter, then store a date of the client's choosing.
    let begin = far.send(json!("MinterBegin"), &[]);
    let first = far.reply_to(begin);
    if first.0.get("MinterDate").is_some() {
        far.call(json!({"MinterEnd": {"begin": begin, "date": "253370764800"}}));
    }
    // And one that never ends, holding the machine-wide minter lock.
    far.send(json!("MinterBegin"), &[]);
    std::thread::sleep(Duration::from_millis(300));
    // Another collection of the subsystem on this machine still mints, promptly, and not in year 9999.
    lab.env.write("late/f.txt", b"late\n");
    let late = lab.env.path("late").to_string_lossy().into_owned();
    let mut deposit = lab.env.command(&["deposit", &lab.other, &late]).stdout(Stdio::piped()).spawn().unwrap();
    let finished = crate::env::wait_until(20, || deposit.try_wait().unwrap().is_some());
    if !finished {
        let _ = deposit.kill();
    }
    let out = deposit.wait_with_output().unwrap();
    assert!(finished, "a deposit elsewhere hung behind the far session's minter lock");
    assert!(out.status.success(), "a deposit elsewhere failed after the far session wrote the minter state");
    let name = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!name.contains("/9999/") && !name.contains("/9998/"), "minted in the far future: {name}");
}

#[test]
fn regress_read_only_key_writes_lock_and_wal_files() {
    let lab = Lab::new();
    let control = Path::new(&lab.lib).join(".ibi");
    let _ = std::fs::remove_file(control.join("write.lock"));
    let before = lab.outside();
    let mut far = lab.serve(&["--read-only"]);
    assert!(far.open(&lab.lib).0.get("Opened").is_some());
    far.stream(json!("Walk"));
    far.stream(json!("AllRecords"));
    far.call(json!("Leftovers"));
    far.call(json!({"Records": [lab.names(&lab.lib)[0].0]}));
    let lease = far.call(json!({"Lease": "No"}));
    assert!(refused(&lease), "a read-only server handed out a lease: {:?}", lease.0);
    let written: Vec<String> = std::fs::read_dir(&control)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n == "write.lock" || n.ends_with("-wal") || n.ends_with("-shm"))
        .collect();
    assert!(written.is_empty(), "a read-only session wrote {written:?}");
    drop(far);
    assert_same_files(&before, &lab.outside(), "a read-only session");
}

/// Asserts two snapshots agree, naming only the entries that differ.
fn assert_same_files(before: &[(String, u64, i128, String)], after: &[(String, u64, i128, String)], who: &str) {
    let gone: Vec<_> = before.iter().filter(|e| !after.contains(e)).collect();
    let new: Vec<_> = after.iter().filter(|e| !before.contains(e)).collect();
    assert!(gone.is_empty() && new.is_empty(), "{who} changed files: before {gone:?}, after {new:?}");
}

/// Threads and resident memory of a process, from /proc.
fn threads_and_rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |key: &str| {
        status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    (field("Threads:").unwrap_or(0), field("VmRSS:").unwrap_or(0) * 1024)
}

#[test]
fn regress_unbounded_threads_and_memory_for_unread_replies() {
    let lab = Lab::new();
    let big = lab.env.write("bigsrc/big.bin", &vec![7u8; 4 << 20]);
    let root = lab.lib.clone();
    lab.env.ok(&["-q", "deposit", &root, &big.parent().unwrap().to_string_lossy()]);
    let name =
        lab.names(&root).into_iter().map(|p| p.0).find(|n| Path::new(&root).join(n).join("data/big.bin").exists());
    let name = name.expect("the big item");
    let mut far = lab.serve(&["--read-only"]);
    assert!(far.open(&root).0.get("Opened").is_some());
    // 2,000 reads of a 4 MiB file, and not one reply read.
    let pid = far.pid();
    let sender = std::thread::spawn(move || {
        for _ in 0..2000 {
            far.send(json!({"Read": {"name": name, "rel": "data/big.bin"}}), &[]);
        }
        far
    });
    std::thread::sleep(Duration::from_secs(3));
    // The sender may still be blocked writing (backpressure): that is what is wanted.
    let (threads, rss) = threads_and_rss(pid);
    let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    let _ = sender.join();
    assert!(threads <= 64, "the server runs {threads} threads for unread replies");
    assert!(rss <= 256 << 20, "the server holds {} MiB for unread replies", rss >> 20);
}

#[test]
fn regress_record_with_no_versions_panics_the_server() {
    let lab = Lab::new();
    let (name, files) = foreign_item(&lab);
    let mut far = lab.writer();
    far.stage(1, &files);
    let record =
        json!({"name": name, "ibip": null, "origin": null, "status": "present", "versions": [], "withdrawn": null});
    let answer = far.place(1, &name, None, record);
    assert!(placed_nothing(&answer), "a record with no versions was taken: {:?}", answer.0);
    // The server is still there and answers.
    let records = far.call(json!({"Records": [name]}));
    assert!(records.0.get("Records").is_some(), "the server stopped answering: {:?}", records.0);
    drop(far);
    let stderr = std::fs::read_to_string(lab.env.path("serve.stderr")).unwrap();
    assert!(!stderr.contains("panicked"), "the server panicked: {stderr}");
    let v = lab.env.run(&["-q", "verify", &lab.lib]);
    assert_eq!(v.code, 0, "{} {}", v.stdout, v.stderr);
    lab.env.ok(&["list", &lab.lib]);
}

/// A folder inside the collection (the first level of every name) replaced by a
/// symlink to another collection's: hashing or reading an item through it used to
/// reach the other collection's files.
#[test]
fn regress_symlink_in_the_root_reaches_outside() {
    let lab = Lab::new();
    let outside: Vec<String> = lab.names(&lab.other).into_iter().map(|p| p.0).collect();
    let top = outside[0].split('/').next().unwrap().to_string();
    let mut far = lab.serve(&["--read-only"]);
    assert!(far.open(&lab.lib).0.get("Opened").is_some());
    let planted = Path::new(&lab.lib).join(&top);
    std::fs::rename(&planted, Path::new(&lab.lib).join(format!("{top}.moved"))).unwrap();
    std::os::unix::fs::symlink(Path::new(&lab.other).join(&top), &planted).unwrap();
    let digests = far.call(json!({"Digests": {"target": {"Item": outside[0]}, "rel": "bagit.txt", "also": []}}));
    assert!(digests.0.get("Digests").is_none(), "hashed an outside item through a symlink: {:?}", digests.0);
    let read = far.stream(json!({"Read": {"name": outside[0], "rel": "data/f0.txt"}}));
    assert!(read.iter().all(|(_, bytes)| bytes.is_empty()), "read an outside item through a symlink");
    let snapshot = far.call(json!({"Snapshot": {"target": {"Item": outside[0]}, "budget": 1048576}}));
    assert!(snapshot.1.is_empty(), "sent outside bytes in a snapshot: {} bytes", snapshot.1.len());
    let checked = far.call(json!({"CheckItem": outside[0]}));
    let text = serde_json::to_string(&checked.0).unwrap();
    assert!(!text.contains("\"files\":1,") || text.contains("symlink"), "verified an outside item: {text}");
}

/// The requests that change who mints and where items went are the authority's:
/// an append-only key is refused them, a read-only key has no writer for them,
/// and no key may push the minter more than a day past the server's clock.
#[test]
fn minting_requests_are_refused_to_restricted_keys() {
    let lab = Lab::new();
    let config = std::path::Path::new(&lab.lib).join(".ibi/collection.toml");
    let before = std::fs::read(&config).unwrap();
    let name = lab.names(&lab.lib)[0].0.clone();
    let forward = json!({"to": "evil:/x", "date": "2026-01-01T00:00:00Z", "url": "https://evil.example/"});
    for flags in [&["--append-only"][..], &["--read-only"][..]] {
        let mut far = lab.serve(flags);
        assert!(far.open(&lab.lib).0.get("Opened").is_some());
        far.call(json!({"Lease": "No"}));
        assert!(refused(&far.call(json!({"SetMinting": {"Retired": null}}))), "{flags:?}: SetMinting");
        assert!(refused(&far.call(json!({"NoteMoved": [[name], forward]}))), "{flags:?}: NoteMoved");
    }
    let mut far = lab.writer();
    assert!(refused(&far.call(json!({"RaiseMinter": "253370764800"}))), "a minter pushed to year 9999");
    assert_eq!(std::fs::read(&config).unwrap(), before, "the collection still mints");
    lab.env.ok(&["resolve", &lab.lib, &name]);
}

/// The requests of protocol 4 sent by hand: a read-only session reads the
/// config and the bags' identities but makes no witness (no key, no file), and
/// the identities it hands out are the bags' own, for a name that parses only.
#[test]
fn protocol_4_requests_by_hand_write_nothing_through_a_read_only_key() {
    let lab = Lab::new();
    let control = Path::new(&lab.lib).join(".ibi");
    let before = std::fs::read_dir(&control).unwrap().flatten().map(|e| e.file_name()).collect::<Vec<_>>();
    let mut far = lab.serve(&["--read-only"]);
    assert!(far.open(&lab.lib).0.get("Opened").is_some());
    let config = far.call(json!("Config")).0;
    assert!(config["Config"].as_str().is_some_and(|t| t.contains("test.ibi.example.org")), "{config}");
    let made = far.call(json!("MakeWitness")).0;
    assert_eq!(made, json!({"Text": null}), "a read-only session made a witness");
    assert_eq!(far.call(json!("LatestWitness")).0, json!({"Text": null}));
    let names = lab.names(&lab.lib);
    let identities = far.call(json!({"BagIdentities": [names[0].0]})).0;
    let expected = lab.env.identities(&lab.lib)[&names[0].0].clone();
    assert_eq!(identities["Identities"][0]["Ok"], json!(expected), "{identities}");
    let escape = far.call(json!({"BagIdentities": ["../../secret"]})).0;
    assert!(escape.get("Identities").is_none(), "a path for a name was read: {escape}");
    drop(far);
    let after = std::fs::read_dir(&control).unwrap().flatten().map(|e| e.file_name()).collect::<Vec<_>>();
    assert_eq!(before, after, "a read-only session wrote in .ibi");
}

/// Every item's last fixity check went in one reply (`FixityChecks`), which a
/// collection's checks outgrow near 600,000 items (a frame holds 64 MiB, a
/// check is about 110 bytes of JSON), with both ends holding them all. Asked
/// by hand, protocol 5's `FixityCheckPages` answers in pages of at most 1,024
/// that hold every check once, then `End`.
#[test]
fn regress_every_fixity_check_in_one_reply() {
    let env = TestEnv::new();
    let root = env.filled("lib", 2100, 1);
    env.ok(&["-q", "verify", &root]);
    let mut far = Hostile::start(&env, &["--read-only"]);
    assert!(far.open(&root).0.get("Opened").is_some());
    let replies = far.stream(json!("FixityCheckPages"));
    let (end, pages) = replies.split_last().unwrap();
    assert_eq!(end.0, json!("End"), "{}", end.0);
    let pages: Vec<&Vec<Value>> = pages.iter().map(|(header, _)| header["FixityChecks"].as_array().unwrap()).collect();
    assert!(pages.len() >= 3 && pages.iter().all(|page| page.len() <= 1024), "{:?}", pages.len());
    let names: std::collections::BTreeSet<&str> =
        pages.iter().flat_map(|page| page.iter().map(|check| check["name"].as_str().unwrap())).collect();
    assert_eq!((names.len(), pages.iter().map(|page| page.len()).sum::<usize>()), (2100, 2100));
}

/// The server holds finished small files back to hand them to a writing thread
/// in batches. A client that sends a few files and then nothing more (no
/// request that would hand them over) must still find them written, since the
/// server hands its batch over before any read that may wait; held back, the
/// staged bytes would sit in memory until the client spoke again.
#[test]
fn finished_files_are_written_while_the_client_says_nothing_more() {
    let lab = Lab::new();
    let (_, files) = foreign_item(&lab);
    let mut far = lab.writer();
    far.stage(1, &files);
    let staging = Path::new(&lab.lib).join(".ibi/staging");
    let written = || {
        walkdir::WalkDir::new(&staging).into_iter().flatten().filter(|e| e.file_type().is_file()).count() >= files.len()
    };
    assert!(crate::env::wait_until(10, written), "the {} finished files were never written", files.len());
    drop(far);
    assert!(crate::env::control_empty(&lab.lib, "staging"), "staging left behind");
}

/// Kills the server of `far` after `seconds` unless the returned flag is set
/// first: a request the server never answers then ends its test as a failure
/// (no reply) instead of hanging it.
fn watchdog(far: &Hostile, seconds: u64) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (pid, flag) = (far.pid(), done.clone());
    std::thread::spawn(move || {
        let ended = crate::env::wait_until(seconds, || flag.load(std::sync::atomic::Ordering::Relaxed));
        if !ended {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    });
    done
}

/// A second `FileBegin` with the id of a file still open replaced it unwritten;
/// its stage counted a file that would never end, so placing or discarding it
/// waited for ever, and so did the session's end (which then left the stage's
/// folder behind).
#[test]
fn regress_far_file_begun_twice_holds_its_stage_for_ever() {
    let lab = Lab::new();
    let (name, files) = foreign_item(&lab);
    let mut far = lab.writer();
    far.stage(1, &files);
    let begin = json!({"FileBegin": {"stage": 1, "file": 7, "rel": "data/twice.txt", "mtime": null, "also": []}});
    far.send(begin.clone(), &[]);
    far.send(begin, &[]);
    far.send(json!({"FileData": {"file": 7}}), b"once\n");
    far.send(json!({"FileEnd": {"file": 7}}), &[]);
    let done = watchdog(&far, 20);
    let answer = far.place(1, &name, None, Value::Null);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(!answer.0.is_null(), "the placement was never answered");
    assert!(serde_json::to_string(&answer.0).unwrap().contains("begun again"), "{:?}", answer.0);
    assert!(placed_nothing(&answer), "{:?}", answer.0);
    drop(far);
    assert!(crate::env::control_empty(&lab.lib, "staging"), "staging left behind");
}

/// The session forgot a stage without removing its folder in two cases: a
/// `Discard` of a stage that had failed (a file refused), and a `Place` that
/// failed as a whole (one of its stages never made) after it had taken the
/// batch's other stages. Their folders stayed in staging for as long as the
/// session lasted, however long a mirror keeps it open.
#[test]
fn regress_far_failed_stages_stay_until_the_session_ends() {
    let lab = Lab::new();
    let (name, files) = foreign_item(&lab);
    let mut far = lab.writer();
    // The reader makes stages in order, before it takes the next request: once a
    // later request is answered, the stage's folder has been made.
    let staging_empties = |far: &mut Hostile| {
        assert!(far.call(json!({"Records": []})).0.get("Records").is_some());
        crate::env::wait_until(10, || crate::env::control_empty(&lab.lib, "staging"))
    };
    far.stage(1, &files);
    let refused = json!({"FileBegin": {"stage": 1, "file": 999, "rel": "../out.txt", "mtime": null, "also": []}});
    far.send(refused, &[]);
    far.send(json!({"Discard": {"stage": 1}}), &[]);
    assert!(staging_empties(&mut far), "a failed stage, discarded, stayed in staging");

    far.stage(2, &files);
    let good = json!({"stage": 2, "name": name, "ibip": null, "replace": false, "record": null});
    let never_made = json!({"stage": 77, "name": name, "ibip": null, "replace": false, "record": null});
    let answer = far.call(json!({"Place": [good, never_made]}));
    assert!(placed_nothing(&answer), "{:?}", answer.0);
    assert!(staging_empties(&mut far), "the stages of a failed placement stayed in staging");
    assert!(lab.names(&lab.lib).iter().all(|(n, _)| *n != name), "an item of a failed placement was placed");
}

/// `Mint` took any count up to the minter's ten million: a client could have
/// the server mint (and sleep on its clock, holding the minter) for hours in one
/// request. It mints at most `MAX_MINT` at a time; a client asks for more in
/// several requests.
#[test]
fn regress_far_mint_of_a_million_names_holds_the_minter() {
    let lab = Lab::new();
    let mut far = lab.writer();
    let done = watchdog(&far, 20);
    let answer = far.call(json!({"Mint": {"count": 1 << 20}}));
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(refused(&answer), "a mint of a million names answered {:?}", answer.0);
    let few = far.call(json!({"Mint": {"count": 3}}));
    assert_eq!(few.0["Minted"].as_array().map(Vec::len), Some(3), "{:?}", few.0);
}

/// A second `Lease` in a session that holds the lease waited for the
/// collection's write lock, which the session itself held: for ever with
/// `Forever`, and the session's end then waited on that worker.
#[test]
fn regress_far_second_lease_waits_on_its_own_lock() {
    let lab = Lab::new();
    let mut far = lab.writer();
    let done = watchdog(&far, 20);
    let again = far.call(json!({"Lease": "Forever"}));
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(again.0, json!("Done"), "a second lease answered {:?}", again.0);
    let minted = far.call(json!({"Mint": {"count": 1}}));
    assert!(minted.0.get("Minted").is_some(), "the session cannot write after it: {:?}", minted.0);
}

/// `Remove` of a name the collection does not hold journalled the removal and
/// made the trash's folder, then failed to move the item: both stayed behind,
/// and `verify` reported leftovers until the next write.
#[test]
fn regress_far_remove_of_an_item_not_held_leaves_the_trash_behind() {
    let lab = Lab::new();
    let mut far = lab.writer();
    let answer = far.call(json!({"Remove": ["sid.inpe.br/x/2009/02.16.17.46"]}));
    assert!(answer.0["Error"].get("NotFound").is_some(), "{:?}", answer.0);
    drop(far);
    for dir in ["trash", "journal"] {
        assert!(crate::env::control_empty(&lab.lib, dir), "{dir} left behind");
    }
    assert_eq!(lab.env.run(&["-q", "verify", &lab.lib]).code, 0);
}

/// Issue 55, class 5: an append-only key took the lease and raised the minter a
/// day ahead, so every deposit waited for a day. Now an append-only key may not
/// raise it at all, and no key past the server's clock plus the granularity.
#[test]
fn regress_restricted_key_stops_minting() {
    let lab = Lab::new();
    let ahead =
        (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 86_000).to_string();
    let mut far = lab.serve(&["--append-only"]);
    assert!(far.open(&lab.lib).0.get("Opened").is_some());
    assert_eq!(far.call(json!({"Lease": "No"})).0, json!("Done"));
    assert!(refused(&far.call(json!({"RaiseMinter": ahead}))), "an append-only key raised the minter");
    drop(far);
    let mut far = lab.writer();
    assert!(refused(&far.call(json!({"RaiseMinter": ahead}))), "a key raised the minter 86,000 s ahead");
    drop(far);
    let file = lab.env.write("after/f.txt", b"after the raise\n");
    lab.env.ok(&["-q", "deposit", &lab.lib, &file.to_string_lossy()]);
}

/// Issue 55, class 6: a far key sent a `javascript:` forwarding URL, which the
/// command line refuses, and the resolver answered `301 Location: javascript:…`.
/// The server is the authority: it applies the command line's check.
#[test]
fn regress_far_key_forwards_to_a_hostile_url() {
    let lab = Lab::new();
    let name = lab.names(&lab.lib)[0].0.clone();
    let mut far = lab.writer();
    for url in ["javascript:alert(document.cookie)//", "https://ok.example/\r\nSet-Cookie: x=1/"] {
        let forward = json!({"to": "elsewhere:/x", "date": "2026-01-01T00:00:00Z", "url": url});
        assert!(refused(&far.call(json!({"NoteMoved": [[name], forward]}))), "NoteMoved with {url:?}");
        let successor = json!({"id": "urn:uuid:x", "location": "elsewhere:/x", "since": "2026-01-01T00:00:00Z",
            "forward_url": url});
        assert!(refused(&far.call(json!({"SetMinting": {"Retired": successor}}))), "SetMinting with {url:?}");
    }
    drop(far);
    lab.env.ok(&["resolve", &lab.lib, &name]);
    let shown = lab.env.ok(&["--json", "show", &lab.lib, &name]).stdout;
    assert!(!shown.contains("javascript"), "{shown}");
}

/// Issue 55, class 6: a `--read-only` session, refused every write, still
/// changed the inventory's shared-memory file (`-shm`) while a writer's log was
/// there. Now it reads a private copy: no file of the collection changes.
#[test]
fn regress_read_only_session_changes_the_shm() {
    let lab = Lab::new();
    let control = Path::new(&lab.lib).join(".ibi");
    let names = lab.names(&lab.lib);
    assert!(wal_left_beside(&control), "the test leaves a log beside the inventory, as a writer at work does");
    let before = snapshot(&control);
    let mut reader = lab.serve(&["--read-only"]);
    assert!(reader.open(&lab.lib).0.get("Opened").is_some());
    let records = reader.call(json!({"Records": [names[0].0]})).0;
    assert!(records.to_string().contains(&names[0].0), "the read-only session read the records: {records}");
    drop(reader);
    assert_eq!(snapshot(&control), before, "a read-only session changed the collection's files");
}

/// Leaves the inventory in write-ahead-log mode with its log and index present,
/// as a writer at work does; whether both are there.
fn wal_left_beside(control: &Path) -> bool {
    let db = control.join("inventory.sqlite");
    let script = format!(
        "import sqlite3; c=sqlite3.connect('{}'); c.execute('pragma journal_mode=wal'); \
         c.execute('pragma wal_autocheckpoint=0'); c.execute('create table if not exists t(x)'); \
         c.execute('insert into t values(1)'); c.commit(); import os; os._exit(0)",
        db.display()
    );
    let ran = Command::new("python3").args(["-c", &script]).status().unwrap();
    ran.success() && control.join("inventory.sqlite-wal").exists() && control.join("inventory.sqlite-shm").exists()
}
