//! hushwatch-store: all of hushwatch's durable state, its clock and its
//! migrations, with the conformance suite both engines pass
//! (`cargo test -p hushwatch-store`; on PostgreSQL too when
//! `HUSHWATCH_TEST_PG_URL` is set).
//!
//! Durable storage for hushwatch. `Store` is a facade over one
//! [`backend::Backend`]: the embedded SQLite file in `data_dir` (`sqlite`,
//! one writer thread with group commit), or a shared PostgreSQL database.
//!
//! Fail-closed contract: every operation (a `Backend` method, called on
//! `Store` through its `Deref`) resolves `Ok` only after the transaction
//! holding its work has committed durably (SQLite: WAL fsynced with
//! `synchronous=FULL`). Callers may therefore answer an HTTP 2xx as soon as
//! `record_events` returns `Ok`.
//!
//! All times are stored as integer milliseconds since the Unix epoch, so
//! sub-millisecond precision of the `DateTime`s passed in is dropped. The
//! instants the store stamps itself come from the clock it was opened with
//! (`store.now()`).

pub mod ack_codes;
mod arrivals;
pub mod clock;
pub mod location;
pub mod nul;
pub(crate) use arrivals::moved_streams;
pub mod audit;
pub mod backend;
mod core;
pub mod crosscheck;
pub mod crosscheck_view;
mod db;
pub mod forward;
pub mod forward_admin;
pub mod gaps;
pub mod idempotency;
pub mod ladder;
mod migrate;
mod migrations;
mod ops;
mod outbox;
pub mod pg;
pub mod reconcile;
pub mod replica;
pub mod revocations;
mod schema;
pub mod seal;
pub mod silences;
mod sqlite;
pub mod status;
pub mod subscriptions;
pub mod svix;
mod svix_ack;
pub mod veil;
mod writer;

#[cfg(test)]
mod conformance;
#[cfg(test)]
mod driver_names;
#[cfg(any(test, feature = "test-support"))]
pub mod testdb;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::clock::{Clock, SystemClock};
use backend::Backend;

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
    /// Refused by design, not a storage fault: what the write was about
    /// is gone (a templated stream deleted while its event was stored).
    /// Nothing was written; the sender's retry settles it.
    Gone(String),
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
            StoreError::Gone(msg) => write!(f, "not stored: {msg}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sql(e.to_string())
    }
}

/// A stored millisecond timestamp read back: one no `DateTime` can hold is
/// a damaged row, reported as an error rather than read as another time.
fn stored_time(ms: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StoreError::Sql(format!("stored time {ms} is out of range")))
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
    /// Grant/revoke bookkeeping for the ingest transaction
    /// (`store::revocations`); None for any other event.
    pub access: Option<revocations::AccessNote>,
    /// Relay mode: the verified body to forward to the app, stored in the
    /// same transaction when the event is accepted (`store::forward`).
    pub forward: Option<forward::ForwardBody>,
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

impl AlertState {
    /// The state a page moves its alert to: firing, or resolved (`Ok`).
    pub fn from_firing(firing: bool) -> AlertState {
        if firing {
            AlertState::Firing
        } else {
            AlertState::Ok
        }
    }

    /// The domain's view of a stored alert state (what its decisions take).
    pub fn status(&self) -> hushwatch_core::domain::alert::AlertStatus {
        use hushwatch_core::domain::alert::AlertStatus;
        match self {
            AlertState::Ok => AlertStatus::Ok,
            AlertState::Firing => AlertStatus::Firing,
        }
    }
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

/// What [`backend::Operations::record_transition_if_silent`] did.
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
    pub alert_kind: hushwatch_core::domain::alert_kind::AlertKind,
    /// `critical` or `warning`, decided when the page was queued.
    pub severity: String,
    /// For Svix pages: the `[svix.NAME]` source and endpoint id.
    pub source: Option<String>,
    pub endpoint_id: Option<String>,
    /// For a silence resolve: the arrival that ended the silence (the
    /// row's `silent_since` is then where that silence began).
    pub resumed_at: Option<DateTime<Utc>>,
}

/// A stored row hushwatch cannot read (a kind it does not know: written by
/// a newer binary, or altered at rest). It is never read as something
/// else and never blocks the rows beside it: the read that met it goes on
/// and names it here, and the service holds it, pages and reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// Which row: `outbox row 12`, `held page of alert …`.
    pub what: String,
    /// Why it does not read, without the store's error prefix.
    pub why: String,
    /// For an outbox page: where it stands in its (alert, notifier) queue.
    /// The pages behind it in that queue wait for it (their order holds);
    /// no other queue does.
    pub queue: Option<QueuePlace>,
}

/// An outbox row's place: its id (queues go in id order) and its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePlace {
    pub id: i64,
    pub alert_id: String,
    pub notifier: String,
}

