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
    /// Create a collection.
    Init(InitArgs),
    /// Deposit files and folders as items; prints name<TAB>ibip per item.
    Deposit(DepositArgs),
    /// Check fixity and structure of items; exit 1 if any problem is found.
    Verify(VerifyArgs),
    /// List items as name<TAB>ibip, sorted by name.
    List(ListArgs),
    /// Print the path of an item given its repository name or IBIp.
    Resolve {
        root: PathBuf,
        /// Repository name or IBIp, in any letter case.
        name: String,
    },
    /// Copy items from SRC to DST (verified; never overwrites).
    Copy(CopyArgs),
    /// Move items from SRC to DST: copy, re-verify in DST, then remove from SRC.
    Migrate(CopyArgs),
    /// One-way sync of SRC into DST, safe to run from cron.
    Mirror(MirrorArgs),
    /// Hot folder: deposit each new entry of INBOX once it stops changing.
    Watch(WatchArgs),
    /// Build sample collections from bundled fixtures and walk through the commands.
    Demo {
        /// Where to build the demo (default: a new folder in the temp directory).
        dir: Option<PathBuf>,
    },
    /// Mint repository names (and IBIps when the IP is known), one per line.
    Mint(MintArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff) on stdout, e.g. `ibi man > ibi.1`.
    Man,
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
    /// Mint from this collection's subsystem and minter state.
    #[arg(short = 'C', long = "collection", value_name = "ROOT", conflicts_with_all = ["host", "state"])]
    pub collection: Option<PathBuf>,
    #[command(flatten)]
    pub subsystem: SubsystemArgs,
    /// Minter state file (its lock is FILE.lock).
    #[arg(long, required_unless_present = "collection")]
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

#[derive(Debug, Args)]
pub struct InitArgs {
    pub root: PathBuf,
    #[command(flatten)]
    pub subsystem: SubsystemArgs,
    /// Organisation recorded as Source-Organization in every item.
    #[arg(long)]
    pub org: Option<String>,
}

#[derive(Debug, Args)]
pub struct DepositArgs {
    pub root: PathBuf,
    /// Files and folders to deposit.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// One item per PATH.
    #[arg(long)]
    pub each: bool,
    /// Each PATH is an existing BagIt bag, deposited without re-bagging.
    #[arg(long)]
    pub bag: bool,
    /// Remove the originals once the item is durable.
    #[arg(long = "move")]
    pub move_sources: bool,
    /// Copy the targets of symlinks instead of refusing them.
    #[arg(long)]
    pub follow_symlinks: bool,
    /// Deposit even content the collection already holds (otherwise it is reported
    /// as "already deposited as NAME" and not deposited again).
    #[arg(long)]
    pub duplicate: bool,
    /// Extra bag-info field, e.g. --meta Contact-Name="Ana Silva".
    #[arg(long = "meta", value_name = "K=V", value_parser = parse_meta)]
    pub meta: Vec<(String, String)>,
}

/// `--until`: a day alone means up to its last instant.
fn parse_until(text: &str) -> Result<Timestamp, String> {
    match Timestamp::parse_day(text) {
        Some(day) => Ok(day.checked_add_nanos(86_400 * 1_000_000_000 - 1)),
        None => Timestamp::parse_user(text).map_err(|e| e.to_string()),
    }
}

fn parse_meta(text: &str) -> Result<(String, String), String> {
    let (k, v) = text.split_once('=').ok_or_else(|| format!("\"{text}\" is not K=V"))?;
    let label_ok = !k.is_empty() && k.chars().all(|c| c.is_ascii_graphic() && c != ':');
    if !label_ok {
        return Err(format!("\"{k}\" is not a bag-info label (printable ASCII, no \":\" or spaces)"));
    }
    if v.contains(['\n', '\r']) {
        return Err(format!("the value of {k} holds a line break"));
    }
    Ok((k.to_string(), v.to_string()))
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    pub root: PathBuf,
    /// Items to verify (names or IBIps); all when none is given.
    pub names: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    pub root: PathBuf,
    /// Only names dated at or after TIME (RFC 3339, POSIX seconds, or a day: 2026-11-22).
    #[arg(long, value_name = "TIME")]
    pub since: Option<Timestamp>,
    /// Only names dated at or before TIME; a day alone includes the whole day.
    #[arg(long, value_name = "TIME", value_parser = parse_until)]
    pub until: Option<Timestamp>,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    pub inbox: PathBuf,
    pub root: PathBuf,
    /// Remove originals after their deposit is durable (instead of moving them to INBOX/.deposited/).
    #[arg(long)]
    pub remove: bool,
    /// Seconds an entry must stay unchanged before it is deposited.
    #[arg(long, default_value = "2")]
    pub settle: Seconds,
    /// Copy the targets of symlinks instead of refusing them.
    #[arg(long)]
    pub follow_symlinks: bool,
    #[arg(long = "meta", value_name = "K=V", value_parser = parse_meta)]
    pub meta: Vec<(String, String)>,
}

/// Flags shared by copy, migrate and mirror.
#[derive(Debug, Args, Clone, Copy)]
pub struct TransferFlags {
    /// Say what would happen; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Wait up to SECS for DST's write lock instead of exiting 75 at once.
    #[arg(long, value_name = "SECS")]
    pub wait: Option<Seconds>,
}

#[derive(Debug, Args)]
pub struct CopyArgs {
    pub src: PathBuf,
    pub dst: PathBuf,
    /// Items to transfer (names or IBIps); all when none is given.
    pub names: Vec<String>,
    #[command(flatten)]
    pub flags: TransferFlags,
}

#[derive(Debug, Args)]
pub struct MirrorArgs {
    pub src: PathBuf,
    pub dst: PathBuf,
    /// Remove DST items that SRC does not hold.
    #[arg(long)]
    pub delete: bool,
    /// Remove at most N items (then exit 1).
    #[arg(long, value_name = "N", requires = "delete")]
    pub max_delete: Option<u64>,
    /// Also re-verify every DST payload, repairing damaged items from SRC.
    #[arg(long)]
    pub checksum: bool,
    /// Keep running; re-sync when SRC changes.
    #[arg(long)]
    pub watch: bool,
    #[command(flatten)]
    pub flags: TransferFlags,
}
