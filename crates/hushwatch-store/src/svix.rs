//! State of Svix endpoints, from operational webhooks. Each operational
//! event is recorded (dedup + audit) and applied to the endpoint state in
//! the same transaction, and any alert crossing it causes writes its pages
//! to the outbox in that transaction too: an acknowledged operational
//! webhook can never lose its page.
//!
//! Which row an event lands on past the endpoint cap, the alerts it calls
//! for and what its pages say are decided in `domain::svix` (`event_place`,
//! `event_changes`, `page_plans`, ...); what it writes, as the statements
//! of `sql`, is decided here (`apply`: its input is the event as ingest
//! parsed it). The operations that read the rows, call the decisions and
//! write their outcome are written once, over `store::db::Db`.

use super::db::Db;
use super::ops::{delivery_hash, millis, opt_time, KeyedAlert};
use super::pg::TextArray;
use super::{audit, core, outbox};
use super::{AlertState, EventOutcome, NewEvent, StoreError, Transition};
use chrono::{DateTime, Utc};
use hushwatch_core::domain::svix::{
    ack_place, alert_changes, event_changes, event_place, page_plans, AlertChange, DisableTrigger,
    EndpointSummary, PageFacts, PagePlan, Place, SourceRows, REDELIVERED_EVENT, REGROUPED,
};
pub use hushwatch_core::domain::svix::{
    LostMessage, RecoveredMessage, SvixEndpointRow, SvixPage, GROUPED_ENDPOINT,
    MAX_ENDPOINTS_PER_SOURCE,
};
use hushwatch_core::ingest::svix_ops::{AttemptRef, EndpointRef, OpEvent, Trigger};
use std::collections::BTreeMap;
use std::sync::Arc;

pub(super) const MIGRATION: &str = "CREATE TABLE svix_endpoints (
        source          TEXT NOT NULL,
        endpoint_id     TEXT NOT NULL,
        app_id          TEXT,
        endpoint_uid    TEXT,
        disabled        INTEGER NOT NULL DEFAULT 0,
        disable_trigger TEXT,
        fail_since      INTEGER,
        disabled_at     INTEGER,
        deleted         INTEGER NOT NULL DEFAULT 0,
        exhausted_total INTEGER NOT NULL DEFAULT 0,
        lost_paged      INTEGER NOT NULL DEFAULT 0,
        updated_at      INTEGER NOT NULL,
        PRIMARY KEY (source, endpoint_id)
    );
    CREATE TABLE svix_messages (
        source       TEXT NOT NULL,
        endpoint_id  TEXT NOT NULL,
        msg_id       TEXT NOT NULL,
        msg_event_id TEXT,
        state        TEXT NOT NULL CHECK (state IN ('failing', 'recovered', 'exhausted')),
        status_code  INTEGER NOT NULL,
        attempt_at   INTEGER,
        received_at  INTEGER NOT NULL,
        acknowledged INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (source, endpoint_id, msg_id)
    );";

/// Where an operational event's pages go, and what it means in config.
#[derive(Debug, Clone)]
pub struct SvixApply {
    /// The `[svix.NAME]` block.
    pub source: String,
    /// The stream the endpoint feeds (its pages are filed under it).
    pub stream: String,
    pub notifiers: Vec<String>,
    pub event: OpEvent,
    /// Event types that clear a disabled state besides `endpoint.enabled`.
    pub clears_on: Vec<String>,
    pub event_type: String,
    /// The endpoint is mapped to a stream in config: its deletion notifies.
    pub mapped: bool,
    pub now: DateTime<Utc>,
    /// `[svix.NAME] endpoints` (id or uid → stream), for an endpoint whose
    /// uid the event left out but an earlier event stored (see [`learned`]).
    pub endpoint_map: Arc<BTreeMap<String, String>>,
    /// The streams an accepted delivery on which ends a lost message (its
    /// `svix-id` is the lost `msgId`): the mapped stream, or every stream
    /// of the source for an unmapped endpoint.
    pub join_streams: Vec<String>,
    /// Append the join of a lost message with its redelivery to the audit
    /// chain (`[audit] enabled`).
    pub audit: bool,
}

/// `svix_messages.acknowledged` of a lost message whose id was later
/// accepted on a stream the endpoint feeds (recovered by its redelivery);
/// 1 is acknowledged by hand. No schema change: the column had no CHECK.
pub const REDELIVERED: i64 = 2;

/// Lost messages recovered by redelivery listed per endpoint in
/// `/v1/status` (the newest; `recovered_total` counts them all).
pub const RECOVERED_SHOWN: i64 = 20;

/// Message ids named in one join's audit entry (`msg_count` has them all).
const JOIN_IDS_AUDITED: usize = 50;

/// The apply for an endpoint whose event left its uid out (the open-source
/// server omits `endpointUid` from `message.attempt.*` and sends it null in
/// `endpoint.disabled`), when an earlier event stored the uid and config
/// maps that uid: the stored pair maps it, in the store, so every replica
/// and a restart map it the same. None when nothing changes.
pub(super) fn learned(a: &SvixApply, stored_uid: Option<&str>) -> Option<SvixApply> {
    if a.mapped {
        return None;
    }
    let stream = a.endpoint_map.get(stored_uid?)?;
    let mut out = a.clone();
    out.stream = stream.clone();
    out.mapped = true;
    out.join_streams = vec![stream.clone()];
    Some(out)
}

/// Dedup keys under which a redelivery of `msg_id` would have been
/// accepted: the `svix-id` of a signed webhook is the Svix message id that
/// `message.attempt.exhausted` names as `msgId`, and the webhook route keys
/// it as channel `webhook` on its stream (`store::ops::delivery_hash`).
pub(super) fn redelivery_hashes(a: &SvixApply, msg_id: &str) -> Vec<String> {
    a.join_streams
        .iter()
        .map(|stream| delivery_hash("webhook", stream, msg_id))
        .collect()
}

