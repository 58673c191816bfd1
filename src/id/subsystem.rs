//! The identification `Subsystem`: host and port (the repository-name prefix),
//! IP and IBIp port (the IBIp prefix) and the granularity of its distributor.
//! It turns a date handed out by the distributor into the item's identifiers.

use std::net::IpAddr;

use crate::error::Result;
use crate::id::distributor::Granularity;
use crate::id::ibip::{Ibip, IBIP_EPOCH_SECONDS};
use crate::id::name::{Prefix, RepositoryName};
use crate::id::time::Timestamp;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subsystem {
    pub host: String,
    pub port: u16,
    pub ip: Option<IpAddr>,
    pub ibip_port: u16,
    pub granularity: Granularity,
    prefix: Prefix,
}

/// The identifiers of one minted item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Minted {
    pub name: RepositoryName,
    pub ibip: Option<Ibip>,
}

impl Minted {
    /// `name<TAB>ibip`, the IBIp field empty when there is none: how journals and
    /// hot-folder records store an item's identifiers.
    pub fn record(&self) -> String {
        format!("{}\t{}", self.name, self.ibip.map(|i| i.to_string()).unwrap_or_default())
    }

    /// Reads a `record` (or a bare name); fields after the IBIp are ignored.
    pub fn parse_record(line: &str) -> Option<Minted> {
        let mut fields = line.split('\t');
        let name = RepositoryName::parse(fields.next()?).ok()?;
        let ibip = fields.next().filter(|f| !f.is_empty()).and_then(|f| Ibip::parse(f).ok());
        Some(Minted { name, ibip })
    }
}

/// For people: `name<TAB>ibip`, or the name alone when there is no IBIp.
impl std::fmt::Display for Minted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Each part written into `f` directly: a `write!` per level of a
        // listing's line went through the formatting machinery again.
        std::fmt::Display::fmt(&self.name, f)?;
        match &self.ibip {
            Some(ibip) => {
                f.write_str("\t")?;
                std::fmt::Display::fmt(ibip, f)
            }
            None => Ok(()),
        }
    }
}

impl Subsystem {
    /// Checks that the host gives a prefix (Algorithm 1) and that the IP can be encoded.
    pub fn new(host: &str, port: u16, ip: Option<IpAddr>, ibip_port: u16, granularity: Granularity) -> Result<Self> {
        let prefix = Prefix::from_host(host, port)?;
        if let Some(ip) = ip {
            Ibip::new(ip, ibip_port, Timestamp::from_seconds(IBIP_EPOCH_SECONDS))?;
        }
        Ok(Subsystem { host: host.to_ascii_lowercase(), port, ip, ibip_port, granularity, prefix })
    }

    pub fn prefix(&self) -> &Prefix {
        &self.prefix
    }

    /// The repository name and (when the IP is known) the IBIp for a distributor date.
    pub fn identify(&self, date: Timestamp) -> Result<Minted> {
        let name = RepositoryName::from_prefix_and_date(&self.prefix, date)?;
        let ibip = self.ip.map(|ip| Ibip::new(ip, self.ibip_port, date)).transpose()?;
        Ok(Minted { name, ibip })
    }

    /// The IBIp of an existing name minted by this subsystem.
    pub fn ibip_of(&self, name: &RepositoryName) -> Result<Option<Ibip>> {
        self.ip.map(|ip| Ibip::new(ip, self.ibip_port, name.date())).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_with_and_without_an_ibip() {
        let with = Minted {
            name: RepositoryName::parse("sid.inpe.br/mtc-m18/2009/02.16.17.46").unwrap(),
            ibip: Some(Ibip::parse("8JMKD3MGP8W/34PGRBS").unwrap()),
        };
        let without = Minted { name: with.name.clone(), ibip: None };
        for m in [&with, &without] {
            assert_eq!(Minted::parse_record(&m.record()).as_ref(), Some(m));
            assert_eq!(Minted::parse_record(&format!("{}\tentry name", m.record())).as_ref(), Some(m));
        }
        assert_eq!(without.to_string(), "sid.inpe.br/mtc-m18/2009/02.16.17.46");
        assert_eq!(Minted::parse_record("not a name"), None);
    }
}
