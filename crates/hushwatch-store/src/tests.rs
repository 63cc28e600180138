//! Tests of the SQLite backend itself (writer thread, group commit, file
//! settings, old file versions, full disk). What every backend must do is
//! in `conformance`. All use real SQLite files in temp dirs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection};
use tempfile::TempDir;
use tokio::sync::oneshot;

use super::ops::{delivery_hash, legacy_delivery_hash};
use super::schema::binary_version;
use super::testdb::{at, event, names, on_channel, stream, transition};
use super::writer::{Control, Msg};
use super::*;

fn temp_db() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("hushwatch.db");
    (dir, path)
}

fn open(path: &Path) -> Store {
    Store::open(path).expect("open store")
}

/// Parks the writer between batches; it resumes when the returned sender is
/// dropped. Lets tests queue an exact backlog without sleeping.
async fn pause(store: &Store) -> oneshot::Sender<()> {
    let (parked, is_parked) = oneshot::channel();
    let (resume_tx, resume) = oneshot::channel();
    let control = Control::Pause { parked, resume };
    assert!(store.sqlite().tx.send(Msg::Control(control)).await.is_ok());
    is_parked.await.expect("writer parked");
    resume_tx
}

/// Waits until `depth` jobs are queued. Callers run on a current-thread
/// runtime: a spawned task's `send` takes its channel slot and pushes the
/// job within one poll there, so every counted slot holds a job by the time
/// this returns. (On a multi-threaded runtime a slot can be counted while
/// its job is not pushed yet, and the writer, once resumed, would split what
/// the test meant to be one batch.)
async fn wait_for_queue_depth(store: &Store, depth: usize) {
    let waiting = async {
        while store.queue_depth() < depth {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("jobs were queued");
}

#[test]
fn store_handle_is_clone_send_sync() {
    fn assert_traits<T: Clone + Send + Sync + 'static>() {}
    assert_traits::<Store>();
}

#[test]
fn error_display_is_one_line_naming_the_failure() {
    let e = StoreError::Sql("disk I/O error".to_owned());
    assert_eq!(e.to_string(), "storage write failed: disk I/O error");
    let too_new = StoreError::TooNew { file: 9, binary: 2 }.to_string();
    assert!(too_new.contains('9') && too_new.contains('2'), "{too_new}");
    assert!(!too_new.contains('\n'));
}

#[tokio::test]
async fn raw_delivery_ids_are_stored_only_as_the_latest_arrival() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    // The dedup set and the plain events table keep only the hash; with the
    // audit log on, the raw id is part of the audit record by design.
    let mut e = event("a", Some("secret-id"), "login", 1_000);
    e.audit = false;
    e.body_sha256 = Some([7u8; 32]);
    store.record_events(vec![e]).await.unwrap();
    let stored = store
        .sqlite()
        .call(|c| {
            let row = c.query_row(
                "SELECT e.delivery_hash, e.body_sha256, s.hash FROM events e
                 JOIN seen_deliveries s ON s.hash = e.delivery_hash",
                [],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?, r.get(2)?)),
            )?;
            Ok(row)
        })
        .await
        .unwrap();
    let (event_hash, body, seen_hash): (String, Vec<u8>, String) = stored;
    assert_eq!(event_hash, delivery_hash("report", "a", "secret-id"));
    assert_eq!(event_hash.len(), 64);
    assert_eq!(seen_hash, event_hash);
    assert_eq!(body, vec![7u8; 32]);
    let row = stream(&store, "a").await;
    assert_eq!(row.last_event_id.as_deref(), Some("secret-id"));
    store.close().await.unwrap();
}

#[tokio::test]
async fn probe_writes() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let before = store.commits();
    store.probe().await.unwrap();
    store.probe().await.unwrap();
    assert_eq!(store.commits(), before + 2);
    let rows: i64 = store
        .sqlite()
        .call(|c| Ok(c.query_row("SELECT count(*) FROM probe", [], |r| r.get(0))?))
        .await
        .unwrap();
    assert_eq!(rows, 1);
    store.close().await.unwrap();
}

#[tokio::test]
async fn writer_connection_is_durable_and_strict() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let settings = store
        .sqlite()
        .call(|c| {
            let mode: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
            let sync: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
            let fk: i64 = c.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?;
            Ok((mode, sync, fk))
        })
        .await
        .unwrap();
    assert_eq!(settings, ("wal".to_owned(), 2, 1));
    store.close().await.unwrap();
}

