//! Relay mode's rows (issue #29): each verified delivery of a forwarding
//! stream is stored with its (sealed) body in the ingest transaction, then
//! claimed, attempted and settled by `service::forward`.
//!
//! - **Claims** reuse the outbox's machinery (`store::replica`): a lease
//!   (`claimed_by`, `lease_until`) and a fencing token (`claim_token`, +1
//!   per claim); a settle counts only for the current token, so a replica
//!   that lost its lease mid-send changes nothing, and the row is sent
//!   again by whoever claims it next, under the same `webhook-id`.
//! - **Attempts** are counted when a row is claimed, so a re-send after a
//!   crash (kill -9 mid-send) carries a new `hushwatch-attempt` number.
//! - **Order** (`domain::forward::Order`): rows that wait for each other
//!   share a `queue`: the stream name (`ordered = "stream"`), or the stream,
//!   a separator and the row's `order_key`, its subject (`"subject"`; rows
//!   without one share the stream's queue). Only the oldest pending row of
//!   a queue is claimable, so at most one is in flight across all replicas
//!   and a failing head blocks only its own queue. Unordered rows have no
//!   queue. One grouped read finds every queue's head. A reload or start
//!   rewrites the `queue` of the pending and held rows when `ordered`
//!   changed ([`align`]).
//! - **Held** rows (`state = 'held'`, `held_reason`) are ones hushwatch
//!   itself cannot send: a seal key no longer configured, a row altered at
//!   rest, a stream without `[forward]`. They leave the queue at once and
//!   page `forward_held`; [`align`] releases them when the cause is gone.
//! - **Plaintext mark**: `forward_marks.plain_until` is the last row id
//!   stored before a key was configured ([`align`] sets it when one first
//!   is, and drops it while none is): a row claiming plaintext after it is
//!   held, not forwarded (`store::seal`).
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
use hushwatch_core::domain::alert_kind::AlertKind;
use hushwatch_core::domain::forward::{
    self as decide, Commands, Head, HeldEvent, Oldest, Run, RunPage,
};
pub use hushwatch_core::domain::forward::{
    ClaimRoom, ForwardAttempt, ForwardPolicy, ForwardStatus, Order, ReplayOutcome, ReplayRequest,
    StoredFate,
};
use hushwatch_core::domain::forward_ops as ops;
use hushwatch_core::domain::svix::Severity;

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

/// The revocation types of the providers relay mode forwards (Clerk):
/// what the issue #44 step marks among the rows it finds, which were
/// stored before rows carried the mark.
macro_rules! legacy_revocations {
    () => {
        "event_type IN ('user.deleted', 'session.ended', 'session.removed', 'session.revoked',
            'organizationMembership.deleted', 'organization.deleted',
            'organizationInvitation.revoked', 'role.deleted', 'permission.deleted')"
    };
}

/// The columns issue #44 adds to `forwards` (SQLite rebuilds the table to
/// widen its `state` CHECK; PostgreSQL alters it): `order_key` (the
/// subject a row waits behind), `organization` (named on pages),
/// `revocation`, `held_reason`, `aad_v1` (sealed before the row binding);
/// the held, revocation and plaintext marks.
macro_rules! issue_44_tail {
    () => {
        "CREATE INDEX forwards_pending ON forwards (queue, id) WHERE state = 'pending';
    CREATE INDEX forwards_unordered ON forwards (next_attempt_at)
        WHERE state = 'pending' AND queue IS NULL;
    CREATE INDEX forwards_open ON forwards (stream, state) WHERE state <> 'delivered';
    CREATE INDEX forwards_window ON forwards (stream, received_at);
    CREATE INDEX forwards_prune ON forwards (prune_at) WHERE prune_at IS NOT NULL;
    CREATE INDEX forwards_revocations ON forwards (stream, received_at)
        WHERE revocation AND state <> 'delivered';
    ALTER TABLE forward_runs ADD COLUMN held_paged BOOLEAN NOT NULL DEFAULT FALSE;
    ALTER TABLE forward_runs ADD COLUMN revocation_paged BOOLEAN NOT NULL DEFAULT FALSE;
    CREATE TABLE forward_marks (
        name  TEXT PRIMARY KEY NOT NULL,
        value BIGINT NOT NULL
    );"
    };
}

/// Issue #45: what made a row when the provider did not send it (heal's
/// revocations built from a cross-check finding carry `crosscheck`).
pub(super) const ORIGIN: &str = "ALTER TABLE forwards ADD COLUMN origin TEXT;";

