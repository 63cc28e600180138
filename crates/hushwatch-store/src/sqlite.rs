//! The SQLite backend: one file, one writer thread doing group commit
//! (`writer`), the SQL in `ops`, `audit`, `svix`, `subscriptions` and
//! `status`.
//!
//! Reads go through the same writer thread as writes. That costs little (the
//! workload is a trickle of webhooks plus a periodic evaluator) and buys
//! read-your-writes ordering for free: a read queued after an acknowledged
//! write always sees it, with no second connection, no mutex and no
//! `spawn_blocking`. It also means a read fails when the writer's connection
//! fails, which is what `/v1/status` should report anyway.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::Connection;
use tokio::sync::{broadcast, mpsc, oneshot};

use super::backend::prelude::*;
use super::backend::{operations, Backend, Operations, StoreResult};
use super::writer::{Control, Msg, Task};
use super::Shared;
use super::{core, db, schema, writer};
use crate::clock::Clock;

/// Jobs that may wait for the writer before callers feel backpressure. Each
/// in-flight HTTP request holds at most one slot, so this is far above normal
/// load; past it, `send` waits instead of growing memory without bound.
const QUEUE_CAPACITY: usize = 4096;

/// Cheap, cloneable handle to the writer thread. The thread exits once every
/// handle is dropped or `close` is called, after finishing queued work.
#[derive(Clone)]
pub(crate) struct SqliteBackend {
    pub(super) tx: mpsc::Sender<Msg>,
    shared: Arc<Shared>,
    /// One process owns the file, so its own commits are all the news.
    feed: broadcast::Sender<Change>,
    /// The store's clock (`Backend::now`).
    clock: Arc<dyn Clock>,
}

impl SqliteBackend {
    /// Opens (creating if needed) the database at `path`, migrates it, and
    /// starts the writer thread, stamping on `clock`. Blocking: call it at
    /// startup.
    pub(crate) fn open(path: &Path, clock: Arc<dyn Clock>) -> Result<SqliteBackend, StoreError> {
        let conn = schema::open(path)?;
        tune(&conn)?;
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let shared = Arc::new(Shared::default());
        writer::spawn(conn, rx, Arc::clone(&shared))?;
        Ok(SqliteBackend {
            tx,
            shared,
            feed: broadcast::channel(super::FEED_CAPACITY).0,
            clock,
        })
    }

    /// Another handle on the same writer, stamping on `clock` (as a second
    /// replica would on its own clock).
    #[cfg(any(test, feature = "test-support"))]
    #[cfg_attr(not(test), allow(dead_code))] // test-support: reached from testdb
    pub(crate) fn on_clock(&self, clock: Arc<dyn Clock>) -> SqliteBackend {
        SqliteBackend {
            clock,
            ..self.clone()
        }
    }

    /// Runs `work` on the writer thread inside the next group-commit batch
    /// and resolves once that batch has committed (or failed). `work` runs a
    /// second time when another job of its batch failed (`writer`), so it
    /// only reads and writes through the connection it is given.
    ///
    /// If the caller stops waiting, the job still runs and may commit; that
    /// is safe because a retried delivery is then reported as Duplicate.
    pub(super) async fn call<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Box::new(Task::new(work, reply));
        self.tx
            .send(Msg::Job(job))
            .await
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| StoreError::Closed)?
    }
}

/// How many prepared statements the writer keeps. One ingest job alone
/// runs about ten distinct statements, and the evaluator, outbox, relay
/// and status reads share the connection: with rusqlite's default of 16,
/// those evicted the ingest statements, which were then parsed again.
const STATEMENT_CACHE: usize = 256;

