//! `ibi handles`: the Handle System batch export, read back by a parser of the
//! hdl-genericbatch format written here (independent of the exporter), and
//! OIDs written as handles in `ibi parse`.

use std::collections::BTreeMap;

use crate::env::TestEnv;

/// One typed value line: `INDEX TYPE TTL PERMS FORMAT DATA`.
#[derive(Debug, Clone)]
struct HandleValue {
    index: u32,
    kind: String,
    format: String,
    data: String,
}

/// Parses a batch into `handle -> values`; every block is `CREATE H`, value lines, a blank line.
fn parse_batch(text: &str) -> Result<BTreeMap<String, Vec<HandleValue>>, String> {
    let mut handles = BTreeMap::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let handle = line.strip_prefix("CREATE ").ok_or(format!("line {}: expected CREATE: {line}", n + 1))?;
        let mut values = Vec::new();
        for (n, line) in lines.by_ref() {
            if line.is_empty() {
                break;
            }
            let parts: Vec<&str> = line.splitn(6, ' ').collect();
            let [index, kind, ttl, perms, format, data] = parts[..] else {
                return Err(format!("line {}: {line}", n + 1));
            };
            ttl.parse::<u32>().map_err(|_| format!("line {}: ttl {ttl}", n + 1))?;
            if perms.len() != 4 || !perms.bytes().all(|b| b == b'0' || b == b'1') {
                return Err(format!("line {}: permissions {perms}", n + 1));
            }
            let index = index.parse().map_err(|_| format!("line {}: index {index}", n + 1))?;
            values.push(HandleValue { index, kind: kind.into(), format: format.into(), data: data.into() });
        }
        if handles.insert(handle.to_string(), values).is_some() {
            return Err(format!("{handle} created twice"));
        }
    }
    Ok(handles)
}

fn value<'a>(values: &'a [HandleValue], kind: &str) -> Option<&'a HandleValue> {
    values.iter().find(|v| v.kind == kind)
}

fn export(env: &TestEnv, root: &str, extra: &[&str]) -> crate::env::Run {
    let mut args = vec!["handles", root, "--prefix", "10.5555", "--url-base", "https://lib.example.org/"];
    args.extend_from_slice(extra);
    env.run(&args)
}

