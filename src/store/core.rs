//! The store's core rows, written once over [`Db`] for both engines:
//! streams and their clocks, an event's record (dedup, audit chain,
//! relay row, revocation index), alert transitions and the outbox.
//!
//! Each function runs inside the caller's transaction: the SQLite writer's
//! group commit (a savepoint per job only when a job of the batch failed,
//! `store::writer`), or one PostgreSQL transaction (READ COMMITTED). Where SQLite relies on its single writer, PostgreSQL takes a
//! row lock ([`Db::ROW_LOCK`]):
//! - the audit chain's head row (`audit_head`) is locked first by every
//!   transaction that appends ([`lock_head`]), so one chain grows in one
//!   order, and lock order is always head → stream row;
//! - a transition locks its stream row and re-reads the stored last
//!   arrival under that lock: the compare-and-set;
//! - dedup is the primary key of `seen_deliveries`: a second transaction
//!   inserting the same hash waits for the first and then inserts nothing.
//!
//! The few statements the dialects spell differently are chosen by
//! [`Db::POSTGRES`], each with a comment.

use chrono::{DateTime, Utc};

use super::db::{Cells, Columns, Db};
use super::ops::{
    alert_id_for, delivery_hash, hex32, legacy_delivery_hash, millis, page_key_for, uuid_like,
    KeyedAlert,
};
use super::subscriptions::SubscriptionUpdate;
use super::{
    AlertState, Attempt, EventOutcome, NewEvent, OutboxRow, OutboxSummary, PageKind, StoreError,
    StreamRow, TemplatedOutcome, Transition, TransitionOutcome,
};
use crate::audit::chain::{from_hex, to_hex, Entry, GENESIS};
use crate::audit::checkpoint::Checkpoint;
use crate::audit::verify::Anchor;

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

