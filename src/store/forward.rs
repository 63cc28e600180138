//! Relay mode's rows (issue #29): each verified delivery of a forwarding
//! stream is stored with its (sealed) body in the ingest transaction, then
//! claimed, attempted and settled by `service::forward`.
//!
//! - **Claims** reuse the outbox's machinery (`store::replica`): a lease
//!   (`claimed_by`, `lease_until`) and a fencing token (`claim_token`, +1
//!   per claim); a settle counts only for the current token, so a replica
//!   that lost its lease mid-send changes nothing, and the row is sent
//!   again by whoever claims it next, under the same `webhook-id`.
//! - **Order**: rows of an ordered stream share a `queue` (the stream
//!   name); only the oldest pending row of a queue is claimable, so at most
//!   one is in flight across all replicas and a failing head blocks the
//!   rest. Unordered rows have no queue.
//! - **Decisions** (retry or dead letter, which failure step pages, what
//!   pages say, which rows a claim or a replay takes, when the dead-letter
//!   alert changes) are `domain::forward`, as are the plain request and
//!   outcome types re-exported here; this file only reads and writes rows,
//!   once for both engines over `store::db::Db`, with the SQL of [`sql`].

use chrono::{DateTime, TimeDelta, Utc};

use super::db::{Cells, Columns, Db};
use super::ops::{millis, opt_time, time, KeyedAlert};
use super::seal::Sealed;
use super::stored_time;
use super::{audit, core, outbox};
use super::{AlertState, NewEvent, StoreError, StreamRow, Transition};
use crate::domain::alert_kind::AlertKind;
use crate::domain::forward::{self as decide, Head, Oldest, Run, RunPage};
pub use crate::domain::forward::{
    ForwardAttempt, ForwardPolicy, ForwardStatus, ReplayOutcome, ReplayRequest, StoredFate,
    NO_FORWARD,
};
use crate::domain::svix::Severity;

/// The schema step, written once: the engines differ only in the id
/// column and the byte type (BIGINT has INTEGER affinity on SQLite).
/// `queue` is NULL for unordered rows; `state` is `pending` until the
/// app's 2xx (`delivered`) or `give_up_after` (`dead`). The partial indexes
/// keep every hot read off the delivered rows kept for replay: the head of
/// each ordered queue, the next due unordered row, the open (pending or
/// dead) rows per stream, and what is due for pruning.
macro_rules! forwards_schema {
    ($id:literal, $bytes:literal) => {
        concat!(
            "CREATE TABLE forwards (
        id              ",
            $id,
            ",
        stream          TEXT NOT NULL,
        queue           TEXT,
        delivery_id     TEXT NOT NULL,
        event_type      TEXT NOT NULL,
        subject         TEXT,
        event_time      BIGINT,
        received_at     BIGINT NOT NULL,
        give_up_from    BIGINT NOT NULL,
        moves_clock     BOOLEAN NOT NULL,
        key_id          TEXT,
        body            ",
            $bytes,
            " NOT NULL,
        state           TEXT NOT NULL DEFAULT 'pending'
                        CHECK (state IN ('pending', 'delivered', 'dead')),
        attempts        BIGINT NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL,
        last_error      TEXT,
        last_status     BIGINT,
        claimed_by      TEXT,
        lease_until     BIGINT,
        claim_token     BIGINT NOT NULL DEFAULT 0,
        settled_at      BIGINT,
        prune_at        BIGINT,
        replays         BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX forwards_pending ON forwards (queue, id) WHERE state = 'pending';
    CREATE INDEX forwards_unordered ON forwards (next_attempt_at)
        WHERE state = 'pending' AND queue IS NULL;
    CREATE INDEX forwards_open ON forwards (stream, state) WHERE state <> 'delivered';
    CREATE INDEX forwards_window ON forwards (stream, received_at);
    CREATE INDEX forwards_prune ON forwards (prune_at) WHERE prune_at IS NOT NULL;
    CREATE TABLE forward_runs (
        stream            TEXT PRIMARY KEY NOT NULL,
        failures          BIGINT NOT NULL DEFAULT 0,
        paged             BIGINT NOT NULL DEFAULT 0,
        failing_since     BIGINT,
        last_error        TEXT,
        last_attempt_at   BIGINT,
        last_delivered_at BIGINT,
        last_status       BIGINT,
        dead_paged        BOOLEAN NOT NULL DEFAULT FALSE
    );"
        )
    };
}

