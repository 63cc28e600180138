//! The outbox's rows, written once over [`Db`] for both engines: the
//! pages a transition, a keyed alert (Svix, subscriptions, reconciliation,
//! relay), a reminder or an escalation queues, and what delivery records
//! about each send. Like `store::core`, every function runs inside the
//! caller's transaction; an operator silence may hold a page instead
//! (`store::silences`).

use chrono::{DateTime, Utc};
use hushwatch_core::domain::alert_kind::AlertKind;

use super::core::{alert_state, salt, state_str, stream_row_locked};
use super::db::{Cells, Columns, Db};
use super::ops::{alert_id_for, count, hex32, millis, page_key_for, uuid_like, KeyedAlert};
use super::{
    AlertState, Attempt, OutboxRow, OutboxSummary, PageKind, QueuePlace, Readable, StoreError,
    Transition, Unreadable,
};

pub(super) fn page_kind(s: &str) -> Result<PageKind, StoreError> {
    match s {
        "page" => Ok(PageKind::Page),
        "reminder" => Ok(PageKind::Reminder),
        "escalation" => Ok(PageKind::Escalation),
        other => Err(unknown("page_kind", other)),
    }
}

/// A stored `alert_kind`. Every kind any hushwatch stored parses (`svix`
/// included); anything else was written by a newer binary or altered at
/// rest, and is named, never read as some other kind.
pub(super) fn alert_kind(s: &str) -> Result<AlertKind, StoreError> {
    AlertKind::parse(s).ok_or_else(|| unknown("alert_kind", s))
}

/// Longest stored value an error quotes: the value is whatever the row
/// holds, and the error reaches logs and pages.
const QUOTED: usize = 64;

fn unknown(column: &str, value: &str) -> StoreError {
    let mut quoted: String = value.chars().take(QUOTED).collect();
    if quoted.len() < value.len() {
        quoted.push('…');
    }
    StoreError::Sql(format!("unknown {column} {quoted:?}"))
}

/// An outbox row read on its own: the row, or (when this binary cannot
/// read it) its id, its queue and why, so that a read over many rows never
/// fails as a whole because of one.
pub(super) struct OutboxRead(pub(super) Result<OutboxRow, Unreadable>);

/// [`OUTBOX_COLUMNS`], in order.
impl Columns for OutboxRead {
    fn read(r: &impl Cells) -> Result<Self, StoreError> {
        let e = match OutboxRow::read(r) {
            Ok(row) => return Ok(OutboxRead(Ok(row))),
            Err(e) => e,
        };
        // The id is an INTEGER PRIMARY KEY: a row whose id does not read is
        // no row of this schema, and fails the read.
        let id: i64 = r.cell(0)?;
        let mut unreadable = Unreadable::new(format!("outbox row {id}"), &e);
        // Plain text columns, which read whatever the row holds.
        if let (Ok(Some(alert_id)), Ok(notifier)) =
            (r.cell::<Option<String>>(8), r.cell::<String>(2))
        {
            unreadable.queue = Some(QueuePlace {
                id,
                alert_id,
                notifier,
            });
        }
        Ok(OutboxRead(Err(unreadable)))
    }
}

/// Splits rows read one by one into those read and those named.
pub(super) fn outbox_rows(read: Vec<OutboxRead>) -> Readable<OutboxRow> {
    let mut out = Readable::default();
    for OutboxRead(row) in read {
        match row {
            Ok(row) => out.rows.push(row),
            Err(unreadable) => out.unreadable.push(unreadable),
        }
    }
    out
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
            alert_kind: alert_kind(&r.cell::<String>(16)?)?,
            severity: r.cell(17)?,
            source: r.cell(18)?,
            endpoint_id: r.cell(19)?,
            resumed_at: r.opt_time(20)?,
        })
    }
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
            &alert.kind.as_str(),
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
    Ok(hushwatch_core::domain::mute::extra_allowed(
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

#[cfg(any(test, feature = "test-support"))]
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
    // A failed page that no longer reads is left out of the list (it is
    // done: nothing waits on it) but stays in the counts above.
    let failures: Vec<OutboxRead> = db
        .rows(
            &format!(
                "SELECT {OUTBOX_COLUMNS} FROM outbox o WHERE o.outcome = 'failed'
                 ORDER BY o.done_at DESC, o.id DESC LIMIT $1"
            ),
            &[&limit],
        )
        .await?;
    summary.recent_failures = failures
        .into_iter()
        .filter_map(|OutboxRead(r)| r.ok())
        .collect();
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
///
/// A row this binary cannot read is named in `unreadable`, not re-posted.
pub(super) async fn active_firing_pages<D: Db>(db: &D) -> Result<Readable<OutboxRow>, StoreError> {
    let read = db
        .rows(
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
        .await?;
    Ok(outbox_rows(read))
}

/// The pending pages, oldest first; one this binary cannot read is named
/// in `unreadable` and stays pending (a newer replica may send it).
pub(super) async fn pending_outbox<D: Db>(db: &D) -> Result<Readable<OutboxRow>, StoreError> {
    let read = db
        .rows(
            &format!(
                "SELECT {OUTBOX_COLUMNS} FROM outbox o WHERE o.status = 'pending' ORDER BY o.id"
            ),
            &[],
        )
        .await?;
    Ok(outbox_rows(read))
}
