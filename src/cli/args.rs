//! The command line, as clap derive types. Only the binary sees these; the
//! dispatcher in `cli::mod` turns them into library calls.

use ibi::ops::fixity::Budget;
use ibi::store::config::Media;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use ibi::{Granularity, Timestamp};

#[derive(Debug, Parser)]
#[command(name = "ibi", version, about = "Uniform-repository collections named by IBI identifiers", after_help = EXIT_CODES)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(flatten)]
    pub far: FarArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// How far collections (`HOST:PATH`, `ssh://HOST[:PORT]/PATH`) are reached.
#[derive(Debug, Args, Clone)]
pub struct FarArgs {
    /// The command that reaches a far machine (default: ssh; env IBI_RSH), split on spaces.
    #[arg(long, global = true, value_name = "CMD")]
    pub rsh: Option<String>,
    /// The ibi binary on the far machine (default: ibi; env IBI_REMOTE_IBI).
    #[arg(long, global = true, value_name = "PATH")]
    pub remote_ibi: Option<String>,
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

/// The exit codes, at the end of `ibi --help` and on the main man page.
pub const EXIT_CODES: &str = "\
Exit codes:
  0    success
  1    finished, but found problems in data (fixity failures, conflicts, corrupt source items)
  2    usage error or invalid input
  3    operational failure (I/O error, disk full, permission denied, clock behind the minter state)
  75   another run holds the lock; try later
  130  interrupted (SIGINT or SIGTERM)";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a collection.
    #[command(after_help = "Examples:
  ibi init /srv/library --host mtc-m18.sid.inpe.br --ip 150.163.2.174 --org INPE
  ibi init /srv/archive --host archive.example.org --port 8080 --granularity 0.001")]
    Init(InitArgs),
    /// Deposit files and folders as items; prints name<TAB>ibip per item.
    #[command(after_help = "Examples:
  ibi deposit /srv/library report.pdf figures/        # one item holding both
  ibi deposit /srv/library scans/*.tif --each         # one item per file
  ibi deposit /srv/library bagged/ --bag --move       # an existing BagIt bag, whole
  ibi deposit /srv/library thesis/ --meta Contact-Name=\"Ana Silva\"")]
    Deposit(DepositArgs),
    /// Check fixity and structure of items; exit 1 if any problem is found.
    #[command(after_help = "Examples:
  ibi verify /srv/library                              # every item, on all cores
  ibi verify /srv/library 8JMKD3MGP8W/34PGRBS          # one item, by IBIp or name
  ibi -q verify /srv/library || mail -s fixity root   # from cron")]
    Verify(VerifyArgs),
    /// List items as name<TAB>ibip, sorted by name.
    #[command(after_help = "Examples:
  ibi list /srv/library
  ibi list /srv/library --since 2026-11-01 --until 2026-11-22
  ibi --json list /srv/library | jq -r .name")]
    List(ListArgs),
    /// Print the event log: what was done to the collection and its items, and by whom.
    #[command(after_help = "Examples:
  ibi log /srv/library --since 2026-11-01
  ibi log /srv/library sid.inpe.br/mtc-m18/2009/02.16.17.46
  ibi log /srv/library sid.inpe.br/mtc-m18/2009/02.16.17.46 --premis > premis.xml
  ibi --json log /srv/library | jq -r .type")]
    Log(LogArgs),
    /// Print the path of an item given its repository name or IBIp.
    #[command(after_help = "Examples:
  ibi resolve /srv/library sid.inpe.br/mtc-m18/2009/02.16.17.46
  ls \"$(ibi resolve /srv/library 8JMKD3MGP8W/34PGRBS)\"/data")]
    Resolve {
        /// The collection's root folder.
        root: PathBuf,
        /// Repository name or IBIp, in any letter case.
        name: String,
    },
    /// Show an item: identifiers, status, bag-info, version history, files and size.
    #[command(after_help = "Examples:
  ibi show /srv/library 8JMKD3MGP8W/34PGRBS
  ibi --json show /srv/library sid.inpe.br/mtc-m18/2009/02.16.17.46 | jq .versions")]
    Show {
        /// The collection's root folder.
        root: PathBuf,
        /// Repository name or IBIp, in any letter case.
        name: String,
    },
    /// Make a new version of an item: change bag-info, add or remove payload files.
    #[command(after_help = "Examples:
  ibi update /srv/library 8JMKD3MGP8W/34PGRBS --meta Title=\"Corrected title\"
  ibi update /srv/library 8JMKD3MGP8W/34PGRBS --add errata.pdf --add v2.pdf=report.pdf
  ibi update /srv/library 8JMKD3MGP8W/34PGRBS --remove draft.docx --unset Contact-Phone")]
    Update(UpdateArgs),
    /// Withdraw items: a tombstone keeps each name forever; bytes are kept out of service.
    #[command(after_help = "Examples:
  ibi withdraw /srv/library 8JMKD3MGP8W/34PGRBS --reason \"duplicate of 8JMKD3MGP8W/34PGRBT\"
  ibi withdraw /srv/library sid.inpe.br/mtc-m18/2009/02.16.17.46 --reason \"court order\" --purge")]
    Withdraw(WithdrawArgs),
    /// Write one version of an item as a BagIt bag, or every version as an OCFL object.
    #[command(after_help = "Examples:
  ibi export /srv/library 8JMKD3MGP8W/34PGRBS /tmp/item
  ibi export /srv/library 8JMKD3MGP8W/34PGRBS /tmp/item-v1 --version 1
  ibi export /srv/library 8JMKD3MGP8W/34PGRBS /srv/ocfl --ocfl

With --ocfl, DIR is an OCFL storage root (layout 0003-hash-and-id-n-tuple),
made when missing; the item's object gets every version it does not hold yet.")]
    Export {
        /// The collection's root folder.
        root: PathBuf,
        /// Repository name or IBIp, in any letter case.
        name: String,
        /// The bag to write (must not exist).
        dir: PathBuf,
        /// Which version (default: the current one).
        #[arg(long, value_name = "N", conflicts_with = "ocfl")]
        version: Option<u32>,
        /// Write every version into the OCFL storage root DIR.
        #[arg(long)]
        ocfl: bool,
    },
    /// Print a Handle System batch file (hdl-genericbatch) for the collection's items.
    #[command(after_help = "Each item gets HS_ADMIN, URL and 10320/loc values; each IBIp a handle with an
HS_ALIAS to the item's. A withdrawn item keeps its handle with a DESC value
holding the tombstone. Load the file with the Handle System's admin tool; no
secret is written into it.

Examples:
  ibi handles /srv/library --prefix 10.1000 --url-base https://urlib.net/ > batch.txt
  ibi handles /srv/library --prefix 10.1000 --url-base https://urlib.net/ --mirror https://mirror.example.org/
  ibi handles /srv/library --prefix 10.1000 --url-base https://urlib.net/ --suffix pilin --since 2026-11-01")]
    Handles(HandlesArgs),
    /// Copy items from SRC to DST (verified; never overwrites).
    #[command(after_help = "Examples:
  ibi copy /srv/library /mnt/usb/library               # every item DST lacks
  ibi copy /srv/library /mnt/usb/library 8JMKD3MGP8W/34PGRBS
  ibi copy /srv/library /mnt/usb/library --dry-run")]
    Copy(CopyArgs),
    /// Move items from SRC to DST: copy, re-verify in DST, then remove from SRC.
    #[command(after_help = "Examples:
  ibi migrate /srv/old-disk/library /srv/new-disk/library
  ibi migrate /srv/library /srv/archive sid.inpe.br/mtc-m18/2009/02.16.17.46 --wait 60")]
    Migrate(CopyArgs),
    /// One-way sync of SRC into DST, safe to run from cron.
    #[command(after_help = "Examples:
  ibi mirror /srv/library /backup/library
  ibi mirror /srv/library /backup/library --checksum   # also repair damaged DST items
  ibi -q mirror /srv/library /backup/library   # cron: never deletes, only moves forward
  ibi mirror /srv/library /backup/library --watch")]
    Mirror(MirrorArgs),
    /// Restore lost and damaged items, and lost aliases, from another collection.
    #[command(after_help = "Examples:
  ibi repair /srv/library --from /backup/library            # everything lost or damaged
  ibi repair /srv/library --from /backup/library 8JMKD3MGP8W/34PGRBS --dry-run")]
    Repair(RepairArgs),
    /// Serve collections over HTTP (--listen), or to a far ibi over ssh (--stdio).
    #[command(after_help = "Examples:
  ibi serve /srv/library --listen 127.0.0.1:8080       # then open http://127.0.0.1:8080/
  ibi serve /srv/library s3://bucket/lib --listen [::]:80 --public-url https://urlib.example/ \\
      --mirror https://mirror.example/
  ibi serve --stdio                                    # what `ibi mirror A host:/srv/lib` runs there
  # a backup server a compromised source cannot wipe, in ~/.ssh/authorized_keys:
  command=\"ibi serve --stdio --restrict-to-path /srv/library --append-only\",restrict ssh-ed25519 AAAA…")]
    Serve(ServeArgs),
    /// Retire a collection that simply stops: it keeps serving its items but mints no names.
    #[command(after_help = "Examples:
  ibi retire /srv/old/library                          # to move minting elsewhere, use `ibi handover`")]
    Retire {
        /// The collection's root folder.
        root: PathBuf,
    },
    /// Add, remove or list the sites holding copies, and set the copy policy.
    #[command(after_help = "Examples:
  ibi site add /srv/library backup:/srv/library --zone campus-b --media disk
  ibi site add /srv/library s3://library-copies/main --zone cloud-eu --media object
  ibi site here /srv/library --zone campus-a --media disk
  ibi site policy /srv/library --copies 3 --zones 2 --max-fixity-age 90d
  ibi site list /srv/library")]
    Site {
        #[command(subcommand)]
        command: SiteCommand,
    },
    /// Bring every site up to date: one forward-only mirror per site.
    #[command(after_help = "Examples:
  ibi replicate /srv/library                           # the one cron line a library needs
  ibi replicate /srv/library --dry-run")]
    Replicate {
        /// The collection's root folder (its sites are in its collection.toml).
        root: PathBuf,
        #[command(flatten)]
        flags: TransferFlags,
    },
    /// Compare every site's copies with the copy policy, moving no payload bytes.
    #[command(after_help = "Examples:
  ibi audit /srv/library                               # exit 1 names every item short of the policy
  ibi audit /srv/library --repair                      # restore bad copies from the majority's
  ibi --json audit /srv/library
  ibi audit /srv/library --ndsa                        # the NDSA v2.0 cells the facts prove")]
    Audit {
        /// The collection's root folder (its sites are in its collection.toml).
        root: PathBuf,
        /// Restore each missing, damaged or divergent copy from the copy a strict
        /// majority of the sites agree on; never deletes; no majority, no change.
        #[arg(long)]
        repair: bool,
        /// Also print the NDSA Levels of Digital Preservation v2.0 cells (Storage,
        /// Integrity, Control, Metadata) that the collection's facts prove: met,
        /// partial or unmet with the evidence, or "person" for those they cannot.
        #[arg(long)]
        ndsa: bool,
        /// Ask the SeaweedFS cluster behind each s3:// site that names one which
        /// data centres hold every object of each item: a site counts as one zone
        /// per data centre it proves, and an item below its replication is degraded.
        #[arg(long)]
        placement: bool,
    },
    /// Print the signed witness, prove an item is in it, or check a proof.
    #[command(after_help = "Examples:
  ibi witness /srv/library                             # the latest root, date, key and signature
  ibi witness /srv/library --prove sid.inpe.br/mtc-m18/2009/02.16.17.46 > proof.json
  ibi witness --check proof.json --key 3b6a27bc…       # anywhere: KEY is collection.toml's witness_key")]
    Witness {
        /// The collection's root folder.
        #[arg(required_unless_present = "check")]
        root: Option<PathBuf>,
        /// Print the inclusion proof of this item (a name) as JSON.
        #[arg(long, value_name = "NAME", conflicts_with = "check")]
        prove: Option<String>,
        /// Check a proof made by --prove: its signature and its path to the root.
        #[arg(long, value_name = "PROOF", conflicts_with = "root")]
        check: Option<PathBuf>,
        /// With --check: the collection's public key (hex, its collection.toml's
        /// witness_key), which must be the key that signed the proof. Without it,
        /// the proof shows only that its own key signed it.
        #[arg(long, value_name = "HEX", requires = "check")]
        key: Option<String>,
    },
    /// Rewrite what an older ibi stored in a form it no longer writes (S3 keys).
    #[command(after_help = "Examples:
  ibi upgrade s3://library-bucket/main                 # once, after installing this version")]
    Upgrade {
        /// The collection: a folder, HOST:PATH or s3://BUCKET/PREFIX.
        root: PathBuf,
        /// Wait up to SECS for another writer to finish.
        #[arg(long, value_name = "SECS")]
        wait: Option<Seconds>,
    },
    /// List the copies that repairs replaced (never deleted), or remove one
    #[command(after_help = "Examples:
  ibi kept /srv/library                                 # ID<TAB>NAME<TAB>WHEN<TAB>BYTES, one a line
  ibi kept /srv/library --remove 'sid.inpe.br+mtc-m18+2009+02.16.17.46@2026-11-28T124000.1Z'")]
    Kept {
        /// The collection: a folder or s3://BUCKET/PREFIX (a far one: run it on its machine).
        root: PathBuf,
        /// Remove these kept copies for good (their ids, as listed); each is named as it goes.
        #[arg(long, value_name = "ID", num_args = 1..)]
        remove: Vec<String>,
    },
    /// Move minting to another collection of the subsystem: FROM stops, TO starts.
    #[command(after_help = "Examples:
  ibi init new:/srv/library --like /srv/library        # a copy that does not mint
  ibi mirror /srv/library new:/srv/library             # while the old one stays in service
  ibi handover /srv/library new:/srv/library --forward-url https://new.example.org/
  ibi migrate /srv/library new:/srv/library --forward-url https://new.example.org/")]
    Handover(HandoverArgs),
    /// Hot folder: deposit each new entry of INBOX once it stops changing.
    #[command(after_help = "Examples:
  ibi watch /srv/inbox /srv/library                    # originals go to INBOX/.deposited/
  ibi watch /srv/inbox /srv/library --remove --settle 10")]
    Watch(WatchArgs),
    /// Build sample collections from bundled fixtures and walk through the commands.
    #[command(after_help = "Examples:
  ibi demo
  ibi demo /tmp/ibi-demo")]
    Demo {
        /// Where to build the demo (default: a new folder in the temp directory).
        dir: Option<PathBuf>,
    },
    /// Mint repository names (and IBIps when the IP is known), one per line.
    #[command(after_help = "Examples:
  ibi mint -C /srv/library --count 3
  ibi mint --state ./minter.state --host mtc-m18.sid.inpe.br --ip 150.163.2.174
  ibi mint --state ./s --host sid.inpe.br --at 2009-02-16T17:46:00Z")]
    Mint(MintArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = "Examples:
  ibi completions bash > /etc/bash_completion.d/ibi
  ibi completions fish > ~/.config/fish/completions/ibi.fish")]
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout, or write one page per command into DIR.
    #[command(after_help = "Examples:
  ibi man > ibi.1 && man ./ibi.1
  ibi man --dir /usr/local/share/man/man1              # ibi.1, ibi-deposit.1, …")]
    Man {
        /// Write ibi.1 and one ibi-COMMAND.1 per command into DIR.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Validate and explain repository names, IBIps, PILIN suffixes or handles.
    #[command(after_help = "Examples:
  ibi parse sid.inpe.br/mtc-m18/2009/02.16.17.46 8JMKD3MGP8W/34PGRBS
  ibi --json parse 0000000000F5W")]
    Parse(ParseArgs),
    /// IBIp conversions.
    #[command(
        subcommand,
        after_help = "Examples:
  ibi ibip encode --ip 150.163.2.174 --name sid.inpe.br/mtc-m18/2009/02.16.17.46
  ibi ibip decode 8JMKD3MGP8W/34PGRBS"
    )]
    Ibip(IbipCommand),
    /// PILIN handle suffixes.
    #[command(
        subcommand,
        after_help = "Examples:
  ibi pilin mint --count 2
  ibi pilin decode Y35XYS0QH"
    )]
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
    #[command(after_help = "Examples:
  ibi ibip encode --ip 150.163.2.174 --date 2009-02-16T17:46:00Z
  ibi ibip encode --ip 150.163.2.174 --port 8080 --name sid.inpe.br/mtc-m18/2009/02.16.17.46")]
    Encode(IbipEncodeArgs),
    /// Decode an IBIp back to IP, port and date.
    #[command(after_help = "Examples:
  ibi ibip decode 8JMKD3MGP8W/34PGRBS
  ibi --json ibip decode 8jmkd3mgp8w/34pgrbs")]
    Decode {
        /// The IBIp, in any letter case.
        ibip: String,
    },
}

#[derive(Debug, Args)]
pub struct IbipEncodeArgs {
    /// The IP of the identification subsystem.
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
    #[command(after_help = "Examples:
  ibi pilin mint
  ibi pilin mint --state ./pilin.state --count 5")]
    Mint(PilinMintArgs),
    /// Decode a PILIN suffix to its date.
    #[command(after_help = "Examples:
  ibi pilin decode Y35XYS0QH")]
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
    /// How many suffixes to mint.
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
pub struct HandoverArgs {
    /// The collection that mints now.
    pub from: PathBuf,
    /// The collection that will mint (made with `init --like FROM`).
    pub to: PathBuf,
    /// TO's public base URL: the old server's resolver sends names there.
    #[arg(long, value_name = "URL")]
    pub forward_url: Option<String>,
    /// Wait for the collections' write locks instead of failing at once.
    #[arg(long)]
    pub wait: bool,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The new collection's root folder (absent or empty).
    pub root: PathBuf,
    #[command(flatten)]
    pub subsystem: SubsystemArgs,
    /// Make a collection of OTHER's subsystem that does not mint: it follows the
    /// collection that does, and holds copies (mirror, migrate) until a handover.
    /// `--ip` may give this server's own IP (for the IBIps it mints after one).
    #[arg(long, value_name = "OTHER", conflicts_with_all = ["host", "port", "ibip_port", "granularity"])]
    pub like: Option<PathBuf>,
    /// Organisation recorded as Source-Organization in every item.
    #[arg(long)]
    pub org: Option<String>,
    /// For s3:// only: create the collection even though the server ignores
    /// conditional writes (If-None-Match), so that two writers could take one name.
    #[arg(long)]
    pub unsafe_no_conditional_writes: bool,
}

#[derive(Debug, Args)]
pub struct HandlesArgs {
    /// The collection's root folder.
    pub root: PathBuf,
    /// The naming authority the handles are made under (e.g. 10.1000).
    #[arg(long)]
    pub prefix: String,
    /// Prepended to each repository name to make its URL (e.g. https://urlib.net/).
    #[arg(long, value_name = "URL")]
    pub url_base: String,
    /// Another place serving the same collection (URL base), listed in 10320/loc.
    #[arg(long = "mirror", value_name = "URL")]
    pub mirrors: Vec<String>,
    /// The administrator handle of every value (default 0.NA/PREFIX).
    #[arg(long, value_name = "HANDLE")]
    pub admin: Option<String>,
    /// An item's handle suffix: its name, its IBIp, or the PILIN suffix of its date.
    #[arg(long, value_enum, default_value = "name")]
    pub suffix: HandleSuffix,
    /// Only items whose current version is this new or newer (incremental export).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
}

/// The suffix of an item's handle: the repository name, the IBIp, or the PILIN
/// suffix of the item's date (refused if two items share a millisecond).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HandleSuffix {
    Name,
    Ibip,
    Pilin,
}

#[derive(Debug, Args)]
pub struct DepositArgs {
    /// The collection's root folder.
    pub root: PathBuf,
    /// Files and folders to deposit.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// One item per PATH.
    #[arg(long)]
    pub each: bool,
    /// Each PATH is an existing BagIt bag, deposited without re-bagging.
    #[arg(long, conflicts_with = "ocfl")]
    pub bag: bool,
    /// Each PATH is an OCFL storage root (every object in it) or one OCFL
    /// object: each is taken with every version, after it is checked whole.
    #[arg(long, conflicts_with_all = ["each", "move_sources", "follow_symlinks", "duplicate", "meta"])]
    pub ocfl: bool,
    /// With --ocfl: take an object's mutable HEAD (extension
    /// 0005-mutable-head, Fedora 6 without auto-versioning) as its last
    /// version, marked "Ocfl-Mutable-Head" in bag-info, instead of refusing it.
    #[arg(long, requires = "ocfl")]
    pub take_mutable_head: bool,
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

/// A reason: text with no control character but tab (it reaches PREMIS, HTML,
/// Handle values and terminals).
fn parse_reason(text: &str) -> Result<String, String> {
    match text.chars().find(|c| c.is_control() && *c != '\t').or_else(|| ibi::markup::first_unwritable(text)) {
        Some(c) => Err(format!("it holds the control character U+{:04X}: write the reason as plain text", c as u32)),
        None => Ok(text.to_string()),
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
    if let Some(c) = v.chars().find(|c| c.is_control() && *c != '\t').or_else(|| ibi::markup::first_unwritable(v)) {
        return Err(format!("the value of {k} holds the control character U+{:04X}", c as u32));
    }
    Ok((k.to_string(), v.to_string()))
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The collection's root folder.
    pub root: PathBuf,
    /// Items to verify (names or IBIps); all when none is given.
    pub names: Vec<String>,
    /// Rolling fixity: verify the items checked longest ago first, and stop once
    /// this is spent: a size (`500MiB`, `2GB`, `1TiB`) or a time (`90s`, `30m`, `2h`, `1d`).
    #[arg(long, value_name = "SIZE|DURATION", value_parser = parse_budget, conflicts_with = "names")]
    pub budget: Option<Budget>,
    /// Report, without reading a byte, the oldest successful check and every item
    /// not found whole within the cycle (exit 1 if any).
    #[arg(long, conflicts_with_all = ["names", "budget"])]
    pub age: bool,
    /// The fixity cycle for --age, in days.
    #[arg(long, value_name = "DAYS", default_value_t = 90, requires = "age")]
    pub cycle: u32,
    /// Also verify every site of the collection (`ibi site add`), each in turn
    /// with the same budget; each site keeps the dates of its own checks. A site
    /// that cannot be reached is reported and the others still go ahead.
    #[arg(long, conflicts_with_all = ["names", "age"])]
    pub sites: bool,
    /// Verify only part K of N disjoint parts, chosen from the names alone: N
    /// workers (cron jobs, a Kubernetes indexed Job) each run one part, with no
    /// coordinator; their checks together count as one whole verify.
    #[arg(long, value_name = "K/N", conflicts_with_all = ["names", "budget", "age", "sites"])]
    pub part: Option<String>,
    /// Store-attested: compare the SHA-256 the object store keeps of each file
    /// (sent with its upload) with the manifests, without reading the bytes;
    /// an item whose files have no kept checksum is read. Catches a replaced
    /// object, not a bit flip in the store's replica; recorded as such.
    #[arg(long, conflicts_with_all = ["names", "budget", "age", "sites", "part"])]
    pub attested: bool,
}

/// `500MiB`, `2GB`, `1024` (bytes) or `90s`, `30m`, `2h`, `1d`.
fn parse_budget(text: &str) -> Result<Budget, String> {
    let digits = text.trim().find(|c: char| !c.is_ascii_digit()).unwrap_or(text.trim().len());
    let (number, unit) = text.trim().split_at(digits);
    let number: u64 = number.parse().map_err(|_| format!("{text:?}: give a number and a unit, like 500MiB or 2h"))?;
    let times = |n: u64| number.checked_mul(n).ok_or_else(|| format!("{text:?} is too large"));
    Ok(match unit.trim() {
        "" | "B" => Budget::Bytes(number),
        "KB" | "kB" => Budget::Bytes(times(1000)?),
        "KiB" => Budget::Bytes(times(1 << 10)?),
        "MB" => Budget::Bytes(times(1_000_000)?),
        "MiB" => Budget::Bytes(times(1 << 20)?),
        "GB" => Budget::Bytes(times(1_000_000_000)?),
        "GiB" => Budget::Bytes(times(1 << 30)?),
        "TB" => Budget::Bytes(times(1_000_000_000_000)?),
        "TiB" => Budget::Bytes(times(1 << 40)?),
        "s" => Budget::Time(Duration::from_secs(number)),
        "m" => Budget::Time(Duration::from_secs(times(60)?)),
        "h" => Budget::Time(Duration::from_secs(times(3600)?)),
        "d" => Budget::Time(Duration::from_secs(times(86_400)?)),
        other => {
            return Err(format!("{text:?}: unknown unit {other:?} (B, KB, KiB, MB, MiB, GB, GiB, TB, TiB, s, m, h, d)"))
        }
    })
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The collection's root folder.
    pub root: PathBuf,
    /// Repository name or IBIp of the item.
    pub name: String,
    /// Set a bag-info field, replacing its earlier values.
    #[arg(long = "meta", value_name = "K=V", value_parser = parse_meta)]
    pub meta: Vec<(String, String)>,
    /// Drop a bag-info field.
    #[arg(long, value_name = "K")]
    pub unset: Vec<String>,
    /// Add (or replace) a payload file: PATH, stored as data/<its name>, or PATH=DATA_PATH.
    #[arg(long, value_name = "PATH[=DATA_PATH]")]
    pub add: Vec<String>,
    /// Leave a payload file out of the new version (a path inside data/).
    #[arg(long, value_name = "DATA_PATH")]
    pub remove: Vec<String>,
    /// Wait up to SECS for another writer to finish.
    #[arg(long, value_name = "SECS")]
    pub wait: Option<Seconds>,
}

#[derive(Debug, Args)]
pub struct WithdrawArgs {
    /// The collection's root folder.
    pub root: PathBuf,
    /// Repository names or IBIps of the items.
    #[arg(required = true)]
    pub names: Vec<String>,
    /// Why, recorded in the tombstone and shown to whoever resolves the name.
    #[arg(long, value_name = "TEXT", value_parser = parse_reason)]
    pub reason: String,
    /// Also destroy the bytes of every version (the tombstone and history remain).
    #[arg(long)]
    pub purge: bool,
    /// Wait up to SECS for another writer to finish.
    #[arg(long, value_name = "SECS")]
    pub wait: Option<Seconds>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// The collection's root folder.
    pub root: PathBuf,
    /// Also list withdrawn items (their tombstones).
    #[arg(long)]
    pub withdrawn: bool,
    /// Only names dated at or after TIME (RFC 3339, POSIX seconds, or a day: 2026-11-22).
    #[arg(long, value_name = "TIME")]
    pub since: Option<Timestamp>,
    /// Only names dated at or before TIME; a day alone includes the whole day.
    #[arg(long, value_name = "TIME", value_parser = parse_until)]
    pub until: Option<Timestamp>,
}

#[derive(Debug, Subcommand)]
pub enum SiteCommand {
    /// Add a site: a collection made with `init --like` (it never mints).
    Add {
        /// The collection's root folder.
        root: PathBuf,
        /// The site: a folder, HOST:PATH, ssh://, s3://BUCKET/PREFIX, or ocfl:PATH (an OCFL storage root).
        url: String,
        /// Its disaster zone (copies in distinct zones survive distinct disasters).
        #[arg(long)]
        zone: String,
        /// What it keeps copies on: disk, object, tape or other.
        #[arg(long, default_value = "disk", value_parser = parse_media)]
        media: Media,
        /// Where the public reaches its items over HTTP.
        #[arg(long, value_name = "URL")]
        public_url: Option<String>,
        /// The HTTP address of the SeaweedFS master behind an s3:// site, whose
        /// volume status says which data centres hold its objects (`audit --placement`).
        #[arg(long, value_name = "URL", requires = "seaweedfs_filer")]
        seaweedfs_master: Option<String>,
        /// The HTTP address of that cluster's filer, which says which volumes hold each object.
        #[arg(long, value_name = "URL", requires = "seaweedfs_master")]
        seaweedfs_filer: Option<String>,
    },
    /// Remove a site from the configuration (its copies stay where they are).
    Remove {
        /// The collection's root folder.
        root: PathBuf,
        url: String,
    },
    /// List the sites, the collection's own zone and the policy.
    List {
        /// The collection's root folder.
        root: PathBuf,
    },
    /// Set the collection's own zone and media (and, for one in S3, the SeaweedFS cluster behind it).
    Here {
        /// The collection's root folder.
        root: PathBuf,
        #[arg(long)]
        zone: String,
        #[arg(long, default_value = "disk", value_parser = parse_media)]
        media: Media,
        /// The master of the SeaweedFS cluster behind this S3 collection: verify then
        /// reports items whose volumes keep fewer replicas than they ask for.
        #[arg(long, value_name = "URL", requires = "seaweedfs_filer")]
        seaweedfs_master: Option<String>,
        /// That cluster's filer (its HTTP port, 8888 by default).
        #[arg(long, value_name = "URL", requires = "seaweedfs_master")]
        seaweedfs_filer: Option<String>,
    },
    /// Set the copy policy: copies (this collection included), zones, maximum fixity age.
    Policy {
        /// The collection's root folder.
        root: PathBuf,
        #[arg(long)]
        copies: u32,
        #[arg(long, default_value_t = 1)]
        zones: u32,
        /// Days, such as 90d: an older last check does not count as verified.
        #[arg(long, value_name = "DAYS")]
        max_fixity_age: Option<String>,
        /// Days, such as 365d: a copy whose last check was store-attested
        /// (`verify --attested`) counts as verified only if its bytes were
        /// also read and found whole within them.
        #[arg(long, value_name = "DAYS")]
        max_read_age: Option<String>,
    },
}

fn parse_media(text: &str) -> Result<Media, String> {
    Media::parse(text).ok_or_else(|| format!("{text:?} is not one of disk, object, tape, other"))
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// The collection's root folder.
    pub root: PathBuf,
    /// Only this item's events (a repository name or IBIp).
    pub name: Option<String>,
    /// Only events at or after TIME (RFC 3339, POSIX seconds, or a day: 2026-11-22).
    #[arg(long, value_name = "TIME")]
    pub since: Option<Timestamp>,
    /// Write the item's events as PREMIS 3 XML (needs NAME).
    #[arg(long, requires = "name")]
    pub premis: bool,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The hot folder: each new file or folder in it becomes one item.
    pub inbox: PathBuf,
    /// The collection's root folder.
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
    /// Extra bag-info field for every item, e.g. --meta Contact-Name="Ana Silva".
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
    /// The collection items come from.
    pub src: PathBuf,
    /// The collection items go to (created with `ibi init` first).
    pub dst: PathBuf,
    /// Items to transfer (names or IBIps); all when none is given.
    pub names: Vec<String>,
    #[command(flatten)]
    pub flags: TransferFlags,
    /// Migrate only: DST's public base URL; SRC's resolver answers a moved item's
    /// name with a redirect there (otherwise with 410 and where it went).
    #[arg(long, value_name = "URL")]
    pub forward_url: Option<String>,
}

#[derive(Debug, Args)]
pub struct RepairArgs {
    /// The collection to repair.
    pub root: PathBuf,
    /// The collection to take sound copies from.
    #[arg(long, value_name = "OTHER")]
    pub from: PathBuf,
    /// Items to repair (names or IBIps); all lost or damaged ones when none is given.
    pub names: Vec<String>,
    #[command(flatten)]
    pub flags: TransferFlags,
}

#[derive(Debug, Args)]
pub struct MirrorArgs {
    /// The collection to mirror.
    pub src: PathBuf,
    /// The mirror (created with `ibi init` first).
    pub dst: PathBuf,
    /// Removed: mirror never deletes (accepted only to explain why, exit 2).
    #[arg(long, hide = true)]
    pub delete: bool,
    /// Removed with --delete.
    #[arg(long, value_name = "N", hide = true)]
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

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["stdio", "listen"])))]
pub struct ServeArgs {
    /// Collections to serve over HTTP (local, HOST:PATH or s3://…); the first holding a name answers.
    #[arg(value_name = "ROOT", requires = "listen")]
    pub roots: Vec<PathBuf>,
    /// Serve the ROOTs over HTTP at ADDR:PORT (port 0: any free port, printed on stderr).
    #[arg(long, value_name = "ADDR:PORT", conflicts_with = "stdio")]
    pub listen: Option<std::net::SocketAddr>,
    /// The URL this server is reached at, for Handle values and links (default: from the Host header).
    #[arg(long, value_name = "URL", requires = "listen")]
    pub public_url: Option<String>,
    /// Another place serving the same collections (repeatable): listed in 10320/loc and on item pages.
    #[arg(long = "mirror", value_name = "URL", requires = "listen")]
    pub mirrors: Vec<String>,
    /// Hash files over 256 KiB as they stream and cut a damaged one short (about half the throughput).
    #[arg(long, requires = "listen")]
    pub verify_streams: bool,
    /// Talk the far protocol on stdin and stdout (what ssh runs).
    #[arg(long)]
    pub stdio: bool,
    /// Admit only collections beneath DIR (after realpath; repeatable).
    #[arg(long, value_name = "DIR")]
    pub restrict_to_path: Vec<PathBuf>,
    /// Refuse every write.
    #[arg(long)]
    pub read_only: bool,
    /// Accept new items; refuse replacement, withdrawal and removal.
    #[arg(long)]
    pub append_only: bool,
}
