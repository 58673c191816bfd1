//! The binary's dispatcher: parses the command line, runs the command, and
//! maps library errors to the exit codes of DESIGN §6 (0 success, 1 data
//! problems, 2 invalid input, 3 operational failure, 75 busy, 130 interrupted).

pub mod args;
mod collection;
mod demo;
mod ident;
mod printer;
mod transfer;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use ibi::ErrorClass;

use args::{Cli, Command};

/// How a command that ran to its end went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Finished, but found problems in data.
    Problems,
}

pub const EXIT_PROBLEMS: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_OPERATIONAL: u8 = 3;
pub const EXIT_BUSY: u8 = 75;

/// Writes to stdout; a closed pipe (`ibi list | head`) ends quietly.
pub fn write_stdout(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => Ok(other?),
    }
}

fn exit_code_for(error: &anyhow::Error) -> u8 {
    match error.downcast_ref::<ibi::Error>().map(ibi::Error::class) {
        Some(ErrorClass::Input) => EXIT_USAGE,
        Some(ErrorClass::Data) => EXIT_PROBLEMS,
        Some(ErrorClass::Busy) => EXIT_BUSY,
        Some(ErrorClass::Operational) => EXIT_OPERATIONAL,
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
        Command::Resolve { root, name } => collection::resolve(root, name),
        Command::Watch(args) => collection::watch(g, args),
        Command::Copy(args) => transfer::copy(g, args, false),
        Command::Migrate(args) => transfer::copy(g, args, true),
        Command::Mirror(args) => transfer::mirror(g, args),
        Command::Demo { dir } => demo::run(g, dir.as_deref()),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(*shell, &mut command, "ibi", &mut std::io::stdout());
            Ok(Outcome::Success)
        }
        Command::Man => {
            let mut page = Vec::new();
            clap_mangen::Man::new(<Cli as clap::CommandFactory>::command()).render(&mut page)?;
            write_stdout(&String::from_utf8_lossy(&page))?;
            Ok(Outcome::Success)
        }
        Command::Mint(args) => ident::mint(g, args),
        Command::Parse(args) => ident::parse(g, &args.identifiers),
        Command::Ibip(command) => ident::ibip(g, command),
        Command::Pilin(command) => ident::pilin(g, command),
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(&cli) {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Problems) => ExitCode::from(EXIT_PROBLEMS),
        Err(error) => {
            // Library errors already name their cause; other errors show their chain.
            match error.downcast_ref::<ibi::Error>() {
                Some(e) => eprintln!("ibi: error: {e}"),
                None => eprintln!("ibi: error: {error:#}"),
            }
            ExitCode::from(exit_code_for(&error))
        }
    }
}
