//! Business calendars and business-time arithmetic.
//!
//! Business time is **real elapsed seconds inside windows**: a 00:00–24:00
//! window on a spring-forward day is 23 hours long. All functions here are
//! pure: no clock reads, no I/O.
//!
//! ## DST rule for window edges
//! A window edge given as a local wall time is placed at *the first instant
//! at which the wall clock reads that time or later*:
//! - an edge inside a DST gap (e.g. 02:30 on a spring-forward night, which
//!   never appears on the wall clock) moves to the exact instant the clock
//!   jumps, the zone's transition instant (always a whole second);
//! - an edge inside a fold (01:30 on a fall-back night, which appears twice)
//!   is the first occurrence.
//!
//! ## Cost
//! Windows are generated one local day at a time, so cost grows with the
//! number of days and windows crossed, never with seconds or minutes.
//! Searches stop at a horizon (`SEARCH_HORIZON_DAYS`); a calendar that has no
//! window within it never fires on business time (the wall-clock backstop
//! `max_silence` still does).

use super::holidays::Holidays;
use super::weekly::WeeklyHours;
use chrono::offset::LocalResult;
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;

/// How far ahead `fires_at` and `next_window` look for business time.
pub const SEARCH_HORIZON_DAYS: i64 = 3_660;

#[derive(Debug, Clone)]
pub struct Calendar {
    tz: Tz,
    weekly: WeeklyHours,
    holidays: Holidays,
}

/// A half-open interval `[start, end)` of business time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

impl Calendar {
    pub fn new(tz: Tz, weekly: WeeklyHours, holidays: Holidays) -> Calendar {
        Calendar {
            tz,
            weekly,
            holidays,
        }
    }

    /// The built-in 24x7 calendar: business time equals wall time.
    pub fn always() -> Calendar {
        Calendar::new(chrono_tz::UTC, WeeklyHours::always(), Holidays::default())
    }

    pub fn timezone(&self) -> Tz {
        self.tz
    }

    pub fn weekly(&self) -> &WeeklyHours {
        &self.weekly
    }

    pub fn holidays(&self) -> &Holidays {
        &self.holidays
    }

    /// Business time between `from` and `to` (zero when `to <= from`).
    pub fn business_time(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> TimeDelta {
        if to <= from {
            return TimeDelta::zero();
        }
        let last_day = self.local_date(to).succ_opt().unwrap_or(NaiveDate::MAX);
        self.pieces_from(from, last_day)
            .take_while(|w| w.start < to)
            .map(|w| w.end.min(to) - w.start)
            .sum()
    }

    /// The earliest instant at which `threshold` of business time has accrued
    /// since `from`, or `None` if the calendar has no business time within the
    /// search horizon.
    pub fn fires_at(&self, from: DateTime<Utc>, threshold: TimeDelta) -> Option<DateTime<Utc>> {
        if threshold <= TimeDelta::zero() {
            return Some(from);
        }
        let mut remaining = threshold;
        for w in self.pieces_from(from, self.horizon(from)) {
            let len = w.end - w.start;
            if remaining <= len {
                return Some(w.start + remaining);
            }
            remaining -= len;
        }
        None
    }

    /// The business window containing `at`, or the next one after it.
    /// Adjacent windows are reported separately.
    pub fn next_window(&self, at: DateTime<Utc>) -> Option<Window> {
        self.pieces_from(at, self.horizon(at)).next()
    }

    /// Whether `at` falls inside business hours.
    pub fn in_business_hours(&self, at: DateTime<Utc>) -> bool {
        self.next_window(at).is_some_and(|w| w.start <= at)
    }

    fn horizon(&self, from: DateTime<Utc>) -> NaiveDate {
        self.local_date(from)
            .checked_add_signed(TimeDelta::days(SEARCH_HORIZON_DAYS))
            .unwrap_or(NaiveDate::MAX)
    }

    fn local_date(&self, at: DateTime<Utc>) -> NaiveDate {
        at.with_timezone(&self.tz).date_naive()
    }

    /// Disjoint business intervals, in order, clipped to start at `from`,
    /// generated from the local day before `from` (whose overnight windows
    /// may still be open) up to and including `last_day`.
    fn pieces_from(&self, from: DateTime<Utc>, last_day: NaiveDate) -> Pieces<'_> {
        let first_day = self.local_date(from).pred_opt().unwrap_or(NaiveDate::MIN);
        Pieces {
            calendar: self,
            next_day: Some(first_day),
            last_day,
            day_windows: Vec::new(),
            covered_until: from,
        }
    }