pub(super) const MIGRATION_SQLITE: &str = forwards_schema!("INTEGER PRIMARY KEY", "BLOB");
pub(crate) const MIGRATION_PG: &str =
    forwards_schema!("BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "BYTEA");

/// What the ingest transaction stores for a forwarding stream's delivery
/// (on its [`NewEvent`]; only verified bodies ever get one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardBody {
    pub sealed: Sealed,
    pub ordered: bool,
    /// `clock = "delivered"` and the event type feeds the clock: the app's
    /// 2xx moves the stream's clock (the arrival did not).
    pub moves_clock: bool,
}

/// A row handed to one replica until `lease_until`.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardClaim {
    pub id: i64,
    pub token: i64,
    pub stream: String,
    pub delivery_id: String,
    pub event_type: String,
    pub subject: Option<String>,
    pub event_time: Option<DateTime<Utc>>,
    pub received_at: DateTime<Utc>,
    /// What `give_up_after` counts from: the arrival, or the last replay
    /// (a replayed event gets the whole ladder again).
    pub give_up_from: DateTime<Utc>,
    pub attempts: u32,
    pub body: Sealed,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ForwardSettle {
    pub claim: ForwardClaim,
    pub attempt: ForwardAttempt,
    pub at: DateTime<Utc>,
    pub policy: ForwardPolicy,
}

/// What settling did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ForwardSettled {
    /// False when the claim had been taken over: nothing was written.
    pub settled: bool,
    /// The stream row the delivery moved (`clock = "delivered"`).
    pub moved: Option<StreamRow>,
    /// Became a dead letter.
    pub dead: bool,
}

/// The keyed alerts of relay pages: one failing and one dead-letter alert
/// per stream, each with one alert id shared by its firing and resolved
/// pages.
pub(super) fn failing_alert(stream: &str, severity: Severity) -> KeyedAlert<'_> {
    KeyedAlert {
        kind: AlertKind::ForwardFailing.as_str(),
        family: "forward",
        key: stream,
        severity: severity.as_str(),
        source: "forward",
        endpoint_id: stream,
    }
}

pub(super) fn dead_letter_alert(stream: &str) -> KeyedAlert<'_> {
    KeyedAlert {
        kind: AlertKind::ForwardDeadLetter.as_str(),
        family: "forward-dead-letter",
        key: stream,
        severity: Severity::Critical.as_str(),
        source: "forward",
        endpoint_id: stream,
    }
}

pub(super) fn page(
    stream: &str,
    firing: bool,
    at: DateTime<Utc>,
    reason: String,
    notifiers: &[String],
) -> Transition {
    Transition {
        stream: stream.to_string(),
        to: AlertState::from_firing(firing),
        at,
        reason,
        notifiers: notifiers.to_vec(),
    }
}

/// The chained audit entry of an outcome or a replay.
pub(super) fn audit_entry(
    stream: &str,
    delivery_id: Option<&str>,
    event_type: String,
    event_time: Option<DateTime<Utc>>,
    subject: Option<&str>,
    at: DateTime<Utc>,
) -> NewEvent {
    NewEvent {
        stream: stream.to_string(),
        delivery_id: delivery_id.map(str::to_owned),
        event_type,
        event_time,
        received_at: at,
        feeds_clock: false,
        body_sha256: None,
        channel: "forward",
        signature_verified: false,
        subject_ids: subject
            .map(|s| vec![("subject".to_string(), s.to_string())])
            .unwrap_or_default(),
        audit: true,
        access: None,
        forward: None,
    }
}

