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

use super::ops::{insert_keyed_page, insert_silence_page, keyed_alert_id, millis, KeyedAlert};
use super::{AlertState, NewEvent, StoreError, Transition};
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension};

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

/// Every alert kind an operator silence can hold (the outbox `alert_kind`,
/// the notifiers' `kind`; `notify::kind::AlertKind::silenceable`). A
/// silence's `kinds` patterns must each match one of them, so a typo is
/// refused instead of silently holding nothing. (`svix` on pre-v8 outbox
/// rows is not a kind new pages carry; pages about hushwatch itself cannot
/// be silenced.)
pub const PAGE_KINDS: &[&str] = &crate::domain::alert_kind::SILENCEABLE;

/// True when `pattern` matches at least one of [`PAGE_KINDS`].
pub fn is_known_kind(pattern: &str) -> bool {
    PAGE_KINDS.iter().any(|k| glob(pattern, k))
}

/// A silence as requested (already validated by the caller).
#[derive(Debug, Clone)]
pub struct NewSilence {
    pub streams: Vec<String>,
    pub kinds: Vec<String>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub comment: String,
    pub created_by: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SilenceRow {
    pub id: i64,
    pub streams: Vec<String>,
    pub kinds: Vec<String>,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub comment: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expired_by: Option<String>,
}

impl SilenceRow {
    pub fn active_at(&self, t: DateTime<Utc>) -> bool {
        self.starts_at <= t && t < self.ends_at
    }

    pub fn matches(&self, stream: &str, kind: &str) -> bool {
        self.streams.iter().any(|p| glob(p, stream)) && self.kinds.iter().any(|p| glob(p, kind))
    }
}

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
}

/// `*` matches any run of characters; everything else matches itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let Some((head, rest)) = pattern.split_once('*') else {
        return pattern == text;
    };
    let Some(mut tail) = text.strip_prefix(head) else {
        return false;
    };
    let parts: Vec<&str> = rest.split('*').collect();
    let (last, middle) = parts.split_last().unwrap_or((&"", &[]));
    for part in middle {
        match tail.find(part) {
            Some(i) => tail = &tail[i + part.len()..],
            None => return false,
        }
    }
    tail.len() >= last.len() && tail.ends_with(last)
}

fn time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

fn list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<SilenceRow> {
    Ok(SilenceRow {
        id: r.get(0)?,
        streams: list(&r.get::<_, String>(1)?),
        kinds: list(&r.get::<_, String>(2)?),
        starts_at: time(r.get(3)?),
        ends_at: time(r.get(4)?),
        comment: r.get(5)?,
        created_by: r.get(6)?,
        created_at: time(r.get(7)?),
        expired_by: r.get(8)?,
    })
}

const COLUMNS: &str =
    "id, streams, kinds, starts_at, ends_at, comment, created_by, created_at, expired_by";

/// Silences whose end is after `since`, oldest first.
pub(super) fn silences_ending_after(
    conn: &Connection,
    since: DateTime<Utc>,
) -> rusqlite::Result<Vec<SilenceRow>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM silences WHERE ends_at > ?1 ORDER BY id"
    ))?
    .query_map([millis(since)], row_of)?
    .collect()
}

/// True when a silence covers (stream, kind) at `at`.
pub(super) fn silenced(
    conn: &Connection,
    stream: &str,
    kind: &str,
    at: DateTime<Utc>,
) -> rusqlite::Result<bool> {
    let ms = millis(at);
    let rows: Vec<SilenceRow> = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM silences WHERE starts_at <= ?1 AND ends_at > ?1"
        ))?
        .query_map([ms], row_of)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows.iter().any(|s| s.matches(stream, kind)))
}

/// True when the episode that started at `started_ms` is acknowledged.
pub(super) fn acknowledged(
    conn: &Connection,
    stream: &str,
    started_ms: i64,
) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM acknowledgements WHERE stream = ?1 AND started_at = ?2")?
        .query_row(params![stream, started_ms], |_| Ok(()))
        .optional()
        .map(|r| r.is_some())
}

