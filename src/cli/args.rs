//! The command line, as clap derive types. Only the binary sees these; the
//! dispatcher in `cli::mod` turns them into library calls.

use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use ibi::{Granularity, Timestamp};

#[derive(Debug, Parser)]
#[command(name = "ibi", version, about = "Uniform-repository collections named by IBI identifiers")]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Clone, Copy)]
pub struct GlobalArgs {
    /// Emit JSON (JSON Lines for streams) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Print nothing but results and errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Say more about what is happening.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Never draw progress bars.
    #[arg(long, global = true)]
    pub no_progress: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mint repository names (and IBIps when the IP is known), one per line.
    Mint(MintArgs),
    /// Validate and explain repository names, IBIps, PILIN suffixes or handles.
    Parse(ParseArgs),
    /// IBIp conversions.
    #[command(subcommand)]
    Ibip(IbipCommand),
    /// PILIN handle suffixes.
    #[command(subcommand)]
    Pilin(PilinCommand),
}

/// The identification subsystem, given on the command line.
#[derive(Debug, Args, Clone)]
pub struct SubsystemArgs {
    /// Host name of the identification subsystem (two or more labels).
    #[arg(long)]
    pub host: Option<String>,
    /// Port of the subsystem; 80 is omitted from names.
    #[arg(long, default_value_t = 80)]
    pub port: u16,
    /// IP of the subsystem, for IBIps.
    #[arg(long)]
    pub ip: Option<IpAddr>,
    /// IBIp port; 800 is omitted from IBIps.
    #[arg(long, default_value_t = 800)]
    pub ibip_port: u16,
    /// Granularity in seconds: 60, 1, 0.1, … 0.000000001.
    #[arg(long, default_value = "1")]
    pub granularity: Granularity,
}

#[derive(Debug, Args)]
pub struct MintArgs {
    #[command(flatten)]
    pub subsystem: SubsystemArgs,
    /// Minter state file (its lock is FILE.lock).
    #[arg(long, required = true)]
    pub state: Option<PathBuf>,
    /// How many names to mint under one lock hold.
    #[arg(long, default_value_t = 1)]
    pub count: usize,
    /// Use TIME as the request time (RFC 3339 or POSIX seconds); never sleeps.
    #[arg(long)]
    pub at: Option<Timestamp>,
    /// Longest wait, in seconds, before the clock counts as behind the state.
    #[arg(long, default_value = "10")]
    pub max_wait: Seconds,
}

#[derive(Debug, Args)]
pub struct ParseArgs {
    /// Identifiers to check.
    #[arg(required = true)]
    pub identifiers: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum IbipCommand {
    /// Encode an IBIp from an IP, a port and a date (or a repository name's date).
    Encode(IbipEncodeArgs),
    /// Decode an IBIp back to IP, port and date.
    Decode {
        /// The IBIp, in any letter case.
        ibip: String,
    },
}

#[derive(Debug, Args)]
pub struct IbipEncodeArgs {
    #[arg(long)]
    pub ip: IpAddr,
    /// IBIp port; 800 is omitted.
    #[arg(long, default_value_t = 800)]
    pub port: u16,
    /// The date (RFC 3339 or POSIX seconds).
    #[arg(long, conflicts_with = "name", required_unless_present = "name")]
    pub date: Option<Timestamp>,
    /// A repository name whose date gives the suffix.
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum PilinCommand {
    /// Mint PILIN suffixes from a state of their own.
    Mint(PilinMintArgs),
    /// Decode a PILIN suffix to its date.
    Decode {
        /// The suffix, e.g. Y35XYS0QH.
        suffix: String,
    },
}

#[derive(Debug, Args)]
pub struct PilinMintArgs {
    /// State file (default: $XDG_STATE_HOME/ibi/pilin.state).
    #[arg(long)]
    pub state: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub count: usize,
    /// Use TIME as the request time; never sleeps.
    #[arg(long)]
    pub at: Option<Timestamp>,
}

/// A non-negative number of seconds, read exactly (`10`, `0.5`).
#[derive(Debug, Clone, Copy)]
pub struct Seconds(pub Duration);

impl FromStr for Seconds {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let t = Timestamp::parse_decimal(text).map_err(|e| e.to_string())?;
        let nanos =
            u64::try_from(t.nanos()).map_err(|_| format!("\"{text}\" is not a non-negative number of seconds"))?;
        Ok(Seconds(Duration::from_nanos(nanos)))
    }
}
