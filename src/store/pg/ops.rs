//! The PostgreSQL SQL behind each `Backend` method: the same decisions as
//! the SQLite backend's `store::ops`, taken so that several processes can
//! share one database. Each function runs inside the caller's transaction
//! (READ COMMITTED); where SQLite relies on its single writer, this takes a
//! row lock:
//! - the audit chain head row (`audit_head`) is locked first by every
//!   transaction that appends, so one chain grows in one order, and lock
//!   order is always head → stream row (no deadlock between ingests);
//! - a transition locks its stream row (`FOR UPDATE`) and re-reads the
//!   stored last arrival under that lock: the compare-and-set;
//! - dedup is the primary key of `seen_deliveries`: a second transaction
//!   inserting the same hash waits for the first and then inserts nothing.

use chrono::{DateTime, Utc};
use tokio_postgres::Row;

use super::sql::{exec, get, one, opt, opt_ms, opt_time, page_kind, rows, state, state_str};
use super::sql::{ms, time, Tx};
use crate::audit::chain::{from_hex, to_hex, Entry, GENESIS};
use crate::audit::checkpoint::Checkpoint;
use crate::store::ops::{
    alert_id_for, delivery_hash, hex32, legacy_delivery_hash, page_key_for, uuid_like, KeyedAlert,
};
use crate::store::{
    AlertState, Attempt, EventOutcome, NewEvent, OutboxRow, OutboxSummary, PageKind, StoreError,
    StreamRow, TemplatedOutcome, Transition, TransitionOutcome,
};

/// Schema step: every stream row carries the id of the transaction that
/// last wrote it (`changed_xid`, set by a trigger, so every statement that
/// inserts or updates a stream keeps it), indexed, so a replica re-reads
/// only the rows changed since its last read (`streams_changed`).
pub(super) const STREAM_CHANGES_MIGRATION: &str =
    "ALTER TABLE streams ADD COLUMN changed_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
     CREATE INDEX streams_by_change ON streams(changed_xid);
     CREATE FUNCTION hushwatch_stream_changed() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
         NEW.changed_xid := pg_current_xact_id();
         RETURN NEW;
     END $$;
     CREATE TRIGGER streams_changed BEFORE UPDATE ON streams
         FOR EACH ROW EXECUTE FUNCTION hushwatch_stream_changed();";

const STREAM_COLUMNS: &str = "name, watch_started_at, last_arrival_at, newest_event_at, \
     last_event_type, last_event_id, alert_state, firing_since, cleared_at";

pub(super) fn stream_from_row(row: &Row) -> Result<StreamRow, StoreError> {
    Ok(StreamRow {
        name: get(row, 0)?,
        watch_started_at: time(get(row, 1)?)?,
        last_arrival_at: opt_time(get(row, 2)?)?,
        newest_event_at: opt_time(get(row, 3)?)?,
        last_event_type: get(row, 4)?,
        last_event_id: get(row, 5)?,
        alert_state: state(get(row, 6)?)?,
        firing_since: opt_time(get(row, 7)?)?,
        cleared_at: opt_time(get(row, 8)?)?,
    })
}

pub(super) const OUTBOX_COLUMNS: &str = "o.id, o.stream, o.notifier, o.alert_state, o.at, \
     o.reason, o.created_at, o.page_kind, o.alert_id, o.started_at, o.silent_since, o.attempts, \
     o.first_attempt_at, o.next_attempt_at, o.last_error, \
     (SELECT value FROM meta WHERE key = 'salt'), o.alert_kind, o.severity, o.source, \
     o.endpoint_id, o.resumed_at";

