//! `ibi serve --listen`: a real server on 127.0.0.1:0, driven by an HTTP client
//! (ureq) and, where a client would tidy the request up, by raw sockets. Each
//! test starts its own server and stops it (a `Reaper`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::env::{bagit_py, repo, sh, Reaper, TestEnv};

/// A running `ibi serve --listen`.
pub struct Server {
    pub reaper: Reaper,
    pub port: u16,
    /// Everything it wrote on stderr after its first line.
    pub stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `command` (an `ibi serve … --listen 127.0.0.1:0`) and reads its port from stderr.
    pub fn start(mut command: Command) -> Server {
        let mut child = command.stderr(Stdio::piped()).stdout(Stdio::null()).spawn().expect("start ibi serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let reaper = Reaper(Some(child));
        let first = lines.next().expect("ibi serve said nothing").unwrap();
        let port = first
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .unwrap_or_else(|| panic!("no port in {first:?}"));
        let stderr = Arc::new(Mutex::new(String::new()));
        let rest = stderr.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                rest.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Server { reaper, port, stderr }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn pid(&self) -> i32 {
        self.reaper.0.as_ref().unwrap().id() as i32
    }
}

impl TestEnv {
    /// `ibi serve ROOTS… --listen 127.0.0.1:0 EXTRA…`, started.
    pub fn serve(&self, roots: &[&str], extra: &[&str]) -> Server {
        let mut args = vec!["serve"];
        args.extend(roots);
        args.extend(["--listen", "127.0.0.1:0"]);
        args.extend(extra);
        Server::start(self.command(&args))
    }
}

/// An HTTP client that follows no redirects and treats every status as an answer.
pub fn client() -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .max_redirects(0)
        .max_redirects_will_error(false)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build();
    ureq::Agent::new_with_config(config)
}

/// An answer: status, headers (lower-case names) and body.
pub struct Answer {
    pub status: u16,
    pub headers: ureq::http::HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// GET `url` with `headers`.
/// GETs `url` with `headers`, following no redirect but one: an item's page is
/// its folder (`/NAME/`, issue 59), and `/NAME` answers 301 there, which this
/// follows so that tests of the page read the page
/// (`regress_mirror_of_the_resolver_loses_every_payload_file` holds the 301).
pub fn get(url: &str, headers: &[(&str, &str)]) -> Answer {
    let answer = get_once(url, headers);
    let folder =
        format!("{}/", url.split_once("://").and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..])).unwrap_or(""));
    let to_folder = answer.status == 301 && !url.contains('?') && answer.header("location") == folder;
    match to_folder {
        true => get_once(&format!("{url}/"), headers),
        false => answer,
    }
}

fn get_once(url: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = client().get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut response = request.call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let body = response.body_mut().with_config().limit(u64::MAX).read_to_vec().unwrap_or_default();
    Answer { status: response.status().as_u16(), headers: response.headers().clone(), body }
}

