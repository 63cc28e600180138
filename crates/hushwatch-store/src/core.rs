//! The store's core rows, written once over [`Db`] for both engines:
//! streams and their clocks, an event's record (dedup, audit entry, relay
//! row, revocation index) and alert transitions. The pages they queue are
//! written by `store::outbox`, the audit chain's rows by `store::audit`.
//!
//! Each function runs inside the caller's transaction: the SQLite writer's
//! group commit (a savepoint per job only when a job of the batch failed,
//! `store::writer`), or one PostgreSQL transaction (READ COMMITTED). Where SQLite relies on its single writer, PostgreSQL takes a
//! row lock ([`Db::ROW_LOCK`]):
//! - the audit chain's head row (`audit_head`) is locked first by every
//!   transaction that appends (`audit::lock_head`), so one chain grows in
//!   one order, and lock order is always head → stream row;
//! - a transition locks its stream row and re-reads the stored last
//!   arrival under that lock: the compare-and-set;
//! - dedup is the primary key of `seen_deliveries`: a second transaction
//!   inserting the same hash waits for the first and then inserts nothing.
//!
//! The few statements the dialects spell differently are chosen by
//! [`Db::POSTGRES`], each with a comment.

use chrono::{DateTime, Utc};

use super::audit::append_audit;
use super::db::{Cells, Columns, Db};
use super::ops::{count, delivery_hash, legacy_delivery_hash, millis};
use super::outbox::insert_silence_page;
use super::subscriptions::SubscriptionUpdate;
use super::{
    AlertState, EventOutcome, NewEvent, StoreError, StreamRow, TemplatedOutcome, Transition,
    TransitionOutcome,
};

pub(super) const STREAM_COLUMNS: &str = "name, watch_started_at, last_arrival_at, \
     newest_event_at, last_event_type, last_event_id, alert_state, firing_since, cleared_at";

pub(super) fn state_str(s: &AlertState) -> &'static str {
    match s {
        AlertState::Ok => "ok",
        AlertState::Firing => "firing",
    }
}

pub(super) fn alert_state(s: &str) -> Result<AlertState, StoreError> {
    match s {
        "ok" => Ok(AlertState::Ok),
        "firing" => Ok(AlertState::Firing),
        other => Err(StoreError::Sql(format!("unknown alert state {other:?}"))),
    }
}

/// [`STREAM_COLUMNS`], in order.
impl Columns for StreamRow {
    fn read(r: &impl Cells) -> Result<Self, StoreError> {
        Ok(StreamRow {
            name: r.cell(0)?,
            watch_started_at: r.time(1)?,
            last_arrival_at: r.opt_time(2)?,
            newest_event_at: r.opt_time(3)?,
            last_event_type: r.cell(4)?,
            last_event_id: r.cell(5)?,
            alert_state: alert_state(&r.cell::<String>(6)?)?,
            firing_since: r.opt_time(7)?,
            cleared_at: r.opt_time(8)?,
        })
    }
}

/// The database's random salt, behind page keys and alert ids.
pub(super) async fn salt<D: Db>(db: &D) -> Result<String, StoreError> {
    let (salt,): (String,) = db
        .one("SELECT value FROM meta WHERE key = 'salt'", &[])
        .await?;
    Ok(salt)
}

/// Creates the stream row if missing; an existing row (and so its
/// watch_started_at) is never modified.
async fn ensure_stream<D: Db>(db: &D, name: &str, now: DateTime<Utc>) -> Result<(), StoreError> {
    db.exec(
        "INSERT INTO streams (name, watch_started_at) VALUES ($1, $2)
         ON CONFLICT (name) DO NOTHING",
        &[&name, &millis(now)],
    )
    .await?;
    Ok(())
}

pub(super) async fn stream_row<D: Db>(db: &D, name: &str) -> Result<Option<StreamRow>, StoreError> {
    db.opt(
        &format!("SELECT {STREAM_COLUMNS} FROM streams WHERE name = $1"),
        &[&name],
    )
    .await
}

