//! The event log (issue 24): every action and check appends one event to a hash
//! chain kept with the collection; mirror, copy and migrate carry an item's
//! events with it; `ibi log` prints it and writes PREMIS that Archivematica's
//! reader (metsrw) reads back; `verify` names the first break of a tampered chain.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::env::{repo, sh, TestEnv};

/// The types of the collection's own events (not carried), in order.
fn own_types(log: &[Value]) -> Vec<String> {
    log.iter().filter(|e| e.get("carried_from").is_none()).map(|e| e["type"].as_str().unwrap().to_string()).collect()
}

fn first_name(env: &TestEnv, root: &str) -> String {
    env.ok(&["list", root]).lines()[0].split('\t').next().unwrap().to_string()
}

#[test]
fn the_log_records_every_kind_of_action_with_its_agent() {
    let env = TestEnv::new();
    let a = env.filled("a", 3, 1);
    let name = first_name(&env, &a);
    env.ok(&["update", &a, &name, "--meta", "Title=Second"]);
    env.ok(&["verify", &a]);
    let b = env.collection("b");
    env.ok(&["mirror", &a, &b]);
    std::fs::remove_dir_all(Path::new(&b).join(&name)).unwrap();
    env.ok(&["repair", &b, "--from", &a]);
    let c = env.collection("c");
    env.ok(&["copy", &a, &c]);
    let other_fs = env.tmpfs("other-fs", "16m");
    let d = other_fs.at("d");
    env.ok(&["-q", "init", &d, "--like", &a]);
    env.ok(&["migrate", &c, &d]);
    let withdrawn = env.ok(&["list", &a]).lines()[1].split('\t').next().unwrap().to_string();
    env.ok(&["withdraw", &a, &withdrawn, "--reason", "at the author's request"]);
    env.ok(&["handover", &a, &b]);

    let log_a = env.log(&a);
    let types_a: BTreeSet<String> = own_types(&log_a).into_iter().collect();
    let expected = ["deposit", "update", "withdraw", "fixity", "witness", "handover"];
    assert_eq!(types_a, expected.iter().map(|t| t.to_string()).collect(), "A's own events");
    assert_eq!(own_types(&log_a).iter().filter(|t| *t == "deposit").count(), 3, "one deposit per item");
    let agent = &log_a[0]["agent"];
    assert!(agent["user"].as_str().is_some_and(|u| !u.is_empty()) && agent["host"].as_str().is_some());
    assert_eq!(agent["version"], env!("CARGO_PKG_VERSION"));
    for (i, event) in log_a.iter().enumerate() {
        assert_eq!(event["seq"], i as u64 + 1);
        let prev = match i {
            // The first follows the collection's genesis: docs/formats.md, computed here from the text.
            0 => crate::env::sha256_hex(format!("ibi log of {}", env.collection_id(&a)).as_bytes()),
            _ => log_a[i - 1]["hash"].as_str().unwrap().to_string(),
        };
        assert_eq!(event["prev"], prev.as_str(), "each event names the hash of the one before");
    }

    // B: the item's history came with it, then its own arrival, repair and handover.
    let log_b = env.log(&b);
    let carried: Vec<&Value> =
        log_b.iter().filter(|e| e["item"] == name.as_str() && e.get("carried_from").is_some()).collect();
    let carried_types: Vec<&str> = carried.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(&carried_types[..2], ["deposit", "update"], "A's events of the item, in order: {carried_types:?}");
    let ids_a: BTreeSet<&str> = log_a.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert!(carried.iter().all(|e| ids_a.contains(e["id"].as_str().unwrap())), "carried events keep their ids");
    let types_b = own_types(&log_b);
    assert_eq!(types_b.iter().filter(|t| *t == "mirror-in").count(), 3);
    assert_eq!(types_b.iter().filter(|t| *t == "repair").count(), 1);
    assert!(types_b.contains(&"handover".to_string()), "{types_b:?}");
    assert_eq!(own_types(&env.log(&c)).iter().filter(|t| *t == "migrate-out").count(), 3);
    assert_eq!(own_types(&env.log(&d)).iter().filter(|t| *t == "migrate-in").count(), 3);

    // One item's events, and since a date.
    let item_log = env.ok(&["--json", "log", &a, &name]).stdout;
    assert!(item_log.lines().all(|l| l.contains(&format!("\"item\":\"{name}\""))));
    assert_eq!(env.ok(&["--json", "log", &a, "--since", "2999-01-01"]).stdout, "");
    let text = env.ok(&["log", &a]).stdout;
    assert!(text.lines().next().unwrap().starts_with("1\t") && text.contains("\twithdraw\t"), "{text}");
}