pub(super) fn outbox_from_row(row: &Row) -> Result<OutboxRow, StoreError> {
    let id: i64 = get(row, 0)?;
    let stream: String = get(row, 1)?;
    let at = time(get(row, 4)?)?;
    let salt: String = get(row, 15)?;
    let started_at = opt_time(get(row, 9)?)?;
    let alert_id: Option<String> = get(row, 8)?;
    let alert_id =
        alert_id.unwrap_or_else(|| alert_id_for(&salt, &stream, started_at.unwrap_or(at)));
    let attempts: i64 = get(row, 11)?;
    Ok(OutboxRow {
        id,
        page_key: page_key_for(&salt, id),
        stream,
        notifier: get(row, 2)?,
        state: state(get(row, 3)?)?,
        at,
        reason: get(row, 5)?,
        created_at: time(get(row, 6)?)?,
        kind: page_kind(get(row, 7)?)?,
        alert_id,
        started_at,
        silent_since: opt_time(get(row, 10)?)?,
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        first_attempt_at: opt_time(get(row, 12)?)?,
        next_attempt_at: opt_time(get(row, 13)?)?,
        last_error: get(row, 14)?,
        alert_kind: get(row, 16)?,
        severity: get(row, 17)?,
        source: get(row, 18)?,
        endpoint_id: get(row, 19)?,
        resumed_at: opt_time(get(row, 20)?)?,
    })
}

pub(super) async fn salt(tx: &Tx<'_>) -> Result<String, StoreError> {
    get(
        &one(tx, "SELECT value FROM meta WHERE key = 'salt'", &[]).await?,
        0,
    )
}

async fn ensure_stream(tx: &Tx<'_>, name: &str, now: DateTime<Utc>) -> Result<(), StoreError> {
    exec(
        tx,
        "INSERT INTO streams (name, watch_started_at) VALUES ($1, $2)
         ON CONFLICT (name) DO NOTHING",
        &[&name, &ms(now)],
    )
    .await?;
    Ok(())
}

pub(super) async fn stream_row(tx: &Tx<'_>, name: &str) -> Result<Option<StreamRow>, StoreError> {
    let sql = format!("SELECT {STREAM_COLUMNS} FROM streams WHERE name = $1");
    opt(tx, &sql, &[&name])
        .await?
        .as_ref()
        .map(stream_from_row)
        .transpose()
}

pub(super) fn stream_rows_sql() -> String {
    format!("SELECT {STREAM_COLUMNS} FROM streams WHERE name = ANY($1)")
}

async fn stream_row_locked(tx: &Tx<'_>, name: &str) -> Result<Option<StreamRow>, StoreError> {
    let sql = format!("SELECT {STREAM_COLUMNS} FROM streams WHERE name = $1 FOR UPDATE");
    opt(tx, &sql, &[&name])
        .await?
        .as_ref()
        .map(stream_from_row)
        .transpose()
}

pub(super) async fn watch_streams(
    tx: &Tx<'_>,
    names: &[String],
    now: DateTime<Utc>,
) -> Result<Vec<StreamRow>, StoreError> {
    for name in names {
        ensure_stream(tx, name, now).await?;
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let row = stream_row(tx, name)
            .await?
            .ok_or_else(|| StoreError::Sql(format!("stream {name:?} vanished")))?;
        out.push(row);
    }
    Ok(out)
}

/// Takes the audit head's row lock when any event will be chained. Taken
/// before anything else in the transaction, so every appending
/// transaction queues on the same first lock.
pub(super) async fn lock_audit_head(tx: &Tx<'_>, events: &[NewEvent]) -> Result<(), StoreError> {
    if events.iter().any(|e| e.audit) {
        one(
            tx,
            "SELECT seq FROM audit_head WHERE id = 1 FOR UPDATE",
            &[],
        )
        .await?;
    }
    Ok(())
}

pub(super) async fn record_events(
    tx: &Tx<'_>,
    events: &[NewEvent],
) -> Result<Vec<EventOutcome>, StoreError> {
    lock_audit_head(tx, events).await?;
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        out.push(record_event(tx, event).await?);
    }
    Ok(out)
}

