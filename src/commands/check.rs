//! `hushwatch check`: validate config and summarise what it will do.

use super::load_or_exit;
use crate::config::{Config, ALWAYS};
use crate::domain::calendar::Calendar;
use crate::domain::duration::format_duration;
use chrono::{DateTime, SecondsFormat, Utc};
use std::fmt::Write;
use std::path::Path;
use std::process::ExitCode;

pub fn run(config_path: &Path) -> ExitCode {
    match load_or_exit(config_path) {
        Ok(config) => {
            print!("{}", summary(config_path, &config, Utc::now()));
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// The human summary printed by `check`; `now` is an argument so tests can
/// pin it.
pub fn summary(path: &Path, config: &Config, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}: OK", path.display());
    let _ = writeln!(
        out,
        "listen {}, data in {}",
        config.server.listen,
        config.server.data_dir.display()
    );
    let _ = writeln!(out, "calendars:");
    let _ = writeln!(out, "  {ALWAYS}: built in, 24x7");
    for c in config.calendars.values() {
        let h = c.calendar.holidays();
        let _ = writeln!(
            out,
            "  {}: {}, {}; {} holiday date(s), {} holiday file(s)",
            c.name,
            c.calendar.timezone(),
            c.weekly_lines.join(" + "),
            h.listed_days(),
            h.file_count()
        );
    }
    let _ = writeln!(out, "streams:");
    for s in config.streams.values() {
        let calendar = config.calendar_of(s);
        let backstop = s
            .policy
            .max_silence
            .map(|m| format!(", max_silence {}", format_duration(m)))
            .unwrap_or_default();
        let notify = if s.notify.is_empty() {
            "(none)".to_string()
        } else {
            s.notify.join(", ")
        };
        let _ = writeln!(
            out,
            "  {}: calendar {}, fires after {} of business silence{backstop}; notify {notify}",
            s.name,
            s.calendar,
            format_duration(s.policy.threshold),
        );
        let _ = writeln!(
            out,
            "    next business window: {}",
            next_window(&calendar, now)
        );
    }
    for w in &config.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

fn next_window(calendar: &Calendar, now: DateTime<Utc>) -> String {
    let tz = calendar.timezone();
    let local = |t: DateTime<Utc>| {
        t.with_timezone(&tz)
            .to_rfc3339_opts(SecondsFormat::Secs, false)
    };
    match calendar.next_window(now) {
        Some(w) if w.start <= now => format!("open now, until {}", local(w.end)),
        Some(w) => format!("{} to {}", local(w.start), local(w.end)),
        None => "none within ten years: only max_silence can fire".to_string(),
    }
}
