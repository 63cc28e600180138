//! `[calendars.NAME]`: time zone, weekly hours, holidays and holiday files
//! (read here, at load, so a missing file is a config error).

use super::reader::{join, Reader};
use super::{Config, StreamConfig};
use crate::clock::{Clock, SystemClock};
use crate::domain::calendar::Calendar;
use crate::domain::holidays::{parse_holiday, Holidays};
use crate::domain::ics::{parse_ics_bytes, IcsCalendar};
use crate::domain::weekly::WeeklyHours;
use std::path::Path;
use std::sync::Arc;
use toml::Table;

/// The calendar every config has without declaring it: 24x7, UTC.
pub const ALWAYS: &str = "always";

#[derive(Debug, Clone)]
pub struct CalendarConfig {
    pub name: String,
    pub calendar: Arc<Calendar>,
    pub weekly_lines: Vec<String>,
}

impl Config {
    pub fn calendar_of(&self, stream: &StreamConfig) -> Arc<Calendar> {
        self.calendars
            .get(&stream.calendar)
            .map(|c| Arc::clone(&c.calendar))
            .unwrap_or_else(|| Arc::new(Calendar::always()))
    }

    /// The zone a stream's times are read in (pages, `audit subject`): its
    /// calendar's; UTC for an unknown stream.
    pub fn zone_of(&self, stream: &str) -> chrono_tz::Tz {
        self.streams
            .get(stream)
            .map_or(chrono_tz::UTC, |s| self.calendar_of(s).timezone())
    }
}

pub(super) fn read_calendar(
    r: &mut Reader<'_>,
    path: &str,
    name: &str,
    t: &Table,
    base_dir: &Path,
) -> Option<CalendarConfig> {
    r.reject_unknown(
        path,
        t,
        &["timezone", "weekly", "holidays", "holiday_files"],
    );
    if name == ALWAYS {
        r.error(
            path,
            "\"always\" is built in (24x7, UTC); choose another name",
        );
        return None;
    }
    let tz = r.req_string(path, t, "timezone").and_then(|zone| {
        zone.parse::<chrono_tz::Tz>().map_err(|_| {
            r.error(
                &join(path, "timezone"),
                format!("{zone:?} is not an IANA time zone (e.g. \"Asia/Tokyo\", \"Europe/London\")"),
            )
        })
        .ok()
    });
    let weekly_lines = r.string_list(path, t, "weekly", false);
    if !t.contains_key("weekly") || weekly_lines.is_empty() {
        r.error(
            &join(path, "weekly"),
            "needs at least one line such as \"mon-fri 09:00-18:00\"",
        );
    }
    let mut weekly = WeeklyHours::default();
    for (i, line) in weekly_lines.iter().enumerate() {
        match WeeklyHours::parse_lines(std::slice::from_ref(line)) {
            Ok(_) => {}
            Err(e) => r.error(&format!("{path}.weekly[{i}]"), e.to_string()),
        }
    }
    if let Ok(all) = WeeklyHours::parse_lines(&weekly_lines) {
        weekly = all;
    }
    let mut ranges = Vec::new();
    for (i, text) in r.string_list(path, t, "holidays", false).iter().enumerate() {
        match parse_holiday(text) {
            Ok(range) => ranges.push(range),
            Err(e) => r.error(&format!("{path}.holidays[{i}]"), e.to_string()),
        }
    }
    let mut files = Vec::new();
    for (i, file) in r
        .string_list(path, t, "holiday_files", false)
        .iter()
        .enumerate()
    {
        if let Some(ics) = read_ics(
            r,
            &format!("{path}.holiday_files[{i}]"),
            &base_dir.join(file),
        ) {
            files.push(ics);
        }
    }
    Some(CalendarConfig {
        name: name.to_string(),
        calendar: Arc::new(Calendar::new(tz?, weekly, Holidays::new(ranges, files))),
        weekly_lines,
    })
}

fn read_ics(r: &mut Reader<'_>, path: &str, file: &Path) -> Option<IcsCalendar> {
    // Bytes, not a String: some exporters fold lines inside a UTF-8 character.
    let bytes = std::fs::read(file)
        .map_err(|e| r.error(path, format!("cannot read {}: {e}", file.display())))
        .ok()?;
    // Recurring holidays are expanded ten years either side of the day the
    // config is loaded (start-up and every reload), in UTC: a day's offset
    // at either end of a 20-year window changes nothing in practice.
    let today = SystemClock.now().date_naive();
    let ics = parse_ics_bytes(&bytes, today)
        .map_err(|e| r.error(path, format!("{}: {e}", file.display())))
        .ok()?;
    if ics.skipped_timed_events > 0 {
        r.warnings.push(format!(
            "{path}: {} timed event(s) in {} ignored; only all-day events are holidays",
            ics.skipped_timed_events,
            file.display()
        ));
    }
    Some(ics)
}