/// `store::ops::record_event`'s rules. The caller holds the audit head lock.
pub(super) async fn record_event(
    tx: &Tx<'_>,
    event: &NewEvent,
) -> Result<EventOutcome, StoreError> {
    ensure_stream(tx, &event.stream, event.received_at).await?;
    let hash = event
        .delivery_id
        .as_deref()
        .map(|id| delivery_hash(event.channel, &event.stream, id));
    if let (Some(id), Some(hash)) = (event.delivery_id.as_deref(), &hash) {
        let legacy = opt(
            tx,
            "SELECT 1 FROM seen_deliveries WHERE hash = $1 AND channel = 'legacy'",
            &[&legacy_delivery_hash(&event.stream, id)],
        )
        .await?;
        if legacy.is_some() {
            return Ok(EventOutcome::Duplicate);
        }
        let inserted = exec(
            tx,
            "INSERT INTO seen_deliveries (hash, stream, seen_at, channel) VALUES ($1, $2, $3, $4)
             ON CONFLICT (hash) DO NOTHING",
            &[hash, &event.stream, &ms(event.received_at), &event.channel],
        )
        .await?;
        if inserted == 0 {
            return Ok(EventOutcome::Duplicate);
        }
    }
    if event.audit {
        append_audit(tx, event).await?;
    } else {
        exec(
            tx,
            "INSERT INTO events (stream, delivery_hash, event_type, event_time, received_at,
                                 feeds_clock, body_sha256)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &event.stream,
                &hash,
                &event.event_type,
                &opt_ms(event.event_time),
                &ms(event.received_at),
                &event.feeds_clock,
                &event.body_sha256.as_ref().map(|d| d.as_slice()),
            ],
        )
        .await?;
    }
    super::revocations::note(tx, event).await?;
    crate::store::forward::insert(tx, event).await?;
    if event.feeds_clock {
        advance_clock(tx, event).await?;
    }
    Ok(EventOutcome::Accepted)
}

/// `store::ops::advance_clock` on PostgreSQL, and the change notice.
pub(super) async fn advance_clock(tx: &Tx<'_>, event: &NewEvent) -> Result<(), StoreError> {
    // As in SQLite, every SET expression sees the row before the
    // UPDATE; GREATEST keeps the arrival moving forward only, whatever
    // order replicas commit in.
    exec(
        tx,
        "UPDATE streams SET
             last_event_type = CASE WHEN last_arrival_at IS NULL OR $2 >= last_arrival_at
                                    THEN $3 ELSE last_event_type END,
             last_event_id   = CASE WHEN last_arrival_at IS NULL OR $2 >= last_arrival_at
                                    THEN $4 ELSE last_event_id END,
             last_arrival_at = GREATEST(coalesce(last_arrival_at, $2), $2),
             newest_event_at = CASE WHEN $5::BIGINT IS NULL THEN newest_event_at
                                    ELSE GREATEST(coalesce(newest_event_at, $5), $5) END
         WHERE name = $1",
        &[
            &event.stream,
            &ms(event.received_at),
            &event.event_type,
            &event.delivery_id,
            &opt_ms(event.event_time),
        ],
    )
    .await?;
    // Delivered to every LISTENing replica at COMMIT (and dropped on
    // rollback), so other replicas' timers learn of this arrival.
    exec(
        tx,
        "SELECT pg_notify($1, $2)",
        &[&super::replica::CHANNEL, &event.stream],
    )
    .await?;
    Ok(())
}

