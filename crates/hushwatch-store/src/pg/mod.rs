//! The PostgreSQL backend: any number of hushwatch processes share one
//! database (`[store] url`).
//!
//! Every `Backend` call is one transaction on a pooled connection
//! (deadpool-postgres); it resolves `Ok` only after `COMMIT` returned, so a
//! 2xx follows a PostgreSQL commit. Connections are checked before reuse
//! (`RecyclingMethod::Verified`): after the server dropped them (restart,
//! `pg_terminate_backend`), the operation that was running fails, and the
//! next one gets a fresh connection. Nothing is retried behind the
//! caller's back: a failed commit may or may not have happened, and only
//! the sender's retry (deduplicated) can settle that.

#[cfg(any(test, feature = "test-support"))]
pub(crate) mod admin;
mod array;
mod batch;
mod bulk;
pub mod clock;
pub mod migrate;
mod ops;
pub mod reach;
mod reader;
mod replica;
pub(crate) mod schema;
pub mod settings;
mod sql;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{
    ClientWrapper, Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime,
};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::backend::prelude::*;
use super::backend::{operations, Backend, Operations, StoreResult};
use crate::clock::Clock;
pub(crate) use array::TextArray;
pub(crate) use reader::PgReader;
pub use settings::Settings;
/// The driver's parameter and column traits, for `store::db`'s `Arg` and
/// `Cell`, which both drivers must implement.
pub(crate) use tokio_postgres::types::{FromSql, ToSql};

/// The LISTEN/NOTIFY channel an arrival is announced on (`store::core`).
pub(crate) fn replica_channel() -> &'static str {
    replica::CHANNEL
}

/// Connections per process unless `[store] pool_size` says otherwise.
pub const DEFAULT_POOL_SIZE: usize = 8;

/// How long a call waits for a free pooled connection before failing
/// (then ingest answers 503).
const POOL_WAIT: Duration = Duration::from_secs(10);

/// How long the server lets one of our sessions sit inside a transaction
/// without sending its next statement before it ends that session (and so
/// releases its row locks). Every transaction here runs its statements
/// back to back, so a gap this long means the process is frozen
/// (`SIGSTOP`, a paused VM, a half-open connection): without this bound a
/// replica frozen while electing or appending would hold the leader row
/// or the audit head forever, and stall every other replica behind it.
/// The frozen process's transaction fails, so nothing it had not
/// acknowledged is claimed; its next call gets a fresh connection.
pub(crate) const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(5);

/// One line naming what failed. Database errors keep only their SQLSTATE
/// and primary message (never DETAIL, which can quote row values).
pub(crate) fn pg_err(e: tokio_postgres::Error) -> StoreError {
    StoreError::Sql(pg_err_text(&e))
}

fn pg_err_text(e: &tokio_postgres::Error) -> String {
    let msg = match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    };
    msg.lines().next().unwrap_or_default().to_owned()
}

pub(crate) fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_err(e),
        other => StoreError::Sql(format!("database unavailable: {other}")),
    }
}

/// Builds a pool for `settings` (no connection is made yet).
pub(crate) fn pool(settings: &Settings, size: usize) -> Result<Pool, StoreError> {
    let manager_config = ManagerConfig {
        recycling_method: RecyclingMethod::Verified,
    };
    let manager = match &settings.tls {
        None => Manager::from_config(
            settings.config.clone(),
            tokio_postgres::NoTls,
            manager_config,
        ),
        Some(tls) => Manager::from_config(
            settings.config.clone(),
            tokio_postgres_rustls::MakeRustlsConnect::new((**tls).clone()),
            manager_config,
        ),
    };
    // Set per session after connecting rather than as a startup `options`
    // parameter, which connection poolers such as PgBouncer refuse.
    let bound_idle_transactions = Hook::async_fn(|client: &mut ClientWrapper, _| {
        Box::pin(async move {
            let ms = IDLE_IN_TRANSACTION_TIMEOUT.as_millis();
            client
                .batch_execute(&format!("SET idle_in_transaction_session_timeout = {ms}"))
                .await
                .map_err(HookError::Backend)
        })
    });
    Pool::builder(manager)
        .post_create(bound_idle_transactions)
        .max_size(size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(POOL_WAIT))
        .create_timeout(Some(settings::CONNECT_TIMEOUT))
        .recycle_timeout(Some(settings::CONNECT_TIMEOUT))
        .build()
        .map_err(|e| StoreError::Open(format!("cannot build the connection pool: {e}")))
}

