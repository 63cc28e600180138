//! The SQL behind each `Store` method. Every function runs on the writer
//! thread inside a savepoint of the current batch transaction, so each one
//! is atomic on its own and needs no transaction handling here.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};
use rusqlite::{params, Connection, OptionalExtension, Row, ToSql};
use sha2::{Digest, Sha256};

use super::{AlertState, EventOutcome, NewEvent, OutboxRow, StoreError, StreamRow, Transition};

const STREAM_COLUMNS: &str = "name, watch_started_at, last_arrival_at, newest_event_at, \
     last_event_type, last_event_id, alert_state, firing_since, cleared_at";

impl ToSql for AlertState {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        let text = match self {
            AlertState::Ok => "ok",
            AlertState::Firing => "firing",
        };
        Ok(ToSqlOutput::from(text))
    }
}

impl FromSql for AlertState {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value.as_str()? {
            "ok" => Ok(AlertState::Ok),
            "firing" => Ok(AlertState::Firing),
            other => Err(FromSqlError::Other(
                format!("unknown alert state {other:?}").into(),
            )),
        }
    }
}

/// Times are INTEGER epoch milliseconds so SQL comparisons are exact.
fn millis(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn opt_millis(t: Option<DateTime<Utc>>) -> Option<i64> {
    t.map(millis)
}

fn time_at(row: &Row<'_>, idx: usize) -> rusqlite::Result<DateTime<Utc>> {
    let ms: i64 = row.get(idx)?;
    DateTime::from_timestamp_millis(ms).ok_or(rusqlite::Error::IntegralValueOutOfRange(idx, ms))
}

fn opt_time_at(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<DateTime<Utc>>> {
    let ms: Option<i64> = row.get(idx)?;
    ms.map(|ms| {
        DateTime::from_timestamp_millis(ms).ok_or(rusqlite::Error::IntegralValueOutOfRange(idx, ms))
    })
    .transpose()
}

fn stream_from_row(row: &Row<'_>) -> rusqlite::Result<StreamRow> {
    Ok(StreamRow {
        name: row.get(0)?,
        watch_started_at: time_at(row, 1)?,
        last_arrival_at: opt_time_at(row, 2)?,
        newest_event_at: opt_time_at(row, 3)?,
        last_event_type: row.get(4)?,
        last_event_id: row.get(5)?,
        alert_state: row.get(6)?,
        firing_since: opt_time_at(row, 7)?,
        cleared_at: opt_time_at(row, 8)?,
    })
}

fn outbox_from_row(row: &Row<'_>) -> rusqlite::Result<OutboxRow> {
    Ok(OutboxRow {
        id: row.get(0)?,
        stream: row.get(1)?,
        notifier: row.get(2)?,
        state: row.get(3)?,
        at: time_at(row, 4)?,
        reason: row.get(5)?,
        created_at: time_at(row, 6)?,
    })
}

/// Dedup key: the stream is part of the hash so equal ids from different
/// senders never collide, and the raw id of another party is not stored.
pub(super) fn delivery_hash(stream: &str, id: &str) -> String {
    let digest = Sha256::new()
        .chain_update(stream)
        .chain_update([0u8])
        .chain_update(id)
        .finalize();
    let mut hex = String::with_capacity(64);
    for byte in digest {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// Creates the stream row if missing; an existing row (and so its
/// watch_started_at) is never modified.
fn ensure_stream(conn: &Connection, name: &str, now: DateTime<Utc>) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO streams (name, watch_started_at) VALUES (?1, ?2)
         ON CONFLICT(name) DO NOTHING",
    )?
    .execute(params![name, millis(now)])?;
    Ok(())
}

fn stream_row(conn: &Connection, name: &str) -> rusqlite::Result<StreamRow> {
    conn.prepare_cached(&format!(
        "SELECT {STREAM_COLUMNS} FROM streams WHERE name = ?1"
    ))?
    .query_row([name], stream_from_row)
}

pub(super) fn watch_streams(
    conn: &Connection,
    names: &[String],
    now: DateTime<Utc>,
) -> Result<Vec<StreamRow>, StoreError> {
    for name in names {
        ensure_stream(conn, name, now)?;
    }
    let rows = names
        .iter()
        .map(|name| stream_row(conn, name))
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

pub(super) fn record_events(
    conn: &Connection,
    events: &[NewEvent],
) -> Result<Vec<EventOutcome>, StoreError> {
    let outcomes = events
        .iter()
        .map(|event| record_event(conn, event))
        .collect::<rusqlite::Result<_>>()?;
    Ok(outcomes)
}

/// Dedups on the delivery hash (earlier events of the same batch count, as
/// they are already inserted), stores the event, then moves the clock.
pub(super) fn record_event(conn: &Connection, event: &NewEvent) -> rusqlite::Result<EventOutcome> {
    // The caller normally watched the stream already; if not, its watch
    // starts with this event rather than the event being refused.
    ensure_stream(conn, &event.stream, event.received_at)?;
    let hash = event
        .delivery_id
        .as_deref()
        .map(|id| delivery_hash(&event.stream, id));
    if let Some(hash) = &hash {
        if !remember_delivery(conn, hash, &event.stream, event.received_at)? {
            return Ok(EventOutcome::Duplicate);
        }
    }
    insert_event(conn, event, hash.as_deref())?;
    if event.audit {
        super::audit::append(conn, event)?;
    }
    if event.feeds_clock {
        advance_clock(conn, event)?;
    }
    Ok(EventOutcome::Accepted)
}

/// Returns false when the hash was already known, i.e. a duplicate.
fn remember_delivery(
    conn: &Connection,
    hash: &str,
    stream: &str,
    seen_at: DateTime<Utc>,
) -> rusqlite::Result<bool> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO seen_deliveries (hash, stream, seen_at) VALUES (?1, ?2, ?3)
             ON CONFLICT(hash) DO NOTHING",
        )?
        .execute(params![hash, stream, millis(seen_at)])?;
    Ok(inserted == 1)
}

fn insert_event(conn: &Connection, event: &NewEvent, hash: Option<&str>) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO events (stream, delivery_hash, event_type, event_time, received_at,
                             feeds_clock, body_sha256)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        event.stream,
        hash,
        event.event_type,
        opt_millis(event.event_time),
        millis(event.received_at),
        event.feeds_clock,
        event.body_sha256.as_ref().map(|d| d.as_slice()),
    ])?;
    Ok(())
}