fn page_kind(s: &str) -> Result<PageKind, StoreError> {
    match s {
        "page" => Ok(PageKind::Page),
        "reminder" => Ok(PageKind::Reminder),
        "escalation" => Ok(PageKind::Escalation),
        other => Err(StoreError::Sql(format!("unknown page kind {other:?}"))),
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

pub(super) const OUTBOX_COLUMNS: &str = "o.id, o.stream, o.notifier, o.alert_state, o.at, \
     o.reason, o.created_at, o.page_kind, o.alert_id, o.started_at, o.silent_since, o.attempts, \
     o.first_attempt_at, o.next_attempt_at, o.last_error, \
     (SELECT value FROM meta WHERE key = 'salt'), o.alert_kind, o.severity, o.source, \
     o.endpoint_id, o.resumed_at";

/// [`OUTBOX_COLUMNS`], in order.
impl Columns for OutboxRow {
    fn read(r: &impl Cells) -> Result<Self, StoreError> {
        let id: i64 = r.cell(0)?;
        let stream: String = r.cell(1)?;
        let at = r.time(4)?;
        let salt: String = r.cell(15)?;
        let started_at = r.opt_time(9)?;
        // Rows written before v3 carry no alert id: derive one from what
        // they have, stable across restarts.
        let alert_id = r
            .cell::<Option<String>>(8)?
            .unwrap_or_else(|| alert_id_for(&salt, &stream, started_at.unwrap_or(at)));
        let attempts: i64 = r.cell(11)?;
        Ok(OutboxRow {
            id,
            page_key: page_key_for(&salt, id),
            stream,
            notifier: r.cell(2)?,
            state: alert_state(&r.cell::<String>(3)?)?,
            at,
            reason: r.cell(5)?,
            created_at: r.time(6)?,
            kind: page_kind(&r.cell::<String>(7)?)?,
            alert_id,
            started_at,
            silent_since: r.opt_time(10)?,
            attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
            first_attempt_at: r.opt_time(12)?,
            next_attempt_at: r.opt_time(13)?,
            last_error: r.cell(14)?,
            alert_kind: r.cell(16)?,
            severity: r.cell(17)?,
            source: r.cell(18)?,
            endpoint_id: r.cell(19)?,
            resumed_at: r.opt_time(20)?,
        })
    }
}

fn count(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The database's random salt, behind page keys and alert ids.
pub(super) async fn salt<D: Db>(db: &D) -> Result<String, StoreError> {
    let (salt,): (String,) = db
        .one("SELECT value FROM meta WHERE key = 'salt'", &[])
        .await?;
    Ok(salt)
}

/// Takes the audit head's row lock when the transaction will append,
/// before any other row lock, so every appending transaction locks
/// head → rows and queues on the same first lock. (SQLite's one writer
/// needs no lock.)
pub(super) async fn lock_head<D: Db>(db: &D, audit: bool) -> Result<(), StoreError> {
    if audit && D::POSTGRES {
        let _: (i64,) = db
            .one(&D::locked("SELECT seq FROM audit_head WHERE id = 1"), &[])
            .await?;
    }
    Ok(())
}

/// [`lock_head`] for a batch: when any of `events` is chained.
pub(super) async fn lock_audit_head<D: Db>(db: &D, events: &[NewEvent]) -> Result<(), StoreError> {
    lock_head(db, events.iter().any(|e| e.audit)).await
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
async fn stream_row_locked<D: Db>(db: &D, name: &str) -> Result<Option<StreamRow>, StoreError> {
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

/// The chain's head: the last entry appended, else the prune anchor, else
/// genesis. PostgreSQL keeps it in the `audit_head` row, which is also the
/// lock appenders queue on; SQLite's one writer reads the last entry.
async fn audit_head<D: Db>(db: &D) -> Result<Anchor, StoreError> {
    let stored: Option<(i64, Option<String>)> = if D::POSTGRES {
        db.opt("SELECT seq, hash FROM audit_head WHERE id = 1", &[])
            .await?
    } else {
        match db
            .opt::<(i64, Option<String>)>(
                "SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1",
                &[],
            )
            .await?
        {
            Some(last) => Some(last),
            None => {
                db.opt("SELECT seq, hash FROM audit_anchor WHERE id = 1", &[])
                    .await?
            }
        }
    };
    Ok(match stored {
        Some((seq, hash)) => Anchor {
            seq,
            hash: hash.as_deref().and_then(from_hex).unwrap_or(GENESIS),
        },
        None => Anchor::GENESIS,
    })
}

/// Appends `event` to the audit chain in the caller's transaction (under
/// the head lock on PostgreSQL, taken by the caller): an event is
/// acknowledged if and only if its entry committed with it.
pub(super) async fn append_audit<D: Db>(db: &D, event: &NewEvent) -> Result<(), StoreError> {
    let head = audit_head(db).await?;
    let entry = Entry {
        seq: head.seq + 1,
        received_at_ms: millis(event.received_at),
        source: event.stream.clone(),
        channel: event.channel.to_string(),
        delivery_id: event.delivery_id.clone(),
        event_type: event.event_type.clone(),
        event_time_ms: event.event_time.map(millis),
        subject_ids: super::audit::subject_json(&event.subject_ids),
        body_sha256: event.body_sha256.map(|d| to_hex(&d)),
        signature_verified: event.signature_verified,
        prev_hash: head.hash,
    };
    let hash = to_hex(&entry.hash());
    db.exec(
        "INSERT INTO audit_log (seq, received_at, source, channel, delivery_id, event_type,
             event_time, subject_ids, body_sha256, signature_verified, prev_hash, hash)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        &[
            &entry.seq,
            &entry.received_at_ms,
            &entry.source,
            &entry.channel,
            &entry.delivery_id,
            &entry.event_type,
            &entry.event_time_ms,
            &entry.subject_ids,
            &entry.body_sha256,
            &entry.signature_verified,
            &to_hex(&entry.prev_hash),
            &hash,
        ],
    )
    .await?;
    if D::POSTGRES {
        db.exec(
            "UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1",
            &[&entry.seq, &hash],
        )
        .await?;
    }
    Ok(())
}

/// Writes a checkpoint of the chain's head (none while the chain is
/// empty). On PostgreSQL the head row is locked, so the checkpoint pins an
/// entry that is committed, not one another replica is appending.
pub(super) async fn audit_checkpoint<D: Db>(
    db: &D,
    now_ms: i64,
    key: Option<&[u8]>,
) -> Result<Option<Checkpoint>, StoreError> {
    lock_head(db, true).await?;
    let head = audit_head(db).await?;
    if head.seq == 0 {
        return Ok(None);
    }
    let c = Checkpoint::new(head.seq, head.hash, now_ms, key);
    db.exec(
        "INSERT INTO audit_checkpoints (seq, hash, created_at, mac) VALUES ($1, $2, $3, $4)",
        &[
            &c.seq,
            &to_hex(&c.hash),
            &c.created_at_ms,
            &c.mac.map(|m| to_hex(&m)),
        ],
    )
    .await?;
    Ok(Some(c))
}

/// Deletes whole prefixes older than `before_ms`, remembering the last
/// pruned entry as the new anchor so the rest still verifies.
pub(super) async fn audit_prune<D: Db>(db: &D, before_ms: i64) -> Result<usize, StoreError> {
    let last: Option<(i64, String)> = db
        .opt(
            "SELECT seq, hash FROM audit_log WHERE received_at < $1 ORDER BY seq DESC LIMIT 1",
            &[&before_ms],
        )
        .await?;
    let Some((seq, hash)) = last else {
        return Ok(0);
    };
    db.exec(
        "INSERT INTO audit_anchor (id, seq, hash) VALUES (1, $1, $2)
         ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
        &[&seq, &hash],
    )
    .await?;
    let deleted = db
        .exec("DELETE FROM audit_log WHERE seq <= $1", &[&seq])
        .await?;
    db.exec("DELETE FROM audit_checkpoints WHERE seq <= $1", &[&seq])
        .await?;
    Ok(count(deleted))
}

fn unknown_stream(stream: &str) -> StoreError {
    StoreError::Sql(format!("alert transition for unknown stream {stream:?}"))
}

#[cfg(test)]
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

/// A page of a stream's silence alert: its alert id is the episode's. A
/// resolve says where the silence began (its firing page's
/// `silent_since`) and which arrival ended it.
pub(super) async fn insert_silence_page<D: Db>(
    db: &D,
    t: &Transition,
    notifier: &str,
    created_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    // Runs after the state was set, so firing_since is this episode's
    // start for both the firing and the resolving transition.
    let (started_at, last_arrival): (Option<i64>, i64) = db
        .one(
            "SELECT firing_since, coalesce(last_arrival_at, watch_started_at)
             FROM streams WHERE name = $1",
            &[&t.stream],
        )
        .await?;
    let started = started_at
        .and_then(DateTime::from_timestamp_millis)
        .unwrap_or(t.at);
    let alert_id = alert_id_for(&salt(db).await?, &t.stream, started);
    let (silent_since, resumed_at) = match t.to {
        AlertState::Firing => (last_arrival, None),
        AlertState::Ok => {
            let fired_from: Option<(Option<i64>,)> = db
                .opt(
                    "SELECT silent_since FROM outbox WHERE alert_id = $1 AND page_kind = 'page'
                       AND alert_state = 'firing' ORDER BY id LIMIT 1",
                    &[&alert_id],
                )
                .await?;
            let fired_from = fired_from.and_then(|(s,)| s);
            (fired_from.unwrap_or(last_arrival), Some(last_arrival))
        }
    };
    db.exec(
        "INSERT INTO outbox (stream, notifier, alert_state, at, reason, created_at,
                             page_kind, alert_id, started_at, silent_since, resumed_at)
         VALUES ($1, $2, $3, $4, $5, $6, 'page', $7, $8, $9, $10)",
        &[
            &t.stream,
            &notifier,
            &state_str(&t.to),
            &millis(t.at),
            &t.reason,
            &millis(created_at),
            &alert_id,
            &millis(started),
            &silent_since,
            &resumed_at,
        ],
    )
    .await?;
    Ok(())
}

/// The alert id of a keyed alert: the same for its firing and resolved
/// pages, never equal to a silence episode's.
pub(super) async fn keyed_alert_id<D: Db>(
    db: &D,
    alert: &KeyedAlert<'_>,
) -> Result<String, StoreError> {
    Ok(uuid_like(&hex32(&[
        b"keyed-alert",
        salt(db).await?.as_bytes(),
        alert.family.as_bytes(),
        alert.key.as_bytes(),
    ])))
}

/// Queues one page of a keyed alert per notifier of `t`, unless an
/// operator silence holds it (`silences::suppress_keyed`). Returns whether
/// pages were queued.
pub(super) async fn queue_keyed_pages<D: Db>(
    db: &D,
    t: &Transition,
    created_at: DateTime<Utc>,
    alert: &KeyedAlert<'_>,
) -> Result<bool, StoreError> {
    if super::silences::suppress_keyed(db, t, alert).await? {
        return Ok(false);
    }
    for notifier in &t.notifiers {
        insert_keyed_page(db, t, notifier, created_at, alert).await?;
    }
    Ok(true)
}

/// Queues a page of a keyed alert. A resolve keeps the severity its alert
/// fired with (a manually disabled endpoint resolves as a warning too).
pub(super) async fn insert_keyed_page<D: Db>(
    db: &D,
    t: &Transition,
    notifier: &str,
    created_at: DateTime<Utc>,
    alert: &KeyedAlert<'_>,
) -> Result<(), StoreError> {
    let alert_id = keyed_alert_id(db, alert).await?;
    let fired_with: Option<(String,)> = if t.to == AlertState::Ok {
        db.opt(
            "SELECT severity FROM outbox WHERE alert_id = $1 AND alert_state = 'firing'
             ORDER BY id DESC LIMIT 1",
            &[&alert_id],
        )
        .await?
    } else {
        None
    };
    db.exec(
        "INSERT INTO outbox (stream, notifier, alert_state, at, reason, created_at,
                             page_kind, alert_id, started_at, alert_kind, severity,
                             source, endpoint_id)
         VALUES ($1, $2, $3, $4, $5, $6, 'page', $7, $4, $8, $9, $10, $11)",
        &[
            &t.stream,
            &notifier,
            &state_str(&t.to),
            &millis(t.at),
            &t.reason,
            &millis(created_at),
            &alert_id,
            &alert.kind,
            &fired_with
                .as_ref()
                .map_or(alert.severity, |(s,)| s.as_str()),
            &alert.source,
            &alert.endpoint_id,
        ],
    )
    .await?;
    Ok(())
}

/// Issue #19: a fallback-ladder page about notifier `about` to each of
/// `t.notifiers`.
pub(super) async fn queue_fallback_pages<D: Db>(
    db: &D,
    t: &Transition,
    about: &str,
) -> Result<(), StoreError> {
    let alert = super::ops::fallback_alert(about);
    for notifier in &t.notifiers {
        insert_keyed_page(db, t, notifier, t.at, &alert).await?;
    }
    Ok(())
}

/// Queues extra pages (reminders, escalations) for the stream's current
/// firing episode, at most once per (episode, kind, step, notifier): a
/// repeated call is a no-op. Returns how many pages were queued (0 if the
/// stream is not firing any more, i.e. the resolve won the race).
pub(super) async fn enqueue_extra<D: Db>(
    db: &D,
    stream: &str,
    kind: PageKind,
    step: i64,
    notifiers: &[String],
    at: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let Some(row) = stream_row_locked(db, stream).await? else {
        return Ok(0);
    };
    let (AlertState::Firing, Some(started_at)) = (&row.alert_state, row.firing_since) else {
        return Ok(0);
    };
    let silent_since = millis(row.last_arrival_at.unwrap_or(row.watch_started_at));
    let alert_id = alert_id_for(&salt(db).await?, stream, started_at);
    if !extra_wanted(db, stream, millis(started_at), &alert_id, at).await? {
        return Ok(0);
    }
    // The page says what the episode's firing page said.
    let reason: Option<(String,)> = db
        .opt(
            "SELECT reason FROM outbox WHERE alert_id = $1 AND page_kind = 'page'
             ORDER BY id LIMIT 1",
            &[&alert_id],
        )
        .await?;
    let reason = reason.map_or_else(|| format!("{stream} is still silent"), |(r,)| r);
    let mut queued = 0;
    for notifier in notifiers {
        queued += db
            .exec(
                "INSERT INTO outbox (stream, notifier, alert_state, at, reason, created_at,
                                     page_kind, alert_id, started_at, silent_since, step)
                 VALUES ($1, $2, 'firing', $3, $4, $3, $5, $6, $7, $8, $9)
                 ON CONFLICT DO NOTHING",
                &[
                    &stream,
                    notifier,
                    &millis(at),
                    &reason,
                    &kind.as_str(),
                    &alert_id,
                    &millis(started_at),
                    &silent_since,
                    &step,
                ],
            )
            .await?;
    }
    Ok(count(queued))
}

/// Reads what `domain::mute::extra_allowed` decides on: whether a reminder or
/// escalation step due at `at` may be queued.
async fn extra_wanted<D: Db>(
    db: &D,
    stream: &str,
    started: i64,
    alert_id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    use super::silences as s;
    Ok(crate::domain::mute::extra_allowed(
        s::acknowledged(db, stream, started).await?,
        s::silenced(db, stream, "silence", at).await?,
        s::first_firing_page(db, alert_id).await?,
        s::is_held(db, stream).await?,
        millis(at),
    ))
}

/// Records the outcome of one delivery attempt on a pending row.
pub(super) async fn record_attempt<D: Db>(
    db: &D,
    id: i64,
    attempt: &Attempt,
) -> Result<(), StoreError> {
    match attempt {
        Attempt::Delivered { at } => {
            db.exec(
                "UPDATE outbox SET attempts = attempts + 1,
                     first_attempt_at = coalesce(first_attempt_at, $2),
                     status = 'done', outcome = 'delivered', done_at = $2,
                     next_attempt_at = NULL, last_error = NULL
                 WHERE id = $1 AND status = 'pending'",
                &[&id, &millis(*at)],
            )
            .await?
        }
        Attempt::Retry { at, next, error } => {
            db.exec(
                "UPDATE outbox SET attempts = attempts + 1,
                     first_attempt_at = coalesce(first_attempt_at, $2),
                     next_attempt_at = $3, last_error = $4
                 WHERE id = $1 AND status = 'pending'",
                &[&id, &millis(*at), &millis(*next), error],
            )
            .await?
        }
        Attempt::Failed { at, error } => {
            db.exec(
                "UPDATE outbox SET attempts = attempts + 1,
                     first_attempt_at = coalesce(first_attempt_at, $2),
                     status = 'done', outcome = 'failed', done_at = $2,
                     next_attempt_at = NULL, last_error = $3
                 WHERE id = $1 AND status = 'pending'",
                &[&id, &millis(*at), error],
            )
            .await?
        }
    };
    Ok(())
}

#[cfg(test)]
pub(super) async fn mark_outbox_done<D: Db>(
    db: &D,
    id: i64,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    db.exec(
        "UPDATE outbox SET status = 'done', outcome = 'delivered', done_at = $2
         WHERE id = $1 AND status = 'pending'",
        &[&id, &millis(at)],
    )
    .await?;
    Ok(())
}

/// What /v1/status shows about notifications.
pub(super) async fn outbox_summary<D: Db>(
    db: &D,
    failed_limit: usize,
) -> Result<OutboxSummary, StoreError> {
    let mut summary = OutboxSummary::default();
    let counts: Vec<(String, String, i64)> = db
        .rows(
            "SELECT notifier, coalesce(outcome, 'pending'), count(*) FROM outbox GROUP BY 1, 2",
            &[],
        )
        .await?;
    for (notifier, outcome, n) in counts {
        let n = u64::try_from(n).unwrap_or(0);
        let entry = summary.by_notifier.entry(notifier).or_default();
        match outcome.as_str() {
            "delivered" => entry.delivered = n,
            "failed" => entry.failed = n,
            _ => entry.pending = n,
        }
    }
    let limit = i64::try_from(failed_limit).unwrap_or(i64::MAX);
    summary.recent_failures = db
        .rows(
            &format!(
                "SELECT {OUTBOX_COLUMNS} FROM outbox o WHERE o.outcome = 'failed'
                 ORDER BY o.done_at DESC, o.id DESC LIMIT $1"
            ),
            &[&limit],
        )
        .await?;
    Ok(summary)
}

/// What an Alertmanager needs re-posted (before its `resolve_timeout`
/// ends a firing alert by itself):
/// - silence: the newest delivered firing page per (episode, notifier)
///   whose stream is still firing in that same episode (one episode is one
///   alert id; looked up through `outbox_by_alert`, as a per-stream
///   subquery would rescan every delivered page once per page);
/// - other alerts (Svix): the newest page per (alert, notifier) when it is
///   a delivered firing page, i.e. nothing resolved it since. A deleted
///   endpoint is a one-shot notice that never resolves, so it is not
///   re-posted; nor are pre-v8 rows (`svix`), whose alert is unknown.
pub(super) async fn active_firing_pages<D: Db>(db: &D) -> Result<Vec<OutboxRow>, StoreError> {
    db.rows(
        &format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox o JOIN streams s ON s.name = o.stream
         WHERE s.alert_state = 'firing' AND o.alert_state = 'firing'
           AND o.alert_kind = 'silence'
           AND o.outcome = 'delivered' AND o.started_at = s.firing_since
           AND o.id = (SELECT max(o2.id) FROM outbox o2
                       WHERE o2.alert_id = o.alert_id AND o2.notifier = o.notifier
                         AND o2.outcome = 'delivered')
         UNION ALL
         SELECT {OUTBOX_COLUMNS} FROM outbox o
         WHERE o.outcome = 'delivered' AND o.alert_state = 'firing'
           AND o.alert_kind NOT IN ('silence', 'svix', 'svix_endpoint_deleted')
           AND o.id = (SELECT max(o2.id) FROM outbox o2
                       WHERE o2.alert_id = o.alert_id AND o2.notifier = o.notifier
                         AND o2.page_kind = 'page')
         ORDER BY 1"
        ),
        &[],
    )
    .await
}

pub(super) async fn streams<D: Db>(db: &D) -> Result<Vec<StreamRow>, StoreError> {
    db.rows(
        &format!("SELECT {STREAM_COLUMNS} FROM streams ORDER BY name"),
        &[],
    )
    .await
}

pub(super) async fn pending_outbox<D: Db>(db: &D) -> Result<Vec<OutboxRow>, StoreError> {
    db.rows(
        &format!("SELECT {OUTBOX_COLUMNS} FROM outbox o WHERE o.status = 'pending' ORDER BY o.id"),
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

#[cfg(test)]
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