pub(super) const SUBJECTS_HELD_SQLITE: &str = concat!(
    "CREATE TABLE forwards_v2 (
        id              INTEGER PRIMARY KEY,
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
        body            BLOB NOT NULL,
        state           TEXT NOT NULL DEFAULT 'pending'
                        CHECK (state IN ('pending', 'delivered', 'dead', 'held')),
        attempts        BIGINT NOT NULL DEFAULT 0,
        next_attempt_at BIGINT NOT NULL,
        last_error      TEXT,
        last_status     BIGINT,
        claimed_by      TEXT,
        lease_until     BIGINT,
        claim_token     BIGINT NOT NULL DEFAULT 0,
        settled_at      BIGINT,
        prune_at        BIGINT,
        replays         BIGINT NOT NULL DEFAULT 0,
        order_key       TEXT,
        organization    TEXT,
        revocation      BOOLEAN NOT NULL DEFAULT FALSE,
        held_reason     TEXT,
        aad_v1          BOOLEAN NOT NULL DEFAULT FALSE
    );
    INSERT INTO forwards_v2 (id, stream, queue, delivery_id, event_type, subject, event_time,
        received_at, give_up_from, moves_clock, key_id, body, state, attempts, next_attempt_at,
        last_error, last_status, claimed_by, lease_until, claim_token, settled_at, prune_at,
        replays, order_key, revocation, aad_v1)
    SELECT id, stream, queue, delivery_id, event_type, subject, event_time,
        received_at, give_up_from, moves_clock, key_id, body, state, attempts, next_attempt_at,
        last_error, last_status, claimed_by, lease_until, claim_token, settled_at, prune_at,
        replays, subject, ",
    legacy_revocations!(),
    ", key_id IS NOT NULL FROM forwards;
    DROP TABLE forwards;
    ALTER TABLE forwards_v2 RENAME TO forwards;
    ",
    issue_44_tail!()
);

pub(crate) const SUBJECTS_HELD_PG: &str = concat!(
    "ALTER TABLE forwards DROP CONSTRAINT forwards_state_check;
    ALTER TABLE forwards ADD CONSTRAINT forwards_state_check
        CHECK (state IN ('pending', 'delivered', 'dead', 'held'));
    ALTER TABLE forwards ADD COLUMN order_key TEXT, ADD COLUMN organization TEXT,
        ADD COLUMN revocation BOOLEAN NOT NULL DEFAULT FALSE, ADD COLUMN held_reason TEXT,
        ADD COLUMN aad_v1 BOOLEAN NOT NULL DEFAULT FALSE;
    UPDATE forwards SET order_key = subject, aad_v1 = (key_id IS NOT NULL),
        revocation = (",
    legacy_revocations!(),
    ");
    DROP INDEX forwards_pending, forwards_unordered, forwards_open, forwards_window,
        forwards_prune;
    ",
    issue_44_tail!()
);

/// What the ingest transaction stores for a forwarding stream's delivery
/// (on its [`NewEvent`]; only verified bodies ever get one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardBody {
    pub sealed: Sealed,
    pub order: Order,
    /// A revocation type (`audit::classify`): what `critical_after` ages.
    pub revocation: bool,
    /// `clock = "delivered"` and the event type feeds the clock: the app's
    /// 2xx moves the stream's clock (the arrival did not).
    pub moves_clock: bool,
    /// What made this event when the provider did not send it
    /// (`crosscheck`: a revocation built from a cross-check finding); sent
    /// to the app as `Hushwatch-Origin`. `None` for a provider's delivery.
    pub origin: Option<String>,
    /// The stream is templated: the row is stored only while the stream
    /// still exists, so a `DELETE` cannot leave it behind (see
    /// [`insert`]).
    pub templated: bool,
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
    /// This attempt's number (1 for the first), counted by the claim.
    pub attempts: u32,
    pub body: Sealed,
    /// Sealed before the row binding (`store::seal`).
    pub legacy_aad: bool,
    /// Stored before any `encryption_key` was configured.
    pub before_any_key: bool,
    /// [`ForwardBody::origin`].
    pub origin: Option<String>,
}

impl ForwardClaim {
    /// Where its body sits, for `Sealer::open`.
    pub fn row(&self) -> super::seal::Row<'_> {
        super::seal::Row {
            stream: &self.stream,
            delivery_id: &self.delivery_id,
            legacy_aad: self.legacy_aad,
            before_any_key: self.before_any_key,
        }
    }
}

/// What a start or reload tells the store about the config
/// ([`align`]): each configured stream's order (`None`: no `[forward]`),
/// notifiers and the config path its pages print, and the key ids of
/// `[store] encryption_key`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ForwardAlignment {
    pub streams: Vec<StreamAlignment>,
    pub key_ids: Vec<String>,
    pub now: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StreamAlignment {
    pub stream: String,
    pub order: Option<Order>,
    pub notifiers: Vec<String>,
    pub config_path: String,
}

/// What [`align`] changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Aligned {
    /// Rows whose queue changed (an `ordered` change).
    pub requeued: u64,
    /// Held rows whose cause is gone, pending again and due now.
    pub released: u64,
    /// Pending rows of streams without `[forward]`, now held.
    pub held: u64,
}

/// A stream's `critical_after` check ([`escalate`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardEscalation {
    pub stream: String,
    pub critical_after: TimeDelta,
    pub now: DateTime<Utc>,
    pub notifiers: Vec<String>,
    pub config_path: String,
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
    /// Became held.
    pub held: bool,
}