/// Moves the stream's clock forward only. SQLite evaluates every SET
/// expression against the row as it was before the UPDATE, so the "latest
/// arrival" test uses the old last_arrival_at in all three places. `>=`
/// lets an event with the same received_at as the previous one win, matching
/// arrival order within a batch.
fn advance_clock(conn: &Connection, event: &NewEvent) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE streams SET
             last_event_type = CASE WHEN last_arrival_at IS NULL OR ?2 >= last_arrival_at
                                    THEN ?3 ELSE last_event_type END,
             last_event_id   = CASE WHEN last_arrival_at IS NULL OR ?2 >= last_arrival_at
                                    THEN ?4 ELSE last_event_id END,
             last_arrival_at = max(coalesce(last_arrival_at, ?2), ?2),
             newest_event_at = CASE WHEN ?5 IS NULL THEN newest_event_at
                                    ELSE max(coalesce(newest_event_at, ?5), ?5) END
         WHERE name = ?1",
    )?
    .execute(params![
        event.stream,
        millis(event.received_at),
        event.event_type,
        event.delivery_id,
        opt_millis(event.event_time),
    ])?;
    Ok(())
}

pub(super) fn record_transition(
    conn: &Connection,
    t: &Transition,
    created_at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let current: Option<AlertState> = conn
        .query_row(
            "SELECT alert_state FROM streams WHERE name = ?1",
            [&t.stream],
            |row| row.get(0),
        )
        .optional()?;
    let Some(current) = current else {
        return Err(StoreError::Sql(format!(
            "alert transition for unknown stream {:?}",
            t.stream
        )));
    };
    if current == t.to {
        return Ok(false);
    }
    set_alert_state(conn, t)?;
    for notifier in &t.notifiers {
        insert_outbox_row(conn, t, notifier, created_at)?;
    }
    Ok(true)
}

/// Firing starts a new episode; Ok closes it but keeps firing_since so the
/// row still tells how long the last episode lasted.
fn set_alert_state(conn: &Connection, t: &Transition) -> rusqlite::Result<()> {
    let sql = match t.to {
        AlertState::Firing => {
            "UPDATE streams SET alert_state = ?2, firing_since = ?3, cleared_at = NULL
             WHERE name = ?1"
        }
        AlertState::Ok => "UPDATE streams SET alert_state = ?2, cleared_at = ?3 WHERE name = ?1",
    };
    conn.execute(sql, params![t.stream, t.to, millis(t.at)])?;
    Ok(())
}

pub(super) fn insert_outbox_row(
    conn: &Connection,
    t: &Transition,
    notifier: &str,
    created_at: DateTime<Utc>,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO outbox (stream, notifier, alert_state, at, reason, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        t.stream,
        notifier,
        t.to,
        millis(t.at),
        t.reason,
        millis(created_at),
    ])?;
    Ok(())
}

pub(super) fn streams(conn: &Connection) -> Result<Vec<StreamRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {STREAM_COLUMNS} FROM streams ORDER BY name"
    ))?;
    let rows = stmt
        .query_map([], stream_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

pub(super) fn pending_outbox(conn: &Connection) -> Result<Vec<OutboxRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, stream, notifier, alert_state, at, reason, created_at
         FROM outbox WHERE status = 'pending' ORDER BY id",
    )?;
    let rows = stmt
        .query_map([], outbox_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

pub(super) fn mark_outbox_done(
    conn: &Connection,
    id: i64,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE outbox SET status = 'done', done_at = ?2 WHERE id = ?1 AND status = 'pending'",
        params![id, millis(at)],
    )?;
    Ok(())
}

pub(super) fn prune_seen(conn: &Connection, before: DateTime<Utc>) -> Result<usize, StoreError> {
    let deleted = conn.execute(
        "DELETE FROM seen_deliveries WHERE seen_at < ?1",
        [millis(before)],
    )?;
    Ok(deleted)
}

/// Event rows are working data (dedup, counts); the long-term record is the
/// audit log, which has its own retention. Keeps at most `limit` deletions
/// per call so one prune never holds the writer for long.
pub(super) fn prune_events(
    conn: &Connection,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<usize, StoreError> {
    let deleted = conn.execute(
        "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE received_at < ?1 ORDER BY id LIMIT ?2)",
        params![millis(before), limit],
    )?;
    Ok(deleted)
}

pub(super) fn probe(conn: &Connection, now: DateTime<Utc>) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO probe (id, at) VALUES (1, ?1) ON CONFLICT(id) DO UPDATE SET at = excluded.at",
        [millis(now)],
    )?;
    Ok(())
}

pub(super) fn event_count(conn: &Connection, stream: &str) -> Result<u64, StoreError> {
    let count: i64 = conn.query_row(
        "SELECT count(*) FROM events WHERE stream = ?1",
        [stream],
        |row| row.get(0),
    )?;
    u64::try_from(count).map_err(|_| StoreError::Sql(format!("negative event count {count}")))
}
