//! Operator silences and acknowledgements (issue #17), persisted so every
//! decision is taken from stored state inside the writer's transaction
//! (the same query works for several replicas on a shared store).
//!
//! - A silence matches (stream, kind) at `t` when `starts_at <= t < ends_at`
//!   and both lists match (`*` matches any run of characters). Expiring one
//!   moves its `ends_at` to the moment of the request.
//! - A firing page suppressed by a silence is remembered in
//!   `silence_held` (one row per stream); it is queued once when the
//!   silence ends while the stream still fires, or dropped (with its
//!   resolve) when the stream resolves first.
//! - Keyed alerts (Svix, provider subscriptions) follow the same rules per
//!   alert id: a firing page under a silence of its kind is remembered in
//!   `silence_held_keyed` (the newest one per alert) and queued once when
//!   the silence ends, unless the alert resolved first; a resolve is not
//!   paged when the receivers were never told the alert fired.
//! - An acknowledgement names one firing episode (`streams.firing_since`).
//!
//! The decisions and the audit wording live in `domain::mute`
//! (`on_transition`, `release`, `extra_allowed`, `maintenance_plan`,
//! `Note`, ...), tested once there; the operations that read the rows, call
//! the decision and write its outcome are written once here over
//! `store::db::Db`, for both engines, with the statements in `sql`.

use super::db::Db;
use super::ops::{millis, time, KeyedAlert};
use super::{audit, core, outbox};
use super::{AlertState, NewEvent, Released, StoreError, Transition, Unreadable};
use chrono::{DateTime, Utc};
use hushwatch_core::domain::mute::{
    covers, expiry, has_room, maintenance_plan, on_transition, release, Note, OnTransition,
    Release, Window,
};
pub use hushwatch_core::domain::mute::{NewSilence, SilenceRow, CONFIG_AUTHOR, PAGE_KINDS};

pub(super) const MIGRATION: &str = "
    CREATE TABLE silences (
        id         INTEGER PRIMARY KEY,
        streams    TEXT NOT NULL,
        kinds      TEXT NOT NULL,
        starts_at  INTEGER NOT NULL,
        ends_at    INTEGER NOT NULL,
        comment    TEXT NOT NULL,
        created_by TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expired_at INTEGER,
        expired_by TEXT
    );
    CREATE INDEX silences_by_end ON silences(ends_at);
    CREATE TABLE silence_held (
        stream     TEXT PRIMARY KEY NOT NULL,
        started_at INTEGER NOT NULL,
        reason     TEXT NOT NULL,
        notifiers  TEXT NOT NULL
    );
    CREATE TABLE acknowledgements (
        stream     TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        created_by TEXT NOT NULL,
        comment    TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (stream, started_at)
    );
    CREATE TABLE silence_held_keyed (
        alert_id    TEXT PRIMARY KEY NOT NULL,
        stream      TEXT NOT NULL,
        kind        TEXT NOT NULL,
        family      TEXT NOT NULL,
        key         TEXT NOT NULL,
        severity    TEXT NOT NULL,
        source      TEXT NOT NULL,
        endpoint_id TEXT NOT NULL,
        reason      TEXT NOT NULL,
        notifiers   TEXT NOT NULL,
        held_at     INTEGER NOT NULL
    );";

#[derive(Debug, Clone, PartialEq)]
pub struct AckRow {
    pub stream: String,
    pub started_at: DateTime<Utc>,
    pub created_by: String,
    pub comment: String,
    pub created_at: DateTime<Utc>,
}

/// What `acknowledge` did.
#[derive(Debug, Clone, PartialEq)]
pub enum AckOutcome {
    /// The episode that started at this time is acknowledged.
    Acknowledged(DateTime<Utc>),
    /// The stream is not firing: there is nothing to acknowledge.
    NotFiring,
    /// The stream's silence alert is not firing, but this many findings of
    /// its `provider_missed` pages were acknowledged (issue #45).
    Findings(usize),
}

pub(super) fn list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

