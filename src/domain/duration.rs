//! Human durations in configuration: `90s`, `45m`, `6h`, `1h30m`, `2d`.
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

const UNITS: [(char, i64); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];

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
    let mut total: i64 = 0;
    let mut rest = text;
    let mut next_unit = 0usize;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        let value: i64 = rest[..digits].parse().ok()?;
        let unit = rest[digits..].chars().next()?;
        let position = UNITS[next_unit..].iter().position(|(u, _)| *u == unit)?;
        let seconds = UNITS[next_unit + position].1;
        total = total.checked_add(value.checked_mul(seconds)?)?;
        next_unit += position + 1;
        rest = &rest[digits + unit.len_utf8()..];
    }
    TimeDelta::try_seconds(total)
}

/// Formats a duration the way it would be written in config (`1h30m`).
pub fn format_duration(d: TimeDelta) -> String {
    let mut secs = d.num_seconds();
    if secs == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    if secs < 0 {
        out.push('-');
        secs = -secs;
    }
    for (unit, size) in UNITS {
        if secs >= size {
            out.push_str(&format!("{}{}", secs / size, unit));
            secs %= size;
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

fn unit_word(word: &str) -> Option<char> {
    let word = word.trim_end_matches('s');
    match word {
        "day" | "d" => Some('d'),
        "hour" | "hr" | "h" => Some('h'),
        "minute" | "min" | "m" => Some('m'),
        "second" | "sec" => Some('s'),
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
        let err = parse_duration("45 minutes").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#""45 minutes" is not a duration (try "45m")"#
        );
    }

    #[test]
    fn format_round_trips() {
        for text in ["90s", "45m", "6h", "1h30m", "2d", "1d2h3m4s"] {
            assert_eq!(
                format_duration(parse_duration(text).unwrap()),
                text.replace("90s", "1m30s")
            );
        }
    }
}
