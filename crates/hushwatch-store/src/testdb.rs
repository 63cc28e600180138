//! Test databases for the backend matrix: a fresh SQLite file in a temp dir,
//! or a fresh PostgreSQL database (see `pg_test`), each reopenable so
//! durability across reopen can be checked on both.
//!
//! Behind the `test-support` feature the root package's unit tests use a
//! part of it; the rest only this crate's tests use.
#![cfg_attr(not(test), allow(dead_code))]

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tempfile::TempDir;

use super::{AlertState, NewEvent, Store, StreamRow, Transition};
use crate::clock::{Clock, SystemClock};

pub(crate) fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("valid test time")
}

pub fn event(stream: &str, id: Option<&str>, event_type: &str, received_ms: i64) -> NewEvent {
    NewEvent {
        stream: stream.to_owned(),
        delivery_id: id.map(str::to_owned),
        event_type: event_type.to_owned(),
        event_time: None,
        received_at: at(received_ms),
        feeds_clock: true,
        body_sha256: None,
        channel: "report",
        signature_verified: false,
        subject_ids: Vec::new(),
        audit: true,
        access: None,
        forward: None,
    }
}

pub(crate) fn on_channel(mut e: NewEvent, channel: &'static str) -> NewEvent {
    e.channel = channel;
    e
}

pub(crate) fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

pub(crate) fn transition(to: AlertState, at_ms: i64, notifiers: &[&str]) -> Transition {
    Transition {
        stream: "a".to_owned(),
        to,
        at: at(at_ms),
        reason: "test".to_owned(),
        notifiers: names(notifiers),
    }
}

pub(crate) async fn stream(store: &Store, name: &str) -> StreamRow {
    let rows = store.streams().await.expect("streams");
    rows.into_iter()
        .find(|row| row.name == name)
        .expect("stream row exists")
}

/// One fresh database of one engine; dropped (PostgreSQL) or deleted with
/// its temp dir (SQLite) when the value is dropped.
pub enum TestDb {
    Sqlite { _dir: TempDir, path: PathBuf },
    Postgres(PgTestDb),
}

impl TestDb {
    pub fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("hushwatch.db");
        TestDb::Sqlite { _dir: dir, path }
    }

    /// Opens (or reopens) the store on the wall clock.
    pub(crate) async fn open(&self) -> Store {
        self.open_with_clock(Arc::new(SystemClock)).await
    }

    pub async fn open_with_clock(&self, clock: Arc<dyn Clock>) -> Store {
        match self {
            TestDb::Sqlite { path, .. } => {
                Store::open_with_clock(path, clock).expect("open SQLite store")
            }
            TestDb::Postgres(db) => Store::open_postgres(&db.settings(), 4, clock)
                .await
                .expect("open PostgreSQL store"),
        }
    }
}

impl TestDb {
    /// Runs `sql` on the database behind hushwatch's back, on a connection
    /// of its own: a row altered at rest, or written by a newer binary.
    pub(crate) async fn alter_at_rest(&self, sql: &str) {
        match self {
            TestDb::Sqlite { path, .. } => {
                let conn = rusqlite::Connection::open(path).expect("open the file");
                conn.busy_timeout(std::time::Duration::from_secs(10))
                    .expect("busy timeout");
                conn.execute_batch(sql).expect("alter at rest");
            }
            TestDb::Postgres(db) => super::pg::admin::exec(&db.url, sql)
                .await
                .expect("alter at rest"),
        }
    }

    /// A second handle on the same database, as another replica would
    /// have. SQLite allows one writer per file, so there it is a clone of
    /// `first` (one process, several callers).
    pub(crate) async fn open_second(&self, first: &Store) -> Store {
        self.open_second_with_clock(first, Arc::new(SystemClock))
            .await
    }