pub(super) fn json(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

/// The start (ms) of the stream's current firing episode, given its
/// (alert_state, firing_since); `None` when it is not firing (or unknown).
/// An acknowledgement names this episode, and a held stream page belongs
/// to the episode it was held in.
pub(super) fn firing_episode(state: Option<(AlertState, Option<i64>)>) -> Option<i64> {
    match state {
        Some((AlertState::Firing, started)) => started,
        _ => None,
    }
}

/// An operator action's audit entry ([`Note`]) as the event the chain
/// appends, the same on both engines.
fn note_event(note: Note, now: DateTime<Utc>) -> NewEvent {
    NewEvent {
        stream: note.stream,
        delivery_id: Some(note.id),
        event_type: note.event_type.to_string(),
        event_time: None,
        received_at: now,
        feeds_clock: false,
        body_sha256: None,
        channel: "admin",
        signature_verified: false,
        subject_ids: note.subject,
        audit: true,
        access: None,
        forward: None,
    }
}

/// The statements both engines run, written once with PostgreSQL's `$N`
/// placeholders. SQLite runs them as `?N` (`store::db`, or [`lite`]): it
/// reads `$1` as a *named* parameter numbered by first appearance, not as
/// the first one, while `?NNN` is the NNN-th (<https://sqlite.org/c3ref/bind_parameter_count.html>,
/// <https://sqlite.org/lang_expr.html#parameters>). Where PostgreSQL needs
/// more (a row lock: SQLite has one writer), `Db::locked` appends it.
/// Lookups that only ask whether a row exists read its key column, which
/// both engines return as TEXT (a literal `1` is INT4 on PostgreSQL).
pub(super) mod sql {
    macro_rules! columns {
        () => {
            "SELECT id, streams, kinds, starts_at, ends_at, comment, created_by, created_at,
                    expired_by FROM silences"
        };
    }
    pub const ENDING_AFTER: &str = concat!(columns!(), " WHERE ends_at > $1 ORDER BY id");
    pub const ACTIVE_AT: &str = concat!(columns!(), " WHERE starts_at <= $1 AND ends_at > $1");
    pub const BY_ID: &str = concat!(columns!(), " WHERE id = $1");
    pub const ACKNOWLEDGED: &str =
        "SELECT stream FROM acknowledgements WHERE stream = $1 AND started_at = $2";
    /// SQLite has had this upsert since 3.24 (rusqlite bundles a newer one).
    pub const HOLD: &str = "INSERT INTO silence_held (stream, started_at, reason, notifiers)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (stream) DO UPDATE SET started_at = excluded.started_at,
             reason = excluded.reason, notifiers = excluded.notifiers";
    pub const TAKE_HELD: &str = "DELETE FROM silence_held WHERE stream = $1";
    pub const HELD_PAGE: &str =
        "SELECT started_at, reason, notifiers FROM silence_held WHERE stream = $1";
    pub const IS_HELD: &str = "SELECT stream FROM silence_held WHERE stream = $1";
    pub const HELD_STREAMS: &str = "SELECT stream FROM silence_held ORDER BY stream";
    pub const STREAM_STATE: &str = "SELECT alert_state, firing_since FROM streams WHERE name = $1";
    pub const STREAM_EXISTS: &str = "SELECT name FROM streams WHERE name = $1";
    pub const HOLD_KEYED: &str = "INSERT INTO silence_held_keyed
             (alert_id, stream, kind, family, key, severity, source, endpoint_id,
              reason, notifiers, held_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         ON CONFLICT (alert_id) DO UPDATE SET stream = excluded.stream,
             kind = excluded.kind, family = excluded.family, key = excluded.key,
             severity = excluded.severity, source = excluded.source,
             endpoint_id = excluded.endpoint_id, reason = excluded.reason,
             notifiers = excluded.notifiers, held_at = excluded.held_at";
    pub const TAKE_HELD_KEYED: &str = "DELETE FROM silence_held_keyed WHERE alert_id = $1";
    pub const HELD_KEYED: &str =
        "SELECT alert_id, stream, kind, family, key, severity, source, endpoint_id,
                reason, notifiers
         FROM silence_held_keyed ORDER BY held_at, alert_id";
    /// What the receivers of a keyed alert were last told.
    pub const LAST_TOLD: &str =
        "SELECT alert_state FROM outbox WHERE alert_id = $1 AND page_kind = 'page'
         ORDER BY id DESC LIMIT 1";
    /// When an episode's first firing page was queued.
    pub const FIRST_FIRING_PAGE: &str =
        "SELECT min(at) FROM outbox WHERE alert_id = $1 AND page_kind = 'page'
           AND alert_state = 'firing'";
    pub const COUNT_LIVE: &str = "SELECT count(*) FROM silences WHERE ends_at > $1";
    pub const INSERT: &str =
        "INSERT INTO silences (streams, kinds, starts_at, ends_at, comment, created_by, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id";
    pub const EXPIRE: &str =
        "UPDATE silences SET ends_at = $2, expired_at = $3, expired_by = $4 WHERE id = $1";
    pub const ACK: &str =
        "INSERT INTO acknowledgements (stream, started_at, created_by, comment, created_at)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING";
    pub const CURRENT_ACKS: &str =
        "SELECT a.stream, a.started_at, a.created_by, a.comment, a.created_at
         FROM acknowledgements a JOIN streams s
           ON s.name = a.stream AND s.firing_since = a.started_at AND s.alert_state = 'firing'
         ORDER BY a.stream";
}

// ---------------------------------------------------------------------------
// The rows, read and written once for both engines (`store::db`): each
// operation reads the rows a decision needs, calls it and writes what it
// returns. PostgreSQL locks the rows it decides from (`Db::ROW_LOCK`, or
// the silences table for adders); SQLite's one writer needs no lock.
// ---------------------------------------------------------------------------

/// The columns of `sql::ENDING_AFTER` / `ACTIVE_AT` / `BY_ID`.
type SilenceColumns = (
    i64,
    String,
    String,
    i64,
    i64,
    String,
    String,
    i64,
    Option<String>,
);

fn silence_row(
    (id, streams, kinds, starts_at, ends_at, comment, created_by, created_at, expired_by): SilenceColumns,
) -> SilenceRow {
    SilenceRow {
        id,
        streams: list(&streams),
        kinds: list(&kinds),
        starts_at: time(starts_at),
        ends_at: time(ends_at),
        comment,
        created_by,
        created_at: time(created_at),
        expired_by,
    }
}

/// True when `sql` (a lookup of one key column by `key`) finds a row.
async fn exists<D: Db>(db: &D, sql: &str, key: &str) -> Result<bool, StoreError> {
    Ok(db.opt::<(String,)>(sql, &[&key]).await?.is_some())
}

/// (alert_state, firing_since) of the stream, its row locked on
/// PostgreSQL: an acknowledgement or a held page decides from it.
pub(super) async fn stream_state<D: Db>(
    db: &D,
    stream: &str,
) -> Result<Option<(AlertState, Option<i64>)>, StoreError> {
    let row: Option<(String, Option<i64>)> =
        db.opt(&D::locked(sql::STREAM_STATE), &[&stream]).await?;
    row.map(|(state, since)| Ok((core::alert_state(&state)?, since)))
        .transpose()
}

/// [`stream_state`] without the lock, for a read that changes nothing.
pub(super) async fn peek_stream_state<D: Db>(
    db: &D,
    stream: &str,
) -> Result<Option<(AlertState, Option<i64>)>, StoreError> {
    let row: Option<(String, Option<i64>)> = db.opt(sql::STREAM_STATE, &[&stream]).await?;
    row.map(|(state, since)| Ok((core::alert_state(&state)?, since)))
        .transpose()
}

/// Silences whose end is after `since`, oldest first.
pub(super) async fn silences_ending_after<D: Db>(
    db: &D,
    since: DateTime<Utc>,
) -> Result<Vec<SilenceRow>, StoreError> {
    let rows: Vec<SilenceColumns> = db.rows(sql::ENDING_AFTER, &[&millis(since)]).await?;
    Ok(rows.into_iter().map(silence_row).collect())
}

/// True when a silence covers (stream, kind) at `at`.
pub(super) async fn silenced<D: Db>(
    db: &D,
    stream: &str,
    kind: &str,
    at: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let rows: Vec<SilenceColumns> = db.rows(sql::ACTIVE_AT, &[&millis(at)]).await?;
    let active: Vec<SilenceRow> = rows.into_iter().map(silence_row).collect();
    Ok(covers(&active, stream, kind))
}

/// True when the episode that started at `started_ms` is acknowledged.
pub(super) async fn acknowledged<D: Db>(
    db: &D,
    stream: &str,
    started_ms: i64,
) -> Result<bool, StoreError> {
    let row: Option<(String,)> = db.opt(sql::ACKNOWLEDGED, &[&stream, &started_ms]).await?;
    Ok(row.is_some())
}

/// Called by `record_transition` before it queues pages. Returns true when
/// the pages must not be queued ([`on_transition`]).
pub(super) async fn suppress_transition<D: Db>(db: &D, t: &Transition) -> Result<bool, StoreError> {
    let silenced = t.to == AlertState::Firing && silenced(db, &t.stream, "silence", t.at).await?;
    let held = t.to == AlertState::Ok && db.exec(sql::TAKE_HELD, &[&t.stream]).await? > 0;
    let decision = on_transition(t.to.status(), silenced, held, false);
    if decision == OnTransition::Hold {
        db.exec(
            sql::HOLD,
            &[&t.stream, &millis(t.at), &t.reason, &json(&t.notifiers)],
        )
        .await?;
    }
    Ok(decision != OnTransition::Page)
}

/// Queues the held firing page of `stream` if its silence is over and the
/// episode it belongs to still fires ([`release`]). Returns whether a page
/// was queued.
async fn release_held_stream<D: Db>(
    db: &D,
    stream: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let held: Option<(i64, String, String)> =
        db.opt(&D::locked(sql::HELD_PAGE), &[&stream]).await?;
    let Some((started, reason, notifiers)) = held else {
        return Ok(false);
    };
    let silenced = silenced(db, stream, "silence", now).await?;
    let current = !silenced && firing_episode(stream_state(db, stream).await?) == Some(started);
    let decision = release(silenced, current);
    if decision == Release::Keep {
        return Ok(false);
    }
    db.exec(sql::TAKE_HELD, &[&stream]).await?;
    if decision == Release::Drop {
        return Ok(false);
    }
    let t = Transition {
        stream: stream.to_string(),
        to: AlertState::Firing,
        at: now,
        reason,
        notifiers: list(&notifiers),
    };
    for notifier in &t.notifiers {
        outbox::insert_silence_page(db, &t, notifier, now).await?;
    }
    Ok(true)
}

/// Called by `queue_keyed_pages` before it queues a keyed alert's pages.
/// Returns true when they must not be queued ([`on_transition`]): the held
/// page replaces an older held page of the same alert.
pub(super) async fn suppress_keyed<D: Db>(
    db: &D,
    t: &Transition,
    alert: &KeyedAlert<'_>,
) -> Result<bool, StoreError> {
    let alert_id = outbox::keyed_alert_id(db, alert).await?;
    let silenced =
        t.to == AlertState::Firing && silenced(db, &t.stream, alert.kind.as_str(), t.at).await?;
    let held = t.to == AlertState::Ok && db.exec(sql::TAKE_HELD_KEYED, &[&alert_id]).await? > 0;
    let told_firing = held
        && match db.opt::<(String,)>(sql::LAST_TOLD, &[&alert_id]).await? {
            Some((state,)) => core::alert_state(&state)? == AlertState::Firing,
            None => false,
        };
    let decision = on_transition(t.to.status(), silenced, held, told_firing);
    if decision == OnTransition::Hold {
        db.exec(
            sql::HOLD_KEYED,
            &[
                &alert_id,
                &t.stream,
                &alert.kind.as_str(),
                &alert.family,
                &alert.key,
                &alert.severity,
                &alert.source,
                &alert.endpoint_id,
                &t.reason,
                &json(&t.notifiers),
                &millis(t.at),
            ],
        )
        .await?;
    }
    Ok(decision != OnTransition::Page)
}

/// The columns of `sql::HELD_KEYED`.
type HeldKeyed = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
);

/// Queues the held keyed pages whose silence is over (the alert has not
/// resolved since, or its row would be gone; [`release`]). A held page of
/// a kind this binary does not know stays held and is named in
/// `unreadable`, so it never holds back the others.
async fn release_held_keyed<D: Db>(
    db: &D,
    now: DateTime<Utc>,
    released: &mut Released,
) -> Result<(), StoreError> {
    let held: Vec<HeldKeyed> = db.rows(&D::locked(sql::HELD_KEYED), &[]).await?;
    for (alert_id, stream, kind, family, key, severity, source, endpoint_id, reason, notifiers) in
        held
    {
        let kind = match outbox::alert_kind(&kind) {
            Ok(kind) => kind,
            Err(e) => {
                let what = format!("held page of alert {alert_id}");
                released.unreadable.push(Unreadable::new(what, &e));
                continue;
            }
        };
        let silenced = silenced(db, &stream, kind.as_str(), now).await?;
        // A templated stream removed meanwhile takes its held pages with it.
        let current = !silenced && exists(db, sql::STREAM_EXISTS, &stream).await?;
        let decision = release(silenced, current);
        if decision == Release::Keep {
            continue;
        }
        db.exec(sql::TAKE_HELD_KEYED, &[&alert_id]).await?;
        if decision == Release::Drop {
            continue;
        }
        let t = Transition {
            stream,
            to: AlertState::Firing,
            at: now,
            reason,
            notifiers: list(&notifiers),
        };
        let alert = KeyedAlert {
            kind,
            family: &family,
            key: &key,
            severity: &severity,
            source: &source,
            endpoint_id: &endpoint_id,
        };
        for notifier in &t.notifiers {
            outbox::insert_keyed_page(db, &t, notifier, now, &alert).await?;
        }
        released.paged += 1;
    }
    Ok(())
}

/// Every held page whose silence is over, in one transaction: the
/// streams' held pages, then the keyed ones: how many were paged, and
/// the held pages that cannot be read.
pub(super) async fn release_held<D: Db>(
    db: &D,
    now: DateTime<Utc>,
) -> Result<Released, StoreError> {
    let streams: Vec<(String,)> = db.rows(sql::HELD_STREAMS, &[]).await?;
    let mut released = Released::default();
    for (stream,) in streams {
        released.paged += usize::from(release_held_stream(db, &stream, now).await?);
    }
    release_held_keyed(db, now, &mut released).await?;
    Ok(released)
}

/// True while the stream's firing page is held by a silence.
pub(super) async fn is_held<D: Db>(db: &D, stream: &str) -> Result<bool, StoreError> {
    exists(db, sql::IS_HELD, stream).await
}

/// When the episode's first firing page was queued (`outbox::extra_wanted`).
pub(super) async fn first_firing_page<D: Db>(
    db: &D,
    alert_id: &str,
) -> Result<Option<i64>, StoreError> {
    let (first,): (Option<i64>,) = db.one(sql::FIRST_FIRING_PAGE, &[&alert_id]).await?;
    Ok(first)
}

/// Appends an operator action to the audit chain (the head already locked
/// by `audit::lock_head`).
async fn audit_note<D: Db>(
    db: &D,
    audit: bool,
    note: Note,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    if !audit {
        return Ok(());
    }
    audit::append_audit(db, &note_event(note, now)).await
}

/// Locks the silences table against other adders for the transaction on
/// PostgreSQL, so the cap counts live silences across replicas and
/// replicas syncing maintenance windows take turns (adding is rare).
/// SQLite's one writer already serialises them.
async fn lock_silences<D: Db>(db: &D) -> Result<(), StoreError> {
    if !D::ROW_LOCK.is_empty() {
        db.exec("LOCK TABLE silences IN SHARE ROW EXCLUSIVE MODE", &[])
            .await?;
    }
    Ok(())
}

/// Ended silences kept (the most recently ended; older ones are deleted
/// when a silence is added). Creating and deleting silences in a loop
/// otherwise grew the table, and `GET /v1/silences` with it, without
/// bound (7,301 entries, 1.7 MB after 30 s). Their creation and end stay
/// in the audit chain.
pub const MAX_ENDED_KEPT: usize = 100;

/// Deletes ended silences beyond the [`MAX_ENDED_KEPT`] most recently
/// ended. (Deleting only ended rows changes no page decision: those read
/// silences that cover `now`.)
pub const PRUNE_ENDED: &str = "DELETE FROM silences WHERE ends_at <= $1 AND id NOT IN (
        SELECT id FROM silences WHERE ends_at <= $1 ORDER BY ends_at DESC, id DESC LIMIT $2)";

