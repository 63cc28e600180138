//! Making page text safe for each medium and within each receiver's size
//! limits. Much of a page comes from requests (reconciliation subjects and
//! report ids, Svix endpoint ids, templated stream names, the summaries
//! built from them), so every notifier with markup escapes it, and every
//! field is cut to its receiver's documented limit on a character
//! boundary, saying how much was left out, rather than be refused: a
//! receiver that answers 400 loses the page for good (any other 4xx is a
//! permanent failure, `notify::http`).

use sha2::{Digest, Sha256};

/// Characters that change how a line reads without being seen: controls
/// (a newline in a one-line field would fake another line of the page, a
/// CR or NUL confuses receivers) and the invisible format characters
/// (U+202E shows the rest of the line reversed, U+2066..U+2069 isolate
/// runs, zero-width characters hide text).
fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{FEFF}'
        )
}

/// Shown in place of a hidden character, so the reader sees that one was
/// there.
const REPLACEMENT: char = '\u{FFFD}';

/// `text` with hidden characters replaced (one-line fields of text pages:
/// email subject and body lines, Slack).
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if is_hidden(c) { REPLACEMENT } else { c })
        .collect()
}

/// The marker that ends a cut text: `… (N more characters)`, with `note`
/// (e.g. `; the full text is in custom_details.summary`) inside the
/// parentheses.
fn cut_marker(left_out: usize, note: &str) -> String {
    format!("\u{2026} ({left_out} more characters{note})")
}

/// Renders `text` piece by piece (`render` maps one input character to
/// its output) into at most `max` output characters. When it does not
/// fit, ends with [`cut_marker`], counting the input characters left out;
/// the whole result, marker included, stays within `max`. Cuts only
/// between input characters, so an escape (`&amp;`) is never split.
fn render_bounded(
    text: &str,
    max: usize,
    note: &str,
    render: impl Fn(char, &mut String),
) -> String {
    let mut out = String::new();
    let mut out_chars = 0usize;
    let mut piece = String::new();
    let total_in = text.chars().count();
    // The marker is sized for the largest count it could show, so the cut
    // text plus marker never exceeds `max`.
    let reserve = cut_marker(total_in, note).chars().count();
    // Where to cut if it comes to that: (bytes of `out`, input characters
    // taken) at the last point where the marker still fits after them.
    let mut cut_at: Option<(usize, usize)> = None;
    for (taken_in, c) in text.chars().enumerate() {
        piece.clear();
        render(c, &mut piece);
        let n = piece.chars().count();
        if cut_at.is_none() && out_chars + n > max.saturating_sub(reserve) {
            cut_at = Some((out.len(), taken_in));
        }
        if out_chars + n > max {
            let (bytes, taken) = cut_at.unwrap_or((out.len(), taken_in));
            out.truncate(bytes);
            out.push_str(&cut_marker(total_in - taken, note));
            return out;
        }
        out.push_str(&piece);
        out_chars += n;
    }
    out
}

/// Plain text cut to `max` characters (JSON fields: serde escapes them).
pub fn bounded(text: &str, max: usize, note: &str) -> String {
    render_bounded(text, max, note, |c, out| out.push(c))
}

/// One-line plain text (hidden characters replaced) cut to `max`.
pub fn bounded_line(text: &str, max: usize, note: &str) -> String {
    render_bounded(text, max, note, |c, out| {
        out.push(if is_hidden(c) { REPLACEMENT } else { c })
    })
}

/// Slack mrkdwn text: `&`, `<` and `>` become `&amp;`, `&lt;` and `&gt;`,
/// as Slack requires for text not meant as markup
/// (https://api.slack.com/reference/surfaces/formatting#escaping). That
/// also disarms every special mention and link (`<!channel>`, `<!here>`,
/// `<@U…>`, `<#C…>`, `<!subteam^…>`, `<https://…|label>`), which all start
/// with `<`; a plain `@channel` is not a mention in text posted through
/// the API. A backtick would open or close a code span (inside one, let
/// the rest be read as markup), so it is shown as the look-alike U+02CB
/// MODIFIER LETTER GRAVE ACCENT; the code spans of a page are only those
/// hushwatch writes. Hidden characters are replaced; cut to `max` output
/// characters.
pub fn slack(text: &str, max: usize) -> String {
    render_bounded(text, max, "", slack_char)
}

/// [`slack`], for a value inside a code span (the same escaping: named
/// apart so each call site says which it is).
pub fn slack_code(text: &str, max: usize) -> String {
    slack(text, max)
}

fn slack_char(c: char, out: &mut String) {
    match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        '`' => out.push('\u{02CB}'),
        c if is_hidden(c) => out.push(REPLACEMENT),
        c => out.push(c),
    }
}

/// HTML element content and quoted attribute values (the email's HTML
/// part): `&`, `<`, `>`, `"` and `'` escaped; hidden characters replaced,
/// as in every other rendering. Not bounded: callers bound the text.
pub fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' | '\t' => out.push(c),
            c if is_hidden(c) => out.push(REPLACEMENT),
            c => out.push(c),
        }
    }
    out
}

/// An identifier (Alertmanager label value, PagerDuty `dedup_key`) of at
/// most `max` characters. Unlike [`bounded`], two different long values
/// never come out equal: a value that does not fit keeps its start plus a
/// digest of the whole value, so distinct alerts stay distinct.
pub fn bounded_id(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let suffix = format!("\u{2026}{hex}");
    let keep = max.saturating_sub(suffix.chars().count());
    let mut out: String = text.chars().take(keep).collect();
    out.push_str(&suffix);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_unchanged() {
        assert_eq!(bounded("abc", 10, ""), "abc");
        assert_eq!(slack("a & b", 100), "a &amp; b");
    }

    #[test]
    fn cut_text_fits_and_counts_what_was_left_out() {
        let text = "é".repeat(5000);
        let cut = bounded(&text, 1024, "; see details");
        assert!(cut.chars().count() <= 1024, "{}", cut.chars().count());
        let kept = cut.chars().take_while(|c| *c == 'é').count();
        assert!(cut.ends_with(&format!("({} more characters; see details)", 5000 - kept)));
        // Exactly at the limit is not cut.
        assert_eq!(bounded(&text, 5000, ""), text);
    }

    #[test]
    fn slack_escapes_mentions_links_and_code_spans() {
        let hostile = "<!channel> <https://evil.example/login|Click> <@U123> &";
        let out = slack(hostile, 1000);
        assert!(!out.contains('<') && !out.contains('>'), "{out}");
        assert_eq!(
            out,
            "&lt;!channel&gt; &lt;https://evil.example/login|Click&gt; &lt;@U123&gt; &amp;"
        );
        assert_eq!(slack_code("a`b", 10), "a\u{02CB}b");
        assert_eq!(slack("x\ny\u{202E}z", 10), "x\u{FFFD}y\u{FFFD}z");
    }

    #[test]
    fn an_escape_is_never_split() {
        let out = slack(&"<".repeat(10_000), 100);
        assert!(out.chars().count() <= 100);
        let body = out.split('\u{2026}').next().unwrap();
        assert_eq!(body.len() % 4, 0, "{out}");
        assert!(body.chars().all(|c| "&lt;".contains(c)), "{out}");
    }

    #[test]
    fn long_ids_stay_distinct() {
        let a = bounded_id(&format!("{}a", "x".repeat(300)), 255);
        let b = bounded_id(&format!("{}b", "x".repeat(300)), 255);
        assert_ne!(a, b);
        assert!(a.chars().count() <= 255);
        assert_eq!(bounded_id("ep_1", 255), "ep_1");
    }
}
