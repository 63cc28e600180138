//! The SQL behind each `Store` method. Every function runs on the writer
//! thread inside a savepoint of the current batch transaction, so each one
//! is atomic on its own and needs no transaction handling here.

use chrono::{DateTime, Utc};
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};
use rusqlite::{params, Connection, OptionalExtension, Row, ToSql};
use sha2::{Digest, Sha256};

use crate::audit::chain::to_hex;

use super::TransitionOutcome;
use super::{
    AlertState, Attempt, EventOutcome, NewEvent, OutboxRow, OutboxSummary, PageKind, StoreError,
    StreamRow, Transition,
};

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
pub(super) fn millis(t: DateTime<Utc>) -> i64 {
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

const OUTBOX_COLUMNS: &str = "o.id, o.stream, o.notifier, o.alert_state, o.at, o.reason, \
     o.created_at, o.page_kind, o.alert_id, o.started_at, o.silent_since, o.attempts, \
     o.first_attempt_at, o.next_attempt_at, o.last_error, \
     (SELECT value FROM meta WHERE key = 'salt'), o.alert_kind, o.severity, o.source, \
     o.endpoint_id, o.resumed_at";

/// The columns `outbox_from_row` reads, for queries outside this module.
pub(super) fn outbox_columns() -> &'static str {
    OUTBOX_COLUMNS
}

pub(super) fn outbox_from_row(row: &Row<'_>) -> rusqlite::Result<OutboxRow> {
    let id: i64 = row.get(0)?;
    let stream: String = row.get(1)?;
    let at = time_at(row, 4)?;
    let salt: String = row.get(15)?;
    let started_at = opt_time_at(row, 9)?;
    let alert_id: Option<String> = row.get(8)?;
    // Rows written before v3 carry no alert id: derive one from what they
    // have, stable across restarts.
    let alert_id =
        alert_id.unwrap_or_else(|| alert_id_for(&salt, &stream, started_at.unwrap_or(at)));
    let attempts: i64 = row.get(11)?;
    Ok(OutboxRow {
        id,
        page_key: page_key_for(&salt, id),
        stream,
        notifier: row.get(2)?,
        state: row.get(3)?,
        at,
        reason: row.get(5)?,
        created_at: time_at(row, 6)?,
        kind: row.get(7)?,
        alert_id,
        started_at,
        silent_since: opt_time_at(row, 10)?,
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        first_attempt_at: opt_time_at(row, 12)?,
        next_attempt_at: opt_time_at(row, 13)?,
        last_error: row.get(14)?,
        alert_kind: row.get(16)?,
        severity: row.get(17)?,
        source: row.get(18)?,
        endpoint_id: row.get(19)?,
        resumed_at: opt_time_at(row, 20)?,
    })
}

impl ToSql for PageKind {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for PageKind {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value.as_str()? {
            "page" => Ok(PageKind::Page),
            "reminder" => Ok(PageKind::Reminder),
            "escalation" => Ok(PageKind::Escalation),
            other => Err(FromSqlError::Other(
                format!("unknown page kind {other:?}").into(),
            )),
        }
    }
}

pub(super) fn hex32(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    to_hex(&h.finalize()[..16])
}