/// Stores a silence and its audit entry, unless `cap` silences have not
/// ended yet (then `None`, nothing stored); prunes ended silences to
/// [`MAX_ENDED_KEPT`] (under the table lock, so concurrent adders prune in
/// turn).
pub(super) async fn add<D: Db>(
    db: &D,
    s: &NewSilence,
    now: DateTime<Utc>,
    cap: usize,
    audit: bool,
) -> Result<Option<i64>, StoreError> {
    audit::lock_head(db, audit).await?;
    lock_silences(db).await?;
    let (live,): (i64,) = db.one(sql::COUNT_LIVE, &[&millis(now)]).await?;
    if !has_room(live, cap) {
        return Ok(None);
    }
    db.exec(PRUNE_ENDED, &[&millis(now), &(MAX_ENDED_KEPT as i64)])
        .await?;
    let (id,): (i64,) = db
        .one(
            sql::INSERT,
            &[
                &json(&s.streams),
                &json(&s.kinds),
                &millis(s.starts_at),
                &millis(s.ends_at),
                &s.comment,
                &s.created_by,
                &millis(now),
            ],
        )
        .await?;
    audit_note(db, audit, Note::created(id, s), now).await?;
    Ok(Some(id))
}

/// Ends a silence now (if it has not ended yet; [`expiry`]); `comment`
/// says why, in the audit entry. `Ok(false)`: no such silence.
pub(super) async fn expire<D: Db>(
    db: &D,
    id: i64,
    by: &str,
    comment: Option<&str>,
    now: DateTime<Utc>,
    audit: bool,
) -> Result<bool, StoreError> {
    audit::lock_head(db, audit).await?;
    let row: Option<SilenceColumns> = db.opt(&D::locked(sql::BY_ID), &[&id]).await?;
    let Some(row) = row.map(silence_row) else {
        return Ok(false);
    };
    if let Some(end) = expiry(&row, now) {
        db.exec(sql::EXPIRE, &[&id, &millis(end), &millis(now), &by])
            .await?;
        audit_note(db, audit, Note::expired(&row, by, comment), now).await?;
    }
    Ok(true)
}