/// The clock move of a delivered event (`clock = "delivered"`): the
/// stream's arrival becomes the app's 2xx, through the ingest path's own
/// clock statement.
pub(super) fn clock_event(c: &ForwardClaim, at: DateTime<Utc>) -> NewEvent {
    NewEvent {
        stream: c.stream.clone(),
        delivery_id: Some(c.delivery_id.clone()),
        event_type: c.event_type.clone(),
        event_time: c.event_time,
        received_at: at,
        feeds_clock: true,
        body_sha256: None,
        channel: "forward",
        signature_verified: true,
        subject_ids: Vec::new(),
        audit: false,
        access: None,
        forward: None,
    }
}

/// Statements shared by both engines (`$N`; SQLite runs them through
/// `lite`). PostgreSQL appends a row lock where SQLite's single writer
/// needs none.
pub(super) mod sql {
    pub const INSERT: &str = "INSERT INTO forwards (stream, queue, delivery_id, event_type,
             subject, event_time, received_at, moves_clock, key_id, body, next_attempt_at,
             give_up_from)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $7, $7)";
    /// Registers an ordered stream's queue (its failure run row) at ingest,
    /// so a claim finds every queue without scanning the rows.
    pub const QUEUE: &str =
        "INSERT INTO forward_runs (stream) VALUES ($1) ON CONFLICT (stream) DO NOTHING";
    pub const QUEUES: &str = "SELECT stream FROM forward_runs ORDER BY stream";
    /// Ends every lease (a single process restarting: they are all its own
    /// dead process's, and waiting them out would delay delivery).
    pub const RELEASE: &str = "UPDATE forwards SET claimed_by = NULL, lease_until = NULL
         WHERE state = 'pending' AND lease_until IS NOT NULL";
    /// The oldest pending row of an ordered queue (an index seek).
    pub const HEAD: &str = "SELECT id, next_attempt_at, lease_until FROM forwards
         WHERE queue = $1 AND state = 'pending' ORDER BY id LIMIT 1";
    pub const UNORDERED_DUE: &str = "SELECT id FROM forwards
         WHERE queue IS NULL AND state = 'pending' AND next_attempt_at <= $1
           AND (lease_until IS NULL OR lease_until <= $1)
         ORDER BY next_attempt_at, id LIMIT $2";
    /// When the next unordered row falls due (rows due but leased are
    /// found again by the worker's poll when their lease ends).
    pub const UNORDERED_NEXT: &str = "SELECT min(next_attempt_at) FROM forwards
         WHERE queue IS NULL AND state = 'pending' AND next_attempt_at > $1";
    /// The claim itself, guarded: it takes the row only if it is still
    /// pending, due and unleased when the row is locked, so of two
    /// replicas reading the same head exactly one gets it (the other's
    /// UPDATE waits for the row, then matches nothing). The same text on
    /// both engines, no SKIP LOCKED needed.
    pub const CLAIM: &str = "UPDATE forwards
         SET claimed_by = $2, lease_until = $3, claim_token = claim_token + 1
         WHERE id = $1 AND state = 'pending' AND next_attempt_at <= $4
           AND (lease_until IS NULL OR lease_until <= $4)
         RETURNING claim_token, stream, delivery_id, event_type, subject, event_time,
                   received_at, attempts, key_id, body, give_up_from";
    pub const SETTLE: &str = "UPDATE forwards
         SET attempts = attempts + 1, claimed_by = NULL, lease_until = NULL,
             state = $3, next_attempt_at = $4, last_error = $5, last_status = $6,
             settled_at = $7, prune_at = $8
         WHERE id = $1 AND claim_token = $2 AND state = 'pending'";
    pub const RUN: &str = "SELECT failures, paged, failing_since, last_error, last_attempt_at,
             last_delivered_at, last_status, dead_paged
         FROM forward_runs WHERE stream = $1";
    pub const WRITE_RUN: &str = "INSERT INTO forward_runs (stream, failures, paged,
             failing_since, last_error, last_attempt_at, last_delivered_at, last_status, dead_paged)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (stream) DO UPDATE SET failures = excluded.failures,
             paged = excluded.paged, failing_since = excluded.failing_since,
             last_error = excluded.last_error, last_attempt_at = excluded.last_attempt_at,
             last_delivered_at = excluded.last_delivered_at,
             last_status = excluded.last_status, dead_paged = excluded.dead_paged";
    pub const COUNT_STATE: &str = "SELECT count(*) FROM forwards WHERE stream = $1 AND state = $2";
    pub const OLDEST_STATE: &str = "SELECT delivery_id, event_type, subject, received_at
         FROM forwards WHERE stream = $1 AND state = $2 ORDER BY id LIMIT 1";
    /// Open rows only: delivered ones (kept for replay) are not counted.
    pub const SUMMARY: &str = "SELECT stream, state, count(*), min(received_at)
         FROM forwards WHERE state <> 'delivered' GROUP BY stream, state ORDER BY stream";
    pub const RUNS: &str = "SELECT stream, failures, failing_since, last_error,
             last_delivered_at, last_attempt_at FROM forward_runs ORDER BY stream";
    pub const PRUNE: &str = "DELETE FROM forwards WHERE prune_at IS NOT NULL AND prune_at <= $1";
    pub const DEAD_PAGED_STREAMS: &str =
        "SELECT stream FROM forward_runs WHERE dead_paged ORDER BY stream";
    pub const SET_DEAD_PAGED: &str = "UPDATE forward_runs SET dead_paged = $2 WHERE stream = $1";
    /// A stored delivery by its id (reconciliation pages say what became
    /// of a revocation).
    pub const FATE: &str = "SELECT state, received_at, settled_at, last_status
         FROM forwards WHERE stream = $1 AND delivery_id = $2 ORDER BY id DESC LIMIT 1";
}