/// [`stream_row`], locked until the transaction ends (PostgreSQL).
pub(super) async fn stream_row_locked<D: Db>(
    db: &D,
    name: &str,
) -> Result<Option<StreamRow>, StoreError> {
    db.opt(
        &format!(
            "SELECT {STREAM_COLUMNS} FROM streams WHERE name = $1{}",
            D::ROW_LOCK
        ),
        &[&name],
    )
    .await
}

fn vanished(name: &str) -> StoreError {
    StoreError::Sql(format!("stream {name:?} has no row"))
}

pub(super) async fn watch_streams<D: Db>(
    db: &D,
    names: &[String],
    now: DateTime<Utc>,
) -> Result<Vec<StreamRow>, StoreError> {
    for name in names {
        ensure_stream(db, name, now).await?;
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        out.push(stream_row(db, name).await?.ok_or_else(|| vanished(name))?);
    }
    Ok(out)
}

/// One delivery, in the caller's transaction: its events in order, what it
/// said about provider subscriptions, and (`with_rows`) the stream rows it
/// moved, as they now stand. On PostgreSQL the caller holds the audit
/// head's lock when any event is chained ([`lock_audit_head`]), taken once
/// per transaction and outside any savepoint (`pg::batch`); SQLite's one
/// writer needs none.
pub(super) async fn record_delivery<D: Db>(
    db: &D,
    events: &[NewEvent],
    update: Option<&SubscriptionUpdate>,
    now: DateTime<Utc>,
    with_rows: bool,
) -> Result<(Vec<EventOutcome>, Vec<StreamRow>), StoreError> {
    let mut outcomes = Vec::with_capacity(events.len());
    for event in events {
        outcomes.push(record_event(db, event).await?);
    }
    if let Some(update) = update {
        super::subscriptions::record(db, update, now).await?;
    }
    let mut rows = Vec::new();
    if with_rows {
        for name in super::moved_streams(events, &outcomes) {
            rows.extend(stream_row(db, name).await?);
        }
    }
    Ok((outcomes, rows))
}

/// Dedups on the delivery hash (earlier events of the same batch count, as
/// they are already inserted), stores the event, then moves the clock. The
/// caller holds the audit head lock when the event is chained.
pub(super) async fn record_event<D: Db>(
    db: &D,
    event: &NewEvent,
) -> Result<EventOutcome, StoreError> {
    // The caller normally watched the stream already; if not, its watch
    // starts with this event rather than the event being refused.
    ensure_stream(db, &event.stream, event.received_at).await?;
    let hash = event
        .delivery_id
        .as_deref()
        .map(|id| delivery_hash(event.channel, &event.stream, id));
    if let (Some(id), Some(hash)) = (event.delivery_id.as_deref(), &hash) {
        if seen_before_v6(db, &event.stream, id).await?
            || !remember_delivery(db, hash, event).await?
        {
            return Ok(EventOutcome::Duplicate);
        }
    }
    // With the audit log on, its chained entry is the event's record; the
    // plain `events` row would only duplicate it (and cost a third of the
    // ingest throughput in writes), so exactly one of the two is written.
    if event.audit {
        append_audit(db, event).await?;
    } else {
        insert_event(db, event, hash.as_deref()).await?;
    }
    super::revocations::note(db, event).await?;
    super::forward::insert(db, event).await?;
    if event.feeds_clock {
        advance_clock(db, event).await?;
    }
    Ok(EventOutcome::Accepted)
}

