//! Test databases for the backend matrix: a fresh SQLite file in a temp dir,
//! or a fresh PostgreSQL database (see `pg_test`), each reopenable so
//! durability across reopen can be checked on both.

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tempfile::TempDir;

use super::{AlertState, NewEvent, Store, StreamRow, Transition};
use crate::clock::{Clock, SystemClock};

pub(crate) fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("valid test time")
}

pub(crate) fn event(
    stream: &str,
    id: Option<&str>,
    event_type: &str,
    received_ms: i64,
) -> NewEvent {
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
pub(crate) enum TestDb {
    Sqlite { _dir: TempDir, path: PathBuf },
}

impl TestDb {
    pub(crate) fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("hushwatch.db");
        TestDb::Sqlite { _dir: dir, path }
    }

    /// Opens (or reopens) the store on the wall clock.
    pub(crate) async fn open(&self) -> Store {
        self.open_with_clock(Arc::new(SystemClock)).await
    }

    pub(crate) async fn open_with_clock(&self, clock: Arc<dyn Clock>) -> Store {
        match self {
            TestDb::Sqlite { path, .. } => {
                Store::open_with_clock(path, clock).expect("open SQLite store")
            }
        }
    }
}

impl TestDb {
    /// A second handle on the same database, as another replica would
    /// have. SQLite allows one writer per file, so there it is a clone of
    /// `first` (one process, several callers).
    pub(crate) async fn open_second(&self, first: &Store) -> Store {
        match self {
            TestDb::Sqlite { .. } => first.clone(),
        }
    }

    /// Without `HUSHWATCH_TEST_PG_URL`: prints why and returns None.
    pub(crate) async fn postgres() -> Option<TestDb> {
        println!("skipped: PostgreSQL backend not built yet");
        None
    }
}
