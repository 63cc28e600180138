//! Hand-worked business-time cases and property tests of the invariants.

use super::*;
use crate::domain::holidays::parse_holiday;
use proptest::prelude::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn cal(tz: &str, weekly: &[&str], holidays: &[&str]) -> Calendar {
    let ranges = holidays.iter().map(|h| parse_holiday(h).unwrap()).collect();
    Calendar::new(
        tz.parse().unwrap(),
        WeeklyHours::parse_lines(weekly).unwrap(),
        Holidays::new(ranges, vec![]),
    )
}

fn tokyo() -> Calendar {
    cal(
        "Asia/Tokyo",
        &["mon-fri 09:00-18:00"],
        &["2026-12-31", "2027-01-01..2027-01-03"],
    )
}

fn hours(h: f64) -> TimeDelta {
    TimeDelta::seconds((h * 3600.0) as i64)
}

#[test]
fn weekend_is_skipped() {
    // Fri 15:00 JST: 3h accrue on Friday, the other 3h on Monday morning.
    let c = tokyo();
    let fri = utc("2026-12-04T15:00:00+09:00");
    assert_eq!(
        c.fires_at(fri, hours(6.0)),
        Some(utc("2026-12-07T12:00:00+09:00"))
    );
    assert_eq!(
        c.business_time(fri, utc("2026-12-07T10:00:00+09:00")),
        hours(4.0)
    );
}

#[test]
fn holiday_and_holiday_range_are_skipped() {
    // Wed 30 Dec 16:00: 2h that day, then Thu 31 (holiday), Fri 1 (range),
    // weekend (also in range), so Monday 4 Jan 13:00.
    let c = tokyo();
    let wed = utc("2026-12-30T16:00:00+09:00");
    assert_eq!(
        c.fires_at(wed, hours(6.0)),
        Some(utc("2027-01-04T13:00:00+09:00"))
    );
    assert_eq!(
        c.business_time(wed, utc("2027-01-04T09:00:00+09:00")),
        hours(2.0)
    );
}

#[test]
fn overnight_window_runs_into_next_day() {
    let c = cal("UTC", &["mon-fri 22:00-06:00"], &[]);
    // Friday's window runs until Saturday 06:00.
    assert_eq!(
        c.fires_at(utc("2026-12-04T23:00:00Z"), hours(6.0)),
        Some(utc("2026-12-05T05:00:00Z"))
    );
    // From Saturday noon the next window is Monday 22:00.
    assert_eq!(
        c.fires_at(utc("2026-12-05T12:00:00Z"), hours(6.0)),
        Some(utc("2026-12-08T04:00:00Z"))
    );
    // Overnight from Sunday is not configured: Sunday 23:00 is outside hours.
    assert!(!c.in_business_hours(utc("2026-12-06T23:00:00Z")));
    assert!(c.in_business_hours(utc("2026-12-05T03:00:00Z")));
}

#[test]
fn holiday_removes_only_windows_that_start_that_day() {
    let c = cal("UTC", &["mon-sun 22:00-06:00"], &["2026-12-25"]);
    // Thu 24 Dec 22:00 → Fri 06:00 still counts (it started on the 24th);
    // the window starting on the 25th is gone.
    let day = c.business_time(utc("2026-12-24T12:00:00Z"), utc("2026-12-26T12:00:00Z"));
    assert_eq!(day, hours(8.0));
}

#[test]
fn split_day_with_lunch_break() {
    let c = cal("UTC", &["mon-fri 09:00-12:30,13:30-17:30"], &[]);
    let mon = utc("2026-11-30T11:00:00Z");
    assert_eq!(
        c.fires_at(mon, hours(3.0)),
        Some(utc("2026-11-30T15:00:00Z"))
    );
    assert!(!c.in_business_hours(utc("2026-11-30T13:00:00Z")));
}

#[test]
fn overlapping_windows_count_once() {
    let c = cal(
        "UTC",
        &["mon 09:00-13:00", "mon 12:00-17:00", "sun 20:00-10:00"],
        &[],
    );
    // Sunday's overnight window overlaps Monday's 09:00 start as well.
    let total = c.business_time(utc("2026-11-29T00:00:00Z"), utc("2026-12-01T00:00:00Z"));
    assert_eq!(total, hours(4.0 + 17.0));
}

#[test]
fn exact_window_end_fires_at_the_end_not_the_next_morning() {
    let c = tokyo();
    let open = utc("2026-11-30T09:00:00+09:00");
    assert_eq!(
        c.fires_at(open, hours(9.0)),
        Some(utc("2026-11-30T18:00:00+09:00"))
    );
    let end = utc("2026-11-30T18:00:00+09:00");
    assert!(!c.in_business_hours(end));
    assert_eq!(
        c.fires_at(end, hours(1.0)),
        Some(utc("2026-12-01T10:00:00+09:00"))
    );
}

