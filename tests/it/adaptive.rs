//! The "quieter than usual" threshold (issue #18) through the sidecar on a
//! manual clock, a real SQLite file and a real HTTP webhook receiver: it
//! learns the gaps between events ingested over HTTP, fires at the learned
//! point (`factor ×` the usual longest gap) and never later than the
//! configured threshold, keeps the configured threshold until 14 days and
//! 200 gaps are known, and keeps what it learned across a restart.

use crate::common::*;
use crate::support;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use hushwatch::domain::gap_sketch::GapSketch;
use hushwatch::store::gaps::GapCount;
use support::*;

const START: &str = "2026-12-01T00:00:00Z";

fn config(url: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.identity]
calendar = "always"
silence_threshold = "6h"
notify = ["hook"]
[streams.identity.adaptive]
quantile = 0.99
factor = 2
min = "30m"
[streams.identity.ingest]
token = "{TOKEN}"

[notifiers.hook]
kind = "webhook"
url = "{url}"
timeout = "1s"
backoff_initial = "1s"
"#
    )
}

/// Posts one event over real HTTP at the sidecar's current time.
fn post(s: &InProcess) {
    let id = format!("evt-{}", s.now().timestamp_millis());
    let body = format!(r#"{{"type":"user.created","id":"{id}"}}"#);
    let auth = format!("Bearer {TOKEN}");
    let reply = request(
        s.addr,
        "POST",
        "/v1/streams/identity/events",
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        body.as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// Feeds `n` events `every` apart (the clock moves before each), then
/// writes what was learned, as the minute flush does.
fn feed(s: &InProcess, n: usize, every: TimeDelta) {
    for _ in 0..n {
        s.clock.advance(every);
        post(s);
    }
    s.block_on(s.app().flush_learned()).unwrap();
}

fn stream(s: &InProcess) -> serde_json::Value {
    s.http_status()["streams"][0].clone()
}

fn time(v: &serde_json::Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .with_timezone(&Utc)
}

/// Moves the clock to just before, then just after, `fires_at`: the stream
/// is quiet until then and firing from it, with the fire stamped at it.
fn fires_exactly_at(s: &InProcess, fires_at: DateTime<Utc>) {
    s.clock.set(fires_at - TimeDelta::seconds(1));
    // Nothing is due yet: give the timer a chance to (wrongly) fire.
    s.block_on(s.app().evaluate_all()).unwrap();
    assert_eq!(stream(s)["state"], "ok", "fired early");
    s.clock.set(fires_at + TimeDelta::seconds(1));
    s.wait_state("firing");
    assert_eq!(time(&stream(s)["firing_since"]), fires_at);
}

fn firing_summary(recv: &Receiver) -> String {
    let page = wait_until("the firing page", || {
        recv.delivered()
            .into_iter()
            .map(|r| r.json())
            .find(|j| j["status"] == "firing")
    });
    page["alert"]["summary"].as_str().unwrap().to_string()
}

#[test]
fn it_learns_from_ingested_events_fires_at_the_learned_point_and_keeps_it_across_a_restart() {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let text = config(&recv.url("/hook"));
    let s = InProcess::start_in(dir.path(), &text, utc(START));
    // 28 days of an event every 90 minutes (Dec 1 01:30 to Dec 29 00:00):
    // 447 gaps of 1h30m, of which the window (Dec 2 to Dec 29) keeps 433.
    feed(&s, 448, TimeDelta::minutes(90));
    let st = stream(&s);
    assert_eq!(st["threshold_source"], "learned", "{st}");
    assert_eq!(st["configured_threshold_seconds"], 6 * 3600);
    assert_eq!(st["learned"]["gaps"], 433);
    assert_eq!(st["learned"]["days"], 27);
    let usual = st["learned"]["usual_gap_seconds"].as_f64().unwrap();
    assert!((usual - 5400.0).abs() <= 54.0, "usual gap {usual}");
    let effective = st["effective_threshold_seconds"].as_i64().unwrap();
    assert_eq!(st["threshold_seconds"], effective);
    assert!(
        (effective - 10_800).abs() <= 108,
        "2 × 1h30m, got {effective}"
    );
    let metrics = get(s.addr, "/metrics").body;
    assert!(
        metrics.contains("hushwatch_usual_gap_seconds{stream=\"identity\",quantile=\"0.999\"}"),
        "{metrics}"
    );

    // A restart keeps what was learned.
    let now = s.now();
    s.stop();
    let s = InProcess::start_in(dir.path(), &text, now);
    let again = stream(&s);
    assert_eq!(again["threshold_source"], "learned");
    assert_eq!(again["effective_threshold_seconds"], effective);

    // Silence: fires at the learned point, well before the configured 6h.
    let last = time(&again["last_event_at"]);
    fires_exactly_at(&s, last + TimeDelta::seconds(effective));
    let summary = firing_summary(&recv);
    assert!(
        summary.contains("longer than this stream's usual longest gap (learned 0.99 quantile")
            && summary.contains("433 gaps")
            && summary.contains("configured threshold 6h"),
        "{summary}"
    );
    let now = s.now();
    s.stop();

    // `hushwatch explain` reads what the sidecar persisted.
    let rfc = |t: DateTime<Utc>| t.to_rfc3339();
    let out = cli(&["explain"])
        .config(dir.path().join("hushwatch.toml"))
        .args(&[
            "--stream",
            "identity",
            "--last-event",
            &rfc(last),
            "--now",
            &rfc(now),
        ])
        .output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["threshold_source"], "learned", "{json}");
    assert_eq!(json["effective_threshold_seconds"], effective);
    assert_eq!(json["learned"]["gaps"], 433);
    assert_eq!(json["firing"], true);
    assert_eq!(
        time(&json["fires_at"]),
        last + TimeDelta::seconds(effective)
    );
}

#[test]
fn before_fourteen_days_and_two_hundred_gaps_the_configured_threshold_applies() {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(dir.path(), &config(&recv.url("/hook")), utc(START));
    // 300 gaps, but only over 6 days and 6 hours.
    feed(&s, 301, TimeDelta::minutes(30));
    let st = stream(&s);
    assert_eq!(st["threshold_source"], "configured", "{st}");
    assert_eq!(st["learned"], serde_json::Value::Null);
    assert_eq!(st["effective_threshold_seconds"], 6 * 3600);
    let last = time(&st["last_event_at"]);
    fires_exactly_at(&s, last + TimeDelta::hours(6));
    let summary = firing_summary(&recv);
    assert_eq!(summary, "no identity events for 6h of business time");
    s.stop();
}

/// 28 days of gaps seeded through the store (as the flush writes them).
fn seed(s: &InProcess, today: NaiveDate, per_day: u64, gap: TimeDelta) {
    let mut counts = Vec::new();
    for back in 0..28 {
        let mut sketch = GapSketch::new();
        for _ in 0..per_day {
            sketch.add(gap.num_milliseconds() as u64);
        }
        for (bucket, n) in sketch.to_pairs() {
            counts.push(GapCount {
                stream: "identity".into(),
                day: today - TimeDelta::days(back),
                bucket,
                count: n as i64,
            });
        }
    }
    s.block_on(s.app().store().add_gap_counts(counts)).unwrap();
}

#[test]
fn a_learned_gap_longer_than_the_configured_threshold_never_delays_the_page() {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let text = config(&recv.url("/hook"));
    let s = InProcess::start_in(dir.path(), &text, utc(START));
    // 28 days of 5h gaps: 2 × 5h = 10h, past the configured 6h.
    seed(&s, s.now().date_naive(), 10, TimeDelta::hours(5));
    post(&s);
    let now = s.now();
    s.stop();
    let s = InProcess::start_in(dir.path(), &text, now);
    let st = stream(&s);
    assert_eq!(st["threshold_source"], "learned", "{st}");
    assert_eq!(st["learned"]["gaps"], 280);
    assert_eq!(st["learned"]["days"], 27);
    assert_eq!(st["effective_threshold_seconds"], 6 * 3600);
    let last = time(&st["last_event_at"]);
    fires_exactly_at(&s, last + TimeDelta::hours(6));
    // The configured rule fired, and the page says so.
    assert_eq!(
        firing_summary(&recv),
        "no identity events for 6h of business time"
    );
    s.stop();
}

#[test]
fn learned_days_older_than_the_window_stop_counting() {
    let dir = tempfile::tempdir().unwrap();
    let recv = Receiver::start(vec![]);
    let text = config(&recv.url("/hook"));
    let s = InProcess::start_in(dir.path(), &text, utc(START));
    seed(&s, s.now().date_naive(), 10, TimeDelta::minutes(20));
    let now = s.now();
    s.stop();
    let s = InProcess::start_in(dir.path(), &text, now);
    assert_eq!(stream(&s)["learned"]["gaps"], 280);
    s.stop();
    // 20 days later only the 8 newest seeded days are inside the window:
    // 80 gaps, too few, so the configured threshold is back.
    let s = InProcess::start_in(dir.path(), &text, now + TimeDelta::days(20));
    let st = stream(&s);
    assert_eq!(st["threshold_source"], "configured", "{st}");
    s.stop();
}

#[test]
fn check_refuses_a_bad_adaptive_table_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let text = config("http://127.0.0.1:9/hook").replace("factor = 2", "factor = 0.5");
    let path = dir.path().join("hushwatch.toml");
    std::fs::write(&path, text).unwrap();
    let out = cli(&["check"]).config(&path).output();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("streams.identity.adaptive.factor: must be at least 1"),
        "{err}"
    );
}
