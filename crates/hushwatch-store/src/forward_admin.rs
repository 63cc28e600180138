//! The operator's relay actions (issue #44) on the rows `store::forward`
//! keeps: list a stream's undelivered events a page at a time, make them
//! due now (`forward retry`), give one up as a dead letter (`forward
//! skip`), give up every undelivered event of a stream being deleted, and
//! replay a window or every dead letter **in chunks**.
//!
//! Why chunks: one replay used to read its whole window into memory and
//! re-queue it in one transaction, so 400k stored rows took 140 MiB and
//! held SQLite's single writer for ~10 s (webhooks waited as long, or got
//! 503). [`replay_chunk`] looks at most `rows` rows (keyset on
//! `(received_at, id)` over the `forwards_window` index, or on `id` over
//! the open-rows index for dead letters), counts and re-queues them with
//! `count(*)` and one ranged `UPDATE`, and lists at most what is still
//! wanted of `REPLAY_LISTED`; `store::Store::replay_forwards` and the
//! service call it until the scope is done, each call its own transaction.
//! A dry run counts the same way and loads no row beyond the listed ones.
//!
//! `held` rows (hushwatch itself cannot send them) are never re-queued by a
//! replay nor made due by a retry; a skip may give them up. Every decision
//! is `domain::forward_ops`; this file only reads and writes rows, once for
//! both engines over `store::db::Db`.

use chrono::{DateTime, TimeDelta, Utc};

use super::db::{Arg, Db};
use super::forward::{audit_entry, dead_letter_check, ReplayRequest};
use super::ops::{millis, opt_time};
use super::{audit, stored_time, StoreError};
use hushwatch_core::domain::forward::{ReplayItem, REPLAY_LISTED};
use hushwatch_core::domain::forward_ops::{self as decide, Cursor, ReplayScope, Verdict};

/// One undelivered event as `forward list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardRow {
    pub delivery_id: String,
    pub event_type: String,
    /// As stored: a veiled token under `[store] encryption_key`
    /// (`store::veil`), revealed by the service.
    pub subject: Option<String>,
    pub received_at: DateTime<Utc>,
    pub state: String,
    pub attempts: u32,
    pub last_error: Option<String>,
    pub last_status: Option<u16>,
    /// When it is tried next (pending rows only).
    pub next_attempt_at: Option<DateTime<Utc>>,
}

/// A page of `forward list`: the oldest `limit` rows and how many match.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForwardList {
    pub rows: Vec<ForwardRow>,
    pub total: u64,
}

/// Who acts on a stream's relay rows, when and why; what the pages and
/// the dead letters it may make need.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorAction {
    pub stream: String,
    pub by: String,
    pub comment: Option<String>,
    pub now: DateTime<Utc>,
    pub audit: bool,
    pub notifiers: Vec<String>,
    /// How long a dead letter it makes is kept (`dead_letter_retain`).
    pub dead_letter_retain: TimeDelta,
    /// The config file the sidecar runs from: the dead-letter page's
    /// replay command names it, so it runs as printed.
    pub config_path: String,
}

/// What `forward retry` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOutcome {
    /// The pending events (one, or every one of the stream) are due now;
    /// `held` were left held.
    Retried { pending: u64, held: u64 },
    /// `--id` named a row that cannot be retried (unknown, delivered, a
    /// dead letter, held).
    Refused(Verdict),
}

/// One replay transaction's work (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayChunk {
    pub request: ReplayRequest,
    pub scope: ReplayScope,
    /// After which row this chunk starts.
    pub after: Cursor,
    /// Rows looked at, at most.
    pub rows: usize,
    /// Items still wanted in the listing.
    pub list: usize,
    /// Re-queued by the chunks before (each chunk audits what it
    /// re-queued, the last one the total).
    pub requeued_before: u64,
}

/// What one chunk did; `next` is where the next starts (`None`: done).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplayStep {
    pub requeued: u64,
    pub already_pending: u64,
    pub items: Vec<ReplayItem>,
    pub next: Option<Cursor>,
}

/// Schema step `0026_forward_webhook_id_index`: a row by its webhook-id
/// (`forward skip|retry --id`, a reconciliation's fate) is an index seek
/// instead of a walk over every row of the stream, delivered ones kept for
/// replay included. `id` last, so "the newest row of that id" is read off
/// the index.
pub(super) const WEBHOOK_ID_INDEX: &str =
    "CREATE INDEX forwards_webhook_id ON forwards (stream, delivery_id, id);";