/// Called by `record_transition` before it queues pages. Returns true when
/// the pages must not be queued: a firing page under a silence (held for
/// when the silence ends), or a resolve whose firing page was held (nobody
/// was told it fired).
pub(super) fn suppress_transition(conn: &Connection, t: &Transition) -> rusqlite::Result<bool> {
    match t.to {
        AlertState::Firing => {
            if !silenced(conn, &t.stream, "silence", t.at)? {
                return Ok(false);
            }
            conn.prepare_cached(
                "INSERT OR REPLACE INTO silence_held (stream, started_at, reason, notifiers)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                t.stream,
                millis(t.at),
                t.reason,
                serde_json::to_string(&t.notifiers).unwrap_or_else(|_| "[]".into()),
            ])?;
            Ok(true)
        }
        AlertState::Ok => {
            let held = conn
                .prepare_cached("DELETE FROM silence_held WHERE stream = ?1")?
                .execute([&t.stream])?;
            Ok(held > 0)
        }
    }
}

/// Queues the held firing page of `stream` if its silence is over and the
/// episode it belongs to still fires. Returns whether a page was queued.
pub(super) fn release_held(
    conn: &Connection,
    stream: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let held: Option<(i64, String, String)> = conn
        .prepare_cached("SELECT started_at, reason, notifiers FROM silence_held WHERE stream = ?1")?
        .query_row([stream], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((started, reason, notifiers)) = held else {
        return Ok(false);
    };
    if silenced(conn, stream, "silence", now)? {
        return Ok(false);
    }
    conn.prepare_cached("DELETE FROM silence_held WHERE stream = ?1")?
        .execute([stream])?;
    let state: Option<(AlertState, Option<i64>)> = conn
        .query_row(
            "SELECT alert_state, firing_since FROM streams WHERE name = ?1",
            [stream],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    if state != Some((AlertState::Firing, Some(started))) {
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
        insert_silence_page(conn, &t, notifier, now)?;
    }
    Ok(true)
}

/// Called by `ops::queue_keyed_pages` before it queues a keyed alert's
/// pages. Returns true when they must not be queued: a firing page under a
/// silence of its kind (held, replacing an older held page of the same
/// alert, for when the silence ends), or a resolve of an alert whose
/// firing page was held and whose receivers were last told it is not
/// firing (so nobody waits for this resolve).
pub(super) fn suppress_keyed(
    conn: &Connection,
    t: &Transition,
    alert: &KeyedAlert<'_>,
) -> rusqlite::Result<bool> {
    let alert_id = keyed_alert_id(conn, alert)?;
    match t.to {
        AlertState::Firing => {
            if !silenced(conn, &t.stream, alert.kind, t.at)? {
                return Ok(false);
            }
            conn.prepare_cached(
                "INSERT OR REPLACE INTO silence_held_keyed
                     (alert_id, stream, kind, family, key, severity, source, endpoint_id,
                      reason, notifiers, held_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                alert_id,
                t.stream,
                alert.kind,
                alert.family,
                alert.key,
                alert.severity,
                alert.source,
                alert.endpoint_id,
                t.reason,
                serde_json::to_string(&t.notifiers).unwrap_or_else(|_| "[]".into()),
                millis(t.at),
            ])?;
            Ok(true)
        }
        AlertState::Ok => {
            let held = conn
                .prepare_cached("DELETE FROM silence_held_keyed WHERE alert_id = ?1")?
                .execute([&alert_id])?;
            if held == 0 {
                return Ok(false);
            }
            let last_told: Option<AlertState> = conn
                .prepare_cached(
                    "SELECT alert_state FROM outbox WHERE alert_id = ?1 AND page_kind = 'page'
                     ORDER BY id DESC LIMIT 1",
                )?
                .query_row([&alert_id], |r| r.get(0))
                .optional()?;
            Ok(last_told != Some(AlertState::Firing))
        }
    }
}

/// Queues the held keyed pages whose silence is over (the alert has not
/// resolved since, or its row would be gone). Returns how many alerts were
/// paged.
pub(super) fn release_held_keyed(
    conn: &Connection,
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    type Held = (
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
    let held: Vec<Held> = conn
        .prepare_cached(
            "SELECT alert_id, stream, kind, family, key, severity, source, endpoint_id,
                    reason, notifiers
             FROM silence_held_keyed ORDER BY held_at, alert_id",
        )?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut paged = 0;
    for (alert_id, stream, kind, family, key, severity, source, endpoint_id, reason, notifiers) in
        held
    {
        if silenced(conn, &stream, &kind, now)? {
            continue;
        }
        conn.prepare_cached("DELETE FROM silence_held_keyed WHERE alert_id = ?1")?
            .execute([&alert_id])?;
        // A templated stream removed meanwhile takes its held pages with it.
        let exists = conn
            .prepare_cached("SELECT 1 FROM streams WHERE name = ?1")?
            .query_row([&stream], |_| Ok(()))
            .optional()?
            .is_some();
        if !exists {
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
            kind: &kind,
            family: &family,
            key: &key,
            severity: &severity,
            source: &source,
            endpoint_id: &endpoint_id,
        };
        for notifier in &t.notifiers {
            insert_keyed_page(conn, &t, notifier, now, &alert)?;
        }
        paged += 1;
    }
    Ok(paged)
}

/// True while the stream's firing page is held by a silence.
pub(super) fn is_held(conn: &Connection, stream: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM silence_held WHERE stream = ?1")?
        .query_row([stream], |_| Ok(()))
        .optional()
        .map(|r| r.is_some())
}

/// Streams with a held firing page.
pub(super) fn held_streams(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    conn.prepare_cached("SELECT stream FROM silence_held ORDER BY stream")?
        .query_map([], |r| r.get(0))?
        .collect()
}

fn audit_entry(
    conn: &Connection,
    audit: bool,
    stream: &str,
    id: String,
    event_type: &str,
    now: DateTime<Utc>,
    subject: Vec<(String, String)>,
) -> rusqlite::Result<()> {
    if !audit {
        return Ok(());
    }
    super::audit::append(
        conn,
        &NewEvent {
            stream: stream.to_string(),
            delivery_id: Some(id),
            event_type: event_type.to_string(),
            event_time: None,
            received_at: now,
            feeds_clock: false,
            body_sha256: None,
            channel: "admin",
            signature_verified: false,
            subject_ids: subject,
            audit: true,
            access: None,
        },
    )
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
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
/// [`MAX_ENDED_KEPT`].
pub(super) fn add(
    conn: &Connection,
    s: &NewSilence,
    now: DateTime<Utc>,
    cap: usize,
    audit: bool,
) -> Result<Option<i64>, StoreError> {
    let live: i64 = conn.query_row(
        "SELECT count(*) FROM silences WHERE ends_at > ?1",
        [millis(now)],
        |r| r.get(0),
    )?;
    if usize::try_from(live).unwrap_or(usize::MAX) >= cap {
        return Ok(None);
    }
    conn.prepare_cached(&PRUNE_ENDED.replace('$', "?"))?
        .execute(params![millis(now), MAX_ENDED_KEPT as i64])?;
    let to_json = |v: &Vec<String>| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
    conn.prepare_cached(
        "INSERT INTO silences (streams, kinds, starts_at, ends_at, comment, created_by, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        to_json(&s.streams),
        to_json(&s.kinds),
        millis(s.starts_at),
        millis(s.ends_at),
        s.comment,
        s.created_by,
        millis(now),
    ])?;
    let id = conn.last_insert_rowid();
    audit_entry(
        conn,
        audit,
        &s.streams.join(","),
        format!("silence-{id}"),
        "hushwatch.silence.created",
        now,
        vec![
            ("created_by".into(), s.created_by.clone()),
            ("comment".into(), s.comment.clone()),
            ("silence_id".into(), id.to_string()),
            ("kinds".into(), s.kinds.join(",")),
            ("starts_at".into(), rfc(s.starts_at)),
            ("ends_at".into(), rfc(s.ends_at)),
        ],
    )?;
    Ok(Some(id))
}

/// Ends a silence now (if it has not ended yet); `comment` says why, in
/// the audit entry. `Ok(false)`: no such silence.
pub(super) fn expire(
    conn: &Connection,
    id: i64,
    by: &str,
    comment: Option<&str>,
    now: DateTime<Utc>,
    audit: bool,
) -> Result<bool, StoreError> {
    let row = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM silences WHERE id = ?1"))?
        .query_row([id], row_of)
        .optional()?;
    let Some(row) = row else {
        return Ok(false);
    };
    if row.ends_at > now {
        conn.execute(
            "UPDATE silences SET ends_at = max(starts_at, ?2), expired_at = ?2, expired_by = ?3
             WHERE id = ?1",
            params![id, millis(now), by],
        )?;
        let mut subject = vec![
            ("created_by".into(), by.to_string()),
            ("silence_id".into(), id.to_string()),
        ];
        if let Some(comment) = comment {
            subject.push(("comment".into(), comment.to_string()));
        }
        audit_entry(
            conn,
            audit,
            &row.streams.join(","),
            format!("silence-{id}-expired"),
            "hushwatch.silence.expired",
            now,
            subject,
        )?;
    }
    Ok(true)
}

/// Acknowledges the stream's current firing episode.
pub(super) fn acknowledge(
    conn: &Connection,
    stream: &str,
    created_by: &str,
    comment: &str,
    now: DateTime<Utc>,
    audit: bool,
) -> Result<AckOutcome, StoreError> {
    let state: Option<(AlertState, Option<i64>)> = conn
        .query_row(
            "SELECT alert_state, firing_since FROM streams WHERE name = ?1",
            [stream],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((AlertState::Firing, Some(started))) = state else {
        return Ok(AckOutcome::NotFiring);
    };
    let new = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO acknowledgements
                 (stream, started_at, created_by, comment, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![stream, started, created_by, comment, millis(now)])?;
    if new > 0 {
        audit_entry(
            conn,
            audit,
            stream,
            format!("ack-{stream}-{started}"),
            "hushwatch.stream.acknowledged",
            now,
            vec![
                ("created_by".into(), created_by.to_string()),
                ("comment".into(), comment.to_string()),
                ("episode_started_at".into(), rfc(time(started))),
            ],
        )?;
    }
    Ok(AckOutcome::Acknowledged(time(started)))
}

/// Acknowledgements of episodes that are still firing.
pub(super) fn current_acks(conn: &Connection) -> rusqlite::Result<Vec<AckRow>> {
    conn.prepare_cached(
        "SELECT a.stream, a.started_at, a.created_by, a.comment, a.created_at
         FROM acknowledgements a JOIN streams s
           ON s.name = a.stream AND s.firing_since = a.started_at AND s.alert_state = 'firing'
         ORDER BY a.stream",
    )?
    .query_map([], |r| {
        Ok(AckRow {
            stream: r.get(0)?,
            started_at: time(r.get(1)?),
            created_by: r.get(2)?,
            comment: r.get(3)?,
            created_at: time(r.get(4)?),
        })
    })?
    .collect()
}

/// Who planned maintenance windows are stored as created by.
pub const CONFIG_AUTHOR: &str = "config";

/// Makes the stored maintenance windows (silences created by
/// [`CONFIG_AUTHOR`]) match `windows` = (stream, from, until, comment):
/// new ones are stored and audited once, ones no longer configured end now.
pub(super) fn sync_maintenance(
    conn: &Connection,
    windows: &[(String, DateTime<Utc>, DateTime<Utc>, String)],
    now: DateTime<Utc>,
    audit: bool,
) -> Result<(), StoreError> {
    let stored: Vec<SilenceRow> = silences_ending_after(conn, now)?
        .into_iter()
        .filter(|s| s.created_by == CONFIG_AUTHOR && s.expired_by.is_none())
        .collect();
    let same = |s: &SilenceRow, w: &(String, DateTime<Utc>, DateTime<Utc>, String)| {
        s.streams == [w.0.clone()] && s.starts_at == w.1 && s.ends_at == w.2
    };
    for s in stored
        .iter()
        .filter(|s| !windows.iter().any(|w| same(s, w)))
    {
        expire(
            conn,
            s.id,
            CONFIG_AUTHOR,
            Some("maintenance window no longer in the config"),
            now,
            audit,
        )?;
    }
    for w in windows.iter().filter(|w| w.2 > now) {
        if stored.iter().any(|s| same(s, w)) {
            continue;
        }
        let new = NewSilence {
            streams: vec![w.0.clone()],
            kinds: vec!["*".to_string()],
            starts_at: w.1,
            ends_at: w.2,
            comment: w.3.clone(),
            created_by: CONFIG_AUTHOR.to_string(),
        };
        add(conn, &new, now, usize::MAX, audit)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{glob, is_known_kind, PAGE_KINDS};
    use crate::domain::svix::SvixAlert;

    #[test]
    fn page_kinds_lists_every_kind_a_page_can_carry() {
        let svix = [
            SvixAlert::EndpointDisabled,
            SvixAlert::MessagesExhausted,
            SvixAlert::EndpointFailing,
            SvixAlert::EndpointDeleted,
        ];
        // A new variant fails to compile here until it is listed above
        // (and so checked against PAGE_KINDS below).
        for a in svix {
            match a {
                SvixAlert::EndpointDisabled
                | SvixAlert::MessagesExhausted
                | SvixAlert::EndpointFailing
                | SvixAlert::EndpointDeleted => {}
            }
        }
        let mut all: Vec<&str> = svix.iter().map(|a| a.as_str()).collect();
        all.push(crate::domain::alert_kind::AlertKind::Silence.as_str());
        all.push(crate::service::subscriptions::EXPIRING);
        all.push(crate::service::subscriptions::REAUTHORIZATION_REQUIRED);
        all.push(crate::store::reconcile::MISSING_KIND);
        all.push(crate::store::reconcile::REVOKE_MISSED_KIND);
        all.push(crate::store::reconcile::STALE_GRANT_KIND);
        all.sort_unstable();
        let mut listed = PAGE_KINDS.to_vec();
        listed.sort_unstable();
        assert_eq!(all, listed);
    }

    #[test]
    fn kind_patterns_must_match_a_page_kind() {
        for ok in ["*", "silence", "svix_*", "*_disabled", "subscription_*"] {
            assert!(is_known_kind(ok), "{ok}");
        }
        for typo in ["silenced", "svix_exhausted", "svix", "subscriptions_*", ""] {
            assert!(!is_known_kind(typo), "{typo}");
        }
    }

    #[test]
    fn glob_matches_runs_of_characters() {
        assert!(glob("*", "silence"));
        assert!(glob("silence", "silence"));
        assert!(!glob("silence", "silences"));
        assert!(glob("svix_*", "svix_endpoint_disabled"));
        assert!(!glob("svix_*", "silence"));
        assert!(glob("*_disabled", "svix_endpoint_disabled"));
        assert!(glob("s*e*e", "silence"));
        assert!(!glob("s*x*e", "silence"));
        assert!(!glob("ab*ba", "aba"), "head and tail may not overlap");
    }
}