/// UUID-shaped text from 32 hex digits.
pub(super) fn uuid_like(hex: &str) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The idempotency key of one page: the same for every retry of it (it
/// depends only on the row id and the database's salt), and never reused
/// by another page, even in a recreated database (new salt).
pub(super) fn page_key_for(salt: &str, id: i64) -> String {
    format!(
        "hw-{}",
        uuid_like(&hex32(&[b"page", salt.as_bytes(), &id.to_be_bytes()]))
    )
}

/// The id of one alert episode, shared by its firing and resolved pages
/// (PagerDuty dedup_key, webhook alert.id, Alertmanager label).
pub(super) fn alert_id_for(salt: &str, stream: &str, started_at: DateTime<Utc>) -> String {
    uuid_like(&hex32(&[
        b"alert",
        salt.as_bytes(),
        stream.as_bytes(),
        &millis(started_at).to_be_bytes(),
    ]))
}

fn salt(conn: &Connection) -> rusqlite::Result<String> {
    conn.prepare_cached("SELECT value FROM meta WHERE key = 'salt'")?
        .query_row([], |row| row.get(0))
}

/// Dedup key. Each channel (`webhook`, `report`, `svix`) is its own
/// namespace, and inside it each stream (so each verified sender): an app
/// report's id can never shadow a signed webhook's delivery id, nor the
/// reverse. Only the hash is kept, never another party's raw id.
///
/// The input starts with a 0 byte and tags, so it can never equal a
/// [`legacy_delivery_hash`] input (those start with a stream name, which is
/// never empty and never contains NUL); channel and stream hold no NUL
/// either, so the fields cannot run into each other.
pub(super) fn delivery_hash(channel: &str, stream: &str, id: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"\0dedup-v2\0")
        .chain_update(channel)
        .chain_update([0u8])
        .chain_update(stream)
        .chain_update([0u8])
        .chain_update(id)
        .finalize();
    to_hex(&digest)
}

/// The key before v6: stream and id only, shared by all channels. Rows the
/// v6 migration could not attribute to a channel keep it (marked
/// `channel = 'legacy'`) until pruning removes them.
pub(super) fn legacy_delivery_hash(stream: &str, id: &str) -> String {
    let digest = Sha256::new()
        .chain_update(stream)
        .chain_update([0u8])
        .chain_update(id)
        .finalize();
    to_hex(&digest)
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

pub(super) fn stream_row(conn: &Connection, name: &str) -> rusqlite::Result<StreamRow> {
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
        .map(|id| delivery_hash(event.channel, &event.stream, id));
    if let (Some(id), Some(hash)) = (event.delivery_id.as_deref(), &hash) {
        if seen_before_v6(conn, &event.stream, id)?
            || !remember_delivery(conn, hash, &event.stream, event.channel, event.received_at)?
        {
            return Ok(EventOutcome::Duplicate);
        }
    }
    // With the audit log on, its chained entry is the event's record; the
    // plain `events` row would only duplicate it (and cost a third of the
    // ingest throughput in writes), so exactly one of the two is written.
    if event.audit {
        super::audit::append(conn, event)?;
    } else {
        insert_event(conn, event, hash.as_deref())?;
    }
    super::db::ready(super::revocations::note(conn, event))
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    super::db::ready(super::forward::insert(conn, event))
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
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
    channel: &str,
    seen_at: DateTime<Utc>,
) -> rusqlite::Result<bool> {
    let inserted = conn
        .prepare_cached(
            "INSERT INTO seen_deliveries (hash, stream, seen_at, channel) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(hash) DO NOTHING",
        )?
        .execute(params![hash, stream, millis(seen_at), channel])?;
    Ok(inserted == 1)
}

/// A delivery id recorded before v6 under the old, channel-blind key that
/// the migration could not attribute (see `schema`, v6). Treated as a
/// duplicate in every channel: that keeps replay protection for ids seen
/// before the upgrade, at the cost of the old cross-channel shadowing for
/// those ids only, until pruning drops them (7 days).
fn seen_before_v6(conn: &Connection, stream: &str, id: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM seen_deliveries WHERE hash = ?1 AND channel = 'legacy')",
    )?
    .query_row([legacy_delivery_hash(stream, id)], |row| row.get(0))
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
pub(super) fn advance_clock(conn: &Connection, event: &NewEvent) -> rusqlite::Result<()> {
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
    let escalated = if t.to == AlertState::Ok {
        escalated_notifiers(conn, &t.stream)?
    } else {
        Vec::new()
    };
    set_alert_state(conn, t)?;
    // An operator silence holds the firing page (and drops the resolve of
    // a held one): the state above stays truthful either way.
    if super::silences::suppress_transition(conn, t)? {
        return Ok(true);
    }
    for notifier in &t.notifiers {
        insert_silence_page(conn, t, notifier, created_at)?;
    }
    // Whoever was paged by an escalation step also hears that it resolved.
    for notifier in escalated.iter().filter(|n| !t.notifiers.contains(n)) {
        insert_silence_page(conn, t, notifier, created_at)?;
    }
    Ok(true)
}

