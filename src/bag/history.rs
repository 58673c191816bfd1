//! An item's version history, as its own bag-info records it (ARCHITECTURE.md,
//! "Versions"). The current version is a plain bag at the name's place; each
//! earlier version is a complete bag of its own under `ibi-versions/<N>/`
//! (unchanged payload files shared by hard links), kept byte for byte as it was
//! when it was current, so its identity digest still holds. Bag-info chains the
//! versions: `Ibi-Version: N`, `Ibi-Version-Date`, one `Ibi-Earlier-Version:
//! <N> <date> <identity digest>` per earlier version, `Ibi-Withdrawn` on a
//! tombstone, and `Ibi-Origin`, the collection that minted the name. Because the
//! current tagmanifest covers bag-info, one identity digest vouches for the whole
//! chain. This module owns those labels: reading, checking and writing them.

use super::BagInfo;

/// The tag folder that holds earlier versions, one complete bag per number.
pub const VERSIONS_DIR: &str = "ibi-versions";
pub const VERSION: &str = "Ibi-Version";
pub const VERSION_DATE: &str = "Ibi-Version-Date";
pub const EARLIER_VERSION: &str = "Ibi-Earlier-Version";
pub const WITHDRAWN: &str = "Ibi-Withdrawn";
pub const ORIGIN: &str = "Ibi-Origin";

/// Labels only ibi writes: a deposit's `--meta` and an update's `--meta` may not set them.
pub const HISTORY_LABELS: [&str; 5] = [VERSION, VERSION_DATE, EARLIER_VERSION, WITHDRAWN, ORIGIN];

/// One earlier version: its number, when it became current (RFC 3339, UTC), and
/// its identity digest (sha256 of its tagmanifest, lowercase hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Earlier {
    pub number: u32,
    pub date: String,
    pub digest: String,
}

/// A withdrawal: when, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Withdrawal {
    pub date: String,
    pub reason: String,
}

/// The history fields of one bag-info.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The current version's number (1 when bag-info says nothing).
    pub version: u32,
    /// When the current version was made (absent for version 1: the name's date).
    pub date: Option<String>,
    /// Earlier versions, oldest first.
    pub earlier: Vec<Earlier>,
    /// Set when the current version is a tombstone.
    pub withdrawn: Option<Withdrawal>,
    /// The UUID URN of the collection that minted the name, when recorded.
    pub origin: Option<String>,
}

fn is_hex_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Earlier {
    fn parse(text: &str) -> Result<Earlier, String> {
        let mut parts = text.split_whitespace();
        let (Some(number), Some(date), Some(digest), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("{EARLIER_VERSION} \"{text}\" is not \"<number> <date> <sha256>\""));
        };
        let number = number.parse().map_err(|_| format!("{EARLIER_VERSION} \"{text}\": bad version number"))?;
        if !is_hex_digest(digest) {
            return Err(format!("{EARLIER_VERSION} \"{text}\": the digest is not 64 lowercase hex digits"));
        }
        Ok(Earlier { number, date: date.to_string(), digest: digest.to_string() })
    }
}

impl History {
    /// Reads the history labels; `Err` names the malformed label.
    pub fn of(info: &BagInfo) -> Result<History, String> {
        let version = match info.first(VERSION) {
            None => 1,
            Some(text) => {
                text.parse().ok().filter(|n| *n >= 1).ok_or(format!("{VERSION} \"{text}\" is not a number"))?
            }
        };
        let earlier = info.values(EARLIER_VERSION).map(Earlier::parse).collect::<Result<Vec<_>, _>>()?;
        let numbers: Vec<u32> = earlier.iter().map(|e| e.number).collect();
        if numbers != (1..version).collect::<Vec<_>>() {
            return Err(format!("{VERSION} {version} needs {EARLIER_VERSION} 1 to {} in order", version - 1));
        }
        let withdrawn = info.first(WITHDRAWN).map(|text| {
            let (date, reason) = text.split_once(' ').unwrap_or((text, ""));
            Withdrawal { date: date.to_string(), reason: reason.trim().to_string() }
        });
        Ok(History {
            version,
            date: info.first(VERSION_DATE).map(str::to_string),
            earlier,
            withdrawn,
            origin: info.first(ORIGIN).map(str::to_string),
        })
    }