/// Statements; `$N` on both engines.
pub(super) mod sql {
    // SQLite uses a partial index only when the query repeats its WHERE
    // term: every read of open rows says `state <> 'delivered'`
    // (`forwards_open`), so none of them walks the delivered rows kept for
    // replay.

    /// The open rows of one state (`$3`) of a stream, oldest first: an
    /// index range in id order.
    pub const LIST_STATE: &str = "SELECT delivery_id, event_type, subject, received_at, state,
             attempts, last_error, last_status, next_attempt_at, id
         FROM forwards WHERE stream = $1 AND state <> 'delivered' AND state = $3
         ORDER BY id LIMIT $2";
    pub const COUNT_OPEN: &str =
        "SELECT count(*) FROM forwards WHERE stream = $1 AND state <> 'delivered'";
    pub const COUNT_STATE: &str =
        "SELECT count(*) FROM forwards WHERE stream = $1 AND state <> 'delivered' AND state = $2";
    pub const COUNT_UNDELIVERED: &str = "SELECT count(*) FROM forwards
         WHERE stream = $1 AND state <> 'delivered' AND state IN ('pending', 'held')";
    /// A row by its webhook-id: the open ones first (an index seek), then
    /// a delivered one (kept for replay).
    pub const FIND_OPEN: &str = "SELECT id, state, subject FROM forwards
         WHERE stream = $1 AND delivery_id = $2 AND state <> 'delivered' ORDER BY id DESC LIMIT 1";
    pub const FIND_ANY: &str = "SELECT id, state, subject FROM forwards
         WHERE stream = $1 AND delivery_id = $2 ORDER BY id DESC LIMIT 1";
    /// Due now; a row in flight keeps its lease (its attempt settles it).
    pub const DUE_ONE: &str = "UPDATE forwards SET next_attempt_at = $2
         WHERE id = $1 AND state = 'pending' AND next_attempt_at > $2";
    pub const DUE_ALL: &str = "UPDATE forwards SET next_attempt_at = $2
         WHERE stream = $1 AND state <> 'delivered' AND state = 'pending'
           AND next_attempt_at > $2";
    /// A dead letter now. The claim token moves, so an attempt in flight
    /// settles nothing (`store::forward::sql::SETTLE` needs its token).
    pub const GIVE_UP_ONE: &str = "UPDATE forwards
         SET state = 'dead', claimed_by = NULL, lease_until = NULL,
             claim_token = claim_token + 1, settled_at = $2, prune_at = $3, last_error = $4
         WHERE id = $1 AND state IN ('pending', 'held')";
    pub const GIVE_UP_SOME: &str = "UPDATE forwards
         SET state = 'dead', claimed_by = NULL, lease_until = NULL,
             claim_token = claim_token + 1, settled_at = $2, prune_at = $3, last_error = $4
         WHERE id IN (SELECT id FROM forwards
                      WHERE stream = $1 AND state <> 'delivered' AND state IN ('pending', 'held')
                      ORDER BY id LIMIT $5)";

    /// The last row of a window chunk: `$5` rows after the cursor
    /// (`$2`, `$3`) in (received_at, id) order, which is the
    /// `forwards_window` index's (SQLite's index carries the rowid). The
    /// range starts at the cursor's instant, so no chunk scans the rows
    /// before it.
    pub const WINDOW_END: &str = "SELECT received_at, id FROM forwards
         WHERE stream = $1 AND received_at >= $2 AND received_at < $4
           AND (received_at > $2 OR id > $3)
         ORDER BY received_at, id LIMIT 1 OFFSET $5";
    /// The rows after the cursor (`$2`, `$3`) up to the chunk's end (`$4`,
    /// `$5`; the last chunk's is the window's last instant). One upper
    /// bound only: given the window's end as well, SQLite may take that
    /// one for the index range and scan the rest of the window in every
    /// chunk.
    pub const WINDOW_RANGE: &str = "stream = $1 AND received_at >= $2 AND received_at <= $4
           AND (received_at > $2 OR id > $3) AND (received_at < $4 OR id <= $5)";
    pub const WINDOW_ORDER: &str = "received_at, id";
    /// Dead letters in id order over the open-rows index.
    pub const DEAD_END: &str = "SELECT received_at, id FROM forwards
         WHERE stream = $1 AND state <> 'delivered' AND state = 'dead' AND id > $2
         ORDER BY id LIMIT 1 OFFSET $3";
    pub const DEAD_RANGE: &str =
        "stream = $1 AND state <> 'delivered' AND state = 'dead' AND id > $2 AND id <= $3";
    pub const DEAD_ORDER: &str = "id";
    /// What a replay re-queues (everything else is still to be sent).
    pub const REPLAYABLE: &str = "state IN ('delivered', 'dead')";
    /// As `store::forward::sql::REQUEUE`: the whole ladder again.
    pub const REQUEUE_SET: &str = "state = 'pending', next_attempt_at = $N, give_up_from = $N,
             attempts = 0, last_error = NULL, last_status = NULL, settled_at = NULL,
             prune_at = NULL, replays = replays + 1";
}