/// Appends to the chain under the head row lock (taken by the caller).
pub(super) async fn append_audit(tx: &Tx<'_>, event: &NewEvent) -> Result<(), StoreError> {
    let head = one(tx, "SELECT seq, hash FROM audit_head WHERE id = 1", &[]).await?;
    let seq: i64 = get(&head, 0)?;
    let prev: Option<String> = get(&head, 1)?;
    let entry = Entry {
        seq: seq + 1,
        received_at_ms: ms(event.received_at),
        source: event.stream.clone(),
        channel: event.channel.to_string(),
        delivery_id: event.delivery_id.clone(),
        event_type: event.event_type.clone(),
        event_time_ms: opt_ms(event.event_time),
        subject_ids: crate::store::audit::subject_json(&event.subject_ids),
        body_sha256: event.body_sha256.map(|d| to_hex(&d)),
        signature_verified: event.signature_verified,
        prev_hash: prev.as_deref().and_then(from_hex).unwrap_or(GENESIS),
    };
    let hash = to_hex(&entry.hash());
    exec(
        tx,
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
    exec(
        tx,
        "UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1",
        &[&entry.seq, &hash],
    )
    .await?;
    Ok(())
}

pub(super) async fn record_transition(
    tx: &Tx<'_>,
    t: &Transition,
    created_at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let Some(current) = stream_row_locked(tx, &t.stream).await? else {
        return Err(StoreError::Sql(format!(
            "alert transition for unknown stream {:?}",
            t.stream
        )));
    };
    apply_transition(tx, &current, t, created_at).await
}

/// The transition itself; the stream row is locked by the caller.
async fn apply_transition(
    tx: &Tx<'_>,
    current: &StreamRow,
    t: &Transition,
    created_at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    if current.alert_state == t.to {
        return Ok(false);
    }
    let escalated: Vec<String> = if t.to == AlertState::Ok {
        rows(
            tx,
            "SELECT DISTINCT o.notifier FROM outbox o JOIN streams s ON s.name = o.stream
             WHERE o.stream = $1 AND o.page_kind = 'escalation' AND o.alert_kind = 'silence'
               AND o.started_at = s.firing_since
             ORDER BY o.notifier",
            &[&t.stream],
        )
        .await?
        .iter()
        .map(|r| get(r, 0))
        .collect::<Result<_, _>>()?
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
    exec(tx, sql, &[&t.stream, &state_str(&t.to), &ms(t.at)]).await?;
    // An operator silence holds the firing page (and drops the resolve of
    // a held one): the state above stays truthful either way.
    if super::silences::suppress_transition(tx, t).await? {
        return Ok(true);
    }
    for notifier in &t.notifiers {
        insert_silence_page(tx, t, notifier, created_at).await?;
    }
    for notifier in escalated.iter().filter(|n| !t.notifiers.contains(n)) {
        insert_silence_page(tx, t, notifier, created_at).await?;
    }
    Ok(true)
}

/// The compare-and-set: under the stream row's lock, a fire commits only
/// if the stored silence still starts where the evaluation's did. An event
/// committed by any replica before the lock was taken is seen here; one
/// committing after waits for this transaction.
pub(super) async fn record_transition_if_silent(
    tx: &Tx<'_>,
    t: &Transition,
    silent_since: DateTime<Utc>,
    created_at: DateTime<Utc>,
) -> Result<TransitionOutcome, StoreError> {
    let Some(row) = stream_row_locked(tx, &t.stream).await? else {
        return Err(StoreError::Sql(format!(
            "alert transition for unknown stream {:?}",
            t.stream
        )));
    };
    if t.to == AlertState::Firing {
        let stored = row.last_arrival_at.unwrap_or(row.watch_started_at);
        if ms(stored) > ms(silent_since) {
            return Ok(TransitionOutcome::Stale(row));
        }
    }
    Ok(if apply_transition(tx, &row, t, created_at).await? {
        TransitionOutcome::Recorded
    } else {
        TransitionOutcome::Unchanged
    })
}

pub(super) async fn insert_silence_page(
    tx: &Tx<'_>,
    t: &Transition,
    notifier: &str,
    created_at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let row = one(
        tx,
        "SELECT firing_since, coalesce(last_arrival_at, watch_started_at)
         FROM streams WHERE name = $1",
        &[&t.stream],
    )
    .await?;
    let started_at: Option<i64> = get(&row, 0)?;
    let last_arrival: i64 = get(&row, 1)?;
    let started = started_at
        .and_then(DateTime::from_timestamp_millis)
        .unwrap_or(t.at);
    let alert_id = alert_id_for(&salt(tx).await?, &t.stream, started);
    let (silent_since, resumed_at) = match t.to {
        AlertState::Firing => (last_arrival, None),
        AlertState::Ok => {
            let fired_from: Option<i64> = match opt(
                tx,
                "SELECT silent_since FROM outbox WHERE alert_id = $1 AND page_kind = 'page'
                   AND alert_state = 'firing' ORDER BY id LIMIT 1",
                &[&alert_id],
            )
            .await?
            {
                Some(r) => get(&r, 0)?,
                None => None,
            };
            (fired_from.unwrap_or(last_arrival), Some(last_arrival))
        }
    };
    exec(
        tx,
        "INSERT INTO outbox (stream, notifier, alert_state, at, reason, created_at,
                             page_kind, alert_id, started_at, silent_since, resumed_at)
         VALUES ($1, $2, $3, $4, $5, $6, 'page', $7, $8, $9, $10)",
        &[
            &t.stream,
            &notifier,
            &state_str(&t.to),
            &ms(t.at),
            &t.reason,
            &ms(created_at),
            &alert_id,
            &ms(started),
            &silent_since,
            &resumed_at,
        ],
    )
    .await?;
    Ok(())
}

/// `store::ops::keyed_alert_id` on PostgreSQL.
pub(super) async fn keyed_alert_id(
    tx: &Tx<'_>,
    alert: &KeyedAlert<'_>,
) -> Result<String, StoreError> {
    Ok(uuid_like(&hex32(&[
        b"keyed-alert",
        salt(tx).await?.as_bytes(),
        alert.family.as_bytes(),
        alert.key.as_bytes(),
    ])))
}

/// `store::ops::queue_keyed_pages`: one page per notifier of `t` unless an
/// operator silence holds them. Returns whether pages were queued.
pub(super) async fn queue_keyed_pages(
    tx: &Tx<'_>,
    t: &Transition,
    created_at: DateTime<Utc>,
    alert: &KeyedAlert<'_>,
) -> Result<bool, StoreError> {
    if super::silences::suppress_keyed(tx, t, alert).await? {
        return Ok(false);
    }
    for notifier in &t.notifiers {
        insert_keyed_page(tx, t, notifier, created_at, alert).await?;
    }
    Ok(true)
}

/// `store::ops::insert_keyed_page` on PostgreSQL.
pub(super) async fn insert_keyed_page(
    tx: &Tx<'_>,
    t: &Transition,
    notifier: &str,
    created_at: DateTime<Utc>,
    alert: &KeyedAlert<'_>,
) -> Result<(), StoreError> {
    let alert_id = keyed_alert_id(tx, alert).await?;
    let fired_with: Option<String> = if t.to == AlertState::Ok {
        match opt(
            tx,
            "SELECT severity FROM outbox WHERE alert_id = $1 AND alert_state = 'firing'
             ORDER BY id DESC LIMIT 1",
            &[&alert_id],
        )
        .await?
        {
            Some(r) => Some(get(&r, 0)?),
            None => None,
        }
    } else {
        None
    };
    exec(
        tx,
        "INSERT INTO outbox (stream, notifier, alert_state, at, reason, created_at,
                             page_kind, alert_id, started_at, alert_kind, severity,
                             source, endpoint_id)
         VALUES ($1, $2, $3, $4, $5, $6, 'page', $7, $4, $8, $9, $10, $11)",
        &[
            &t.stream,
            &notifier,
            &state_str(&t.to),
            &ms(t.at),
            &t.reason,
            &ms(created_at),
            &alert_id,
            &alert.kind,
            &fired_with.as_deref().unwrap_or(alert.severity),
            &alert.source,
            &alert.endpoint_id,
        ],
    )
    .await?;
    Ok(())
}

