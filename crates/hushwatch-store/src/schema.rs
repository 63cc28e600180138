//! Opening the SQLite file: connection settings, and bringing its schema
//! up to date with the named steps of [`super::migrations::STEPS`] through
//! the one runner (`store::migrate`), whose SQLite hooks are here.
//!
//! Each step whose name is not in the file's `schema_migrations` table runs
//! in its own IMMEDIATE transaction together with its record, so a crash
//! mid-migration leaves the file at the last fully applied step, and two
//! processes opening one file cannot both apply a step. A file from before
//! names (`PRAGMA user_version` 1..=17, nothing recorded) is adopted first:
//! its version's steps are recorded, not re-run. `user_version` is still
//! kept (see `migrations::positional_version`) so older binaries refuse a
//! file with steps they do not know.
//!
//! This file holds the SQLite-only step texts; the list is in
//! `store::migrations`.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::db::{ready, Db};
use super::migrate::{self, MigrationTx, Migrator, SchemaDb};
use super::migrations::Engine;
use super::StoreError;

/// How long a statement waits for a lock held by another connection (a
/// backup tool, an operator's sqlite3 shell) before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// 0001: event tracking.
pub(super) const EVENTS: &str = "CREATE TABLE streams (
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
    CREATE INDEX seen_deliveries_by_age ON seen_deliveries(seen_at);";

/// 0002: alert state, notification outbox, readiness probe.
pub(super) const ALERT_STATE_OUTBOX: &str = "
    ALTER TABLE streams ADD COLUMN alert_state TEXT NOT NULL DEFAULT 'ok'
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
    );";

/// 0005: delivery bookkeeping on the outbox (attempts, backoff, outcome,
/// the alert episode id and what the page says) plus a per-database random
/// salt, so page keys never repeat even if the file is recreated.
pub(super) const DELIVERY_BOOKKEEPING: &str = "CREATE TABLE meta (
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
        WHERE page_kind != 'page';";

/// 0009: each page's severity, and for Svix pages the endpoint it is about
/// (`source`, `endpoint_id`: the labels of the shipped Prometheus rules),
/// and for silence resolves the arrival that ended the silence. Rows
/// written before it were all silence pages or Svix pages paged as
/// critical, so that is what they keep saying.
pub(super) const PAGE_SEVERITY_LABELS: &str =
    "ALTER TABLE outbox ADD COLUMN severity TEXT NOT NULL DEFAULT 'critical'
        CHECK (severity IN ('critical', 'warning'));
    ALTER TABLE outbox ADD COLUMN source TEXT;
    ALTER TABLE outbox ADD COLUMN endpoint_id TEXT;
    ALTER TABLE outbox ADD COLUMN resumed_at INTEGER;
    CREATE INDEX outbox_by_alert ON outbox(alert_id, notifier, id);";

/// 0008: streams created from a template (`[streams."PREFIX*"]`), so a
/// restart watches them again, even ones that never heard an event.
pub(super) const TEMPLATED_STREAMS: &str = "
    CREATE TABLE templated_streams (
        name       TEXT PRIMARY KEY NOT NULL,
        created_at INTEGER NOT NULL
    );";

/// 0006: delivery ids are deduplicated per channel (see `ops::delivery_hash`).
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

/// The positional counter (`user_version`) of a file with every step this
/// binary knows.
#[cfg(test)]
pub(super) fn binary_version() -> u32 {
    crate::migrations::binary_version(Engine::Sqlite)
}

/// Opens `path` ready for the writer: checked, configured, migrated.
pub(super) fn open(path: &Path) -> Result<Connection, StoreError> {
    create_parent_dir(path)?;
    let conn = Connection::open_with_flags(path, OpenFlags::default()).map_err(open_err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
    // Checked before any setting that writes to the file, so a file from a
    // newer binary is left exactly as it was: a newer positional binary
    // (or a named one with more steps) raised `user_version`; a different
    // branch's binary may have recorded a step this one does not know.
    ready(migrate::refuse_foreign(&conn)).map_err(|e| match e {
        StoreError::Sql(msg) => StoreError::Open(msg),
        refusal => refusal,
    })?;
    configure(&conn)?;
    register_functions(&conn)?;
    let mut conn = conn;
    ready(migrate::run(&mut conn))?;
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

/// SQLite's side of the runner (`store::migrate`): the counter is
/// `PRAGMA user_version`, and an IMMEDIATE transaction takes the file's
/// write lock at BEGIN, so two processes opening one file take turns.
impl SchemaDb for Connection {
    const ENGINE: Engine = Engine::Sqlite;
    const NOW_MS: &'static str = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

    async fn positional(&self) -> Result<u32, StoreError> {
        Ok(user_version(self)?)
    }

    async fn set_positional(&self, version: u32) -> Result<(), StoreError> {
        Ok(self.pragma_update(None, "user_version", version)?)
    }

    async fn records_names(&self) -> Result<bool, StoreError> {
        let (has_table,): (bool,) = self
            .one(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations')",
                &[],
            )
            .await?;
        Ok(has_table)
    }

    async fn create_records(&self) -> Result<(), StoreError> {
        self.batch(
            "CREATE TABLE schema_migrations (
            name       TEXT PRIMARY KEY NOT NULL,
            applied_at INTEGER NOT NULL
        );",
        )
        .await
    }

    async fn batch(&self, sql: &str) -> Result<(), StoreError> {
        Ok(self.execute_batch(sql)?)
    }
}

impl Migrator for Connection {
    type Tx<'a> = rusqlite::Transaction<'a>;

    async fn begin(&mut self) -> Result<Self::Tx<'_>, StoreError> {
        Ok(self.transaction_with_behavior(TransactionBehavior::Immediate)?)
    }
}