#[tokio::test]
async fn concurrent_calls_share_one_commit() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let commits_before = store.commits();
    let resume = pause(&store).await;
    let calls: Vec<_> = (0..200)
        .map(|i| {
            let store = store.clone();
            let id = format!("d{i}");
            let stream = format!("s{}", i % 4);
            let e = event(&stream, Some(&id), "login", 1_000 + i);
            tokio::spawn(async move { store.record_events(vec![e]).await })
        })
        .collect();
    // Everything is queued before the writer drains, so one batch must
    // carry all 200 calls (MAX_BATCH is 512).
    wait_for_queue_depth(&store, 200).await;
    drop(resume);
    for call in calls {
        let outcome = call.await.expect("task").expect("record_events");
        assert_eq!(outcome, vec![EventOutcome::Accepted]);
    }
    assert_eq!(store.commits() - commits_before, 1);
    for s in 0..4 {
        let count = store.event_count(format!("s{s}")).await.unwrap();
        assert_eq!(count, 50);
    }
    store.close().await.unwrap();
}

#[tokio::test]
async fn failing_job_rolls_back_alone_in_its_batch() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let commits_before = store.commits();
    let resume = pause(&store).await;
    let good = |id: &'static str| {
        let store = store.clone();
        let e = event("a", Some(id), "login", 1_000);
        tokio::spawn(async move { store.record_events(vec![e]).await })
    };
    let first = good("first");
    wait_for_queue_depth(&store, 1).await;
    let bad_store = store.clone();
    let bad = tokio::spawn(async move {
        bad_store
            .sqlite()
            .call(|c| {
                // Writes something, then fails: the write must be undone.
                let e = event("a", Some("bad"), "login", 1_000);
                let now = e.received_at;
                super::db::ready(super::core::record_delivery(c, &[e], None, now, false))?;
                c.execute("INSERT INTO no_such_table VALUES (1)", [])?;
                Ok(())
            })
            .await
    });
    wait_for_queue_depth(&store, 2).await;
    let last = good("last");
    wait_for_queue_depth(&store, 3).await;
    drop(resume);

    // The batch ran twice (bare, then with a savepoint per job, `writer`):
    // the good jobs answer from the committed run, not as duplicates of
    // their own rolled-back first run.
    assert_eq!(first.await.unwrap().unwrap(), vec![EventOutcome::Accepted]);
    let bad = bad.await.unwrap();
    assert!(matches!(&bad, Err(StoreError::Sql(m)) if m.contains("no_such_table")));
    assert_eq!(last.await.unwrap().unwrap(), vec![EventOutcome::Accepted]);
    assert_eq!(store.commits() - commits_before, 1);
    assert_eq!(store.event_count("a".into()).await.unwrap(), 2);
    // The failed job's dedup entry was rolled back with it.
    let retry = store.record_events(vec![event("a", Some("bad"), "login", 2_000)]);
    assert_eq!(retry.await.unwrap(), vec![EventOutcome::Accepted]);
    store.close().await.unwrap();
}

fn filler_batch(call: usize) -> Vec<NewEvent> {
    (0..50)
        .map(|i| {
            let id = format!("call-{call}-event-{i}");
            let ms = i64::try_from(call * 50 + i).unwrap();
            let mut e = event("a", Some(&id), "a-rather-long-event-type-name", ms);
            e.body_sha256 = Some([1u8; 32]);
            e
        })
        .collect()
}

