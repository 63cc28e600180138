//! State of Svix endpoints, from operational webhooks. Each operational
//! event is recorded (dedup + audit) and applied to the endpoint state in
//! the same transaction, and any alert crossing it causes writes its pages
//! to the outbox in that transaction too: an acknowledged operational
//! webhook can never lose its page.
//!
//! What an event does (which row it lands on past the endpoint cap, what
//! it writes, which pages it queues) is decided once, by the pure
//! functions here (`event_place`, `apply`, `event_changes`, `page_plans`,
//! ...), from rows both engines read with the same statements (`sql`).
//! The operations that read those rows, call the decision and write its
//! outcome are written once too, over `store::db::Db`.

use super::core;
use super::db::Db;
use super::ops::{delivery_hash, KeyedAlert};
use super::{AlertState, EventOutcome, NewEvent, StoreError, Transition};
use crate::domain::svix::{
    alert_changes, AlertChange, DisableTrigger, EndpointSummary, Severity, SvixAlert,
};
use crate::ingest::svix_ops::{AttemptRef, EndpointRef, OpEvent, Trigger};
use chrono::{DateTime, SecondsFormat, Utc};
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

/// Endpoints tracked one by one per Svix source, besides those mapped in
/// `[svix.NAME] endpoints` (bounded by the config, never grouped). Endpoint
/// ids come from signed operational webhooks, but a Svix environment you own
/// may have thousands of endpoints (one per customer of your outgoing
/// webhooks), and each one seen used to add five metric series, a status
/// row and its own pages: 3,000 ids made a 3.4 MB `/metrics`. Past the cap a
/// new endpoint is not dropped but folded into one shared row,
/// [`GROUPED_ENDPOINT`], so the series, status rows and alerts stay bounded
/// (like `subscriptions::MAX_PER_STREAM` and `[server] max_streams`).
pub const MAX_ENDPOINTS_PER_SOURCE: i64 = 100;

/// The `endpoint_id` (row, metric label, alert key) that the endpoints past
/// [`MAX_ENDPOINTS_PER_SOURCE`] share. Not a Svix id (those are `ep_…`).
pub const GROUPED_ENDPOINT: &str = "other";

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

/// The `event_type` of the audit entry (and of the apply) for that join.
pub const REDELIVERED_EVENT: &str = "hushwatch.svix.redelivered";

/// Lost messages recovered by redelivery listed per endpoint in
/// `/v1/status` (the newest; `recovered_total` counts them all).
pub const RECOVERED_SHOWN: i64 = 20;

/// Message ids named in one join's audit entry (`msg_count` has them all).
const JOIN_IDS_AUDITED: usize = 50;

/// A page caused by an operational event, for logs and the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SvixPage {
    pub endpoint_id: String,
    pub alert: SvixAlert,
    pub firing: bool,
    pub severity: Severity,
    pub summary: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostMessage {
    pub msg_id: String,
    pub msg_event_id: Option<String>,
    pub status_code: u16,
    pub attempt_at: Option<DateTime<Utc>>,
}

/// A lost message whose `svix-id` was later accepted on a stream the
/// endpoint feeds: no longer lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredMessage {
    pub msg_id: String,
    pub msg_event_id: Option<String>,
    /// When the join was made (the redelivery, or the exhausted event that
    /// came after it).
    pub recovered_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SvixEndpointRow {
    pub source: String,
    pub endpoint_id: String,
    pub app_id: Option<String>,
    pub endpoint_uid: Option<String>,
    pub disabled: Option<DisableTrigger>,
    pub fail_since: Option<DateTime<Utc>>,
    pub disabled_at: Option<DateTime<Utc>>,
    pub deleted: bool,
    pub exhausted_total: u64,
    pub failing: u64,
    pub lost: Vec<LostMessage>,
    /// The newest [`RECOVERED_SHOWN`] recovered by redelivery.
    pub recovered: Vec<RecoveredMessage>,
    pub recovered_total: u64,
}

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