pub(super) async fn enqueue_extra(
    tx: &Tx<'_>,
    stream: &str,
    kind: PageKind,
    step: i64,
    notifiers: &[String],
    at: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let Some(row) = stream_row_locked(tx, stream).await? else {
        return Ok(0);
    };
    let (AlertState::Firing, Some(started_at)) = (&row.alert_state, row.firing_since) else {
        return Ok(0);
    };
    let silent_since = ms(row.last_arrival_at.unwrap_or(row.watch_started_at));
    let alert_id = alert_id_for(&salt(tx).await?, stream, started_at);
    if !extra_wanted(tx, stream, ms(started_at), &alert_id, at).await? {
        return Ok(0);
    }
    let reason: String = match opt(
        tx,
        "SELECT reason FROM outbox WHERE alert_id = $1 AND page_kind = 'page'
         ORDER BY id LIMIT 1",
        &[&alert_id],
    )
    .await?
    {
        Some(r) => get(&r, 0)?,
        None => format!("{stream} is still silent"),
    };
    let mut queued = 0;
    for notifier in notifiers {
        queued += exec(
            tx,
            "INSERT INTO outbox (stream, notifier, alert_state, at, reason, created_at,
                                 page_kind, alert_id, started_at, silent_since, step)
             VALUES ($1, $2, 'firing', $3, $4, $3, $5, $6, $7, $8, $9)
             ON CONFLICT DO NOTHING",
            &[
                &stream,
                notifier,
                &ms(at),
                &reason,
                &kind.as_str(),
                &alert_id,
                &ms(started_at),
                &silent_since,
                &step,
            ],
        )
        .await?;
    }
    Ok(usize::try_from(queued).unwrap_or(usize::MAX))
}