    /// Writes these labels into `info`, replacing any it had.
    pub fn write_into(&self, info: &mut BagInfo) {
        for label in HISTORY_LABELS {
            info.remove(label);
        }
        if let Some(origin) = &self.origin {
            info.push(ORIGIN, origin.clone());
        }
        if self.version > 1 {
            info.push(VERSION, self.version.to_string());
        }
        if let Some(date) = &self.date {
            info.push(VERSION_DATE, date.clone());
        }
        for e in &self.earlier {
            info.push(EARLIER_VERSION, format!("{} {} {}", e.number, e.date, e.digest));
        }
        if let Some(w) = &self.withdrawn {
            info.push(WITHDRAWN, format!("{} {}", w.date, w.reason));
        }
    }

    /// The history of the next version: this one becomes earlier version `version`,
    /// made at `date` with identity `digest` (the current identity digest).
    pub fn next(&self, current_date: &str, digest: &str, now: &str) -> History {
        let mut earlier = self.earlier.clone();
        earlier.push(Earlier { number: self.version, date: current_date.to_string(), digest: digest.to_string() });
        History {
            version: self.version + 1,
            date: Some(now.to_string()),
            earlier,
            withdrawn: None,
            origin: self.origin.clone(),
        }
    }

    /// Whether `digest` is one of the earlier versions' identity digests.
    pub fn follows(&self, digest: &str) -> bool {
        self.earlier.iter().any(|e| e.digest == digest)
    }

    /// The path of earlier version `number`'s bag inside the item.
    pub fn version_dir(number: u32) -> String {
        format!("{VERSIONS_DIR}/{number}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(c: char) -> String {
        std::iter::repeat_n(c, 64).collect()
    }

    #[test]
    fn a_bag_without_labels_is_version_one() {
        let history = History::of(&BagInfo::default()).unwrap();
        assert_eq!(history.version, 1);
        assert!(history.earlier.is_empty() && history.withdrawn.is_none());
    }

    #[test]
    fn history_round_trips_and_chains() {
        let first = History { version: 1, origin: Some("urn:uuid:x".into()), ..History::default() };
        let second = first.next("2009-02-16T17:46:00Z", &digest('a'), "2026-11-22T10:00:00Z");
        let mut third = second.next("2026-11-22T10:00:00Z", &digest('b'), "2026-11-22T11:00:00Z");
        third.withdrawn = Some(Withdrawal { date: "2026-11-22T11:00:00Z".into(), reason: "duplicate of x".into() });
        let mut info = BagInfo::default();
        info.push("Title", "kept");
        third.write_into(&mut info);
        let read = History::of(&BagInfo::parse(&info.to_text()).unwrap()).unwrap();
        assert_eq!(read, third);
        assert!(read.follows(&digest('a')) && read.follows(&digest('b')) && !read.follows(&digest('c')));
        assert_eq!(info.first("Title"), Some("kept"));
    }

    #[test]
    fn gaps_and_bad_digests_are_refused() {
        let mut info = BagInfo::default();
        info.push(VERSION, "3");
        info.push(EARLIER_VERSION, format!("1 2009-02-16T17:46:00Z {}", digest('a')));
        assert!(History::of(&info).unwrap_err().contains("1 to 2"));
        let mut info = BagInfo::default();
        info.push(VERSION, "2");
        info.push(EARLIER_VERSION, "1 2009-02-16T17:46:00Z XYZ");
        assert!(History::of(&info).unwrap_err().contains("64 lowercase hex"));
    }
}
