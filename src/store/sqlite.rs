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
use super::reconcile::{
    self, NewReconciliation, ReconcileRow, ReconcileTransition, StaleGrant, SubjectEntry,
};
use super::replica::{self, Change, Claim, Leadership, ReplicaRow};
use super::silences::{self, AckOutcome, AckRow, NewSilence, SilenceRow};
use super::status::{Arrival, AuditSummary};
use super::subscriptions::{SubscriptionRow, SubscriptionTransition, SubscriptionUpdate};
use super::svix::{SvixApply, SvixEndpointRow, SvixPage};
use super::writer::{Control, Msg, Task};
use super::{core, db, moved_streams, schema, status, subscriptions, svix, svix_ack, writer};
use super::{EventOutcome, NewEvent, Shared, StoreError};

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
}

impl SqliteBackend {
    /// Opens (creating if needed) the database at `path`, migrates it, and
    /// starts the writer thread. Blocking: call it at startup.
    pub(crate) fn open(path: &Path) -> Result<SqliteBackend, StoreError> {
        let conn = schema::open(path)?;
        tune(&conn)?;
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let shared = Arc::new(Shared::default());
        writer::spawn(conn, rx, Arc::clone(&shared))?;
        Ok(SqliteBackend {
            tx,
            shared,
            feed: broadcast::channel(super::FEED_CAPACITY).0,
        })
    }