#[tokio::test]
async fn full_disk_answers_err_and_keeps_acknowledged_events() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    // Cap the file a few pages above its size so writes soon hit SQLITE_FULL,
    // as a full disk would, without needing a tiny filesystem.
    store
        .sqlite()
        .call(|c| {
            let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            c.pragma_update(None, "max_page_count", pages + 16)?;
            Ok(())
        })
        .await
        .unwrap();
    let mut acknowledged = 0u64;
    let mut failure = None;
    for call in 0..1_000 {
        match store.record_events(filler_batch(call)).await {
            Ok(outcomes) => acknowledged += u64::try_from(outcomes.len()).unwrap(),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let failure = failure.expect("writes eventually fail");
    assert!(
        matches!(&failure, StoreError::Sql(m) if m.contains("full")),
        "{failure}"
    );
    assert!(acknowledged >= 100, "only {acknowledged} events fit");
    let last_acked = at(i64::try_from(acknowledged).unwrap() - 1);
    store.close().await.unwrap();

    let store = open(&path);
    assert_eq!(store.event_count("a".into()).await.unwrap(), acknowledged);
    assert_eq!(stream(&store, "a").await.last_arrival_at, Some(last_acked));
    store.close().await.unwrap();
}

#[tokio::test]
async fn full_disk_mid_batch_fails_every_job_in_that_batch() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    store
        .watch_streams(names(&["a", "b"]), at(0))
        .await
        .unwrap();
    store
        .sqlite()
        .call(|c| {
            let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            c.pragma_update(None, "max_page_count", pages + 2)?;
            Ok(())
        })
        .await
        .unwrap();
    let resume = pause(&store).await;
    let small = {
        let store = store.clone();
        tokio::spawn(async move { store.record_events(vec![event("b", None, "x", 1)]).await })
    };
    wait_for_queue_depth(&store, 1).await;
    let huge: Vec<NewEvent> = (0..40).flat_map(filler_batch).collect();
    let big = {
        let store = store.clone();
        tokio::spawn(async move { store.record_events(huge).await })
    };
    wait_for_queue_depth(&store, 2).await;
    drop(resume);

    let big = big.await.unwrap();
    assert!(
        matches!(&big, Err(StoreError::Sql(m)) if m.contains("full")),
        "{big:?}"
    );
    // SQLite rolled the whole transaction back, so the small job's write is
    // gone too: it must hear the error rather than a false acknowledgement.
    assert_eq!(small.await.unwrap(), big.map(|_| Vec::new()));
    store.close().await.unwrap();

    let store = open(&path);
    assert_eq!(store.event_count("b".into()).await.unwrap(), 0);
    assert_eq!(store.event_count("a".into()).await.unwrap(), 0);
    store.close().await.unwrap();
}

/// The v1 schema exactly as a v1 binary created it. Frozen here on purpose:
/// if someone edits the shipped v1 migration, this test still checks that
/// real v1 files upgrade.
const V1_SCHEMA: &str = "
    CREATE TABLE streams (
        name TEXT PRIMARY KEY NOT NULL, watch_started_at INTEGER NOT NULL,
        last_arrival_at INTEGER, newest_event_at INTEGER,
        last_event_type TEXT, last_event_id TEXT);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY, stream TEXT NOT NULL REFERENCES streams(name),
        delivery_hash TEXT, event_type TEXT NOT NULL, event_time INTEGER,
        received_at INTEGER NOT NULL,
        feeds_clock INTEGER NOT NULL CHECK (feeds_clock IN (0, 1)),
        body_sha256 BLOB CHECK (body_sha256 IS NULL OR length(body_sha256) = 32));
    CREATE INDEX events_by_stream ON events(stream, received_at);
    CREATE TABLE seen_deliveries (
        hash TEXT PRIMARY KEY NOT NULL, stream TEXT NOT NULL REFERENCES streams(name),
        seen_at INTEGER NOT NULL);
    CREATE INDEX seen_deliveries_by_age ON seen_deliveries(seen_at);
    PRAGMA user_version = 1;";

fn write_v1_file(path: &Path) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(V1_SCHEMA).unwrap();
    conn.execute(
        "INSERT INTO streams VALUES ('okta', 100, 2000, 1900, 'user.login', 'evt-9')",
        [],
    )
    .unwrap();
    let hash = legacy_delivery_hash("okta", "evt-9");
    conn.execute(
        "INSERT INTO events (stream, delivery_hash, event_type, event_time, received_at, feeds_clock)
         VALUES ('okta', ?1, 'user.login', 1900, 2000, 1)",
        [&hash],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO seen_deliveries VALUES (?1, 'okta', 2000)",
        [&hash],
    )
    .unwrap();
}

#[tokio::test]
async fn v1_file_is_migrated_keeping_its_data() {
    let (_dir, path) = temp_db();
    write_v1_file(&path);
    let store = open(&path);
    let row = stream(&store, "okta").await;
    let expected = StreamRow {
        name: "okta".to_owned(),
        watch_started_at: at(100),
        last_arrival_at: Some(at(2_000)),
        newest_event_at: Some(at(1_900)),
        last_event_type: Some("user.login".to_owned()),
        last_event_id: Some("evt-9".to_owned()),
        alert_state: AlertState::Ok,
        firing_since: None,
        cleared_at: None,
    };
    assert_eq!(row, expected);
    assert_eq!(store.event_count("okta".into()).await.unwrap(), 1);
    let redelivery = event("okta", Some("evt-9"), "user.login", 3_000);
    let outcome = store.record_events(vec![redelivery]).await.unwrap();
    assert_eq!(outcome, vec![EventOutcome::Duplicate]);
    // New v2 tables work on the migrated file.
    let fire = Transition {
        stream: "okta".to_owned(),
        ..transition(AlertState::Firing, 5_000, &["pager"])
    };
    assert!(store.record_transition(fire).await.unwrap());
    store.close().await.unwrap();

    let conn = Connection::open(&path).unwrap();
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, binary_version());
}