/// The keyed alerts of relay pages: one failing and one dead-letter alert
/// per stream, each with one alert id shared by its firing and resolved
/// pages.
pub(super) fn failing_alert(stream: &str, severity: Severity) -> KeyedAlert<'_> {
    KeyedAlert {
        kind: AlertKind::ForwardFailing,
        family: "forward",
        key: stream,
        severity: severity.as_str(),
        source: "forward",
        endpoint_id: stream,
    }
}

pub(super) fn held_alert(stream: &str) -> KeyedAlert<'_> {
    KeyedAlert {
        kind: AlertKind::ForwardHeld,
        family: "forward-held",
        key: stream,
        severity: Severity::Critical.as_str(),
        source: "forward",
        endpoint_id: stream,
    }
}

pub(super) fn revocation_alert(stream: &str) -> KeyedAlert<'_> {
    KeyedAlert {
        kind: AlertKind::ForwardRevocationOverdue,
        family: "forward-revocation",
        key: stream,
        severity: Severity::Critical.as_str(),
        source: "forward",
        endpoint_id: stream,
    }
}

pub(super) fn dead_letter_alert(stream: &str) -> KeyedAlert<'_> {
    KeyedAlert {
        kind: AlertKind::ForwardDeadLetter,
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
             give_up_from, order_key, organization, revocation, origin)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $7, $7, $5, $11, $12, $13)";
    /// Registers an ordered stream's queue (its failure run row) at ingest,
    /// so a claim finds every queue without scanning the rows.
    pub const QUEUE: &str =
        "INSERT INTO forward_runs (stream) VALUES ($1) ON CONFLICT (stream) DO NOTHING";
    /// Ends every lease (a single process restarting: they are all its own
    /// dead process's, and waiting them out would delay delivery).
    pub const RELEASE: &str = "UPDATE forwards SET claimed_by = NULL, lease_until = NULL
         WHERE state = 'pending' AND lease_until IS NOT NULL";
    /// The oldest pending row of every queue, in one grouped read over the
    /// pending index (thousands of subject queues cost one statement, not
    /// one each).
    pub const HEADS: &str =
        "SELECT f.id, f.stream, f.next_attempt_at, f.lease_until FROM forwards f
         JOIN (SELECT min(id) AS id FROM forwards
               WHERE state = 'pending' AND queue IS NOT NULL GROUP BY queue) h
           ON f.id = h.id";
    /// The last row stored before a key was configured.
    pub const PLAIN_UNTIL: &str = "SELECT value FROM forward_marks WHERE name = 'plain_until'";
    /// Set at the first alignment with a key: the last row stored without
    /// one. Only unsealed rows count: ingest starts before the forwarder's
    /// first alignment, so rows already sealed under the key may precede
    /// the mark, and counting them would let one relabelled to plaintext
    /// pass as stored before any key (seen as a flaky relay test under
    /// load).
    pub const MARK_PLAIN_UNTIL: &str = "INSERT INTO forward_marks (name, value)
         SELECT 'plain_until', coalesce(max(id), 0) FROM forwards WHERE key_id IS NULL
         ON CONFLICT (name) DO NOTHING";
    pub const UNMARK_PLAIN_UNTIL: &str = "DELETE FROM forward_marks WHERE name = 'plain_until'";
    /// Due unordered rows, oldest first, at most `$2` of any one stream
    /// (the widest room: a stream at its `concurrency` must not fill the
    /// claim's `$3` with rows it cannot start, starving the others).
    pub const UNORDERED_DUE: &str = "SELECT id, stream FROM (
           SELECT id, stream, next_attempt_at,
                  row_number() OVER (PARTITION BY stream ORDER BY next_attempt_at, id) AS n
           FROM forwards
           WHERE queue IS NULL AND state = 'pending' AND next_attempt_at <= $1
             AND (lease_until IS NULL OR lease_until <= $1)) due
         WHERE n <= $2
         ORDER BY next_attempt_at, id LIMIT $3";
    /// When the next unordered row falls due (rows due but leased are
    /// found again by the worker's poll when their lease ends).
    pub const UNORDERED_NEXT: &str = "SELECT min(next_attempt_at) FROM forwards
         WHERE queue IS NULL AND state = 'pending' AND next_attempt_at > $1";
    /// The claim itself, guarded: it takes the row only if it is still
    /// pending, due and unleased when the row is locked, so of two
    /// replicas reading the same head exactly one gets it (the other's
    /// UPDATE waits for the row, then matches nothing). The same text on
    /// both engines, no SKIP LOCKED needed.
    /// The attempt is counted here, not at the settle, so a send cut off
    /// by a crash still used its number and the re-send carries the next.
    pub const CLAIM: &str = "UPDATE forwards
         SET claimed_by = $2, lease_until = $3, claim_token = claim_token + 1,
             attempts = attempts + 1
         WHERE id = $1 AND state = 'pending' AND next_attempt_at <= $4
           AND (lease_until IS NULL OR lease_until <= $4)
         RETURNING claim_token, stream, delivery_id, event_type, subject, event_time,
                   received_at, attempts, key_id, body, give_up_from, aad_v1, origin";
    pub const SETTLE: &str = "UPDATE forwards
         SET attempts = attempts - $9, claimed_by = NULL, lease_until = NULL,
             state = $3, next_attempt_at = $4, last_error = $5, last_status = $6,
             settled_at = $7, prune_at = $8, held_reason = $10
         WHERE id = $1 AND claim_token = $2 AND state = 'pending'";
    pub const RUN: &str = "SELECT failures, paged, failing_since, last_error, last_attempt_at,
             last_delivered_at, last_status, dead_paged, held_paged, revocation_paged
         FROM forward_runs WHERE stream = $1";
    pub const WRITE_RUN: &str = "INSERT INTO forward_runs (stream, failures, paged,
             failing_since, last_error, last_attempt_at, last_delivered_at, last_status, dead_paged,
             held_paged, revocation_paged)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         ON CONFLICT (stream) DO UPDATE SET failures = excluded.failures,
             paged = excluded.paged, failing_since = excluded.failing_since,
             last_error = excluded.last_error, last_attempt_at = excluded.last_attempt_at,
             last_delivered_at = excluded.last_delivered_at,
             last_status = excluded.last_status, dead_paged = excluded.dead_paged,
             held_paged = excluded.held_paged, revocation_paged = excluded.revocation_paged";
    // SQLite uses a partial index only when the query repeats its WHERE
    // term: the reads of open rows by state say `state <> 'delivered'`
    // (`forwards_open`), so none of them walks the delivered rows kept for
    // replay (`store::forward_admin::sql` does the same).
    pub const COUNT_STATE: &str = "SELECT count(*) FROM forwards
         WHERE stream = $1 AND state <> 'delivered' AND state = $2";
    pub const OLDEST_STATE: &str = "SELECT delivery_id, event_type, subject, organization,
             received_at
         FROM forwards WHERE stream = $1 AND state <> 'delivered' AND state = $2
         ORDER BY id LIMIT 1";
    /// Queues whose head failed (a subject, the stream, or an unordered
    /// row on its own), `$2` left out: what a delivery must see gone
    /// before the failing run ends, and what the page counts as blocked.
    pub const BLOCKED: &str = "SELECT count(DISTINCT coalesce(queue, delivery_id)) FROM forwards
         WHERE stream = $1 AND state <> 'delivered' AND state = 'pending'
           AND last_error IS NOT NULL AND id <> $2";
    pub const STUCK_REVOCATIONS: &str = "SELECT count(*) FROM forwards
         WHERE stream = $1 AND state <> 'delivered' AND revocation AND state IN ('held', 'dead')";
    pub const HELD_NAMED: &str = "SELECT delivery_id, event_type, subject, organization,
             received_at, held_reason, key_id
         FROM forwards WHERE stream = $1 AND state <> 'delivered' AND state = 'held'
         ORDER BY id LIMIT $2";
    /// The oldest revocation not yet delivered (pending, held or dead).
    pub const OLDEST_REVOCATION: &str = "SELECT delivery_id, event_type, subject, organization,
             received_at
         FROM forwards WHERE stream = $1 AND revocation AND state <> 'delivered'
         ORDER BY received_at, id LIMIT 1";
    pub const REVOCATIONS: &str = "SELECT stream, min(received_at) FROM forwards
         WHERE revocation AND state <> 'delivered' GROUP BY stream";
    pub const SET_HELD_PAGED: &str = "UPDATE forward_runs SET held_paged = $2 WHERE stream = $1";
    /// The held page's marks (`forward_marks`): one per held row a page of
    /// the current episode covered, named `$2` (the stream's prefix,
    /// `domain::forward_ops::held_mark`) and the row id, so a follow-up
    /// names exactly the rows held since, in whatever order they were held.
    pub const MARK_HELD: &str = "INSERT INTO forward_marks (name, value)
         SELECT CAST($2 AS TEXT) || CAST(id AS TEXT), id FROM forwards
         WHERE stream = $1 AND state <> 'delivered' AND state = 'held'
         ON CONFLICT (name) DO NOTHING";
    pub const HELD_MARKS: &str = "SELECT count(*) FROM forward_marks
         WHERE substr(name, 1, length(CAST($1 AS TEXT))) = CAST($1 AS TEXT)";
    pub const UNMARK_HELD: &str = "DELETE FROM forward_marks
         WHERE substr(name, 1, length(CAST($1 AS TEXT))) = CAST($1 AS TEXT)";
    pub const UNMARKED_HELD: &str = "SELECT count(*) FROM forwards f
         WHERE f.stream = $1 AND f.state <> 'delivered' AND f.state = 'held'
           AND NOT EXISTS (SELECT 1 FROM forward_marks m
                           WHERE m.name = CAST($2 AS TEXT) || CAST(f.id AS TEXT))";
    pub const UNMARKED_HELD_NAMED: &str = "SELECT f.delivery_id, f.event_type, f.subject,
             f.organization, f.received_at, f.held_reason, f.key_id
         FROM forwards f
         WHERE f.stream = $1 AND f.state <> 'delivered' AND f.state = 'held'
           AND NOT EXISTS (SELECT 1 FROM forward_marks m
                           WHERE m.name = CAST($2 AS TEXT) || CAST(f.id AS TEXT))
         ORDER BY f.id LIMIT $3";
    pub const SET_REVOCATION_PAGED: &str =
        "UPDATE forward_runs SET revocation_paged = $2 WHERE stream = $1";
    /// `ordered` as configured now, applied to the rows still waiting.
    pub const REQUEUE_ORDER: &str = "UPDATE forwards SET queue = CASE
             WHEN $2 = 'none' THEN NULL
             WHEN $2 = 'subject' AND order_key IS NOT NULL THEN stream || $3 || order_key
             ELSE stream END
         WHERE stream = $1 AND state IN ('pending', 'held')
           AND queue IS DISTINCT FROM (CASE
             WHEN $2 = 'none' THEN NULL
             WHEN $2 = 'subject' AND order_key IS NOT NULL THEN stream || $3 || order_key
             ELSE stream END)";
    /// Held rows whose cause is gone go back to pending, due now.
    pub const RELEASE_NO_FORWARD: &str = "UPDATE forwards
         SET state = 'pending', held_reason = NULL, last_error = NULL, next_attempt_at = $2
         WHERE stream = $1 AND state <> 'delivered' AND state = 'held'
           AND held_reason = 'no_forward'";
    pub const RELEASE_KEY: &str = "UPDATE forwards
         SET state = 'pending', held_reason = NULL, last_error = NULL, next_attempt_at = $2
         WHERE stream = $1 AND state <> 'delivered' AND state = 'held'
           AND held_reason = 'unknown_key' AND key_id = $3";
    /// Streams with rows waiting, to hold those of streams that no longer
    /// forward.
    pub const PENDING_STREAMS: &str =
        "SELECT DISTINCT stream FROM forwards WHERE state <> 'delivered' AND state = 'pending'
         ORDER BY stream";
    /// A row in flight keeps its lease: its settle decides.
    pub const HOLD_NO_FORWARD: &str = "UPDATE forwards
         SET state = 'held', held_reason = 'no_forward'
         WHERE stream = $1 AND state <> 'delivered' AND state = 'pending'
           AND (lease_until IS NULL OR lease_until <= $2)";
    /// Open rows only: delivered ones (kept for replay) are not counted.
    pub const SUMMARY: &str = "SELECT stream, state, count(*), min(received_at)
         FROM forwards WHERE state <> 'delivered' GROUP BY stream, state ORDER BY stream";
    /// When each stream next tries without anyone acting: the earliest due
    /// time of a row that can be claimed (a queue's head or an unordered
    /// row), not of rows waiting behind a head.
    pub const NEXT_ATTEMPTS: &str = "SELECT stream, min(next_attempt_at) FROM forwards
         WHERE state = 'pending' AND (queue IS NULL OR id IN (
             SELECT min(id) FROM forwards
             WHERE state = 'pending' AND queue IS NOT NULL GROUP BY queue))
         GROUP BY stream";
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
    bool,
    Option<String>,
);