pub(super) fn first_subject(event: &NewEvent) -> Option<&str> {
    event.subject_ids.first().map(|(_, v)| v.as_str())
}

/// The columns `sql::CLAIM` returns, read the same way on both engines
/// (`store::db::Columns`).
pub(super) type ClaimColumns = (
    i64,
    String,
    String,
    String,
    Option<String>,
    Option<i64>,
    i64,
    i64,
    Option<String>,
    Vec<u8>,
    i64,
);

pub(super) fn claim_of(id: i64, c: ClaimColumns) -> ForwardClaim {
    let (token, stream, delivery_id, event_type, subject, event_time, received_at, attempts) =
        (c.0, c.1, c.2, c.3, c.4, c.5, c.6, c.7);
    ForwardClaim {
        id,
        token,
        stream,
        delivery_id,
        event_type,
        subject,
        event_time: opt_time(event_time),
        received_at: time(received_at),
        give_up_from: time(c.10),
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        body: Sealed {
            key_id: c.8,
            bytes: c.9,
        },
    }
}

/// A stream's run as [`sql::RUN`] reads it.
impl Columns for Run {
    fn read(r: &impl Cells) -> Result<Run, StoreError> {
        let count = |i| Ok::<_, StoreError>(u32::try_from(r.cell::<i64>(i)?).unwrap_or(u32::MAX));
        Ok(Run {
            failures: count(0)?,
            paged: count(1)?,
            failing_since: opt_time(r.cell(2)?),
            last_error: r.cell(3)?,
            last_attempt_at: opt_time(r.cell(4)?),
            last_delivered_at: opt_time(r.cell(5)?),
            last_status: r
                .cell::<Option<i64>>(6)?
                .and_then(|s| u16::try_from(s).ok()),
            dead_paged: r.cell(7)?,
        })
    }
}

/// The audit entry of a replay: who, when, which window, how many.
pub(super) fn replay_entry(r: &ReplayRequest, count: u64) -> NewEvent {
    let mut e = audit_entry(
        &r.stream,
        None,
        decide::replay_summary(r, count),
        None,
        None,
        r.now,
    );
    e.channel = "operator";
    e
}

/// A `forward_runs` row as [`sql::RUNS`] reads it: stream, failures,
/// failing_since, last_error, last_delivered_at, last_attempt_at.
pub(super) type RunsRow = (
    String,
    i64,
    Option<i64>,
    Option<String>,
    Option<i64>,
    Option<i64>,
);

