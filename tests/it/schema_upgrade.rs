//! Named schema steps (`store::migrations`): databases written by the last
//! binary with POSITIONAL versions upgrade in place. The state files were
//! made by that binary itself, not rebuilt here:
//! - `tests/data/sqlite_schema17.sqlite3`: `hushwatch serve` on SQLite
//!   (`user_version` 17), a firing and a resolved page, three events, a
//!   clean stop (so its audit checkpoint);
//! - `tests/data/pg_schema9.sql`: the same on PostgreSQL (`schema_version`
//!   9), as `pg_dump --inserts`.
//!
//! The real binary opens each: every row is still there, the steps each
//! version stood for are recorded (not re-run: re-running would fail on
//! the existing tables or mint a new page-key salt), the store works
//! (dedup remembers the old deliveries, the audit chain continues), and
//! opening again applies and records nothing.

use crate::common;
use crate::common::pg;

use std::path::Path;
use std::process::Output;

use common::{basic_config, post_events, sqlite_rows, Sidecar, Workdir, TOKEN};
use pg::PgDb;

/// The steps the positional-era binaries knew (`store::migrations`). The
/// upgraded databases record these and any step added since; the exact
/// list is checked in the unit tests (`store::schema`), so appending a
/// step needs no change here.
const KNOWN_THEN: [&str; 18] = [
    "0001_events",
    "0002_alert_state_outbox",
    "0003_audit_log",
    "0004_svix",
    "0005_delivery_bookkeeping",
    "0006_dedup_per_channel",
    "0007_audit_by_stream",
    "0008_templated_streams",
    "0009_page_severity_labels",
    "0010_subscriptions",
    "0011_silences",
    "0012_replicas",
    "0013_reconciliations",
    "0014_stale_grants",
    "0015_notifier_failures",
    "0016_gap_counts",
    "0017_revocation_index",
    "0018_stream_changes",
];

/// Rows that carry clocks, page identity and the audit chain, one text
/// line each, in the same SQL on both engines.
const ROWS: &[&str] = &[
    "SELECT name || '|' || watch_started_at || '|' || coalesce(last_arrival_at, -1)
       || '|' || coalesce(last_event_id, '') || '|' || alert_state || '|' || coalesce(firing_since, -1)
       FROM streams ORDER BY name",
    "SELECT id || '|' || alert_id || '|' || alert_state || '|' || status || '|' || created_at
       || '|' || severity || '|' || coalesce(outcome, '') FROM outbox ORDER BY id",
    "SELECT seq || '|' || coalesce(delivery_id, '') || '|' || hash FROM audit_log ORDER BY seq",
    "SELECT hash || '|' || channel FROM seen_deliveries ORDER BY hash",
    "SELECT value FROM meta WHERE key = 'salt'",
];

/// The recorded steps with when they were recorded: identical after a
/// re-open means the re-open applied and recorded nothing.
const RECORDED: &str = "SELECT name || '|' || applied_at FROM schema_migrations ORDER BY name";
const NAMES: &str = "SELECT name FROM schema_migrations ORDER BY name";

fn assert_records_every_old_step(recorded: &[String]) {
    for name in KNOWN_THEN {
        assert!(recorded.iter().any(|r| r == name), "{name} in {recorded:?}");
    }
    // Anything else is a step appended after them.
    assert!(
        recorded
            .iter()
            .all(|r| KNOWN_THEN.contains(&r.as_str()) || r.as_str() > "0018"),
        "{recorded:?}"
    );
}

fn hushwatch(args: &[&str], env: &[(&str, &str)]) -> Output {
    common::cli(args).envs(env).output()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn sqlite_user_version(path: &Path) -> u32 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

/// One serve of the upgraded store: a redelivery of an event the old
/// binary accepted is still a duplicate, and a new event is accepted.
fn serve_and_ingest(config: &Path, env: &[(&str, &str)], new_id: &str) {
    let s = Sidecar::start_with_env(config, env);
    let again = post_events(
        s.addr,
        "identity",
        TOKEN,
        r#"{"type": "user.deleted", "id": "evt_1"}"#,
    );
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json()["duplicate"], 1, "{}", again.body);
    let body = format!(r#"{{"type": "user.deleted", "id": "{new_id}"}}"#);
    let next = post_events(s.addr, "identity", TOKEN, &body);
    assert_eq!(next.status, 200, "{}", next.body);
    assert_eq!(next.json()["accepted"], 1, "{}", next.body);
    let status = common::stream_status(s.addr, "identity");
    assert_eq!(status["last_event_id"], new_id, "{status}");
    assert!(s.stop().success());
}

/// The old rows are a prefix of the new ones (new events and pages only
/// append; the `meta` salt and old rows never change).
fn assert_kept(before: &[Vec<String>], after: &[Vec<String>]) {
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        if ROWS[i].contains("FROM streams") {
            // The one stream row moves on with the new arrival; its watch
            // start (the silence clock's origin) does not.
            let start = |rows: &[String]| rows[0].split('|').take(2).collect::<Vec<_>>().join("|");
            assert_eq!(start(a), start(b), "{}", ROWS[i]);
        } else if ROWS[i].contains("seen_deliveries") {
            assert!(b.iter().all(|row| a.contains(row)), "{b:?} kept in {a:?}");
        } else {
            assert_eq!(&a[..b.len()], &b[..], "{}", ROWS[i]);
        }
    }
}