/// Sends `request` as raw bytes and returns the status and the whole answer as text.
pub fn raw(port: u16, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

fn raw_get(port: u16, path: &str) -> (u16, String) {
    raw(port, format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
}

fn sha256_hex(bytes: &[u8]) -> String {
    ibi::digest::of_bytes(bytes, &[]).sha256().to_string()
}

/// A collection with three items: `a` (small text, a 1 MiB file and a folder),
/// `b` and `c`, each titled; returns (root, names in deposit order).
fn library(env: &TestEnv) -> (String, Vec<String>) {
    let root = env.collection("lib");
    let big: Vec<u8> = (0..1_048_576u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    env.write("src/a/hello.txt", b"hello, world\n");
    env.write("src/a/big.bin", &big);
    env.write("src/a/sub/note.md", b"# a note\n");
    env.write("src/b/b.txt", b"item b\n");
    env.write("src/c/c.txt", b"item c\n");
    let mut names = Vec::new();
    for (item, title) in [("a", "Rainfall over Cachoeira Paulista"), ("b", "Second item"), ("c", "Third item")] {
        let src = env.path(&format!("src/{item}"));
        let meta = format!("Title={title}");
        let run = env.ok(&["deposit", &root, src.to_str().unwrap(), "--meta", &meta]);
        names.push(run.stdout.split('\t').next().unwrap().trim().to_string());
    }
    (root, names)
}

fn ibip_of(env: &TestEnv, root: &str, name: &str) -> String {
    let shown = env.ok(&["show", "--json", root, name]).stdout;
    let json: serde_json::Value = serde_json::from_str(&shown).unwrap();
    json["ibip"].as_str().expect("an IBIp").to_string()
}

#[test]
fn landing_pages_and_redirects() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let server = env.serve(&[&root], &["--mirror", "https://mirror.example.org/"]);
    let name = &names[0];
    let ibip = ibip_of(&env, &root, name);

    let landing = get(&server.url(&format!("/{name}")), &[]);
    assert_eq!(landing.status, 200);
    assert!(landing.header("content-type").starts_with("text/html"));
    let page = landing.text();
    for expected in [
        name.as_str(),
        ibip.as_str(),
        "Rainfall over Cachoeira Paulista",
        "data/big.bin",
        "https://mirror.example.org/",
    ] {
        assert!(page.contains(expected), "landing page lacks {expected}: {page}");
    }
    let big_digest = sha256_hex(&std::fs::read(env.path("src/a/big.bin")).unwrap());
    assert!(page.contains(&big_digest), "the files table shows each sha256");
    assert!(page.contains("1048576"), "and each size");

    let json = get(&server.url(&format!("/{name}")), &[("Accept", "application/json")]);
    let value: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
    assert_eq!(value["name"], name.as_str());
    assert_eq!(value["ibip"], ibip.as_str());
    assert_eq!(value["versions"][0]["number"], 1);
    assert!(value["files"].as_array().unwrap().iter().any(|f| f["path"] == "data/sub/note.md" && f["size"] == 9));

    // An IBIp in any letter case, a legacy @80 prefix, and another letter case: 301 to the name.
    let mut parts: Vec<String> = name.split('/').map(str::to_string).collect();
    parts[1].push_str("@80");
    for (asked, tail) in [(ibip.to_lowercase(), ""), (parts.join("/"), "??"), (name.to_uppercase(), "/data/hello.txt")]
    {
        let answer = get(&server.url(&format!("/{asked}{tail}")), &[]);
        assert_eq!(answer.status, 301, "{asked}{tail}: {}", answer.text());
        assert_eq!(answer.header("location"), format!("/{name}{tail}"));
    }
}

#[test]
fn metadata_and_the_handle_api() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let server = env.serve(&[&root], &["--mirror", "https://mirror.example.org/"]);
    let name = &names[0];
    let ibip = ibip_of(&env, &root, name);
    let metadata = get(&server.url(&format!("/{name}??")), &[("Accept", "application/json")]);
    let value: serde_json::Value = serde_json::from_slice(&metadata.body).unwrap();
    assert!(value["bag_info"].as_array().unwrap().iter().any(|f| f["label"] == "Title"));
    assert!(value["manifest"].as_array().unwrap().iter().any(|f| f["path"] == "data/hello.txt"));
    assert!(value["tag_files"].as_array().unwrap().iter().any(|f| f["path"] == "bag-info.txt"));
    let metadata_html = get(&server.url(&format!("/{name}??")), &[]).text();
    assert!(metadata_html.contains("Metadata of") && metadata_html.contains("Payload-Oxum"));

    let handle = get(&server.url(&format!("/api/handles/{name}")), &[]);
    let value: serde_json::Value = serde_json::from_slice(&handle.body).unwrap();
    assert_eq!(value["responseCode"], 1);
    assert_eq!(value["handle"], name.as_str());
    let values = value["values"].as_array().unwrap();
    let of_type = |t: &str| values.iter().find(|v| v["type"] == t).unwrap_or_else(|| panic!("no {t} in {values:?}"));
    assert_eq!(of_type("URL")["data"]["value"], server.url(&format!("/{name}")));
    let loc = of_type("10320/loc")["data"]["value"].as_str().unwrap().to_string();
    assert!(loc.contains(&format!("href=\"https://mirror.example.org/{name}\" weight=\"0\"")), "{loc}");
    assert_eq!(of_type("URL")["data"]["format"], "string");
    assert!(of_type("URL")["ttl"].is_number() && of_type("URL")["index"].is_number());
    let identity = env.identities(&root)[name].clone();
    assert_eq!(of_type("IBI_IDENTITY_SHA256")["data"]["value"], identity.as_str());

    let alias = get(&server.url(&format!("/api/handles/{}", ibip.to_lowercase())), &[]);
    let value: serde_json::Value = serde_json::from_slice(&alias.body).unwrap();
    assert_eq!(value["handle"], ibip.to_lowercase(), "echoed as asked, as the Handle proxy does");
    assert_eq!(value["values"][0]["type"], "HS_ALIAS");
    assert_eq!(value["values"][0]["data"]["value"], name.as_str());
    let unknown = get(&server.url("/api/handles/sid.inpe.br/mtc-m18/2009/02.16.17.46"), &[]);
    assert_eq!(unknown.status, 404);
    assert!(unknown.text().contains("\"responseCode\":100"));
}

#[test]
fn files_with_validators_zip_withdrawn_and_unknown() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let server = env.serve(&[&root], &[]);
    let name = &names[0];
    let hello = get(&server.url(&format!("/{name}/data/hello.txt")), &[]);
    assert_eq!((hello.status, hello.text().as_str()), (200, "hello, world\n"));
    let digest = sha256_hex(b"hello, world\n");
    assert_eq!(hello.header("etag"), format!("\"{digest}\""));
    assert_eq!(hello.header("content-type"), "text/plain; charset=utf-8");
    let repr = hello.header("repr-digest").to_string();
    let raw_digest: Vec<u8> = (0..64).step_by(2).map(|i| u8::from_str_radix(&digest[i..i + 2], 16).unwrap()).collect();
    let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, raw_digest);
    assert_eq!(repr, format!("sha-256=:{b64}:"));
    assert!(hello.header("last-modified").ends_with(" GMT"));
    assert_eq!(
        get(&server.url(&format!("/{name}/data/sub/note.md")), &[]).header("content-type"),
        "text/markdown; charset=utf-8"
    );
    let tag = get(&server.url(&format!("/{name}/bag-info.txt")), &[]);
    assert!(tag.status == 200 && tag.text().contains("Title: Rainfall"));
    let big = get(&server.url(&format!("/{name}/data/big.bin")), &[]);
    assert_eq!(big.body, std::fs::read(env.path("src/a/big.bin")).unwrap(), "a streamed file arrives whole");

    // The whole item as a zip: unpacked, it is a valid bag holding the same payload.
    let zip = get(&server.url(&format!("/{name}.zip")), &[]);
    assert_eq!((zip.status, zip.header("content-type")), (200, "application/zip"));
    std::fs::write(env.path("item.zip"), &zip.body).unwrap();
    let out = env.path("unzipped");
    sh(&format!("python3 -m zipfile -e '{}' '{}'", env.path("item.zip").display(), out.display()));
    let bag = out.join(name.replace('/', "-"));
    let validated = Command::new(bagit_py()).arg("--validate").arg(&bag).output().unwrap();
    assert!(validated.status.success(), "bagit.py: {}", String::from_utf8_lossy(&validated.stderr));
    assert_eq!(std::fs::read(bag.join("data/big.bin")).unwrap(), big.body);

    env.ok(&["withdraw", &root, &names[1], "--reason", "deposited twice by mistake"]);
    let gone = get(&server.url(&format!("/{}", names[1])), &[]);
    assert_eq!(gone.status, 410);
    assert!(gone.text().contains("deposited twice by mistake"), "{}", gone.text());
    let gone_file = get(&server.url(&format!("/{}/data/b.txt", names[1])), &[]);
    assert_eq!(gone_file.status, 410, "a withdrawn item's files are gone too");

    let unknown = get(&server.url("/sid.inpe.br/mtc-m18/2009/02.16.17.46"), &[]);
    assert_eq!(unknown.status, 404);
    assert!(unknown.text().contains("no collection served here holds or held it"), "{}", unknown.text());
    let nonsense = get(&server.url("/not-an-identifier"), &[]);
    assert!(nonsense.status == 404 && nonsense.text().contains("repository name"), "{}", nonsense.text());
    let unlisted = get(&server.url(&format!("/{name}/data/nothere.txt")), &[]);
    assert_eq!(unlisted.status, 404);
}

