//! State of Svix endpoints, from operational webhooks. Each operational
//! event is recorded (dedup + audit) and applied to the endpoint state in
//! the same transaction, and any alert crossing it causes writes its pages
//! to the outbox in that transaction too: an acknowledged operational
//! webhook can never lose its page.

use super::ops::{delivery_hash, queue_keyed_pages, record_event, KeyedAlert};
use super::{AlertState, EventOutcome, NewEvent, StoreError, Transition};
use crate::domain::svix::{
    alert_changes, AlertChange, DisableTrigger, EndpointSummary, Severity, SvixAlert,
};
use crate::ingest::svix_ops::{AttemptRef, EndpointRef, OpEvent, Trigger};
use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{params, Connection, OptionalExtension};
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

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn time(ms: Option<i64>) -> Option<DateTime<Utc>> {
    ms.and_then(DateTime::from_timestamp_millis)
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

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

/// Which row holds `endpoint_id`'s state: its own when it has one, is
/// mapped in config or the source is under the cap; otherwise the grouped
/// row.
/// Whether `endpoint_id` of `source` has a row of its own.
fn has_row(conn: &Connection, source: &str, endpoint_id: &str) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM svix_endpoints WHERE source = ?1 AND endpoint_id = ?2")?
        .query_row(params![source, endpoint_id], |_| Ok(()))
        .optional()?
        .is_some())
}

fn tracked_id(
    conn: &Connection,
    source: &str,
    endpoint_id: &str,
    mapped: bool,
) -> rusqlite::Result<String> {
    if mapped || has_row(conn, source, endpoint_id)? {
        return Ok(endpoint_id.to_string());
    }
    let tracked: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM svix_endpoints WHERE source = ?1 AND endpoint_id != ?2",
        )?
        .query_row(params![source, GROUPED_ENDPOINT], |r| r.get(0))?;
    if tracked < MAX_ENDPOINTS_PER_SOURCE {
        return Ok(endpoint_id.to_string());
    }
    if !has_row(conn, source, GROUPED_ENDPOINT)? {
        warn_grouping(source);
    }
    Ok(GROUPED_ENDPOINT.to_string())
}

/// Logged once, when the first endpoint past the cap is folded (the
/// status page and `/v1/status` say it from then on).
pub(super) fn warn_grouping(source: &str) {
    tracing::warn!(
        source,
        max = MAX_ENDPOINTS_PER_SOURCE,
        "Svix source has more than the maximum of endpoints tracked one by one; further endpoints are grouped as \"{GROUPED_ENDPOINT}\""
    );
}

/// The row an acknowledgement for `endpoint_id` applies to: its own, or
/// the grouped row when it has none (its messages were folded there).
fn ack_target(
    conn: &Connection,
    source: &str,
    endpoint_id: &str,
    mapped: bool,
) -> rusqlite::Result<String> {
    if mapped || has_row(conn, source, endpoint_id)? || !has_row(conn, source, GROUPED_ENDPOINT)? {
        return Ok(endpoint_id.to_string());
    }
    Ok(GROUPED_ENDPOINT.to_string())
}

fn touch_endpoint(
    conn: &Connection,
    source: &str,
    e: &EndpointRef,
    now: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO svix_endpoints (source, endpoint_id, app_id, endpoint_uid, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT(source, endpoint_id) DO UPDATE SET
           app_id = coalesce(excluded.app_id, app_id),
           endpoint_uid = coalesce(excluded.endpoint_uid, endpoint_uid),
           updated_at = excluded.updated_at",
    )?
    .execute(params![
        source,
        e.endpoint_id,
        e.app_id,
        e.endpoint_uid,
        now
    ])?;
    Ok(())
}