#[tokio::test]
async fn reopening_a_current_file_reapplies_nothing() {
    let (_dir, path) = temp_db();
    open(&path).close().await.unwrap();
    let store = open(&path);
    store.probe().await.unwrap();
    store.close().await.unwrap();
}

#[test]
fn newer_file_is_refused_and_left_untouched() {
    let (_dir, path) = temp_db();
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE future (x); PRAGMA user_version = 999;")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let result = Store::open(&path);
    let expected = StoreError::TooNew {
        file: 999,
        binary: binary_version(),
    };
    assert_eq!(result.err(), Some(expected));
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[tokio::test]
async fn open_creates_missing_parent_directories() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state").join("nested").join("hw.db");
    let store = open(&path);
    store.probe().await.unwrap();
    store.close().await.unwrap();
    assert!(path.exists());
}

#[test]
fn garbage_file_is_an_open_error() {
    let (_dir, path) = temp_db();
    std::fs::write(&path, vec![b'x'; 8192]).unwrap();
    let result = Store::open(&path);
    assert!(
        matches!(result, Err(StoreError::Open(_))),
        "{:?}",
        result.err()
    );
}

#[tokio::test]
async fn close_finishes_queued_work_then_refuses_more() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let other = store.clone();
    let resume = pause(&store).await;
    let queued = {
        let store = store.clone();
        tokio::spawn(async move { store.record_events(vec![event("a", None, "x", 1)]).await })
    };
    wait_for_queue_depth(&store, 1).await;
    let closer = store.clone();
    let closing = tokio::spawn(async move { closer.close().await });
    wait_for_queue_depth(&store, 2).await;
    drop(resume);
    assert!(queued.await.unwrap().is_ok());
    assert_eq!(closing.await.unwrap(), Ok(()));
    assert_eq!(other.streams().await, Err(StoreError::Closed));
    assert_eq!(other.clone().close().await, Ok(()));
    drop(store);

    let store = open(&path);
    assert_eq!(store.event_count("a".into()).await.unwrap(), 1);
    store.close().await.unwrap();
}

#[tokio::test]
async fn dropping_every_handle_still_finishes_queued_work() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let resume = pause(&store).await;
    let queued = {
        let store = store.clone();
        tokio::spawn(async move { store.record_events(vec![event("a", None, "x", 1)]).await })
    };
    wait_for_queue_depth(&store, 1).await;
    drop(store);
    drop(resume);
    assert!(queued.await.unwrap().is_ok());

    let store = open(&path);
    assert_eq!(store.event_count("a".into()).await.unwrap(), 1);
    store.close().await.unwrap();
}

/// Throughput check, not a pass/fail test: run with
/// `cargo test --release -- --ignored --nocapture throughput`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; prints events/s"]
async fn throughput_10k_events_from_16_tasks() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    let commits_before = store.commits();
    let started = Instant::now();
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..625 {
                    let id = format!("{task}-{i}");
                    let e = event("bench", Some(&id), "login", 1_000 + i);
                    store.record_events(vec![e]).await.expect("record");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    let elapsed = started.elapsed();
    let commits = store.commits() - commits_before;
    assert_eq!(store.event_count("bench".into()).await.unwrap(), 10_000);
    println!(
        "10000 events, 16 tasks: {:.2?}, {:.0} events/s, {commits} commits",
        elapsed,
        10_000.0 / elapsed.as_secs_f64()
    );
    store.close().await.unwrap();
}