#[test]
fn ranges_and_conditional_requests() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let server = env.serve(&[&root], &[]);
    let url = server.url(&format!("/{}/data/big.bin", names[0]));
    let big = std::fs::read(env.path("src/a/big.bin")).unwrap();
    let size = big.len();
    let etag = format!("\"{}\"", sha256_hex(&big));
    type Case<'a> = (&'a str, u16, Option<(usize, usize)>);
    let cases: [Case; 9] = [
        ("bytes=0-0", 206, Some((0, 0))),
        ("bytes=-1", 206, Some((size - 1, size - 1))),
        ("bytes=1048000-", 206, Some((1_048_000, size - 1))),
        ("bytes=131000-400000", 206, Some((131_000, 400_000))),
        ("bytes=5-99999999", 206, Some((5, size - 1))),
        ("bytes=-99999999", 206, Some((0, size - 1))),
        ("bytes=abc", 200, None),
        ("bytes=0-1,10-11", 200, None),
        ("items=0-1", 200, None),
    ];
    for (range, status, span) in cases {
        let answer = get(&url, &[("Range", range)]);
        assert_eq!(answer.status, status, "{range}");
        match span {
            Some((start, end)) => {
                assert_eq!(answer.header("content-range"), format!("bytes {start}-{end}/{size}"), "{range}");
                assert_eq!(answer.body, big[start..=end], "{range}");
            }
            None => assert_eq!(answer.body.len(), size, "{range}"),
        }
        assert_eq!(answer.header("etag"), etag);
    }
    for unsatisfiable in [format!("bytes={size}-"), "bytes=-0".to_string()] {
        let answer = get(&url, &[("Range", &unsatisfiable)]);
        assert_eq!(answer.status, 416, "{unsatisfiable}");
        assert_eq!(answer.header("content-range"), format!("bytes */{size}"));
    }
    let last_modified = get(&url, &[]).header("last-modified").to_string();
    assert_eq!(get(&url, &[("If-None-Match", &etag)]).status, 304);
    assert_eq!(get(&url, &[("If-None-Match", &format!("\"x\", W/{etag}"))]).status, 304);
    assert_eq!(get(&url, &[("If-None-Match", "*")]).status, 304);
    let changed = get(&url, &[("If-None-Match", "\"other\"")]);
    assert_eq!((changed.status, changed.body.len()), (200, size));
    assert_eq!(get(&url, &[("If-Modified-Since", &last_modified)]).status, 304);
    assert_eq!(get(&url, &[("If-Modified-Since", "Mon, 01 Jan 2001 00:00:00 GMT")]).status, 200);
    assert_eq!(get(&url, &[("Range", "bytes=0-9"), ("If-Range", &etag)]).status, 206);
    assert_eq!(get(&url, &[("Range", "bytes=0-9"), ("If-Range", &last_modified)]).status, 206);
    assert_eq!(get(&url, &[("Range", "bytes=0-9"), ("If-Range", "\"stale\"")]).status, 200);
    let head = client().head(&url).call().unwrap();
    assert_eq!(head.headers()["content-length"], size.to_string().as_str());
}

#[test]
fn hostile_paths_never_leave_the_collection() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let name = &names[0];
    let ibip = ibip_of(&env, &root, name);
    env.write(&format!("lib/{name}/data/unlisted.txt"), b"not in the manifest");
    let server = env.serve(&[&root], &[]);
    let p = server.port;
    let attempts = [
        "/%2e%2e/%2e%2e/%2e%2e/etc/passwd".to_string(),
        "/../../../../etc/passwd".to_string(),
        format!("/{name}/..%2f..%2f..%2f..%2f.ibi%2fcollection.toml"),
        format!("/{name}/data/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/.ibi/collection.toml"),
        format!("/{name}/data/hello.txt%00.pdf"),
        format!("/{name}/data%5c..%5c..%5cbagit.txt"),
        format!("/{name}//data/hello.txt"),
        "/.ibi/collection.toml".to_string(),
        "/.ibi/inventory.sqlite".to_string(),
        format!("/.ibip/{ibip}"),
        format!("/{name}/data/unlisted.txt"),
        format!("/{name}/ibi-versions/1/bagit.txt"),
        format!("/{name}/data/%c0%ae%c0%ae/bagit.txt"),
        format!("/{name}/{}", "x".repeat(5000)),
    ];
    for path in &attempts {
        let (status, answer) = raw_get(p, path);
        assert!(matches!(status, 400 | 404 | 414 | 431), "{path}: {status}\n{answer}");
        for secret in ["root:", "not in the manifest", "subsystem", "SQLite"] {
            assert!(!answer.contains(secret), "{path} leaked {secret:?}: {answer}");
        }
    }
    let long_header =
        format!("GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\nConnection: close\r\n\r\n", "y".repeat(40_000));
    let (status, _) = raw(p, long_header.as_bytes());
    assert_eq!(status, 431, "a header block past the bound is refused");
    let (status, _) = raw(p, b"DELETE / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!(status, 405);
    let (status, _) = raw_get(p, &format!("/{name}/data/hello.txt"));
    assert_eq!(status, 200, "and the server still serves");
}

#[test]
fn planted_symlinks_and_fifos_are_never_served() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let name = &names[0];
    let item = env.path(&format!("lib/{name}"));
    env.write("outside/note.md", b"outside the collection");
    std::fs::remove_file(item.join("data/hello.txt")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", item.join("data/hello.txt")).unwrap();
    std::fs::remove_dir_all(item.join("data/sub")).unwrap();
    std::os::unix::fs::symlink(env.path("outside"), item.join("data/sub")).unwrap();
    sh(&format!("rm '{0}' && mkfifo '{0}'", item.join("bagit.txt").display()));
    let server = env.serve(&[&root], &[]);
    for (file, secret) in
        [("data/hello.txt", "root:"), ("data/sub/note.md", "outside the collection"), ("bagit.txt", "")]
    {
        let answer = get(&server.url(&format!("/{name}/{file}")), &[]);
        assert_eq!(answer.status, 500, "{file}: {}", answer.text());
        assert!(answer.text().contains("cannot be read"), "{file}: {}", answer.text());
        assert!(secret.is_empty() || !answer.text().contains(secret), "{file} leaked");
    }
    let zip = client().get(&server.url(&format!("/{name}.zip"))).call();
    let leaked = zip.ok().and_then(|mut r| r.body_mut().read_to_vec().ok()).unwrap_or_default();
    assert!(!String::from_utf8_lossy(&leaked).contains("root:"), "the zip stops at the symlink");
}