pub(super) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(super) fn time(ms: Option<i64>) -> Option<DateTime<Utc>> {
    ms.and_then(DateTime::from_timestamp_millis)
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A stored count (never negative) as the store's `u64`.
pub(super) fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

// ---------------------------------------------------------------------------
// The decisions, taken once for both engines (pure; `store::silences` is the
// model). Each engine reads the rows named in the arguments with the
// statements of `sql`, calls the function and writes what it returns.
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

/// What placing an endpoint's state depends on, read in one statement
/// ([`sql::ROWS`]; a source has at most `MAX_ENDPOINTS_PER_SOURCE` rows
/// besides its mapped endpoints and the grouped one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct SourceRows {
    /// The endpoint has a row of its own.
    pub own: bool,
    /// Rows of the source tracked one by one (all but the grouped row).
    pub tracked: i64,
    /// The grouped row exists.
    pub grouped: bool,
}

impl SourceRows {
    /// From [`sql::ROWS`]'s three counts.
    pub(super) fn of((own, tracked, grouped): (i64, i64, i64)) -> SourceRows {
        SourceRows {
            own: own > 0,
            tracked,
            grouped: grouped > 0,
        }
    }
}

/// Which row holds an endpoint's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    Own,
    /// [`GROUPED_ENDPOINT`]; `first`: this event creates the grouped row.
    Grouped {
        first: bool,
    },
}

impl Place {
    /// The row's `endpoint_id`. Folding the first endpoint past the cap is
    /// logged once (the status page and `/v1/status` say it from then on).
    pub(super) fn id(self, source: &str, endpoint_id: &str) -> String {
        match self {
            Place::Own => endpoint_id.to_string(),
            Place::Grouped { first } => {
                if first {
                    tracing::warn!(
                        source,
                        max = MAX_ENDPOINTS_PER_SOURCE,
                        "Svix source has more than the maximum of endpoints tracked one by one; further endpoints are grouped as \"{GROUPED_ENDPOINT}\""
                    );
                }
                GROUPED_ENDPOINT.to_string()
            }
        }
    }
}

/// The row an event updates: the endpoint's own when it has one, is
/// mapped in config or the source is under the cap; otherwise the grouped
/// row. (On PostgreSQL two replicas adding new endpoints at once may each
/// see room for one more, so the cap can be passed by at most the number
/// of concurrent writers; it still bounds the series.)
pub(super) fn event_place(mapped: bool, rows: SourceRows) -> Place {
    if mapped || rows.own || rows.tracked < MAX_ENDPOINTS_PER_SOURCE {
        return Place::Own;
    }
    Place::Grouped {
        first: !rows.grouped,
    }
}

/// The row an acknowledgement applies to: the endpoint's own, or the
/// grouped row when it has none (its messages were folded there).
pub(super) fn ack_place(mapped: bool, rows: SourceRows) -> Place {
    if mapped || rows.own || !rows.grouped {
        return Place::Own;
    }
    Place::Grouped { first: false }
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
            fail_since: fail_since.map(ms),
        }),
        OpEvent::EndpointEnabled(_) | OpEvent::EndpointUpdated(_) | OpEvent::EndpointCreated(_) => {
            if matches!(a.event, OpEvent::EndpointEnabled(_)) || a.clears_on.contains(&a.event_type)
            {
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
        fail_since: time(c.6),
        disabled_at: time(c.7),
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
        attempt_at: time(c.3),
    }
}

/// A row of [`sql::RECOVERED`].
pub(super) fn recovered_message(c: (String, Option<String>, Option<i64>)) -> RecoveredMessage {
    RecoveredMessage {
        msg_id: c.0,
        msg_event_id: c.1,
        recovered_at: time(c.2),
    }
}

/// The alerts an event's writes call for: the crossings of its summary,
/// and a one-shot notice when it deleted a mapped endpoint.
pub(super) fn event_changes(
    a: &SvixApply,
    apply: &Apply,
    before: &EndpointSummary,
    after: &EndpointSummary,
) -> Vec<AlertChange> {
    let mut changes = alert_changes(before, after);
    if apply.deleted && a.mapped {
        changes.push(AlertChange {
            alert: SvixAlert::EndpointDeleted,
            firing: true,
            severity: Severity::Warning,
        });
    }
    changes
}

