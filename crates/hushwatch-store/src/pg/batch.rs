//! Group commit for ingest on PostgreSQL. Every appending transaction holds
//! the audit head's row lock until its COMMIT (and its WAL flush) is done,
//! so one ingest per transaction would run at one fsync per event. Like the
//! SQLite writer, one task per process takes the first queued delivery plus
//! whatever else is waiting (up to `MAX_BATCH`), records each under its own
//! SAVEPOINT in ONE transaction, commits once, and only then replies: every
//! caller hears `Ok` only after the COMMIT, and a delivery whose statements
//! failed is rolled back alone (it hears its error; the rest still commit).
//!
//! The batch is first recorded set-wise (`bulk`: a few pipelined
//! statements for the whole batch, not ~10 round trips per event under the
//! head lock). A batch that path does not take (grants, relay bodies,
//! subscription updates), or that failed there before its COMMIT,
//! is recorded job by job in one transaction with no savepoint; only when
//! that fails too (a bad delivery, a deadlock victim) is it rolled back
//! and recorded job by job under a SAVEPOINT each, so the failing delivery
//! is the only one that fails.
//!
//! Why savepoints only as the last resort: each costs two more round trips
//! under the head lock, and every one that writes is a subtransaction with
//! its own xid. Past 64 in one transaction (a batch holds up to 256) the
//! backend's cache of them overflows, and snapshots taken in any session
//! while it runs must look xids up in `pg_subtrans` instead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};

use super::{bulk, ops, pg_err, pool_err};
use crate::revocations::AccessNote;
use crate::subscriptions::SubscriptionUpdate;
use crate::{NewEvent, StoreError};

/// Deliveries per transaction at most, so one backlog cannot hold the audit
/// head lock (and every reply in it) for long.
const MAX_BATCH: usize = 256;

/// Deliveries that may wait before callers feel backpressure.
pub(super) const QUEUE: usize = 4096;

/// What a caller gets back: each event's outcome and, when asked for, the
/// rows of the streams its events moved (read inside the same transaction).
pub(super) type Recorded = bulk::Recorded;

pub(super) struct Job {
    pub events: Vec<NewEvent>,
    pub update: Option<SubscriptionUpdate>,
    pub now: DateTime<Utc>,
    pub with_rows: bool,
    pub reply: oneshot::Sender<Result<Recorded, StoreError>>,
}

impl Job {
    /// This delivery, event by event (`core::record_delivery`), in `db`'s
    /// transaction or savepoint.
    async fn record<D: crate::db::Db>(&self, db: &D) -> Result<Recorded, StoreError> {
        crate::core::record_delivery(
            db,
            &self.events,
            self.update.as_ref(),
            self.now,
            self.with_rows,
        )
        .await
    }
}

/// Starts the batching task; it ends when every sender is dropped.
pub(super) fn spawn(pool: Pool, mut rx: mpsc::Receiver<Job>, commits: Arc<AtomicU64>) {
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut jobs = vec![first];
            while jobs.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            let mut results = Vec::with_capacity(jobs.len());
            let batch = run(&pool, &jobs, &mut results).await;
            if batch.is_ok() {
                commits.fetch_add(1, Ordering::Relaxed);
            }
            for (job, result) in jobs.into_iter().zip(
                results
                    .into_iter()
                    .map(Some)
                    .chain(std::iter::repeat_with(|| None)),
            ) {
                let answer = match (&batch, result) {
                    (Ok(()), Some(r)) => r,
                    (Ok(()), None) => Err(StoreError::Sql("delivery was not recorded".into())),
                    (Err(e), _) => Err(e.clone()),
                };
                // The caller may have gone (request cancelled); its work is
                // committed or not regardless, and a retry dedups.
                let _ = job.reply.send(answer);
            }
        }
    });
}

/// One transaction for all `jobs`; `results` gets each job's own outcome.
/// Err: the transaction did not commit, so no job may be acknowledged.
async fn run(
    pool: &Pool,
    jobs: &[Job],
    results: &mut Vec<Result<Recorded, StoreError>>,
) -> Result<(), StoreError> {
    let mut client = pool.get().await.map_err(pool_err)?;
    let attempt = match set_wise(&mut client, jobs).await {
        Err(SetWise::Before(e)) => {
            tracing::debug!(error = %e, "set-wise ingest not taken; recording delivery by delivery");
            in_order(&mut client, jobs).await
        }
        done => done,
    };
    match attempt {
        Ok(recorded) => {
            results.extend(recorded.into_iter().map(Ok));
            return Ok(());
        }
        // COMMIT itself failed: whether it happened is unknown, so no
        // second attempt here (a sender's retry dedups).
        Err(SetWise::Commit(e)) => return Err(e),
        Err(SetWise::Before(e)) => {
            tracing::debug!(error = %e, "batched ingest failed; recording each delivery under a savepoint");
        }
    }
    job_by_job(&mut client, jobs, results).await
}