#[test]
fn event_outside_hours_counts_from_next_opening() {
    let c = tokyo();
    let sat = utc("2026-12-05T12:00:00+09:00");
    assert_eq!(
        c.business_time(sat, utc("2026-12-07T08:59:59+09:00")),
        TimeDelta::zero()
    );
    assert_eq!(
        c.fires_at(sat, hours(6.0)),
        Some(utc("2026-12-07T15:00:00+09:00"))
    );
}

#[test]
fn spring_forward_new_york() {
    // 2026-03-08: 02:00 EST jumps to 03:00 EDT.
    let c = cal("America/New_York", &["sun 00:00-24:00"], &[]);
    let day = c.business_time(
        utc("2026-03-08T00:00:00-05:00"),
        utc("2026-03-09T00:00:00-04:00"),
    );
    assert_eq!(day, hours(23.0));
    // An edge inside the gap (02:30) moves to the jump (03:00 EDT = 07:00Z).
    let gap = cal("America/New_York", &["sun 02:30-05:00"], &[]);
    assert_eq!(
        gap.next_window(utc("2026-03-08T00:00:00Z"))
            .map(|w| (w.start, w.end)),
        Some((utc("2026-03-08T07:00:00Z"), utc("2026-03-08T09:00:00Z")))
    );
}

#[test]
fn fall_back_new_york() {
    // 2026-11-01: 02:00 EDT falls back to 01:00 EST; the day has 25 hours.
    let c = cal("America/New_York", &["sun 00:00-24:00"], &[]);
    let day = c.business_time(
        utc("2026-11-01T00:00:00-04:00"),
        utc("2026-11-02T00:00:00-05:00"),
    );
    assert_eq!(day, hours(25.0));
    // An edge in the fold (01:30) is its first occurrence (EDT).
    let fold = cal("America/New_York", &["sun 01:30-03:00"], &[]);
    let w = fold.next_window(utc("2026-11-01T00:00:00Z")).unwrap();
    assert_eq!(
        (w.start, w.end),
        (utc("2026-11-01T05:30:00Z"), utc("2026-11-01T08:00:00Z"))
    );
}

#[test]
fn london_both_transitions() {
    let c = cal("Europe/London", &["sun 00:00-24:00"], &[]);
    let spring = c.business_time(
        utc("2026-03-29T00:00:00Z"),
        utc("2026-03-30T00:00:00+01:00"),
    );
    assert_eq!(spring, hours(23.0));
    let autumn = c.business_time(
        utc("2026-10-25T00:00:00+01:00"),
        utc("2026-10-26T00:00:00Z"),
    );
    assert_eq!(autumn, hours(25.0));
    // A weekday threshold across the spring weekend is unaffected by DST.
    let week = cal("Europe/London", &["mon-fri 09:00-17:00"], &[]);
    assert_eq!(
        week.fires_at(utc("2026-03-27T15:00:00Z"), hours(4.0)),
        Some(utc("2026-03-30T11:00:00+01:00"))
    );
}

#[test]
fn lord_howe_half_hour_dst_shift() {
    // Lord Howe moves its clocks by 30 minutes: 02:00 → 02:30 on 2026-10-04.
    let c = cal("Australia/Lord_Howe", &["sun 00:00-24:00"], &[]);
    let day = c.business_time(
        utc("2026-10-04T00:00:00+10:30"),
        utc("2026-10-05T00:00:00+11:00"),
    );
    assert_eq!(day, hours(23.5));
}

#[test]
fn half_hour_and_45_minute_zones() {
    let kolkata = cal("Asia/Kolkata", &["mon-fri 09:00-17:00"], &[]);
    assert_eq!(
        kolkata.fires_at(utc("2026-11-30T03:30:00Z"), hours(6.0)),
        Some(utc("2026-11-30T09:30:00Z"))
    );
    let kathmandu = cal("Asia/Kathmandu", &["mon-fri 10:00-17:00"], &[]);
    // 10:00 NPT = 04:15Z. Fri 16:00 NPT + 3h → Mon 12:00 NPT = 06:15Z.
    assert_eq!(
        kathmandu.fires_at(utc("2026-12-04T16:00:00+05:45"), hours(3.0)),
        Some(utc("2026-12-07T06:15:00Z"))
    );
}

#[test]
fn always_calendar_is_wall_time() {
    let c = Calendar::always();
    let t = utc("2026-03-08T01:00:00Z");
    assert_eq!(c.fires_at(t, hours(72.0)), Some(t + hours(72.0)));
    assert_eq!(c.business_time(t, t + hours(1000.0)), hours(1000.0));
}