#[test]
fn premis_output_is_read_back_by_metsrw_event_by_event() {
    let env = TestEnv::new();
    let a = env.filled("a", 1, 2);
    let name = first_name(&env, &a);
    env.ok(&["update", &a, &name, "--meta", "Title=<Relatório & \"notas\">"]);
    env.ok(&["verify", &a]);
    let b = env.collection("b");
    env.ok(&["mirror", &a, &b]);
    env.ok(&["withdraw", &b, &name, "--reason", "duplicate <of> & \"another\""]);
    let (premis, out) = premis_read_back(&env, &b, &name);
    let types: Vec<&str> = out.lines().map(|l| l.split('\t').next().unwrap()).collect();
    // A's fixity check stayed with A's copy: what arrives carries what was done to the item.
    assert_eq!(types, ["deposit", "update", "mirror-in", "withdraw"], "{out}");
    // Both file sets in the document? The item is named as the events' object.
    assert!(premis.contains(&format!("<premis:objectIdentifierValue>{name}</premis:objectIdentifierValue>")));
}

/// Runs SQL on a local collection's inventory (Python's sqlite3, as anyone
/// with a shell on the server could).
fn tamper(root: &str, sql: &str) {
    let db = Path::new(root).join(".ibi/inventory.sqlite");
    let script =
        format!("import sqlite3; c = sqlite3.connect('{}'); c.executescript('''{sql}'''); c.commit()", db.display());
    let out = std::process::Command::new("python3").args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Each tampering, in a fresh copy of a collection with a log of a few events,
/// and the break verify must name (locally and over a far session).
const TAMPERINGS: [(&str, &str, &str); 4] = [
    ("edit", "UPDATE events SET body = replace(body, '\"success\"', '\"failure\"') WHERE seq = 3;", "event 3: its content"),
    ("delete", "DELETE FROM events WHERE seq = 3;", "event 3 is missing"),
    (
        "insert",
        "UPDATE events SET seq = -seq WHERE seq >= 3; UPDATE events SET seq = 1 - seq WHERE seq < 0; \
         INSERT INTO events (seq, id, item, body, hash) SELECT 3, 'forged', item, body, hash FROM events WHERE seq = 2;",
        "event 3: it says it is event 2",
    ),
    (
        "reorder",
        "UPDATE events SET seq = -1 WHERE seq = 3; UPDATE events SET seq = 3 WHERE seq = 4; \
         UPDATE events SET seq = 4 WHERE seq = -1;",
        "event 3: it says it is event 4",
    ),
];

#[test]
fn tampered_events_break_the_chain_at_their_place_locally_and_far() {
    let env = TestEnv::new();
    let a = env.filled("a", 4, 1);
    env.ok(&["verify", &a]);
    let rsh = env.shim("rsh", "", None);
    // A version-5 server has its log read by the client; a later one checks its own.
    let older = env.shim("rsh5", "export IBI_PROTOCOL_VERSIONS=5", None);
    for (how, sql, says) in TAMPERINGS {
        let copy = env.path(&format!("tampered-{how}")).to_string_lossy().into_owned();
        sh(&format!("cp -a '{a}' '{copy}'"));
        env.ok(&["verify", &copy]);
        tamper(&copy, sql);
        let run = env.fails(&["verify", &copy], 1);
        assert!(run.stdout.contains("broken log") && run.stdout.contains(says), "{how}: {}", run.stdout);
        for shim in [&rsh, &older] {
            let far = env.far_fails(shim, &["verify", &format!("lab:{copy}")], 1);
            assert!(far.stdout.contains("broken log") && far.stdout.contains(says), "{how} (far): {}", far.stdout);
        }
    }
}

/// A verify keeps where its chain check ended (a check reads the events
/// logged since, and a window of older ones, not the whole log past a million
/// events), on the far machine too; the event it ended at must be unchanged at
/// the next check. A log re-sealed from that event on, with the witness that
/// signed its head removed, is a whole chain that only the cursor shows.
#[test]
fn a_chain_check_keeps_where_it_ended_and_holds_the_log_to_it() {
    let env = TestEnv::new();
    let a = env.filled("a", 3, 1);
    let rsh = env.shim("rsh", "", None);
    env.far_ok(&rsh, &["-q", "verify", &format!("lab:{a}")]);
    let db = format!("{a}/.ibi/inventory.sqlite");
    let through = sh(&format!(
        "python3 -c \"import sqlite3; print(sqlite3.connect('{db}').execute('SELECT through FROM chain_cursor').fetchone()[0])\""
    ));
    let through: u64 = through.trim().parse().expect("the far server kept its cursor");
    assert!(through >= 3, "it read the deposits at least: {through}");
    sh(&format!("rm '{a}/.ibi/witness.json'"));
    let reseal = format!(
        "import hashlib, json, sqlite3\n\
         c = sqlite3.connect('{db}')\n\
         prev = c.execute('SELECT hash FROM events WHERE seq = {before}').fetchone()[0]\n\
         for seq, body in c.execute('SELECT seq, body FROM events WHERE seq >= {through} ORDER BY seq').fetchall():\n\
         \x20   event = json.loads(body)\n\
         \x20   event['prev'] = prev\n\
         \x20   if seq == {through}: event['detail'] = 'rewritten'\n\
         \x20   body = json.dumps(event, separators=(',', ':'))\n\
         \x20   prev = hashlib.sha256(body.encode()).hexdigest()\n\
         \x20   c.execute('UPDATE events SET body = ?, hash = ? WHERE seq = ?', (body, prev, seq))\n\
         c.commit()\n",
        before = through - 1
    );
    let out = std::process::Command::new("python3").args(["-c", &reseal]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = env.fails(&["verify", &a], 1);
    let says = format!("event {through}: it is not the event the last chain check");
    assert!(run.stdout.contains("broken log") && run.stdout.contains(&says), "{}", run.stdout);
}

/// A log cut short keeps a whole chain (issue 24): removing its last events left
/// every remaining link intact, and verify said nothing. A witness now signs the
/// log's last event, and verify holds the log to the latest witness.
#[test]
fn regress_a_log_cut_short_passes_the_chain_check() {
    let env = TestEnv::new();
    let a = env.filled("a", 4, 1);
    env.ok(&["-q", "verify", &a]);
    env.ok(&["-q", "verify", &a]);
    let witness: Value = serde_json::from_str(&env.ok(&["witness", &a]).stdout).unwrap();
    let signed = witness["log_events"].as_u64().expect("the witness signs the log's length");
    assert!(signed > 4, "the log held the deposits and a verify's checks: {witness}");
    tamper(&a, &format!("DELETE FROM events WHERE seq >= {};", signed - 1));
    let run = env.fails(&["verify", &a], 1);
    assert!(run.stdout.contains("broken log") && run.stdout.contains("tail was removed"), "{}", run.stdout);
}

/// A far server logs as its own agent, naming the session's restriction: an
/// append-only key's arrivals say so.
#[test]
fn a_far_session_logs_its_key_restriction() {
    let env = TestEnv::new();
    let a = env.filled("a", 2, 1);
    let b = env.path("b").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &b, "--like", &a]);
    let forced = format!("{} serve --stdio --append-only", crate::env::ibi_bin().display());
    let rsh = env.shim("rsh-append-only", "", Some(&forced));
    env.far_ok(&rsh, &["mirror", &a, &format!("lab:{b}")]);
    let arrivals: Vec<Value> = env.log(&b).into_iter().filter(|e| e["type"] == "mirror-in").collect();
    assert_eq!(arrivals.len(), 2);
    for event in &arrivals {
        let restriction = event["agent"]["restriction"].as_str().unwrap_or_default();
        assert!(restriction.contains("far session") && restriction.contains("append-only"), "{event}");
    }
    let far_log = env.far_ok(&rsh, &["--json", "log", &format!("lab:{b}")]).stdout;
    assert_eq!(far_log.lines().count(), env.log(&b).len(), "the far log reads the same");
}

