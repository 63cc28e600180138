//! Durable storage for hushwatch: one SQLite file, one writer thread.
//!
//! Fail-closed contract: every `async fn` here resolves `Ok` only after the
//! transaction holding its work has committed with `synchronous=FULL`, i.e.
//! after the WAL has been fsynced. Callers may therefore answer an HTTP 2xx
//! as soon as `record_events` returns `Ok`.
//!
//! Reads go through the same writer thread as writes. That costs little (the
//! workload is a trickle of webhooks plus a periodic evaluator) and buys
//! read-your-writes ordering for free: a read queued after an acknowledged
//! write always sees it, with no second connection, no mutex and no
//! `spawn_blocking`. It also means a read fails when the writer's connection
//! fails, which is what `/v1/status` should report anyway.
//!
//! All times are stored as INTEGER milliseconds since the Unix epoch, so
//! sub-millisecond precision of the `DateTime`s passed in is dropped.

pub mod audit;
mod ops;
mod schema;
pub mod silences;
pub mod status;
pub mod subscriptions;
pub mod svix;
mod writer;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use crate::clock::{Clock, SystemClock};
use writer::{Control, Msg, Task};

/// Jobs that may wait for the writer before callers feel backpressure. Each
/// in-flight HTTP request holds at most one slot, so this is far above normal
/// load; past it, `send` waits instead of growing memory without bound.
const QUEUE_CAPACITY: usize = 4096;

/// Why a storage call failed. `Display` is one line naming what failed and
/// never includes event bodies (the store never sees them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The file or its parent directory could not be opened or configured.
    Open(String),
    /// A schema migration step failed; the file was left at the last good version.
    Migration(String),
    /// The file was written by a newer hushwatch; it is left untouched.
    TooNew { file: u32, binary: u32 },
    /// A statement or the commit failed; nothing of that job was acknowledged.
    Sql(String),
    /// The writer thread has shut down (after `close` or a crash).
    Closed,
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Open(msg) => write!(f, "storage open failed: {msg}"),
            StoreError::Migration(msg) => write!(f, "storage migration failed: {msg}"),
            StoreError::TooNew { file, binary } => write!(
                f,
                "storage file has schema version {file}, newer than this binary's {binary}; refusing to touch it"
            ),
            StoreError::Sql(msg) => write!(f, "storage write failed: {msg}"),
            StoreError::Closed => write!(f, "storage is closed"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sql(e.to_string())
    }
}

/// One received webhook event, as the HTTP layer hands it to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub stream: String,
    /// Raw id from the sender. Only SHA-256(stream + "\0" + id) is kept for
    /// dedup (and the raw id of the latest arrival on the stream row).
    pub delivery_id: Option<String>,
    pub event_type: String,
    pub event_time: Option<DateTime<Utc>>,
    pub received_at: DateTime<Utc>,
    /// false: recorded, but does not move the stream's clock (filtered type).
    pub feeds_clock: bool,
    pub body_sha256: Option<[u8; 32]>,
    /// How it arrived: `webhook`, `report` or `svix` (for the audit log).
    pub channel: &'static str,
    /// True when an HMAC signature over the body verified.
    pub signature_verified: bool,
    /// Subject ids found in the payload, e.g. ("user_id", "user_1").
    pub subject_ids: Vec<(String, String)>,
    /// Append to the tamper-evident audit log (on unless `[audit] enabled = false`).
    pub audit: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOutcome {
    Accepted,
    Duplicate,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertState {
    Ok,
    Firing,
}

/// What `Store::add_templated_stream` did.
#[derive(Debug)]
pub enum TemplatedOutcome {
    Created(StreamRow),
    Exists(StreamRow),
    /// `max_streams` templated streams exist already.
    Full,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StreamRow {
    pub name: String,
    /// When hushwatch first watched it; never changes once set.
    pub watch_started_at: DateTime<Utc>,
    /// Max received_at of clock-feeding events; never moves backwards.
    pub last_arrival_at: Option<DateTime<Utc>>,
    /// Max event_time seen on clock-feeding events.
    pub newest_event_at: Option<DateTime<Utc>>,
    /// Of the latest arrival.
    pub last_event_type: Option<String>,
    /// Raw id of the latest arrival: our own state, for /v1/status.
    pub last_event_id: Option<String>,
    pub alert_state: AlertState,
    pub firing_since: Option<DateTime<Utc>>,
    pub cleared_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub stream: String,
    pub to: AlertState,
    pub at: DateTime<Utc>,
    pub reason: String,
    pub notifiers: Vec<String>,
}

/// What [`Store::record_transition_if_silent`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum TransitionOutcome {
    /// Committed, with its pages.
    Recorded,
    /// The stream was already in that state; nothing written.
    Unchanged,
    /// A fire evaluated from an older last arrival than the stored one;
    /// nothing written. Carries the stored row to evaluate again.
    Stale(StreamRow),
}

/// Why a page exists: the transition itself, a `repeat_interval`
/// reminder, or an `escalate` step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    Page,
    Reminder,
    Escalation,
}