type ListColumns = (
    String,
    String,
    Option<String>,
    i64,
    String,
    i64,
    Option<String>,
    Option<i64>,
    i64,
    i64,
);

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The oldest `limit` open rows of `stream` (of `state` only, if given)
/// and how many there are in all. Without a state, each state's oldest
/// `limit` (three index ranges) merged by id: never a sort of every open
/// row.
pub(super) async fn list<D: Db>(
    db: &D,
    stream: &str,
    state: Option<&str>,
    limit: i64,
) -> Result<ForwardList, StoreError> {
    let states: Vec<&str> = match state {
        Some(s) => vec![s],
        None => decide::LISTED_STATES.to_vec(),
    };
    let mut rows: Vec<ListColumns> = Vec::new();
    for state in &states {
        rows.extend(db.rows(sql::LIST_STATE, &[&stream, &limit, state]).await?);
    }
    rows.sort_by_key(|r| r.9);
    rows.truncate(usize::try_from(limit).unwrap_or(0));
    let (total,): (i64,) = match state {
        None => db.one(sql::COUNT_OPEN, &[&stream]).await?,
        Some(state) => db.one(sql::COUNT_STATE, &[&stream, &state]).await?,
    };
    let rows = rows
        .into_iter()
        .map(|r| {
            let pending = r.4 == "pending";
            Ok(ForwardRow {
                delivery_id: r.0,
                event_type: r.1,
                subject: r.2,
                received_at: stored_time(r.3)?,
                state: r.4,
                attempts: u32::try_from(r.5).unwrap_or(u32::MAX),
                last_error: r.6,
                last_status: r.7.and_then(|s| u16::try_from(s).ok()),
                next_attempt_at: if pending { opt_time(Some(r.8)) } else { None },
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(ForwardList {
        rows,
        total: count(total),
    })
}

/// The newest row of `stream` with that webhook-id: (row id, state,
/// subject).
async fn find<D: Db>(
    db: &D,
    stream: &str,
    delivery_id: &str,
) -> Result<Option<(i64, String, Option<String>)>, StoreError> {
    if let Some(row) = db.opt(sql::FIND_OPEN, &[&stream, &delivery_id]).await? {
        return Ok(Some(row));
    }
    db.opt(sql::FIND_ANY, &[&stream, &delivery_id]).await
}

fn operator_entry(
    a: &OperatorAction,
    delivery_id: Option<&str>,
    what: String,
    subject: Option<&str>,
) -> super::NewEvent {
    let mut e = audit_entry(&a.stream, delivery_id, what, None, subject, a.now);
    e.channel = "operator";
    e
}

/// `forward retry`: one pending event (`delivery_id`) or every pending
/// event of the stream due now, audited. Held rows stay held.
pub(super) async fn retry<D: Db>(
    db: &D,
    a: &OperatorAction,
    delivery_id: Option<&str>,
) -> Result<RetryOutcome, StoreError> {
    audit::lock_head(db, a.audit).await?;
    let now = millis(a.now);
    let (pending, held, subject) = match delivery_id {
        Some(id) => {
            let row = find(db, &a.stream, id).await?;
            let verdict = decide::retry_verdict(row.as_ref().map(|r| r.1.as_str()));
            let Some((row_id, _, subject)) = row.filter(|_| verdict == Verdict::Go) else {
                return Ok(RetryOutcome::Refused(verdict));
            };
            db.exec(sql::DUE_ONE, &[&row_id, &now]).await?;
            (1, 0, subject)
        }
        None => {
            db.exec(sql::DUE_ALL, &[&a.stream, &now]).await?;
            let (pending,): (i64,) = db.one(sql::COUNT_STATE, &[&a.stream, &"pending"]).await?;
            let (held,): (i64,) = db.one(sql::COUNT_STATE, &[&a.stream, &"held"]).await?;
            (count(pending), count(held), None)
        }
    };
    if a.audit {
        let what = decide::retry_summary(&a.by, delivery_id, pending, a.comment.as_deref());
        audit::append_audit(
            db,
            &operator_entry(a, delivery_id, what, subject.as_deref()),
        )
        .await?;
    }
    Ok(RetryOutcome::Retried { pending, held })
}

/// `forward skip`: a pending or held event becomes a dead letter now,
/// audited with the comment; the dead-letter alert fires as for any dead
/// letter. Anything but [`Verdict::Go`] changed nothing.
pub(super) async fn skip<D: Db>(
    db: &D,
    a: &OperatorAction,
    delivery_id: &str,
) -> Result<Verdict, StoreError> {
    audit::lock_head(db, a.audit).await?;
    let row = find(db, &a.stream, delivery_id).await?;
    let verdict = decide::skip_verdict(row.as_ref().map(|r| r.1.as_str()));
    let Some((row_id, _, subject)) = row.filter(|_| verdict == Verdict::Go) else {
        return Ok(verdict);
    };
    let comment = a.comment.as_deref().unwrap_or_default();
    let changed = db
        .exec(
            sql::GIVE_UP_ONE,
            &[
                &row_id,
                &millis(a.now),
                &millis(a.now + a.dead_letter_retain),
                &decide::skipped_error(&a.by, a.now, comment),
            ],
        )
        .await?;
    if changed == 0 {
        // Settled by another replica between the read and the update
        // (PostgreSQL): answer for the state it is in now.
        let now = find(db, &a.stream, delivery_id).await?;
        return Ok(
            match decide::skip_verdict(now.as_ref().map(|r| r.1.as_str())) {
                Verdict::Go => Verdict::Unknown,
                verdict => verdict,
            },
        );
    }
    if a.audit {
        let what = decide::skip_summary(&a.by, delivery_id, comment);
        audit::append_audit(
            db,
            &operator_entry(a, Some(delivery_id), what, subject.as_deref()),
        )
        .await?;
    }
    page_dead_letters(db, a).await?;
    Ok(Verdict::Go)
}

/// Fires the dead-letter alert as a settle that made a dead letter would.
/// The alert's paged flag lives in the stream's run row, which an
/// unordered stream gets only at its first settle: made here first, so a
/// second dead letter does not page again.
async fn page_dead_letters<D: Db>(db: &D, a: &OperatorAction) -> Result<(), StoreError> {
    db.exec(super::forward::sql::QUEUE, &[&a.stream]).await?;
    dead_letter_check(db, &a.stream, a.now, &a.notifiers, &a.config_path).await
}

/// Pending and held rows of `stream`: what deleting it would leave unsent.
pub(super) async fn undelivered<D: Db>(db: &D, stream: &str) -> Result<u64, StoreError> {
    let (n,): (i64,) = db.one(sql::COUNT_UNDELIVERED, &[&stream]).await?;
    Ok(count(n))
}

/// Up to `limit` pending or held rows of a stream being deleted with force
/// become dead letters (audited, paged); how many. Called until it
/// answers 0, so no one transaction holds the writer for a whole backlog.
pub(super) async fn give_up<D: Db>(
    db: &D,
    a: &OperatorAction,
    limit: i64,
) -> Result<u64, StoreError> {
    audit::lock_head(db, a.audit).await?;
    let n = db
        .exec(
            sql::GIVE_UP_SOME,
            &[
                &a.stream,
                &millis(a.now),
                &millis(a.now + a.dead_letter_retain),
                &decide::given_up_error(&a.by, a.now),
                &limit,
            ],
        )
        .await?;
    if n > 0 {
        if a.audit {
            let what = decide::given_up_summary(&a.by, n);
            audit::append_audit(db, &operator_entry(a, None, what, None)).await?;
        }
        page_dead_letters(db, a).await?;
    }
    Ok(n)
}

/// What removing a templated stream did, decided in the transaction that
/// removes it: the count a `DELETE` answers 409 with is the count of that
/// transaction, and an event stored before it is never left behind
/// undelivered by a stream that is gone (on SQLite the single writer
/// orders it before or after; on PostgreSQL the stream's row lock does:
/// see `forward::templated_stream_stands`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamRemoval {
    /// Removed; `gave_up` undelivered events became dead letters with it.
    Removed {
        gave_up: u64,
    },
    NotFound,
    /// Not removed: this many are undelivered and `force` was not given.
    Undelivered(u64),
}

/// Removes the templated stream `a.stream` in one transaction with the
/// count of its undelivered events; with `force` those become dead letters
/// (audited, paged) in the same transaction. The service gives most of
/// them up first in bounded chunks, so this one has at most the few that
/// arrived meanwhile.
pub(super) async fn remove_stream<D: Db>(
    db: &D,
    a: &OperatorAction,
    force: bool,
) -> Result<StreamRemoval, StoreError> {
    if D::POSTGRES {
        // Waits for every ingest transaction storing a relay row for this
        // stream (each share-locks this row, `forward::insert`) so the
        // count below sees their rows, and makes later ones find the
        // stream gone.
        let _: Option<(String,)> = db
            .opt(
                "SELECT name FROM templated_streams WHERE name = $1 FOR UPDATE",
                &[&a.stream],
            )
            .await?;
    }
    let n = undelivered(db, &a.stream).await?;
    if n > 0 && !force {
        return Ok(StreamRemoval::Undelivered(n));
    }
    if !super::core::remove_templated_stream(db, &a.stream).await? {
        return Ok(StreamRemoval::NotFound);
    }
    let gave_up = if n > 0 {
        give_up(db, a, i64::try_from(n).unwrap_or(i64::MAX)).await?
    } else {
        0
    };
    Ok(StreamRemoval::Removed { gave_up })
}

/// The statement parts of a chunk's scope: its row predicate (`$1`…),
/// how many parameters that takes, and its order.
fn scope_sql(scope: ReplayScope) -> (&'static str, usize, &'static str) {
    match scope {
        ReplayScope::Window => (sql::WINDOW_RANGE, 5, sql::WINDOW_ORDER),
        ReplayScope::DeadLetters => (sql::DEAD_RANGE, 3, sql::DEAD_ORDER),
    }
}

/// ` AND event_type IN ($first, …)` for `n` types; empty for none.
fn types_clause(first: usize, n: usize) -> String {
    if n == 0 {
        return String::new();
    }
    let list: Vec<String> = (first..first + n).map(|i| format!("${i}")).collect();
    format!(" AND event_type IN ({})", list.join(", "))
}

fn push_types<'a>(args: &mut Vec<&'a dyn Arg>, types: &'a [String]) {
    for t in types {
        args.push(t);
    }
}

/// One replay transaction (see the module documentation).
pub(super) async fn replay_chunk<D: Db>(db: &D, c: &ReplayChunk) -> Result<ReplayStep, StoreError> {
    let r = &c.request;
    let offset = i64::try_from(c.rows.max(1) - 1).unwrap_or(i64::MAX);
    let to = millis(r.to);
    let found: Option<(i64, i64)> = match c.scope {
        ReplayScope::Window => {
            db.opt(
                sql::WINDOW_END,
                &[&r.stream, &c.after.0, &c.after.1, &to, &offset],
            )
            .await?
        }
        ReplayScope::DeadLetters => {
            db.opt(sql::DEAD_END, &[&r.stream, &c.after.1, &offset])
                .await?
        }
    };
    // `to` is exclusive; stored instants are whole milliseconds.
    let (end, last) = decide::chunk_end(found, to - 1);
    let write = !r.dry_run;
    let now = millis(r.now);

    let (range, fixed, order) = scope_sql(c.scope);
    let mut args: Vec<&dyn Arg> = match c.scope {
        ReplayScope::Window => vec![&r.stream, &c.after.0, &c.after.1, &end.0, &end.1],
        ReplayScope::DeadLetters => vec![&r.stream, &c.after.1, &end.1],
    };
    let types_at = |first: usize| types_clause(first, r.types.len());

    let (replayable, still_pending): (i64, i64) = {
        let mut a = args.clone();
        push_types(&mut a, &r.types);
        db.one(
            &format!(
                "SELECT count(CASE WHEN {re} THEN 1 END), count(CASE WHEN NOT ({re}) THEN 1 END)
                 FROM forwards WHERE {range}{types}",
                re = sql::REPLAYABLE,
                types = types_at(fixed + 1),
            ),
            &a,
        )
        .await?
    };

    let mut items = Vec::new();
    if c.list > 0 && replayable > 0 {
        let limit = i64::try_from(c.list.min(REPLAY_LISTED)).unwrap_or(0);
        let mut a = args.clone();
        a.push(&limit);
        push_types(&mut a, &r.types);
        let rows: Vec<(String, String, i64, String)> = db
            .rows(
                &format!(
                    "SELECT delivery_id, event_type, received_at, state FROM forwards
                     WHERE {range} AND {re}{types} ORDER BY {order} LIMIT ${lim}",
                    re = sql::REPLAYABLE,
                    types = types_at(fixed + 2),
                    lim = fixed + 1,
                ),
                &a,
            )
            .await?;
        for (delivery_id, event_type, at, state) in rows {
            items.push(ReplayItem {
                delivery_id,
                event_type,
                received_at: stored_time(at)?,
                state,
            });
        }
    }

    let mut requeued = count(replayable);
    // Each chunk that re-queues rows is audited in its own transaction, so
    // a replay cut off midway (a crash, the store timeout) leaves no
    // re-queued event unaudited. The audit head is locked before any row
    // is written (the ingest order: head, then rows; the reads above lock
    // nothing).
    audit::lock_head(db, write && r.audit && (last || replayable > 0)).await?;
    if write {
        if replayable > 0 {
            args.push(&now);
            push_types(&mut args, &r.types);
            requeued = db
                .exec(
                    &format!(
                        "UPDATE forwards SET {set} WHERE {range} AND {re}{types}",
                        set = sql::REQUEUE_SET.replace("$N", &format!("${}", fixed + 1)),
                        re = sql::REPLAYABLE,
                        types = types_at(fixed + 2),
                    ),
                    &args,
                )
                .await?;
        }
        if !last && requeued > 0 && r.audit {
            let mut entry = super::forward::replay_entry(r, requeued);
            if c.scope == ReplayScope::DeadLetters {
                entry.event_type = decide::dead_letters_replay_summary(&r.by, requeued, &r.types);
            }
            entry.event_type =
                decide::replay_part_summary(&entry.event_type, c.requeued_before + requeued);
            audit::append_audit(db, &entry).await?;
        }
        if last {
            let total = c.requeued_before + requeued;
            if r.audit {
                let mut entry = super::forward::replay_entry(r, total);
                if c.scope == ReplayScope::DeadLetters {
                    entry.event_type = decide::dead_letters_replay_summary(&r.by, total, &r.types);
                }
                audit::append_audit(db, &entry).await?;
            }
            dead_letter_check(db, &r.stream, r.now, &r.notifiers, &r.config_path).await?;
        }
    }
    Ok(ReplayStep {
        requeued,
        already_pending: count(still_pending),
        items,
        next: (!last).then_some(end),
    })
}

/// A whole replay: [`ReplayChunk`]s from the scope's start until one says
/// it was the last, each through `step` (one transaction; the service
/// bounds each by the store timeout). Memory is one chunk's listing, not
/// the window.
pub async fn replay_in_chunks<E, F, Fut>(
    request: ReplayRequest,
    scope: ReplayScope,
    rows: usize,
    mut step: F,
) -> Result<hushwatch_core::domain::forward::ReplayOutcome, E>
where
    F: FnMut(ReplayChunk) -> Fut,
    Fut: std::future::Future<Output = Result<ReplayStep, E>>,
{
    let mut out = hushwatch_core::domain::forward::ReplayOutcome::default();
    let mut after = decide::first_cursor(millis(request.from));
    loop {
        let chunk = ReplayChunk {
            request: request.clone(),
            scope,
            after,
            rows,
            list: REPLAY_LISTED.saturating_sub(out.items.len()),
            requeued_before: out.count,
        };
        let s = step(chunk).await?;
        out.count += s.requeued;
        out.already_pending += s.already_pending;
        out.items.extend(s.items);
        match s.next {
            Some(next) => after = next,
            None => return Ok(out),
        }
    }
}

impl super::Store {
    /// A whole replay of `request`'s window, chunk by chunk (each chunk one
    /// transaction of [`REPLAY_CHUNK`](decide::REPLAY_CHUNK) rows at most).
    pub async fn replay_forwards(
        &self,
        request: ReplayRequest,
    ) -> Result<hushwatch_core::domain::forward::ReplayOutcome, StoreError> {
        replay_in_chunks(
            request,
            ReplayScope::Window,
            decide::REPLAY_CHUNK,
            |chunk| self.backend.replay_forwards_chunk(chunk),
        )
        .await
    }
}