/// The audit entry recording that `ids` (lost messages of `endpoint_id`)
/// were joined with their accepted redelivery.
pub(super) fn join_entry(a: &SvixApply, endpoint_id: &str, ids: &[String]) -> NewEvent {
    let mut subject_ids = vec![
        ("svix_source".to_string(), a.source.clone()),
        ("endpoint_id".to_string(), endpoint_id.to_string()),
        ("stream".to_string(), a.join_streams.join(",")),
        ("msg_count".to_string(), ids.len().to_string()),
    ];
    subject_ids.extend(
        ids.iter()
            .take(JOIN_IDS_AUDITED)
            .map(|id| ("msg_id".to_string(), id.clone())),
    );
    NewEvent {
        stream: format!("svix:{}", a.source),
        // No dedup key: the join happens once (the messages leave the lost
        // set in the same transaction).
        delivery_id: None,
        event_type: REDELIVERED_EVENT.to_string(),
        event_time: None,
        received_at: a.now,
        feeds_clock: false,
        body_sha256: None,
        channel: "svix",
        signature_verified: false,
        subject_ids,
        audit: true,
        access: None,
        forward: None,
    }
}

/// A stored count (never negative) as the store's `u64`.
pub(super) fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

// ---------------------------------------------------------------------------
// What an event writes (pure, taken once for both engines), and the thin
// conversions between the rows and `domain::svix`'s inputs and outputs.
// ---------------------------------------------------------------------------

/// The row an event about `e` updates: its own, or [`GROUPED_ENDPOINT`]
/// once the source tracks `MAX_ENDPOINTS_PER_SOURCE` others. The grouped
/// row keeps no app id or uid (it stands for many endpoints).
pub(super) fn tracked(e: &EndpointRef, id: &str) -> EndpointRef {
    if id == e.endpoint_id {
        return e.clone();
    }
    EndpointRef {
        app_id: None,
        endpoint_id: id.to_string(),
        endpoint_uid: None,
    }
}

/// The row `place` names. Folding the first endpoint past the cap is
/// logged once (the status page and `/v1/status` say it from then on).
fn row_id(place: Place, source: &str, endpoint_id: &str) -> String {
    if place == (Place::Grouped { first: true }) {
        tracing::warn!(
            source,
            max = MAX_ENDPOINTS_PER_SOURCE,
            "Svix source has more than the maximum of endpoints tracked one by one; further endpoints are grouped as \"{GROUPED_ENDPOINT}\""
        );
    }
    place.id(endpoint_id).to_string()
}

/// One write an event makes to its row, each a statement of [`sql`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Write {
    /// [`sql::TOUCH`]: the row exists, with the ids the event gave.
    Touch(EndpointRef),
    /// [`sql::DISABLE`]: `trigger` is `automatic` or `manual`.
    Disable {
        trigger: &'static str,
        fail_since: Option<i64>,
    },
    /// [`sql::CLEAR`]: neither disabled nor deleted any more.
    Clear,
    /// [`sql::DELETE`]: deleted (not for the grouped row: one grouped
    /// endpoint deleted does not delete the others); `clear` ends a disable.
    Delete { clear: bool, grouped: bool },
    /// [`sql::NEWS`]: news about a message (`failing`, `recovered`,
    /// `exhausted`).
    News {
        attempt: AttemptRef,
        state: &'static str,
    },
    /// [`sql::COUNT_EXHAUSTED`].
    CountExhausted,
}

/// What an operational event does to the row `id` it was placed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Apply {
    /// The writes, in order.
    pub writes: Vec<Write>,
    /// The endpoint's own row was marked deleted (a mapped one notifies).
    pub deleted: bool,
    /// An exhausted message to join with its redelivery, if accepted
    /// already (the receiver committed but Svix saw no 2xx in time).
    pub join: Option<String>,
}

/// The writes of `a`'s event on the row `id` (the endpoint's own, or the
/// grouped row; see [`event_place`]). None for an event that changes no
/// endpoint.
pub(super) fn apply(a: &SvixApply, id: &str) -> Option<Apply> {
    let real = a.event.endpoint()?;
    let grouped = id != real.endpoint_id;
    let mut writes = vec![Write::Touch(tracked(real, id))];
    let mut deleted = false;
    let mut join = None;
    match &a.event {
        OpEvent::EndpointDisabled {
            fail_since,
            trigger,
            ..
        } => writes.push(Write::Disable {
            trigger: match trigger {
                Trigger::Automatic => "automatic",
                Trigger::Manual => "manual",
            },
            fail_since: fail_since.map(millis),
        }),
        OpEvent::EndpointEnabled(_) => writes.push(Write::Clear),
        OpEvent::EndpointUpdated(_) | OpEvent::EndpointCreated(_) => {
            if a.clears_on.contains(&a.event_type) {
                writes.push(Write::Clear);
            }
        }
        OpEvent::EndpointDeleted(_) => {
            writes.push(Write::Delete {
                clear: a.clears_on.contains(&a.event_type),
                grouped,
            });
            deleted = !grouped;
        }
        OpEvent::AttemptFailing { attempt, .. } => writes.push(Write::News {
            attempt: attempt.clone(),
            state: "failing",
        }),
        OpEvent::AttemptRecovered { attempt, .. } => writes.push(Write::News {
            attempt: attempt.clone(),
            state: "recovered",
        }),
        OpEvent::AttemptExhausted { attempt, .. } => {
            writes.push(Write::News {
                attempt: attempt.clone(),
                state: "exhausted",
            });
            writes.push(Write::CountExhausted);
            join = Some(attempt.msg_id.clone());
        }
        OpEvent::BackgroundTaskFinished { .. } | OpEvent::Other => return None,
    }
    Some(Apply {
        writes,
        deleted,
        join,
    })
}

/// An endpoint's `disabled` and `disable_trigger` columns.
pub(super) fn disable_state(disabled: i64, trigger: Option<&str>) -> Option<DisableTrigger> {
    match (disabled, trigger) {
        (1, Some("manual")) => Some(DisableTrigger::Manual),
        (1, _) => Some(DisableTrigger::Automatic),
        _ => None,
    }
}