#[test]
fn calendar_with_no_business_time_never_fires() {
    let c = cal("UTC", &["mon 09:00-10:00"], &["2026-01-01..2040-12-31"]);
    assert_eq!(c.fires_at(utc("2026-06-01T00:00:00Z"), hours(1.0)), None);
}

#[test]
fn long_holiday_still_finds_the_window_after_it() {
    let c = cal("UTC", &["mon-fri 09:00-17:00"], &["2026-12-01..2027-02-28"]);
    assert_eq!(
        c.fires_at(utc("2026-11-30T16:00:00Z"), hours(2.0)),
        Some(utc("2027-03-01T10:00:00Z"))
    );
}

fn sample_calendars() -> Vec<Calendar> {
    vec![
        tokyo(),
        cal(
            "America/New_York",
            &[
                "mon-fri 08:00-12:00,13:00-18:00",
                "sat 22:00-02:30",
                "sun 01:30-03:30",
            ],
            &["2026-11-26", "2026-12-24..2026-12-26"],
        ),
        cal(
            "Australia/Lord_Howe",
            &["mon-sun 01:00-03:00,20:00-05:00"],
            &[],
        ),
        cal("Asia/Kathmandu", &["sun-thu 10:00-17:00"], &[]),
        Calendar::always(),
    ]
}

fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    // 2025-01-01 .. 2028-01-01, whole seconds.
    (1_735_689_600i64..1_830_297_600i64).prop_map(|s| DateTime::from_timestamp(s, 0).unwrap())
}

fn span() -> impl Strategy<Value = TimeDelta> {
    (0i64..40 * 86_400).prop_map(TimeDelta::seconds)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn business_time_to_fires_at_is_the_threshold(idx in 0usize..5, t in instant(), d in span()) {
        let c = &sample_calendars()[idx];
        let f = c.fires_at(t, d).unwrap();
        prop_assert_eq!(c.business_time(t, f), d);
        // And it is the earliest such instant: a second earlier is short.
        if d > TimeDelta::zero() {
            prop_assert!(c.business_time(t, f - TimeDelta::seconds(1)) < d);
        }
    }

    #[test]
    fn fires_at_is_additive(idx in 0usize..5, t in instant(), a in span(), b in span()) {
        let c = &sample_calendars()[idx];
        let step = c.fires_at(c.fires_at(t, a).unwrap(), b);
        prop_assert_eq!(step, c.fires_at(t, a + b));
    }

    #[test]
    fn monotone_in_both_arguments(idx in 0usize..5, t in instant(), gap in span(), d in span(), e in span()) {
        let c = &sample_calendars()[idx];
        let later = t + gap;
        prop_assert!(c.fires_at(t, d) <= c.fires_at(later, d));
        prop_assert!(c.business_time(t, later) <= c.business_time(t, later + e));
        prop_assert!(c.business_time(t, later) <= later - t);
    }

    #[test]
    fn free_functions_agree_with_the_methods(idx in 0usize..5, t in instant(), d in span()) {
        let c = &sample_calendars()[idx];
        let f = super::fires_at(c, t, d).unwrap();
        prop_assert_eq!(super::business_seconds(c, t, f), d.num_seconds());
    }

    #[test]
    fn always_equals_wall_time(t in instant(), d in span()) {
        let c = Calendar::always();
        prop_assert_eq!(c.fires_at(t, d), Some(t + d));
        prop_assert_eq!(c.business_time(t, t + d), d);
    }
}

#[test]
fn edge_off_the_quarter_hour_inside_a_gap_is_the_jump_itself() {
    // The case: 02:23 on New York's spring-forward night. The edge
    // is the jump (07:00:00Z exactly), so the window is the full hour
    // 03:00-04:00 EDT and a 1m threshold lands on a whole second.
    let c = cal("America/New_York", &["sun 02:23-04:00"], &[]);
    let w = c.next_window(utc("2026-03-06T17:00:00Z")).unwrap();
    assert_eq!(w.start, utc("2026-03-08T07:00:00Z"));
    assert_eq!(w.end - w.start, TimeDelta::hours(1));
    assert_eq!(
        c.fires_at(utc("2026-03-06T17:00:00Z"), TimeDelta::minutes(1)),
        Some(utc("2026-03-08T07:01:00Z"))
    );
    // Apia skipped the whole of 2011-12-30: any edge that day is the jump
    // from 2011-12-29 24:00 (-10:00) to 2011-12-31 00:00 (+14:00).
    let apia = cal("Pacific/Apia", &["fri 10:17-10:17"], &[]);
    let w = apia.next_window(utc("2011-12-29T00:00:00Z")).unwrap();
    assert_eq!(w.start, utc("2011-12-30T10:00:00Z"));
}