/// The ids of the events a journalled step logs (every deposit, mirror, copy,
/// migrate and repair) were hashes of the step and the item: each went to a
/// random place in the log's unique index on ids, so each batch rewrote a page
/// of the index per event (a mirror of 5,000 items wrote 8,142 pages of its
/// inventory where it now writes 4,268). Their ids now begin with the time
/// their step began: in the order the events were logged, the ids of the
/// collection's own events never go back in time, and the carried ones keep
/// the ids they were given where they happened.
#[test]
fn regress_journalled_event_ids_in_random_order() {
    let env = TestEnv::new();
    let a = env.filled("a", 40, 1);
    let b = env.collection("b");
    env.ok(&["-q", "mirror", &a, &b]);
    let time_of = |e: &Value| {
        let id = e["id"].as_str().unwrap().trim_start_matches("urn:uuid:").replace('-', "");
        u64::from_str_radix(&id[..12], 16).unwrap()
    };
    for (root, own) in [(&a, "deposit"), (&b, "mirror-in")] {
        let log = env.log(root);
        let times: Vec<u64> = log.iter().filter(|e| e["type"] == own).map(time_of).collect();
        assert_eq!(times.len(), 40, "{own}: one event an item");
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{own} ids in the order logged: {times:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        assert!(times.iter().all(|&t| t <= now && now - t < 600_000), "{own} ids begin with their step's time");
    }
    let ids = |root: &str| -> BTreeSet<String> {
        env.log(root).iter().filter(|e| e["type"] == "deposit").map(|e| e["id"].as_str().unwrap().into()).collect()
    };
    let (carried, deposited) = (ids(&b), ids(&a));
    assert_eq!(carried, deposited, "carried events keep their ids");
}

/// Issue 57, class 4: a reason with ESC and BEL was accepted and `log --premis`
/// wrote them raw (and U+0001, U+FFFE, a control character in a source path
/// carried by mirror): no XML parser read the file. Reasons and bag-info values
/// with control characters are refused at the door, and what still reaches
/// PREMIS (a path from another collection) is written visibly; lxml and metsrw
/// read every file.
#[test]
fn regress_premis_no_parser_reads() {
    let env = TestEnv::new();
    let hostile_root = env.collection("lib\u{1}\u{1b}]0;PWNED\u{7}\u{fffe}");
    let src = env.write("doc/a.txt", b"a\n");
    env.ok(&["-q", "deposit", &hostile_root, src.parent().unwrap().to_str().unwrap()]);
    let name = first_name(&env, &hostile_root);
    let b = env.path("b").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &b, "--like", &hostile_root]);
    env.ok(&["-q", "mirror", &hostile_root, &b]);
    for reason in ["dup \u{1b}]0;PWNED\u{7}", "one\u{1}", "two\u{fffe}"] {
        let refused = env.fails(&["withdraw", &b, &name, "--reason", reason], 2);
        assert!(refused.stderr.contains("control character"), "{}", refused.stderr);
    }
    let meta = env.fails(&["update", &b, &name, "--meta", "Title=a\u{1b}[31mred"], 2);
    assert!(meta.stderr.contains("control character"), "{}", meta.stderr);
    env.ok(&["withdraw", &b, &name, "--reason", "duplicate"]);
    let (premis, _) = premis_read_back(&env, &b, &name);
    assert!(premis.chars().all(|c| !c.is_control() || c == '\n' || c == '\t'), "{premis:?}");
}