#[test]
fn damaged_bytes_are_refused_or_detectable() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let name = &names[0];
    let server = env.serve(&[&root], &[]);
    let verifying = env.serve(&[&root], &["--verify-streams"]);
    assert_eq!(get(&server.url(&format!("/{name}/data/sub/note.md")), &[]).status, 200);
    // Damaged in place, same size: the small file is refused, the large one cut short.
    env.write(&format!("lib/{name}/data/hello.txt"), b"HELLO, WORLD\n");
    let mut big = std::fs::read(env.path(&format!("lib/{name}/data/big.bin"))).unwrap();
    big[700_000] ^= 1;
    std::fs::write(env.path(&format!("lib/{name}/data/big.bin")), &big).unwrap();
    let small = get(&server.url(&format!("/{name}/data/hello.txt")), &[]);
    assert_eq!(small.status, 500);
    assert!(small.text().contains("ibi verify"), "{}", small.text());
    // Streamed as it is, a damaged large file does not match its Repr-Digest, so a client can tell.
    let plain = get(&server.url(&format!("/{name}/data/big.bin")), &[]);
    let claimed = plain.header("etag").trim_matches('"').to_string();
    assert_ne!(sha256_hex(&plain.body), claimed, "the digest headers say what the bytes should be");
    let response = client().get(&verifying.url(&format!("/{name}/data/big.bin"))).call().unwrap();
    assert_eq!(response.status(), 200);
    let read = response.into_body().with_config().limit(u64::MAX).read_to_vec();
    assert!(read.is_err(), "with --verify-streams the stream of a damaged large file fails before its end");
}

/// The zip of an item whose bytes were damaged in place was served whole with 200
/// (the file route answers 500): a zip meeting a file that does not match its
/// manifest now fails before its end, so no client holds a complete zip of
/// damaged bytes; an undamaged item's zip still reads back whole.
#[test]
fn regress_zip_serves_damaged_bytes_with_200() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let server = env.serve(&[&root], &[]);
    let whole = client().get(&server.url(&format!("/{}.zip", names[1]))).call().unwrap();
    assert!(whole.into_body().with_config().limit(u64::MAX).read_to_vec().is_ok(), "an intact zip reads whole");
    let name = &names[0];
    env.write(&format!("lib/{name}/data/hello.txt"), b"HELLO, WORLD\n");
    let response = client().get(&server.url(&format!("/{name}.zip"))).call().unwrap();
    let read = response.into_body().with_config().limit(u64::MAX).read_to_vec();
    let complete = read.as_ref().is_ok_and(|bytes| {
        std::fs::write(env.path("damaged.zip"), bytes).unwrap();
        let test = format!("python3 -m zipfile -t '{}'", env.path("damaged.zip").display());
        std::process::Command::new("sh").args(["-c", &test]).status().unwrap().success()
    });
    assert!(!complete, "the zip of a damaged item must not arrive complete");
}

/// A file with a newline in its name got a landing-page link that always answered
/// 400: it is now shown without a link (the zip holds it), and every link on the
/// page answers 200.
#[test]
fn regress_newline_file_names_get_links_that_answer_400() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    env.write("src/new\nline.txt", b"two lines\n");
    env.write("src/plain.txt", b"plain\n");
    let name = env.ok(&["deposit", &root, "src"]).pairs()[0].0.clone();
    let server = env.serve(&[&root], &[]);
    let page = get(&server.url(&format!("/{name}")), &[("Accept", "text/html")]).text();
    assert!(page.contains("new\\nline.txt"), "the file is shown: {page}");
    let links: Vec<&str> = page.split("href=\"").skip(1).filter_map(|rest| rest.split('"').next()).collect();
    let files: Vec<&&str> = links.iter().filter(|l| l.contains("/data/")).collect();
    assert_eq!(files.len(), 1, "{links:?}");
    for link in files {
        assert_eq!(get(&server.url(&link.replace("&amp;", "&")), &[]).status, 200, "{link}");
    }
}

/// An inventory that said "removed" of an item still at its place made the HTTP
/// resolver answer 404 and verify say nothing: verify now reports the
/// disagreement and the resolver serves the item at its place.
#[test]
fn regress_removed_in_the_inventory_while_on_disk() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let name = &names[1];
    let (prefix, suffix) = name.rsplit_once('/').map(|(p, s)| (p.rsplit_once('/').unwrap().0, s)).unwrap();
    let inventory = std::path::Path::new(&root).join(".ibi/inventory.sqlite");
    let mark_removed = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
        n = c.execute(\"UPDATE items SET status = 'removed' WHERE suffix LIKE ?\", ('%' + sys.argv[2],)).rowcount; \
        c.commit(); sys.exit(0 if n == 1 else 1)";
    let out = std::process::Command::new("python3").args(["-c", mark_removed]).arg(&inventory).arg(suffix).output();
    assert!(out.unwrap().status.success(), "marked removed ({prefix})");
    let verified = env.fails(&["verify", &root], 1);
    assert!(verified.stdout.contains(name.as_str()) && verified.stdout.contains("removed"), "{}", verified.stdout);
    let server = env.serve(&[&root], &[]);
    assert_eq!(get(&server.url(&format!("/{name}/data/b.txt")), &[]).text(), "item b\n");
    assert_eq!(get(&server.url(&format!("/{name}")), &[]).status, 200);
}