impl MigrationTx for rusqlite::Transaction<'_> {
    type Db = Connection;

    fn db(&self) -> &Connection {
        self
    }

    async fn commit(self) -> Result<(), StoreError> {
        Ok(rusqlite::Transaction::commit(self)?)
    }
}

/// The SQLite SQL of positional versions 1..=17 in order, for tests that
/// build a file as a binary from before names left it.
#[cfg(test)]
pub(super) fn positional_sql() -> Vec<&'static str> {
    crate::migrations::SQLITE_POSITIONAL
        .iter()
        .map(|name| {
            crate::migrations::STEPS
                .iter()
                .find(|s| s.name == *name)
                .and_then(|s| s.sqlite)
                .expect("positional steps have SQLite SQL")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrations;

    /// The state file the last positional binary wrote (user_version 17;
    /// see tests/it/schema_upgrade.rs for the same through the real binary).
    const POSITIONAL_17: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/sqlite_schema17.sqlite3"
    );

    fn names(conn: &Connection) -> Vec<String> {
        let mut stmt = conn
            .prepare("SELECT name FROM schema_migrations ORDER BY rowid")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// Adopted: the 17 positional steps recorded without running (running
    /// 0001 again would fail on the existing tables), then every later step
    /// of the list applied in order; the counter older binaries read is
    /// this binary's; opening again changes nothing.
    #[test]
    fn a_positional_17_file_records_its_steps_then_applies_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hushwatch.sqlite3");
        std::fs::copy(POSITIONAL_17, &path).unwrap();
        let conn = open(&path).unwrap();
        let all: Vec<&str> = migrations::STEPS.iter().map(|s| s.name).collect();
        assert_eq!(names(&conn), all);
        assert_eq!(user_version(&conn).unwrap(), binary_version());
        let recorded: Vec<(String, i64)> = conn
            .prepare("SELECT name, applied_at FROM schema_migrations ORDER BY name")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        drop(conn);
        let conn = open(&path).unwrap();
        let again: Vec<(String, i64)> = conn
            .prepare("SELECT name, applied_at FROM schema_migrations ORDER BY name")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(again, recorded);
    }

    /// Every positional version 0..=17 of a file made step by step the way
    /// the positional binary made it ends with every step recorded once.
    #[test]
    fn every_positional_version_is_adopted() {
        for version in 0..=17_usize {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("hushwatch.sqlite3");
            {
                let conn = Connection::open(&path).unwrap();
                register_functions(&conn).unwrap();
                for sql in &positional_sql()[..version] {
                    conn.execute_batch(sql).unwrap();
                }
                conn.pragma_update(None, "user_version", u32::try_from(version).unwrap())
                    .unwrap();
            }
            let conn = open(&path).unwrap_or_else(|e| panic!("v{version}: {e}"));
            let all: Vec<&str> = migrations::STEPS.iter().map(|s| s.name).collect();
            assert_eq!(names(&conn), all, "v{version}");
            assert_eq!(user_version(&conn).unwrap(), binary_version());
        }
    }

    /// Issue #44's step on a file with relay rows from before it: the table
    /// is rebuilt with every row and index, held becomes a state, and the
    /// rows it found are marked as sealed the old way (key id set), with
    /// their subject as order key and Clerk revocations marked.
    #[test]
    fn forwards_from_before_issue_44_keep_their_rows_and_are_marked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hushwatch.sqlite3");
        {
            let mut conn = Connection::open(&path).unwrap();
            register_functions(&conn).unwrap();
            ready(migrate::adopt(&mut conn)).unwrap();
            for step in migrations::STEPS
                .iter()
                .take_while(|s| s.name != "0022_forward_subjects_held")
            {
                ready(migrate::apply_step(&mut conn, step)).unwrap();
            }
            conn.execute_batch(
                "INSERT INTO forwards (stream, queue, delivery_id, event_type, subject,
                     received_at, give_up_from, moves_clock, key_id, body, next_attempt_at)
                 VALUES ('clerk', 'clerk', 'msg_1', 'user.deleted', 'user_1', 1, 1, 0,
                         'abc', X'00', 1),
                        ('clerk', NULL, 'msg_2', 'user.created', NULL, 2, 2, 0,
                         NULL, X'7b7d', 2);
                 INSERT INTO forward_runs (stream, failures) VALUES ('clerk', 3);",
            )
            .unwrap();
        }
        let conn = open(&path).unwrap();
        type Row = (String, Option<String>, bool, bool, Option<String>);
        let rows: Vec<Row> = conn
            .prepare(
                "SELECT delivery_id, order_key, revocation, aad_v1, queue FROM forwards ORDER BY id",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            rows,
            [
                (
                    "msg_1".into(),
                    Some("user_1".into()),
                    true,
                    true,
                    Some("clerk".into())
                ),
                ("msg_2".into(), None, false, false, None),
            ]
        );
        conn.execute("UPDATE forwards SET state = 'held' WHERE id = 1", [])
            .unwrap();
        let (failures, held_paged): (i64, bool) = conn
            .query_row(
                "SELECT failures, held_paged FROM forward_runs WHERE stream = 'clerk'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((failures, held_paged), (3, false));
        let indexes: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'forwards'
                   AND name LIKE 'forwards_%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(indexes, 7, "the six of 0022 and 0026's webhook-id index");
    }

    /// SQLite's plan of `sql`, one detail line each.
    fn plan(conn: &Connection, sql: &str) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        // The plan is chosen when the statement is prepared; the values
        // bound do not change it.
        let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
        let lines: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(nulls), |r| r.get(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        lines.join("\n")
    }

    /// Issue #44's webhook-id index on a file from just before it: the
    /// rows stay, the index is built, and a lookup by webhook-id seeks it;
    /// the reads of open rows by state stay on the partial `forwards_open`
    /// (they repeat its `state <> 'delivered'`), off the delivered rows.
    #[test]
    fn a_file_from_before_the_webhook_id_index_gets_it_and_lookups_use_their_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hushwatch.sqlite3");
        {
            let mut conn = Connection::open(&path).unwrap();
            register_functions(&conn).unwrap();
            ready(migrate::adopt(&mut conn)).unwrap();
            for step in migrations::STEPS
                .iter()
                .take_while(|s| s.name != "0026_forward_webhook_id_index")
            {
                ready(migrate::apply_step(&mut conn, step)).unwrap();
            }
            conn.execute_batch(
                "INSERT INTO forwards (stream, queue, delivery_id, event_type, received_at,
                     give_up_from, moves_clock, body, next_attempt_at, state)
                 VALUES ('clerk', 'clerk', 'msg_1', 'user.deleted', 1, 1, 0, X'7b7d', 1, 'delivered'),
                        ('clerk', 'clerk', 'msg_2', 'user.deleted', 2, 2, 0, X'7b7d', 2, 'pending');",
            )
            .unwrap();
        }
        let conn = open(&path).unwrap();
        assert!(names(&conn).contains(&"0026_forward_webhook_id_index".to_string()));
        let (n, pending): (i64, String) = conn
            .query_row(
                "SELECT count(*), max(CASE WHEN state = 'pending' THEN delivery_id END) FROM forwards",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((n, pending.as_str()), (2, "msg_2"));
        use crate::forward::sql as fwd;
        use crate::forward_admin::sql as admin;
        for (what, sql) in [("FIND_ANY", admin::FIND_ANY), ("FATE", fwd::FATE)] {
            let p = plan(&conn, sql);
            assert!(p.contains("INDEX forwards_webhook_id"), "{what}: {p}");
        }
        for (what, sql) in [
            ("COUNT_STATE", fwd::COUNT_STATE),
            ("OLDEST_STATE", fwd::OLDEST_STATE),
            ("HELD_NAMED", fwd::HELD_NAMED),
            ("admin COUNT_STATE", admin::COUNT_STATE),
        ] {
            let p = plan(&conn, sql);
            assert!(p.contains("INDEX forwards_open"), "{what}: {p}");
        }
        // Either partial index of open rows serves it.
        let p = plan(&conn, fwd::STUCK_REVOCATIONS);
        assert!(
            p.contains("INDEX forwards_open") || p.contains("INDEX forwards_revocations"),
            "STUCK_REVOCATIONS: {p}"
        );
    }
}