impl Unreadable {
    pub(crate) fn new(what: String, e: &StoreError) -> Unreadable {
        let why = match e {
            StoreError::Sql(m) => m.clone(),
            other => other.to_string(),
        };
        Unreadable {
            what,
            why,
            queue: None,
        }
    }
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.why)
    }
}

/// The rows of a read that reads row by row: those that parsed, and those
/// that did not ([`Unreadable`]), which the caller must report.
#[derive(Debug, Clone, PartialEq)]
#[must_use = "unreadable rows must be reported, not dropped"]
pub struct Readable<T> {
    pub rows: Vec<T>,
    pub unreadable: Vec<Unreadable>,
}

impl<T> Default for Readable<T> {
    fn default() -> Self {
        Readable {
            rows: Vec::new(),
            unreadable: Vec::new(),
        }
    }
}

/// What releasing held pages did: how many alerts it paged, and the held
/// pages it cannot read (they stay held).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "unreadable rows must be reported, not dropped"]
pub struct Released {
    pub paged: usize,
    pub unreadable: Vec<Unreadable>,
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

/// Change-feed messages a slow receiver may fall behind by before it sees
/// `Lagged` (and should then re-read every stream, as on `Change::Resync`).
const FEED_CAPACITY: usize = 1024;

/// Counters the writer updates and handles read, for tests and metrics.
#[derive(Debug, Default)]
struct Shared {
    commits: AtomicU64,
}

/// Cheap, cloneable handle to the storage backend. Every method is one
/// transaction on it.
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
}

/// Every operation is declared once, in `Backend`, and called through
/// this `Deref` (`store.claim_forwards(…)`): no wrapper restates it. The
/// backend holds the clock the store was opened with, so the instants the
/// store stamps itself (outbox `created_at`, the readiness probe, leases)
/// come from the same clock as everything else, and `store.now()` reads it.
impl std::ops::Deref for Store {
    type Target = dyn Backend;

    fn deref(&self) -> &Self::Target {
        self.backend.as_ref()
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("engine", &self.backend.engine())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the SQLite database at `path`, migrates
    /// it, and starts the writer thread, on the wall clock. Blocking: call
    /// it at startup, not per request.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with_clock(path, Arc::new(SystemClock))
    }

    /// Like `open`, with the clock the rest of the sidecar uses (a
    /// `ManualClock` in tests).
    pub fn open_with_clock(path: &Path, clock: Arc<dyn Clock>) -> Result<Store, StoreError> {
        let backend = sqlite::SqliteBackend::open(path, clock)?;
        Ok(Self::with_backend(Arc::new(backend)))
    }

    /// Connects to the shared PostgreSQL database of `[store] url`,
    /// migrating it under the migration lock, with at most `pool_size`
    /// connections.
    pub async fn open_postgres(
        settings: &pg::Settings,
        pool_size: usize,
        clock: Arc<dyn Clock>,
    ) -> Result<Store, StoreError> {
        let backend = pg::PgBackend::open(settings, pool_size, clock).await?;
        Ok(Self::with_backend(Arc::new(backend)))
    }

    /// The store `[store]` names: the SQLite file at `sqlite_path` (opened
    /// off the runtime's threads), or the PostgreSQL database of `url`.
    pub async fn open_configured(
        store: &location::StoreConfig,
        sqlite_path: std::path::PathBuf,
        clock: Arc<dyn Clock>,
    ) -> Result<Store, StoreError> {
        match &store.postgres {
            None => {
                tokio::task::spawn_blocking(move || Store::open_with_clock(&sqlite_path, clock))
                    .await
                    .map_err(|e| StoreError::Open(format!("store open panicked: {e}")))?
            }
            Some(pg) => {
                tracing::info!(url = %pg.settings.redacted, "store: PostgreSQL");
                Store::open_postgres(&pg.settings, pg.pool_size, clock).await
            }
        }
    }

    /// The clock `serve` runs on: the wall clock, or with PostgreSQL the
    /// wall clock corrected to the database server's, so that every
    /// replica stamps instants from one timeline (`pg::clock`).
    pub async fn serve_clock(store: &location::StoreConfig) -> Result<Arc<dyn Clock>, StoreError> {
        match &store.postgres {
            None => Ok(Arc::new(SystemClock)),
            Some(pg) => {
                let clock = pg::clock::DbClock::start(pg::pool(&pg.settings, 1)?).await?;
                tracing::info!(
                    offset_ms = clock.offset().num_milliseconds(),
                    "clock: corrected to the database server's"
                );
                Ok(clock)
            }
        }
    }

    /// A store over any backend (which stamps on its own clock).
    pub fn with_backend(backend: Arc<dyn Backend>) -> Store {
        Store { backend }
    }

    /// The SQLite backend behind this store, for its own tests.
    #[cfg(any(test, feature = "test-support"))]
    #[cfg_attr(not(test), allow(dead_code))] // test-support: reached from testdb
    pub(crate) fn sqlite(&self) -> &sqlite::SqliteBackend {
        self.backend
            .as_any()
            .downcast_ref()
            .expect("a SQLite-backed store")
    }
}
