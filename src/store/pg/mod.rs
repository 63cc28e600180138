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

pub(crate) mod audit_reader;
mod batch;
mod bulk;
pub mod clock;
pub mod migrate;
mod ops;
pub mod reach;
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
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::backend::prelude::*;
use super::backend::{operations, Backend, Operations, StoreResult};
use super::reconcile::{
    NewReconciliation, ReconcileRow, ReconcileTransition, StaleGrant, SubjectEntry,
};
use super::replica::{Change, Claim, Leadership, ReplicaRow};
// `store::silences` is also `super::silences` to `pg::ops`, which calls its
// operations written over `Db` (issue #28).
use super::silences::{self, AckOutcome, AckRow, NewSilence, SilenceRow};
use super::status::{Arrival, AuditSummary};
use super::subscriptions::{SubscriptionRow, SubscriptionTransition, SubscriptionUpdate};
use super::svix::{SvixApply, SvixEndpointRow, SvixPage};
use super::{
    ack_codes, gaps, idempotency, ladder, reconcile, revocations, status, subscriptions, svix,
    svix_ack,
};
use super::{EventOutcome, NewEvent, StoreError};
pub use settings::Settings;

/// The LISTEN/NOTIFY channel an arrival is announced on (`store::core`).
pub(crate) fn replica_channel() -> &'static str {
    replica::CHANNEL
}

/// Connections per process unless `[store] pool_size` says otherwise.
pub const DEFAULT_POOL_SIZE: usize = 8;

/// How long a call waits for a free pooled connection before failing
/// (then ingest answers 503).
const POOL_WAIT: Duration = Duration::from_secs(10);

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

fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
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
    Pool::builder(manager)
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

    /// Connects, migrates (under the migration lock) and returns the backend.
    pub(crate) async fn open(
        settings: &Settings,
        pool_size: usize,
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
        })
    }
}