/// The summary alerts are decided from: [`sql::DISABLED`] (None without a
/// row) and [`sql::COUNTS`].
pub(super) fn summary(
    disabled: Option<(i64, Option<String>)>,
    failing: i64,
    lost: i64,
) -> EndpointSummary {
    EndpointSummary {
        disabled: disabled.and_then(|(d, t)| disable_state(d, t.as_deref())),
        failing: count(failing),
        lost: count(lost),
    }
}

/// [`sql::ENDPOINTS`]'s columns.
pub(super) type EndpointCols = (
    String,
    String,
    Option<String>,
    Option<String>,
    i64,
    Option<String>,
    Option<i64>,
    Option<i64>,
    i64,
    i64,
    i64,
    i64,
);

/// A row of [`sql::ENDPOINTS`], without its messages yet.
pub(super) fn endpoint_row(c: EndpointCols) -> SvixEndpointRow {
    SvixEndpointRow {
        disabled: disable_state(c.4, c.5.as_deref()),
        source: c.0,
        endpoint_id: c.1,
        app_id: c.2,
        endpoint_uid: c.3,
        fail_since: opt_time(c.6),
        disabled_at: opt_time(c.7),
        deleted: c.8 == 1,
        exhausted_total: count(c.9),
        failing: count(c.10),
        lost: Vec::new(),
        recovered: Vec::new(),
        recovered_total: count(c.11),
    }
}

/// A row of [`sql::LOST`].
pub(super) fn lost_message(c: (String, Option<String>, i64, Option<i64>)) -> LostMessage {
    LostMessage {
        msg_id: c.0,
        msg_event_id: c.1,
        status_code: u16::try_from(c.2).unwrap_or(0),
        attempt_at: opt_time(c.3),
    }
}

/// A row of [`sql::RECOVERED`].
pub(super) fn recovered_message(c: (String, Option<String>, Option<i64>)) -> RecoveredMessage {
    RecoveredMessage {
        msg_id: c.0,
        msg_event_id: c.1,
        recovered_at: opt_time(c.2),
    }
}

/// The apply of the join of lost messages with their redeliveries (its
/// pages word the resolve that way).
pub(super) fn redelivered(a: &SvixApply) -> SvixApply {
    SvixApply {
        event_type: REDELIVERED_EVENT.to_string(),
        ..a.clone()
    }
}

/// What `a`'s pages say about its event (`domain::svix::page_plans`).
fn page_facts(a: &SvixApply) -> PageFacts<'_> {
    let endpoint = a.event.endpoint();
    PageFacts {
        source: &a.source,
        stream: &a.stream,
        event_type: &a.event_type,
        join_streams: &a.join_streams,
        endpoint_id: endpoint.map(|e| e.endpoint_id.as_str()),
        app_id: endpoint.and_then(|e| e.app_id.as_deref()),
        failing_attempt: match &a.event {
            OpEvent::AttemptFailing { attempt, .. } => {
                Some((attempt.attempt_at, attempt.status_code))
            }
            _ => None,
        },
    }
}

/// The transition `plan` records: a page to every notifier of the stream
/// the endpoint feeds, with the page's summary as its reason.
fn page_transition(a: &SvixApply, plan: &PagePlan) -> Transition {
    Transition {
        stream: a.stream.clone(),
        to: AlertState::from_firing(plan.page.firing),
        at: a.now,
        reason: plan.page.summary.clone(),
        notifiers: a.notifiers.clone(),
    }
}

fn keyed_alert<'a>(a: &'a SvixApply, plan: &'a PagePlan) -> KeyedAlert<'a> {
    KeyedAlert {
        kind: plan.page.alert.kind(),
        family: "svix",
        key: &plan.key,
        severity: plan.page.severity.as_str(),
        source: &a.source,
        endpoint_id: &plan.page.endpoint_id,
    }
}