/// The guard of `Store::record_transition_if_silent`, then the transition.
/// The check and the write share the writer's transaction, so no event can
/// commit between them. Compared in milliseconds, the stored resolution.
/// (A shared-database backend would take the same decision with a
/// conditional UPDATE on the stream row.)
pub(super) fn record_transition_if_silent(
    conn: &Connection,
    t: &Transition,
    silent_since: DateTime<Utc>,
    created_at: DateTime<Utc>,
) -> Result<TransitionOutcome, StoreError> {
    if t.to == AlertState::Firing {
        if let Some(row) = stream_row(conn, &t.stream).optional()? {
            let stored = row.last_arrival_at.unwrap_or(row.watch_started_at);
            if millis(stored) > millis(silent_since) {
                return Ok(TransitionOutcome::Stale(row));
            }
        }
    }
    Ok(if record_transition(conn, t, created_at)? {
        TransitionOutcome::Recorded
    } else {
        TransitionOutcome::Unchanged
    })
}

/// Notifiers paged by an escalation step of the stream's current episode.
fn escalated_notifiers(conn: &Connection, stream: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT o.notifier FROM outbox o JOIN streams s ON s.name = o.stream
         WHERE o.stream = ?1 AND o.page_kind = 'escalation' AND o.alert_kind = 'silence'
           AND o.started_at = s.firing_since
         ORDER BY o.notifier",
    )?;
    let rows = stmt
        .query_map([stream], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
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

/// What a page that is not about a stream's silence (e.g. a Svix
/// endpoint alert) is about.
pub(super) struct KeyedAlert<'a> {
    /// The `kind` label, e.g. `svix_endpoint_disabled`.
    pub kind: &'a str,
    /// Where the alert comes from (`svix`): with `key`, what the alert id
    /// is derived from (unchanged since before `kind` was stored).
    pub family: &'a str,
    /// Names the alert, so its firing and resolved pages share one alert id
    /// (PagerDuty dedup_key, webhook `alert.id`) that never collides with
    /// a silence episode's.
    pub key: &'a str,
    pub severity: &'a str,
    pub source: &'a str,
    pub endpoint_id: &'a str,
}

/// The keyed alert of a fallback-ladder page about notifier `about`.
pub(super) fn fallback_alert(about: &str) -> KeyedAlert<'_> {
    KeyedAlert {
        kind: crate::domain::alert_kind::AlertKind::Fallback.as_str(),
        family: "fallback",
        key: about,
        severity: "critical",
        source: "fallback",
        endpoint_id: about,
    }
}

/// The alert id of a keyed alert: the same for its firing and resolved
/// pages, never equal to a silence episode's.
pub(super) fn keyed_alert_id(
    conn: &Connection,
    alert: &KeyedAlert<'_>,
) -> rusqlite::Result<String> {
    Ok(uuid_like(&hex32(&[
        b"keyed-alert",
        salt(conn)?.as_bytes(),
        alert.family.as_bytes(),
        alert.key.as_bytes(),
    ])))
}

/// Queues one page of a keyed alert per notifier of `t`, unless an
/// operator silence holds it (see `silences::suppress_keyed`). Returns
/// whether pages were queued.
pub(super) fn queue_keyed_pages(
    conn: &Connection,
    t: &Transition,
    created_at: DateTime<Utc>,
    alert: &KeyedAlert<'_>,
) -> rusqlite::Result<bool> {
    if super::silences::suppress_keyed(conn, t, alert)? {
        return Ok(false);
    }
    for notifier in &t.notifiers {
        insert_keyed_page(conn, t, notifier, created_at, alert)?;
    }
    Ok(true)
}

