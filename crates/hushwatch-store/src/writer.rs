//! The writer thread: sole owner of the write connection, doing group commit.
//!
//! It blocks for one job, drains whatever else is already queued (up to
//! `MAX_BATCH`), runs them all in ONE transaction, commits once (one fsync
//! for the whole batch) and only then replies. A job that fails undoes its
//! own writes only: the batch is then run again with a savepoint per job
//! (see `execute_batch`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};

use super::{Shared, StoreError};

/// Upper bound on jobs per transaction, so one huge backlog cannot hold the
/// write lock (and delay every reply in it) for too long.
pub(super) const MAX_BATCH: usize = 512;

/// A unit of work queued by a `Store` method.
pub(super) trait Job: Send {
    /// Runs the job's SQL inside the batch transaction, keeping its result
    /// until the batch outcome is known. Err means the job's writes must be
    /// rolled back. It may run twice (the first run rolled back, see
    /// `execute_batch`), so it must not act outside the transaction.
    fn run(&mut self, conn: &Connection) -> Result<(), StoreError>;

    /// Replies to the caller: the job's own result if the batch committed,
    /// otherwise the batch's error (nothing may be acknowledged uncommitted).
    fn finish(self: Box<Self>, batch: &Result<(), StoreError>);
}

/// A job built from a closure and the oneshot its caller awaits.
pub(super) struct Task<T, F> {
    work: F,
    result: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Task<T, F> {
    pub(super) fn new(work: F, reply: oneshot::Sender<Result<T, StoreError>>) -> Self {
        Task {
            work,
            result: None,
            reply,
        }
    }
}

impl<T, F> Job for Task<T, F>
where
    T: Send,
    F: Fn(&Connection) -> Result<T, StoreError> + Send,
{
    fn run(&mut self, conn: &Connection) -> Result<(), StoreError> {
        let result = (self.work)(conn);
        let status = result.as_ref().map(|_| ()).map_err(Clone::clone);
        self.result = Some(result);
        status
    }

    fn finish(self: Box<Self>, batch: &Result<(), StoreError>) {
        let answer = match (batch, self.result) {
            (Ok(()), Some(result)) => result,
            (Ok(()), None) => Err(StoreError::Sql("job was never run".to_owned())),
            (Err(e), _) => Err(e.clone()),
        };
        // The caller may have stopped waiting (request cancelled). Its work
        // is committed regardless, and a retried delivery dedups, so a lost
        // reply is harmless.
        let _ = self.reply.send(answer);
    }
}

/// Out-of-band requests that end the current batch before taking effect.
pub(super) enum Control {
    /// Finish all queued work, close the connection, report how that went.
    Shutdown(oneshot::Sender<Result<(), StoreError>>),
    /// Test hook: park the writer so callers can queue up a known backlog.
    #[cfg(any(test, feature = "test-support"))]
    #[cfg_attr(not(test), allow(dead_code))] // test-support: reached from testdb
    Pause {
        parked: oneshot::Sender<()>,
        resume: oneshot::Receiver<()>,
    },
}

pub(super) enum Msg {
    Job(Box<dyn Job>),
    Control(Control),
}

/// Starts the writer thread; it owns `conn` from here on.
pub(super) fn spawn(
    conn: Connection,
    rx: mpsc::Receiver<Msg>,
    shared: Arc<Shared>,
) -> Result<(), StoreError> {
    thread::Builder::new()
        .name("hushwatch-store".to_owned())
        .spawn(move || run(conn, rx, &shared))
        .map(drop)
        .map_err(|e| StoreError::Open(format!("cannot start writer thread: {e}")))
}

fn run(mut conn: Connection, mut rx: mpsc::Receiver<Msg>, shared: &Shared) {
    let mut closers = Vec::new();
    // None once every handle is gone (or after Shutdown closed the channel)
    // and the queue is empty: all accepted work is done.
    while let Some(first) = rx.blocking_recv() {
        let (jobs, control) = collect_batch(first, &mut rx);
        commit_batch(&mut conn, jobs, shared);
        match control {
            Some(Control::Shutdown(reply)) => {
                // Refuse new jobs but keep draining those already queued.
                rx.close();
                closers.push(reply);
            }
            #[cfg(any(test, feature = "test-support"))]
            Some(Control::Pause { parked, resume }) => {
                let _ = parked.send(());
                // Err just means the guard was dropped: resume either way.
                let _ = resume.blocking_recv();
            }
            None => {}
        }
    }
    let closed = conn.close().map_err(|(_, e)| StoreError::from(e));
    for reply in closers {
        let _ = reply.send(closed.clone());
    }
}

/// Takes `first` plus everything already queued, stopping at `MAX_BATCH`
/// jobs or at a control message (returned so it acts after this batch).
fn collect_batch(first: Msg, rx: &mut mpsc::Receiver<Msg>) -> (Vec<Box<dyn Job>>, Option<Control>) {
    let mut jobs = Vec::new();
    let mut next = Some(first);
    while let Some(msg) = next.take() {
        match msg {
            Msg::Job(job) => jobs.push(job),
            Msg::Control(control) => return (jobs, Some(control)),
        }
        if jobs.len() < MAX_BATCH {
            next = rx.try_recv().ok();
        }
    }
    (jobs, None)
}

/// Runs `jobs` in one transaction and replies to each once the outcome of
/// the commit is known.
fn commit_batch(conn: &mut Connection, mut jobs: Vec<Box<dyn Job>>, shared: &Shared) {
    if jobs.is_empty() {
        return;
    }
    let outcome = execute_batch(conn, &mut jobs);
    if outcome.is_ok() {
        shared.commits.fetch_add(1, Ordering::Relaxed);
    }
    for job in jobs {
        job.finish(&outcome);
    }
}

/// Runs the batch's jobs bare first: almost every batch has no failing
/// job, and a savepoint per job cost up to a third of the writer's CPU per
/// event (signed webhooks, whose savepoint journal spilled to a temporary
/// file; a few per cent for token reports: `benches/store_writer`, issue
/// #33). SQLite copies every page a job first touches into the savepoint's
/// journal, and runs two more statements per job. If any job fails, that whole transaction is rolled back and
/// the batch runs again from the start with a savepoint per job, exactly as
/// before, so a failing job still undoes only its own writes and the
/// outcome is the same; only the failing batch pays twice.
fn execute_batch(conn: &mut Connection, jobs: &mut [Box<dyn Job>]) -> Result<(), StoreError> {
    {
        // IMMEDIATE takes the write lock up front, so a lock problem
        // surfaces at BEGIN rather than halfway through the batch.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if jobs.iter_mut().all(|job| job.run(&tx).is_ok()) {
            tx.commit()?;
            return Ok(());
        }
        // Dropping `tx` rolls back every job's writes of this first run.
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for job in jobs.iter_mut() {
        run_isolated(&tx, job.as_mut())?;
    }
    // On failure `tx` is dropped, which rolls back whatever is left of it.
    tx.commit()?;
    Ok(())
}

/// Runs one job under its own savepoint so that an SQL error in it undoes
/// only its own writes; the rest of the batch still commits. The savepoint
/// statements come from the connection's statement cache (rusqlite's
/// `Savepoint` parses its SQL anew for every job, issue #33).
fn run_isolated(conn: &Connection, job: &mut dyn Job) -> Result<(), StoreError> {
    conn.prepare_cached("SAVEPOINT job")?.execute([])?;
    let Err(job_error) = job.run(conn) else {
        conn.prepare_cached("RELEASE job")?.execute([])?;
        return Ok(());
    };
    if conn.is_autocommit() {
        // SQLite itself rolled back the whole transaction (it may on
        // SQLITE_FULL, IOERR, NOMEM, BUSY): earlier jobs' writes are gone
        // too, so the whole batch must fail with this error.
        return Err(job_error);
    }
    // Undo this job's writes, then drop its savepoint; the batch goes on.
    conn.prepare_cached("ROLLBACK TO job")?.execute([])?;
    conn.prepare_cached("RELEASE job")?.execute([])?;
    Ok(())
}