/// `store::ops::extra_wanted`: reads what `silences::extra_allowed`
/// decides on.
async fn extra_wanted(
    tx: &Tx<'_>,
    stream: &str,
    started: i64,
    alert_id: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    use super::silences as s;
    Ok(crate::store::silences::extra_allowed(
        s::acknowledged(tx, stream, started).await?,
        s::silenced(tx, stream, "silence", at).await?,
        s::first_firing_page(tx, alert_id).await?,
        s::is_held(tx, stream).await?,
        ms(at),
    ))
}

pub(super) async fn record_attempt(
    tx: &Tx<'_>,
    id: i64,
    attempt: &Attempt,
) -> Result<(), StoreError> {
    match attempt {
        Attempt::Delivered { at } => {
            exec(
                tx,
                "UPDATE outbox SET attempts = attempts + 1,
                     first_attempt_at = coalesce(first_attempt_at, $2),
                     status = 'done', outcome = 'delivered', done_at = $2,
                     next_attempt_at = NULL, last_error = NULL
                 WHERE id = $1 AND status = 'pending'",
                &[&id, &ms(*at)],
            )
            .await?
        }
        Attempt::Retry { at, next, error } => {
            exec(
                tx,
                "UPDATE outbox SET attempts = attempts + 1,
                     first_attempt_at = coalesce(first_attempt_at, $2),
                     next_attempt_at = $3, last_error = $4
                 WHERE id = $1 AND status = 'pending'",
                &[&id, &ms(*at), &ms(*next), error],
            )
            .await?
        }
        Attempt::Failed { at, error } => {
            exec(
                tx,
                "UPDATE outbox SET attempts = attempts + 1,
                     first_attempt_at = coalesce(first_attempt_at, $2),
                     status = 'done', outcome = 'failed', done_at = $2,
                     next_attempt_at = NULL, last_error = $3
                 WHERE id = $1 AND status = 'pending'",
                &[&id, &ms(*at), error],
            )
            .await?
        }
    };
    Ok(())
}

pub(super) async fn mark_outbox_done(
    tx: &Tx<'_>,
    id: i64,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    exec(
        tx,
        "UPDATE outbox SET status = 'done', outcome = 'delivered', done_at = $2
         WHERE id = $1 AND status = 'pending'",
        &[&id, &ms(at)],
    )
    .await?;
    Ok(())
}

pub(super) async fn outbox_summary(
    tx: &Tx<'_>,
    failed_limit: usize,
) -> Result<OutboxSummary, StoreError> {
    let mut summary = OutboxSummary::default();
    for r in rows(
        tx,
        "SELECT notifier, coalesce(outcome, 'pending'), count(*) FROM outbox GROUP BY 1, 2",
        &[],
    )
    .await?
    {
        let notifier: String = get(&r, 0)?;
        let outcome: String = get(&r, 1)?;
        let n = u64::try_from(get::<i64>(&r, 2)?).unwrap_or(0);
        let entry = summary.by_notifier.entry(notifier).or_default();
        match outcome.as_str() {
            "delivered" => entry.delivered = n,
            "failed" => entry.failed = n,
            _ => entry.pending = n,
        }
    }
    let limit = i64::try_from(failed_limit).unwrap_or(i64::MAX);
    let sql = format!(
        "SELECT {OUTBOX_COLUMNS} FROM outbox o WHERE o.outcome = 'failed'
         ORDER BY o.done_at DESC, o.id DESC LIMIT $1"
    );
    summary.recent_failures = rows(tx, &sql, &[&limit])
        .await?
        .iter()
        .map(outbox_from_row)
        .collect::<Result<_, _>>()?;
    Ok(summary)
}