/// Queues a page of a keyed alert. A resolve keeps the severity its alert
/// fired with (a manually disabled endpoint resolves as a warning too).
pub(super) fn insert_keyed_page(
    conn: &Connection,
    t: &Transition,
    notifier: &str,
    created_at: DateTime<Utc>,
    alert: &KeyedAlert<'_>,
) -> rusqlite::Result<()> {
    let alert_id = keyed_alert_id(conn, alert)?;
    let fired_with: Option<String> = if t.to == AlertState::Ok {
        conn.prepare_cached(
            "SELECT severity FROM outbox WHERE alert_id = ?1 AND alert_state = 'firing'
             ORDER BY id DESC LIMIT 1",
        )?
        .query_row([&alert_id], |row| row.get(0))
        .optional()?
    } else {
        None
    };
    conn.prepare_cached(
        "INSERT INTO outbox (stream, notifier, alert_state, at, reason, created_at,
                             page_kind, alert_id, started_at, alert_kind, severity,
                             source, endpoint_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'page', ?7, ?4, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        t.stream,
        notifier,
        t.to,
        millis(t.at),
        t.reason,
        millis(created_at),
        alert_id,
        alert.kind,
        fired_with.as_deref().unwrap_or(alert.severity),
        alert.source,
        alert.endpoint_id,
    ])?;
    Ok(())
}

/// A page of a stream's silence alert: its alert id is the episode's. A
/// resolve says where the silence began (its firing page's
/// `silent_since`) and which arrival ended it.
pub(super) fn insert_silence_page(
    conn: &Connection,
    t: &Transition,
    notifier: &str,
    created_at: DateTime<Utc>,
) -> rusqlite::Result<()> {
    // Runs after set_alert_state, so firing_since is this episode's start
    // for both the firing and the resolving transition.
    let (started_at, last_arrival): (Option<i64>, i64) = conn
        .prepare_cached(
            "SELECT firing_since, coalesce(last_arrival_at, watch_started_at)
             FROM streams WHERE name = ?1",
        )?
        .query_row([&t.stream], |row| Ok((row.get(0)?, row.get(1)?)))?;
    let started = started_at
        .and_then(DateTime::from_timestamp_millis)
        .unwrap_or(t.at);
    let alert_id = alert_id_for(&salt(conn)?, &t.stream, started);
    let (silent_since, resumed_at) = match t.to {
        AlertState::Firing => (last_arrival, None),
        AlertState::Ok => {
            let fired_from: Option<i64> = conn
                .prepare_cached(
                    "SELECT silent_since FROM outbox WHERE alert_id = ?1 AND page_kind = 'page'
                       AND alert_state = 'firing' ORDER BY id LIMIT 1",
                )?
                .query_row([&alert_id], |row| row.get(0))
                .optional()?
                .flatten();
            (fired_from.unwrap_or(last_arrival), Some(last_arrival))
        }
    };
    conn.prepare_cached(
        "INSERT INTO outbox (stream, notifier, alert_state, at, reason, created_at,
                             page_kind, alert_id, started_at, silent_since, resumed_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'page', ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        t.stream,
        notifier,
        t.to,
        millis(t.at),
        t.reason,
        millis(created_at),
        alert_id,
        millis(started),
        silent_since,
        resumed_at,
    ])?;
    Ok(())
}

