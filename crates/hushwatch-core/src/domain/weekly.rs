//! The weekly-hours grammar: `"DAYS RANGES"` lines such as
//! `mon-fri 09:00-12:30,13:30-17:30` or `fri-mon 22:00-06:00`.
//!
//! A parsed [`WeeklyHours`] only holds windows that are valid by
//! construction, so the calendar maths never has to re-check them.

use chrono::Weekday;
use std::fmt;

/// Minutes in a day; a window end may reach up to two days' worth because an
/// overnight window (end <= start) continues into the next day.
pub const MINUTES_PER_DAY: u32 = 24 * 60;

/// One window that starts on a given weekday, in minutes after local midnight.
/// `end_minute` exceeds [`MINUTES_PER_DAY`] for overnight windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DayWindow {
    pub start_minute: u32,
    pub end_minute: u32,
}

/// Windows per weekday, indexed Monday = 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WeeklyHours {
    days: [Vec<DayWindow>; 7],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeeklyError(String);

impl fmt::Display for WeeklyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WeeklyError {}

impl WeeklyHours {
    /// Every day, all day: the built-in `always` calendar.
    pub fn always() -> WeeklyHours {
        let full = vec![DayWindow {
            start_minute: 0,
            end_minute: MINUTES_PER_DAY,
        }];
        WeeklyHours {
            days: std::array::from_fn(|_| full.clone()),
        }
    }

    /// Parses several lines; windows from all lines accumulate.
    pub fn parse_lines<S: AsRef<str>>(lines: &[S]) -> Result<WeeklyHours, WeeklyError> {
        let mut hours = WeeklyHours::default();
        for line in lines {
            hours.add_line(line.as_ref())?;
        }
        Ok(hours)
    }

    fn add_line(&mut self, line: &str) -> Result<(), WeeklyError> {
        let mut parts = line.split_whitespace();
        let (Some(days), Some(ranges), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(WeeklyError(format!(
                "{line:?} is not \"DAYS RANGES\" (e.g. \"mon-fri 09:00-18:00\")"
            )));
        };
        let weekdays = parse_days(days)?;
        let windows = ranges
            .split(',')
            .map(parse_range)
            .collect::<Result<Vec<_>, _>>()?;
        for day in weekdays {
            let slot = &mut self.days[day.num_days_from_monday() as usize];
            slot.extend(windows.iter().copied());
            slot.sort();
            slot.dedup();
        }
        Ok(())
    }

    /// Windows that start on `day`, sorted by start. They may overlap; the
    /// calendar merges overlapping time so it counts once.
    pub fn windows(&self, day: Weekday) -> &[DayWindow] {
        &self.days[day.num_days_from_monday() as usize]
    }

    pub fn is_empty(&self) -> bool {
        self.days.iter().all(Vec::is_empty)
    }
}

fn parse_days(text: &str) -> Result<Vec<Weekday>, WeeklyError> {
    let mut days = Vec::new();
    for item in text.split(',') {
        match item.split_once('-') {
            Some((from, to)) => {
                let (from, to) = (parse_day(from)?, parse_day(to)?);
                // Ranges wrap around the week: fri-mon is fri, sat, sun, mon.
                let mut day = from;
                days.push(day);
                while day != to {
                    day = day.succ();
                    days.push(day);
                }
            }
            None => days.push(parse_day(item)?),
        }
    }
    Ok(days)
}

fn parse_day(text: &str) -> Result<Weekday, WeeklyError> {
    const NAMES: [(&str, Weekday); 7] = [
        ("mon", Weekday::Mon),
        ("tue", Weekday::Tue),
        ("wed", Weekday::Wed),
        ("thu", Weekday::Thu),
        ("fri", Weekday::Fri),
        ("sat", Weekday::Sat),
        ("sun", Weekday::Sun),
    ];
    let lower = text.to_ascii_lowercase();
    NAMES
        .iter()
        .find(|(name, _)| *name == lower)
        .map(|(_, day)| *day)
        .ok_or_else(|| {
            WeeklyError(format!(
                "{text:?} is not a day (use mon, tue, wed, thu, fri, sat or sun)"
            ))
        })
}