/// Acknowledges the stream's current firing episode ([`firing_episode`])
/// and, in the same transaction, the open findings its `provider_missed`
/// pages named (which resolves those pages); each part audited.
pub(super) async fn acknowledge<D: Db>(
    db: &D,
    stream: &str,
    created_by: &str,
    comment: &str,
    now: DateTime<Utc>,
    audit: bool,
) -> Result<AckOutcome, StoreError> {
    audit::lock_head(db, audit).await?;
    let findings = super::crosscheck::acknowledge_paged(db, stream, now).await?;
    if findings > 0 {
        let at = millis(now);
        let note = Note::findings_acknowledged(stream, findings, at, created_by, comment);
        audit_note(db, audit, note, now).await?;
    }
    let Some(started) = firing_episode(stream_state(db, stream).await?) else {
        return Ok(if findings > 0 {
            AckOutcome::Findings(findings)
        } else {
            AckOutcome::NotFiring
        });
    };
    let new = db
        .exec(
            sql::ACK,
            &[&stream, &started, &created_by, &comment, &millis(now)],
        )
        .await?;
    if new > 0 {
        let note = Note::acknowledged(stream, started, created_by, comment);
        audit_note(db, audit, note, now).await?;
    }
    Ok(AckOutcome::Acknowledged(time(started)))
}