/// Queues extra pages (reminders, escalations) for the stream's current
/// firing episode, at most once per (episode, kind, step, notifier): a
/// repeated call is a no-op. Returns how many pages were queued (0 if the
/// stream is not firing any more, i.e. the resolve won the race).
pub(super) fn enqueue_extra(
    conn: &Connection,
    stream: &str,
    kind: PageKind,
    step: i64,
    notifiers: &[String],
    at: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let row: Option<(AlertState, Option<i64>, i64)> = conn
        .query_row(
            "SELECT alert_state, firing_since, coalesce(last_arrival_at, watch_started_at)
             FROM streams WHERE name = ?1",
            [stream],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .optional()?;
    let Some((AlertState::Firing, Some(started), silent_since)) = row else {
        return Ok(0);
    };
    let started_at = DateTime::from_timestamp_millis(started).unwrap_or(at);
    let alert_id = alert_id_for(&salt(conn)?, stream, started_at);
    if !extra_wanted(conn, stream, started, &alert_id, at)? {
        return Ok(0);
    }
    // The page says what the episode's firing page said.
    let reason: String = conn
        .query_row(
            "SELECT reason FROM outbox WHERE alert_id = ?1 AND page_kind = 'page'
             ORDER BY id LIMIT 1",
            [&alert_id],
            |row| row.get(0),
        )
        .optional()?
        .unwrap_or_else(|| format!("{stream} is still silent"));
    let mut queued = 0;
    for notifier in notifiers {
        queued += conn
            .prepare_cached(
                "INSERT INTO outbox (stream, notifier, alert_state, at, reason, created_at,
                                     page_kind, alert_id, started_at, silent_since, step)
                 VALUES (?1, ?2, 'firing', ?3, ?4, ?3, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![
                stream,
                notifier,
                millis(at),
                reason,
                kind,
                alert_id,
                started,
                silent_since,
                step,
            ])?;
    }
    Ok(queued)
}

/// Reads what `silences::extra_allowed` decides on: whether a reminder or
/// escalation step due at `at` may be queued.
fn extra_wanted(
    conn: &Connection,
    stream: &str,
    started: i64,
    alert_id: &str,
    at: DateTime<Utc>,
) -> rusqlite::Result<bool> {
    use super::silences as s;
    Ok(s::extra_allowed(
        s::acknowledged(conn, stream, started)?,
        s::silenced(conn, stream, "silence", at)?,
        s::first_firing_page(conn, alert_id)?,
        s::is_held(conn, stream)?,
        millis(at),
    ))
}

/// Records the outcome of one delivery attempt on a pending row.
pub(super) fn record_attempt(
    conn: &Connection,
    id: i64,
    attempt: &Attempt,
) -> Result<(), StoreError> {
    match attempt {
        Attempt::Delivered { at } => conn.execute(
            "UPDATE outbox SET attempts = attempts + 1,
                 first_attempt_at = coalesce(first_attempt_at, ?2),
                 status = 'done', outcome = 'delivered', done_at = ?2,
                 next_attempt_at = NULL, last_error = NULL
             WHERE id = ?1 AND status = 'pending'",
            params![id, millis(*at)],
        )?,
        Attempt::Retry { at, next, error } => conn.execute(
            "UPDATE outbox SET attempts = attempts + 1,
                 first_attempt_at = coalesce(first_attempt_at, ?2),
                 next_attempt_at = ?3, last_error = ?4
             WHERE id = ?1 AND status = 'pending'",
            params![id, millis(*at), millis(*next), error],
        )?,
        Attempt::Failed { at, error } => conn.execute(
            "UPDATE outbox SET attempts = attempts + 1,
                 first_attempt_at = coalesce(first_attempt_at, ?2),
                 status = 'done', outcome = 'failed', done_at = ?2,
                 next_attempt_at = NULL, last_error = ?3
             WHERE id = ?1 AND status = 'pending'",
            params![id, millis(*at), error],
        )?,
    };
    Ok(())
}

/// What /v1/status shows about notifications.
pub(super) fn outbox_summary(
    conn: &Connection,
    failed_limit: usize,
) -> Result<OutboxSummary, StoreError> {
    let mut summary = OutboxSummary::default();
    let mut stmt = conn.prepare_cached(
        "SELECT notifier, coalesce(outcome, 'pending'), count(*) FROM outbox GROUP BY 1, 2",
    )?;
    let counts = stmt.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, i64>(2)?,
        ))
    })?;
    for c in counts {
        let (notifier, outcome, n) = c?;
        let n = u64::try_from(n).unwrap_or(0);
        let entry = summary.by_notifier.entry(notifier).or_default();
        match outcome.as_str() {
            "delivered" => entry.delivered = n,
            "failed" => entry.failed = n,
            _ => entry.pending = n,
        }
    }
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {OUTBOX_COLUMNS} FROM outbox o WHERE o.outcome = 'failed'
         ORDER BY o.done_at DESC, o.id DESC LIMIT ?1"
    ))?;
    summary.recent_failures = stmt
        .query_map([failed_limit as i64], outbox_from_row)?
        .collect::<rusqlite::Result<_>>()?;
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
pub(super) fn active_firing_pages(conn: &Connection) -> Result<Vec<OutboxRow>, StoreError> {
    all_rows(
        conn,
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
        outbox_from_row,
    )
}