/// [`super::backend::operations`] on PostgreSQL: each is one transaction
/// on a pooled connection.
macro_rules! on_postgres {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $out:ty = $($f:ident)::+ ($($call:expr),* $(,)?);
    )*) => {
        #[async_trait]
        impl Operations for PgBackend {
            $(
                async fn $name(&self, $($arg: $ty),*) -> StoreResult<$out> {
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

    async fn record_delivery(
        &self,
        events: Vec<NewEvent>,
        update: Option<SubscriptionUpdate>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<EventOutcome>> {
        let (outcomes, _) = self.ingest_batched(events, update, now, false).await?;
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

    async fn subscription_transition(&self, t: SubscriptionTransition) -> StoreResult<bool> {
        in_tx!(self, |tx| subscriptions::transition(&tx, &t).await?)
    }

    async fn subscriptions(&self) -> StoreResult<Vec<SubscriptionRow>> {
        in_tx!(self, |tx| subscriptions::all(&tx).await?)
    }

    async fn streams_changed(
        &self,
        since: Option<i64>,
    ) -> StoreResult<(Vec<StreamRow>, Option<i64>)> {
        // One snapshot for the cursor and the rows (see `ops::streams_changed`).
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

    async fn settle_counted(
        &self,
        id: i64,
        token: Option<i64>,
        attempt: Attempt,
        update: crate::store::ladder::LadderUpdate,
    ) -> StoreResult<crate::store::ladder::LadderOutcome> {
        in_tx!(self, |tx| {
            ladder::settle_counted(&tx, id, token, &attempt, &update).await?
        })
    }

    async fn notifier_failures(&self) -> StoreResult<Vec<(String, i64)>> {
        in_tx!(self, |tx| ladder::failures(&tx).await?)
    }

    async fn record_svix(
        &self,
        event: NewEvent,
        apply: SvixApply,
    ) -> StoreResult<(EventOutcome, Vec<SvixPage>)> {
        in_tx!(self, |tx| svix::record(&tx, &event, &apply).await?)
    }

    async fn svix_acknowledge(
        &self,
        apply: SvixApply,
        endpoint_id: String,
        msg_ids: Vec<String>,
    ) -> StoreResult<(usize, u64, Vec<SvixPage>)> {
        in_tx!(self, |tx| {
            svix::acknowledge(&tx, &apply, &endpoint_id, &msg_ids).await?
        })
    }

    async fn svix_acknowledge_audited(
        &self,
        apply: SvixApply,
        endpoint_id: String,
        msg_ids: Vec<String>,
        entry: Option<NewEvent>,
    ) -> StoreResult<(usize, u64, Vec<SvixPage>)> {
        in_tx!(self, |tx| svix_ack::acknowledge_audited(
            &tx,
            &apply,
            &endpoint_id,
            &msg_ids,
            entry.as_ref()
        )
        .await?)
    }

    async fn record_reconciliation(
        &self,
        report: NewReconciliation,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        in_tx!(self, |tx| reconcile::record(&tx, &report, now).await?)
    }

    async fn reconcile_states(&self) -> StoreResult<Vec<ReconcileRow>> {
        in_tx!(self, |tx| reconcile::states(&tx).await?)
    }

    async fn reconcile_transition(&self, t: ReconcileTransition) -> StoreResult<bool> {
        in_tx!(self, |tx| reconcile::transition(&tx, &t).await?)
    }

    async fn record_stale_grant(&self, g: StaleGrant, now: DateTime<Utc>) -> StoreResult<bool> {
        in_tx!(self, |tx| reconcile::record_stale(&tx, &g, now).await?)
    }

    async fn latest_revocation(
        &self,
        stream: String,
        subject: String,
    ) -> StoreResult<Option<crate::store::revocations::Revocation>> {
        in_tx!(self, |tx| revocations::latest(&tx, &stream, &subject)
            .await?)
    }

    async fn latest_reconciliations(
        &self,
    ) -> StoreResult<Vec<crate::store::reconcile::LatestReport>> {
        in_tx!(self, |tx| reconcile::latest_reports(&tx).await?)
    }

    async fn prune_revocations(&self, before: DateTime<Utc>) -> StoreResult<usize> {
        in_tx!(self, |tx| revocations::prune(&tx, before).await?)
    }

    async fn stale_grant_recorded_at(
        &self,
        stream: String,
        delivery_id: String,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        in_tx!(self, |tx| {
            revocations::stale_recorded_at(&tx, &stream, &delivery_id).await?
        })
    }

    async fn subject_entries(
        &self,
        subject: String,
        window: Option<(String, DateTime<Utc>)>,
        limit: i64,
    ) -> StoreResult<Vec<SubjectEntry>> {
        in_tx!(self, |tx| {
            reconcile::subject_entries(&tx, &subject, window.as_ref(), limit).await?
        })
    }

    async fn add_gap_counts(&self, deltas: Vec<crate::store::gaps::GapCount>) -> StoreResult<()> {
        in_tx!(self, |tx| gaps::add(&tx, &deltas).await?)
    }

    async fn gap_counts(
        &self,
        since: chrono::NaiveDate,
    ) -> StoreResult<Vec<crate::store::gaps::GapCount>> {
        in_tx!(self, |tx| gaps::load(&tx, since).await?)
    }

    async fn prune_gap_counts(&self, before: chrono::NaiveDate) -> StoreResult<usize> {
        in_tx!(self, |tx| gaps::prune(&tx, before).await?)
    }

    async fn idempotency_begin(
        &self,
        key: crate::store::idempotency::IdempotencyKey,
        now: DateTime<Utc>,
    ) -> StoreResult<crate::store::idempotency::Begun> {
        in_tx!(self, |tx| idempotency::begin(&tx, &key, now).await?)
    }

    async fn idempotency_finish(
        &self,
        key: crate::store::idempotency::IdempotencyKey,
        started: DateTime<Utc>,
        answer: crate::store::idempotency::StoredAnswer,
    ) -> StoreResult<bool> {
        in_tx!(self, |tx| idempotency::finish(&tx, &key, started, &answer)
            .await?)
    }

    async fn idempotency_release(
        &self,
        key: crate::store::idempotency::IdempotencyKey,
        started: DateTime<Utc>,
    ) -> StoreResult<bool> {
        in_tx!(self, |tx| idempotency::release(&tx, &key, started).await?)
    }

    async fn prune_idempotency(&self, now: DateTime<Utc>) -> StoreResult<usize> {
        in_tx!(self, |tx| idempotency::prune(&tx, now).await?)
    }

    async fn mint_ack_code(
        &self,
        code: [u8; 32],
        stream: String,
        started_at: DateTime<Utc>,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        in_tx!(self, |tx| ack_codes::mint(
            &tx, &code, &stream, started_at, now, expires_at
        )
        .await?)
    }

    async fn open_ack_code(
        &self,
        code: [u8; 32],
        now: DateTime<Utc>,
    ) -> StoreResult<crate::store::ack_codes::LinkState> {
        in_tx!(self, |tx| ack_codes::open(&tx, &code, now).await?)
    }

    async fn confirm_ack_code(
        &self,
        code: [u8; 32],
        now: DateTime<Utc>,
        audit: bool,
    ) -> StoreResult<crate::store::ack_codes::LinkUse> {
        in_tx!(self, |tx| ack_codes::confirm(&tx, &code, now, audit)
            .await?)
    }

    async fn prune_ack_codes(&self, now: DateTime<Utc>) -> StoreResult<usize> {
        in_tx!(self, |tx| ack_codes::prune(&tx, now).await?)
    }

    async fn svix_grown(&self, source: String) -> StoreResult<Vec<(String, Option<String>)>> {
        in_tx!(self, |tx| svix::grown(&tx, &source).await?)
    }

    async fn svix_regroup(
        &self,
        apply: SvixApply,
        endpoint_id: String,
    ) -> StoreResult<Vec<SvixPage>> {
        in_tx!(self, |tx| svix::regroup(&tx, &apply, &endpoint_id).await?)
    }

    async fn svix_endpoints(&self) -> StoreResult<Vec<SvixEndpointRow>> {
        in_tx!(self, |tx| svix::endpoints(&tx, None).await?)
    }

    async fn recent_arrivals(
        &self,
        streams: Vec<String>,
        since: DateTime<Utc>,
        cap: i64,
    ) -> StoreResult<Vec<(String, Vec<Arrival>)>> {
        in_tx!(self, |tx| status::recent_arrivals(
            &tx, &streams, since, cap
        )
        .await?)
    }

    async fn audit_summary(&self) -> StoreResult<AuditSummary> {
        in_tx!(self, |tx| status::audit_summary(&tx).await?)
    }

    async fn add_silence(
        &self,
        silence: NewSilence,
        now: DateTime<Utc>,
        cap: usize,
        audit: bool,
    ) -> StoreResult<Option<i64>> {
        in_tx!(self, |tx| silences::add(&tx, &silence, now, cap, audit)
            .await?)
    }

    async fn expire_silence(
        &self,
        id: i64,
        by: String,
        comment: Option<String>,
        now: DateTime<Utc>,
        audit: bool,
    ) -> StoreResult<bool> {
        in_tx!(self, |tx| {
            silences::expire(&tx, id, &by, comment.as_deref(), now, audit).await?
        })
    }

    async fn silences(&self, since: DateTime<Utc>) -> StoreResult<Vec<SilenceRow>> {
        in_tx!(self, |tx| silences::silences_ending_after(&tx, since)
            .await?)
    }

    async fn acknowledge(
        &self,
        stream: String,
        created_by: String,
        comment: String,
        now: DateTime<Utc>,
        audit: bool,
    ) -> StoreResult<AckOutcome> {
        in_tx!(self, |tx| {
            silences::acknowledge(&tx, &stream, &created_by, &comment, now, audit).await?
        })
    }

    async fn sync_maintenance(
        &self,
        windows: Vec<(String, DateTime<Utc>, DateTime<Utc>, String)>,
        now: DateTime<Utc>,
        audit: bool,
    ) -> StoreResult<()> {
        in_tx!(self, |tx| silences::sync_maintenance(
            &tx, &windows, now, audit
        )
        .await?)
    }

    async fn current_acks(&self) -> StoreResult<Vec<AckRow>> {
        in_tx!(self, |tx| silences::current_acks(&tx).await?)
    }

    async fn release_held(&self, now: DateTime<Utc>) -> StoreResult<usize> {
        in_tx!(self, |tx| silences::release_held(&tx, now).await?)
    }

    async fn claim_outbox(
        &self,
        replica: String,
        now: DateTime<Utc>,
        lease: TimeDelta,
        limit: i64,
    ) -> StoreResult<Vec<Claim>> {
        in_tx!(self, |tx| {
            crate::store::replica::claim_outbox(&tx, &replica, now, lease, limit).await?
        })
    }

    async fn settle_claim(&self, id: i64, token: i64, attempt: Attempt) -> StoreResult<bool> {
        in_tx!(self, |tx| crate::store::replica::settle_claim(
            &tx, id, token, &attempt
        )
        .await?)
    }

    async fn elect(
        &self,
        replica: String,
        term: Option<i64>,
        now: DateTime<Utc>,
        ttl: TimeDelta,
    ) -> StoreResult<Leadership> {
        in_tx!(self, |tx| crate::store::replica::elect(
            &tx, &replica, term, now, ttl
        )
        .await?)
    }

    async fn resign(&self, replica: String, term: i64) -> StoreResult<bool> {
        in_tx!(self, |tx| crate::store::replica::resign(
            &tx, &replica, term
        )
        .await?)
    }

    async fn heartbeat(&self, replica: String, now: DateTime<Utc>) -> StoreResult<()> {
        in_tx!(self, |tx| crate::store::replica::heartbeat(
            &tx, &replica, now
        )
        .await?)
    }

    async fn replicas(&self, seen_since: DateTime<Utc>) -> StoreResult<Vec<ReplicaRow>> {
        in_tx!(self, |tx| crate::store::replica::replicas(&tx, seen_since)
            .await?)
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

    #[cfg(test)]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
