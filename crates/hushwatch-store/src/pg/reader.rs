//! `hushwatch audit`'s connection to PostgreSQL (`store::audit::AuditReader`):
//! the commands are synchronous, so it has a small runtime of its own and
//! one connection holding one read-only snapshot.

use std::future::Future;

use deadpool_postgres::{Object, Pool};

use super::{pg_err, pool, pool_err, Settings};
use crate::StoreError;

pub(crate) struct PgReader {
    runtime: tokio::runtime::Runtime,
    /// Kept so the connection outlives it.
    _pool: Pool,
    client: Object,
}

impl PgReader {
    /// One connection inside a read-only snapshot, so that rows appended
    /// between two reads do not look like deleted entries to `audit verify`.
    pub(crate) fn open(settings: &Settings) -> Result<PgReader, StoreError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Open(format!("cannot start a runtime: {e}")))?;
        let pool = pool(settings, 1)?;
        let client = runtime
            .block_on(pool.get())
            .map_err(|e| StoreError::Open(pool_err(e).to_string()))?;
        // A read-only snapshot takes no row locks, so the bound every pooled
        // session has on idling inside a transaction (which exists to free
        // a frozen writer's locks) is lifted for it alone: an export piped
        // into a slow reader may pause between pages.
        runtime
            .block_on(client.batch_execute(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
                 SET LOCAL idle_in_transaction_session_timeout = 0",
            ))
            .map_err(|e| StoreError::Open(pg_err(e).to_string()))?;
        Ok(PgReader {
            runtime,
            _pool: pool,
            client,
        })
    }

    /// The connection, to run a read written over `store::db::Db` on.
    pub(crate) fn db(&self) -> &Object {
        &self.client
    }

    /// Runs a read on the reader's own runtime.
    pub(crate) fn block_on<T>(&self, read: impl Future<Output = T>) -> T {
        self.runtime.block_on(read)
    }
}