/// The page `regroup` queues for an endpoint whose lost count grew since
/// its last page: the exhausted alert again, with the new count.
pub(super) const REGROUPED: AlertChange = AlertChange {
    alert: SvixAlert::MessagesExhausted,
    firing: true,
    severity: Severity::Critical,
};

/// The apply of the join of lost messages with their redeliveries (its
/// pages word the resolve that way).
pub(super) fn redelivered(a: &SvixApply) -> SvixApply {
    SvixApply {
        event_type: REDELIVERED_EVENT.to_string(),
        ..a.clone()
    }
}

/// One page an alert change queues, and what it writes besides.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PagePlan {
    pub transition: Transition,
    /// One alert id per endpoint and alert, shared by its firing and
    /// resolved pages (PagerDuty dedup_key). The key keeps the pre-v8
    /// form, so an alert that fired before an upgrade resolves under the
    /// same id.
    key: String,
    source: String,
    /// [`sql::SET_LOST_PAGED`]: the lost count this page gave, so that
    /// `grown` finds the endpoints that lost more since.
    pub lost_paged: Option<i64>,
    pub page: SvixPage,
}

impl PagePlan {
    pub(super) fn alert(&self) -> KeyedAlert<'_> {
        KeyedAlert {
            kind: self.page.alert.as_str(),
            family: "svix",
            key: &self.key,
            severity: self.page.severity.as_str(),
            source: &self.source,
            endpoint_id: &self.page.endpoint_id,
        }
    }
}