fn summary(
    conn: &Connection,
    source: &str,
    endpoint_id: &str,
) -> rusqlite::Result<EndpointSummary> {
    let disabled: Option<(i64, Option<String>)> = conn
        .prepare_cached("SELECT disabled, disable_trigger FROM svix_endpoints WHERE source = ?1 AND endpoint_id = ?2")?
        .query_row(params![source, endpoint_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let count = |sql: &str| -> rusqlite::Result<u64> {
        conn.prepare_cached(sql)?
            .query_row(params![source, endpoint_id], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
    };
    Ok(EndpointSummary {
        disabled: match disabled {
            Some((1, Some(t))) if t == "manual" => Some(DisableTrigger::Manual),
            Some((1, _)) => Some(DisableTrigger::Automatic),
            _ => None,
        },
        failing: count("SELECT count(*) FROM svix_messages WHERE source = ?1 AND endpoint_id = ?2 AND state = 'failing'")?,
        lost: count(
            "SELECT count(*) FROM svix_messages WHERE source = ?1 AND endpoint_id = ?2 AND state = 'exhausted' AND acknowledged = 0",
        )?,
    })
}

/// Newer news about a message wins; older news arriving late is ignored,
/// so `recovered` before `failing` (out of order) cannot leave it failing.
/// `failing` never un-loses an exhausted message; `recovered` does (a
/// resend got through).
fn message_news(
    conn: &Connection,
    source: &str,
    endpoint_id: &str,
    a: &AttemptRef,
    state: &str,
    now: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO svix_messages (source, endpoint_id, msg_id, msg_event_id, state, status_code, attempt_at, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT(source, endpoint_id, msg_id) DO UPDATE SET
           state = excluded.state, status_code = excluded.status_code,
           attempt_at = excluded.attempt_at, received_at = excluded.received_at,
           msg_event_id = coalesce(excluded.msg_event_id, msg_event_id),
           acknowledged = CASE WHEN excluded.state = 'exhausted' THEN 0 ELSE acknowledged END
         WHERE (excluded.attempt_at IS NULL OR svix_messages.attempt_at IS NULL
                OR excluded.attempt_at >= svix_messages.attempt_at)
           AND (excluded.state != 'failing' OR svix_messages.state != 'exhausted')",
    )?
    .execute(params![source, endpoint_id, a.msg_id, a.msg_event_id, state, a.status_code, a.attempt_at.map(ms), now])?;
    Ok(())
}

/// Applies the event to the row `id` (the endpoint's own, or the grouped
/// row; see [`tracked_id`]).
fn apply_event(
    conn: &Connection,
    a: &SvixApply,
    id: &str,
) -> rusqlite::Result<Option<(String, bool)>> {
    let now = ms(a.now);
    let Some(real) = a.event.endpoint() else {
        return Ok(None);
    };
    let grouped = id != real.endpoint_id;
    let own = tracked(real, id);
    let (endpoint, deleted) = match &a.event {
        OpEvent::EndpointDisabled {
            fail_since,
            trigger,
            ..
        } => {
            let endpoint = &own;
            touch_endpoint(conn, &a.source, endpoint, now)?;
            let trigger = match trigger {
                Trigger::Automatic => "automatic",
                Trigger::Manual => "manual",
            };
            conn.execute(
                "UPDATE svix_endpoints SET disabled = 1, disable_trigger = ?3, fail_since = ?4, disabled_at = ?5
                 WHERE source = ?1 AND endpoint_id = ?2",
                params![a.source, endpoint.endpoint_id, trigger, fail_since.map(ms), now],
            )?;
            (endpoint, false)
        }
        OpEvent::EndpointEnabled(_) | OpEvent::EndpointUpdated(_) | OpEvent::EndpointCreated(_) => {
            let endpoint = &own;
            touch_endpoint(conn, &a.source, endpoint, now)?;
            let clears = matches!(a.event, OpEvent::EndpointEnabled(_))
                || a.clears_on.contains(&a.event_type);
            if clears {
                conn.execute(
                    "UPDATE svix_endpoints SET disabled = 0, deleted = 0 WHERE source = ?1 AND endpoint_id = ?2",
                    params![a.source, endpoint.endpoint_id],
                )?;
            }
            (endpoint, false)
        }
        OpEvent::EndpointDeleted(_) => {
            let endpoint = &own;
            touch_endpoint(conn, &a.source, endpoint, now)?;
            let clears = a.clears_on.contains(&a.event_type);
            // One grouped endpoint deleted does not delete the others.
            conn.execute(
                "UPDATE svix_endpoints SET deleted = CASE WHEN ?4 THEN deleted ELSE 1 END,
                   disabled = CASE WHEN ?3 THEN 0 ELSE disabled END
                 WHERE source = ?1 AND endpoint_id = ?2",
                params![a.source, endpoint.endpoint_id, clears, grouped],
            )?;
            (endpoint, !grouped)
        }
        OpEvent::AttemptFailing { attempt, .. }
        | OpEvent::AttemptRecovered { attempt, .. }
        | OpEvent::AttemptExhausted { attempt, .. } => {
            let endpoint = &own;
            let state = match a.event {
                OpEvent::AttemptFailing { .. } => "failing",
                OpEvent::AttemptRecovered { .. } => "recovered",
                _ => "exhausted",
            };
            touch_endpoint(conn, &a.source, endpoint, now)?;
            message_news(conn, &a.source, &endpoint.endpoint_id, attempt, state, now)?;
            if state == "exhausted" {
                conn.execute(
                    "UPDATE svix_endpoints SET exhausted_total = exhausted_total + 1 WHERE source = ?1 AND endpoint_id = ?2",
                    params![a.source, endpoint.endpoint_id],
                )?;
            }
            (endpoint, false)
        }
        OpEvent::BackgroundTaskFinished { .. } | OpEvent::Other => return Ok(None),
    };
    Ok(Some((endpoint.endpoint_id.clone(), deleted)))
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

fn queue_pages(
    conn: &Connection,
    a: &SvixApply,
    endpoint_id: &str,
    changes: &[AlertChange],
) -> Result<Vec<SvixPage>, StoreError> {
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    let row = endpoint_row(conn, &a.source, endpoint_id)?;
    let mut pages = Vec::new();
    for change in changes {
        // The severity travels as its own field (every notifier shows it).
        let summary = summary_text(a, endpoint_id, change, &row);
        let t = Transition {
            stream: a.stream.clone(),
            to: if change.firing {
                AlertState::Firing
            } else {
                AlertState::Ok
            },
            at: a.now,
            reason: summary.clone(),
            notifiers: a.notifiers.clone(),
        };
        // One alert id per endpoint and alert, shared by its firing and
        // resolved pages (PagerDuty dedup_key). The key keeps the pre-v8
        // form, so an alert that fired before an upgrade resolves under
        // the same id.
        let key = format!("{}/{}/{}", a.source, endpoint_id, change.alert.as_str());
        let alert = KeyedAlert {
            kind: change.alert.as_str(),
            family: "svix",
            key: &key,
            severity: change.severity.as_str(),
            source: &a.source,
            endpoint_id,
        };
        queue_keyed_pages(conn, &t, a.now, &alert)?;
        if change.alert == SvixAlert::MessagesExhausted {
            conn.execute(
                "UPDATE svix_endpoints SET lost_paged = ?3 WHERE source = ?1 AND endpoint_id = ?2",
                params![a.source, endpoint_id, row.lost.len() as i64],
            )?;
        }
        pages.push(SvixPage {
            endpoint_id: endpoint_id.to_string(),
            alert: change.alert,
            firing: change.firing,
            severity: change.severity,
            summary,
        });
    }
    Ok(pages)
}

pub(super) fn record(
    conn: &Connection,
    event: &NewEvent,
    a: &SvixApply,
) -> Result<(EventOutcome, Vec<SvixPage>), StoreError> {
    if record_event(conn, event)? == EventOutcome::Duplicate {
        return Ok((EventOutcome::Duplicate, Vec::new()));
    }
    let Some(real) = a.event.endpoint() else {
        return Ok((EventOutcome::Accepted, Vec::new()));
    };
    let stored_uid: Option<String> = conn
        .prepare_cached(
            "SELECT endpoint_uid FROM svix_endpoints WHERE source = ?1 AND endpoint_id = ?2",
        )?
        .query_row(params![a.source, real.endpoint_id], |r| r.get(0))
        .optional()?
        .flatten();
    let learned = learned(a, stored_uid.as_deref());
    let a = learned.as_ref().unwrap_or(a);
    let endpoint_id = tracked_id(conn, &a.source, &real.endpoint_id, a.mapped)?;
    let before = summary(conn, &a.source, &endpoint_id)?;
    let Some((_, deleted)) = apply_event(conn, a, &endpoint_id)? else {
        return Ok((EventOutcome::Accepted, Vec::new()));
    };
    // Exhausted after its redelivery was already accepted (the receiver
    // committed but Svix saw no 2xx in time): never lost.
    if let OpEvent::AttemptExhausted { attempt, .. } = &a.event {
        let joined =
            join_redelivered(conn, a, &endpoint_id, std::slice::from_ref(&attempt.msg_id))?;
        if !joined.is_empty() && event.audit {
            record_event(conn, &join_entry(a, &endpoint_id, &joined))?;
        }
    }
    let after = summary(conn, &a.source, &endpoint_id)?;
    let mut changes = alert_changes(&before, &after);
    if deleted && a.mapped {
        changes.push(AlertChange {
            alert: SvixAlert::EndpointDeleted,
            firing: true,
            severity: Severity::Warning,
        });
    }
    let pages = queue_pages(conn, a, &endpoint_id, &changes)?;
    Ok((EventOutcome::Accepted, pages))
}

/// Marks lost messages handled; resolves the exhausted alert when none remain.
pub(super) fn acknowledge(
    conn: &Connection,
    a: &SvixApply,
    endpoint_id: &str,
    msg_ids: &[String],
) -> Result<(usize, u64, Vec<SvixPage>), StoreError> {
    let endpoint_id = &ack_target(conn, &a.source, endpoint_id, a.mapped)?;
    let before = summary(conn, &a.source, endpoint_id)?;
    let mut acked = 0;
    for msg in msg_ids {
        acked += conn.execute(
            "UPDATE svix_messages SET acknowledged = 1
             WHERE source = ?1 AND endpoint_id = ?2 AND msg_id = ?3 AND state = 'exhausted' AND acknowledged = 0",
            params![a.source, endpoint_id, msg],
        )?;
    }
    let after = summary(conn, &a.source, endpoint_id)?;
    lower_lost_paged(conn, &a.source, endpoint_id, after.lost)?;
    let pages = queue_pages(conn, a, endpoint_id, &alert_changes(&before, &after))?;
    Ok((acked, after.lost, pages))
}

/// Marks the lost messages among `candidates` whose redelivery was
/// accepted ([`redelivery_hashes`] in `seen_deliveries`) as recovered.
/// Returns the ids it marked.
fn join_redelivered(
    conn: &Connection,
    a: &SvixApply,
    endpoint_id: &str,
    candidates: &[String],
) -> rusqlite::Result<Vec<String>> {
    let mut seen = conn.prepare_cached("SELECT 1 FROM seen_deliveries WHERE hash = ?1")?;
    let mut mark = conn.prepare_cached(
        "UPDATE svix_messages SET acknowledged = ?5, received_at = ?4
         WHERE source = ?1 AND endpoint_id = ?2 AND msg_id = ?3 AND state = 'exhausted' AND acknowledged = 0",
    )?;
    let mut joined = Vec::new();
    for msg in candidates {
        let mut arrived = false;
        for hash in redelivery_hashes(a, msg) {
            if seen.query_row([hash], |_| Ok(())).optional()?.is_some() {
                arrived = true;
                break;
            }
        }
        if arrived
            && mark.execute(params![a.source, endpoint_id, msg, ms(a.now), REDELIVERED])? == 1
        {
            joined.push(msg.clone());
        }
    }
    Ok(joined)
}

/// Joins every lost message of `endpoint_id` with an accepted redelivery:
/// the ones found stop being lost (status, `hushwatch_svix_lost_messages`),
/// the join is audited, and when none is left the exhausted alert resolves
/// with one page that says why. Svix sends nothing when a `recover` or
/// `resend` succeeds, so this is the only way hushwatch learns it.
fn redeliver(
    conn: &Connection,
    a: &SvixApply,
    endpoint_id: &str,
) -> Result<Vec<SvixPage>, StoreError> {
    let lost: Vec<String> = conn
        .prepare_cached(
            "SELECT msg_id FROM svix_messages
             WHERE source = ?1 AND endpoint_id = ?2 AND state = 'exhausted' AND acknowledged = 0",
        )?
        .query_map(params![a.source, endpoint_id], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if lost.is_empty() {
        return Ok(Vec::new());
    }
    let before = summary(conn, &a.source, endpoint_id)?;
    let joined = join_redelivered(conn, a, endpoint_id, &lost)?;
    if joined.is_empty() {
        return Ok(Vec::new());
    }
    if a.audit {
        record_event(conn, &join_entry(a, endpoint_id, &joined))?;
    }
    let after = summary(conn, &a.source, endpoint_id)?;
    lower_lost_paged(conn, &a.source, endpoint_id, after.lost)?;
    let a = SvixApply {
        event_type: REDELIVERED_EVENT.to_string(),
        ..a.clone()
    };
    queue_pages(conn, &a, endpoint_id, &alert_changes(&before, &after))
}

/// After messages left the lost set other than by a page, the count the
/// last page gave is lowered to what is left, so that new exhaustions
/// after that still regroup into an updated page.
fn lower_lost_paged(
    conn: &Connection,
    source: &str,
    endpoint_id: &str,
    lost: u64,
) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE svix_endpoints SET lost_paged = min(lost_paged, ?3) WHERE source = ?1 AND endpoint_id = ?2",
        params![source, endpoint_id, lost as i64],
    )?;
    Ok(())
}

/// Endpoints (id, uid) whose lost count grew since their last page.
pub(super) fn grown(
    conn: &Connection,
    source: &str,
) -> Result<Vec<(String, Option<String>)>, StoreError> {
    let rows = conn
        .prepare(
            "SELECT e.endpoint_id, e.endpoint_uid FROM svix_endpoints e
             WHERE e.source = ?1 AND e.lost_paged > 0 AND e.lost_paged < (
               SELECT count(*) FROM svix_messages m WHERE m.source = e.source AND m.endpoint_id = e.endpoint_id
                 AND m.state = 'exhausted' AND m.acknowledged = 0)",
        )?
        .query_map([source], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// One updated page for an endpoint whose burst of exhaustions grew
/// (grouping hundreds of messages into one page per endpoint).
pub(super) fn regroup(
    conn: &Connection,
    a: &SvixApply,
    endpoint_id: &str,
) -> Result<Vec<SvixPage>, StoreError> {
    // First what arrived since: a redelivered message is not paged as lost.
    let mut pages = redeliver(conn, a, endpoint_id)?;
    let still_grown = grown(conn, &a.source)?
        .iter()
        .any(|(id, _)| id == endpoint_id);
    if !still_grown {
        return Ok(pages);
    }
    let change = AlertChange {
        alert: SvixAlert::MessagesExhausted,
        firing: true,
        severity: Severity::Critical,
    };
    pages.extend(queue_pages(conn, a, endpoint_id, &[change])?);
    Ok(pages)
}

fn endpoint_row(
    conn: &Connection,
    source: &str,
    endpoint_id: &str,
) -> Result<SvixEndpointRow, StoreError> {
    let mut rows = endpoints(conn, Some((source, endpoint_id)))?;
    rows.pop()
        .ok_or_else(|| StoreError::Sql(format!("unknown Svix endpoint {endpoint_id}")))
}

/// Every known endpoint (or one), with its unacknowledged lost messages.
pub(super) fn endpoints(
    conn: &Connection,
    only: Option<(&str, &str)>,
) -> Result<Vec<SvixEndpointRow>, StoreError> {
    let (source, endpoint) = only.map_or((None, None), |(s, e)| (Some(s), Some(e)));
    let mut stmt = conn.prepare_cached(
        "SELECT source, endpoint_id, app_id, endpoint_uid, disabled, disable_trigger, fail_since, disabled_at, deleted, exhausted_total,
                (SELECT count(*) FROM svix_messages m WHERE m.source = e.source AND m.endpoint_id = e.endpoint_id AND m.state = 'failing'),
                (SELECT count(*) FROM svix_messages m WHERE m.source = e.source AND m.endpoint_id = e.endpoint_id
                   AND m.state = 'exhausted' AND m.acknowledged = ?3)
         FROM svix_endpoints e WHERE (?1 IS NULL OR source = ?1) AND (?2 IS NULL OR endpoint_id = ?2)
         ORDER BY source, endpoint_id",
    )?;
    let mut rows: Vec<SvixEndpointRow> = stmt
        .query_map(params![source, endpoint, REDELIVERED], |r| {
            let disabled: i64 = r.get(4)?;
            let trigger: Option<String> = r.get(5)?;
            Ok(SvixEndpointRow {
                source: r.get(0)?,
                endpoint_id: r.get(1)?,
                app_id: r.get(2)?,
                endpoint_uid: r.get(3)?,
                disabled: (disabled == 1).then(|| {
                    if trigger.as_deref() == Some("manual") {
                        DisableTrigger::Manual
                    } else {
                        DisableTrigger::Automatic
                    }
                }),
                fail_since: time(r.get(6)?),
                disabled_at: time(r.get(7)?),
                deleted: r.get::<_, i64>(8)? == 1,
                exhausted_total: r.get::<_, i64>(9)? as u64,
                failing: r.get::<_, i64>(10)? as u64,
                lost: Vec::new(),
                recovered: Vec::new(),
                recovered_total: r.get::<_, i64>(11)? as u64,
            })
        })?
        .collect::<Result<_, _>>()?;
    let mut lost = conn.prepare_cached(
        "SELECT msg_id, msg_event_id, status_code, attempt_at FROM svix_messages
         WHERE source = ?1 AND endpoint_id = ?2 AND state = 'exhausted' AND acknowledged = 0 ORDER BY received_at, msg_id",
    )?;
    let mut recovered = conn.prepare_cached(
        "SELECT msg_id, msg_event_id, received_at FROM svix_messages
         WHERE source = ?1 AND endpoint_id = ?2 AND state = 'exhausted' AND acknowledged = ?3
         ORDER BY received_at DESC, msg_id LIMIT ?4",
    )?;
    for row in &mut rows {
        row.lost = lost
            .query_map(params![row.source, row.endpoint_id], |r| {
                Ok(LostMessage {
                    msg_id: r.get(0)?,
                    msg_event_id: r.get(1)?,
                    status_code: r.get::<_, i64>(2)? as u16,
                    attempt_at: time(r.get(3)?),
                })
            })?
            .collect::<Result<_, _>>()?;
        if row.recovered_total > 0 {
            row.recovered = recovered
                .query_map(
                    params![row.source, row.endpoint_id, REDELIVERED, RECOVERED_SHOWN],
                    |r| {
                        Ok(RecoveredMessage {
                            msg_id: r.get(0)?,
                            msg_event_id: r.get(1)?,
                            recovered_at: time(r.get(2)?),
                        })
                    },
                )?
                .collect::<Result<_, _>>()?;
        }
    }
    Ok(rows)
}
