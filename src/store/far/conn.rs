//! The client's end of a far session: runs the system `ssh` (or the command in
//! `IBI_RSH`, split on spaces as rsync splits `-e`) with `ibi serve --stdio` on
//! the far side, checks the greeting and the protocol version, then carries
//! requests. Many threads may have requests in flight at once (pipelined):
//! a reader thread hands each reply to the request with its id, and staging
//! frames go out without waiting for any reply at all.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::wire::{self, Frame, Greeted, Reply, Request};
use crate::error::{Error, Result};
use crate::store::location::FarAddress;
pub use crate::store::location::{Connect, FAR_TIMEOUT_ENV, REMOTE_IBI_ENV, RSH_ENV};
use crate::sync::lock;

/// A reply and its raw bytes.
pub type Answer = (Reply, Vec<u8>);

struct Waiting {
    to: Sender<Answer>,
    stream: bool,
    /// For a file's bytes: how many replies wait unread (see `Backlog`).
    backlog: Option<Backlog>,
}

/// How many replies of one stream wait unread in its channel. The reader thread
/// stops reading the connection while a file stream holds more than
/// `MAX_BACKLOG` of them, so a slow consumer (an upload to S3) pushes back on the
/// far side through the pipe instead of the whole file piling up in memory. It
/// waits at most `BACKLOG_PATIENCE` without the consumer taking one, so a
/// consumer that waits for another reply first can never deadlock the session.
pub type Backlog = Arc<AtomicU64>;
/// 32 MiB of a file stream's data frames.
const MAX_BACKLOG: u64 = (32 * 1024 * 1024 / super::wire::CHUNK) as u64;
const BACKLOG_PATIENCE: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Routes {
    waiting: HashMap<u64, Waiting>,
    /// Why the session ended, once it has.
    ended: Option<String>,
}

/// One session with a far `ibi serve --stdio`.
pub struct Connection {
    place: String,
    writer: Mutex<Option<BufWriter<Box<dyn Write + Send>>>>,
    routes: Arc<Mutex<Routes>>,
    next_id: AtomicU64,
    /// The ssh process, when the session runs through one.
    child: Mutex<Option<Child>>,
    /// The protocol version agreed on.
    version: u32,
    /// How long to wait for each next reply before the session is given up.
    timeout: Duration,
}

