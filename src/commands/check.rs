//! `hushwatch check`: validate config and summarise what it will do.

use super::load_or_exit;
use crate::clock::{Clock, SystemClock};
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
            print!("{}", summary(config_path, &config, SystemClock.now()));
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
    if let Some(admin) = config.server.admin_listen {
        let _ = writeln!(
            out,
            "admin_listen {admin}: status page, /v1/status, /metrics and admin routes only there"
        );
    }
    let _ = writeln!(
        out,
        "{}",
        if config.templates.admin_token.is_some() {
            "operator routes (/v1/silences, /v1/streams/NAME/acknowledge): on, with [server] admin_token"
        } else {
            "operator routes (/v1/silences, /v1/streams/NAME/acknowledge): off (404) without [server] admin_token"
        }
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
        if let Some(f) = &s.forward {
            let steps: Vec<String> = f.ladder.retry.iter().map(|d| format_duration(*d)).collect();
            let _ = writeln!(
                out,
                "    relays to {} ({}, {} secret(s)); retries after [{}] then every {} until it gives up after {}; pages at {:?} failures in a row, critical when a revocation waits {}; clock counts {}; bodies {}",
                crate::notify::redact_url(f.url.expose()),
                match f.order {
                    crate::domain::forward::Order::Subject => "ordered per subject",
                    crate::domain::forward::Order::Stream => "ordered per stream",
                    crate::domain::forward::Order::None => "unordered",
                },
                f.secrets.len(),
                steps.join(", "),
                steps.last().map_or("-", String::as_str),
                format_duration(f.ladder.give_up_after),
                f.ladder.alert_after,
                format_duration(f.critical_after),
                if f.clock == crate::config::forward::ForwardClock::Delivered {
                    "the app's 2xx"
                } else {
                    "arrivals"
                },
                if config.store.sealer.is_on() {
                    "encrypted at rest"
                } else {
                    "in plaintext"
                },
            );
        }
        for w in &s.maintenance {
            let _ = writeln!(
                out,
                "    maintenance {} .. {}: {}",
                w.from.to_rfc3339_opts(SecondsFormat::Secs, true),
                w.until.to_rfc3339_opts(SecondsFormat::Secs, true),
                w.comment
            );
        }
    }
    let audit = &config.audit;
    if audit.enabled {
        let signing = if audit.checkpoint_key.is_some() {
            "HMAC-signed"
        } else {
            "unsigned (set [audit] checkpoint_key to sign)"
        };
        let retain = audit
            .retain
            .map(|r| format!(", retain {}", format_duration(r)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "audit: on, checkpoints every {} {signing}{retain}",
            format_duration(audit.checkpoint_interval)
        );
    } else {
        let _ = writeln!(out, "audit: OFF");
    }
    for s in config.svix.values() {
        let _ = writeln!(
            out,
            "svix {}: POST /v1/svix/{}/operational, feeds {}; notify {}; {} mapped endpoint(s)",
            s.name,
            s.name,
            s.streams.join(", "),
            if s.notify.is_empty() {
                "(none)".to_string()
            } else {
                s.notify.join(", ")
            },
            s.endpoints.len()
        );
    }
    // The same warnings `serve` logs at start; they do not fail `check`.
    for w in &config.warnings {
        let _ = writeln!(out, "WARNING: {w}");
    }
    out
}

fn next_window(calendar: &Calendar, now: DateTime<Utc>) -> String {
    let tz = calendar.timezone();
    let local = |t: DateTime<Utc>| {
        t.with_timezone(&tz)
            .to_rfc3339_opts(SecondsFormat::Secs, false)
    };
    let Some(first) = calendar.next_window(now) else {
        return "none within ten years: only max_silence can fire".to_string();
    };
    // Windows that abut (overnight shifts, 24x7) read as one stretch.
    let mut end = first.end;
    for _ in 0..8 {
        match calendar.next_window(end) {
            Some(w) if w.start == end => end = w.end,
            _ => break,
        }
    }
    let continuing = calendar.next_window(end).is_some_and(|w| w.start == end);
    match (first.start <= now, continuing) {
        (true, true) => "open now, continuously for more than a week".to_string(),
        (true, false) => format!("open now, until {}", local(end)),
        (false, true) => format!(
            "from {}, continuously for more than a week",
            local(first.start)
        ),
        (false, false) => format!("{} to {}", local(first.start), local(end)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_shows_each_streams_next_business_window() {
        let text =
            "[calendars.tokyo]\ntimezone = \"Asia/Tokyo\"\nweekly = [\"mon-fri 09:00-18:00\"]\n\
                    [streams.identity]\ncalendar = \"tokyo\"\nsilence_threshold = \"6h\"\n\
                    [streams.always]\ncalendar = \"always\"\nsilence_threshold = \"1h\"\n";
        let config = crate::config::parse(text, Path::new("/tmp"), &|_| None).unwrap();
        // Saturday noon in Tokyo.
        let now = DateTime::parse_from_rfc3339("2026-12-05T12:00:00+09:00")
            .unwrap()
            .with_timezone(&Utc);
        let out = summary(Path::new("hw.toml"), &config, now);
        assert!(
            out.contains(
                "next business window: 2026-12-07T09:00:00+09:00 to 2026-12-07T18:00:00+09:00"
            ),
            "{out}"
        );
        assert!(
            out.contains("next business window: open now, continuously for more than a week"),
            "{out}"
        );
        assert!(
            out.contains("audit: on, checkpoints every 5m unsigned"),
            "{out}"
        );
    }
}
