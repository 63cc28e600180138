//! Cost of reading a recurring holiday file (issue #32): parsing an `.ics`
//! text and expanding its rules with the `rrule` crate over the ±10-year
//! window, and then looking a date up. Run with
//! `cargo bench --bench ics_expand -- --warm-up-time 1 --measurement-time 3`.
//!
//! The 30-year weekly rule starts in 2006 and ends in 2035, anchored on
//! 2026-06-01: the crate steps through the ten years before the window
//! (2006-2016) without keeping them, then keeps the ~1,000 Fridays inside
//! it. Parsing happens once per config load; lookups happen for every
//! business-time calculation.
//!
//! Measured with the command above (release profile) on a 2-core Intel
//! Xeon VM, load average 0.8-1.4, nothing else running; criterion medians:
//! floor (the same reader on one all-day event, no rule) 1.66 µs; parse and
//! expand the 30-year weekly rule plus the bi-monthly BYSETPOS rule
//! 546 µs; one date lookup 37 ns. (A dev-profile run on the same machine
//! under load 3.9-4.7 gave ~8.1 ms and ~1.2 µs.)

use chrono::NaiveDate;
use criterion::{criterion_group, criterion_main, Criterion};
use hushwatch::domain::ics::parse_ics;
use std::hint::black_box;

const WEEKLY_30_YEARS: &str = "BEGIN:VCALENDAR\r
VERSION:2.0\r
BEGIN:VEVENT\r
UID:fridays@hushwatch.bench\r
DTSTART;VALUE=DATE:20060106\r
RRULE:FREQ=WEEKLY;BYDAY=FR;UNTIL=20351228\r
SUMMARY:Friday off\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:close@hushwatch.bench\r
DTSTART;VALUE=DATE:20060127\r
RRULE:FREQ=MONTHLY;INTERVAL=2;BYDAY=FR;BYSETPOS=-1\r
SUMMARY:Close\r
END:VEVENT\r
END:VCALENDAR\r
";

/// The floor: the same reader on one all-day event with no rule, so the
/// rule expansion's own cost reads as the difference.
const ONE_EVENT: &str = "BEGIN:VCALENDAR\r
VERSION:2.0\r
BEGIN:VEVENT\r
UID:one@hushwatch.bench\r
DTSTART;VALUE=DATE:20261225\r
SUMMARY:Closed\r
END:VEVENT\r
END:VCALENDAR\r
";

fn anchor() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 6, 1).unwrap()
}

fn parse_and_expand(c: &mut Criterion) {
    c.bench_function("ics/floor_parse_one_event_no_rule", |b| {
        b.iter(|| parse_ics(black_box(ONE_EVENT), anchor()).unwrap())
    });
    c.bench_function("ics/parse_expand_30y_weekly_and_bimonthly", |b| {
        b.iter(|| parse_ics(black_box(WEEKLY_30_YEARS), anchor()).unwrap())
    });
}

fn lookup(c: &mut Criterion) {
    let calendar = parse_ics(WEEKLY_30_YEARS, anchor()).unwrap();
    assert!(calendar.covers(NaiveDate::from_ymd_opt(2026, 6, 5).unwrap()));
    let days: Vec<NaiveDate> = (0..7)
        .map(|i| NaiveDate::from_ymd_opt(2026, 6, 1 + i).unwrap())
        .collect();
    c.bench_function("ics/lookup_one_date", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % days.len();
            calendar.covers(black_box(days[i]))
        })
    });
}

criterion_group!(benches, parse_and_expand, lookup);
criterion_main!(benches);
