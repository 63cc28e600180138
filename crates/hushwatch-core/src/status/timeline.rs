//! The 7-day timeline of one stream: business windows, arrivals and the
//! instants where a silence crossed the threshold. Pure: the caller passes
//! the calendar, the arrivals it read and `now`.

use crate::domain::calendar::{Calendar, Window};
use crate::domain::silence::{evaluate, SilencePolicy};
use chrono::{DateTime, TimeDelta, Utc};

/// How far back the timeline reaches.
pub const DAYS: i64 = 7;

#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// When watching began (silence before it was not counted).
    pub watched_from: DateTime<Utc>,
    /// Business windows inside `[start, end)`, clipped to it.
    pub windows: Vec<Window>,
    /// Arrivals inside the range, oldest first.
    pub arrivals: Vec<DateTime<Utc>>,
    /// Instants inside the range where a silence reached the threshold.
    pub crossings: Vec<DateTime<Utc>>,
    /// The store's cap was reached: older arrivals in the range are not shown.
    pub truncated: bool,
}

/// Builds the timeline ending at `now`. `arrivals` may be in any order;
/// `watch_started` is where the first silence began if nothing preceded it.
pub fn build(
    calendar: &Calendar,
    policy: &SilencePolicy,
    watch_started: DateTime<Utc>,
    mut arrivals: Vec<DateTime<Utc>>,
    truncated: bool,
    now: DateTime<Utc>,
) -> Timeline {
    let start = now - TimeDelta::days(DAYS);
    arrivals.retain(|t| *t >= start && *t <= now);
    arrivals.sort();
    arrivals.dedup();
    Timeline {
        start,
        end: now,
        watched_from: watch_started,
        windows: windows(calendar, start, now),
        crossings: crossings(calendar, policy, watch_started, &arrivals, truncated, now)
            .into_iter()
            .filter(|t| *t >= start)
            .collect(),
        arrivals,
        truncated,
    }
}

fn windows(calendar: &Calendar, start: DateTime<Utc>, end: DateTime<Utc>) -> Vec<Window> {
    let mut out = Vec::new();
    let mut at = start;
    while let Some(w) = calendar.next_window(at) {
        if w.start >= end {
            break;
        }
        out.push(Window {
            start: w.start.max(start),
            end: w.end.min(end),
        });
        at = w.end;
    }
    out
}

/// Each silence runs from an arrival (or the watch start) to the next
/// arrival (or now); it crossed the threshold if it fired before ending.
fn crossings(
    calendar: &Calendar,
    policy: &SilencePolicy,
    watch_started: DateTime<Utc>,
    arrivals: &[DateTime<Utc>],
    truncated: bool,
    now: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let mut starts: Vec<DateTime<Utc>> = Vec::with_capacity(arrivals.len() + 1);
    // Before the oldest arrival shown, the silence start is only known when
    // watching began after it and nothing was cut off by the cap.
    if !truncated && arrivals.first().is_none_or(|first| watch_started <= *first) {
        starts.push(watch_started);
    }
    starts.extend(arrivals.iter().copied().filter(|t| *t >= watch_started));
    let mut out = Vec::new();
    for (i, from) in starts.iter().enumerate() {
        let until = starts.get(i + 1).copied().unwrap_or(now);
        if let Some(fire) = evaluate(calendar, policy, *from, until).fires_at {
            if fire <= until {
                out.push(fire);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::holidays::Holidays;
    use crate::domain::weekly::WeeklyHours;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    fn tokyo_office() -> Calendar {
        Calendar::new(
            chrono_tz::Asia::Tokyo,
            WeeklyHours::parse_lines(&["mon-fri 09:00-18:00"]).unwrap(),
            Holidays::default(),
        )
    }

    #[test]
    fn a_week_has_five_office_windows_and_one_crossing_per_long_silence() {
        let policy = SilencePolicy {
            threshold: TimeDelta::hours(2),
            max_silence: None,
        };
        // Sunday evening Tokyo: the last 7 days hold Mon 30th..Fri 4th once each.
        let now = at("2026-12-06T20:00:00+09:00");
        let arrivals = vec![
            at("2026-12-01T10:00:00+09:00"),
            at("2026-12-01T11:00:00+09:00"), // 1h later: no crossing
            at("2026-12-02T10:00:00+09:00"), // the silence before crossed at 13:00 on the 1st
        ];
        let t = build(
            &tokyo_office(),
            &policy,
            at("2026-11-01T00:00:00Z"),
            arrivals,
            false,
            now,
        );
        assert_eq!(t.windows.len(), 5);
        assert_eq!(t.windows[0].start, at("2026-11-30T09:00:00+09:00"));
        assert_eq!(t.arrivals.len(), 3);
        assert_eq!(
            t.crossings,
            vec![
                at("2026-12-01T13:00:00+09:00"),
                at("2026-12-02T12:00:00+09:00")
            ]
        );
    }

    #[test]
    fn arrivals_outside_the_week_are_dropped() {
        let policy = SilencePolicy {
            threshold: TimeDelta::hours(100),
            max_silence: None,
        };
        let now = at("2026-12-06T20:00:00Z");
        let t = build(
            &Calendar::always(),
            &policy,
            at("2026-11-01T00:00:00Z"),
            vec![at("2026-11-20T00:00:00Z"), at("2026-12-06T19:00:00Z")],
            false,
            now,
        );
        assert_eq!(t.arrivals, vec![at("2026-12-06T19:00:00Z")]);
        assert!(t.crossings.is_empty());
    }
}
