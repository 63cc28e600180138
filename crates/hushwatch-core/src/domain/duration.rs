//! Human durations in configuration: `90s`, `45m`, `6h`, `1h30m`, `2d`,
//! and milliseconds for backoffs and timeouts: `300ms`, `1s500ms` (the unit
//! Prometheus and Alertmanager durations also accept).
//!
//! Units must appear largest first and at most once, so `30m1h` or `1h1h` are
//! rejected rather than silently summed: a typo in an alert threshold is
//! better caught at `check` time than discovered during an incident.

use chrono::TimeDelta;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError {
    input: String,
    hint: String,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a duration (try {:?})",
            self.input, self.hint
        )
    }
}

impl std::error::Error for DurationError {}

/// Units, largest first, with their length in milliseconds. `ms` is listed
/// where its size puts it, and matched before `m` (see `unit_at`).
const UNITS: [(&str, i64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// Parses a duration. A bare `0` is accepted because "0 = off" is how
/// optional intervals (e.g. reminders) are switched off.
pub fn parse_duration(input: &str) -> Result<TimeDelta, DurationError> {
    let text = input.trim();
    if text == "0" {
        return Ok(TimeDelta::zero());
    }
    parse_units(text).ok_or_else(|| DurationError {
        input: input.to_string(),
        hint: suggest(text),
    })
}

fn parse_units(text: &str) -> Option<TimeDelta> {
    if text.is_empty() {
        return None;
    }
    let mut total_ms: i64 = 0;
    let mut rest = text;
    let mut next_unit = 0usize;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        let value: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let index = unit_at(rest)?;
        // Each unit at most once, largest first.
        if index < next_unit {
            return None;
        }
        let (unit, size) = UNITS[index];
        total_ms = total_ms.checked_add(value.checked_mul(size)?)?;
        next_unit = index + 1;
        rest = &rest[unit.len()..];
    }
    TimeDelta::try_milliseconds(total_ms)
}

/// Index in `UNITS` of the unit `rest` starts with. The unit runs to the
/// next digit, so `5ms` is milliseconds and never minutes followed by junk.
fn unit_at(rest: &str) -> Option<usize> {
    let end = rest
        .find(|c: char| c.is_ascii_digit())
        .unwrap_or(rest.len());
    UNITS.iter().position(|(u, _)| *u == &rest[..end])
}

/// Formats a duration the way it would be written in config (`1h30m`,
/// `1s500ms`); below a millisecond is dropped, as config cannot write it.
pub fn format_duration(d: TimeDelta) -> String {
    let mut ms = d.num_milliseconds();
    if ms == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    if ms < 0 {
        out.push('-');
        ms = -ms;
    }
    for (unit, size) in UNITS {
        if ms >= size {
            out.push_str(&format!("{}{}", ms / size, unit));
            ms %= size;
        }
    }
    out
}

/// Builds the "(try …)" hint: turns `6 hours` or `six hours` into `6h`,
/// otherwise shows the canonical example.
fn suggest(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut words = lower.split_whitespace();
    let (Some(number), Some(unit)) = (words.next(), words.next()) else {
        return "6h".to_string();
    };
    let value = number.parse::<u32>().ok().or_else(|| number_word(number));
    let unit = unit_word(unit);
    match (value, unit) {
        (Some(v), Some(u)) => format!("{v}{u}"),
        _ => "6h".to_string(),
    }
}

fn number_word(word: &str) -> Option<u32> {
    const WORDS: [&str; 12] = [
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve",
    ];
    WORDS.iter().position(|w| *w == word).map(|i| i as u32 + 1)
}

fn unit_word(word: &str) -> Option<&'static str> {
    // "ms" must be read before the plural "s" is trimmed, or it is minutes.
    if word == "ms" {
        return Some("ms");
    }
    let word = word.trim_end_matches('s');
    match word {
        "day" | "d" => Some("d"),
        "hour" | "hr" | "h" => Some("h"),
        "minute" | "min" | "m" => Some("m"),
        "second" | "sec" => Some("s"),
        "millisecond" | "msec" => Some("ms"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str) -> i64 {
        parse_duration(text).unwrap().num_seconds()
    }

    #[test]
    fn accepts_documented_forms() {
        assert_eq!(secs("90s"), 90);
        assert_eq!(secs("45m"), 2_700);
        assert_eq!(secs("6h"), 21_600);
        assert_eq!(secs("1h30m"), 5_400);
        assert_eq!(secs("2d"), 172_800);
        assert_eq!(secs("1d2h3m4s"), 93_784);
        assert_eq!(secs("0"), 0);
        assert_eq!(secs(" 6h "), 21_600);
    }

    #[test]
    fn accepts_milliseconds() {
        let ms = |text: &str| parse_duration(text).unwrap().num_milliseconds();
        assert_eq!(ms("300ms"), 300);
        assert_eq!(ms("1s500ms"), 1_500);
        assert_eq!(ms("1m0s250ms"), 60_250);
        assert_eq!(ms("2h5ms"), 7_200_005);
        for bad in ["500ms1s", "1ms1ms", "5mss", "5sm", "ms", "1.5ms", "1m s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn rejects_typos_and_reordered_units() {
        for bad in [
            "",
            "6",
            "h",
            "6x",
            "30m1h",
            "1h1h",
            "-5m",
            "1.5h",
            "6 h",
            "99999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn error_suggests_the_written_form() {
        let err = parse_duration("six hours").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#""six hours" is not a duration (try "6h")"#
        );
        let err = parse_duration("300 ms").unwrap_err();
        assert!(err.to_string().ends_with(r#"(try "300ms")"#), "{err}");
        let err = parse_duration("45 minutes").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#""45 minutes" is not a duration (try "45m")"#
        );
    }

    #[test]
    fn format_round_trips() {
        for text in [
            "90s", "45m", "6h", "1h30m", "2d", "1d2h3m4s", "300ms", "1s500ms", "1d5ms",
        ] {
            assert_eq!(
                format_duration(parse_duration(text).unwrap()),
                text.replace("90s", "1m30s")
            );
        }
    }
}
