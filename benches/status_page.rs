//! Cost of the status page at its bounds: 100 streams (the most that get a
//! timeline), each with 500 arrivals in the last 7 days (the per-stream
//! cap). Three parts, as `GET /` runs them:
//! - `recent_arrivals`: the store read (60,000 audit entries on disk, 50,000
//!   of them read back through the `audit_log(source, received_at)` index);
//! - `timelines`: business windows and threshold crossings for each stream;
//! - `render`: the HTML for the document and those timelines.
//!
//! Run with `cargo bench --bench status_page -- --warm-up-time 1 --measurement-time 3`.
//! Measured figures are in docs/src/performance.md.

use chrono::{DateTime, TimeDelta, Utc};
use criterion::{criterion_group, criterion_main, Criterion};
use hushwatch::domain::calendar::Calendar;
use hushwatch::domain::holidays::Holidays;
use hushwatch::domain::silence::SilencePolicy;
use hushwatch::domain::weekly::WeeklyHours;
use hushwatch::status::model::StatusDoc;
use hushwatch::status::{page, timeline};
use hushwatch::store::{NewEvent, Store};
use std::collections::BTreeMap;
use std::hint::black_box;

const STREAMS: usize = 100;
const ARRIVALS: i64 = 500;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-04T15:00:00+09:00")
        .unwrap()
        .to_utc()
}

fn names() -> Vec<String> {
    (0..STREAMS).map(|i| format!("stream-{i:03}")).collect()
}

/// 600 arrivals per stream spread over 8 days: the newest 500 fall in the
/// last 7 days.
fn arrivals() -> Vec<DateTime<Utc>> {
    let step = TimeDelta::days(8) / 600;
    (0..600).map(|i| now() - step * i).collect()
}

fn tokyo() -> Calendar {
    Calendar::new(
        chrono_tz::Asia::Tokyo,
        WeeklyHours::parse_lines(&["mon-fri 09:00-18:00"]).unwrap(),
        Holidays::default(),
    )
}

fn policy() -> SilencePolicy {
    SilencePolicy {
        threshold: TimeDelta::minutes(30),
        max_silence: Some(TimeDelta::hours(72)),
    }
}

fn doc() -> StatusDoc {
    let streams: Vec<serde_json::Value> = names()
        .iter()
        .map(|n| {
            serde_json::json!({
                "name": n, "calendar": "tokyo", "timezone": "Asia/Tokyo",
                "last_event_at": now().to_rfc3339(), "last_event_type": "user.updated",
                "watching_since": "2026-11-01T00:00:00Z",
                "business_silence_seconds": 600, "threshold_seconds": 1800,
                "fires_at": (now() + TimeDelta::minutes(20)).to_rfc3339(),
                "fires_in_seconds": 1200, "state": "ok", "firing_since": null,
                "in_business_hours": true, "clock_paused_until": null
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "now": now().to_rfc3339(), "storage_ok": true, "streams": streams
    }))
    .unwrap()
}

fn timelines() -> BTreeMap<String, timeline::Timeline> {
    let calendar = tokyo();
    let watch = now() - TimeDelta::days(30);
    names()
        .into_iter()
        .map(|n| {
            let mut a = arrivals();
            a.truncate(ARRIVALS as usize);
            let t = timeline::build(&calendar, &policy(), watch, a, true, now());
            (n, t)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("bench.sqlite3")).unwrap();
    rt.block_on(async {
        store.watch_streams(names(), now()).await.unwrap();
        for (s, name) in names().iter().enumerate() {
            let events = arrivals()
                .into_iter()
                .enumerate()
                .map(|(i, at)| NewEvent {
                    stream: name.clone(),
                    delivery_id: Some(format!("{s}-{i}")),
                    event_type: "user.updated".into(),
                    event_time: None,
                    received_at: at,
                    feeds_clock: true,
                    body_sha256: None,
                    channel: "webhook",
                    signature_verified: true,
                    subject_ids: Vec::new(),
                    audit: true,
                    access: None,
                    forward: None,
                })
                .collect();
            store.record_events(events).await.unwrap();
        }
    });
    let mut g = c.benchmark_group("status_page");
    g.sample_size(20);
    g.bench_function("recent_arrivals_100x500", |b| {
        b.iter(|| {
            rt.block_on(store.recent_arrivals(names(), now() - TimeDelta::days(7), ARRIVALS))
                .unwrap()
        })
    });
    g.bench_function("timelines_100x500", |b| b.iter(|| black_box(timelines())));
    let (d, t) = (doc(), timelines());
    g.bench_function("render_100_streams", |b| {
        b.iter(|| black_box(page::render(&d, &t)).len())
    });
    g.finish();
    println!("page size: {} bytes", page::render(&d, &t).len());
}

criterion_group!(benches, bench);
criterion_main!(benches);