/// Folds the per-state counts and the runs into one row per stream.
pub(super) fn status_rows(
    counts: Vec<(String, String, i64, Option<i64>)>,
    runs: Vec<RunsRow>,
) -> Vec<ForwardStatus> {
    type Rows = std::collections::BTreeMap<String, ForwardStatus>;
    fn entry(out: &mut Rows, stream: String) -> &mut ForwardStatus {
        out.entry(stream.clone()).or_insert_with(|| ForwardStatus {
            stream,
            ..Default::default()
        })
    }
    let mut out = Rows::new();
    for (stream, state, n, oldest) in counts {
        let row = entry(&mut out, stream);
        let n = u64::try_from(n).unwrap_or(0);
        match state.as_str() {
            "pending" => {
                row.pending = n;
                row.oldest_pending_at = opt_time(oldest);
            }
            "dead" => row.dead_letters = n,
            _ => {}
        }
    }
    for (stream, failures, since, error, delivered, attempted) in runs {
        let row = entry(&mut out, stream);
        row.consecutive_failures = u64::try_from(failures).unwrap_or(0);
        row.failing_since = opt_time(since);
        row.last_error = error;
        row.last_delivered_at = opt_time(delivered);
        row.last_attempt_at = opt_time(attempted);
    }
    out.into_values().collect()
}

// ---------------------------------------------------------------------------
// Rows, on either engine (`store::db`): read them, call the decisions,
// write the outcome.
// ---------------------------------------------------------------------------

/// In the ingest transaction, after the event was accepted.
pub(super) async fn insert<D: Db>(db: &D, event: &NewEvent) -> Result<(), StoreError> {
    let Some(f) = &event.forward else {
        return Ok(());
    };
    db.exec(
        sql::INSERT,
        &[
            &event.stream,
            &f.ordered.then_some(event.stream.as_str()),
            &event.delivery_id.as_deref().unwrap_or_default(),
            &event.event_type,
            &first_subject(event),
            &event.event_time.map(millis),
            &millis(event.received_at),
            &f.moves_clock,
            &f.sealed.key_id,
            &f.sealed.bytes,
        ],
    )
    .await?;
    if f.ordered {
        db.exec(sql::QUEUE, &[&event.stream]).await?;
    }
    Ok(())
}

pub(super) async fn claim<D: Db>(
    db: &D,
    replica: &str,
    now: DateTime<Utc>,
    lease: TimeDelta,
    limit: i64,
) -> Result<(Vec<ForwardClaim>, Option<DateTime<Utc>>), StoreError> {
    let queues: Vec<(String,)> = db.rows(sql::QUEUES, &[]).await?;
    let mut heads = Vec::with_capacity(queues.len());
    for (q,) in &queues {
        if let Some((id, next_attempt_at, lease_until)) = db.opt(sql::HEAD, &[q]).await? {
            heads.push(Head {
                id,
                next_attempt_at,
                lease_until,
            });
        }
    }
    let unordered: Vec<(i64,)> = db.rows(sql::UNORDERED_DUE, &[&millis(now), &limit]).await?;
    let unordered: Vec<i64> = unordered.into_iter().map(|(id,)| id).collect();
    let (unordered_next,): (Option<i64>,) = db.one(sql::UNORDERED_NEXT, &[&millis(now)]).await?;
    let (ids, next) = decide::plan_claim(
        &heads,
        &unordered,
        unordered_next,
        millis(now),
        usize::try_from(limit).unwrap_or(0),
    );
    let mut claims = Vec::with_capacity(ids.len());
    for id in ids {
        // Guarded (see `sql::CLAIM`): a row another replica claimed first
        // matches nothing here once its claim commits.
        let claim: Option<ClaimColumns> = db
            .opt(
                sql::CLAIM,
                &[&id, &replica, &millis(now + lease), &millis(now)],
            )
            .await?;
        claims.extend(claim.map(|c| claim_of(id, c)));
    }
    Ok((claims, next.map(stored_time).transpose()?))
}