/// A delivery id recorded before v6 under the old, channel-blind key that
/// the migration could not attribute (see `schema`, v6). Treated as a
/// duplicate in every channel: that keeps replay protection for ids seen
/// before the upgrade, at the cost of the old cross-channel shadowing for
/// those ids only, until pruning drops them (7 days).
async fn seen_before_v6<D: Db>(db: &D, stream: &str, id: &str) -> Result<bool, StoreError> {
    let found: Option<(i32,)> = db
        .opt(
            "SELECT 1 FROM seen_deliveries WHERE hash = $1 AND channel = 'legacy'",
            &[&legacy_delivery_hash(stream, id)],
        )
        .await?;
    Ok(found.is_some())
}

/// False when the hash was already known, i.e. a duplicate.
async fn remember_delivery<D: Db>(
    db: &D,
    hash: &str,
    event: &NewEvent,
) -> Result<bool, StoreError> {
    let inserted = db
        .exec(
            "INSERT INTO seen_deliveries (hash, stream, seen_at, channel) VALUES ($1, $2, $3, $4)
             ON CONFLICT (hash) DO NOTHING",
            &[
                &hash,
                &event.stream,
                &millis(event.received_at),
                &event.channel,
            ],
        )
        .await?;
    Ok(inserted == 1)
}

async fn insert_event<D: Db>(
    db: &D,
    event: &NewEvent,
    hash: Option<&str>,
) -> Result<(), StoreError> {
    db.exec(
        "INSERT INTO events (stream, delivery_hash, event_type, event_time, received_at,
                             feeds_clock, body_sha256)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            &event.stream,
            &hash,
            &event.event_type,
            &event.event_time.map(millis),
            &millis(event.received_at),
            &event.feeds_clock,
            &event.body_sha256.as_ref().map(|d| d.as_slice()),
        ],
    )
    .await?;
    Ok(())
}

/// Moves the stream's clock forward only. Both engines evaluate every SET
/// expression against the row as it was before the UPDATE, so the "latest
/// arrival" test uses the old last_arrival_at in all three places. `>=`
/// lets an event with the same received_at as the previous one win,
/// matching arrival order within a batch; the maximum keeps the arrival
/// moving forward whatever order replicas commit in.
pub(super) async fn advance_clock<D: Db>(db: &D, event: &NewEvent) -> Result<(), StoreError> {
    // The maximum is spelled as a CASE: SQLite's scalar max() and
    // PostgreSQL's GREATEST are not shared, a comparison is. The cast types
    // the one parameter PostgreSQL would otherwise see compared with NULL
    // only.
    const ADVANCE: &str = "UPDATE streams SET
             last_event_type = CASE WHEN last_arrival_at IS NULL OR $2 >= last_arrival_at
                                    THEN $3 ELSE last_event_type END,
             last_event_id   = CASE WHEN last_arrival_at IS NULL OR $2 >= last_arrival_at
                                    THEN $4 ELSE last_event_id END,
             last_arrival_at = CASE WHEN last_arrival_at IS NULL OR $2 > last_arrival_at
                                    THEN $2 ELSE last_arrival_at END,
             newest_event_at = CASE WHEN CAST($5 AS BIGINT) IS NULL THEN newest_event_at
                                    WHEN newest_event_at IS NULL OR $5 > newest_event_at
                                    THEN $5 ELSE newest_event_at END
         WHERE name = $1";
    db.exec(
        ADVANCE,
        &[
            &event.stream,
            &millis(event.received_at),
            &event.event_type,
            &event.delivery_id,
            &event.event_time.map(millis),
        ],
    )
    .await?;
    if D::POSTGRES {
        // Delivered to every LISTENing replica at COMMIT (and dropped on
        // rollback), so other replicas' timers learn of this arrival. (One
        // SQLite process is its own feed.)
        db.exec(
            "SELECT pg_notify($1, $2)",
            &[&super::pg::replica_channel(), &event.stream],
        )
        .await?;
    }
    Ok(())
}

fn unknown_stream(stream: &str) -> StoreError {
    StoreError::Sql(format!("alert transition for unknown stream {stream:?}"))
}