/// `audit verify` while `serve` prunes and appends: the reader's anchor,
/// checkpoints and entries come from one snapshot, so a prune between its
/// reads is not taken for deleted entries.
#[tokio::test]
async fn the_audit_reader_reads_one_snapshot_while_the_log_is_pruned_and_appended() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    for i in 0..5 {
        let id = format!("e{i}");
        store
            .record_events(vec![event("s", Some(&id), "user.created", 1_000 + i)])
            .await
            .unwrap();
    }
    let reader = crate::audit::AuditReader::open(&path).unwrap();
    let anchor = reader.anchor().unwrap();
    assert_eq!(store.audit_prune(at(1_003)).await.unwrap(), 3);
    store
        .record_events(vec![event("s", Some("late"), "user.created", 2_000)])
        .await
        .unwrap();
    let mut entries = Vec::new();
    reader
        .for_each(&Default::default(), |e| {
            entries.push(e);
            true
        })
        .unwrap();
    assert_eq!(entries.len(), 5, "the entries of the reader's snapshot");
    let summary = hushwatch_core::audit::verify::verify(
        anchor,
        entries.into_iter(),
        &reader.checkpoints().unwrap(),
        None,
    )
    .expect("one snapshot verifies");
    assert_eq!(summary.last_seq, Some(5));
    store.close().await.unwrap();
}

#[tokio::test]
async fn an_audited_event_is_recorded_once_in_the_audit_log() {
    let (_dir, path) = temp_db();
    let store = open(&path);
    store
        .record_events(vec![event("s", Some("a"), "user.created", 1_000)])
        .await
        .unwrap();
    assert_eq!(
        store.prune_events(at(5_000), 10).await.unwrap(),
        0,
        "no plain events row to prune"
    );
    assert_eq!(store.event_count("s".into()).await.unwrap(), 1);
    store.close().await.unwrap();
    let reader = crate::audit::AuditReader::open(&path).unwrap();
    let mut n = 0;
    reader
        .for_each(&crate::audit::ExportFilter::default(), |_| {
            n += 1;
            true
        })
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn v5_outbox_rows_read_as_critical_pages_after_the_v8_migration() {
    let (_dir, path) = temp_db();
    {
        let conn = Connection::open(&path).unwrap();
        for (version, step) in (1_i64..).zip(&super::schema::positional_sql()[..5]) {
            conn.execute_batch(step).unwrap();
            conn.pragma_update(None, "user_version", version).unwrap();
        }
        conn.execute_batch(
            "INSERT INTO streams (name, watch_started_at) VALUES ('a', 0);
             INSERT INTO outbox (stream, notifier, alert_state, at, reason, created_at, alert_id, alert_kind)
             VALUES ('a', 'pager', 'firing', 1000, 'no a events', 1000, 'id-1', 'silence'),
                    ('a', 'pager', 'firing', 2000, '[critical] Svix endpoint', 2000, 'id-2', 'svix');",
        )
        .unwrap();
    }
    let store = open(&path);
    let rows = store.pending_outbox().await.unwrap().rows;
    let facts: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.alert_kind.as_str(),
                r.severity.as_str(),
                r.source.clone(),
                r.resumed_at,
            )
        })
        .collect();
    assert_eq!(
        facts,
        [
            ("silence", "critical", None, None),
            ("svix", "critical", None, None)
        ]
    );
    store.close().await.unwrap();
}

/// The store stamps rows from the clock it was given, not the wall clock:
/// with a manual clock set in 2031, a page queued now says 2031.
#[tokio::test]
async fn the_store_stamps_pages_and_probes_with_its_clock() {
    let (_dir, path) = temp_db();
    let then = at(1_924_992_000_000); // 2031-01-01T00:00:00Z
    let clock = Arc::new(crate::clock::ManualClock::new(then));
    let store = Store::open_with_clock(&path, clock.clone()).expect("open store");
    store.watch_streams(names(&["a"]), at(0)).await.unwrap();
    assert!(store
        .record_transition(transition(AlertState::Firing, 5_000, &["pager"]))
        .await
        .unwrap());
    let rows = store.pending_outbox().await.unwrap().rows;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].created_at, then);
    clock.advance(chrono::TimeDelta::seconds(7));
    store.probe().await.unwrap();
    store.close().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let probed: i64 = conn
        .query_row("SELECT at FROM probe WHERE id = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(probed, 1_924_992_007_000);
}

