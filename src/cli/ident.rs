//! The identifier commands: `mint`, `parse`, `ibip encode|decode` and
//! `pilin mint|decode`. Each turns parsed arguments into library calls and
//! prints lines (or JSON) on stdout.

use std::path::PathBuf;

use anyhow::{Context, Result};
use ibi::id::minter::{Clock, Minter, ReplayClock, SystemClock};
use ibi::id::name::PortSeparator;
use ibi::id::pilin::PilinMinter;
use ibi::ops::NoticedClock;
use ibi::store::StateFile;
use ibi::{Ibip, Identifier, PilinSuffix, RepositoryName, Subsystem};
use serde_json::{json, Map, Value};

use super::args::{GlobalArgs, IbipCommand, IbipEncodeArgs, MintArgs, PilinCommand, PilinMintArgs, SubsystemArgs};
use super::printer::Printer;
use super::Outcome;

pub fn subsystem_from_args(args: &SubsystemArgs) -> Result<Subsystem> {
    let host = args.host.as_deref().ok_or_else(|| ibi::Error::Invalid {
        what: "subsystem".into(),
        problem:
            "--host HOST is required: the host name of the identification subsystem (e.g. --host mtc-m18.sid.inpe.br)"
                .into(),
    })?;
    Ok(Subsystem::new(host, args.port, args.ip, args.ibip_port, args.granularity)?)
}

/// The clock for a command: the system clock, or a replay clock at `--at`.
pub fn clock_for(at: Option<ibi::Timestamp>) -> Box<dyn Clock> {
    match at {
        Some(t) => Box::new(ReplayClock::new(t)),
        None => Box::new(SystemClock),
    }
}

pub fn mint(global: GlobalArgs, args: &MintArgs) -> Result<Outcome> {
    if let Some(root) = &args.collection {
        let collection = super::open(root)?;
        refuse_future_replay(args.at, collection.subsystem())?;
        let clock = clock_for(args.at);
        let printer = Printer::new(global);
        let noticed = NoticedClock { clock: clock.as_ref(), reporter: &printer };
        ibi::store::refuse_unless_minting(collection.as_ref())?;
        let writer = collection.begin_write(ibi::store::LockWait::Forever)?;
        let minted = ibi::store::mint(writer.as_ref(), args.count, &noticed)?;
        let names: Vec<RepositoryName> = minted.iter().map(|m| m.name.clone()).collect();
        writer.minter().note_minted(&names)?;
        let dates: Vec<ibi::Timestamp> = minted.iter().map(|m| m.name.date()).collect();
        print_minted(global, collection.subsystem(), &dates)?;
        return Ok(Outcome::Success);
    }
    let subsystem = subsystem_from_args(&args.subsystem)?;
    let state = args.state.as_ref().context("--state FILE is required")?;
    let clock = clock_for(args.at);
    let printer = Printer::new(global);
    let noticed = NoticedClock { clock: clock.as_ref(), reporter: &printer };
    let state = StateFile::beside(state);
    let mut minter = Minter::new(&state, subsystem.granularity, &noticed);
    minter.max_wait = args.max_wait.0;
    print_minted(global, &subsystem, &minter.mint(args.count)?)?;
    Ok(Outcome::Success)
}

/// `--at` replays a time for testing: into a collection (`-C`), never one past
/// the real clock (plus the granularity), which would hold every later deposit
/// until the clock reached it.
fn refuse_future_replay(at: Option<ibi::Timestamp>, subsystem: &Subsystem) -> Result<()> {
    let Some(at) = at else { return Ok(()) };
    let now = ibi::Timestamp::now();
    if at.nanos() <= now.nanos() + subsystem.granularity.nanos() {
        return Ok(());
    }
    let problem = format!(
        "{} is past this machine's clock ({}): --at replays a time for testing, and with -C it would write that date \
         into the collection's minter state, holding every deposit until then; nothing was minted",
        at.to_rfc3339(),
        now.to_rfc3339()
    );
    Err(ibi::Error::Invalid { what: "--at".into(), problem }.into())
}