enum SetWise {
    /// Rolled back (the transaction is dropped unfinished).
    Before(StoreError),
    Commit(StoreError),
}

async fn set_wise(
    client: &mut deadpool_postgres::Client,
    jobs: &[Job],
) -> Result<Vec<Recorded>, SetWise> {
    // Subscription updates (rare: provider lifecycle deliveries), grants
    // (their stale check reads the revocation index first,
    // `revocations::note`) and relay bodies (`forward::insert`) go delivery
    // by delivery, through `core::record_event`, which runs those
    // statements. Revokes are noted set-wise (`bulk`).
    if jobs.iter().any(|j| {
        j.update.is_some()
            || j.events
                .iter()
                .any(|e| matches!(e.access, Some(AccessNote::Grant { .. })) || e.forward.is_some())
    }) {
        return Err(SetWise::Before(StoreError::Sql(
            "a subscription update, grant or relay body in the batch".into(),
        )));
    }
    let work: Vec<(&[crate::NewEvent], bool)> = jobs
        .iter()
        .map(|j| (j.events.as_slice(), j.with_rows))
        .collect();
    match bulk::record(client, &work).await {
        Ok(recorded) => Ok(recorded),
        Err(bulk::Failed::Commit(e)) => Err(SetWise::Commit(e)),
        Err(bulk::Failed::Before(e)) => {
            // Leaves no transaction open on the connection (a warning
            // only when the COMMIT already ended the aborted one).
            client
                .batch_execute("ROLLBACK")
                .await
                .map_err(|e| SetWise::Before(pg_err(e)))?;
            Err(SetWise::Before(e))
        }
    }
}

/// Every job in order, event by event, in one transaction and with no
/// savepoint: the first failure rolls the whole transaction back (the
/// transaction is dropped unfinished) for [`job_by_job`] to run again.
async fn in_order(
    client: &mut deadpool_postgres::Client,
    jobs: &[Job],
) -> Result<Vec<Recorded>, SetWise> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| SetWise::Before(pg_err(e)))?;
    lock_head_once(&tx, jobs).await.map_err(SetWise::Before)?;
    let mut recorded = Vec::with_capacity(jobs.len());
    for job in jobs {
        let outcome = job.record(&tx).await.map_err(SetWise::Before)?;
        recorded.push(outcome);
    }
    tx.commit().await.map_err(|e| SetWise::Commit(pg_err(e)))?;
    Ok(recorded)
}

/// The head lock first, once for the whole batch and outside every
/// savepoint (a lock taken inside one would be released by its rollback),
/// so lock order stays head → stream rows (see `store::core`).
async fn lock_head_once(
    tx: &deadpool_postgres::Transaction<'_>,
    jobs: &[Job],
) -> Result<(), StoreError> {
    if let Some(audited) = jobs.iter().flat_map(|j| &j.events).find(|e| e.audit) {
        ops::lock_audit_head(tx, std::slice::from_ref(audited)).await?;
    }
    Ok(())
}

/// The last resort: each job under its own SAVEPOINT, event by event.
async fn job_by_job(
    client: &mut deadpool_postgres::Client,
    jobs: &[Job],
    results: &mut Vec<Result<Recorded, StoreError>>,
) -> Result<(), StoreError> {
    let mut tx = client.transaction().await.map_err(pg_err)?;
    lock_head_once(&tx, jobs).await?;
    for job in jobs {
        let sp = tx.savepoint("delivery").await.map_err(pg_err)?;
        let outcome = job.record(&sp).await;
        match outcome {
            Ok(outcomes) => {
                sp.commit().await.map_err(pg_err)?;
                results.push(Ok(outcomes));
            }
            Err(e) => {
                // Undoes this delivery only; failing to is the batch's end.
                sp.rollback().await.map_err(pg_err)?;
                results.push(Err(e));
            }
        }
    }
    tx.commit().await.map_err(pg_err)
}