const CONFIG: &str = "calendar = \"always\"\nsilence_threshold = \"1h\"";

#[test]
fn a_sqlite_file_at_positional_version_17_is_adopted_in_place() {
    let work = Workdir::new(&basic_config(CONFIG));
    let file = work.path().join("data/hushwatch.sqlite3");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::copy("tests/data/sqlite_schema17.sqlite3", &file).unwrap();
    assert_eq!(sqlite_user_version(&file), 17);
    let before: Vec<Vec<String>> = ROWS.iter().map(|q| sqlite_rows(&file, q)).collect();
    assert_eq!(
        before[1].len(),
        2,
        "a firing and a resolved page: {before:?}"
    );
    assert_eq!(before[2].len(), 3, "three audited events: {before:?}");

    let config = work.config_path();
    serve_and_ingest(&config, &[], "evt_4");

    // Every step is recorded. The counter older binaries read counts the
    // steps with SQLite SQL (0018 has none): 17 until a step is appended.
    assert_records_every_old_step(&sqlite_rows(&file, NAMES));
    let counter = sqlite_user_version(&file);
    assert!(counter >= 17, "{counter}");
    let after: Vec<Vec<String>> = ROWS.iter().map(|q| sqlite_rows(&file, q)).collect();
    assert_kept(&before, &after);
    let verify = hushwatch(
        &["audit", "verify", "--config", config.to_str().unwrap()],
        &[],
    );
    assert!(verify.status.success(), "{verify:?}");
    assert!(
        stdout(&verify).contains("audit log intact: 4 entries"),
        "{verify:?}"
    );

    // Re-opening applies and records nothing.
    let recorded = sqlite_rows(&file, RECORDED);
    serve_and_ingest(&config, &[], "evt_5");
    assert_eq!(sqlite_rows(&file, RECORDED), recorded);
    assert_eq!(sqlite_user_version(&file), counter);
}

#[test]
fn a_sqlite_file_recording_a_step_this_binary_lacks_is_refused_untouched() {
    let work = Workdir::new(&basic_config(CONFIG));
    let file = work.path().join("data/hushwatch.sqlite3");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::copy("tests/data/sqlite_schema17.sqlite3", &file).unwrap();
    let config = work.config_path();
    let s = Sidecar::start(&config);
    assert!(s.stop().success());
    // A step from another branch's binary, same positional count.
    rusqlite::Connection::open(&file)
        .unwrap()
        .execute(
            "INSERT INTO schema_migrations (name, applied_at) VALUES ('0019_from_elsewhere', 1)",
            [],
        )
        .unwrap();
    let bytes = std::fs::read(&file).unwrap();
    let out = hushwatch(&["serve", "--config", config.to_str().unwrap()], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("0019_from_elsewhere"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), bytes, "the file was touched");
}

#[test]
fn a_postgres_database_at_positional_version_9_is_adopted_in_place() {
    let Some(db) = PgDb::create("schema_upgrade") else {
        return;
    };
    let dump = std::fs::read_to_string("tests/data/pg_schema9.sql").unwrap();
    db.query(&dump);
    assert_eq!(db.query("SELECT version::TEXT FROM schema_version"), ["9"]);
    assert!(db
        .query("SELECT to_regclass('schema_migrations')::TEXT")
        .iter()
        .all(String::is_empty));
    let before: Vec<Vec<String>> = ROWS.iter().map(|q| db.query(q)).collect();
    assert_eq!(
        before[1].len(),
        2,
        "a firing and a resolved page: {before:?}"
    );
    assert_eq!(before[2].len(), 3, "three audited events: {before:?}");

    let work = Workdir::new(&format!(
        "{}\n[store]\nurl = \"${{HW_PG_URL}}\"\n",
        basic_config(CONFIG)
    ));
    let config = work.config_path();
    let env = [("HW_PG_URL", db.url.as_str())];
    serve_and_ingest(&config, &env, "evt_4");

    assert_records_every_old_step(&db.query(NAMES));
    let counter = db.query("SELECT version::TEXT FROM schema_version");
    assert!(counter[0].parse::<u32>().unwrap() >= 9, "{counter:?}");
    let after: Vec<Vec<String>> = ROWS.iter().map(|q| db.query(q)).collect();
    assert_kept(&before, &after);
    let verify = hushwatch(
        &["audit", "verify", "--config", config.to_str().unwrap()],
        &env,
    );
    assert!(verify.status.success(), "{verify:?}");
    assert!(
        stdout(&verify).contains("audit log intact: 4 entries"),
        "{verify:?}"
    );

    let recorded = db.query(RECORDED);
    serve_and_ingest(&config, &env, "evt_5");
    assert_eq!(db.query(RECORDED), recorded);
    assert_eq!(
        db.query("SELECT version::TEXT FROM schema_version"),
        counter
    );
}