/// A file at the version before per-channel dedup, with one remembered id
/// the audit log can attribute (a report) and one it cannot (audit off).
fn write_pre_dedup_file(path: &Path) {
    let step = dedup_step();
    let conn = Connection::open(path).unwrap();
    for sql in &super::schema::positional_sql()[..step] {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", u32::try_from(step).unwrap())
        .unwrap();
    conn.execute(
        "INSERT INTO streams (name, watch_started_at) VALUES ('identity', 100)",
        [],
    )
    .unwrap();
    for (id, seen_at) in [("msg_X", 2_000), ("msg_Y", 2_100)] {
        conn.execute(
            "INSERT INTO seen_deliveries (hash, stream, seen_at) VALUES (?1, 'identity', ?2)",
            rusqlite::params![legacy_delivery_hash("identity", id), seen_at],
        )
        .unwrap();
    }
    conn.execute(
        "INSERT INTO audit_log (seq, received_at, source, channel, delivery_id, event_type,
             event_time, subject_ids, body_sha256, signature_verified, prev_hash, hash)
         VALUES (1, 2000, 'identity', 'report', 'msg_X', 'user.updated', NULL, '[]', NULL, 0, '00', '11')",
        [],
    )
    .unwrap();
}

/// Index of the per-channel dedup step among the positional versions (robust to merges
/// that add steps before it).
fn dedup_step() -> usize {
    super::schema::positional_sql()
        .iter()
        .position(|m| *m == super::schema::DEDUP_PER_CHANNEL)
        .expect("the per-channel dedup migration is listed")
}

#[tokio::test]
async fn pre_dedup_rows_are_attributed_from_the_audit_log_or_kept_as_legacy() {
    let (_dir, path) = temp_db();
    write_pre_dedup_file(&path);
    let store = open(&path);
    let channels: Vec<(String, String)> = store
        .sqlite()
        .call(|c| {
            let mut stmt =
                c.prepare("SELECT hash, channel FROM seen_deliveries ORDER BY seen_at")?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            Ok(rows)
        })
        .await
        .unwrap();
    assert_eq!(
        channels,
        vec![
            (
                delivery_hash("report", "identity", "msg_X"),
                "report".to_owned()
            ),
            (
                legacy_delivery_hash("identity", "msg_Y"),
                "legacy".to_owned()
            ),
        ]
    );
    let webhook =
        |id: &str, ms| on_channel(event("identity", Some(id), "user.deleted", ms), "webhook");
    let outcomes = store
        .record_events(vec![
            // Attributed to the report channel: no longer shadows a webhook.
            webhook("msg_X", 5_000),
            event("identity", Some("msg_X"), "user.updated", 5_001),
            // Unattributable: still a duplicate everywhere until pruned.
            webhook("msg_Y", 5_002),
            event("identity", Some("msg_Y"), "user.updated", 5_003),
        ])
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        vec![
            EventOutcome::Accepted,
            EventOutcome::Duplicate,
            EventOutcome::Duplicate,
            EventOutcome::Duplicate,
        ]
    );
    store.close().await.unwrap();
}

/// What one delivery round's outbox reads cost with a large outbox:
/// `cargo test --release --lib outbox_reads -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "benchmark; prints the time of the delivery worker's outbox reads"]
async fn outbox_reads_with_100k_delivered_pages() {
    let (_dir, path) = temp_db();
    open(&path).close().await.unwrap();
    {
        let mut conn = Connection::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        tx.execute(
            "INSERT INTO streams (name, watch_started_at) VALUES ('a', 0)",
            [],
        )
        .unwrap();
        {
            let mut insert = tx
                .prepare(
                    "INSERT INTO outbox (stream, notifier, alert_state, at, reason, created_at,
                                         alert_id, alert_kind, status, outcome, done_at)
                     VALUES ('a', ?1, ?2, ?3, 'r', ?3, ?4, ?5, 'done', 'delivered', ?3)",
                )
                .unwrap();
            // 50k alerts of 2 pages each (firing, then resolved), half of
            // them Svix, over 4 notifiers; the last 100 stay firing.
            for i in 0..100_000_i64 {
                let alert = i / 2;
                let state = if i % 2 == 0 || alert >= 49_900 {
                    "firing"
                } else {
                    "ok"
                };
                let kind = if alert % 2 == 0 {
                    "silence"
                } else {
                    "svix_endpoint_disabled"
                };
                insert
                    .execute(params![
                        format!("n{}", alert % 4),
                        state,
                        i,
                        format!("alert-{alert}"),
                        kind
                    ])
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let store = open(&path);
    let started = Instant::now();
    let rounds = 20;
    let mut active = 0;
    for _ in 0..rounds {
        active = store.active_firing_pages().await.unwrap().rows.len();
        let _ = store.pending_outbox().await.unwrap();
    }
    println!(
        "100000 delivered pages: active_firing_pages + pending_outbox {:.2?} per round ({active} active)",
        started.elapsed() / rounds
    );
    store.close().await.unwrap();
}