/// `ibi log ROOT NAME --premis`, read back by lxml and metsrw
/// (`tests/premis_check.py`) and compared with the JSON log; the document and
/// what the checker printed.
fn premis_read_back(env: &TestEnv, root: &str, name: &str) -> (String, String) {
    let premis = env.ok(&["log", root, name, "--premis"]).stdout;
    std::fs::write(env.path("premis.xml"), &premis).unwrap();
    std::fs::write(env.path("log.jsonl"), env.ok(&["--json", "log", root, name]).stdout).unwrap();
    let python = repo().join("target/bagit-venv/bin/python");
    assert!(python.exists(), "run scripts/setup (scripts/test does)");
    let read = std::process::Command::new(python)
        .arg(repo().join("tests/premis_check.py"))
        .args([env.path("premis.xml"), env.path("log.jsonl")])
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&read.stdout), String::from_utf8_lossy(&read.stderr));
    assert!(read.status.success(), "lxml and metsrw read it: {out}{err}");
    (premis, out.into_owned())
}

/// Issue 57, class 2: fixity dates were taken on trust. Rows written into the
/// inventory's `fixity` table by hand (dated now, `ok`, no check and no event)
/// made `verify --age` exit 0 while an item was damaged; a check dated 2099 (a
/// clock that once ran ahead) was never redone and `--age` exited 0. A date
/// counts only when the hash-chained log holds its check, and a date in the
/// future is a problem, taken as never checked and checked first.
#[test]
fn regress_fixity_dates_taken_on_trust() {
    let env = TestEnv::new();
    let a = env.filled("a", 3, 1);
    let names: Vec<String> =
        env.ok(&["list", &a]).lines().iter().map(|l| l.split('\t').next().unwrap().into()).collect();
    std::fs::write(Path::new(&a).join(&names[0]).join("data/f0.txt"), b"rotten\n").unwrap();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let rows: String = names
        .iter()
        .map(|n| format!("INSERT OR REPLACE INTO fixity (name, checked, ok) VALUES ('{n}', '{now}', 1);"))
        .collect();
    tamper(&a, &format!("CREATE TABLE IF NOT EXISTS fixity (name TEXT PRIMARY KEY NOT NULL, checked TEXT NOT NULL, ok INTEGER NOT NULL, seq INTEGER) WITHOUT ROWID; {rows}"));
    let age = env.fails(&["verify", &a, "--age", "--cycle", "90"], 1);
    assert!(age.stderr.contains("3 not found whole"), "rows no check logged count for nothing: {}", age.stderr);
    let ndsa = env.run(&["audit", &a, "--ndsa"]).stdout;
    let cell = ndsa.lines().find(|l| l.contains("Document integrity information verification")).unwrap_or_default();
    assert!(cell.contains("\tunmet\t"), "{cell}");

    // Genuine checks made by a clock 30,000 days ahead.
    std::fs::write(Path::new(&a).join(&names[0]).join("data/f0.txt"), b"a item 0 file 0\n").unwrap();
    let ibi = crate::env::ibi_bin();
    let ahead = sh(&format!(
        "IBI_MINTER_DIR='{}' faketime -f +30000d '{}' -q verify '{a}' && echo verified",
        crate::env::minter_dir(env.root()).display(),
        ibi.display()
    ));
    assert!(ahead.contains("verified"), "{ahead}");
    let age = env.fails(&["verify", &a, "--age", "--cycle", "90"], 1);
    assert!(age.stdout.contains("dated in the future"), "{}", age.stdout);
    assert!(age.stderr.contains("3 not found whole"), "{}", age.stderr);
    env.ok(&["-q", "verify", &a, "--budget", "1B"]);
    let age = env.fails(&["verify", &a, "--age", "--cycle", "90"], 1);
    assert!(
        age.stderr.contains("2 not found whole"),
        "the nightly run redid a future-dated check first: {}",
        age.stderr
    );
}

