//! Human wording for durations and instants, shared by the status page and
//! `hushwatch status`: "2h13m", "Mon 13:00 Asia/Tokyo · 04:00 UTC".

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;

/// True for characters that must not reach a person's screen from request
/// text: control characters (C0, DEL, C1: they move a terminal's cursor or
/// recolour it) and the invisible formatting characters, above all the
/// bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069),
/// which make `evil\u{202e}txt.exe` read as `evilexe.txt` (CVE-2021-42574,
/// "Trojan Source"). The list is Unicode's `Cf` (format) category plus the
/// line and paragraph separators; both renderers (the HTML status page and
/// `hushwatch status`) drop them through [`displayable`], so the two always
/// agree.
pub fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{0600}'..='\u{0605}'
                | '\u{061C}'
                | '\u{06DD}'
                | '\u{070F}'
                | '\u{0890}'..='\u{0891}'
                | '\u{08E2}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0001}'
                | '\u{E0020}'..='\u{E007F}'
        )
}

/// `s` without its [`hidden`] characters.
pub fn displayable(s: &str) -> String {
    s.chars().filter(|&c| !hidden(c)).collect()
}

/// [`displayable`] text cut to at most `max` characters ("…" marks the
/// cut): request text (an author, a comment) of up to a kilobyte must not
/// stretch a table row; the full text is shown where it has room.
pub fn short(s: &str, max: usize) -> String {
    let s = displayable(s);
    if s.chars().count() <= max {
        return s;
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A duration as a person reads it at a glance: the two largest units,
/// rounded down ("2h13m", "3d4h", "47m", "12s"). Negative counts as zero.
pub fn human_duration(d: TimeDelta) -> String {
    let secs = d.num_seconds().max(0);
    let (days, hours, minutes) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60);
    if days > 0 {
        if hours > 0 {
            format!("{days}d{hours}h")
        } else {
            format!("{days}d")
        }
    } else if hours > 0 {
        if minutes > 0 {
            format!("{hours}h{minutes:02}m")
        } else {
            format!("{hours}h")
        }
    } else if minutes > 0 {
        format!("{minutes}m")
    } else {
        format!("{secs}s")
    }
}

/// Within this distance of now a weekday names the day unambiguously.
const NEAR: TimeDelta = TimeDelta::days(6);

/// `t` on the wall clock of `tz`, with the zone's name: "Mon 13:00
/// Asia/Tokyo"; further than six days from `now` the date is added
/// ("Mon 2026-12-07 13:00 Asia/Tokyo").
pub fn zoned(t: DateTime<Utc>, tz: Tz, now: DateTime<Utc>) -> String {
    let local = t.with_timezone(&tz);
    let pattern = if (t - now).abs() < NEAR {
        "%a %H:%M"
    } else {
        "%a %Y-%m-%d %H:%M"
    };
    format!("{} {}", local.format(pattern), tz.name())
}

/// The same instant in UTC, short: "04:00 UTC" (with the date when far).
pub fn utc(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let pattern = if (t - now).abs() < NEAR {
        "%H:%M UTC"
    } else {
        "%Y-%m-%d %H:%M UTC"
    };
    t.format(pattern).to_string()
}

/// Both: "Mon 13:00 Asia/Tokyo · 04:00 UTC"; a UTC calendar says it once.
pub fn zoned_and_utc(t: DateTime<Utc>, tz: Tz, now: DateTime<Utc>) -> String {
    if tz == chrono_tz::UTC {
        return zoned(t, tz, now);
    }
    format!("{} · {}", zoned(t, tz, now), utc(t, now))
}

/// RFC 3339 in the calendar's zone ("2026-11-30T13:00:00+09:00"): the
/// `*_local` fields of `/v1/status`.
pub fn local_rfc3339(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
}

/// A page's instant on the calendar's wall clock with the zone's
/// abbreviation: "2026-12-03 14:02 JST" (pages and `audit subject`).
pub fn local_stamp(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string()
}

/// `local_stamp` to the second, where instants close together are compared
/// (a grant's and a revocation's event times).
pub fn local_stamp_secs(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz)
        .format("%Y-%m-%d %H:%M:%S %Z")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn durations_read_as_two_units() {
        let d = |s| human_duration(TimeDelta::seconds(s));
        assert_eq!(d(2 * 3600 + 13 * 60 + 59), "2h13m");
        assert_eq!(d(3600 + 5 * 60), "1h05m");
        assert_eq!(d(3 * 3600), "3h");
        assert_eq!(d(47 * 60 + 30), "47m");
        assert_eq!(d(12), "12s");
        assert_eq!(d(0), "0s");
        assert_eq!(d(-5), "0s");
        assert_eq!(d(3 * 86_400 + 4 * 3600 + 59 * 60), "3d4h");
        assert_eq!(d(2 * 86_400 + 59), "2d");
    }

    #[test]
    fn instants_name_the_calendar_zone_and_utc() {
        let now = at("2026-11-30T10:00:00+09:00");
        let t = at("2026-11-30T13:00:00+09:00");
        let tokyo = chrono_tz::Asia::Tokyo;
        assert_eq!(zoned(t, tokyo, now), "Mon 13:00 Asia/Tokyo");
        assert_eq!(utc(t, now), "04:00 UTC");
        assert_eq!(
            zoned_and_utc(t, tokyo, now),
            "Mon 13:00 Asia/Tokyo · 04:00 UTC"
        );
        assert_eq!(zoned_and_utc(t, chrono_tz::UTC, now), "Mon 04:00 UTC");
        assert_eq!(local_rfc3339(t, tokyo), "2026-11-30T13:00:00+09:00");
    }

    #[test]
    fn far_instants_carry_their_date() {
        let now = at("2026-11-30T10:00:00Z");
        let t = at("2026-12-07T09:00:00Z");
        let ny = chrono_tz::America::New_York;
        assert_eq!(zoned(t, ny, now), "Mon 2026-12-07 04:00 America/New_York");
        assert_eq!(utc(t, now), "2026-12-07 09:00 UTC");
    }

    #[test]
    fn bidi_controls_and_other_invisible_characters_are_dropped() {
        let hostile =
            "user.\u{202e}detaleb\u{2066}x\u{2069}\u{200f}\u{feff}\u{1b}[31m\u{85}\u{e0041}.ok";
        assert_eq!(displayable(hostile), "user.detalebx[31m.ok");
        assert_eq!(displayable("ユーザー.作成 ✓"), "ユーザー.作成 ✓");
    }

    #[test]
    fn short_cuts_long_request_text_and_drops_hidden_characters() {
        assert_eq!(short("ana", 5), "ana");
        assert_eq!(short("a\u{202e}bcdefgh", 5), "abcd…");
        assert_eq!(short("abcde", 5), "abcde");
    }

    #[test]
    fn a_page_stamp_reads_in_the_calendar_zone() {
        let t = at("2026-12-03T05:02:30Z");
        assert_eq!(
            local_stamp(t, chrono_tz::Asia::Tokyo),
            "2026-12-03 14:02 JST"
        );
        assert_eq!(local_stamp(t, chrono_tz::UTC), "2026-12-03 05:02 UTC");
        assert_eq!(
            local_stamp_secs(t, chrono_tz::Asia::Tokyo),
            "2026-12-03 14:02:30 JST"
        );
    }
}
