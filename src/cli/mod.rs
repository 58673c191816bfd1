//! The binary's dispatcher: parses the command line, runs the command, and
//! maps library errors to the exit codes of docs/reference.md ("Exit codes") (0 success, 1 data
//! problems, 2 invalid input, 3 operational failure, 75 busy, 130 interrupted).

pub mod args;
mod collection;
mod demo;
mod http;
mod ident;
mod printer;
mod sites;
mod transfer;
mod versions;

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use anyhow::{Context, Result};
use clap::Parser;
use ibi::ErrorClass;

use args::{Cli, Command};

/// How a command that ran to its end went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Finished, but found problems in data.
    Problems,
    /// Finished what it could; parts failed, each told already. The exit code is
    /// the gravest class among them: operational (3) over usage (2) over data (1).
    Failed(ErrorClass),
}

impl Outcome {
    /// The graver of two outcomes (`Failed` classes: operational, usage, busy, data).
    pub fn worse(self, other: Outcome) -> Outcome {
        let rank = |o: &Outcome| match o {
            Outcome::Success => (0, 0),
            Outcome::Problems => (1, 0),
            Outcome::Failed(class) => (2, failure_rank(*class)),
        };
        if rank(&other) > rank(&self) {
            other
        } else {
            self
        }
    }
}

fn failure_rank(class: ErrorClass) -> u8 {
    match class {
        ErrorClass::Data => 0,
        ErrorClass::Busy => 1,
        ErrorClass::Input => 2,
        ErrorClass::Operational => 3,
    }
}

fn code_of(class: ErrorClass) -> u8 {
    match class {
        ErrorClass::Input => EXIT_USAGE,
        ErrorClass::Data => EXIT_PROBLEMS,
        ErrorClass::Busy => EXIT_BUSY,
        ErrorClass::Operational => EXIT_OPERATIONAL,
    }
}

pub const EXIT_PROBLEMS: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_OPERATIONAL: u8 = 3;
pub const EXIT_BUSY: u8 = 75;

/// Set once standard output is closed (`ibi list | head`): results are then dropped
/// quietly and the command finishes what it started, then exits 0.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
/// The first failure to write results (disk full, I/O error): the run exits 3.
static STDOUT_FAILED: Mutex<Option<String>> = Mutex::new(None);

/// Writes results to stdout. Never fails and never exits: a closed pipe or a failed
/// write is remembered, so that a command is never cut off mid-commit; `main` turns
/// a failed write into exit 3.
pub fn write_stdout(text: &str) -> Result<()> {
    write_stdout_bytes(text.as_bytes());
    Ok(())
}

/// `write_stdout` for bytes (a buffer's worth of a stream, which may end inside
/// a character).
fn write_stdout_bytes(bytes: &[u8]) {
    if stdout_gone() {
        return;
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|_| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => STDOUT_CLOSED.store(true, Ordering::SeqCst),
        Err(e) => {
            if let Ok(mut failed) = STDOUT_FAILED.lock() {
                failed.get_or_insert(e.to_string());
            }
        }
    }
}

