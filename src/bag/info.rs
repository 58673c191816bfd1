//! `bag-info.txt` (RFC 8493 §2.2.2): ordered `Label: Value` lines, labels may
//! repeat, and continuation lines start with white space. This module owns
//! reading and writing them and the fields `ibi` relies on: the two
//! External-Identifier values (repository name and IBIp) and Payload-Oxum.

/// The metadata of a bag, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BagInfo {
    pub fields: Vec<(String, String)>,
}

/// Payload-Oxum: total octets and file count of the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Oxum {
    pub octets: u64,
    pub files: u64,
}

impl Oxum {
    pub fn parse(text: &str) -> Option<Oxum> {
        let (octets, files) = text.trim().split_once('.')?;
        Some(Oxum { octets: octets.parse().ok()?, files: files.parse().ok()? })
    }
}

impl std::fmt::Display for Oxum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.octets, self.files)
    }
}

impl BagInfo {
    /// Parses the text; `Err` gives the 1-based line of the first malformed line.
    pub fn parse(text: &str) -> Result<BagInfo, usize> {
        let mut fields: Vec<(String, String)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if line.trim().is_empty() {
                continue;
            }
            if line.starts_with([' ', '\t']) {
                let last = fields.last_mut().ok_or(i + 1)?;
                last.1.push(' ');
                last.1.push_str(line.trim());
                continue;
            }
            let (label, value) = line.split_once(':').ok_or(i + 1)?;
            if label.trim().is_empty() {
                return Err(i + 1);
            }
            fields.push((label.trim().to_string(), value.trim().to_string()));
        }
        Ok(BagInfo { fields })
    }

    pub fn push(&mut self, label: &str, value: impl Into<String>) {
        self.fields.push((label.to_string(), value.into()));
    }

    /// Every value of a label (labels compare case-insensitively).
    pub fn values<'a, 'l>(&'a self, label: &'l str) -> impl Iterator<Item = &'a str> + use<'a, 'l> {
        self.fields.iter().filter(move |(l, _)| l.eq_ignore_ascii_case(label)).map(|(_, v)| v.as_str())
    }

    pub fn first<'a>(&'a self, label: &str) -> Option<&'a str> {
        self.values(label).next()
    }

    /// Removes every value of a label.
    pub fn remove(&mut self, label: &str) {
        self.fields.retain(|(l, _)| !l.eq_ignore_ascii_case(label));
    }

    pub fn oxum(&self) -> Option<Oxum> {
        self.first("Payload-Oxum").and_then(Oxum::parse)
    }

    pub fn to_text(&self) -> String {
        self.fields.iter().map(|(l, v)| format!("{l}: {v}\n")).collect()
    }
}

/// Reads and parses the bag-info of the bag whose files are `files` (`item` names
/// it in errors): every reader of bag-info goes through here.
pub fn read_info(files: &dyn crate::bag::BagFiles, item: &str) -> crate::Result<BagInfo> {
    let bad = |problem: String| crate::Error::Data { what: format!("{item}/{}", crate::bag::BAG_INFO_TXT), problem };
    let bytes = files.read(crate::bag::BAG_INFO_TXT).map_err(|e| bad(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| bad("it is not UTF-8".into()))?;
    BagInfo::parse(&text).map_err(|line| bad(format!("malformed line {line}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_labels_and_continuations() {
        let info =
            BagInfo::parse("External-Identifier: a\nExternal-Identifier: b\nContact-Name: Gerald\n  Banon\n").unwrap();
        assert_eq!(info.values("external-identifier").collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(info.first("Contact-Name"), Some("Gerald Banon"));
        assert_eq!(BagInfo::parse(&info.to_text()).unwrap(), info);
        assert_eq!(BagInfo::parse("no colon here\n"), Err(1));
    }

    #[test]
    fn oxum() {
        assert_eq!(Oxum::parse("279164409.1198"), Some(Oxum { octets: 279_164_409, files: 1198 }));
        assert_eq!(Oxum::parse("12"), None);
    }
}