    /// `open_second` on another clock (e.g. a second `ManualClock` handle).
    pub(crate) async fn open_second_with_clock(
        &self,
        first: &Store,
        clock: Arc<dyn Clock>,
    ) -> Store {
        match self {
            TestDb::Sqlite { .. } => Store::with_backend(Arc::new(first.sqlite().on_clock(clock))),
            TestDb::Postgres(_) => self.open_with_clock(clock).await,
        }
    }

    /// A fresh database on the server of `HUSHWATCH_TEST_PG_URL`. Without
    /// the variable, or with the server down: prints why and returns None,
    /// unless `HUSHWATCH_REQUIRE_PG=1`, which makes both a failure.
    pub(crate) async fn postgres() -> Option<TestDb> {
        PgTestDb::create().await.map(TestDb::Postgres)
    }
}

/// The admin URL of the test server (a role that may create databases).
pub(crate) const PG_URL_VAR: &str = "HUSHWATCH_TEST_PG_URL";
pub(crate) const REQUIRE_PG_VAR: &str = "HUSHWATCH_REQUIRE_PG";

fn pg_required() -> bool {
    std::env::var(REQUIRE_PG_VAR).is_ok_and(|v| v == "1")
}

/// A database created for one test and dropped (`WITH (FORCE)`, so open
/// connections do not keep it) when this value is dropped.
pub struct PgTestDb {
    admin_url: String,
    pub(crate) name: String,
    pub(crate) url: String,
}

impl PgTestDb {
    pub(crate) async fn create() -> Option<PgTestDb> {
        let Ok(admin_url) = std::env::var(PG_URL_VAR) else {
            assert!(
                !pg_required(),
                "{REQUIRE_PG_VAR}=1 but {PG_URL_VAR} is not set"
            );
            skip_notice(&format!(
                "SKIPPED: {PG_URL_VAR} is not set (scripts/test sets it)"
            ));
            return None;
        };
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("hw_test_{}_{n}", std::process::id());
        match super::pg::admin::exec(&admin_url, &format!("CREATE DATABASE {name}")).await {
            Ok(()) => {}
            Err(e) if !pg_required() => {
                skip_notice(&format!(
                    "SKIPPED: PostgreSQL at {PG_URL_VAR} is unavailable: {e}"
                ));
                return None;
            }
            Err(e) => panic!("{REQUIRE_PG_VAR}=1 but PostgreSQL is unavailable: {e}"),
        }
        let mut url = url::Url::parse(&admin_url).expect("admin URL");
        url.set_path(&name);
        Some(PgTestDb {
            admin_url,
            name,
            url: url.to_string(),
        })
    }

    pub(crate) fn settings(&self) -> super::pg::Settings {
        super::pg::settings::parse(&self.url, std::path::Path::new(".")).expect("test URL")
    }

    /// Refuses (or allows again) new connections to this database: the
    /// database is unreachable for hushwatch, as in an outage.
    pub(crate) async fn set_allow_connections(&self, allow: bool) {
        super::pg::admin::exec(
            &self.admin_url,
            &format!(
                "ALTER DATABASE {} WITH ALLOW_CONNECTIONS {allow}",
                self.name
            ),
        )
        .await
        .expect("alter database");
    }

    /// Ends every connection to this database (a server-side fault).
    pub(crate) async fn terminate_connections(&self) -> u64 {
        super::pg::admin::terminate_connections(&self.admin_url, &self.name).await
    }
}

impl Drop for PgTestDb {
    fn drop(&mut self) {
        let admin = self.admin_url.clone();
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // Drop runs inside a runtime (or while unwinding from a panic in
        // one), so the drop gets its own thread and runtime.
        let dropped = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?
                .block_on(super::pg::admin::exec(&admin, &sql))
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("could not drop test database {}: {e}", self.name);
        }
    }
}

/// A skipped PostgreSQL test says so on the terminal even though cargo's
/// test harness captures `println!`: writing to the stderr handle directly
/// bypasses the capture, so a plain `cargo test` shows every skip among the
/// results instead of counting it silently as passed.
fn skip_notice(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}