/// Every row of a parameterless query, mapped.
fn all_rows<T>(
    conn: &Connection,
    sql: &str,
    map: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map([], map)?.collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

pub(super) fn streams(conn: &Connection) -> Result<Vec<StreamRow>, StoreError> {
    all_rows(
        conn,
        &format!("SELECT {STREAM_COLUMNS} FROM streams ORDER BY name"),
        stream_from_row,
    )
}

pub(super) fn pending_outbox(conn: &Connection) -> Result<Vec<OutboxRow>, StoreError> {
    all_rows(
        conn,
        &format!("SELECT {OUTBOX_COLUMNS} FROM outbox o WHERE o.status = 'pending' ORDER BY o.id"),
        outbox_from_row,
    )
}

pub(super) fn mark_outbox_done(
    conn: &Connection,
    id: i64,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE outbox SET status = 'done', outcome = 'delivered', done_at = ?2
         WHERE id = ?1 AND status = 'pending'",
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
    // Each event is either an `events` row or an audit entry, never both.
    let count: i64 = conn.query_row(
        "SELECT (SELECT count(*) FROM events WHERE stream = ?1)
              + (SELECT count(*) FROM audit_log WHERE source = ?1)",
        [stream],
        |row| row.get(0),
    )?;
    u64::try_from(count).map_err(|_| StoreError::Sql(format!("negative event count {count}")))
}

/// Names of the streams created from a template.
pub(super) fn templated_streams(conn: &Connection) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT name FROM templated_streams ORDER BY name")?;
    let names = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(names)
}

/// Creates a templated stream unless it exists or `max` exist already. A
/// stream created again after a `DELETE` starts a fresh clock: its old
/// silence is not its new one.
pub(super) fn add_templated_stream(
    conn: &Connection,
    name: &str,
    now: DateTime<Utc>,
    max: usize,
) -> Result<super::TemplatedOutcome, StoreError> {
    let exists: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM templated_streams WHERE name = ?1)")?
        .query_row([name], |r| r.get(0))?;
    if exists {
        return Ok(super::TemplatedOutcome::Exists(stream_row(conn, name)?));
    }
    let count: i64 = conn
        .prepare_cached("SELECT COUNT(*) FROM templated_streams")?
        .query_row([], |r| r.get(0))?;
    if count as u64 >= max as u64 {
        return Ok(super::TemplatedOutcome::Full);
    }
    conn.prepare_cached("INSERT INTO templated_streams (name, created_at) VALUES (?1, ?2)")?
        .execute(params![name, millis(now)])?;
    conn.prepare_cached(
        "INSERT INTO streams (name, watch_started_at) VALUES (?1, ?2)
         ON CONFLICT(name) DO UPDATE SET watch_started_at = ?2, last_arrival_at = NULL,
             newest_event_at = NULL, last_event_type = NULL, last_event_id = NULL,
             alert_state = 'ok', firing_since = NULL, cleared_at = NULL",
    )?
    .execute(params![name, millis(now)])?;
    Ok(super::TemplatedOutcome::Created(stream_row(conn, name)?))
}

/// Removes a templated stream; false if there was none.
pub(super) fn remove_templated_stream(conn: &Connection, name: &str) -> Result<bool, StoreError> {
    let n = conn
        .prepare_cached("DELETE FROM templated_streams WHERE name = ?1")?
        .execute([name])?;
    Ok(n > 0)
}