/// The pages of `changes` for the row `endpoint_id` (read as `row` after
/// the event). The severity travels as its own field (every notifier
/// shows it).
pub(super) fn page_plans(
    a: &SvixApply,
    endpoint_id: &str,
    changes: &[AlertChange],
    row: &SvixEndpointRow,
) -> Vec<PagePlan> {
    changes
        .iter()
        .map(|change| {
            let summary = summary_text(a, endpoint_id, change, row);
            PagePlan {
                transition: Transition {
                    stream: a.stream.clone(),
                    to: if change.firing {
                        AlertState::Firing
                    } else {
                        AlertState::Ok
                    },
                    at: a.now,
                    reason: summary.clone(),
                    notifiers: a.notifiers.clone(),
                },
                key: format!("{}/{}/{}", a.source, endpoint_id, change.alert.as_str()),
                source: a.source.clone(),
                lost_paged: (change.alert == SvixAlert::MessagesExhausted)
                    .then(|| i64::try_from(row.lost.len()).unwrap_or(i64::MAX)),
                page: SvixPage {
                    endpoint_id: endpoint_id.to_string(),
                    alert: change.alert,
                    firing: change.firing,
                    severity: change.severity,
                    summary,
                },
            }
        })
        .collect()
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

/// The retry schedule is configurable (`retry_schedule` in the open-source
/// server; a run had 6 attempts in 41 s), so pages word what the payload
/// said and give the default only as the Cloud default: immediately, 5 s,
/// 5 min, 30 min, 2 h, 5 h, 10 h, 10 h = 27 h 35 min 5 s
/// (https://docs.svix.com/retries). `message.attempt.failing` is "sent on
/// the fourth failure" (svix crate, `MessageAttemptFailingEvent`).
const SCHEDULE_NOTE: &str =
    "How long that took depends on the schedule (on Svix Cloud's default schedule, about 27.6 h).";
const SCHEDULE_NOTE_SHORT: &str = "on Svix Cloud's default schedule, about 27.6 h in all";

/// "at 2026-12-01T19:42:17Z (no HTTP response: status 0)" from the
/// payload's `lastAttempt`.
fn attempt_words(at: Option<DateTime<Utc>>, status: u16) -> String {
    let when = at.map(rfc).unwrap_or_else(|| "(time not reported)".into());
    if status == 0 {
        format!("at {when} (no HTTP response: status 0, a timeout or a refused connection)")
    } else {
        format!("at {when} (HTTP {status})")
    }
}

/// What resolved a disabled alert, for its page: on the open-source server
/// only `endpoint.updated` can stand for a re-enable, and it is sent for
/// any change, so the page says to check.
fn cleared_by(event_type: &str) -> String {
    match event_type.strip_prefix("ingest.").unwrap_or(event_type) {
        "endpoint.enabled" => "enabled again (endpoint.enabled).".to_string(),
        "endpoint.updated" => "disabled alert cleared by endpoint.updated (clear_on, flavor = \"oss\": the open-source \
            Svix server sends no endpoint.enabled). It sends endpoint.updated for any change too (a rename, a URL change, a \
            secret rotation, a manual disable), so check in Svix that the endpoint is enabled."
            .to_string(),
        "endpoint.deleted" => "disabled alert cleared by endpoint.deleted (clear_on).".to_string(),
        other => format!("disabled alert cleared by {other}."),
    }
}

/// What a person should do, per alert. Shown in every page.
pub(super) fn summary_text(
    a: &SvixApply,
    endpoint_id: &str,
    change: &AlertChange,
    row: &SvixEndpointRow,
) -> String {
    // The grouped row stands for every endpoint past the cap: the page says
    // so, names the endpoint this event was about, and its instructions use
    // that endpoint's ids.
    let this = a
        .event
        .endpoint()
        .filter(|e| e.endpoint_id != GROUPED_ENDPOINT);
    let grouped = endpoint_id == GROUPED_ENDPOINT;
    let name = if grouped {
        format!(
            "Svix endpoints past the first {MAX_ENDPOINTS_PER_SOURCE} of source {} (grouped as \"{GROUPED_ENDPOINT}\", feeds stream {}{})",
            a.source,
            a.stream,
            this.map(|e| format!("; this event: endpoint {}", e.endpoint_id))
                .unwrap_or_default()
        )
    } else {
        format!(
            "Svix endpoint {endpoint_id} ({}, feeds stream {})",
            a.source, a.stream
        )
    };
    let caveat = if grouped {
        format!(
            " Endpoints past the cap share one state, so this may not be the only one affected: check them in Svix, \
             and map the endpoints that matter under [svix.{}] endpoints to track them one by one.",
            a.source
        )
    } else {
        String::new()
    };
    let text = summary_for(a, endpoint_id, change, row, &name, this);
    format!("{text}{caveat}")
}

fn summary_for(
    a: &SvixApply,
    endpoint_id: &str,
    change: &AlertChange,
    row: &SvixEndpointRow,
    name: &str,
    this: Option<&EndpointRef>,
) -> String {
    // In the grouped row's instructions, the endpoint the event named.
    let endpoint_id = match this {
        _ if endpoint_id != GROUPED_ENDPOINT => endpoint_id,
        Some(e) => e.endpoint_id.as_str(),
        None => "{endpoint_id}",
    };
    if !change.firing {
        return match change.alert {
            SvixAlert::EndpointDisabled => {
                format!("{name}: {} Recover failed messages and replay missing ones since it failed.", cleared_by(&a.event_type))
            }
            SvixAlert::MessagesExhausted => match a.event_type.as_str() {
                REDELIVERED_EVENT => format!(
                    "{name}: every lost message has since arrived: its svix-id was accepted on stream {} \
                     (a recover or resend got through; Svix sends no event for that), so nothing is lost any more.",
                    a.join_streams.join(", ")
                ),
                "message.attempt.recovered" | "ingest.message.attempt.recovered" => format!(
                    "{name}: a later attempt delivered the last lost message (message.attempt.recovered)."
                ),
                _ => format!("{name}: every lost message was acknowledged."),
            },
            SvixAlert::EndpointFailing => format!("{name}: no message is failing any more."),
            SvixAlert::EndpointDeleted => format!("{name} deletion cleared."),
        };
    }
    let since = row
        .fail_since
        .map(rfc)
        .unwrap_or_else(|| "the first failure".into());
    let app = row
        .app_id
        .clone()
        .or_else(|| this.and_then(|e| e.app_id.clone()))
        .unwrap_or_else(|| "{app_id}".into());
    match change.alert {
        SvixAlert::EndpointDisabled => format!(
            "{name} was DISABLED ({} trigger), failing since {since}: deliveries stopped and new messages are not even queued, so revocations are being lost. \
             Fix the receiver, re-enable it (PATCH /api/v1/app/{app}/endpoint/{endpoint_id} {{\"disabled\": false}}), then recover failed messages \
             (POST /api/v1/app/{app}/endpoint/{endpoint_id}/recover {{\"since\": \"{since}\"}}) and replay missing ones \
             (POST …/replay-missing with the same since). Clerk: Dashboard → Webhooks → endpoint → Message Attempts → Replay (failed since / missing since).",
            match row.disabled {
                Some(DisableTrigger::Manual) => "manual",
                _ => "automatic",
            }
        ),
        SvixAlert::MessagesExhausted => format!(
            "{name}: {} message(s) used up every attempt of the endpoint's retry schedule and are lost for this endpoint unless recovered \
             (first: {}; last attempt {}). {SCHEDULE_NOTE} Fix the receiver, then POST /api/v1/app/{app}/endpoint/{endpoint_id}/recover \
             or resend each message: a lost message whose svix-id hushwatch then accepts on stream {} counts as recovered by itself; \
             acknowledge the others with POST /v1/svix/{}/acknowledge once handled.",
            row.lost.len(),
            row.lost.first().map(|m| m.msg_id.as_str()).unwrap_or("-"),
            row.lost
                .last()
                .map(|m| attempt_words(m.attempt_at, m.status_code))
                .unwrap_or_else(|| "not reported".into()),
            a.join_streams.join(", "),
            a.source
        ),
        SvixAlert::EndpointFailing => format!(
            "{name}: {} message(s) are failing (Svix reports a message's 4th failed attempt{}); Svix keeps retrying on the \
             endpoint's retry schedule ({SCHEDULE_NOTE_SHORT}). Check the receiver now.",
            row.failing,
            match &a.event {
                OpEvent::AttemptFailing { attempt, .. } => format!(
                    "; last attempt {}",
                    attempt_words(attempt.attempt_at, attempt.status_code)
                ),
                _ => String::new(),
            }
        ),
        SvixAlert::EndpointDeleted => format!("{name} was DELETED in Svix: nothing will be delivered to it."),
    }
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
                    &m.attempt_at.map(ms),
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
    for plan in page_plans(a, endpoint_id, changes, &row) {
        core::queue_keyed_pages(db, &plan.transition, a.now, &plan.alert()).await?;
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
    core::lock_audit_head(db, std::slice::from_ref(event)).await?;
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
    let endpoint_id = event_place(a.mapped, rows).id(&a.source, &real.endpoint_id);
    lock_endpoint(db, &a.source, &endpoint_id, Some(ms(a.now))).await?;
    let before = read_summary(db, &a.source, &endpoint_id).await?;
    let Some(plan) = apply(a, &endpoint_id) else {
        return Ok((EventOutcome::Accepted, Vec::new()));
    };
    for w in &plan.writes {
        write(db, &a.source, &endpoint_id, w, ms(a.now)).await?;
    }
    if let Some(msg) = &plan.join {
        let joined = join_redelivered(db, a, &endpoint_id, std::slice::from_ref(msg)).await?;
        if !joined.is_empty() && event.audit {
            // Only when the event itself was audited: its head lock was
            // taken first, before the endpoint row (`a.audit` is read from
            // the config separately and could differ across a reload).
            let entry = join_entry(a, &endpoint_id, &joined);
            core::lock_audit_head(db, std::slice::from_ref(&entry)).await?;
            core::record_event(db, &entry).await?;
        }
    }
    let after = read_summary(db, &a.source, &endpoint_id).await?;
    let changes = event_changes(a, &plan, &before, &after);
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
    let endpoint_id = &ack_place(a.mapped, rows).id(&a.source, endpoint_id);
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

/// An array parameter (`= ANY($1)`): PostgreSQL's alone, so only its
/// branch of [`any_seen`] binds one; SQLite refuses it rather than bind
/// something else.
#[derive(Debug)]
struct TextArray<'a>(&'a [String]);

impl tokio_postgres::types::ToSql for TextArray<'_> {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.0.to_sql(ty, out)
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        <&[String] as tokio_postgres::types::ToSql>::accepts(ty)
    }

    tokio_postgres::types::to_sql_checked!();
}

