//! Text made safe for the markup `ibi` writes (PREMIS and other XML, HTML):
//! the five markup characters as entities, and every character XML 1.0 cannot
//! hold at all (C0 controls but tab, newline and carriage return; U+FFFE and
//! U+FFFF) written out visibly as `\u{…}`, along with the C1 controls and DEL,
//! so that any input (a reason, bag-info, a name, a path carried from another
//! collection) gives a well-formed document and can never drive a terminal
//! that shows it.

/// Whether `c` cannot stand in markup as itself.
fn unwritable(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{fffe}' | '\u{ffff}')
}

/// `text` as XML or HTML character data or an attribute value (either quote).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if unwritable(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// The first character of `text` that no document can hold as itself, if any:
/// what a field that reaches markup refuses at the door.
pub fn first_unwritable(text: &str) -> Option<char> {
    text.chars().find(|c| unwritable(*c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_character_xml_cannot_hold_is_written_visibly() {
        let hostile = "a\u{1b}]0;PWNED\u{7}b\u{1}\u{fffe}\u{85}<&>\"'\tok\n";
        let out = escape(hostile);
        assert!(out.chars().all(|c| !unwritable(c)), "{out:?}");
        assert_eq!(out, "a\\u{1b}]0;PWNED\\u{7}b\\u{1}\\u{fffe}\\u{85}&lt;&amp;&gt;&quot;&#39;\tok\n");
        assert_eq!(first_unwritable("fine\ttext\n"), None);
        assert_eq!(first_unwritable("bell\u{7}"), Some('\u{7}'));
    }
}