pub(super) async fn release<D: Db>(db: &D) -> Result<usize, StoreError> {
    let n = db.exec(sql::RELEASE, &[]).await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// The stream's run, locked on PostgreSQL until the settle writes it.
async fn run<D: Db>(db: &D, stream: &str) -> Result<Run, StoreError> {
    Ok(db
        .opt(&D::locked(sql::RUN), &[&stream])
        .await?
        .unwrap_or_default())
}

async fn write_run<D: Db>(db: &D, stream: &str, r: &Run) -> Result<(), StoreError> {
    db.exec(
        sql::WRITE_RUN,
        &[
            &stream,
            &i64::from(r.failures),
            &i64::from(r.paged),
            &r.failing_since.map(millis),
            &r.last_error,
            &r.last_attempt_at.map(millis),
            &r.last_delivered_at.map(millis),
            &r.last_status.map(i64::from),
            &r.dead_paged,
        ],
    )
    .await?;
    Ok(())
}

async fn count_state<D: Db>(db: &D, stream: &str, state: &str) -> Result<u64, StoreError> {
    let (n,): (i64,) = db.one(sql::COUNT_STATE, &[&stream, &state]).await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

async fn oldest_state<D: Db>(
    db: &D,
    stream: &str,
    state: &str,
) -> Result<Option<Oldest>, StoreError> {
    let row: Option<(String, String, Option<String>, i64)> =
        db.opt(sql::OLDEST_STATE, &[&stream, &state]).await?;
    row.map(|(delivery_id, event_type, subject, at)| {
        Ok(Oldest {
            delivery_id,
            event_type,
            subject,
            received_at: stored_time(at)?,
        })
    })
    .transpose()
}

/// Fires or resolves the stream's dead-letter alert when its count says so.
pub(super) async fn dead_letter_check<D: Db>(
    db: &D,
    stream: &str,
    at: DateTime<Utc>,
    notifiers: &[String],
) -> Result<(), StoreError> {
    let paged = run(db, stream).await?.dead_paged;
    let dead = count_state(db, stream, "dead").await?;
    let Some(firing) = decide::dead_letter_change(dead, paged) else {
        return Ok(());
    };
    let oldest = oldest_state(db, stream, "dead").await?;
    let reason = decide::dead_letter_reason(stream, firing, dead, oldest.as_ref());
    outbox::queue_keyed_pages(
        db,
        &page(stream, firing, at, reason, notifiers),
        at,
        &dead_letter_alert(stream),
    )
    .await?;
    db.exec(sql::SET_DEAD_PAGED, &[&stream, &firing]).await?;
    Ok(())
}

/// A settle takes the audit head's lock first when it may append, then the
/// stream's run row: the ingest order (head → rows), so the two never wait
/// on each other in a cycle.
pub(super) async fn settle<D: Db>(db: &D, s: &ForwardSettle) -> Result<ForwardSettled, StoreError> {
    let c = &s.claim;
    audit::lock_head(db, s.policy.audit).await?;
    let before = run(db, &c.stream).await?;
    let plan = decide::plan_settle(
        &s.attempt,
        c.attempts,
        c.give_up_from,
        s.at,
        &s.policy,
        before,
    );
    let changed = db
        .exec(
            sql::SETTLE,
            &[
                &c.id,
                &c.token,
                &plan.state,
                &millis(plan.next_attempt_at),
                // The attempt's own error and status, as the run has them.
                &plan.run.last_error,
                &plan.run.last_status.map(i64::from),
                &plan.settled_at.map(millis),
                &plan.prune_at.map(millis),
            ],
        )
        .await?;
    if changed == 0 {
        return Ok(ForwardSettled::default());
    }
    write_run(db, &c.stream, &plan.run).await?;
    if let (Some(audit_type), true) = (&plan.audit_type, s.policy.audit) {
        audit::append_audit(
            db,
            &audit_entry(
                &c.stream,
                Some(&c.delivery_id),
                audit_type.clone(),
                c.event_time,
                c.subject.as_deref(),
                s.at,
            ),
        )
        .await?;
    }
    if let Some(fp) = plan.failing_page {
        let pending = count_state(db, &c.stream, "pending").await?;
        let oldest = oldest_state(db, &c.stream, "pending").await?;
        let reason = decide::failing_reason(
            &c.stream,
            &plan,
            s.at,
            pending,
            oldest.as_ref(),
            s.policy.ordered,
        );
        let (firing, severity) = match fp {
            RunPage::Fire(step) => (true, step.severity),
            RunPage::Resolve { .. } => (false, Severity::Warning),
        };
        outbox::queue_keyed_pages(
            db,
            &page(&c.stream, firing, s.at, reason, &s.policy.notifiers),
            s.at,
            &failing_alert(&c.stream, severity),
        )
        .await?;
    }
    let mut moved = None;
    if plan.state == "delivered" {
        let (moves,): (bool,) = db
            .one("SELECT moves_clock FROM forwards WHERE id = $1", &[&c.id])
            .await?;
        if moves {
            core::advance_clock(db, &clock_event(c, s.at)).await?;
            moved = core::stream_row(db, &c.stream).await?;
        }
    }
    // Only a new dead letter, or a delivery while the alert is firing,
    // can change the dead-letter alert; every other settle skips the count.
    if plan.state == "dead" || (plan.state == "delivered" && plan.run.dead_paged) {
        dead_letter_check(db, &c.stream, s.at, &s.policy.notifiers).await?;
    }
    Ok(ForwardSettled {
        settled: true,
        moved,
        dead: plan.state == "dead",
    })
}

pub(super) async fn status<D: Db>(db: &D) -> Result<Vec<ForwardStatus>, StoreError> {
    let counts = db.rows(sql::SUMMARY, &[]).await?;
    let runs = db.rows(sql::RUNS, &[]).await?;
    Ok(status_rows(counts, runs))
}

/// Deletes bodies past their retention; a stream whose last dead letter
/// expired resolves its alert (`notifiers` per stream).
pub(super) async fn prune<D: Db>(
    db: &D,
    now: DateTime<Utc>,
    notifiers: &std::collections::BTreeMap<String, Vec<String>>,
) -> Result<usize, StoreError> {
    let n = db.exec(sql::PRUNE, &[&millis(now)]).await?;
    let paged: Vec<(String,)> = db.rows(sql::DEAD_PAGED_STREAMS, &[]).await?;
    for (stream,) in paged {
        let to = notifiers.get(&stream).cloned().unwrap_or_default();
        dead_letter_check(db, &stream, now, &to).await?;
    }
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// Makes the pending rows of `streams` that failed only because their
/// `[forward]` was missing ([`NO_FORWARD`]) due now, so they go out as soon
/// as `[forward]` is back rather than at their next step of the default
/// ladder (up to a day later). Rows that failed at the app keep their
/// schedule. How many were moved.
pub(super) async fn hurry<D: Db>(
    db: &D,
    streams: &[String],
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let mut moved = 0;
    for stream in streams {
        moved += db
            .exec(
                "UPDATE forwards SET next_attempt_at = $2
                 WHERE stream = $1 AND state = 'pending' AND next_attempt_at > $2
                   AND last_error = $3",
                &[stream, &millis(now), &NO_FORWARD],
            )
            .await?;
    }
    Ok(usize::try_from(moved).unwrap_or(usize::MAX))
}

pub(super) async fn fate<D: Db>(
    db: &D,
    stream: &str,
    delivery_id: &str,
) -> Result<Option<StoredFate>, StoreError> {
    let row: Option<(String, i64, Option<i64>, Option<i64>)> =
        db.opt(sql::FATE, &[&stream, &delivery_id]).await?;
    row.map(|(state, received, settled, status)| {
        Ok(StoredFate {
            state,
            received_at: stored_time(received)?,
            settled_at: settled.map(stored_time).transpose()?,
            status: status.and_then(|s| u16::try_from(s).ok()),
        })
    })
    .transpose()
}