/// The handle API ignored `?index=` and `?type=`, answered an IBIp or a name in
/// other letters with the canonical handle (pyhandle's RESTHandleClient refuses a
/// record for another handle than it asked for), sent no CORS header, and gave
/// an object for `values` on errors. pyhandle now reads every spelling, and the
/// filters and codes are the HANDLE.NET proxy's.
#[test]
fn regress_handle_api_is_not_the_proxys() {
    let env = TestEnv::new();
    // pyhandle strips handles with str.lstrip('hdl:').lstrip('doi:'), which eats any
    // leading d, o, i, h or l: the names start with "sid." and the IBIps with "8"
    // (INPE's address), as INPE's do.
    let root = env.path("sid").to_string_lossy().into_owned();
    env.ok(&[
        "-q",
        "init",
        &root,
        "--host",
        "test.sid.example.org",
        "--ip",
        "150.163.34.245",
        "--granularity",
        "0.001",
    ]);
    env.write("src/a.txt", b"a\n");
    let name = &env.ok(&["deposit", &root, "src"]).pairs()[0].0;
    let ibip = ibip_of(&env, &root, name);
    let server = env.serve(&[&root], &[]);
    let (first, rest) = name.split_once('/').unwrap();
    let (second, tail) = rest.split_once('/').unwrap();
    let legacy = format!("{first}/{second}@80/{tail}");
    let script = r#"
import json, sys
from pyhandle.client.resthandleclient import RESTHandleClient
client = RESTHandleClient(handle_server_url=sys.argv[1])
out = {}
for handle in sys.argv[2:]:
    record = client.retrieve_handle_record_json(handle)
    out[handle] = {"record": record, "url": client.get_value_from_handle(handle, "URL", handlerecord_json=record)}
out["indexed"] = client.retrieve_handle_record_json(sys.argv[2], indices=[4])
out["typed"] = client.retrieve_handle_record_json(sys.argv[2], type=["URL"])
out["unknown"] = client.retrieve_handle_record_json("sid.inpe.br/mtc-m18/2009/02.16.17.46")
print(json.dumps(out))
"#;
    let upper = name.to_uppercase();
    let lower_ibip = ibip.to_lowercase();
    let handles = [name.as_str(), upper.as_str(), lower_ibip.as_str(), legacy.as_str()];
    let out = std::process::Command::new(crate::env::repo().join("target/bagit-venv/bin/python"))
        .args(["-c", script, &server.url("")])
        .args(handles)
        .output()
        .unwrap();
    assert!(out.status.success(), "pyhandle: {}", String::from_utf8_lossy(&out.stderr));
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for handle in handles {
        assert_eq!(read[handle]["record"]["handle"], handle, "{read}");
    }
    assert_eq!(read[name.as_str()]["url"], server.url(&format!("/{name}")), "{read}");
    assert_eq!(read[lower_ibip.as_str()]["record"]["values"][0]["type"], "HS_ALIAS");
    let indexed = read["indexed"]["values"].as_array().unwrap();
    assert!(indexed.len() == 1 && indexed[0]["index"] == 4, "{read}");
    let typed = read["typed"]["values"].as_array().unwrap();
    assert!(typed.len() == 1 && typed[0]["type"] == "URL", "{read}");
    assert!(read["unknown"].is_null(), "an unknown handle is pyhandle's None (404, code 100): {read}");
    let none = get(&server.url(&format!("/api/handles/{name}?type=NOTHERE")), &[]);
    let value: serde_json::Value = serde_json::from_slice(&none.body).unwrap();
    assert_eq!((none.status, value["responseCode"].as_u64()), (200, Some(200)), "{value}");
    assert!(value["values"].as_array().is_some_and(Vec::is_empty), "{value}");
    assert_eq!(none.header("access-control-allow-origin"), "*");
    let invalid = get(&server.url("/api/handles/not-a-handle"), &[]);
    let value: serde_json::Value = serde_json::from_slice(&invalid.body).unwrap();
    assert_eq!((invalid.status, value["responseCode"].as_u64()), (400, Some(102)), "{value}");
}

/// The item zip had no Content-Length, ETag or ranges, so a broken download could
/// not resume, and its entries were dated 1980. Now: a length known before the
/// first byte, an ETag, 206 answers to ranges (with If-Range) whose bytes are the
/// same as the whole zip's, and each entry dated as its file.
#[test]
fn regress_zip_cannot_resume() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let name = &names[0];
    let server = env.serve(&[&root], &[]);
    let url = server.url(&format!("/{name}.zip"));
    let whole = get(&url, &[]);
    assert_eq!(whole.status, 200);
    assert_eq!(whole.header("content-length"), whole.body.len().to_string(), "the length is announced");
    assert_eq!(whole.header("accept-ranges"), "bytes");
    let etag = whole.header("etag").to_string();
    assert!(etag.starts_with("\"zip-"), "{etag}");
    std::fs::write(env.path("item.zip"), &whole.body).unwrap();
    let dates = "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.testzip(); \
        print([i.date_time[0] for i in z.infolist() if i.filename.endswith('data/hello.txt')][0])";
    let out = std::process::Command::new("python3").args(["-c", dates]).arg(env.path("item.zip")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let year: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(year >= 2024, "entries carry the files' dates, not 1980: {year}");
    let total = whole.body.len();
    for (range, from, to) in [("bytes=1000-", 1000, total - 1), ("bytes=500-1499", 500, 1499)] {
        let part = get(&url, &[("Range", range), ("If-Range", &etag)]);
        assert_eq!(part.status, 206, "{range}");
        assert_eq!(part.header("content-range"), format!("bytes {from}-{to}/{total}"));
        assert!(part.body == whole.body[from..=to], "{range}: the bytes of the whole zip");
    }
    let changed = get(&url, &[("Range", "bytes=1000-"), ("If-Range", "\"zip-another\"")]);
    assert_eq!((changed.status, changed.body.len()), (200, total), "another version: the whole zip");
    assert_eq!(get(&url, &[("If-None-Match", &etag)]).status, 304);
}