impl PageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PageKind::Page => "page",
            PageKind::Reminder => "reminder",
            PageKind::Escalation => "escalation",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    pub id: i64,
    /// Idempotency key / webhook-id / Message-ID of this page: the same on
    /// every retry, never reused by another page.
    pub page_key: String,
    pub stream: String,
    pub notifier: String,
    pub state: AlertState,
    /// When the transition happened (or the reminder/escalation was due).
    pub at: DateTime<Utc>,
    pub reason: String,
    pub created_at: DateTime<Utc>,
    pub kind: PageKind,
    /// Stable per alert episode: firing and resolved pages share it.
    pub alert_id: String,
    /// When this episode started firing.
    pub started_at: Option<DateTime<Utc>>,
    /// The last event (or start of watching) the silence is counted from.
    pub silent_since: Option<DateTime<Utc>>,
    pub attempts: u32,
    pub first_attempt_at: Option<DateTime<Utc>>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Redacted reason of the last failed attempt.
    pub last_error: Option<String>,
    /// What the alert is about: `silence` (a stream went quiet) or a Svix
    /// alert (`svix_endpoint_disabled`, `svix_messages_exhausted`,
    /// `svix_endpoint_failing`, `svix_endpoint_deleted`; `svix` on rows
    /// written before schema v8).
    pub alert_kind: String,
    /// `critical` or `warning`, decided when the page was queued.
    pub severity: String,
    /// For Svix pages: the `[svix.NAME]` source and endpoint id.
    pub source: Option<String>,
    pub endpoint_id: Option<String>,
    /// For a silence resolve: the arrival that ended the silence (the
    /// row's `silent_since` is then where that silence began).
    pub resumed_at: Option<DateTime<Utc>>,
}

