//! Random requests from a hostile client: sequences of frames drawn from fixed
//! seeds, most of them well-formed requests with hostile arguments (names of
//! other collections, paths that climb out, ids never made, sizes at their
//! limits), some with a field replaced by a value of another type, against a
//! read-only, an append-only and a writable session. Whatever they ask, the
//! server never panics and never hangs, nothing outside the admitted folder
//! changes, the collection still verifies, and a read-only session changes
//! nothing at all. A failure names the seed and the request sent last.

use std::io::{BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{frame, Lab};
use crate::env::{ibi_bin, minter_dir, MINTER_DIR_ENV};

/// Requests sent per seed and session kind.
const REQUESTS: usize = 300;
const SEEDS: [u64; 2] = [0x1b1_5eed, 0xfa2_0ff];

/// A small deterministic generator (xorshift64*): the same seed, the same requests.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Clone>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())].clone()
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// What the requests are made of: the lab's real names and IBIps (the
/// collection's own and another's), and hostile strings and numbers.
struct Pool {
    names: Vec<Value>,
    ibips: Vec<Value>,
    rels: Vec<Value>,
    paths: Vec<Value>,
    numbers: Vec<Value>,
    words: Vec<Value>,
}

impl Pool {
    fn of(lab: &Lab) -> Pool {
        let (mut names, mut ibips) = (Vec::new(), Vec::new());
        for root in [&lab.lib, &lab.other] {
            for (name, ibip) in lab.names(root) {
                names.push(json!(name));
                ibips.push(json!(ibip));
            }
        }
        names.extend(["", "x", "../../etc", "sid.inpe.br/x/2009/02.16.17.46", "a/b/c/d/e"].map(|s| json!(s)));
        ibips.extend(["", "8JMKD3MGP8W/34PGRBS", "!!", "8JMKD3MGP8W/"].map(|s| json!(s)));
        let secret = lab.secret.to_string_lossy().into_owned();
        let mut rels: Vec<Value> =
            ["bagit.txt", "bag-info.txt", "data/f0.txt", "data", "", ".", "..", "data/../../../x"]
                .into_iter()
                .map(|s| json!(s))
                .collect();
        rels.extend([json!(super::escape_from_item(lab)), json!(secret), json!("a\u{0}b"), json!("a/".repeat(3000))]);
        let paths = [lab.lib.clone(), lab.other.clone(), lab.srv.clone(), "/".into(), format!("{}/..", lab.lib)];
        let mut paths: Vec<Value> = paths.into_iter().map(|s| json!(s)).collect();
        paths.extend([json!(format!("{}/.ibi", lab.lib)), json!(format!("{}/new", lab.srv)), json!(secret)]);
        let numbers = [0, 1, 2, 7, 1000, 1 << 20, 1 << 40, u64::MAX].map(|n| json!(n)).to_vec();
        let words = ["", "x", "../x", "a/b", "Sha256", "2009-02-16T17:46:00Z"].map(|s| json!(s)).to_vec();
        Pool { names, ibips, rels, paths, numbers, words }
    }
}

/// Any JSON value, for a field replaced by one of another type.
fn stray_value(draw: &mut Draw) -> Value {
    let all = [json!(null), json!(-1), json!(1e300), json!(""), json!([]), json!({}), json!(true), json!(u64::MAX)];
    draw.pick(&all)
}

/// One request: its header and payload.
fn request(draw: &mut Draw, pool: &Pool) -> (Value, Vec<u8>) {
    let (n, name, ibip) = (draw.pick(&pool.numbers), draw.pick(&pool.names), draw.pick(&pool.ibips));
    let (rel, word, small) = (draw.pick(&pool.rels), draw.pick(&pool.words), json!(draw.below(4)));
    let target = if draw.chance(2) { json!({"Item": name}) } else { json!({"Stage": small}) };
    let names = json!((0..draw.below(4)).map(|_| draw.pick(&pool.names)).collect::<Vec<_>>());
    let wait = draw.pick(&[json!("No"), json!("Forever"), json!({"Millis": n})]);
    let also = json!([draw.pick(&[json!("Md5"), json!("Sha256"), json!("Crc")])]);
    let forward = json!({"to": word, "date": word});
    let record = draw.pick(&[json!(null), json!({"name": name, "status": "present", "versions": []})]);
    let placement = json!({"stage": small, "name": name, "ibip": ibip, "replace": draw.chance(2), "record": record});
    let file = json!(draw.below(4));
    let bare = ["Walk", "DanglingAliases", "Config", "MakeWitness", "LatestWitness", "Leftovers", "Inventory"];
    let bare2 = ["AllRecords", "Unlease", "Recover", "MintedUpTo", "Minting", "FixityChecks", "FixityCheckPages"];
    let header = match draw.below(34) {
        0 => json!(draw.pick(&bare)),
        1 => json!(draw.pick(&bare2)),
        2 => json!("CheckChain"),
        3 => json!({"Open": {"path": draw.pick(&pool.paths)}}),
        4 => json!({"Init": {"path": draw.pick(&pool.paths), "config": word}}),
        5 => json!({"Slot": name}),
        6 => json!({"Slots": names}),
        7 => json!({"Alias": ibip}),
        8 => json!({"AliasProblem": [ibip, name]}),
        9 => json!({"Snapshot": {"target": target, "budget": n}}),
        10 => json!({"Bundle": {"names": names, "budget": n}}),
        11 => json!({"Digests": {"target": target, "rel": rel, "also": also}}),
        12 => json!({"Read": {"name": name, "rel": rel}}),
        13 => json!({"Identities": names}),
        14 => json!({"BagIdentities": names}),
        15 => json!({"Records": names}),
        16 => json!({"Lease": wait}),
        17 => json!({"Mint": {"count": n}}),
        18 => json!({"RaiseMinter": word}),
        19 => json!({"SetMinting": draw.pick(&[json!("Mints"), json!({"Retired": null}), word.clone()])}),
        20 => json!({"DepositRecord": word}),
        21 => json!({"WriteDepositRecords": [[word, name]]}),
        22 => json!({"StageDir": {"stage": small, "rel": rel}}),
        23 => json!({"FileBegin": {"stage": small, "file": file, "rel": rel, "mtime": null, "also": also}}),
        24 => json!({"FileData": {"file": file}}),
        25 => json!({"FileEnd": {"file": file}}),
        26 => json!({"Discard": {"stage": small}}),
        27 => json!({"StageLink": {"stage": small, "rel": rel, "name": name, "from": word}}),
        28 => json!({"Place": [placement]}),
        29 => json!({"RestoreAlias": [ibip, name]}),
        30 => json!({"Remove": names}),
        31 => json!({"NoteMoved": [names, forward]}),
        32 => json!({"CheckItem": name}),
        _ => json!({"Events": {"item": draw.pick(&[json!(null), name]), "after": n}}),
    };
    let header = if draw.chance(8) { mutated(draw, header) } else { header };
    let payload = if draw.chance(4) { (0..draw.below(5000)).map(|_| draw.next() as u8).collect() } else { Vec::new() };
    (header, payload)
}

/// `value` with one of its leaves (or itself) replaced by a value of any type.
fn mutated(draw: &mut Draw, value: Value) -> Value {
    match value {
        Value::Object(map) if !map.is_empty() && !draw.chance(4) => {
            let at = draw.below(map.len());
            let map = map.into_iter().enumerate().map(|(i, (k, v))| (k, if i == at { mutated(draw, v) } else { v }));
            Value::Object(map.collect())
        }
        Value::Array(all) if !all.is_empty() && !draw.chance(4) => {
            let at = draw.below(all.len());
            Value::Array(all.into_iter().enumerate().map(|(i, v)| if i == at { mutated(draw, v) } else { v }).collect())
        }
        _ => stray_value(draw),
    }
}

/// One server session fed without waiting: its replies are drained on a thread,
/// so that a server writing replies never blocks on a client that reads none.
struct Session {
    child: Child,
    input: Option<std::process::ChildStdin>,
    replies: std::thread::JoinHandle<usize>,
    next: u64,
}

impl Session {
    fn start(lab: &Lab, flags: &[&str], stderr: std::fs::File) -> Session {
        let mut child = Command::new(ibi_bin())
            .args(["serve", "--stdio", "--restrict-to-path", &lab.srv])
            .args(flags)
            .env(MINTER_DIR_ENV, minter_dir(lab.env.root()))
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start ibi serve");
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut greeting = String::new();
        std::io::BufRead::read_line(&mut output, &mut greeting).unwrap();
        assert!(greeting.starts_with("IBI-SERVE "), "the server's greeting: {greeting:?}");
        let replies = std::thread::spawn(move || count_replies(&mut output));
        let mut input = child.stdin.take().unwrap();
        let _ = input.write_all(b"IBI-CLIENT 7\n");
        let mut session = Session { child, input: Some(input), replies, next: 1 };
        session.send(&json!({"Open": {"path": lab.lib}}), &[]);
        session
    }

    /// Whether the server has ended the session (its output closed).
    fn ended(&self) -> bool {
        self.replies.is_finished()
    }

    fn send(&mut self, header: &Value, payload: &[u8]) {
        let bytes = frame(self.next, &serde_json::to_vec(header).unwrap(), payload);
        self.next += 1;
        if let Some(input) = self.input.as_mut() {
            // A server that ended the session is seen by `ended`.
            let _ = input.write_all(&bytes).and_then(|_| input.flush());
        }
    }

    /// Closes the input and waits (up to a minute) for the server to finish
    /// what it was sent and exit; returns how many replies it wrote and its exit code.
    fn finish(mut self, what: &str) -> (usize, Option<i32>) {
        drop(self.input.take());
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{what}: the server was still busy a minute after its client closed");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = self.child.wait().unwrap();
        (self.replies.join().unwrap(), status.code())
    }
}

/// Reads reply frames until the output closes; returns how many came.
fn count_replies(output: &mut impl Read) -> usize {
    let mut count = 0;
    let mut head = [0u8; 16];
    while output.read_exact(&mut head).is_ok() {
        let header_len = u32::from_be_bytes(head[..4].try_into().unwrap()) as u64;
        let payload_len = u32::from_be_bytes(head[4..8].try_into().unwrap()) as u64;
        let body = header_len + payload_len;
        if std::io::copy(&mut output.by_ref().take(body), &mut std::io::sink()).map_or(true, |n| n != body) {
            break;
        }
        count += 1;
    }
    count
}

/// Sends `REQUESTS` drawn from `seed` to sessions with `flags` (a new session
/// whenever the server ends one), and checks each session's end.
fn fuzz(lab: &Lab, flags: &[&str], seed: u64) -> usize {
    let pool = Pool::of(lab);
    let mut draw = Draw(seed);
    let log = lab.env.path(&format!("fuzz-{seed:x}-{}.stderr", flags.join("")));
    let stderr = || std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
    let (mut session, mut replies, mut last) = (Session::start(lab, flags, stderr()), 0, json!(null));
    for _ in 0..REQUESTS {
        if session.ended() {
            replies += check_end(session, &log, flags, seed, &last);
            session = Session::start(lab, flags, stderr());
        }
        let (header, payload) = request(&mut draw, &pool);
        session.send(&header, &payload);
        last = header;
    }
    replies + check_end(session, &log, flags, seed, &last)
}

/// A session's end: no panic, an exit code ibi documents; returns its replies.
fn check_end(session: Session, log: &std::path::Path, flags: &[&str], seed: u64, last: &Value) -> usize {
    let what = format!("seed {seed:#x}, flags {flags:?}, last request {last}");
    let (replies, code) = session.finish(&what);
    let stderr = std::fs::read_to_string(log).unwrap_or_default();
    assert!(!stderr.contains("panicked"), "{what}: the server panicked: {stderr}");
    assert!(matches!(code, Some(0..=3)), "{what}: the server ended with {code:?}: {stderr}");
    replies
}

#[test]
fn random_requests_neither_panic_the_server_nor_change_a_read_only_collection() {
    let lab = Lab::new();
    let before = lab.outside();
    let replies: usize = SEEDS.iter().map(|&seed| fuzz(&lab, &["--read-only"], seed)).sum();
    // Most requests were answered: the sessions did not end at their first frames.
    assert!(replies >= SEEDS.len() * REQUESTS / 2, "only {replies} replies to {} requests", SEEDS.len() * REQUESTS);
    let after: Vec<_> = lab.outside().into_iter().filter(|(p, ..)| !p.contains("fuzz-")).collect();
    super::assert_same_files(&before, &after, "random read-only sessions");
}

#[test]
fn random_requests_from_a_writer_stay_inside_and_leave_the_collection_sound() {
    let lab = Lab::new();
    let outside_srv = |lab: &Lab| -> Vec<_> {
        let srv = lab.srv.clone();
        // The machine's minter states change with every name the session mints: they are this server's own.
        let own = |p: &str| p.starts_with(&srv) || p.contains("fuzz-") || p.contains(".ibi-minters");
        lab.outside().into_iter().filter(|(p, ..)| !own(p)).collect()
    };
    let before = outside_srv(&lab);
    let held = lab.names(&lab.lib);
    let mut replies = 0;
    for seed in SEEDS {
        replies += fuzz(&lab, &["--append-only"], seed);
        // Append-only: every item is still there.
        let now = lab.names(&lab.lib);
        assert!(held.iter().all(|item| now.contains(item)), "seed {seed:#x}: an append-only session took items away");
        replies += fuzz(&lab, &[], seed);
        let verify = lab.env.run(&["-q", "verify", &lab.lib]);
        assert_eq!(verify.code, 0, "seed {seed:#x}: {} {}", verify.stdout, verify.stderr);
    }
    assert!(replies >= 2 * SEEDS.len() * REQUESTS / 2, "only {replies} replies");
    super::assert_same_files(&before, &outside_srv(&lab), "random writable sessions");
}