#[test]
fn an_updated_item_is_served_fresh_and_browse_finds_items() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let server = env.serve(&[&root], &[]);
    let name = &names[2];
    assert_eq!(get(&server.url(&format!("/{name}/data/c.txt")), &[]).text(), "item c\n");
    let new = env.write("c2.txt", b"item c, corrected\n");
    env.ok(&["update", &root, name, "--add", &format!("{}=c.txt", new.display())]);
    assert_eq!(get(&server.url(&format!("/{name}/data/c.txt")), &[]).text(), "item c, corrected\n");
    let landing = get(&server.url(&format!("/{name}")), &[("Accept", "application/json")]);
    let value: serde_json::Value = serde_json::from_slice(&landing.body).unwrap();
    assert_eq!(value["versions"].as_array().unwrap().len(), 2, "the history shows both versions");

    let all = get(&server.url("/"), &[("Accept", "application/json")]);
    let value: serde_json::Value = serde_json::from_slice(&all.body).unwrap();
    let listed: Vec<&str> = value["items"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    let newest_first: Vec<&str> = names.iter().rev().map(String::as_str).collect();
    assert_eq!(listed, newest_first);
    let search = |query: &str| -> Vec<String> {
        let answer = get(&server.url(&format!("/?{query}")), &[("Accept", "application/json")]);
        let value: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        value["items"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(search("q=cachoeira+rainfall"), vec![names[0].clone()]);
    let common = &names[0][..names[0].rfind('/').unwrap()];
    assert_eq!(search(&format!("prefix={}", common.to_uppercase())).len(), 3, "a prefix in any letter case");
    let by_name = search(&format!("prefix={}", names[1]));
    assert!(by_name.contains(&names[1]) && by_name.iter().all(|n| n.starts_with(&names[1])), "{by_name:?}");
    assert_eq!(search("date=1999").len(), 0);
    assert_eq!(search(&format!("date={}", &value["items"][0]["date"].as_str().unwrap()[..4])).len(), 3);
    let html = get(&server.url("/?q=third"), &[]).text();
    // Links, not bare names: one name can be the start of another (…20 and …20.06).
    let link = |name: &str| format!("href=\"/{name}/\"");
    assert!(html.contains(&link(&names[2])) && !html.contains(&link(&names[0])), "{html}");
}

#[test]
fn browse_pages_through_many_items() {
    let env = TestEnv::new();
    let root = env.filled("many", 60, 1);
    let server = env.serve(&[&root], &[]);
    let page = |n: usize| -> serde_json::Value {
        let answer = get(&server.url(&format!("/?page={n}")), &[("Accept", "application/json")]);
        serde_json::from_slice(&answer.body).unwrap()
    };
    let (first, second) = (page(1), page(2));
    assert_eq!(first["total"], 60);
    assert_eq!(first["items"].as_array().unwrap().len(), 50);
    assert_eq!(second["items"].as_array().unwrap().len(), 10);
    let html = get(&server.url("/"), &[]).text();
    assert!(html.contains("page=2") && html.contains("Older"), "a link to the next page");
    assert_eq!(get(&server.url("/?page=x"), &[]).status, 400);
}

#[test]
fn a_thousand_connections_held_open() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let server = env.serve(&[&root], &[]);
    raise_open_file_limit();
    let request = format!("GET /{}/data/hello.txt HTTP/1.1\r\nHost: t\r\n\r\n", names[0]);
    let mut streams: Vec<TcpStream> = (0..1000)
        .map(|i| TcpStream::connect(("127.0.0.1", server.port)).unwrap_or_else(|e| panic!("connection {i}: {e}")))
        .collect();
    for round in 0..2 {
        for stream in &mut streams {
            stream.write_all(request.as_bytes()).unwrap();
        }
        for (i, stream) in streams.iter_mut().enumerate() {
            stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let answer = read_one_response(stream);
            assert!(
                answer.starts_with("HTTP/1.1 200") && answer.ends_with("hello, world\n"),
                "round {round}, connection {i}: {answer}"
            );
        }
    }
    assert_eq!(raw_get(server.port, "/").0, 200, "a new connection is still served");
}

fn raise_open_file_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max.min(65_536).max(limit.rlim_cur);
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
}

/// Reads one response with a Content-Length from a kept-alive connection.
fn read_one_response(stream: &mut TcpStream) -> String {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).expect("a response head");
        bytes.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&bytes).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("a content-length");
    let mut body = vec![0; length];
    stream.read_exact(&mut body).unwrap();
    bytes.extend(body);
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn sigterm_lets_a_download_under_way_finish() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    let payload: Vec<u8> = (0..64u32 * 1024 * 1024).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    let src = env.write("src/large/large.bin", &payload);
    let run = env.ok(&["deposit", &root, src.parent().unwrap().to_str().unwrap()]);
    let name = run.stdout.split('\t').next().unwrap().trim().to_string();
    let mut server = env.serve(&[&root], &[]);
    let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let request = format!("GET /{name}/data/large.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut first = vec![0; 64 * 1024];
    stream.read_exact(&mut first).unwrap();
    // SAFETY: kill only sends a signal to the server this test started.
    assert_eq!(unsafe { libc::kill(server.pid(), libc::SIGTERM) }, 0);
    let refused = crate::env::wait_until(10, || TcpStream::connect(("127.0.0.1", server.port)).is_err());
    assert!(refused, "after SIGTERM no new connection is taken");
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    first.extend(rest);
    let split = first.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(first.len() - split, payload.len(), "the download under way finished");
    assert!(first[split..] == payload[..], "with the right bytes");
    let child = server.reaper.0.as_mut().unwrap();
    let exited = crate::env::wait_until(10, || child.try_wait().unwrap().is_some());
    assert!(exited, "the server ends once the download is done");
    assert_eq!(child.try_wait().unwrap().unwrap().code(), Some(0));
    assert!(server.stderr.lock().unwrap().contains("stopping"));
}

/// Debian's chromium, installed by `scripts/setup`.
fn chromium() -> String {
    let found = ["chromium", "chromium-browser", "google-chrome"].into_iter().find(|c| {
        Command::new("sh").arg("-c").arg(format!("command -v {c}")).output().is_ok_and(|o| o.status.success())
    });
    found.expect("chromium is missing: run scripts/setup (scripts/test does)").to_string()
}

#[test]
fn pages_render_in_headless_chromium() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let name = &names[0];
    let ibip = ibip_of(&env, &root, name);
    let server = env.serve(&[&root], &[]);
    let output = repo().join("target/test-output");
    std::fs::create_dir_all(&output).unwrap();
    let browser = chromium();
    for (page, url) in [("landing", server.url(&format!("/{name}"))), ("browse", server.url("/"))] {
        let shot = output.join(format!("serve-{page}.png"));
        let _ = std::fs::remove_file(&shot);
        let profile = env.path(&format!("chromium-{page}"));
        let headless = |extra: &[String]| {
            let mut command = Command::new(&browser);
            command.args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]);
            command.arg(format!("--user-data-dir={}", profile.display())).args(extra).arg(&url);
            command.stderr(Stdio::null()).output().expect("run chromium")
        };
        headless(&[format!("--screenshot={}", shot.display()), "--window-size=1280,1024".to_string()]);
        let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot of the {page} page: {e}"));
        assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "{page}: a real screenshot");
        let dom = String::from_utf8_lossy(&headless(&["--dump-dom".to_string()]).stdout).into_owned();
        assert!(dom.contains(name.as_str()) && dom.contains(ibip.as_str()), "{page}: the identifiers show: {dom}");
    }
}