/// Page cache ceiling of the writer's connection, in KiB (SQLite's default
/// is 2 MiB). The hot pages of the dedup, revocation and audit indexes
/// outgrow 2 MiB quickly, and every miss is a `pread` of a page the OS
/// holds anyway (issue #33, `benches/store_writer`: 1.2 reads per event at
/// 2 MiB, 0.25 at 8 MiB with the checkpoint below, no fewer at 32 or
/// 64 MiB). It is resident memory once used: 32 MiB took the ingest
/// bench's peak RSS from 30 to 67 MB for no throughput wrk could see.
const PAGE_CACHE_KIB: i64 = 8 * 1024;

/// WAL pages between automatic checkpoints (SQLite's default is 1,000).
/// A hot page rewritten by many commits is copied into the database once
/// per checkpoint, so rarer checkpoints copy less in total; the WAL grows
/// to about 16 MiB before each. Durability is unchanged: a commit is still
/// fsynced to the WAL (`synchronous=FULL`) before anyone is answered.
const WAL_AUTOCHECKPOINT_PAGES: i64 = 4000;

/// Throughput settings of the writer's connection; none of them touches
/// durability (`schema::configure` holds those).
fn tune(conn: &Connection) -> Result<(), StoreError> {
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)?;
    conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)?;
    Ok(())
}

/// [`super::backend::operations`] on SQLite: each runs on the writer thread
/// in the next group-commit batch.
macro_rules! on_sqlite {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $out:ty
            = $(|$now:ident|)? $($f:ident)::+ ($($call:expr),* $(,)?);
    )*) => {
        #[async_trait]
        impl Operations for SqliteBackend {
            $(
                $(#[$doc])*
                async fn $name(&self, $($arg: $ty),*) -> StoreResult<$out> {
                    $( let $now = self.clock.now(); )?
                    self.call(move |c| db::ready($($f)::+(c, $($call),*))).await
                }
            )*
        }
    };
}
operations!(on_sqlite);

#[async_trait]
impl Backend for SqliteBackend {
    fn engine(&self) -> &'static str {
        "sqlite"
    }

    fn commits(&self) -> u64 {
        self.shared.commits.load(Ordering::Relaxed)
    }

    fn queue_depth(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    async fn record_events(&self, events: Vec<NewEvent>) -> StoreResult<Vec<EventOutcome>> {
        let now = self.clock.now();
        let moved: Vec<(String, bool)> = events
            .iter()
            .map(|e| (e.stream.clone(), e.feeds_clock))
            .collect();
        let (outcomes, _) = self
            .call(move |c| db::ready(core::record_delivery(c, &events, None, now, false)))
            .await?;
        for ((stream, feeds), outcome) in moved.into_iter().zip(&outcomes) {
            if feeds && *outcome == EventOutcome::Accepted {
                let _ = self.feed.send(Change::Arrival(stream));
            }
        }
        Ok(outcomes)
    }

    async fn record_delivery_rows(
        &self,
        events: Vec<NewEvent>,
        update: Option<SubscriptionUpdate>,
        now: DateTime<Utc>,
    ) -> StoreResult<(Vec<EventOutcome>, Vec<StreamRow>)> {
        let (outcomes, rows) = self
            .call(move |c| {
                db::ready(core::record_delivery(
                    c,
                    &events,
                    update.as_ref(),
                    now,
                    true,
                ))
            })
            .await?;
        for row in &rows {
            let _ = self.feed.send(Change::Arrival(row.name.clone()));
        }
        Ok((outcomes, rows))
    }

    fn changes(&self) -> broadcast::Receiver<Change> {
        self.feed.subscribe()
    }

    /// Stops accepting jobs, lets the writer finish everything already
    /// queued, closes the connection (checkpointing the WAL) and waits for
    /// that. A writer that had crashed is `Closed`.
    async fn close(&self) -> StoreResult<()> {
        let (reply, done) = oneshot::channel();
        if self
            .tx
            .send(Msg::Control(Control::Shutdown(reply)))
            .await
            .is_err()
        {
            return Ok(());
        }
        // A dropped reply means the writer died mid-work rather than shutting down.
        done.await.unwrap_or(Err(StoreError::Closed))
    }

    #[cfg(any(test, feature = "test-support"))]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