/// Outcome of one delivery attempt, as persisted.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    Delivered {
        at: DateTime<Utc>,
    },
    Retry {
        at: DateTime<Utc>,
        next: DateTime<Utc>,
        error: String,
    },
    Failed {
        at: DateTime<Utc>,
        error: String,
    },
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NotifierCounts {
    pub pending: u64,
    pub delivered: u64,
    pub failed: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutboxSummary {
    pub by_notifier: std::collections::BTreeMap<String, NotifierCounts>,
    /// Newest first.
    pub recent_failures: Vec<OutboxRow>,
}

/// Counters the writer updates and handles read, for tests and metrics.
#[derive(Debug, Default)]
struct Shared {
    commits: AtomicU64,
}

/// Cheap, cloneable handle to the writer thread. The thread exits once every
/// handle is dropped or `close` is called, after finishing queued work.
#[derive(Clone)]
pub struct Store {
    tx: mpsc::Sender<Msg>,
    shared: Arc<Shared>,
    /// The instants the store stamps itself (outbox `created_at`, the
    /// readiness probe) come from the same clock as everything else.
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path`, migrates it, and
    /// starts the writer thread, on the wall clock. Blocking: call it at
    /// startup, not per request.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with_clock(path, Arc::new(SystemClock))
    }

    /// Like `open`, with the clock the rest of the sidecar uses (a
    /// `ManualClock` in tests).
    pub fn open_with_clock(path: &Path, clock: Arc<dyn Clock>) -> Result<Store, StoreError> {
        let conn = schema::open(path)?;
        Self::start(conn, clock)
    }

    fn start(conn: Connection, clock: Arc<dyn Clock>) -> Result<Store, StoreError> {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let shared = Arc::new(Shared::default());
        writer::spawn(conn, rx, Arc::clone(&shared))?;
        Ok(Store { tx, shared, clock })
    }

    /// Number of transactions the writer has committed. With concurrent
    /// callers this grows slower than the number of calls (group commit).
    pub fn commits(&self) -> u64 {
        self.shared.commits.load(Ordering::Relaxed)
    }

    /// Jobs queued for the writer and not yet picked up; a gauge for metrics.
    pub fn queue_depth(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// Insert missing streams with watch_started_at = now; existing rows
    /// untouched. Returns the rows for `names` in that order.
    pub async fn watch_streams(
        &self,
        names: Vec<String>,
        now: DateTime<Utc>,
    ) -> Result<Vec<StreamRow>, StoreError> {
        self.call(move |c| ops::watch_streams(c, &names, now)).await
    }

    /// Streams created from a template, by name.
    pub async fn templated_streams(&self) -> Result<Vec<String>, StoreError> {
        self.call(ops::templated_streams).await
    }

    /// Creates a templated stream (at most `max` exist); see
    /// `ops::add_templated_stream`.
    pub async fn add_templated_stream(
        &self,
        name: String,
        now: DateTime<Utc>,
        max: usize,
    ) -> Result<TemplatedOutcome, StoreError> {
        self.call(move |c| ops::add_templated_stream(c, &name, now, max))
            .await
    }

    /// Forgets a templated stream; false if it did not exist.
    pub async fn remove_templated_stream(&self, name: String) -> Result<bool, StoreError> {
        self.call(move |c| ops::remove_templated_stream(c, &name))
            .await
    }

    /// Store one request's worth of events; see `ops::record_event` for the
    /// per-event rules. Either all of them are committed or the call fails.
    pub async fn record_events(
        &self,
        events: Vec<NewEvent>,
    ) -> Result<Vec<EventOutcome>, StoreError> {
        self.call(move |c| ops::record_events(c, &events)).await
    }

    /// `record_events`, plus what the same delivery said about the stream's provider
    /// subscriptions, in one transaction: a 2xx then means both are durable.
    pub async fn record_delivery(
        &self,
        events: Vec<NewEvent>,
        update: Option<subscriptions::SubscriptionUpdate>,
        now: DateTime<Utc>,
    ) -> Result<Vec<EventOutcome>, StoreError> {
        self.call(move |c| {
            let outcomes = ops::record_events(c, &events)?;
            if let Some(update) = &update {
                subscriptions::record(c, update, now)?;
            }
            Ok(outcomes)
        })
        .await
    }

    /// Records a provider subscription's warning alert moving (see
    /// `subscriptions::transition`); false when it was already there.
    pub async fn subscription_transition(
        &self,
        t: subscriptions::SubscriptionTransition,
    ) -> Result<bool, StoreError> {
        self.call(move |c| subscriptions::transition(c, &t)).await
    }

    /// Every tracked provider subscription.
    pub async fn subscriptions(&self) -> Result<Vec<subscriptions::SubscriptionRow>, StoreError> {
        self.call(subscriptions::all).await
    }

    /// Persist an alert transition plus one pending outbox row per notifier,
    /// atomically. Returns Ok(false), writing nothing, when the stream is
    /// already in `t.to`, so re-evaluating after a crash is idempotent.
    pub async fn record_transition(&self, t: Transition) -> Result<bool, StoreError> {
        let created_at = self.clock.now();
        self.call(move |c| ops::record_transition(c, &t, created_at))
            .await
    }

    /// Records a silence alert transition only if the evaluation behind it
    /// still holds inside the transaction: a fire needs the stored silence to
    /// start where the evaluation's did (`silent_since`, its last arrival or
    /// watch start), so a fire computed before an event committed is
    /// withdrawn instead of paging and resolving at once. Resolves need no
    /// such check (arrivals only move forward, so a stream heard from stays
    /// heard from) and are never withdrawn.
    pub async fn record_transition_if_silent(
        &self,
        t: Transition,
        silent_since: DateTime<Utc>,
    ) -> Result<TransitionOutcome, StoreError> {
        let created_at = self.clock.now();
        self.call(move |c| ops::record_transition_if_silent(c, &t, silent_since, created_at))
            .await
    }

    /// All stream rows, ordered by name.
    pub async fn streams(&self) -> Result<Vec<StreamRow>, StoreError> {
        self.call(ops::streams).await
    }

    /// Outbox rows not yet marked done, oldest first.
    pub async fn pending_outbox(&self) -> Result<Vec<OutboxRow>, StoreError> {
        self.call(ops::pending_outbox).await
    }

    /// Marks an outbox row delivered. Idempotent: a row already done keeps
    /// its first done time, and an unknown id is a no-op.
    pub async fn mark_outbox_done(&self, id: i64, at: DateTime<Utc>) -> Result<(), StoreError> {
        self.call(move |c| ops::mark_outbox_done(c, id, at)).await
    }

    /// Records one delivery attempt's outcome on a pending outbox row.
    pub async fn record_attempt(&self, id: i64, attempt: Attempt) -> Result<(), StoreError> {
        self.call(move |c| ops::record_attempt(c, id, &attempt))
            .await
    }

    /// Queues reminder or escalation pages for the stream's current firing
    /// episode, once per (kind, step, notifier); returns how many were new.
    pub async fn enqueue_extra(
        &self,
        stream: String,
        kind: PageKind,
        step: i64,
        notifiers: Vec<String>,
        at: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        self.call(move |c| ops::enqueue_extra(c, &stream, kind, step, &notifiers, at))
            .await
    }

    /// Counts per notifier and the newest failed pages.
    pub async fn outbox_summary(&self) -> Result<OutboxSummary, StoreError> {
        self.call(|c| ops::outbox_summary(c, 20)).await
    }

    /// Delivered firing pages of alerts still firing (for re-posting).
    pub async fn active_firing_pages(&self) -> Result<Vec<OutboxRow>, StoreError> {
        self.call(ops::active_firing_pages).await
    }

    /// Delete seen_deliveries older than `before` (callers pass now - 7
    /// days); returns rows deleted.
    pub async fn prune_seen(&self, before: DateTime<Utc>) -> Result<usize, StoreError> {
        self.call(move |c| ops::prune_seen(c, before)).await
    }

    /// Records an operational webhook and applies it to the endpoint's state,
    /// queueing any pages it causes, all in one transaction.
    pub async fn record_svix(
        &self,
        event: NewEvent,
        apply: svix::SvixApply,
    ) -> Result<(EventOutcome, Vec<svix::SvixPage>), StoreError> {
        self.call(move |c| svix::record(c, &event, &apply)).await
    }

    /// Acknowledges lost messages: (acknowledged now, still lost, pages).
    pub async fn svix_acknowledge(
        &self,
        apply: svix::SvixApply,
        endpoint_id: String,
        msg_ids: Vec<String>,
    ) -> Result<(usize, u64, Vec<svix::SvixPage>), StoreError> {
        self.call(move |c| svix::acknowledge(c, &apply, &endpoint_id, &msg_ids))
            .await
    }

    /// Endpoints (id, uid) of `source` whose lost count grew since their last page.
    pub async fn svix_grown(
        &self,
        source: String,
    ) -> Result<Vec<(String, Option<String>)>, StoreError> {
        self.call(move |c| svix::grown(c, &source)).await
    }

    /// Queues one updated exhausted page for `endpoint_id`, if still grown.
    pub async fn svix_regroup(
        &self,
        apply: svix::SvixApply,
        endpoint_id: String,
    ) -> Result<Vec<svix::SvixPage>, StoreError> {
        self.call(move |c| svix::regroup(c, &apply, &endpoint_id))
            .await
    }

    pub async fn svix_endpoints(&self) -> Result<Vec<svix::SvixEndpointRow>, StoreError> {
        self.call(|c| svix::endpoints(c, None)).await
    }

    /// Writes a checkpoint of the audit chain head (HMAC-signed with `key`).
    pub async fn audit_checkpoint(
        &self,
        now: DateTime<Utc>,
        key: Option<Vec<u8>>,
    ) -> Result<Option<crate::audit::checkpoint::Checkpoint>, StoreError> {
        self.call(move |c| audit::checkpoint(c, now.timestamp_millis(), key.as_deref()))
            .await
    }

    /// Prunes audit entries received before `before`; returns how many.
    pub async fn audit_prune(&self, before: DateTime<Utc>) -> Result<usize, StoreError> {
        self.call(move |c| audit::prune(c, before.timestamp_millis()))
            .await
    }

    /// Deletes up to `limit` event rows received before `before`.
    pub async fn prune_events(
        &self,
        before: DateTime<Utc>,
        limit: i64,
    ) -> Result<usize, StoreError> {
        self.call(move |c| ops::prune_events(c, before, limit))
            .await
    }

    /// Up to `cap` newest events per stream received since `since`, newest
    /// first (for the status page's timeline).
    pub async fn recent_arrivals(
        &self,
        streams: Vec<String>,
        since: DateTime<Utc>,
        cap: i64,
    ) -> Result<Vec<(String, Vec<status::Arrival>)>, StoreError> {
        self.call(move |c| status::recent_arrivals(c, &streams, since, cap))
            .await
    }

    /// The audit chain's head and its newest checkpoint.
    pub async fn audit_summary(&self) -> Result<status::AuditSummary, StoreError> {
        self.call(status::audit_summary).await
    }

    /// A real write through the normal commit path, for /readyz: proves the
    /// disk still accepts writes and fsyncs.
    pub async fn probe(&self) -> Result<(), StoreError> {
        let now = self.clock.now();
        self.call(move |c| ops::probe(c, now)).await
    }

    /// Number of stored events (including non-clock-feeding ones) on `stream`.
    pub async fn event_count(&self, stream: &str) -> Result<u64, StoreError> {
        let stream = stream.to_owned();
        self.call(move |c| ops::event_count(c, &stream)).await
    }

    /// Stores an operator silence (see `silences`); `None` when `cap`
    /// silences have not ended yet.
    pub async fn add_silence(
        &self,
        silence: silences::NewSilence,
        cap: usize,
        audit: bool,
    ) -> Result<Option<i64>, StoreError> {
        let now = self.clock.now();
        self.call(move |c| silences::add(c, &silence, now, cap, audit))
            .await
    }

    /// Ends a silence now; false when there is no such silence.
    pub async fn expire_silence(
        &self,
        id: i64,
        by: String,
        comment: Option<String>,
        audit: bool,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now();
        self.call(move |c| silences::expire(c, id, &by, comment.as_deref(), now, audit))
            .await
    }

    /// Silences that end after `since`, oldest first.
    pub async fn silences(
        &self,
        since: DateTime<Utc>,
    ) -> Result<Vec<silences::SilenceRow>, StoreError> {
        self.call(move |c| Ok(silences::silences_ending_after(c, since)?))
            .await
    }

    /// Acknowledges the stream's current firing episode.
    pub async fn acknowledge(
        &self,
        stream: String,
        created_by: String,
        comment: String,
        audit: bool,
    ) -> Result<silences::AckOutcome, StoreError> {
        let now = self.clock.now();
        self.call(move |c| silences::acknowledge(c, &stream, &created_by, &comment, now, audit))
            .await
    }

    /// Stores the configured maintenance windows as silences (see
    /// `silences::sync_maintenance`).
    pub async fn sync_maintenance(
        &self,
        windows: Vec<(String, DateTime<Utc>, DateTime<Utc>, String)>,
        audit: bool,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        self.call(move |c| silences::sync_maintenance(c, &windows, now, audit))
            .await
    }

    /// Acknowledgements of episodes still firing.
    pub async fn current_acks(&self) -> Result<Vec<silences::AckRow>, StoreError> {
        self.call(|c| Ok(silences::current_acks(c)?)).await
    }

    /// Queues the firing pages that silences held and that may go out now;
    /// returns how many alerts (stream episodes or keyed alerts) were paged.
    pub async fn release_held(&self) -> Result<usize, StoreError> {
        let now = self.clock.now();
        self.call(move |c| {
            let mut paged = 0;
            for stream in silences::held_streams(c)? {
                paged += usize::from(silences::release_held(c, &stream, now)?);
            }
            Ok(paged + silences::release_held_keyed(c, now)?)
        })
        .await
    }

    /// Graceful shutdown: stops accepting jobs, lets the writer finish
    /// everything already queued, closes the connection (checkpointing the
    /// WAL) and waits for that. Other clones get `Closed` afterwards.
    /// Closing an already closed store is Ok; a writer that had crashed is `Closed`.
    pub async fn close(self) -> Result<(), StoreError> {
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

    /// Runs `work` on the writer thread inside the next group-commit batch
    /// and resolves once that batch has committed (or failed).
    ///
    /// If the caller stops waiting, the job still runs and may commit; that
    /// is safe because a retried delivery is then reported as Duplicate.
    async fn call<T, F>(&self, work: F) -> Result<T, StoreError>
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