/// Acknowledgements of episodes that are still firing.
pub(super) async fn current_acks<D: Db>(db: &D) -> Result<Vec<AckRow>, StoreError> {
    let rows: Vec<(String, i64, String, String, i64)> = db.rows(sql::CURRENT_ACKS, &[]).await?;
    Ok(rows
        .into_iter()
        .map(
            |(stream, started_at, created_by, comment, created_at)| AckRow {
                stream,
                started_at: time(started_at),
                created_by,
                comment,
                created_at: time(created_at),
            },
        )
        .collect())
}

/// Makes the stored maintenance windows (silences created by
/// [`CONFIG_AUTHOR`]) match `windows` ([`maintenance_plan`]): new ones are
/// stored and audited once, ones no longer configured end now. Replicas
/// syncing at once take turns on the silences table lock, so each window
/// is stored once.
pub(super) async fn sync_maintenance<D: Db>(
    db: &D,
    windows: &[Window],
    now: DateTime<Utc>,
    audit: bool,
) -> Result<(), StoreError> {
    audit::lock_head(db, audit).await?;
    lock_silences(db).await?;
    let plan = maintenance_plan(&silences_ending_after(db, now).await?, windows, now);
    for id in plan.expire {
        let why = Some("maintenance window no longer in the config");
        expire(db, id, CONFIG_AUTHOR, why, now, audit).await?;
    }
    for new in &plan.add {
        add(db, new, now, usize::MAX, audit).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_firing_episode_is_the_firing_streams_start() {
        assert_eq!(firing_episode(Some((AlertState::Firing, Some(5)))), Some(5));
        assert_eq!(firing_episode(Some((AlertState::Firing, None))), None);
        assert_eq!(firing_episode(Some((AlertState::Ok, Some(5)))), None);
        assert_eq!(firing_episode(None), None, "unknown stream");
    }

    #[test]
    fn a_note_is_an_audited_admin_event_that_moves_no_clock() {
        let note = Note::acknowledged("a", 5_000, "carol", "on it");
        let e = note_event(note.clone(), time(1));
        assert_eq!(
            (e.stream.as_str(), e.delivery_id.as_deref()),
            ("a", Some("ack-a-5000"))
        );
        assert_eq!(e.event_type, "hushwatch.stream.acknowledged");
        assert_eq!(e.subject_ids, note.subject);
        assert!(e.audit && e.channel == "admin" && !e.feeds_clock);
    }
}