/// Standard output as `write_stdout` treats it, for a library call that writes
/// a stream (wrap it in a `BufWriter`): a write never fails.
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        write_stdout_bytes(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether results can no longer reach stdout (closed, or a write failed).
pub fn stdout_gone() -> bool {
    STDOUT_CLOSED.load(Ordering::SeqCst) || STDOUT_FAILED.lock().map(|f| f.is_some()).unwrap_or(true)
}

/// Why writing results failed, if it did.
pub fn stdout_failure() -> Option<String> {
    STDOUT_FAILED.lock().ok().and_then(|f| f.clone())
}

/// One line on stderr; a stderr that cannot be written is ignored, never a panic.
pub fn stderr_line(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{}", printer::escape_controls(text));
}

fn exit_code_for(error: &anyhow::Error) -> u8 {
    match error.downcast_ref::<ibi::Error>().map(ibi::Error::class) {
        Some(class) => code_of(class),
        None if error.downcast_ref::<ibi::ParseError>().is_some() => EXIT_USAGE,
        None => EXIT_OPERATIONAL,
    }
}

fn dispatch(cli: &Cli) -> Result<Outcome> {
    let g = cli.global;
    match &cli.command {
        Command::Init(args) => collection::init(g, args),
        Command::Deposit(args) => collection::deposit(g, args),
        Command::Verify(args) => collection::verify(g, args),
        Command::List(args) => collection::list(g, args),
        Command::Log(args) => collection::log(g, args),
        Command::Resolve { root, name } => collection::resolve(g, root, name),
        Command::Show { root, name } => versions::show(g, root, name),
        Command::Update(args) => versions::update(g, args),
        Command::Withdraw(args) => versions::withdraw(g, args),
        Command::Export { root, name, dir, ocfl: true, .. } => versions::export_ocfl(g, root, name, dir),
        Command::Export { root, name, dir, version, .. } => versions::export(g, root, name, dir, *version),
        Command::Watch(args) => collection::watch(g, args),
        Command::Copy(args) => transfer::copy(g, args, false),
        Command::Migrate(args) => transfer::copy(g, args, true),
        Command::Mirror(args) => transfer::mirror(g, args),
        Command::Repair(args) => transfer::repair(g, args),
        Command::Retire { root } => collection::retire(g, root),
        Command::Upgrade { root, wait } => collection::upgrade(g, root, *wait),
        Command::Kept { root, remove } => collection::kept(g, root, remove),
        Command::Witness { root, prove, check, key } => match check {
            Some(proof) => collection::check_proof(g, proof, key.as_deref()),
            None => collection::witness(g, root.as_deref(), prove.as_deref()),
        },
        Command::Handover(args) => collection::handover(g, args),
        Command::Site { command } => sites::site(g, command),
        Command::Replicate { root, flags } => sites::replicate(g, root, flags),
        Command::Audit { root, repair, ndsa, placement } => sites::audit(g, root, *repair, *ndsa, *placement),
        Command::Handles(args) => versions::handles(g, args),
        Command::Serve(args) => serve(args),
        Command::Demo { dir } => demo::run(g, dir.as_deref()),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut command, "ibi", &mut script);
            write_stdout(&String::from_utf8_lossy(&script))?;
            Ok(Outcome::Success)
        }
        Command::Man { dir } => man(dir.as_deref()),
        Command::Mint(args) => ident::mint(g, args),
        Command::Parse(args) => ident::parse(g, &args.identifiers),
        Command::Ibip(command) => ident::ibip(g, command),
        Command::Pilin(command) => ident::pilin(g, command),
    }
}

/// Opens a collection: local, far (`--rsh`, `--remote-ibi` or their variables say how) or in S3.
pub fn open(location: &std::path::Path) -> ibi::Result<Box<dyn ibi::store::Store>> {
    ibi::store::open(location, &ibi::store::Connect::from_env())
}

/// `ibi serve`: HTTP with `--listen`; otherwise one far session on stdin and stdout,
/// nothing else printed there.
fn serve(args: &args::ServeArgs) -> Result<Outcome> {
    if let Some(listen) = args.listen {
        if args.roots.is_empty() {
            anyhow::bail!(ibi::Error::Invalid {
                what: "serve --listen".into(),
                problem: "name at least one collection ROOT to serve".into()
            });
        }
        GRACEFUL.store(true, Ordering::SeqCst);
        let options = http::Options {
            listen,
            public_url: args.public_url.clone(),
            mirrors: args.mirrors.clone(),
            verify_streams: args.verify_streams,
        };
        return http::serve(&args.roots, options).map(|_| Outcome::Success);
    }
    let options = ibi::store::ServeOptions {
        restrict_to: args.restrict_to_path.clone(),
        read_only: args.read_only,
        append_only: args.append_only,
        minter_dir: None,
        witness: Some(ibi::ops::witness::make_json),
        chain_check: Some(ibi::ops::log::check_chain_here),
    };
    ibi::store::serve_stdio(options)?;
    Ok(Outcome::Success)
}

/// `ibi man`: the main page on stdout, or every page into `dir`.
fn man(dir: Option<&std::path::Path>) -> Result<Outcome> {
    let command = <Cli as clap::CommandFactory>::command();
    let Some(dir) = dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(command).render(&mut page)?;
        write_stdout(&String::from_utf8_lossy(&page))?;
        return Ok(Outcome::Success);
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    clap_mangen::generate_to(command, dir).with_context(|| format!("cannot write man pages into {}", dir.display()))?;
    Ok(Outcome::Success)
}

/// Set by the commands that run until stopped (`watch`, `mirror --watch`): SIGINT and
/// SIGTERM then ask them to stop (`STOP`) instead of ending the process.
pub static GRACEFUL: AtomicBool = AtomicBool::new(false);
/// Asked to stop by SIGINT or SIGTERM (for `GRACEFUL` commands).
pub static STOP: AtomicBool = AtomicBool::new(false);