/// The statements both engines run, written once with PostgreSQL's `$N`
/// placeholders (`store::db` gives SQLite `?N`). PostgreSQL's row lock
/// (`lock_endpoint`) and its one-round-trip redelivery look-up (`any_seen`)
/// are its own.
pub(super) mod sql {
    /// [`super::SourceRows`] of (source, endpoint_id, grouped id).
    pub const ROWS: &str = "SELECT count(*) FILTER (WHERE endpoint_id = $2),
                count(*) FILTER (WHERE endpoint_id <> $3),
                count(*) FILTER (WHERE endpoint_id = $3)
         FROM svix_endpoints WHERE source = $1";
    pub const STORED_UID: &str =
        "SELECT endpoint_uid FROM svix_endpoints WHERE source = $1 AND endpoint_id = $2";
    /// The table-qualified names in the upserts are what PostgreSQL needs
    /// (an unqualified column is ambiguous there) and SQLite accepts.
    pub const TOUCH: &str =
        "INSERT INTO svix_endpoints (source, endpoint_id, app_id, endpoint_uid, updated_at)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (source, endpoint_id) DO UPDATE SET
           app_id = coalesce(excluded.app_id, svix_endpoints.app_id),
           endpoint_uid = coalesce(excluded.endpoint_uid, svix_endpoints.endpoint_uid),
           updated_at = excluded.updated_at";
    pub const DISABLE: &str = "UPDATE svix_endpoints
         SET disabled = 1, disable_trigger = $3, fail_since = $4, disabled_at = $5
         WHERE source = $1 AND endpoint_id = $2";
    pub const CLEAR: &str =
        "UPDATE svix_endpoints SET disabled = 0, deleted = 0 WHERE source = $1 AND endpoint_id = $2";
    /// `$3`: clears a disable; `$4`: the grouped row (not marked deleted).
    pub const DELETE: &str =
        "UPDATE svix_endpoints SET deleted = CASE WHEN $4 THEN deleted ELSE 1 END,
           disabled = CASE WHEN $3 THEN 0 ELSE disabled END
         WHERE source = $1 AND endpoint_id = $2";
    /// Newer news about a message wins; older news arriving late is
    /// ignored, so `recovered` before `failing` (out of order) cannot leave
    /// it failing. `failing` never un-loses an exhausted message;
    /// `recovered` does (a resend got through).
    pub const NEWS: &str = "INSERT INTO svix_messages
           (source, endpoint_id, msg_id, msg_event_id, state, status_code, attempt_at, received_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (source, endpoint_id, msg_id) DO UPDATE SET
           state = excluded.state, status_code = excluded.status_code,
           attempt_at = excluded.attempt_at, received_at = excluded.received_at,
           msg_event_id = coalesce(excluded.msg_event_id, svix_messages.msg_event_id),
           acknowledged = CASE WHEN excluded.state = 'exhausted' THEN 0
                               ELSE svix_messages.acknowledged END
         WHERE (excluded.attempt_at IS NULL OR svix_messages.attempt_at IS NULL
                OR excluded.attempt_at >= svix_messages.attempt_at)
           AND (excluded.state <> 'failing' OR svix_messages.state <> 'exhausted')";
    pub const COUNT_EXHAUSTED: &str =
        "UPDATE svix_endpoints SET exhausted_total = exhausted_total + 1
         WHERE source = $1 AND endpoint_id = $2";
    pub const DISABLED: &str =
        "SELECT disabled, disable_trigger FROM svix_endpoints WHERE source = $1 AND endpoint_id = $2";
    /// (failing, lost) of an endpoint.
    pub const COUNTS: &str = "SELECT count(*) FILTER (WHERE state = 'failing'),
                count(*) FILTER (WHERE state = 'exhausted' AND acknowledged = 0)
         FROM svix_messages WHERE source = $1 AND endpoint_id = $2";
    pub const SET_LOST_PAGED: &str =
        "UPDATE svix_endpoints SET lost_paged = $3 WHERE source = $1 AND endpoint_id = $2";
    /// After messages left the lost set other than by a page, the count the
    /// last page gave is lowered to what is left, so that new exhaustions
    /// after that still regroup into an updated page. (A CASE, where
    /// SQLite would say `min(a, b)` and PostgreSQL `LEAST(a, b)`.)
    pub const LOWER_LOST_PAGED: &str = "UPDATE svix_endpoints
         SET lost_paged = CASE WHEN lost_paged > $3 THEN $3 ELSE lost_paged END
         WHERE source = $1 AND endpoint_id = $2";
    pub const ACKNOWLEDGE: &str = "UPDATE svix_messages SET acknowledged = 1
         WHERE source = $1 AND endpoint_id = $2 AND msg_id = $3
           AND state = 'exhausted' AND acknowledged = 0";
    /// `$5` is `REDELIVERED`.
    pub const MARK_REDELIVERED: &str =
        "UPDATE svix_messages SET acknowledged = $5, received_at = $4
         WHERE source = $1 AND endpoint_id = $2 AND msg_id = $3
           AND state = 'exhausted' AND acknowledged = 0";
    pub const LOST_IDS: &str = "SELECT msg_id FROM svix_messages
         WHERE source = $1 AND endpoint_id = $2 AND state = 'exhausted' AND acknowledged = 0";
    /// Endpoints (id, uid) whose lost count grew since their last page.
    pub const GROWN: &str = "SELECT e.endpoint_id, e.endpoint_uid FROM svix_endpoints e
         WHERE e.source = $1 AND e.lost_paged > 0 AND e.lost_paged < (
           SELECT count(*) FROM svix_messages m WHERE m.source = e.source
             AND m.endpoint_id = e.endpoint_id AND m.state = 'exhausted' AND m.acknowledged = 0)";
    /// Every endpoint, or one (`$1`, `$2`); `$3` is `REDELIVERED`. The
    /// CASTs give PostgreSQL the parameters' type where `IS NULL` alone
    /// does not.
    pub const ENDPOINTS: &str = "SELECT source, endpoint_id, app_id, endpoint_uid, disabled,
                disable_trigger, fail_since, disabled_at, deleted, exhausted_total,
                (SELECT count(*) FROM svix_messages m WHERE m.source = e.source
                   AND m.endpoint_id = e.endpoint_id AND m.state = 'failing'),
                (SELECT count(*) FROM svix_messages m WHERE m.source = e.source
                   AND m.endpoint_id = e.endpoint_id AND m.state = 'exhausted'
                   AND m.acknowledged = $3)
         FROM svix_endpoints e
         WHERE (CAST($1 AS TEXT) IS NULL OR source = $1)
           AND (CAST($2 AS TEXT) IS NULL OR endpoint_id = $2)
         ORDER BY source, endpoint_id";
    pub const LOST: &str = "SELECT msg_id, msg_event_id, status_code, attempt_at FROM svix_messages
         WHERE source = $1 AND endpoint_id = $2 AND state = 'exhausted' AND acknowledged = 0
         ORDER BY received_at, msg_id";
    /// `$3` is `REDELIVERED`, `$4` `RECOVERED_SHOWN`.
    pub const RECOVERED: &str = "SELECT msg_id, msg_event_id, received_at FROM svix_messages
         WHERE source = $1 AND endpoint_id = $2 AND state = 'exhausted' AND acknowledged = $3
         ORDER BY received_at DESC, msg_id LIMIT $4";
}

// ---------------------------------------------------------------------------
// Rows, on either engine (`store::db`): read them, call the decisions, write
// the outcome. What is PostgreSQL's own: replicas share that database, so
// the endpoint row is locked (`FOR UPDATE`) before its before/after summary
// is read (two replicas applying events for one endpoint take turns and
// each sees the other's committed change), the audit head is locked before
// it, and a redelivery is looked up in one round trip (`= ANY($1)`, an
// array parameter SQLite lacks).
// ---------------------------------------------------------------------------

async fn source_rows<D: Db>(
    db: &D,
    source: &str,
    endpoint_id: &str,
) -> Result<SourceRows, StoreError> {
    let rows = db
        .one(sql::ROWS, &[&source, &endpoint_id, &GROUPED_ENDPOINT])
        .await?;
    Ok(SourceRows::of(rows))
}

/// Locks the endpoint's row for the rest of the transaction on PostgreSQL.
/// With `create_at`, a missing row is created first (the event will touch
/// it anyway), so two replicas recording the first events of a new endpoint
/// also take turns instead of both reading "no state" as their before.
/// SQLite has one writer: nothing to lock, and no row created before the
/// event's own writes.
async fn lock_endpoint<D: Db>(
    db: &D,
    source: &str,
    endpoint_id: &str,
    create_at: Option<i64>,
) -> Result<(), StoreError> {
    if D::ROW_LOCK.is_empty() {
        return Ok(());
    }
    if let Some(now) = create_at {
        db.exec(
            "INSERT INTO svix_endpoints (source, endpoint_id, updated_at) VALUES ($1, $2, $3)
             ON CONFLICT (source, endpoint_id) DO NOTHING",
            &[&source, &endpoint_id, &now],
        )
        .await?;
    }
    let _: Option<(i32,)> = db
        .opt(
            &D::locked("SELECT 1 FROM svix_endpoints WHERE source = $1 AND endpoint_id = $2"),
            &[&source, &endpoint_id],
        )
        .await?;
    Ok(())
}

async fn read_summary<D: Db>(
    db: &D,
    source: &str,
    endpoint_id: &str,
) -> Result<EndpointSummary, StoreError> {
    let disabled = db.opt(sql::DISABLED, &[&source, &endpoint_id]).await?;
    let (failing, lost) = db.one(sql::COUNTS, &[&source, &endpoint_id]).await?;
    Ok(summary(disabled, failing, lost))
}

async fn write<D: Db>(
    db: &D,
    source: &str,
    id: &str,
    w: &Write,
    now: i64,
) -> Result<(), StoreError> {
    match w {
        Write::Touch(e) => {
            db.exec(
                sql::TOUCH,
                &[&source, &e.endpoint_id, &e.app_id, &e.endpoint_uid, &now],
            )
            .await
        }
        Write::Disable {
            trigger,
            fail_since,
        } => {
            db.exec(sql::DISABLE, &[&source, &id, trigger, fail_since, &now])
                .await
        }
        Write::Clear => db.exec(sql::CLEAR, &[&source, &id]).await,
        Write::Delete { clear, grouped } => {
            db.exec(sql::DELETE, &[&source, &id, clear, grouped]).await
        }
        Write::News { attempt: m, state } => {
            db.exec(
                sql::NEWS,
                &[
                    &source,
                    &id,
                    &m.msg_id,
                    &m.msg_event_id,
                    state,
                    &i64::from(m.status_code),
                    &m.attempt_at.map(millis),
                    &now,
                ],
            )
            .await
        }
        Write::CountExhausted => db.exec(sql::COUNT_EXHAUSTED, &[&source, &id]).await,
    }?;
    Ok(())
}

async fn queue_pages<D: Db>(
    db: &D,
    a: &SvixApply,
    endpoint_id: &str,
    changes: &[AlertChange],
) -> Result<Vec<SvixPage>, StoreError> {
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    let row = endpoints(db, Some((&a.source, endpoint_id)))
        .await?
        .pop()
        .ok_or_else(|| StoreError::Sql(format!("unknown Svix endpoint {endpoint_id}")))?;
    let mut pages = Vec::new();
    for plan in page_plans(&page_facts(a), endpoint_id, changes, &row) {
        outbox::queue_keyed_pages(
            db,
            &page_transition(a, &plan),
            a.now,
            &keyed_alert(a, &plan),
        )
        .await?;
        if let Some(lost) = plan.lost_paged {
            db.exec(sql::SET_LOST_PAGED, &[&a.source, &endpoint_id, &lost])
                .await?;
        }
        pages.push(plan.page);
    }
    Ok(pages)
}

pub(super) async fn record<D: Db>(
    db: &D,
    event: &NewEvent,
    a: &SvixApply,
) -> Result<(EventOutcome, Vec<SvixPage>), StoreError> {
    audit::lock_audit_head(db, std::slice::from_ref(event)).await?;
    if core::record_event(db, event).await? == EventOutcome::Duplicate {
        return Ok((EventOutcome::Duplicate, Vec::new()));
    }
    let Some(real) = a.event.endpoint() else {
        return Ok((EventOutcome::Accepted, Vec::new()));
    };
    let stored_uid: Option<(Option<String>,)> = db
        .opt(sql::STORED_UID, &[&a.source, &real.endpoint_id])
        .await?;
    let learned = learned(a, stored_uid.and_then(|(uid,)| uid).as_deref());
    let a = learned.as_ref().unwrap_or(a);
    let rows = source_rows(db, &a.source, &real.endpoint_id).await?;
    let endpoint_id = row_id(event_place(a.mapped, rows), &a.source, &real.endpoint_id);
    lock_endpoint(db, &a.source, &endpoint_id, Some(millis(a.now))).await?;
    let before = read_summary(db, &a.source, &endpoint_id).await?;
    let Some(plan) = apply(a, &endpoint_id) else {
        return Ok((EventOutcome::Accepted, Vec::new()));
    };
    for w in &plan.writes {
        write(db, &a.source, &endpoint_id, w, millis(a.now)).await?;
    }
    if let Some(msg) = &plan.join {
        let joined = join_redelivered(db, a, &endpoint_id, std::slice::from_ref(msg)).await?;
        if !joined.is_empty() && event.audit {
            // Only when the event itself was audited: its head lock was
            // taken first, before the endpoint row (`a.audit` is read from
            // the config separately and could differ across a reload).
            let entry = join_entry(a, &endpoint_id, &joined);
            audit::lock_audit_head(db, std::slice::from_ref(&entry)).await?;
            core::record_event(db, &entry).await?;
        }
    }
    let after = read_summary(db, &a.source, &endpoint_id).await?;
    let changes = event_changes(&before, &after, plan.deleted && a.mapped);
    let pages = queue_pages(db, a, &endpoint_id, &changes).await?;
    Ok((EventOutcome::Accepted, pages))
}

/// Marks lost messages handled; resolves the exhausted alert when none remain.
pub(super) async fn acknowledge<D: Db>(
    db: &D,
    a: &SvixApply,
    endpoint_id: &str,
    msg_ids: &[String],
) -> Result<(usize, u64, Vec<SvixPage>), StoreError> {
    let rows = source_rows(db, &a.source, endpoint_id).await?;
    let endpoint_id = &row_id(ack_place(a.mapped, rows), &a.source, endpoint_id);
    lock_endpoint(db, &a.source, endpoint_id, None).await?;
    let before = read_summary(db, &a.source, endpoint_id).await?;
    let mut acked = 0;
    for msg in msg_ids {
        acked += db
            .exec(sql::ACKNOWLEDGE, &[&a.source, endpoint_id, msg])
            .await?;
    }
    let after = read_summary(db, &a.source, endpoint_id).await?;
    lower_lost_paged(db, &a.source, endpoint_id, after.lost).await?;
    let pages = queue_pages(db, a, endpoint_id, &alert_changes(&before, &after)).await?;
    Ok((
        usize::try_from(acked).unwrap_or(usize::MAX),
        after.lost,
        pages,
    ))
}

/// Whether any of `hashes` is in `seen_deliveries` (no lock taken).
/// PostgreSQL asks once for them all; SQLite, which has no array
/// parameter, once per key (its queries are local calls).
async fn any_seen<D: Db>(db: &D, hashes: &[String]) -> Result<bool, StoreError> {
    if hashes.is_empty() {
        return Ok(false);
    }
    if D::ROW_LOCK.is_empty() {
        for hash in hashes {
            let seen: Option<(i32,)> = db
                .opt("SELECT 1 FROM seen_deliveries WHERE hash = $1", &[hash])
                .await?;
            if seen.is_some() {
                return Ok(true);
            }
        }
        return Ok(false);
    }
    let seen: Option<(i32,)> = db
        .opt(
            "SELECT 1 FROM seen_deliveries WHERE hash = ANY($1) LIMIT 1",
            &[&TextArray(hashes)],
        )
        .await?;
    Ok(seen.is_some())
}

/// Marks the lost messages among `candidates` whose redelivery was
/// accepted ([`redelivery_hashes`] in `seen_deliveries`) as recovered.
/// Returns the ids it marked.
async fn join_redelivered<D: Db>(
    db: &D,
    a: &SvixApply,
    endpoint_id: &str,
    candidates: &[String],
) -> Result<Vec<String>, StoreError> {
    let mut joined = Vec::new();
    for msg in candidates {
        if any_seen(db, &redelivery_hashes(a, msg)).await?
            && db
                .exec(
                    sql::MARK_REDELIVERED,
                    &[&a.source, &endpoint_id, msg, &millis(a.now), &REDELIVERED],
                )
                .await?
                == 1
        {
            joined.push(msg.clone());
        }
    }
    Ok(joined)
}

async fn lost_ids<D: Db>(
    db: &D,
    source: &str,
    endpoint_id: &str,
) -> Result<Vec<String>, StoreError> {
    let rows: Vec<(String,)> = db.rows(sql::LOST_IDS, &[&source, &endpoint_id]).await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// Joins every lost message of `endpoint_id` with an accepted redelivery:
/// the ones found stop being lost (status, `hushwatch_svix_lost_messages`),
/// the join is audited, and when none is left the exhausted alert resolves
/// with one page that says why. Svix sends nothing when a `recover` or
/// `resend` succeeds, so this is the only way hushwatch learns it. The
/// caller holds the audit head (when auditing) and then the endpoint row:
/// the order every appending transaction takes them in.
async fn redeliver<D: Db>(
    db: &D,
    a: &SvixApply,
    endpoint_id: &str,
) -> Result<Vec<SvixPage>, StoreError> {
    let lost = lost_ids(db, &a.source, endpoint_id).await?;
    if lost.is_empty() {
        return Ok(Vec::new());
    }
    let before = read_summary(db, &a.source, endpoint_id).await?;
    let joined = join_redelivered(db, a, endpoint_id, &lost).await?;
    if joined.is_empty() {
        return Ok(Vec::new());
    }
    if a.audit {
        core::record_event(db, &join_entry(a, endpoint_id, &joined)).await?;
    }
    let after = read_summary(db, &a.source, endpoint_id).await?;
    lower_lost_paged(db, &a.source, endpoint_id, after.lost).await?;
    queue_pages(
        db,
        &redelivered(a),
        endpoint_id,
        &alert_changes(&before, &after),
    )
    .await
}

/// Whether any lost message of `endpoint_id` has an accepted redelivery
/// (one look-up over every candidate key; no lock taken).
async fn has_redelivery<D: Db>(
    db: &D,
    a: &SvixApply,
    endpoint_id: &str,
) -> Result<bool, StoreError> {
    let hashes: Vec<String> = lost_ids(db, &a.source, endpoint_id)
        .await?
        .iter()
        .flat_map(|msg| redelivery_hashes(a, msg))
        .collect();
    any_seen(db, &hashes).await
}

async fn lower_lost_paged<D: Db>(
    db: &D,
    source: &str,
    endpoint_id: &str,
    lost: u64,
) -> Result<(), StoreError> {
    let lost = i64::try_from(lost).unwrap_or(i64::MAX);
    db.exec(sql::LOWER_LOST_PAGED, &[&source, &endpoint_id, &lost])
        .await?;
    Ok(())
}

/// Endpoints (id, uid) whose lost count grew since their last page.
pub(super) async fn grown<D: Db>(
    db: &D,
    source: &str,
) -> Result<Vec<(String, Option<String>)>, StoreError> {
    db.rows(sql::GROWN, &[&source]).await
}

/// One updated page for an endpoint whose burst of exhaustions grew
/// (grouping hundreds of messages into one page per endpoint).
pub(super) async fn regroup<D: Db>(
    db: &D,
    a: &SvixApply,
    endpoint_id: &str,
) -> Result<Vec<SvixPage>, StoreError> {
    // The join audits, and an audit append needs the audit head locked
    // before the endpoint row; that lock queues every audited ingest, so it
    // is taken only when some lost message has a redelivery (looked up
    // without locks first). A redelivery accepted after the look-up is
    // joined on the next tick.
    let pending = has_redelivery(db, a, endpoint_id).await?;
    if pending && a.audit {
        let entry = join_entry(a, endpoint_id, &[]);
        audit::lock_audit_head(db, std::slice::from_ref(&entry)).await?;
    }
    lock_endpoint(db, &a.source, endpoint_id, None).await?;
    // First what arrived since: a redelivered message is not paged as lost.
    let mut pages = if pending {
        redeliver(db, a, endpoint_id).await?
    } else {
        Vec::new()
    };
    let grown = grown(db, &a.source).await?;
    if grown.iter().any(|(id, _)| id == endpoint_id) {
        pages.extend(queue_pages(db, a, endpoint_id, &[REGROUPED]).await?);
    }
    Ok(pages)
}

/// Every known endpoint (or one), with its unacknowledged lost messages.
pub(super) async fn endpoints<D: Db>(
    db: &D,
    only: Option<(&str, &str)>,
) -> Result<Vec<SvixEndpointRow>, StoreError> {
    let (source, endpoint) = only.map_or((None, None), |(s, e)| (Some(s), Some(e)));
    let rows: Vec<EndpointCols> = db
        .rows(sql::ENDPOINTS, &[&source, &endpoint, &REDELIVERED])
        .await?;
    let mut out: Vec<SvixEndpointRow> = rows.into_iter().map(endpoint_row).collect();
    for row in &mut out {
        let lost = db.rows(sql::LOST, &[&row.source, &row.endpoint_id]).await?;
        row.lost = lost.into_iter().map(lost_message).collect();
        if row.recovered_total > 0 {
            let recovered = db
                .rows(
                    sql::RECOVERED,
                    &[
                        &row.source,
                        &row.endpoint_id,
                        &REDELIVERED,
                        &RECOVERED_SHOWN,
                    ],
                )
                .await?;
            row.recovered = recovered.into_iter().map(recovered_message).collect();
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    //! The decisions both engines call, each branch once (the conformance
    //! suite, `store::conformance::svix_endpoints`, runs them through both).
    use super::*;
    use hushwatch_core::domain::svix::{Severity, SvixAlert};

    fn endpoint(id: &str) -> EndpointRef {
        EndpointRef {
            app_id: Some("app_1".into()),
            endpoint_id: id.into(),
            endpoint_uid: Some(format!("uid_{id}")),
        }
    }

    fn attempt(msg: &str) -> AttemptRef {
        AttemptRef {
            msg_id: msg.into(),
            msg_event_id: None,
            status_code: 503,
            attempt_at: DateTime::from_timestamp_millis(7),
        }
    }

    fn apply_of(event: OpEvent, event_type: &str) -> SvixApply {
        SvixApply {
            source: "main".into(),
            stream: "identity".into(),
            notifiers: vec!["pager".into(), "chat".into()],
            event,
            clears_on: Vec::new(),
            event_type: event_type.into(),
            mapped: false,
            now: DateTime::from_timestamp_millis(1_000).unwrap(),
            endpoint_map: Default::default(),
            join_streams: vec!["identity".into()],
            audit: true,
        }
    }

    #[test]
    fn each_event_writes_its_row_after_touching_it() {
        let e = endpoint("ep_1");
        let touch = Write::Touch(e.clone());
        let disabled = apply_of(
            OpEvent::EndpointDisabled {
                endpoint: e.clone(),
                fail_since: DateTime::from_timestamp_millis(5),
                trigger: Trigger::Manual,
            },
            "endpoint.disabled",
        );
        let plan = apply(&disabled, "ep_1").unwrap();
        assert_eq!(
            plan.writes,
            [
                touch.clone(),
                Write::Disable {
                    trigger: "manual",
                    fail_since: Some(5)
                }
            ]
        );
        assert!(!plan.deleted && plan.join.is_none());

        let failing = apply_of(
            OpEvent::AttemptFailing {
                endpoint: e.clone(),
                attempt: attempt("m1"),
            },
            "message.attempt.failing",
        );
        assert_eq!(
            apply(&failing, "ep_1").unwrap().writes,
            [
                touch.clone(),
                Write::News {
                    attempt: attempt("m1"),
                    state: "failing"
                }
            ]
        );
        let recovered = apply_of(
            OpEvent::AttemptRecovered {
                endpoint: e.clone(),
                attempt: attempt("m1"),
            },
            "message.attempt.recovered",
        );
        assert_eq!(
            apply(&recovered, "ep_1").unwrap().writes[1],
            Write::News {
                attempt: attempt("m1"),
                state: "recovered"
            }
        );
        let exhausted = apply_of(
            OpEvent::AttemptExhausted {
                endpoint: e.clone(),
                attempt: attempt("m1"),
            },
            "message.attempt.exhausted",
        );
        let plan = apply(&exhausted, "ep_1").unwrap();
        assert_eq!(plan.writes.len(), 3);
        assert_eq!(plan.writes[2], Write::CountExhausted);
        assert_eq!(plan.join.as_deref(), Some("m1"), "joined with a redelivery");
    }

    #[test]
    fn enabled_clears_and_other_endpoint_news_clears_only_when_configured() {
        let e = endpoint("ep_1");
        let enabled = apply_of(OpEvent::EndpointEnabled(e.clone()), "endpoint.enabled");
        assert_eq!(apply(&enabled, "ep_1").unwrap().writes[1..], [Write::Clear]);
        let mut updated = apply_of(OpEvent::EndpointUpdated(e.clone()), "endpoint.updated");
        assert_eq!(
            apply(&updated, "ep_1").unwrap().writes.len(),
            1,
            "touch only"
        );
        updated.clears_on = vec!["endpoint.updated".into()];
        assert_eq!(apply(&updated, "ep_1").unwrap().writes[1..], [Write::Clear]);
        let created = apply_of(OpEvent::EndpointCreated(e), "endpoint.created");
        assert_eq!(apply(&created, "ep_1").unwrap().writes.len(), 1);
    }

    #[test]
    fn a_deletion_marks_its_own_row_but_never_the_grouped_one() {
        let mut deleted = apply_of(
            OpEvent::EndpointDeleted(endpoint("ep_1")),
            "endpoint.deleted",
        );
        let plan = apply(&deleted, "ep_1").unwrap();
        assert_eq!(
            plan.writes[1],
            Write::Delete {
                clear: false,
                grouped: false
            }
        );
        assert!(plan.deleted);
        deleted.clears_on = vec!["endpoint.deleted".into()];
        let plan = apply(&deleted, GROUPED_ENDPOINT).unwrap();
        assert_eq!(
            plan.writes,
            [
                Write::Touch(EndpointRef {
                    app_id: None,
                    endpoint_id: GROUPED_ENDPOINT.into(),
                    endpoint_uid: None
                }),
                Write::Delete {
                    clear: true,
                    grouped: true
                }
            ],
            "the grouped row keeps no ids of one endpoint"
        );
        assert!(!plan.deleted);
    }

    #[test]
    fn events_about_no_endpoint_write_nothing() {
        assert_eq!(apply(&apply_of(OpEvent::Other, "x"), "ep_1"), None);
        let task = OpEvent::BackgroundTaskFinished {
            task_id: "t".into(),
            task: "recover".into(),
            status: "finished".into(),
        };
        assert_eq!(
            apply(&apply_of(task, "background_task.finished"), "ep_1"),
            None
        );
    }

    #[test]
    fn stored_columns_read_back_as_the_same_state() {
        assert_eq!(disable_state(0, Some("manual")), None);
        assert_eq!(
            disable_state(1, Some("manual")),
            Some(DisableTrigger::Manual)
        );
        assert_eq!(
            disable_state(1, Some("automatic")),
            Some(DisableTrigger::Automatic)
        );
        assert_eq!(disable_state(1, None), Some(DisableTrigger::Automatic));
        assert_eq!(summary(None, 2, 3).disabled, None, "no row yet");
        assert_eq!(summary(Some((1, None)), -1, 3).failing, 0);
        let row = endpoint_row((
            "main".into(),
            "ep_1".into(),
            None,
            None,
            1,
            Some("manual".into()),
            Some(5),
            None,
            1,
            4,
            2,
            3,
        ));
        assert_eq!(row.disabled, Some(DisableTrigger::Manual));
        assert_eq!(row.fail_since, DateTime::from_timestamp_millis(5));
        assert!(row.deleted);
        assert_eq!(
            (row.exhausted_total, row.failing, row.recovered_total),
            (4, 2, 3)
        );
        assert_eq!(
            lost_message(("m".into(), None, 70_000, None)).status_code,
            0
        );
        assert_eq!(lost_message(("m".into(), None, 503, None)).status_code, 503);
    }

    #[test]
    fn each_change_pages_every_notifier_under_one_key_per_endpoint_and_alert() {
        let a = apply_of(
            OpEvent::AttemptExhausted {
                endpoint: endpoint("ep_1"),
                attempt: attempt("m1"),
            },
            "message.attempt.exhausted",
        );
        let mut row = endpoint_row((
            "main".into(),
            "ep_1".into(),
            None,
            None,
            0,
            None,
            None,
            None,
            0,
            2,
            1,
            0,
        ));
        row.lost = vec![lost_message(("m1".into(), None, 503, None)); 2];
        let changes = [
            REGROUPED,
            AlertChange {
                alert: SvixAlert::EndpointFailing,
                firing: false,
                severity: Severity::Warning,
            },
        ];
        let plans = page_plans(&page_facts(&a), "ep_1", &changes, &row);
        assert_eq!(plans.len(), 2);
        let alert = keyed_alert(&a, &plans[0]);
        assert_eq!(
            (
                alert.key,
                alert.family,
                alert.severity,
                alert.source,
                alert.endpoint_id
            ),
            (
                "main/ep_1/svix_messages_exhausted",
                "svix",
                "critical",
                "main",
                "ep_1"
            )
        );
        let firing = page_transition(&a, &plans[0]);
        assert_eq!(firing.to, AlertState::Firing);
        assert_eq!(firing.notifiers, a.notifiers);
        assert_eq!(firing.reason, plans[0].page.summary);
        assert_eq!(page_transition(&a, &plans[1]).to, AlertState::Ok);
        assert_eq!(redelivered(&a).event_type, REDELIVERED_EVENT);
    }

    #[test]
    fn the_pages_are_told_the_events_endpoint_and_a_failing_attempt() {
        let failing = apply_of(
            OpEvent::AttemptFailing {
                endpoint: endpoint("ep_1"),
                attempt: attempt("m1"),
            },
            "message.attempt.failing",
        );
        let f = page_facts(&failing);
        assert_eq!(
            (f.source, f.stream, f.event_type),
            ("main", "identity", "message.attempt.failing")
        );
        assert_eq!((f.endpoint_id, f.app_id), (Some("ep_1"), Some("app_1")));
        assert_eq!(
            f.failing_attempt,
            Some((DateTime::from_timestamp_millis(7), 503))
        );
        let exhausted = apply_of(
            OpEvent::AttemptExhausted {
                endpoint: endpoint("ep_1"),
                attempt: attempt("m1"),
            },
            "message.attempt.exhausted",
        );
        assert_eq!(page_facts(&exhausted).failing_attempt, None);
        let other = apply_of(OpEvent::Other, "x");
        let none = page_facts(&other);
        assert_eq!((none.endpoint_id, none.app_id), (None, None));
    }
}
