//! Opening the database file: connection settings and versioned migrations.
//!
//! The schema version lives in `PRAGMA user_version`. `MIGRATIONS[i]` takes
//! a file from version `i` to `i + 1`; each step runs in its own transaction
//! together with the version bump, so a crash mid-migration leaves the file
//! at the last fully applied version. Steps are append-only: never edit one
//! that has shipped, add a new one instead.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::StoreError;

/// How long a statement waits for a lock held by another connection (a
/// backup tool, an operator's sqlite3 shell) before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// v1: event tracking. v2: alert state, notification outbox, readiness probe.
/// v3: audit log. v4: Svix state.
/// v5: delivery bookkeeping on the outbox (attempts, backoff, outcome, the
/// alert episode id and what the page says) plus a per-database random
/// salt, so page keys never repeat even if the file is recreated.
/// v6: per-channel delivery dedup.
/// v7: an index on the audit log by stream, for the status page's timeline.
/// v8: each page's severity, and for Svix pages the endpoint it is about
/// (`source`, `endpoint_id`: the labels of the shipped Prometheus rules),
/// and for silence resolves the arrival that ended the silence.
pub(super) const MIGRATIONS: &[&str] = &[
    // v1
    "CREATE TABLE streams (
        name             TEXT PRIMARY KEY NOT NULL,
        watch_started_at INTEGER NOT NULL,
        last_arrival_at  INTEGER,
        newest_event_at  INTEGER,
        last_event_type  TEXT,
        last_event_id    TEXT
    );
    CREATE TABLE events (
        id            INTEGER PRIMARY KEY,
        stream        TEXT NOT NULL REFERENCES streams(name),
        delivery_hash TEXT,
        event_type    TEXT NOT NULL,
        event_time    INTEGER,
        received_at   INTEGER NOT NULL,
        feeds_clock   INTEGER NOT NULL CHECK (feeds_clock IN (0, 1)),
        body_sha256   BLOB CHECK (body_sha256 IS NULL OR length(body_sha256) = 32)
    );
    CREATE INDEX events_by_stream ON events(stream, received_at);
    CREATE TABLE seen_deliveries (
        hash    TEXT PRIMARY KEY NOT NULL,
        stream  TEXT NOT NULL REFERENCES streams(name),
        seen_at INTEGER NOT NULL
    );
    CREATE INDEX seen_deliveries_by_age ON seen_deliveries(seen_at);",
    // v2
    "ALTER TABLE streams ADD COLUMN alert_state TEXT NOT NULL DEFAULT 'ok'
        CHECK (alert_state IN ('ok', 'firing'));
    ALTER TABLE streams ADD COLUMN firing_since INTEGER;
    ALTER TABLE streams ADD COLUMN cleared_at INTEGER;
    CREATE TABLE outbox (
        id          INTEGER PRIMARY KEY,
        stream      TEXT NOT NULL REFERENCES streams(name),
        notifier    TEXT NOT NULL,
        alert_state TEXT NOT NULL CHECK (alert_state IN ('ok', 'firing')),
        at          INTEGER NOT NULL,
        reason      TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        status      TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done')),
        done_at     INTEGER
    );
    CREATE INDEX outbox_pending ON outbox(id) WHERE status = 'pending';
    CREATE TABLE probe (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        at INTEGER NOT NULL
    );",
    super::audit::MIGRATION,
    super::svix::MIGRATION,
    // v5
    "CREATE TABLE meta (
        key   TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL
    );
    INSERT INTO meta (key, value) VALUES ('salt', lower(hex(randomblob(16))));
    ALTER TABLE outbox ADD COLUMN page_kind TEXT NOT NULL DEFAULT 'page'
        CHECK (page_kind IN ('page', 'reminder', 'escalation'));
    ALTER TABLE outbox ADD COLUMN alert_id TEXT;
    ALTER TABLE outbox ADD COLUMN started_at INTEGER;
    ALTER TABLE outbox ADD COLUMN silent_since INTEGER;
    ALTER TABLE outbox ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE outbox ADD COLUMN first_attempt_at INTEGER;
    ALTER TABLE outbox ADD COLUMN next_attempt_at INTEGER;
    ALTER TABLE outbox ADD COLUMN last_error TEXT;
    ALTER TABLE outbox ADD COLUMN outcome TEXT
        CHECK (outcome IS NULL OR outcome IN ('delivered', 'failed'));
    ALTER TABLE outbox ADD COLUMN step INTEGER;
    ALTER TABLE outbox ADD COLUMN alert_kind TEXT NOT NULL DEFAULT 'silence';
    UPDATE outbox SET outcome = 'delivered' WHERE status = 'done';
    CREATE INDEX outbox_by_outcome ON outbox(outcome, done_at);
    CREATE UNIQUE INDEX outbox_extra_once ON outbox(alert_id, page_kind, step, notifier)
        WHERE page_kind != 'page';",
    DEDUP_PER_CHANNEL,
    // v7
    super::status::MIGRATION,
    // v8
    TEMPLATED_STREAMS,
    // v9: rows written before it were all silence pages or Svix pages
    // paged as critical, so that is what they keep saying.
    "ALTER TABLE outbox ADD COLUMN severity TEXT NOT NULL DEFAULT 'critical'
        CHECK (severity IN ('critical', 'warning'));
    ALTER TABLE outbox ADD COLUMN source TEXT;
    ALTER TABLE outbox ADD COLUMN endpoint_id TEXT;
    ALTER TABLE outbox ADD COLUMN resumed_at INTEGER;
    CREATE INDEX outbox_by_alert ON outbox(alert_id, notifier, id);",
    // v10
    super::subscriptions::MIGRATION,
    // v11: operator silences, held firing pages, acknowledgements
    super::silences::MIGRATION,
    // v12: outbox claims with leases, the leader lease, replica heartbeats
    super::replica::MIGRATION,
    // v13: reconciliation reports and the missing-reconciliation alert
    super::reconcile::MIGRATION,
    // v14: grants that arrived after their revocation with an older event time
    super::reconcile::STALE_GRANTS_MIGRATION,
    // v15: the fallback ladder's consecutive failures per notifier, shared by replicas
    super::ladder::MIGRATION,
    // v16: learned gaps between arrivals, per stream and UTC day
    super::gaps::MIGRATION,
    // v17: the per-subject revocation index (`store::revocations`)
    super::revocations::MIGRATION,
];