#[cfg(any(test, feature = "test-support"))]
pub(super) async fn record_transition<D: Db>(
    db: &D,
    t: &Transition,
    created_at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let current = stream_row_locked(db, &t.stream)
        .await?
        .ok_or_else(|| unknown_stream(&t.stream))?;
    apply_transition(db, &current, t, created_at).await
}

/// The compare-and-set: under the stream row's lock (PostgreSQL) or in the
/// writer's transaction (SQLite), a fire commits only if the stored
/// silence still starts where the evaluation's did. An event committed
/// before is seen here; one committing after waits for this transaction.
/// Compared in milliseconds, the stored resolution.
pub(super) async fn record_transition_if_silent<D: Db>(
    db: &D,
    t: &Transition,
    silent_since: DateTime<Utc>,
    created_at: DateTime<Utc>,
) -> Result<TransitionOutcome, StoreError> {
    let row = stream_row_locked(db, &t.stream)
        .await?
        .ok_or_else(|| unknown_stream(&t.stream))?;
    if t.to == AlertState::Firing {
        let stored = row.last_arrival_at.unwrap_or(row.watch_started_at);
        if millis(stored) > millis(silent_since) {
            return Ok(TransitionOutcome::Stale(row));
        }
    }
    Ok(if apply_transition(db, &row, t, created_at).await? {
        TransitionOutcome::Recorded
    } else {
        TransitionOutcome::Unchanged
    })
}

/// The transition itself; the stream row is locked by the caller. Firing
/// starts a new episode; Ok closes it but keeps firing_since so the row
/// still tells how long the last episode lasted.
async fn apply_transition<D: Db>(
    db: &D,
    current: &StreamRow,
    t: &Transition,
    created_at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    if current.alert_state == t.to {
        return Ok(false);
    }
    // Whoever was paged by an escalation step also hears that it resolved.
    let escalated: Vec<(String,)> = if t.to == AlertState::Ok {
        db.rows(
            "SELECT DISTINCT o.notifier FROM outbox o JOIN streams s ON s.name = o.stream
             WHERE o.stream = $1 AND o.page_kind = 'escalation' AND o.alert_kind = 'silence'
               AND o.started_at = s.firing_since
             ORDER BY o.notifier",
            &[&t.stream],
        )
        .await?
    } else {
        Vec::new()
    };
    let sql = match t.to {
        AlertState::Firing => {
            "UPDATE streams SET alert_state = $2, firing_since = $3, cleared_at = NULL
             WHERE name = $1"
        }
        AlertState::Ok => "UPDATE streams SET alert_state = $2, cleared_at = $3 WHERE name = $1",
    };
    db.exec(sql, &[&t.stream, &state_str(&t.to), &millis(t.at)])
        .await?;
    // An operator silence holds the firing page (and drops the resolve of
    // a held one): the state above stays truthful either way.
    if super::silences::suppress_transition(db, t).await? {
        return Ok(true);
    }
    for notifier in &t.notifiers {
        insert_silence_page(db, t, notifier, created_at).await?;
    }
    for (notifier,) in escalated.iter().filter(|(n,)| !t.notifiers.contains(n)) {
        insert_silence_page(db, t, notifier, created_at).await?;
    }
    Ok(true)
}

pub(super) async fn streams<D: Db>(db: &D) -> Result<Vec<StreamRow>, StoreError> {
    db.rows(
        &format!("SELECT {STREAM_COLUMNS} FROM streams ORDER BY name"),
        &[],
    )
    .await
}

pub(super) async fn prune_seen<D: Db>(db: &D, before: DateTime<Utc>) -> Result<usize, StoreError> {
    let n = db
        .exec(
            "DELETE FROM seen_deliveries WHERE seen_at < $1",
            &[&millis(before)],
        )
        .await?;
    Ok(count(n))
}

