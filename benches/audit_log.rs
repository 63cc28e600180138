//! Audit-log costs, run with `cargo bench --bench audit_log`:
//! - appends/s through the real store with the hash chain on and off
//!   (16 concurrent writers, one event per call, as ingest does), and with
//!   the chain on and every event carrying a revocation-index note (every
//!   10th a revocation, the rest grants checked against the index: the
//!   worst case of `store::revocations`);
//! - `audit verify` and `audit export` over ENTRIES (default 1,000,000)
//!   entries, with the process's peak RSS, to show both stream.
//!
//! Not a criterion benchmark: each figure is one long run, repeated RUNS
//! times (default 3) and reported as the median.

use chrono::{DateTime, TimeDelta, Utc};
use hushwatch::store::revocations::{AccessNote, StalePage};
use hushwatch::store::{NewEvent, Store};
use std::time::Instant;

fn event(i: u64, audit: bool, at: DateTime<Utc>) -> NewEvent {
    NewEvent {
        stream: "identity".into(),
        delivery_id: Some(format!("msg_{i}")),
        event_type: if i.is_multiple_of(10) {
            "user.deleted".into()
        } else {
            "user.updated".into()
        },
        event_time: Some(at),
        received_at: at,
        feeds_clock: true,
        body_sha256: Some([7; 32]),
        channel: "webhook",
        signature_verified: true,
        subject_ids: vec![("user_id".into(), format!("user_{i}"))],
        audit,
        access: None,
        forward: None,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// What `service::stale_grants` would attach: user_{i % 100}'s revocations
/// and grants, so grants find indexed rows.
fn noted(mut e: NewEvent, i: u64) -> NewEvent {
    let subject = format!("user_{}", i % 100);
    e.access = Some(if i.is_multiple_of(10) {
        AccessNote::Revoke {
            subject,
            organization: Some("org_1".into()),
        }
    } else {
        AccessNote::Grant {
            subject,
            organization: Some("org_1".into()),
            page: StalePage {
                notifiers: vec!["pager".into()],
                zone: chrono_tz::UTC,
            },
            earlier: Vec::new(),
        }
    });
    e
}

async fn appends_per_second(audit: bool, events: u64) -> f64 {
    appends_per_second_noted(audit, false, events).await
}

async fn appends_per_second_noted(audit: bool, notes: bool, events: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("bench.sqlite3")).unwrap();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..16u64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let now = Utc::now();
            for i in (w..events).step_by(16) {
                let e = event(i, audit, now);
                let e = if notes { noted(e, i) } else { e };
                store.record_events(vec![e]).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let rate = events as f64 / start.elapsed().as_secs_f64();
    store.close().await.unwrap();
    rate
}

async fn populate(path: &std::path::Path, entries: u64) {
    let store = Store::open(path).unwrap();
    let t0 = Utc::now() - TimeDelta::days(1);
    for chunk in 0..entries.div_ceil(1000) {
        let batch = (chunk * 1000..((chunk + 1) * 1000).min(entries))
            .map(|i| event(i, true, t0 + TimeDelta::milliseconds(i as i64)))
            .collect();
        store.record_events(batch).await.unwrap();
    }
    store.close().await.unwrap();
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("audit_log: run with `cargo bench --bench audit_log`");
        return;
    }
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let entries: u64 = std::env::var("ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = 20_000;
    let on: Vec<f64> = (0..runs)
        .map(|_| rt.block_on(appends_per_second(true, n)))
        .collect();
    let off: Vec<f64> = (0..runs)
        .map(|_| rt.block_on(appends_per_second(false, n)))
        .collect();
    let indexed: Vec<f64> = (0..runs)
        .map(|_| rt.block_on(appends_per_second_noted(true, true, n)))
        .collect();
    let (on, off, indexed) = (median(on), median(off), median(indexed));
    println!("appends/s, 16 writers, {n} events, median of {runs}: chain on {on:.0}, chain off {off:.0} ({:+.1}%)", (on / off - 1.0) * 100.0);
    println!(
        "appends/s, chain on, every event noted for the revocation index: {indexed:.0} ({:+.1}% against chain on)",
        (indexed / on - 1.0) * 100.0
    );

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let db = dir.path().join("data/hushwatch.sqlite3");
    let t = Instant::now();
    rt.block_on(populate(&db, entries));
    println!(
        "populated {entries} entries in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let config = dir.path().join("hushwatch.toml");
    std::fs::write(
        &config,
        "[streams.identity]\ncalendar = \"always\"\nsilence_threshold = \"1h\"\n",
    )
    .unwrap();
    let exe = std::env::var("HUSHWATCH_BIN").unwrap_or_else(|_| "target/release/hushwatch".into());
    for (what, args) in [
        ("verify", vec!["audit", "verify"]),
        ("export jsonl", vec!["audit", "export"]),
        (
            "export csv --kind revoke",
            vec!["audit", "export", "--format", "csv", "--kind", "revoke"],
        ),
    ] {
        let mut times = Vec::new();
        let mut rss = 0.0f64;
        for _ in 0..runs {
            let t = Instant::now();
            let out = std::process::Command::new("/usr/bin/time")
                .arg("-f")
                .arg("%M")
                .arg(&exe)
                .args(&args)
                .arg("--config")
                .arg(&config)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .output()
                .expect("run hushwatch (build it with cargo build --release)");
            times.push(t.elapsed().as_secs_f64());
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{what} failed: {err}");
            let kb: f64 = err
                .lines()
                .last()
                .and_then(|l| l.trim().parse().ok())
                .unwrap_or(0.0);
            rss = rss.max(kb / 1024.0);
        }
        println!(
            "{what} over {entries} entries: median {:.2} s, peak RSS {rss:.0} MB",
            median(times)
        );
    }
    println!("bench process peak RSS {:.0} MB", peak_rss_mb());
}