/// `store::ops::active_firing_pages`, same query.
pub(super) async fn active_firing_pages(tx: &Tx<'_>) -> Result<Vec<OutboxRow>, StoreError> {
    let sql = format!(
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
    );
    rows(tx, &sql, &[])
        .await?
        .iter()
        .map(outbox_from_row)
        .collect()
}

pub(super) async fn streams(tx: &Tx<'_>) -> Result<Vec<StreamRow>, StoreError> {
    let sql = format!("SELECT {STREAM_COLUMNS} FROM streams ORDER BY name");
    rows(tx, &sql, &[])
        .await?
        .iter()
        .map(stream_from_row)
        .collect()
}

/// The rows changed since `since` (all rows without it) and the cursor
/// for the next call. Transaction ids are handed out at a transaction's
/// first write but commit in any order, so the cursor is not the largest
/// id read: it is the oldest transaction still running when this read's
/// snapshot was taken. Everything older was visible to this read; every
/// change not visible to it has an id at or above the cursor. The caller
/// runs this in a REPEATABLE READ transaction: one snapshot for both.
pub(super) async fn streams_changed(
    tx: &Tx<'_>,
    since: Option<i64>,
) -> Result<(Vec<StreamRow>, Option<i64>), StoreError> {
    let cursor: i64 = get(
        &one(
            tx,
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::TEXT::BIGINT",
            &[],
        )
        .await?,
        0,
    )?;
    let found = match since {
        None => {
            let sql = format!("SELECT {STREAM_COLUMNS} FROM streams");
            rows(tx, &sql, &[]).await?
        }
        Some(since) => {
            let sql =
                format!("SELECT {STREAM_COLUMNS} FROM streams WHERE changed_xid >= $1::TEXT::xid8");
            rows(tx, &sql, &[&since.to_string()]).await?
        }
    };
    let rows = found
        .iter()
        .map(stream_from_row)
        .collect::<Result<_, _>>()?;
    Ok((rows, Some(cursor)))
}

pub(super) async fn pending_outbox(tx: &Tx<'_>) -> Result<Vec<OutboxRow>, StoreError> {
    let sql =
        format!("SELECT {OUTBOX_COLUMNS} FROM outbox o WHERE o.status = 'pending' ORDER BY o.id");
    rows(tx, &sql, &[])
        .await?
        .iter()
        .map(outbox_from_row)
        .collect()
}