pub(super) fn claim_of(id: i64, c: ClaimColumns, plain_until: Option<i64>) -> ForwardClaim {
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
        legacy_aad: c.11,
        before_any_key: plain_until.is_some_and(|last| id <= last),
        origin: c.12,
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
            held_paged: r.cell(8)?,
            revocation_paged: r.cell(9)?,
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
    revocations: Vec<(String, Option<i64>)>,
    next_attempts: Vec<(String, Option<i64>)>,
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
            "held" => row.held = n,
            _ => {}
        }
    }
    for (stream, oldest) in revocations {
        entry(&mut out, stream).oldest_revocation_at = opt_time(oldest);
    }
    for (stream, next) in next_attempts {
        entry(&mut out, stream).next_attempt_at = opt_time(next);
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
    if f.templated {
        templated_stream_stands(db, &event.stream).await?;
    }
    let (subject, organization) = decide::subject_of(&event.subject_ids);
    let queue = decide::queue_of(f.order, &event.stream, subject.as_deref());
    db.exec(
        sql::INSERT,
        &[
            &event.stream,
            &queue,
            &event.delivery_id.as_deref().unwrap_or_default(),
            &event.event_type,
            &subject,
            &event.event_time.map(millis),
            &millis(event.received_at),
            &f.moves_clock,
            &f.sealed.key_id,
            &f.sealed.bytes,
            &organization,
            &f.revocation,
            &f.origin,
        ],
    )
    .await?;
    db.exec(sql::QUEUE, &[&event.stream]).await?;
    Ok(())
}