pub fn print_minted(global: GlobalArgs, subsystem: &Subsystem, dates: &[ibi::Timestamp]) -> Result<()> {
    let mut out = String::new();
    for date in dates {
        let minted = subsystem.identify(*date)?;
        let line = match (&minted.ibip, global.json) {
            (_, true) => json!({"name": minted.name.to_string(), "ibip": minted.ibip.map(|i| i.to_string()), "date": date.to_rfc3339()}).to_string(),
            (_, false) => minted.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    super::write_stdout(&out)
}

fn explain(id: &Identifier) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("kind".into(), id.kind().into());
    match id {
        Identifier::Name(name) => explain_name(&mut m, name),
        Identifier::Ibip(ibip) => {
            m.insert("canonical".into(), ibip.to_string().into());
            m.insert("ip".into(), ibi::id::ibip::ip_canonical(&ibip.ip()).into());
            m.insert("port".into(), ibip.port().into());
            m.insert("date".into(), ibip.date().to_rfc3339().into());
        }
        Identifier::Pilin(suffix) => {
            m.insert("canonical".into(), suffix.to_string().into());
            m.insert("milliseconds".into(), (suffix.millis() as u64).into());
            m.insert("date".into(), suffix.date().to_rfc3339().into());
        }
        Identifier::Handle(handle) => {
            m.insert("canonical".into(), handle.to_string().into());
            m.insert("prefix".into(), handle.prefix().into());
            m.insert("suffix".into(), handle.suffix().into());
            if let Ok(p) = PilinSuffix::parse(handle.suffix()) {
                m.insert("pilin_date".into(), p.date().to_rfc3339().into());
            }
            if let Some(oid) = handle.oid() {
                m.insert("oid".into(), oid.to_string().into());
                m.insert("oid_root".into(), oid.root().into());
                m.insert("oid_arcs".into(), oid.arcs.len().into());
                if handle.prefix() == ibi::id::handle::OID_PREFIX {
                    m.insert("oid_prefix".into(), "10673, the OID prefix of the Handle System paper".into());
                }
            }
        }
    }
    m
}

fn explain_name(m: &mut Map<String, Value>, name: &RepositoryName) {
    let prefix = name.prefix();
    m.insert("canonical".into(), name.to_string().into());
    m.insert("prefix".into(), prefix.to_string().into());
    m.insert("subdomain".into(), prefix.subdomain().into());
    let (port, legacy) = match prefix.port() {
        None => (Value::from(80), false),
        Some((sep, port)) => (Value::from(port), sep == PortSeparator::At),
    };
    m.insert("port".into(), port);
    m.insert("legacy_at_separator".into(), legacy.into());
    m.insert("date".into(), name.date().to_rfc3339().into());
    m.insert("path".into(), name.components().join("/").into());
}

pub fn parse(global: GlobalArgs, identifiers: &[String]) -> Result<Outcome> {
    for text in identifiers {
        let id = Identifier::parse(text)?;
        let fields = explain(&id);
        let out = if global.json {
            let mut obj = Map::new();
            obj.insert("input".into(), text.as_str().into());
            obj.extend(fields);
            format!("{}\n", Value::Object(obj))
        } else {
            let mut s = format!("{text}\n");
            for (k, v) in fields {
                let v = v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
                s.push_str(&format!("  {k}: {v}\n"));
            }
            s
        };
        super::write_stdout(&out)?;
    }
    Ok(Outcome::Success)
}

pub fn ibip(global: GlobalArgs, command: &IbipCommand) -> Result<Outcome> {
    match command {
        IbipCommand::Encode(args) => super::write_stdout(&format!("{}\n", encode_ibip(args)?))?,
        IbipCommand::Decode { ibip } => {
            let ibip = Ibip::parse(ibip)?;
            let ip = ibi::id::ibip::ip_canonical(&ibip.ip());
            let date = ibip.date().to_rfc3339();
            let out = if global.json {
                format!("{}\n", json!({"ip": ip, "port": ibip.port(), "date": date}))
            } else {
                format!("ip: {ip}\nport: {}\ndate: {date}\n", ibip.port())
            };
            super::write_stdout(&out)?;
        }
    }
    Ok(Outcome::Success)
}

fn encode_ibip(args: &IbipEncodeArgs) -> Result<Ibip> {
    let date = match (&args.date, &args.name) {
        (Some(date), _) => *date,
        (None, Some(name)) => RepositoryName::parse(name)?.date(),
        (None, None) => {
            anyhow::bail!(ibi::Error::Invalid { what: "arguments".into(), problem: "give --date or --name".into() })
        }
    };
    Ok(Ibip::new(args.ip, args.port, date)?)
}

/// `$IBI_PILIN_STATE`, else `$XDG_STATE_HOME/ibi/pilin.state`, else `~/.local/state/ibi/pilin.state`.
fn default_pilin_state() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("IBI_PILIN_STATE") {
        return Ok(PathBuf::from(p));
    }
    let base = match (std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME")) {
        (Some(x), _) => PathBuf::from(x),
        (None, Some(home)) => PathBuf::from(home).join(".local/state"),
        (None, None) => anyhow::bail!(ibi::Error::Invalid {
            what: "PILIN state".into(),
            problem: "no HOME; pass --state FILE".into()
        }),
    };
    let dir = base.join("ibi");
    std::fs::create_dir_all(&dir).map_err(|e| ibi::Error::io("create directory", &dir, e))?;
    Ok(dir.join("pilin.state"))
}

pub fn pilin(global: GlobalArgs, command: &PilinCommand) -> Result<Outcome> {
    match command {
        PilinCommand::Mint(args) => pilin_mint(args),
        PilinCommand::Decode { suffix } => {
            let suffix = PilinSuffix::parse(suffix)?;
            let out = if global.json {
                json!({"suffix": suffix.to_string(), "milliseconds": suffix.millis() as u64, "date": suffix.date().to_rfc3339()}).to_string()
            } else {
                suffix.date().to_rfc3339()
            };
            super::write_stdout(&format!("{out}\n"))?;
            Ok(Outcome::Success)
        }
    }
}

fn pilin_mint(args: &PilinMintArgs) -> Result<Outcome> {
    let state = match &args.state {
        Some(s) => s.clone(),
        None => default_pilin_state()?,
    };
    let clock = clock_for(args.at);
    let state = StateFile::beside(&state);
    let minter = PilinMinter { state: &state, max_wait: ibi::id::minter::DEFAULT_MAX_WAIT, clock: clock.as_ref() };
    let suffixes = minter.mint(args.count)?;
    let out: String = suffixes.iter().map(|s| format!("{s}\n")).collect();
    super::write_stdout(&out)?;
    Ok(Outcome::Success)
}