/// The exit code of a run ended by SIGINT or SIGTERM.
pub const EXIT_INTERRUPTED: i32 = 130;

/// Set once an interrupt is taken by a command that does not stop gracefully:
/// from then on only the handler's thread ends the process, with 130.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// SIGINT and SIGTERM: a daemon-like command stops at its next quiet moment (and
/// this returns false); any other command removes the staging folders it has
/// (after any rename under way) and returns true: `main` then exits 130 with the
/// staging lock held, so an interrupt leaves no half-built item behind.
pub fn on_interrupt() -> bool {
    if GRACEFUL.load(Ordering::SeqCst) {
        STOP.store(true, Ordering::SeqCst);
        return false;
    }
    INTERRUPTED.store(true, Ordering::SeqCst);
    // Held until the process ends, so no new staging folder appears meanwhile.
    std::mem::forget(ibi::store::remove_live_staging());
    stderr_line("ibi: interrupted; nothing half-done was left in staging");
    true
}

/// The exit code of a finished run, unless an interrupt was taken meanwhile: the
/// handler's thread then ends the process with 130 once it has removed the
/// staging, and this waits for it. A run that finished its work while the
/// handler waited for a rename under way would otherwise exit 0 after the
/// handler printed "interrupted", or race it to the exit.
pub fn unless_interrupted(code: ExitCode) -> ExitCode {
    while INTERRUPTED.load(Ordering::SeqCst) {
        std::thread::park();
    }
    code
}

/// How a command's memory comes and goes, for the allocator `main` chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Churn {
    /// Small allocations freed and made again (a server's requests, a mirror's items).
    Small,
    /// Large buffers freed all along the run (`audit`: a listing's pages of
    /// every site, a chunk's states), whose memory should go back at once.
    LargeBuffers,
}

/// Runs the command line and returns the exit code; `main` owns the process
/// (and tunes its allocator to the command's `Churn`).
pub fn run(
    install_interrupt_handler: impl FnOnce() -> std::result::Result<(), String>,
    tune_allocator: impl FnOnce(Churn),
) -> ExitCode {
    let cli = Cli::parse();
    tune_allocator(match cli.command {
        Command::Audit { .. } => Churn::LargeBuffers,
        _ => Churn::Small,
    });
    // The flags win over the variables; far stores read the variables (as rsync reads RSYNC_RSH).
    if let Some(rsh) = &cli.far.rsh {
        std::env::set_var(ibi::store::location::RSH_ENV, rsh);
    }
    if let Some(remote) = &cli.far.remote_ibi {
        std::env::set_var(ibi::store::location::REMOTE_IBI_ENV, remote);
    }
    if let Err(e) = install_interrupt_handler() {
        stderr_line(&format!("ibi: warning: cannot handle interrupts: {e}"));
    }
    let result = dispatch(&cli);
    if let Some(why) = stdout_failure() {
        stderr_line(&format!("ibi: error: cannot write results to standard output: {why}"));
        if let Err(error) = &result {
            stderr_line(&format!("ibi: error: {error:#}"));
        }
        return ExitCode::from(EXIT_OPERATIONAL);
    }
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Problems) => ExitCode::from(EXIT_PROBLEMS),
        Ok(Outcome::Failed(class)) => ExitCode::from(code_of(class)),
        Err(error) => {
            let code = exit_code_for(&error);
            // Under -q, a busy lock is not news for cron: the exit code says it all.
            // A lease lost mid-run is (a cut-off network, or another party's write).
            let lost = matches!(error.downcast_ref::<ibi::Error>(), Some(ibi::Error::LeaseLost { .. }));
            if !(cli.global.quiet && code == EXIT_BUSY && !lost) {
                // Library errors already name their cause; other errors show their chain.
                match error.downcast_ref::<ibi::Error>() {
                    Some(e @ ibi::Error::Unbaggable { symlinks: true, .. }) => {
                        stderr_line(&format!("ibi: error: {e}; symlinks can be copied with --follow-symlinks"))
                    }
                    Some(e) => stderr_line(&format!("ibi: error: {e}")),
                    None => stderr_line(&format!("ibi: error: {error:#}")),
                }
            }
            ExitCode::from(code)
        }
    }
}