/// Refuses a relay row for a templated stream that a `DELETE` removed
/// after the request found it. Otherwise the row would wait, undelivered
/// and unpaged, under a stream no one watches; refused, the sender retries
/// and its retry creates the stream anew. On PostgreSQL the stream's row
/// is share-locked to the commit, so `forward_admin::remove_stream`
/// (which locks it for update first) counts every row stored before it
/// and none is stored after it; SQLite's one writer orders the two.
async fn templated_stream_stands<D: Db>(db: &D, stream: &str) -> Result<(), StoreError> {
    let lock = if D::POSTGRES { " FOR SHARE" } else { "" };
    let found: Option<(String,)> = db
        .opt(
            &format!("SELECT name FROM templated_streams WHERE name = $1{lock}"),
            &[&stream],
        )
        .await?;
    match found {
        Some(_) => Ok(()),
        None => Err(StoreError::Gone(format!(
            "templated stream {stream} was deleted while this event was being stored; the sender's retry creates it again"
        ))),
    }
}

pub(super) async fn claim<D: Db>(
    db: &D,
    replica: &str,
    now: DateTime<Utc>,
    lease: TimeDelta,
    room: &ClaimRoom,
) -> Result<(Vec<ForwardClaim>, Option<DateTime<Utc>>), StoreError> {
    let heads: Vec<(i64, String, i64, Option<i64>)> = db.rows(sql::HEADS, &[]).await?;
    let heads: Vec<Head> = heads
        .into_iter()
        .map(|(id, stream, next_attempt_at, lease_until)| Head {
            id,
            stream,
            next_attempt_at,
            lease_until,
        })
        .collect();
    let total = i64::try_from(room.unordered_read()).unwrap_or(i64::MAX);
    let widest = i64::try_from(room.widest()).unwrap_or(i64::MAX);
    let unordered: Vec<(i64, String)> = db
        .rows(sql::UNORDERED_DUE, &[&millis(now), &widest, &total])
        .await?;
    let (unordered_next,): (Option<i64>,) = db.one(sql::UNORDERED_NEXT, &[&millis(now)]).await?;
    let (ids, next) = decide::plan_claim(&heads, &unordered, unordered_next, millis(now), room);
    let plain_until = if ids.is_empty() {
        None
    } else {
        db.opt::<(i64,)>(sql::PLAIN_UNTIL, &[]).await?.map(|(v,)| v)
    };
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
        claims.extend(claim.map(|c| claim_of(id, c, plain_until)));
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
            &r.held_paged,
            &r.revocation_paged,
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
    let row: Option<OldestColumns> = db.opt(sql::OLDEST_STATE, &[&stream, &state]).await?;
    row.map(oldest_of).transpose()
}