    /// Runs `work` on the writer thread inside the next group-commit batch
    /// and resolves once that batch has committed (or failed).
    ///
    /// If the caller stops waiting, the job still runs and may commit; that
    /// is safe because a retried delivery is then reported as Duplicate.
    pub(super) async fn call<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
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
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $out:ty = $($f:ident)::+ ($($call:expr),* $(,)?);
    )*) => {
        #[async_trait]
        impl Operations for SqliteBackend {
            $(
                async fn $name(&self, $($arg: $ty),*) -> StoreResult<$out> {
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

    async fn record_delivery(
        &self,
        events: Vec<NewEvent>,
        update: Option<SubscriptionUpdate>,
        now: DateTime<Utc>,
    ) -> StoreResult<Vec<EventOutcome>> {
        let moved: Vec<(String, bool)> = events
            .iter()
            .map(|e| (e.stream.clone(), e.feeds_clock))
            .collect();
        let outcomes = self
            .call(move |c| {
                let outcomes = db::ready(core::record_events(c, &events))?;
                if let Some(update) = &update {
                    db::ready(subscriptions::record(c, update, now))?;
                }
                Ok(outcomes)
            })
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
                let outcomes = db::ready(core::record_events(c, &events))?;
                if let Some(update) = &update {
                    db::ready(subscriptions::record(c, update, now))?;
                }
                let rows = moved_streams(&events, &outcomes)
                    .into_iter()
                    .filter_map(|name| db::ready(core::stream_row(c, name)).transpose())
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((outcomes, rows))
            })
            .await?;
        for row in &rows {
            let _ = self.feed.send(Change::Arrival(row.name.clone()));
        }
        Ok((outcomes, rows))
    }

    async fn subscription_transition(&self, t: SubscriptionTransition) -> StoreResult<bool> {
        self.call(move |c| db::ready(subscriptions::transition(c, &t)))
            .await
    }

    async fn subscriptions(&self) -> StoreResult<Vec<SubscriptionRow>> {
        self.call(|c| db::ready(subscriptions::all(c))).await
    }

    async fn settle_counted(
        &self,
        id: i64,
        token: Option<i64>,
        attempt: Attempt,
        update: super::ladder::LadderUpdate,
    ) -> StoreResult<super::ladder::LadderOutcome> {
        self.call(move |c| {
            db::ready(super::ladder::settle_counted(
                c, id, token, &attempt, &update,
            ))
        })
        .await
    }

    async fn notifier_failures(&self) -> StoreResult<Vec<(String, i64)>> {
        self.call(|c| db::ready(super::ladder::failures(c))).await
    }

    async fn record_svix(
        &self,
        event: NewEvent,
        apply: SvixApply,
    ) -> StoreResult<(EventOutcome, Vec<SvixPage>)> {
        self.call(move |c| db::ready(svix::record(c, &event, &apply)))
            .await
    }

    async fn svix_acknowledge(
        &self,
        apply: SvixApply,
        endpoint_id: String,
        msg_ids: Vec<String>,
    ) -> StoreResult<(usize, u64, Vec<SvixPage>)> {
        self.call(move |c| db::ready(svix::acknowledge(c, &apply, &endpoint_id, &msg_ids)))
            .await
    }

    async fn svix_acknowledge_audited(
        &self,
        apply: SvixApply,
        endpoint_id: String,
        msg_ids: Vec<String>,
        entry: Option<NewEvent>,
    ) -> StoreResult<(usize, u64, Vec<SvixPage>)> {
        self.call(move |c| {
            db::ready(svix_ack::acknowledge_audited(
                c,
                &apply,
                &endpoint_id,
                &msg_ids,
                entry.as_ref(),
            ))
        })
        .await
    }

    async fn record_reconciliation(
        &self,
        report: NewReconciliation,
        now: DateTime<Utc>,
    ) -> StoreResult<bool> {
        self.call(move |c| db::ready(reconcile::record(c, &report, now)))
            .await
    }

    async fn reconcile_states(&self) -> StoreResult<Vec<ReconcileRow>> {
        self.call(|c| db::ready(reconcile::states(c))).await
    }

    async fn reconcile_transition(&self, t: ReconcileTransition) -> StoreResult<bool> {
        self.call(move |c| db::ready(reconcile::transition(c, &t)))
            .await
    }

    async fn record_stale_grant(&self, g: StaleGrant, now: DateTime<Utc>) -> StoreResult<bool> {
        self.call(move |c| db::ready(reconcile::record_stale(c, &g, now)))
            .await
    }

    async fn latest_revocation(
        &self,
        stream: String,
        subject: String,
    ) -> StoreResult<Option<super::revocations::Revocation>> {
        self.call(move |c| db::ready(super::revocations::latest(c, &stream, &subject)))
            .await
    }

    async fn latest_reconciliations(&self) -> StoreResult<Vec<reconcile::LatestReport>> {
        self.call(|c| db::ready(reconcile::latest_reports(c))).await
    }

    async fn prune_revocations(&self, before: DateTime<Utc>) -> StoreResult<usize> {
        self.call(move |c| db::ready(super::revocations::prune(c, before)))
            .await
    }

    async fn stale_grant_recorded_at(
        &self,
        stream: String,
        delivery_id: String,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        self.call(move |c| {
            db::ready(super::revocations::stale_recorded_at(
                c,
                &stream,
                &delivery_id,
            ))
        })
        .await
    }

    async fn subject_entries(
        &self,
        subject: String,
        window: Option<(String, DateTime<Utc>)>,
        limit: i64,
    ) -> StoreResult<Vec<SubjectEntry>> {
        self.call(move |c| {
            db::ready(reconcile::subject_entries(
                c,
                &subject,
                window.as_ref(),
                limit,
            ))
        })
        .await
    }

    async fn add_gap_counts(&self, deltas: Vec<super::gaps::GapCount>) -> StoreResult<()> {
        self.call(move |c| db::ready(super::gaps::add(c, &deltas)))
            .await
    }

    async fn gap_counts(
        &self,
        since: chrono::NaiveDate,
    ) -> StoreResult<Vec<super::gaps::GapCount>> {
        self.call(move |c| db::ready(super::gaps::load(c, since)))
            .await
    }

    async fn prune_gap_counts(&self, before: chrono::NaiveDate) -> StoreResult<usize> {
        self.call(move |c| db::ready(super::gaps::prune(c, before)))
            .await
    }

    async fn idempotency_begin(
        &self,
        key: super::idempotency::IdempotencyKey,
        now: DateTime<Utc>,
    ) -> StoreResult<super::idempotency::Begun> {
        self.call(move |c| db::ready(super::idempotency::begin(c, &key, now)))
            .await
    }

    async fn idempotency_finish(
        &self,
        key: super::idempotency::IdempotencyKey,
        started: DateTime<Utc>,
        answer: super::idempotency::StoredAnswer,
    ) -> StoreResult<bool> {
        self.call(move |c| db::ready(super::idempotency::finish(c, &key, started, &answer)))
            .await
    }

    async fn idempotency_release(
        &self,
        key: super::idempotency::IdempotencyKey,
        started: DateTime<Utc>,
    ) -> StoreResult<bool> {
        self.call(move |c| db::ready(super::idempotency::release(c, &key, started)))
            .await
    }

    async fn prune_idempotency(&self, now: DateTime<Utc>) -> StoreResult<usize> {
        self.call(move |c| db::ready(super::idempotency::prune(c, now)))
            .await
    }

    async fn mint_ack_code(
        &self,
        code: [u8; 32],
        stream: String,
        started_at: DateTime<Utc>,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> StoreResult<bool> {
        self.call(move |c| {
            db::ready(super::ack_codes::mint(
                c, &code, &stream, started_at, now, expires_at,
            ))
        })
        .await
    }

    async fn open_ack_code(
        &self,
        code: [u8; 32],
        now: DateTime<Utc>,
    ) -> StoreResult<super::ack_codes::LinkState> {
        self.call(move |c| db::ready(super::ack_codes::open(c, &code, now)))
            .await
    }

    async fn confirm_ack_code(
        &self,
        code: [u8; 32],
        now: DateTime<Utc>,
        audit: bool,
    ) -> StoreResult<super::ack_codes::LinkUse> {
        self.call(move |c| db::ready(super::ack_codes::confirm(c, &code, now, audit)))
            .await
    }

    async fn prune_ack_codes(&self, now: DateTime<Utc>) -> StoreResult<usize> {
        self.call(move |c| db::ready(super::ack_codes::prune(c, now)))
            .await
    }

    async fn svix_grown(&self, source: String) -> StoreResult<Vec<(String, Option<String>)>> {
        self.call(move |c| db::ready(svix::grown(c, &source))).await
    }

    async fn svix_regroup(
        &self,
        apply: SvixApply,
        endpoint_id: String,
    ) -> StoreResult<Vec<SvixPage>> {
        self.call(move |c| db::ready(svix::regroup(c, &apply, &endpoint_id)))
            .await
    }

    async fn svix_endpoints(&self) -> StoreResult<Vec<SvixEndpointRow>> {
        self.call(|c| db::ready(svix::endpoints(c, None))).await
    }

    async fn recent_arrivals(
        &self,
        streams: Vec<String>,
        since: DateTime<Utc>,
        cap: i64,
    ) -> StoreResult<Vec<(String, Vec<Arrival>)>> {
        self.call(move |c| db::ready(status::recent_arrivals(c, &streams, since, cap)))
            .await
    }

    async fn audit_summary(&self) -> StoreResult<AuditSummary> {
        self.call(|c| db::ready(status::audit_summary(c))).await
    }

    async fn add_silence(
        &self,
        silence: NewSilence,
        now: DateTime<Utc>,
        cap: usize,
        audit: bool,
    ) -> StoreResult<Option<i64>> {
        self.call(move |c| db::ready(silences::add(c, &silence, now, cap, audit)))
            .await
    }

    async fn expire_silence(
        &self,
        id: i64,
        by: String,
        comment: Option<String>,
        now: DateTime<Utc>,
        audit: bool,
    ) -> StoreResult<bool> {
        self.call(move |c| db::ready(silences::expire(c, id, &by, comment.as_deref(), now, audit)))
            .await
    }

    async fn silences(&self, since: DateTime<Utc>) -> StoreResult<Vec<SilenceRow>> {
        self.call(move |c| db::ready(silences::silences_ending_after(c, since)))
            .await
    }

    async fn acknowledge(
        &self,
        stream: String,
        created_by: String,
        comment: String,
        now: DateTime<Utc>,
        audit: bool,
    ) -> StoreResult<AckOutcome> {
        self.call(move |c| {
            db::ready(silences::acknowledge(
                c,
                &stream,
                &created_by,
                &comment,
                now,
                audit,
            ))
        })
        .await
    }

    async fn sync_maintenance(
        &self,
        windows: Vec<(String, DateTime<Utc>, DateTime<Utc>, String)>,
        now: DateTime<Utc>,
        audit: bool,
    ) -> StoreResult<()> {
        self.call(move |c| db::ready(silences::sync_maintenance(c, &windows, now, audit)))
            .await
    }

    async fn current_acks(&self) -> StoreResult<Vec<AckRow>> {
        self.call(|c| db::ready(silences::current_acks(c))).await
    }

    async fn release_held(&self, now: DateTime<Utc>) -> StoreResult<usize> {
        self.call(move |c| db::ready(silences::release_held(c, now)))
            .await
    }

    async fn claim_outbox(
        &self,
        replica: String,
        now: DateTime<Utc>,
        lease: TimeDelta,
        limit: i64,
    ) -> StoreResult<Vec<Claim>> {
        self.call(move |c| db::ready(replica::claim_outbox(c, &replica, now, lease, limit)))
            .await
    }

    async fn settle_claim(&self, id: i64, token: i64, attempt: Attempt) -> StoreResult<bool> {
        self.call(move |c| db::ready(replica::settle_claim(c, id, token, &attempt)))
            .await
    }

    async fn elect(
        &self,
        replica: String,
        term: Option<i64>,
        now: DateTime<Utc>,
        ttl: TimeDelta,
    ) -> StoreResult<Leadership> {
        self.call(move |c| db::ready(replica::elect(c, &replica, term, now, ttl)))
            .await
    }

    async fn resign(&self, replica: String, term: i64) -> StoreResult<bool> {
        self.call(move |c| db::ready(replica::resign(c, &replica, term)))
            .await
    }

    async fn heartbeat(&self, replica: String, now: DateTime<Utc>) -> StoreResult<()> {
        self.call(move |c| db::ready(replica::heartbeat(c, &replica, now)))
            .await
    }

    async fn replicas(&self, seen_since: DateTime<Utc>) -> StoreResult<Vec<ReplicaRow>> {
        self.call(move |c| db::ready(replica::replicas(c, seen_since)))
            .await
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

    #[cfg(test)]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
