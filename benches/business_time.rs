//! Cost of the business-time arithmetic. Run with `cargo bench`.
//!
//! The interesting property is that cost follows the number of windows
//! crossed (one per business day here), not the length of the span in
//! seconds, and that a long holiday is skipped day by day, not minute by
//! minute.

use chrono::{DateTime, TimeDelta, Utc};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use hushwatch::domain::calendar::Calendar;
use hushwatch::domain::holidays::{parse_holiday, Holidays};
use hushwatch::domain::weekly::WeeklyHours;
use std::hint::black_box;

fn calendar(holidays: &[&str]) -> Calendar {
    let ranges = holidays.iter().map(|h| parse_holiday(h).unwrap()).collect();
    Calendar::new(
        chrono_tz::Asia::Tokyo,
        WeeklyHours::parse_lines(&["mon-fri 09:00-12:00,13:00-18:00"]).unwrap(),
        Holidays::new(ranges, vec![]),
    )
}

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-30T10:00:00+09:00")
        .unwrap()
        .with_timezone(&Utc)
}

fn fires_at(c: &mut Criterion) {
    let cal = calendar(&["2026-12-31", "2027-01-01..2027-01-03"]);
    let mut group = c.benchmark_group("fires_at");
    for hours in [6i64, 40, 400] {
        group.bench_with_input(BenchmarkId::new("business_hours", hours), &hours, |b, h| {
            b.iter(|| cal.fires_at(black_box(start()), TimeDelta::hours(*h)))
        });
    }
    let long_holiday = calendar(&["2026-12-01..2027-01-31"]);
    // Monday 18:00, the day before a two-month shutdown: the 6h must be found
    // after the holiday, so every holiday day is crossed.
    let friday_close = start() + TimeDelta::hours(8);
    assert!(
        long_holiday
            .fires_at(friday_close, TimeDelta::hours(6))
            .unwrap()
            > start() + TimeDelta::days(60)
    );
    group.bench_function("across_9_week_holiday_6h", |b| {
        b.iter(|| long_holiday.fires_at(black_box(friday_close), TimeDelta::hours(6)))
    });
    group.finish();
}

fn business_time(c: &mut Criterion) {
    let cal = calendar(&[]);
    let mut group = c.benchmark_group("business_time");
    for days in [1i64, 30, 365] {
        group.bench_with_input(BenchmarkId::new("span_days", days), &days, |b, d| {
            b.iter(|| cal.business_time(black_box(start()), start() + TimeDelta::days(*d)))
        });
    }
    group.finish();
}

/// A window edge inside New York's spring-forward gap costs a search for
/// the exact transition instant; the same window an hour later does not.
fn dst_gap_edge(c: &mut Criterion) {
    let new_york = |line: &str| {
        Calendar::new(
            chrono_tz::America::New_York,
            WeeklyHours::parse_lines(&[line]).unwrap(),
            Holidays::default(),
        )
    };
    let friday = DateTime::parse_from_rfc3339("2026-03-06T17:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let mut group = c.benchmark_group("dst_gap_edge");
    for (name, line) in [
        ("edge_in_gap", "sun 02:23-04:00"),
        ("edge_outside_gap", "sun 03:23-04:00"),
    ] {
        let cal = new_york(line);
        group.bench_function(name, |b| {
            b.iter(|| cal.fires_at(black_box(friday), TimeDelta::minutes(1)))
        });
    }
    group.finish();
}

criterion_group!(benches, fires_at, business_time, dst_gap_edge);
criterion_main!(benches);