fn count(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

pub(super) async fn prune_seen(tx: &Tx<'_>, before: DateTime<Utc>) -> Result<usize, StoreError> {
    let n = exec(
        tx,
        "DELETE FROM seen_deliveries WHERE seen_at < $1",
        &[&ms(before)],
    )
    .await?;
    Ok(count(n))
}

pub(super) async fn prune_events(
    tx: &Tx<'_>,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<usize, StoreError> {
    let n = exec(
        tx,
        "DELETE FROM events WHERE id IN
           (SELECT id FROM events WHERE received_at < $1 ORDER BY id LIMIT $2)",
        &[&ms(before), &limit],
    )
    .await?;
    Ok(count(n))
}

pub(super) async fn probe(tx: &Tx<'_>, now: DateTime<Utc>) -> Result<(), StoreError> {
    exec(
        tx,
        "INSERT INTO probe (id, at) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET at = excluded.at",
        &[&ms(now)],
    )
    .await?;
    Ok(())
}

pub(super) async fn event_count(tx: &Tx<'_>, stream: &str) -> Result<u64, StoreError> {
    let n: i64 = get(
        &one(
            tx,
            "SELECT (SELECT count(*) FROM events WHERE stream = $1)
                  + (SELECT count(*) FROM audit_log WHERE source = $1)",
            &[&stream],
        )
        .await?,
        0,
    )?;
    u64::try_from(n).map_err(|_| StoreError::Sql(format!("negative event count {n}")))
}

pub(super) async fn templated_streams(tx: &Tx<'_>) -> Result<Vec<String>, StoreError> {
    rows(tx, "SELECT name FROM templated_streams ORDER BY name", &[])
        .await?
        .iter()
        .map(|r| get(r, 0))
        .collect()
}

/// `store::ops::add_templated_stream`. The count and the insert must not
/// race between replicas, so the table is locked against other creators
/// for the length of the transaction (creation is rare: once per stream).
pub(super) async fn add_templated_stream(
    tx: &Tx<'_>,
    name: &str,
    now: DateTime<Utc>,
    max: usize,
) -> Result<TemplatedOutcome, StoreError> {
    exec(
        tx,
        "LOCK TABLE templated_streams IN SHARE ROW EXCLUSIVE MODE",
        &[],
    )
    .await?;
    let exists = opt(
        tx,
        "SELECT 1 FROM templated_streams WHERE name = $1",
        &[&name],
    )
    .await?;
    if exists.is_some() {
        let row = stream_row(tx, name)
            .await?
            .ok_or_else(|| StoreError::Sql(format!("templated stream {name:?} has no row")))?;
        return Ok(TemplatedOutcome::Exists(row));
    }
    let n: i64 = get(
        &one(tx, "SELECT count(*) FROM templated_streams", &[]).await?,
        0,
    )?;
    if u64::try_from(n).unwrap_or(0) >= max as u64 {
        return Ok(TemplatedOutcome::Full);
    }
    exec(
        tx,
        "INSERT INTO templated_streams (name, created_at) VALUES ($1, $2)",
        &[&name, &ms(now)],
    )
    .await?;
    exec(
        tx,
        "INSERT INTO streams (name, watch_started_at) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET watch_started_at = $2, last_arrival_at = NULL,
             newest_event_at = NULL, last_event_type = NULL, last_event_id = NULL,
             alert_state = 'ok', firing_since = NULL, cleared_at = NULL",
        &[&name, &ms(now)],
    )
    .await?;
    let row = stream_row(tx, name)
        .await?
        .ok_or_else(|| StoreError::Sql(format!("templated stream {name:?} has no row")))?;
    Ok(TemplatedOutcome::Created(row))
}

pub(super) async fn remove_templated_stream(tx: &Tx<'_>, name: &str) -> Result<bool, StoreError> {
    let n = exec(
        tx,
        "DELETE FROM templated_streams WHERE name = $1",
        &[&name],
    )
    .await?;
    Ok(n > 0)
}

/// Checkpoint of the head; the head row is locked so the checkpoint pins
/// an entry that is committed, not one another replica is appending.
pub(super) async fn audit_checkpoint(
    tx: &Tx<'_>,
    now_ms: i64,
    key: Option<&[u8]>,
) -> Result<Option<Checkpoint>, StoreError> {
    let head = one(
        tx,
        "SELECT seq, hash FROM audit_head WHERE id = 1 FOR UPDATE",
        &[],
    )
    .await?;
    let seq: i64 = get(&head, 0)?;
    let hash: Option<String> = get(&head, 1)?;
    let Some(hash) = hash.filter(|_| seq > 0) else {
        return Ok(None);
    };
    let c = Checkpoint::new(seq, from_hex(&hash).unwrap_or(GENESIS), now_ms, key);
    exec(
        tx,
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

pub(super) async fn audit_prune(tx: &Tx<'_>, before_ms: i64) -> Result<usize, StoreError> {
    let Some(last) = opt(
        tx,
        "SELECT seq, hash FROM audit_log WHERE received_at < $1 ORDER BY seq DESC LIMIT 1",
        &[&before_ms],
    )
    .await?
    else {
        return Ok(0);
    };
    let seq: i64 = get(&last, 0)?;
    let hash: String = get(&last, 1)?;
    exec(
        tx,
        "INSERT INTO audit_anchor (id, seq, hash) VALUES (1, $1, $2)
         ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
        &[&seq, &hash],
    )
    .await?;
    let deleted = exec(tx, "DELETE FROM audit_log WHERE seq <= $1", &[&seq]).await?;
    exec(tx, "DELETE FROM audit_checkpoints WHERE seq <= $1", &[&seq]).await?;
    Ok(count(deleted))
}