impl rusqlite::ToSql for TextArray<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Err(rusqlite::Error::ToSqlConversionFailure(
            "an array parameter on SQLite".into(),
        ))
    }
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
                    &[&a.source, &endpoint_id, msg, &ms(a.now), &REDELIVERED],
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
        core::lock_audit_head(db, std::slice::from_ref(&entry)).await?;
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

    fn rows(own: bool, tracked: i64, grouped: bool) -> SourceRows {
        SourceRows {
            own,
            tracked,
            grouped,
        }
    }

    #[test]
    fn an_event_keeps_its_own_row_until_the_cap_then_shares_the_grouped_one() {
        let cap = MAX_ENDPOINTS_PER_SOURCE;
        assert_eq!(event_place(false, rows(false, cap - 1, false)), Place::Own);
        assert_eq!(event_place(false, rows(true, cap + 5, true)), Place::Own);
        assert_eq!(
            event_place(true, rows(false, cap + 5, true)),
            Place::Own,
            "mapped endpoints are bounded by the config, never grouped"
        );
        assert_eq!(
            event_place(false, rows(false, cap, false)),
            Place::Grouped { first: true }
        );
        assert_eq!(
            event_place(false, rows(false, cap, true)),
            Place::Grouped { first: false }
        );
        assert_eq!(Place::Own.id("main", "ep_1"), "ep_1");
        assert_eq!(
            Place::Grouped { first: true }.id("main", "ep_1"),
            GROUPED_ENDPOINT
        );
    }

    #[test]
    fn an_acknowledgement_goes_to_the_grouped_row_only_without_a_row_of_its_own() {
        assert_eq!(SourceRows::of((2, 7, 1)), rows(true, 7, true));
        assert_eq!(SourceRows::of((0, 7, 0)), rows(false, 7, false));
        assert_eq!(ack_place(false, rows(true, 200, true)), Place::Own);
        assert_eq!(ack_place(true, rows(false, 200, true)), Place::Own);
        assert_eq!(
            ack_place(false, rows(false, 200, false)),
            Place::Own,
            "no grouped row: nothing to find there"
        );
        assert_eq!(
            ack_place(false, rows(false, 0, true)),
            Place::Grouped { first: false }
        );
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
    fn a_mapped_endpoints_deletion_notifies_once_besides_the_crossings() {
        let mut a = apply_of(
            OpEvent::EndpointDeleted(endpoint("ep_1")),
            "endpoint.deleted",
        );
        let plan = apply(&a, "ep_1").unwrap();
        let quiet = EndpointSummary::default();
        assert!(
            event_changes(&a, &plan, &quiet, &quiet).is_empty(),
            "unmapped: recorded only"
        );
        a.mapped = true;
        assert_eq!(
            event_changes(&a, &plan, &quiet, &quiet),
            [AlertChange {
                alert: SvixAlert::EndpointDeleted,
                firing: true,
                severity: Severity::Warning
            }]
        );
        let lost = EndpointSummary { lost: 1, ..quiet };
        assert_eq!(event_changes(&a, &plan, &quiet, &lost).len(), 2);
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
        let plans = page_plans(&a, "ep_1", &changes, &row);
        assert_eq!(plans.len(), 2);
        let alert = plans[0].alert();
        assert_eq!(
            (alert.key, alert.family, alert.severity, alert.endpoint_id),
            (
                "main/ep_1/svix_messages_exhausted",
                "svix",
                "critical",
                "ep_1"
            )
        );
        assert_eq!(plans[0].lost_paged, Some(2), "the count this page gave");
        assert_eq!(plans[0].transition.to, AlertState::Firing);
        assert_eq!(plans[0].transition.notifiers, a.notifiers);
        assert_eq!(plans[0].transition.reason, plans[0].page.summary);
        assert_eq!(plans[1].lost_paged, None);
        assert_eq!(plans[1].transition.to, AlertState::Ok);
        assert_eq!(redelivered(&a).event_type, REDELIVERED_EVENT);
    }
}