/// Issue 57, class 3: log tampering the chain check did not see: the tail after
/// the newest anchor deleted; an old witness replayed with every later event
/// deleted and the cursor dropped; another collection's log spliced in. Each
/// passed `verify`. The sites now keep the collection's checkpoint, cosigned
/// (C2SP checkpoint and cosignature), and `replicate` carries a new one only
/// when it extends theirs: each tampering is refused by a local and a far site
/// at the next replicate, and named by the next audit.
/// A change made to a collection's files (the collection, another collection).
type Tampering = dyn Fn(&TestEnv, &str, &str);

#[test]
fn regress_log_tampering_the_chain_check_misses() {
    let tamperings: [(&str, &Tampering); 3] = [
        ("tail", &|_, a, _| tamper(a, "DELETE FROM events WHERE seq > (SELECT max(seq) - 2 FROM events);")),
        ("replayed witness", &|_, a, _| {
            let witness = Path::new(a).join(".ibi/witness.json");
            let old: Value = serde_json::from_slice(&std::fs::read(&witness).unwrap()).unwrap();
            let head = old["log_events"].as_u64().unwrap();
            tamper(a, &format!("DELETE FROM events WHERE seq > {head}; DELETE FROM chain_cursor;"));
        }),
        ("spliced", &|env, a, other| {
            let theirs = Path::new(other).join(".ibi/inventory.sqlite");
            env.ok(&["-q", "verify", other]);
            tamper(
                a,
                &format!(
                    "ATTACH '{}' AS o; DELETE FROM events; INSERT INTO events SELECT * FROM o.events; \
                     DELETE FROM chain_cursor;",
                    theirs.display()
                ),
            );
            let _ = std::fs::remove_file(Path::new(a).join(".ibi/witness.json"));
        }),
    ];
    for (what, change) in tamperings {
        let env = TestEnv::new();
        let a = env.filled("a", 2, 1);
        let other = env.filled("other", 3, 1);
        let (b, c) = (env.path("b").to_string_lossy().into_owned(), env.path("c").to_string_lossy().into_owned());
        let rsh = env.shim("rsh", "", None);
        for site in [&b, &c] {
            env.ok(&["-q", "init", site, "--like", &a]);
        }
        env.ok(&["-q", "site", "add", &a, &b, "--zone", "zb"]);
        env.far_ok(&rsh, &["-q", "site", "add", &a, &format!("lab:{c}"), "--zone", "zc"]);
        env.ok(&["-q", "verify", &a]);
        let replicated = env.far_ok(&rsh, &["replicate", &a]);
        assert!(replicated.stderr.matches("cosigned the log's checkpoint").count() == 2, "{}", replicated.stderr);
        env.deposit_new_items(&a, "later", 1);
        let listed = env.ok(&["list", &a]).stdout;
        let first = listed.split('\t').next().unwrap();
        env.ok(&["withdraw", &a, first, "--reason", "gone"]);
        env.far_ok(&rsh, &["-q", "replicate", &a]);
        env.far_ok(&rsh, &["-q", "audit", &a]);

        change(&env, &a, &other);
        let audit = env.far_fails(&rsh, &["-q", "audit", &a], 1);
        for site in [b.clone(), format!("lab:{c}")] {
            assert!(audit.stdout.contains(&format!("log\t{site}: it cosigned")), "{what}: {}", audit.stdout);
        }
        let refused = env.far_fails(&rsh, &["-q", "replicate", &a], 1);
        assert!(refused.stdout.contains("checkpoint not cosigned"), "{what}: {}", refused.stdout);
    }
}