impl Connection {
    /// Starts the far side and agrees on a protocol version.
    pub fn open(address: &FarAddress, connect: &Connect) -> Result<Connection> {
        let place = address.to_string();
        let fail = |problem: String| Error::Connection { place: place.clone(), problem };
        let mut words = connect.rsh.split_whitespace();
        let program = words.next().ok_or_else(|| fail("the ssh command (IBI_RSH or --rsh) is empty".into()))?;
        let mut command = Command::new(program);
        command.args(words);
        if let Some(port) = address.port {
            command.arg("-p").arg(port.to_string());
        }
        command.arg(address.destination()).args([connect.remote_ibi.as_str(), "serve", "--stdio"]);
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|e| fail(format!("cannot run {program}: {e}")))?;
        let stdout = child.stdout.take().expect("piped");
        let stdin = child.stdin.take().expect("piped");
        let said = pass_on_stderr(child.stderr.take().expect("piped"));
        let mut connection = Connection::greeted_within(place.clone(), stdout, stdin, connect);
        if let Err(Error::Connection { problem, .. }) = &connection {
            if problem.starts_with(SILENT) {
                let _ = child.kill();
                let _ = child.wait();
            } else if problem.starts_with(NO_GREETING) {
                let status = wait_briefly(&mut child);
                let last = said.last_line(Duration::from_secs(1));
                connection = Err(fail(match status.and_then(|s| s.code()) {
                    Some(255) => ssh_failed(&last),
                    _ => format!("{problem}{}", exit_note(status)),
                }));
            }
        }
        let connection = connection?;
        *lock(&connection.child) = Some(child);
        Ok(connection)
    }

    /// A session over any pair of streams (a child's pipes, or an in-process server in tests).
    pub fn over(
        place: String,
        input: impl Read + Send + 'static,
        output: impl Write + Send + 'static,
        remote_ibi: &str,
    ) -> Result<Connection> {
        let connect = Connect {
            rsh: String::new(),
            remote_ibi: remote_ibi.into(),
            timeout: Duration::from_secs(crate::store::location::DEFAULT_FAR_TIMEOUT_SECS),
        };
        Connection::greeted_within(place, input, output, &connect)
    }

    /// A session whose far side must greet within `connect.timeout`: the
    /// greeting is read on a thread of its own, since a far command killed for
    /// its silence may have left children that hold the pipe open.
    fn greeted_within(
        place: String,
        input: impl Read + Send + 'static,
        mut output: impl Write + Send + 'static,
        connect: &Connect,
    ) -> Result<Connection> {
        let fail = |problem: String| Error::Connection { place: place.clone(), problem };
        let (to, from) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::with_capacity(1 << 20, input);
            let greeted = wire::read_greeting(&mut reader);
            let _ = to.send(greeted.map(|g| (g, reader)));
        });
        let (greeted, reader) = match from.recv_timeout(connect.timeout) {
            Ok(read) => read.map_err(|e| fail(format!("reading the greeting: {e}")))?,
            Err(_) => {
                let secs = connect.timeout.as_secs();
                return Err(fail(format!("{SILENT} within {secs} s ({FAR_TIMEOUT_ENV} sets the wait): given up")));
            }
        };
        let remote_ibi = connect.remote_ibi.as_str();
        let theirs = match greeted {
            Greeted::Versions(min, max) => (min, max),
            Greeted::Missing(said) => return Err(fail(no_greeting(&said, remote_ibi))),
        };
        let ours = wire::versions();
        let Some(version) = wire::common_version(ours, theirs) else {
            return Err(fail(format!(
                "the far ibi speaks protocol versions {}-{}, this ibi speaks {}-{}: install the same ibi release on \
                 both machines, or name a matching far binary with --remote-ibi or IBI_REMOTE_IBI",
                theirs.0, theirs.1, ours.0, ours.1
            )));
        };
        writeln!(output, "{} {version}", wire::ANSWER).and_then(|_| output.flush()).map_err(|e| fail(e.to_string()))?;
        let routes = Arc::new(Mutex::new(Routes::default()));
        let for_reader = routes.clone();
        std::thread::spawn(move || read_replies(reader, &for_reader));
        let output: Box<dyn Write + Send> = Box::new(output);
        Ok(Connection {
            place,
            writer: Mutex::new(Some(BufWriter::with_capacity(1 << 20, output))),
            routes,
            next_id: AtomicU64::new(1),
            child: Mutex::new(None),
            version,
            timeout: connect.timeout,
        })
    }

    pub fn place(&self) -> &str {
        &self.place
    }

    /// The protocol version agreed on with the far side.
    pub fn version(&self) -> u32 {
        self.version
    }

    fn ended(&self) -> Error {
        let why = lock(&self.routes).ended.clone().unwrap_or_else(|| "the connection ended".into());
        Error::Connection { place: self.place.clone(), problem: why }
    }

    fn write(&self, id: u64, request: &Request, payload: &[u8], flush: bool) -> Result<()> {
        let mut writer = lock(&self.writer);
        let Some(out) = writer.as_mut() else { return Err(self.ended()) };
        let written =
            wire::write_frame(out, id, request, payload).and_then(|_| if flush { out.flush() } else { Ok(()) });
        written.map_err(|_| self.ended())
    }

    /// Sends a frame that gets no reply (staging); a failure shows at the next request.
    pub fn send(&self, request: &Request, payload: &[u8]) -> Result<()> {
        self.write(0, request, payload, false)
    }

    /// Sends a request; its replies arrive on the receiver, with its id.
    pub fn start(&self, request: &Request, stream: bool) -> Result<(u64, Receiver<Answer>)> {
        self.start_with(request, stream, None)
    }

    /// Sends a request for a file's bytes, streamed with a bounded backlog: the
    /// consumer calls `took` for each reply it takes.
    pub fn start_file(&self, request: &Request) -> Result<(Receiver<Answer>, Backlog)> {
        let backlog = Backlog::default();
        let (_, replies) = self.start_with(request, true, Some(backlog.clone()))?;
        Ok((replies, backlog))
    }

    /// Notes that the consumer of a file stream took one reply.
    pub fn took(backlog: &Backlog) {
        let _ = backlog.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n.saturating_sub(1)));
    }

    fn start_with(&self, request: &Request, stream: bool, backlog: Option<Backlog>) -> Result<(u64, Receiver<Answer>)> {
        self.start_carrying(request, &[], stream, backlog)
    }

    /// Sends a request with bytes in its payload and waits for its one reply.
    pub fn call_with(&self, request: &Request, payload: &[u8]) -> Result<Answer> {
        let (_, replies) = self.start_carrying(request, payload, false, None)?;
        self.next(&replies)
    }

    fn start_carrying(
        &self,
        request: &Request,
        payload: &[u8],
        stream: bool,
        backlog: Option<Backlog>,
    ) -> Result<(u64, Receiver<Answer>)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (to, from) = channel();
        {
            let mut routes = lock(&self.routes);
            if routes.ended.is_some() {
                drop(routes);
                return Err(self.ended());
            }
            routes.waiting.insert(id, Waiting { to, stream, backlog });
        }
        self.write(id, request, payload, true)?;
        Ok((id, from))
    }

    /// The next reply on a receiver, with errors made `Error`s.
    /// A far side that sends nothing for the timeout is given up: the session
    /// ends (its process is killed) and every request waiting on it fails.
    pub fn next(&self, replies: &Receiver<Answer>) -> Result<Answer> {
        match replies.recv_timeout(self.timeout) {
            Ok((Reply::Error(e), _)) => Err(e.into_error(&self.place)),
            Ok(answer) => Ok(answer),
            Err(RecvTimeoutError::Timeout) => {
                self.give_up();
                Err(self.ended())
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.ended()),
        }
    }

    /// Ends a session whose far side stopped answering.
    fn give_up(&self) {
        let why =
            format!("it sent no reply within {} s ({FAR_TIMEOUT_ENV} sets the wait): given up", self.timeout.as_secs());
        lock(&self.routes).ended.get_or_insert(why);
        if let Some(child) = lock(&self.child).as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Not waited for: a writer blocked on a far side that reads nothing holds it.
        if let Ok(mut writer) = self.writer.try_lock() {
            writer.take();
        }
    }

    /// Sends a request and waits for its one reply.
    pub fn call(&self, request: &Request) -> Result<Answer> {
        let (_, replies) = self.start(request, false)?;
        self.next(&replies)
    }

    /// A reply the protocol does not allow here.
    pub fn unexpected(&self, reply: &Reply) -> Error {
        Error::Connection { place: self.place.clone(), problem: format!("unexpected reply {reply:?}") }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Closing stdin ends the far session (which releases its lease); give it a moment.
        lock(&self.writer).take();
        if let Some(child) = lock(&self.child).as_mut() {
            if wait_briefly(child).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Waits up to five seconds for the child to end.
fn wait_briefly(child: &mut Child) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

/// What the far command wrote on stderr, passed on to ours line by line as it
/// comes (ssh's prompts and errors, the far ibi's warnings); the last line is
/// kept, to say why a session never started.
struct StderrTail {
    last: Arc<Mutex<(Option<String>, bool)>>,
}

impl StderrTail {
    /// The last line, once the stream ended (or `wait` passed).
    fn last_line(&self, wait: Duration) -> Option<String> {
        let deadline = Instant::now() + wait;
        while !lock(&self.last).1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        lock(&self.last).0.clone()
    }
}

fn pass_on_stderr(stderr: impl Read + Send + 'static) -> StderrTail {
    let last: Arc<Mutex<(Option<String>, bool)>> = Arc::default();
    let keep = last.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in BufReader::new(stderr).lines().map_while(std::result::Result::ok) {
            let _ = writeln!(std::io::stderr(), "{line}");
            if !line.trim().is_empty() {
                lock(&keep).0 = Some(line);
            }
        }
        lock(&keep).1 = true;
    });
    StderrTail { last }
}