/// v8: streams created from a template (`[streams."PREFIX*"]`), so a
/// restart watches them again, even ones that never heard an event.
pub(super) const TEMPLATED_STREAMS: &str = "
    CREATE TABLE templated_streams (
        name       TEXT PRIMARY KEY NOT NULL,
        created_at INTEGER NOT NULL
    );";

/// v6: delivery ids are deduplicated per channel (see `ops::delivery_hash`).
/// Old rows were keyed by hash(stream, id) for every channel, and the raw id
/// is gone, so they cannot simply be re-keyed. But while the audit log is on
/// (the default) every accepted event left its raw delivery id and channel
/// there, which is enough to recompute both the old key and the new one: rows
/// found that way get the new key and their channel. The rest (audit off,
/// or older than what the audit log kept) stay under the old key marked
/// `legacy`, are still honoured as duplicates in every channel, and are gone
/// after the usual 7-day pruning. Only audit entries at least as new as the
/// oldest remembered delivery are hashed (about a week of them), through a
/// keyed temporary table so the step stays linear in both tables.
pub(super) const DEDUP_PER_CHANNEL: &str = "
    ALTER TABLE seen_deliveries ADD COLUMN channel TEXT NOT NULL DEFAULT 'legacy';
    CREATE TEMP TABLE v6_rekey (
        old_hash TEXT PRIMARY KEY NOT NULL,
        new_hash TEXT NOT NULL,
        channel  TEXT NOT NULL
    );
    INSERT OR IGNORE INTO v6_rekey (old_hash, new_hash, channel)
        SELECT hushwatch_legacy_delivery_hash(source, delivery_id),
               hushwatch_delivery_hash(channel, source, delivery_id),
               channel
          FROM audit_log
         WHERE delivery_id IS NOT NULL
           AND received_at >= (SELECT coalesce(min(seen_at), 0) FROM seen_deliveries);
    UPDATE seen_deliveries
       SET hash = (SELECT new_hash FROM v6_rekey WHERE old_hash = seen_deliveries.hash),
           channel = (SELECT channel FROM v6_rekey WHERE old_hash = seen_deliveries.hash)
     WHERE channel = 'legacy'
       AND hash IN (SELECT old_hash FROM v6_rekey);
    DROP TABLE v6_rekey;";