/// Event rows are working data (dedup, counts); the long-term record is the
/// audit log, which has its own retention. Keeps at most `limit` deletions
/// per call so one prune never holds the writer for long.
pub(super) async fn prune_events<D: Db>(
    db: &D,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<usize, StoreError> {
    let n = db
        .exec(
            "DELETE FROM events WHERE id IN
               (SELECT id FROM events WHERE received_at < $1 ORDER BY id LIMIT $2)",
            &[&millis(before), &limit],
        )
        .await?;
    Ok(count(n))
}

pub(super) async fn probe<D: Db>(db: &D, now: DateTime<Utc>) -> Result<(), StoreError> {
    db.exec(
        "INSERT INTO probe (id, at) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET at = excluded.at",
        &[&millis(now)],
    )
    .await?;
    Ok(())
}

#[cfg(any(test, feature = "test-support"))]
pub(super) async fn event_count<D: Db>(db: &D, stream: &str) -> Result<u64, StoreError> {
    // Each event is either an `events` row or an audit entry, never both.
    let (n,): (i64,) = db
        .one(
            "SELECT (SELECT count(*) FROM events WHERE stream = $1)
                  + (SELECT count(*) FROM audit_log WHERE source = $1)",
            &[&stream],
        )
        .await?;
    u64::try_from(n).map_err(|_| StoreError::Sql(format!("negative event count {n}")))
}

/// Names of the streams created from a template.
pub(super) async fn templated_streams<D: Db>(db: &D) -> Result<Vec<String>, StoreError> {
    let names: Vec<(String,)> = db
        .rows("SELECT name FROM templated_streams ORDER BY name", &[])
        .await?;
    Ok(names.into_iter().map(|(n,)| n).collect())
}

/// Creates a templated stream unless it exists or `max` exist already. A
/// stream created again after a `DELETE` starts a fresh clock: its old
/// silence is not its new one.
pub(super) async fn add_templated_stream<D: Db>(
    db: &D,
    name: &str,
    now: DateTime<Utc>,
    max: usize,
) -> Result<TemplatedOutcome, StoreError> {
    if D::POSTGRES {
        // The count and the insert must not race between replicas, so the
        // table is locked against other creators for the transaction
        // (creation is rare: once per stream). SQLite's one writer
        // already serialises them.
        db.exec(
            "LOCK TABLE templated_streams IN SHARE ROW EXCLUSIVE MODE",
            &[],
        )
        .await?;
    }
    let exists: Option<(String,)> = db
        .opt(
            "SELECT name FROM templated_streams WHERE name = $1",
            &[&name],
        )
        .await?;
    if exists.is_some() {
        let row = stream_row(db, name).await?.ok_or_else(|| vanished(name))?;
        return Ok(TemplatedOutcome::Exists(row));
    }
    let (n,): (i64,) = db
        .one("SELECT count(*) FROM templated_streams", &[])
        .await?;
    if u64::try_from(n).unwrap_or(0) >= max as u64 {
        return Ok(TemplatedOutcome::Full);
    }
    db.exec(
        "INSERT INTO templated_streams (name, created_at) VALUES ($1, $2)",
        &[&name, &millis(now)],
    )
    .await?;
    db.exec(
        "INSERT INTO streams (name, watch_started_at) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET watch_started_at = $2, last_arrival_at = NULL,
             newest_event_at = NULL, last_event_type = NULL, last_event_id = NULL,
             alert_state = 'ok', firing_since = NULL, cleared_at = NULL",
        &[&name, &millis(now)],
    )
    .await?;
    let row = stream_row(db, name).await?.ok_or_else(|| vanished(name))?;
    Ok(TemplatedOutcome::Created(row))
}

/// Removes a templated stream; false if there was none.
pub(super) async fn remove_templated_stream<D: Db>(db: &D, name: &str) -> Result<bool, StoreError> {
    let n = db
        .exec("DELETE FROM templated_streams WHERE name = $1", &[&name])
        .await?;
    Ok(n > 0)
}