/// ssh itself failed (exit 255): what it said first, then where to look.
fn ssh_failed(said: &Option<String>) -> String {
    let said = said.as_deref().map_or(String::new(), |line| format!(": {}", line.trim()));
    format!(
        "ssh could not connect (exit 255){said}. Try `ssh HOST` by hand: a host key that changed or is not yet \
         known (ssh-keyscan, known_hosts), a key the server refuses, or a wrong host or port"
    )
}

/// How a "no greeting" problem starts, so that the exit status can be added.
const NO_GREETING: &str = "the far side never greeted";
const SILENT: &str = "it did not greet";

fn no_greeting(said: &str, remote_ibi: &str) -> String {
    let said = if said.is_empty() { "nothing".to_string() } else { format!("\"{said}\"") };
    format!(
        "{NO_GREETING} as `{remote_ibi} serve --stdio`; it printed {said}. Is ibi installed there? Name the far \
         binary with --remote-ibi or IBI_REMOTE_IBI"
    )
}

fn exit_note(status: Option<std::process::ExitStatus>) -> String {
    match status.and_then(|s| s.code()) {
        Some(code) => format!(" (the far command ended with exit {code})"),
        None => String::new(),
    }
}

/// Waits while a file stream's backlog is full and its consumer keeps taking
/// replies; gives up after `BACKLOG_PATIENCE` without one taken.
fn wait_for_consumer(backlog: &Backlog) {
    let mut seen = backlog.load(Ordering::Acquire);
    let mut since = Instant::now();
    while seen > MAX_BACKLOG && since.elapsed() < BACKLOG_PATIENCE {
        std::thread::sleep(Duration::from_millis(1));
        let now = backlog.load(Ordering::Acquire);
        if now < seen {
            since = Instant::now();
        }
        seen = now;
    }
}