fn parse_range(text: &str) -> Result<DayWindow, WeeklyError> {
    let (start, end) = text.split_once('-').ok_or_else(|| {
        WeeklyError(format!(
            "{text:?} is not a time range (e.g. \"09:00-18:00\")"
        ))
    })?;
    let start_minute = parse_clock(start, false)?;
    let mut end_minute = parse_clock(end, true)?;
    // An end at or before the start means the window runs past midnight.
    if end_minute <= start_minute {
        end_minute += MINUTES_PER_DAY;
    }
    Ok(DayWindow {
        start_minute,
        end_minute,
    })
}

fn parse_clock(text: &str, is_end: bool) -> Result<u32, WeeklyError> {
    let bad = || {
        WeeklyError(format!(
            "{text:?} is not a time of day (use HH:MM, 00:00 to 24:00)"
        ))
    };
    let (h, m) = text.split_once(':').ok_or_else(bad)?;
    if h.len() != 2 || m.len() != 2 {
        return Err(bad());
    }
    let hour: u32 = h.parse().map_err(|_| bad())?;
    let minute: u32 = m.parse().map_err(|_| bad())?;
    if minute > 59 || hour > 24 || (hour == 24 && minute != 0) {
        return Err(bad());
    }
    if hour == 24 && !is_end {
        return Err(WeeklyError(format!(
            "{text:?} can only end a window, not start one"
        )));
    }
    Ok(hour * 60 + minute)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: u32, end: u32) -> DayWindow {
        DayWindow {
            start_minute: start,
            end_minute: end,
        }
    }

    #[test]
    fn weekday_range_and_split_day() {
        let h = WeeklyHours::parse_lines(&["mon-fri 09:00-12:30,13:30-17:30"]).unwrap();
        assert_eq!(h.windows(Weekday::Wed), &[w(540, 750), w(810, 1050)]);
        assert!(h.windows(Weekday::Sat).is_empty());
    }

    #[test]
    fn ranges_wrap_and_lists_combine() {
        let h = WeeklyHours::parse_lines(&["fri-mon 10:00-11:00", "wed,thu 08:00-09:00"]).unwrap();
        for day in [
            Weekday::Fri,
            Weekday::Sat,
            Weekday::Sun,
            Weekday::Mon,
            Weekday::Wed,
            Weekday::Thu,
        ] {
            assert_eq!(h.windows(day).len(), 1, "{day}");
        }
        assert!(h.windows(Weekday::Tue).is_empty());
    }

    #[test]
    fn overnight_and_full_day() {
        let h =
            WeeklyHours::parse_lines(&["mon 22:00-06:00", "tue 00:00-24:00", "wed 08:00-08:00"])
                .unwrap();
        assert_eq!(h.windows(Weekday::Mon), &[w(1320, 1800)]);
        assert_eq!(h.windows(Weekday::Tue), &[w(0, 1440)]);
        assert_eq!(h.windows(Weekday::Wed), &[w(480, 1920)]);
    }

    #[test]
    fn errors_say_what_to_fix() {
        let cases = [
            ("monday 09:00-17:00", "is not a day"),
            ("mon 9:00-17:00", "is not a time of day"),
            ("mon 09:00-24:30", "is not a time of day"),
            ("mon 24:00-02:00", "can only end a window"),
            ("mon 09:00", "is not a time range"),
            ("mon-fri", "is not \"DAYS RANGES\""),
            ("mon 09:00-10:00 extra", "is not \"DAYS RANGES\""),
        ];
        for (line, expected) in cases {
            let err = WeeklyHours::parse_lines(&[line]).unwrap_err().to_string();
            assert!(err.contains(expected), "{line:?}: {err}");
        }
    }
}