pub(crate) struct PgBackend {
    pool: Pool,
    commits: Arc<AtomicU64>,
    /// Ingest goes through the group-commit task (`batch`).
    ingest: mpsc::Sender<batch::Job>,
    /// Fed by the LISTEN connection (`replica::spawn_listener`).
    feed: Arc<broadcast::Sender<Change>>,
    /// The store's clock (`Backend::now`).
    clock: Arc<dyn Clock>,
}

/// Runs `$body` in a transaction on a pooled connection and commits; `$tx`
/// names the transaction inside `$body`, whose `?` errors roll it back.
macro_rules! in_tx {
    ($self:ident, |$tx:ident| $body:expr) => {{
        let mut client = $self.pool.get().await.map_err(pool_err)?;
        let $tx = client.transaction().await.map_err(pg_err)?;
        let out = $body;
        $tx.commit().await.map_err(pg_err)?;
        $self.commits.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }};
}

impl PgBackend {
    /// Ingest through the group-commit task (`batch`).
    async fn ingest_batched(
        &self,
        events: Vec<NewEvent>,
        update: Option<SubscriptionUpdate>,
        now: DateTime<Utc>,
        with_rows: bool,
    ) -> StoreResult<batch::Recorded> {
        let (reply, answer) = oneshot::channel();
        let job = batch::Job {
            events,
            update,
            now,
            with_rows,
            reply,
        };
        self.ingest
            .send(job)
            .await
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// Connects, migrates (under the migration lock) and returns the
    /// backend, stamping on `clock`.
    pub(crate) async fn open(
        settings: &Settings,
        pool_size: usize,
        clock: Arc<dyn Clock>,
    ) -> Result<PgBackend, StoreError> {
        let pool = pool(settings, pool_size)?;
        let mut client = pool
            .get()
            .await
            .map_err(|e| StoreError::Open(pool_err(e).to_string()))?;
        schema::migrate(&mut client).await?;
        drop(client);
        let feed = Arc::new(broadcast::channel(super::FEED_CAPACITY).0);
        replica::spawn_listener(
            Arc::new(settings.clone()),
            Arc::downgrade(&feed),
            pool.clone(),
        );
        let commits = Arc::new(AtomicU64::new(0));
        let (ingest, jobs) = mpsc::channel(batch::QUEUE);
        batch::spawn(pool.clone(), jobs, Arc::clone(&commits));
        Ok(PgBackend {
            pool,
            commits,
            ingest,
            feed,
            clock,
        })
    }
}

/// [`super::backend::operations`] on PostgreSQL: each is one transaction
/// on a pooled connection.
macro_rules! on_postgres {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $out:ty
            = $(|$now:ident|)? $($f:ident)::+ ($($call:expr),* $(,)?);
    )*) => {
        #[async_trait]
        impl Operations for PgBackend {
            $(
                $(#[$doc])*
                async fn $name(&self, $($arg: $ty),*) -> StoreResult<$out> {
                    $( let $now = self.clock.now(); )?
                    in_tx!(self, |tx| $($f)::+(&tx, $($call),*).await?)
                }
            )*
        }
    };
}
operations!(on_postgres);

#[async_trait]
impl Backend for PgBackend {
    fn engine(&self) -> &'static str {
        "postgres"
    }

    fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    fn queue_depth(&self) -> usize {
        (self.ingest.max_capacity() - self.ingest.capacity()) + self.pool.status().waiting
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    async fn record_events(&self, events: Vec<NewEvent>) -> StoreResult<Vec<EventOutcome>> {
        let now = self.clock.now();
        let (outcomes, _) = self.ingest_batched(events, None, now, false).await?;
        Ok(outcomes)
    }

    async fn record_delivery_rows(
        &self,
        events: Vec<NewEvent>,
        update: Option<SubscriptionUpdate>,
        now: DateTime<Utc>,
    ) -> StoreResult<(Vec<EventOutcome>, Vec<StreamRow>)> {
        self.ingest_batched(events, update, now, true).await
    }

    async fn streams_changed(
        &self,
        since: Option<i64>,
    ) -> StoreResult<(Vec<StreamRow>, Option<i64>)> {
        // One snapshot for the cursor and the rows (see `pg::ops::streams_changed`).
        let mut client = self.pool.get().await.map_err(pool_err)?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(pg_err)?;
        let out = ops::streams_changed(&tx, since).await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(out)
    }

    fn changes(&self) -> broadcast::Receiver<Change> {
        self.feed.subscribe()
    }

    /// Waits for nothing: every acknowledged call already committed. Closes
    /// the pool so idle connections are released at once.
    async fn close(&self) -> StoreResult<()> {
        self.pool.close();
        Ok(())
    }

    #[cfg(any(test, feature = "test-support"))]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