/// Pages that switch between HTML and JSON on `Accept` sent no `Vary: Accept`, so
/// a shared cache could hand JSON to a browser or HTML to a script.
#[test]
fn regress_negotiated_pages_without_vary_accept() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let server = env.serve(&[&root], &[]);
    for path in [format!("/{}", names[0]), format!("/{}??", names[0]), "/".to_string()] {
        for accept in ["text/html", "application/json"] {
            let answer = get(&server.url(&path), &[("Accept", accept)]);
            assert_eq!(answer.status, 200, "{path} {accept}");
            let vary = answer.header("vary").to_ascii_lowercase();
            assert!(vary.contains("accept"), "{path} as {accept}: Vary is {vary:?}");
            assert!(vary.split(',').any(|v| v.trim() == "accept"), "{path} as {accept}: Vary is {vary:?}");
        }
    }
}

/// Landing and browse pages read badly for a librarian: identifiers broke
/// mid-token (`word-break: break-all`), an item without a Title was titled by its
/// name, the Files table came last, sizes were raw byte counts, dates carried
/// nanoseconds, and search missed `relatório` when asked for `relatorio`.
#[test]
fn regress_pages_read_badly_to_a_librarian() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    env.write("untitled/mapa da bacia.tif", &vec![7u8; 3 * 1024 * 1024]);
    let untitled = env.ok(&["deposit", &root, "untitled"]).pairs()[0].0.clone();
    env.write("titled/r.txt", b"report\n");
    let args = ["deposit", &root, "titled", "--meta", "Title=Relatório anual de 2009"];
    let titled = env.ok(&args).pairs()[0].0.clone();
    let server = env.serve(&[&root], &[]);
    let page = get(&server.url(&format!("/{untitled}")), &[("Accept", "text/html")]).text();
    assert!(page.contains("<title>mapa da bacia.tif</title>"), "the first file names an untitled item: {page}");
    assert!(!page.contains("break-all"), "identifiers may break mid-token: {page}");
    let (files, info) = (page.find("<h2>Files</h2>").unwrap(), page.find("<h2>bag-info</h2>").unwrap());
    assert!(files < info, "the Files table comes first");
    assert!(page.contains(">3.00 MiB<"), "sizes are for people: {page}");
    assert!(!shows_fractions_of_seconds(&page), "a date shows fractions of a second: {page}");
    let found = get(&server.url("/?q=relatorio"), &[("Accept", "application/json")]);
    let value: serde_json::Value = serde_json::from_slice(&found.body).unwrap();
    let names: Vec<&str> = value["items"].as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec![titled.as_str()], "search ignores accents");
    let browse = get(&server.url("/"), &[("Accept", "text/html")]).text();
    assert!(!shows_fractions_of_seconds(&browse), "{browse}");
}

/// Whether the text of `html` (tooltips aside, which may hold the exact date)
/// shows a time with a fraction of a second (`07:18:03.123`).
fn shows_fractions_of_seconds(html: &str) -> bool {
    let shown: String = html
        .split(" title=\"")
        .enumerate()
        .map(|(i, part)| if i == 0 { part } else { part.split_once('"').map_or("", |(_, rest)| rest) })
        .collect();
    let bytes = shown.as_bytes();
    bytes.windows(10).any(|w| {
        let digits = |range: std::ops::Range<usize>| w[range].iter().all(u8::is_ascii_digit);
        digits(0..2)
            && w[2] == b':'
            && digits(3..5)
            && w[5] == b':'
            && digits(6..8)
            && w[8] == b'.'
            && w[9].is_ascii_digit()
    })
}

/// The server's resident memory, in MiB.
fn rss_mib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    kib / 1024
}

/// 600 clients that asked for a large file and never read pinned every thread of
/// the blocking pool: a later download hung, and memory grew by megabytes per
/// client. Each download now streams from a thread of its own with two small
/// chunks in flight, and a client that stops reading is cut off after a minute.
#[test]
fn regress_slow_clients_pin_the_server() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    let payload: Vec<u8> = (0..16u32 * 1024 * 1024).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    let src = env.write("src/large/large.bin", &payload);
    let name = env.ok(&["deposit", &root, src.parent().unwrap().to_str().unwrap()]).pairs()[0].0.clone();
    raise_open_file_limit();
    let server = env.serve(&[&root], &[]);
    let before = rss_mib(server.pid());
    let request = format!("GET /{name}/data/large.bin HTTP/1.1\r\nHost: t\r\n\r\n");
    let stalled: Vec<TcpStream> = (0..600)
        .map(|i| {
            let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap_or_else(|e| panic!("{i}: {e}"));
            let size: libc::c_int = 4096;
            // SAFETY: sets one option of a socket this test owns, from a valid int.
            unsafe {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
                let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
                libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, (&size as *const libc::c_int).cast(), len);
            }
            stream.write_all(request.as_bytes()).unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let during = rss_mib(server.pid());
    let started = std::time::Instant::now();
    let mut answer = client().get(&server.url(&format!("/{name}/data/large.bin"))).call().expect("an answer");
    let body = answer.body_mut().with_config().limit(u64::MAX).read_to_vec();
    let body = body.unwrap_or_else(|e| panic!("a download beside 600 stalled clients: {e}"));
    assert!(body == payload, "the download is the file ({} bytes of {})", body.len(), payload.len());
    assert!(started.elapsed() < Duration::from_secs(30), "it took {:?}", started.elapsed());
    assert_eq!(get(&server.url("/"), &[]).status, 200, "browse answers");
    eprintln!("server RSS: {before} MiB idle, {during} MiB with 600 stalled clients");
    assert!(during < before + 300, "memory grew from {before} to {during} MiB");
    drop(stalled);
}