/// Hands each reply to the request with its id, until the session ends.
fn read_replies(mut reader: BufReader<impl Read>, routes: &Mutex<Routes>) {
    let why = loop {
        let frame: Frame = match wire::read_frame(&mut reader) {
            Ok(Some(frame)) => frame,
            Ok(None) => break "the far side closed the connection".to_string(),
            Err(e) => break format!("the connection broke: {e}"),
        };
        let reply: Reply = match wire::decode(&frame) {
            Ok(reply) => reply,
            Err(e) => break format!("the far side sent a malformed reply: {e}"),
        };
        let (to, backlog) = {
            let mut routes = lock(routes);
            let last = match routes.waiting.get(&frame.id) {
                Some(waiting) => !waiting.stream || matches!(reply, Reply::End | Reply::Error(_)),
                None => continue,
            };
            let waiting = match last {
                true => routes.waiting.remove(&frame.id),
                false => routes.waiting.get(&frame.id).map(|w| Waiting {
                    to: w.to.clone(),
                    stream: true,
                    backlog: w.backlog.clone(),
                }),
            };
            let Some(waiting) = waiting else { continue };
            (waiting.to, waiting.backlog)
        };
        if let Some(backlog) = &backlog {
            backlog.fetch_add(1, Ordering::AcqRel);
        }
        let delivered = to.send((reply, frame.payload)).is_ok();
        if let (Some(backlog), true) = (backlog, delivered) {
            wait_for_consumer(&backlog);
        }
    };
    let mut routes = lock(routes);
    routes.ended = Some(why);
    routes.waiting.clear();
}