/// Issue 57, class 3 (at home): nothing tied a log to its collection, so the
/// `events` of another collection's valid log put in place of this one's (the
/// cursor and witness dropped) passed `verify`. A log's first event now follows
/// its collection's own beginning (`genesis`, from the collection id), and
/// `verify` names a log that begins another collection.
#[test]
fn regress_a_log_of_another_collection_is_taken() {
    let env = TestEnv::new();
    let a = env.filled("a", 2, 1);
    let other = env.filled("other", 3, 1);
    env.ok(&["-q", "verify", &a]);
    let theirs = Path::new(&other).join(".ibi/inventory.sqlite");
    tamper(
        &a,
        &format!(
            "ATTACH '{}' AS o; DELETE FROM events; INSERT INTO events SELECT * FROM o.events; DELETE FROM chain_cursor;",
            theirs.display()
        ),
    );
    let _ = std::fs::remove_file(Path::new(&a).join(".ibi/witness.json"));
    let verify = env.fails(&["verify", &a], 1);
    let said = format!("{}{}", verify.stdout, verify.stderr);
    assert!(said.contains("begins the log of another collection"), "{said}");
    env.ok(&["-q", "verify", &other]);
}

/// Issue 59 (smaller traps): the log named the agent `uid 0` when `$USER` was
/// unset (cron, ssh commands) and took `$USER` on trust when it was set; a
/// withdrawn item's date carried nanoseconds in the messages people read. The
/// agent is the account of the effective uid as the system names it, and dates
/// for people are to the second.
#[test]
fn regress_log_names_the_agent_by_hearsay() {
    let env = TestEnv::new();
    let a = env.filled("a", 1, 1);
    let account = sh("id -un").trim().to_string();
    let mut lying = env.command(&["-q", "verify", &a]);
    lying.env("USER", "somebody-else").env("LOGNAME", "somebody-else");
    assert!(lying.status().unwrap().success());
    let mut unset = env.command(&["-q", "verify", &a]);
    unset.env_remove("USER").env_remove("LOGNAME");
    assert!(unset.status().unwrap().success());
    let agents: Vec<String> = env
        .log(&a)
        .iter()
        .filter(|e| e["type"] == "fixity")
        .map(|e| e["agent"]["user"].as_str().unwrap().into())
        .collect();
    assert_eq!(agents, [account.clone(), account], "the account of the effective uid, both times");
    let name = first_name(&env, &a);
    env.ok(&["-q", "withdraw", &a, &name, "--reason", "duplicate"]);
    let shown = env.fails(&["resolve", &a, &name], 1);
    let date = shown.stderr.split("(on ").nth(1).unwrap_or_default().split(')').next().unwrap_or_default().to_string();
    assert!(date.ends_with('Z') && !date.contains('.') && date.len() == 20, "to the second: {}", shown.stderr);
}