/// The landing page of an item with 200,000 files was one 39 MB page (and its
/// JSON as large), built whole for every request. Files now come a page of 1,000
/// at a time (`?files=N`, `??files=N` for the metadata), with links between pages.
#[test]
fn regress_long_file_lists_make_huge_pages() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    for i in 0..2500 {
        env.write(&format!("many/f{i:05}.txt"), b"x");
    }
    let name = env.ok(&["deposit", &root, "many", "--meta", "Title=Many files"]).pairs()[0].0.clone();
    let server = env.serve(&[&root], &[]);
    let rows = |html: &str| html.matches("<tr><td><a href=").count();
    let first = get(&server.url(&format!("/{name}")), &[("Accept", "text/html")]).text();
    assert_eq!(rows(&first), 1000, "one page of files");
    assert!(first.contains("files=2\">Next"), "a link to the next page");
    let last = get(&server.url(&format!("/{name}?files=3")), &[("Accept", "text/html")]).text();
    assert_eq!(rows(&last), 500 + 4, "the last payload files and the tag files");
    assert!(last.contains("f02499.txt") && !last.contains("f00000.txt"));
    let metadata = get(&server.url(&format!("/{name}??files=2")), &[("Accept", "text/html")]).text();
    assert!(metadata.contains("f01000.txt") && !metadata.contains("f00999.txt"), "the metadata pages too");
    let json = get(&server.url(&format!("/{name}")), &[("Accept", "application/json")]);
    let value: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
    assert_eq!(value["files"].as_array().unwrap().len(), 1000);
    assert_eq!(value["file_count"], 2504);
    assert_eq!(value["files_pages"], 3);
}

/// A small listed file grown to a large one behind the server's back was read
/// whole into memory on every request (1.07 GB RSS per request for 1 GiB). It is
/// now read only to one byte past its listed size, and refused as damaged.
#[test]
fn regress_grown_small_file_is_read_whole() {
    let env = TestEnv::new();
    let root = env.collection("lib");
    env.write("src/small/note.txt", b"a short note\n");
    let name = env.ok(&["deposit", &root, "src/small"]).pairs()[0].0.clone();
    let server = env.serve(&[&root], &[]);
    let url = server.url(&format!("/{name}/data/note.txt"));
    assert_eq!(get(&server.url(&format!("/{name}")), &[]).status, 200, "the item's view is read");
    let before = rss_mib(server.pid());
    let grown = std::path::Path::new(&root).join(&name).join("data/note.txt");
    let file = std::fs::OpenOptions::new().append(true).open(&grown).unwrap();
    file.set_len(300 * 1024 * 1024).unwrap();
    let answer = get(&url, &[]);
    assert_eq!(answer.status, 500, "a grown file does not match its manifest");
    let after = rss_mib(server.pid());
    assert!(after < before + 100, "memory grew from {before} to {after} MiB");
}

/// An item whose folder was removed behind the server's back was still served
/// (its landing page, 200) from the view read before, until the cache's time
/// ran out: a view read with a stamp now has none, so it is read again and
/// the item is not found.
#[test]
fn regress_an_item_gone_from_disk_is_served_from_the_cache() {
    let env = TestEnv::new();
    let (root, names) = library(&env);
    let server = env.serve(&[&root], &[]);
    assert_eq!(get(&server.url(&format!("/{}", names[1])), &[]).status, 200);
    std::fs::remove_dir_all(env.path(&format!("lib/{}", names[1]))).unwrap();
    assert_eq!(get(&server.url(&format!("/{}", names[1])), &[]).status, 404);
}

/// Issue 59: `wget --mirror http://HOST/` saved `/NAME` as a file, so
/// `/NAME/data/` could not be a folder (exit 3) and every payload file was lost;
/// `/NAME/` answered 400. An item's page is now its folder: `/NAME` answers 301
/// to `/NAME/`, every link to an item ends in `/`, and a plain mirror gives, for
/// every item, a folder bagit-python validates.
#[test]
fn regress_mirror_of_the_resolver_loses_every_payload_file() {
    let env = TestEnv::new();
    let root = env.filled("lib", 3, 2);
    let server = env.serve(&[&root], &[]);
    let name = env.identities(&root).into_keys().next().unwrap();
    let bare = get_once(&server.url(&format!("/{name}")), &[]);
    assert_eq!((bare.status, bare.header("location")), (301, format!("/{name}/").as_str()));
    assert_eq!(get_once(&server.url(&format!("/{name}/")), &[]).status, 200);
    let json = get_once(&server.url(&format!("/{name}")), &[("Accept", "application/json")]);
    assert_eq!(json.status, 200, "a program asking for JSON gets it at the name");
    let into = env.path("mirror");
    std::fs::create_dir_all(&into).unwrap();
    let wget = std::process::Command::new("wget")
        .args(["-q", "--mirror", "--no-parent", "--no-host-directories", &server.url("/")])
        .current_dir(&into)
        .output()
        .unwrap();
    assert_eq!(wget.status.code(), Some(0), "wget: {}", String::from_utf8_lossy(&wget.stderr));
    for name in env.identities(&root).into_keys() {
        let bag = into.join(&name);
        let validated =
            std::process::Command::new(crate::env::bagit_py()).arg("--validate").arg(&bag).output().unwrap();
        assert!(validated.status.success(), "{name}: {}", String::from_utf8_lossy(&validated.stderr));
    }
}

/// Issue 59 (smaller traps): the browse page was titled "Items" and never named
/// the collection or its organisation. It names what is served: each
/// collection's organisation and subsystem.
#[test]
fn regress_browse_page_never_names_the_collection() {
    let env = TestEnv::new();
    let root = env.path("lib").to_string_lossy().into_owned();
    env.ok(&["-q", "init", &root, "--host", "lib.ibi.example.org", "--org", "Test <Library>"]);
    let src = env.write("src/a.txt", b"alpha\n");
    env.ok(&["-q", "deposit", &root, src.to_str().unwrap()]);
    let server = env.serve(&[&root], &[]);
    let page = get(&server.url("/"), &[]).text();
    assert!(page.contains("<title>Items of Test &lt;Library&gt; (ibi.example.org/lib)</title>"), "{page}");
    assert!(page.contains("<h1>Items of Test &lt;Library&gt; (ibi.example.org/lib)</h1>"), "{page}");
}