    /// Windows that start on local `date` as UTC intervals, sorted by start.
    fn day_windows(&self, date: NaiveDate, out: &mut Vec<Window>) {
        out.clear();
        if self.holidays.contains(date) {
            return;
        }
        let midnight = date.and_hms_opt(0, 0, 0).unwrap_or_default();
        for w in self.weekly.windows(date.weekday()) {
            let start = midnight + TimeDelta::minutes(i64::from(w.start_minute));
            let end = midnight + TimeDelta::minutes(i64::from(w.end_minute));
            let window = Window {
                start: resolve_local(&self.tz, start),
                end: resolve_local(&self.tz, end),
            };
            if window.end > window.start {
                out.push(window);
            }
        }
        // DST folds can reorder local times; keep the stream sorted by start.
        out.sort_by_key(|w| w.start);
        out.reverse(); // popped from the back
    }
}

/// Iterator over disjoint business intervals. Overlapping windows (from
/// several weekly lines, or an overnight window running into the next day's
/// window) are cut so every instant is counted once.
struct Pieces<'a> {
    calendar: &'a Calendar,
    next_day: Option<NaiveDate>,
    last_day: NaiveDate,
    /// Remaining windows of the current day, latest first.
    day_windows: Vec<Window>,
    /// Everything before this instant has been emitted (or precedes `from`).
    covered_until: DateTime<Utc>,
}

impl Iterator for Pieces<'_> {
    type Item = Window;

    fn next(&mut self) -> Option<Window> {
        loop {
            while let Some(w) = self.day_windows.pop() {
                let start = w.start.max(self.covered_until);
                if start < w.end {
                    self.covered_until = w.end;
                    return Some(Window { start, end: w.end });
                }
            }
            let day = self.next_day.filter(|d| *d <= self.last_day)?;
            self.next_day = day.succ_opt();
            self.calendar.day_windows(day, &mut self.day_windows);
        }
    }
}

/// Business seconds accrued between `from` and `to` (the issue's
/// `business_seconds(calendar, from, to)`), whole seconds, rounded down.
pub fn business_seconds(calendar: &Calendar, from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    calendar.business_time(from, to).num_seconds()
}

/// The instant `threshold` of business time has accrued since `from`
/// (the issue's `fires_at(calendar, from, threshold)`).
pub fn fires_at(
    calendar: &Calendar,
    from: DateTime<Utc>,
    threshold: TimeDelta,
) -> Option<DateTime<Utc>> {
    calendar.fires_at(from, threshold)
}

/// Places a local wall time on the timeline (see the module docs for the rule).
fn resolve_local(tz: &Tz, local: NaiveDateTime) -> DateTime<Utc> {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(t) => t.with_timezone(&Utc),
        LocalResult::Ambiguous(first, _) => first.with_timezone(&Utc),
        LocalResult::None => end_of_gap(tz, local),
    }
}

/// For a local time that falls in a DST gap, finds the first instant whose
/// wall time is at or after it: the instant the clock jumped, exactly.
///
/// chrono-tz only answers "what is the offset at this instant", so the jump
/// is found by search, but an exact one. UTC offsets are under two days, so
/// `local ± 2 days` (read as UTC) brackets it: `wall(lo) < local <= wall(hi)`.
/// Halving on whole seconds keeps that until `hi = lo + 1`, where the wall
/// clock crosses `local`. Offsets change only on whole UTC seconds, so the
/// wall clock still reads earlier than `local` an instant before `hi`: `hi`
/// is the transition itself, not a point near it. (It is the only such
/// crossing unless a zone skipped the same wall time twice within two days,
/// which none does.)
fn end_of_gap(tz: &Tz, local: NaiveDateTime) -> DateTime<Utc> {
    let wall = |utc_secs: i64| {
        let at = DateTime::from_timestamp(utc_secs, 0).unwrap_or_default();
        let offset = tz.offset_from_utc_datetime(&at.naive_utc()).fix();
        utc_secs + i64::from(offset.local_minus_utc())
    };
    // `local` on the same axis, rounded up to a whole second so that
    // "wall >= local" keeps its meaning for an edge with a fraction.
    let as_utc = local.and_utc();
    let target = as_utc.timestamp() + i64::from(as_utc.timestamp_subsec_nanos() > 0);
    let two_days = 2 * 86_400;
    let (mut lo, mut hi) = (target - two_days, target + two_days);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if wall(mid) >= target {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    DateTime::from_timestamp(hi, 0).unwrap_or(as_utc)
}

#[cfg(test)]
mod tests;
