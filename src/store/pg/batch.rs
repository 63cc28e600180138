//! Group commit for ingest on PostgreSQL. Every appending transaction holds
//! the audit head's row lock until its COMMIT (and its WAL flush) is done,
//! so one ingest per transaction would run at one fsync per event. Like the
//! SQLite writer, one task per process takes the first queued delivery plus
//! whatever else is waiting (up to `MAX_BATCH`), records each under its own
//! SAVEPOINT in ONE transaction, commits once, and only then replies: every
//! caller hears `Ok` only after the COMMIT, and a delivery whose statements
//! failed is rolled back alone (it hears its error; the rest still commit).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};

use super::{ops, pg_err, pool_err, subscriptions};
use crate::store::subscriptions::SubscriptionUpdate;
use crate::store::{EventOutcome, NewEvent, StoreError, StreamRow};

/// Deliveries per transaction at most, so one backlog cannot hold the audit
/// head lock (and every reply in it) for long.
const MAX_BATCH: usize = 256;

/// Deliveries that may wait before callers feel backpressure.
pub(super) const QUEUE: usize = 4096;

/// What a caller gets back: each event's outcome and, when asked for, the
/// rows of the streams its events moved (read inside the same transaction).
pub(super) type Recorded = (Vec<EventOutcome>, Vec<StreamRow>);

pub(super) struct Job {
    pub events: Vec<NewEvent>,
    pub update: Option<SubscriptionUpdate>,
    pub now: DateTime<Utc>,
    pub with_rows: bool,
    pub reply: oneshot::Sender<Result<Recorded, StoreError>>,
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
    let mut tx = client.transaction().await.map_err(pg_err)?;
    // The head lock first, once for the whole batch and outside every
    // savepoint (a lock taken inside one would be released by its
    // rollback), so lock order stays head → stream rows (see `ops`).
    if let Some(audited) = jobs.iter().flat_map(|j| &j.events).find(|e| e.audit) {
        ops::lock_audit_head(&tx, std::slice::from_ref(audited)).await?;
    }
    for job in jobs {
        let sp = tx.savepoint("delivery").await.map_err(pg_err)?;
        let outcome = async {
            let outcomes = ops::record_events(&sp, &job.events).await?;
            if let Some(update) = &job.update {
                subscriptions::record(&sp, update, job.now).await?;
            }
            let mut rows = Vec::new();
            if job.with_rows {
                for name in crate::store::moved_streams(&job.events, &outcomes) {
                    if let Some(row) = ops::stream_row(&sp, name).await? {
                        rows.push(row);
                    }
                }
            }
            Ok::<_, StoreError>((outcomes, rows))
        }
        .await;
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