/// delivery_id, event_type, subject, organization, received_at.
type OldestColumns = (String, String, Option<String>, Option<String>, i64);

/// [`OldestColumns`], then held_reason and key_id.
type HeldColumns = (
    String,
    String,
    Option<String>,
    Option<String>,
    i64,
    Option<String>,
    Option<String>,
);

/// A row as pages name it: the subject, and the organization it is about
/// when the event names one besides (a membership removal names its user
/// in that organization, not the membership id).
fn oldest_of(
    (delivery_id, event_type, subject, organization, at): OldestColumns,
) -> Result<Oldest, StoreError> {
    let subject = match (subject, organization) {
        (Some(s), Some(o)) => Some(format!("{s} (organization {o})")),
        (s, o) => s.or(o),
    };
    Ok(Oldest {
        delivery_id,
        event_type,
        subject,
        received_at: stored_time(at)?,
    })
}

async fn blocked<D: Db>(db: &D, stream: &str, except: i64) -> Result<u64, StoreError> {
    let (n,): (i64,) = db.one(sql::BLOCKED, &[&stream, &except]).await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

fn held_events(rows: Vec<HeldColumns>) -> Result<Vec<HeldEvent>, StoreError> {
    let mut named = Vec::with_capacity(rows.len());
    for (id, ty, subject, org, received, reason, key_id) in rows {
        named.push(HeldEvent {
            event: oldest_of((id, ty, subject, org, received))?,
            hold: decide::hold_of(reason.as_deref().unwrap_or_default(), key_id.as_deref()),
        });
    }
    Ok(named)
}

/// Fires or resolves the stream's held alert when its count says so; while
/// it fires, events held after its page are named in a follow-up page
/// (each row a page covered is marked, so no event is paged twice).
pub(super) async fn held_check<D: Db>(
    db: &D,
    stream: &str,
    at: DateTime<Utc>,
    notifiers: &[String],
    config_path: &str,
) -> Result<(), StoreError> {
    let paged = run(db, stream).await?.held_paged;
    let held = count_state(db, stream, "held").await?;
    let cmd = Commands::new(config_path, stream);
    let mark = ops::held_mark(stream);
    let Some(firing) = decide::held_change(held, paged) else {
        if paged && held > 0 {
            held_follow_up(db, stream, held, at, notifiers, &cmd).await?;
        }
        return Ok(());
    };
    let rows: Vec<HeldColumns> = db
        .rows(sql::HELD_NAMED, &[&stream, &(decide::HELD_NAMED as i64)])
        .await?;
    let named = held_events(rows)?;
    let reason = decide::held_summary(stream, held, &named, &cmd);
    outbox::queue_keyed_pages(
        db,
        &page(stream, firing, at, reason, notifiers),
        at,
        &held_alert(stream),
    )
    .await?;
    // The run row exists for every stream with rows (`sql::QUEUE`).
    db.exec(sql::QUEUE, &[&stream]).await?;
    db.exec(sql::SET_HELD_PAGED, &[&stream, &firing]).await?;
    db.exec(sql::UNMARK_HELD, &[&mark]).await?;
    if firing {
        db.exec(sql::MARK_HELD, &[&stream, &mark]).await?;
    }
    Ok(())
}

/// The follow-up of a firing held page: the events held since it.
async fn held_follow_up<D: Db>(
    db: &D,
    stream: &str,
    held: u64,
    at: DateTime<Utc>,
    notifiers: &[String],
    cmd: &Commands,
) -> Result<(), StoreError> {
    let mark = ops::held_mark(stream);
    let (marks,): (i64,) = db.one(sql::HELD_MARKS, &[&mark]).await?;
    let (unmarked,): (i64,) = db.one(sql::UNMARKED_HELD, &[&stream, &mark]).await?;
    let new = u64::try_from(unmarked).unwrap_or(0);
    match ops::held_news(marks > 0, new) {
        ops::HeldNews::Nothing => return Ok(()),
        ops::HeldNews::Record => {
            db.exec(sql::MARK_HELD, &[&stream, &mark]).await?;
            return Ok(());
        }
        ops::HeldNews::Page => {}
    }
    let rows: Vec<HeldColumns> = db
        .rows(
            sql::UNMARKED_HELD_NAMED,
            &[&stream, &mark, &(decide::HELD_NAMED as i64)],
        )
        .await?;
    let named = held_events(rows)?;
    let reason = ops::held_follow_up_summary(
        stream,
        held,
        &decide::held_summary(stream, new, &named, cmd),
    );
    outbox::queue_keyed_pages(
        db,
        &page(stream, true, at, reason, notifiers),
        at,
        &held_alert(stream),
    )
    .await?;
    db.exec(sql::MARK_HELD, &[&stream, &mark]).await?;
    Ok(())
}

/// Fires or resolves the stream's dead-letter alert when its count says so.
pub(super) async fn dead_letter_check<D: Db>(
    db: &D,
    stream: &str,
    at: DateTime<Utc>,
    notifiers: &[String],
    config_path: &str,
) -> Result<(), StoreError> {
    let paged = run(db, stream).await?.dead_paged;
    let dead = count_state(db, stream, "dead").await?;
    let Some(firing) = decide::dead_letter_change(dead, paged) else {
        return Ok(());
    };
    let oldest = oldest_state(db, stream, "dead").await?;
    let reason = decide::dead_letter_reason(
        stream,
        firing,
        dead,
        oldest.as_ref(),
        &Commands::new(config_path, stream),
    );
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
    // Only a delivery can end the run, and only when nothing else is stuck.
    let still_stuck = match &s.attempt {
        ForwardAttempt::Delivered { .. } if before.failures > 0 => {
            let (revocations,): (i64,) = db.one(sql::STUCK_REVOCATIONS, &[&c.stream]).await?;
            revocations > 0 || blocked(db, &c.stream, c.id).await? > 0
        }
        _ => false,
    };
    let plan = decide::plan_settle(
        &s.attempt,
        c.attempts,
        c.give_up_from,
        s.at,
        &s.policy,
        before,
        still_stuck,
    );
    let held_reason = match &s.attempt {
        ForwardAttempt::Held(h) => Some(h.code()),
        _ => None,
    };
    let (error, status) = match &s.attempt {
        // The attempt's own error and status.
        ForwardAttempt::Failed { error, status } => (Some(error.clone()), status.map(i64::from)),
        ForwardAttempt::Held(h) => (Some(h.words()), None),
        ForwardAttempt::Delivered { status } => (None, Some(i64::from(*status))),
    };
    let changed = db
        .exec(
            sql::SETTLE,
            &[
                &c.id,
                &c.token,
                &plan.state,
                &millis(plan.next_attempt_at),
                &error,
                &status,
                &plan.settled_at.map(millis),
                &plan.prune_at.map(millis),
                &i64::from(plan.uncount),
                &held_reason,
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
        let blocked = blocked(db, &c.stream, 0).await?;
        let reason = decide::failing_reason(
            &c.stream,
            &plan,
            s.at,
            pending,
            oldest.as_ref(),
            &s.policy,
            blocked,
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
        dead_letter_check(
            db,
            &c.stream,
            s.at,
            &s.policy.notifiers,
            &s.policy.config_path,
        )
        .await?;
    }
    if plan.state == "held" {
        held_check(
            db,
            &c.stream,
            s.at,
            &s.policy.notifiers,
            &s.policy.config_path,
        )
        .await?;
    }
    Ok(ForwardSettled {
        settled: true,
        moved,
        dead: plan.state == "dead",
        held: plan.state == "held",
    })
}

pub(super) async fn status<D: Db>(db: &D) -> Result<Vec<ForwardStatus>, StoreError> {
    let counts = db.rows(sql::SUMMARY, &[]).await?;
    let runs = db.rows(sql::RUNS, &[]).await?;
    let revocations = db.rows(sql::REVOCATIONS, &[]).await?;
    let next = db.rows(sql::NEXT_ATTEMPTS, &[]).await?;
    let mut rows = status_rows(counts, runs, revocations, next);
    // Named only where something waits: one index seek per such stream.
    for row in rows.iter_mut().filter(|r| r.pending > 0) {
        row.oldest_pending = oldest_state(db, &row.stream, "pending").await?;
    }
    Ok(rows)
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
        dead_letter_check(db, &stream, now, &to, decide::DEFAULT_CONFIG_PATH).await?;
    }
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// Applies the config (at start and after each reload) to the rows it
/// governs: the `queue` of pending and held rows follows each stream's
/// `ordered`; rows held for a cause that is gone (the stream forwards
/// again, the key is configured again) are pending and due now; pending
/// rows of streams that no longer forward (or are gone from the config)
/// are held; the plaintext mark is set when a key is configured and
/// dropped while none is; each configured stream's held alert follows its
/// count.
pub(super) async fn align<D: Db>(db: &D, a: &ForwardAlignment) -> Result<Aligned, StoreError> {
    let now = millis(a.now);
    let mut out = Aligned::default();
    if a.key_ids.is_empty() {
        db.exec(sql::UNMARK_PLAIN_UNTIL, &[]).await?;
    } else {
        db.exec(sql::MARK_PLAIN_UNTIL, &[]).await?;
    }
    for st in &a.streams {
        let Some(order) = st.order else { continue };
        out.released += db
            .exec(sql::RELEASE_NO_FORWARD, &[&st.stream, &now])
            .await?;
        for key in &a.key_ids {
            out.released += db.exec(sql::RELEASE_KEY, &[&st.stream, &now, key]).await?;
        }
        out.requeued += db
            .exec(
                sql::REQUEUE_ORDER,
                &[&st.stream, &order.as_str(), &decide::QUEUE_SEPARATOR],
            )
            .await?;
    }
    let pending: Vec<(String,)> = db.rows(sql::PENDING_STREAMS, &[]).await?;
    for (stream,) in pending {
        let forwards = a
            .streams
            .iter()
            .any(|st| st.stream == stream && st.order.is_some());
        if !forwards {
            out.held += db.exec(sql::HOLD_NO_FORWARD, &[&stream, &now]).await?;
        }
    }
    for st in &a.streams {
        held_check(db, &st.stream, a.now, &st.notifiers, &st.config_path).await?;
    }
    Ok(out)
}

/// `critical_after`: pages critical once a revocation of the stream has
/// waited that long undelivered (pending, held or dead), and resolves when
/// none is left undelivered. Whether it fired or resolved.
pub(super) async fn escalate<D: Db>(
    db: &D,
    e: &ForwardEscalation,
) -> Result<Option<bool>, StoreError> {
    let oldest: Option<OldestColumns> = db.opt(sql::OLDEST_REVOCATION, &[&e.stream]).await?;
    let oldest = oldest.map(oldest_of).transpose()?;
    let overdue = decide::revocation_overdue(
        oldest.as_ref().map(|o| o.received_at),
        e.critical_after,
        e.now,
    );
    let before = run(db, &e.stream).await?;
    let ended = end_quiet_run(db, e, &before).await?;
    let Some(firing) =
        decide::revocation_change(overdue, oldest.is_some(), before.revocation_paged)
    else {
        return Ok(ended.then_some(false));
    };
    let reason = decide::revocation_summary(
        &e.stream,
        oldest.as_ref().filter(|_| firing),
        e.critical_after,
        &Commands::new(&e.config_path, &e.stream),
    );
    outbox::queue_keyed_pages(
        db,
        &page(&e.stream, firing, e.now, reason, &e.notifiers),
        e.now,
        &revocation_alert(&e.stream),
    )
    .await?;
    db.exec(sql::QUEUE, &[&e.stream]).await?;
    db.exec(sql::SET_REVOCATION_PAGED, &[&e.stream, &firing])
        .await?;
    Ok(Some(firing))
}

/// Ends a failing run that no delivery will end (its refused events became
/// dead letters or were skipped): when nothing pending has failed and no
/// revocation is held or dead, the run is over and a paged one resolves.
/// Whether it resolved a page.
async fn end_quiet_run<D: Db>(
    db: &D,
    e: &ForwardEscalation,
    run: &Run,
) -> Result<bool, StoreError> {
    if run.failures == 0 {
        return Ok(false);
    }
    let (revocations,): (i64,) = db.one(sql::STUCK_REVOCATIONS, &[&e.stream]).await?;
    let blocked = blocked(db, &e.stream, 0).await?;
    if !decide::run_ends_quietly(
        run.failures,
        blocked,
        u64::try_from(revocations).unwrap_or(0),
    ) {
        return Ok(false);
    }
    let paged = run.paged > 0;
    if paged {
        outbox::queue_keyed_pages(
            db,
            &page(
                &e.stream,
                false,
                e.now,
                decide::run_ended_summary(run.failures),
                &e.notifiers,
            ),
            e.now,
            &failing_alert(&e.stream, Severity::Warning),
        )
        .await?;
    }
    write_run(
        db,
        &e.stream,
        &Run {
            failures: 0,
            paged: 0,
            failing_since: None,
            last_error: None,
            ..run.clone()
        },
    )
    .await?;
    Ok(paged)
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
