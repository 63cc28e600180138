//! Log fields that come from a request (path segments, header values, ids,
//! event types) are written through [`Escaped`], so a client cannot forge log
//! lines (newlines, carriage returns), colour or clear a terminal (escape
//! sequences), or reorder what a reader sees (bidirectional overrides, the
//! "Trojan Source" trick, CVE-2021-42574).

use std::fmt;

/// Displays a string with control and bidi characters escaped as `\u{…}`;
/// a backslash is doubled so an escape cannot be faked by typing one.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

/// Characters that change how the surrounding text is displayed: explicit
/// embeddings and overrides (U+202A–U+202E), isolates (U+2066–U+2069) and
/// the invisible direction marks (U+200E, U+200F, U+061C).
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// C0 controls, DEL and C1 controls (`char::is_control`), plus bidi marks.
fn needs_escape(c: char) -> bool {
    c.is_control() || is_bidi(c)
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(|c: char| needs_escape(c) || c == '\\') {
            f.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            if c == '\\' {
                f.write_str("\\\\")?;
            } else {
                write!(f, "\\u{{{:x}}}", u32::from(c))?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::Escaped;

    #[test]
    fn controls_and_bidi_are_escaped_and_the_rest_kept() {
        let hostile = "a\nb\r\u{1b}[2J\u{202e}cod\u{2066}\u{200f}\u{85}\u{7f}\\ é 漢";
        let shown = Escaped(hostile).to_string();
        assert_eq!(
            shown,
            "a\\u{a}b\\u{d}\\u{1b}[2J\\u{202e}cod\\u{2066}\\u{200f}\\u{85}\\u{7f}\\\\ é 漢"
        );
        assert!(!shown.chars().any(|c| c.is_control()));
    }

    #[test]
    fn plain_text_is_unchanged() {
        assert_eq!(Escaped("identity-1.prod").to_string(), "identity-1.prod");
    }
}