#[test]
fn a_handle_batch_round_trips_every_item_and_alias() {
    let env = TestEnv::new();
    let root = env.filled("lib", 4, 1);
    let pairs = env.ok(&["list", &root]).pairs();
    let (gone, _) = pairs[1].clone();
    env.ok(&["-q", "withdraw", &root, &gone, "--reason", "duplicate of another thesis"]);
    let run = export(&env, &root, &["--mirror", "https://mirror.example.org/"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let handles = parse_batch(&run.stdout).unwrap_or_else(|e| panic!("{e}\n{}", run.stdout));
    assert_eq!(handles.len(), 8, "four items and four IBIps");
    for (name, ibip) in &pairs {
        let values = &handles[&format!("10.5555/{name}")];
        let admin = value(values, "HS_ADMIN").expect("HS_ADMIN");
        assert_eq!((admin.index, admin.format.as_str()), (100, "ADMIN"));
        assert!(admin.data.ends_with(":0.NA/10.5555"), "{}", admin.data);
        assert_eq!(value(values, "URL").unwrap().data, format!("https://lib.example.org/{name}"));
        let loc = &value(values, "10320/loc").unwrap().data;
        assert!(loc.contains(&format!("href=\"https://lib.example.org/{name}\" weight=\"1\"")), "{loc}");
        assert!(loc.contains(&format!("href=\"https://mirror.example.org/{name}\" weight=\"0\"")), "{loc}");
        let desc = value(values, "DESC");
        assert_eq!(desc.is_some(), name == &gone, "only the withdrawn item says so");
        let alias = &handles[&format!("10.5555/{ibip}")];
        assert_eq!(value(alias, "HS_ALIAS").unwrap().data, format!("10.5555/{name}"));
    }
    assert!(value(&handles[&format!("10.5555/{gone}")], "DESC").unwrap().data.contains("duplicate of another thesis"));
    assert!(!run.stdout.to_lowercase().contains("secret"));
}

#[test]
fn pilin_suffixes_and_incremental_export() {
    let env = TestEnv::new();
    let root = env.filled("lib", 3, 1);
    let run = export(&env, &root, &["--suffix", "pilin"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let handles = parse_batch(&run.stdout).unwrap();
    let date = |text: &str| {
        let json: serde_json::Value = serde_json::from_str(env.ok(&["--json", "parse", text]).stdout.trim()).unwrap();
        json["date"].as_str().unwrap().to_string()
    };
    let mut items = 0;
    for (handle, values) in &handles {
        let Some(url) = value(values, "URL") else { continue };
        let name = url.data.strip_prefix("https://lib.example.org/").unwrap();
        let suffix = handle.strip_prefix("10.5555/").unwrap();
        assert_eq!(date(suffix), date(name), "the PILIN suffix {suffix} encodes the date of {name}");
        items += 1;
    }
    assert_eq!(items, 3);
    assert!(handles.keys().all(|h| h.starts_with("10.5555/")));
    let none = export(&env, &root, &["--since", "2999-01-01"]);
    assert_eq!((none.code, none.stdout.as_str()), (0, ""), "nothing changed since then");
}

/// Four items deposited in one batch are minted in one pass of the minter, a
/// tenth of a millisecond apart unless the clock has moved on, so at least two
/// of them share a millisecond, which a PILIN suffix cannot tell apart. (The
/// test once set the minter's state ahead and asked for all three names in one
/// millisecond: a CI machine preempted the minter right after its wait, and the
/// later names came from a clock 1 to 7 ms on, in all three attempts.) An
/// attempt whose names all fell in distinct milliseconds is seen from the names
/// and made again in a fresh collection, at most three times.
#[test]
fn a_pilin_export_of_two_items_in_one_millisecond_is_refused() {
    let env = TestEnv::new();
    let mut dates = Vec::new();
    for attempt in 0..3 {
        let root = env.path(&format!("fine{attempt}")).to_string_lossy().into_owned();
        let host = format!("t{attempt}.example.org");
        env.ok(&["-q", "init", &root, "--host", &host, "--ip", "192.0.2.9", "--granularity", "0.0001"]);
        let files: Vec<String> = (0..4)
            .map(|i| env.write(&format!("f{attempt}{i}.txt"), format!("{i}").as_bytes()).to_string_lossy().into())
            .collect();
        let mut args = vec!["-q", "deposit", "--each", root.as_str()];
        args.extend(files.iter().map(String::as_str));
        env.ok(&args);
        let listed = env.ok(&["list", &root]).stdout;
        let names: Vec<&str> = listed.lines().map(|line| line.split('\t').next().unwrap_or_default()).collect();
        let millis: std::collections::BTreeSet<String> = names.iter().map(|n| millisecond_of(n)).collect();
        assert_eq!(names.len(), 4, "{listed}");
        if millis.len() == names.len() {
            dates.push(listed);
            continue;
        }
        let refused = export(&env, &root, &["--suffix", "pilin"]);
        assert_eq!(refused.code, 2, "{}", refused.stderr);
        assert!(refused.stderr.contains("share the suffix") && refused.stdout.is_empty(), "{}", refused.stderr);
        assert_eq!(export(&env, &root, &["--suffix", "ibip"]).code, 0);
        return;
    }
    panic!("no attempt minted two names in one millisecond: {dates:?}");
}

/// The name's date to the millisecond: `MM.DD.hh.mm.ss` and the first three
/// digits of its fraction, which drops trailing zeros (`.507` is `.5070`).
fn millisecond_of(name: &str) -> String {
    let suffix = name.rsplit('/').next().unwrap_or_default();
    let fields: Vec<&str> = suffix.split('.').collect();
    let fraction = if fields.len() > 5 { fields[5] } else { "" };
    format!("{}.{:0<3.3}", fields[..fields.len().min(5)].join("."), fraction)
}

#[test]
fn an_oid_written_as_a_handle_is_explained() {
    let env = TestEnv::new();
    let run = env.ok(&["--json", "parse", "10673/1.1.0.15961.12.1.1234567890"]);
    let json: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(json["kind"], "handle");
    assert_eq!(json["oid"], "1.1.0.15961.12.1.1234567890");
    assert_eq!(json["oid_root"], "iso");
    assert!(json["oid_prefix"].as_str().unwrap().contains("10673"));
    let plain = env.ok(&["--json", "parse", "10.1000/182"]);
    assert!(!plain.stdout.contains("oid"), "a plain handle is no OID: {}", plain.stdout);
}

/// `--url-base https://host` (no trailing slash) wrote `https://hostexample.org/…`
/// for every handle, silently. A base now gets its slash; bad prefixes, bases,
/// mirrors and admins are refused with exit 2, naming the option.
#[test]
fn regress_url_base_without_a_slash_joins_host_and_name() {
    let env = TestEnv::new();
    let root = env.filled("lib", 1, 1);
    let name = env.ok(&["list", &root]).pairs()[0].0.clone();
    let run = env.ok(&["handles", &root, "--prefix", "10.1000", "--url-base", "https://lib.example.org", "-q"]);
    assert!(run.stdout.contains(&format!("UTF8 https://lib.example.org/{name}\n")), "{}", run.stdout);
    let run = env.ok(&[
        "handles",
        &root,
        "--prefix",
        "10.1000",
        "--url-base",
        "https://h.org/",
        "--admin",
        "200:0.NA/10.1000",
    ]);
    assert!(run.stdout.contains("ADMIN 200:111111111111:0.NA/10.1000"), "{}", run.stdout);
    for (flag, value) in [
        ("--url-base", "lib.example.org"),
        ("--url-base", "ftp://lib.example.org/"),
        ("--url-base", "https://"),
        ("--url-base", "https://h.org/?q="),
        ("--mirror", "mirror.example.org"),
        ("--prefix", "10.1000/x"),
        ("--admin", "nobody"),
        ("--admin", "x:0.NA/10.1000"),
    ] {
        let mut args = vec!["handles", root.as_str(), "--prefix", "10.1000", "--url-base", "https://h.org/"];
        if flag == "--prefix" {
            args[3] = value;
        } else if flag == "--url-base" {
            args[5] = value;
        } else {
            args.extend([flag, value]);
        }
        let run = env.fails(&args, 2);
        assert!(run.stderr.contains(flag) || run.stderr.contains("prefix"), "{flag} {value}: {}", run.stderr);
    }
}