/// The schema version this binary writes.
pub(super) fn binary_version() -> u32 {
    // MIGRATIONS is a short literal list; the length always fits.
    u32::try_from(MIGRATIONS.len()).unwrap_or(u32::MAX)
}

/// Opens `path` ready for the writer: version checked, configured, migrated.
pub(super) fn open(path: &Path) -> Result<Connection, StoreError> {
    create_parent_dir(path)?;
    let conn = Connection::open_with_flags(path, OpenFlags::default()).map_err(open_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
    // Checked before any setting that writes to the file, so a file from a
    // newer binary is left exactly as it was.
    let file_version = user_version(&conn).map_err(open_err)?;
    if file_version > binary_version() {
        return Err(StoreError::TooNew {
            file: file_version,
            binary: binary_version(),
        });
    }
    configure(&conn)?;
    register_functions(&conn)?;
    let mut conn = conn;
    migrate(&mut conn)?;
    Ok(conn)
}

fn create_parent_dir(path: &Path) -> Result<(), StoreError> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::Open(format!("cannot create {}: {e}", dir.display()))),
        _ => Ok(()),
    }
}

fn open_err(e: rusqlite::Error) -> StoreError {
    StoreError::Open(e.to_string())
}

fn user_version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Durability settings. Each is read back because SQLite ignores some pragmas
/// silently (e.g. WAL on a filesystem that cannot do it), and running with a
/// weaker setting than we believe would break the fail-closed promise.
fn configure(conn: &Connection) -> Result<(), StoreError> {
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(open_err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Open(format!(
            "journal_mode is {mode}, WAL is required"
        )));
    }
    // FULL: fsync the WAL at every commit, so an acknowledged event survives
    // power loss (NORMAL would only survive a process crash).
    set_and_verify(conn, "synchronous", 2)?;
    set_and_verify(conn, "foreign_keys", 1)?;
    Ok(())
}

/// The dedup key functions, callable from migration SQL (v6 re-keys rows).
fn register_functions(conn: &Connection) -> Result<(), StoreError> {
    use rusqlite::functions::FunctionFlags;
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_scalar_function("hushwatch_delivery_hash", 3, flags, |ctx| {
        Ok(super::ops::delivery_hash(
            &ctx.get::<String>(0)?,
            &ctx.get::<String>(1)?,
            &ctx.get::<String>(2)?,
        ))
    })
    .map_err(open_err)?;
    conn.create_scalar_function("hushwatch_legacy_delivery_hash", 2, flags, |ctx| {
        Ok(super::ops::legacy_delivery_hash(
            &ctx.get::<String>(0)?,
            &ctx.get::<String>(1)?,
        ))
    })
    .map_err(open_err)
}

fn set_and_verify(conn: &Connection, pragma: &str, value: i64) -> Result<(), StoreError> {
    conn.pragma_update(None, pragma, value).map_err(open_err)?;
    let actual: i64 = conn
        .pragma_query_value(None, pragma, |row| row.get(0))
        .map_err(open_err)?;
    if actual != value {
        return Err(StoreError::Open(format!(
            "PRAGMA {pragma} is {actual}, expected {value}"
        )));
    }
    Ok(())
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    for (to, sql) in (1..).zip(MIGRATIONS) {
        apply_step(conn, to, sql)?;
    }
    Ok(())
}

/// Applies the step that produces version `to` unless the file already has
/// it. The version is re-read inside the write transaction so two processes
/// racing to open a fresh file cannot both apply a step.
fn apply_step(conn: &mut Connection, to: u32, sql: &str) -> Result<(), StoreError> {
    let fail = |e: rusqlite::Error| StoreError::Migration(format!("to v{to}: {e}"));
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail)?;
    if user_version(&tx).map_err(fail)? >= to {
        return Ok(());
    }
    tx.execute_batch(sql).map_err(fail)?;
    tx.pragma_update(None, "user_version", to).map_err(fail)?;
    tx.commit().map_err(fail)
}