/// UTC seconds of every offset change of `tz` in `[from, to)`, with the
/// offsets before and after, found independently of the calendar code:
/// a 12-hour scan (no zone changes twice within 12 hours in this period),
/// then halving on whole seconds.
fn transitions(tz: Tz, from: i64, to: i64) -> Vec<(i64, i64, i64)> {
    let offset = |secs: i64| {
        let at = DateTime::from_timestamp(secs, 0).unwrap();
        i64::from(at.with_timezone(&tz).offset().fix().local_minus_utc())
    };
    let step = 12 * 3600;
    let mut found = Vec::new();
    let mut t = from;
    while t < to {
        let (a, b) = (offset(t), offset(t + step));
        if a != b {
            let (mut lo, mut hi) = (t, t + step);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if offset(mid) == a {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            found.push((hi, a, b));
        }
        t += step;
    }
    found
}

fn hhmm(t: NaiveDateTime) -> String {
    t.format("%H:%M").to_string()
}

fn day_name(d: NaiveDate) -> String {
    d.weekday().to_string().to_ascii_lowercase()
}

#[test]
fn every_edge_in_every_gap_2000_to_2040_is_the_transition_instant() {
    const ZONES: [&str; 10] = [
        "America/New_York",
        "Europe/London",
        "Pacific/Apia",
        "Pacific/Chatham",
        "Australia/Lord_Howe",
        "America/St_Johns",
        "Africa/Casablanca",
        "America/Santiago",
        "Asia/Tehran",
        "America/Havana",
    ];
    let from = utc("2000-01-01T00:00:00Z").timestamp();
    let to = utc("2041-01-01T00:00:00Z").timestamp();
    for zone in ZONES {
        let tz: Tz = zone.parse().unwrap();
        let mut gaps = 0;
        for (jump_secs, before, after) in transitions(tz, from, to) {
            if after <= before {
                continue; // a fold: edges there are already exact
            }
            gaps += 1;
            let jump = DateTime::from_timestamp(jump_secs, 0).unwrap();
            // Every whole local minute the wall clock skips.
            let first = (jump_secs + before + 59).div_euclid(60) * 60;
            for local_secs in (first..jump_secs + after).step_by(60) {
                let local = DateTime::from_timestamp(local_secs, 0).unwrap().naive_utc();
                let label = format!("{zone} local {local}");
                // A 24-hour window starting at the skipped minute...
                let starts = cal(
                    zone,
                    &[&format!(
                        "{} {}-{}",
                        day_name(local.date()),
                        hhmm(local),
                        hhmm(local)
                    )],
                    &[],
                );
                if local_secs + 86_400 <= jump_secs + after {
                    // Apia's skipped day: the whole window never happened.
                    let around = starts.business_time(jump - TimeDelta::days(2), jump);
                    assert_eq!(around, TimeDelta::zero(), "empty window, {label}");
                } else {
                    let w = starts.next_window(jump - TimeDelta::seconds(1)).unwrap();
                    assert_eq!(w.start, jump, "start edge, {label}");
                }
                // ...and one ending there.
                let prev = local.date().pred_opt().unwrap();
                let ends = cal(
                    zone,
                    &[&format!(
                        "{} {}-{}",
                        day_name(prev),
                        hhmm(local),
                        hhmm(local)
                    )],
                    &[],
                );
                let w = ends.next_window(jump - TimeDelta::hours(30)).unwrap();
                assert_eq!(w.end, jump, "end edge, {label}");
                // The rule itself, to the nanosecond: the wall clock reads
                // the edge time or later at the edge, and earlier just before.
                let wall = |t: DateTime<Utc>| t.with_timezone(&tz).naive_local();
                assert!(wall(jump) >= local, "{label}");
                assert!(wall(jump - TimeDelta::nanoseconds(1)) < local, "{label}");
                // Whole-minute thresholds land on whole seconds.
                let since = jump - TimeDelta::hours(2);
                for minutes in [1, 7, 60] {
                    let fires = starts.fires_at(since, TimeDelta::minutes(minutes)).unwrap();
                    assert_eq!(fires.timestamp_subsec_nanos(), 0, "{label}");
                    let fires = ends.fires_at(w.start, TimeDelta::minutes(minutes)).unwrap();
                    assert_eq!(fires.timestamp_subsec_nanos(), 0, "{label}");
                }
            }
        }
        assert!(gaps > 0, "{zone} has no gap in 2000-2040");
    }
}
