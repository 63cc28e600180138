//! `store::svix` on PostgreSQL: an operational event, the endpoint state it
//! changes and the pages that causes, in one transaction. The endpoint row
//! is locked (`FOR UPDATE`) before its before/after summary is read, so two
//! replicas applying events for one endpoint take turns and each sees the
//! other's committed change.

use super::ops::{lock_audit_head, queue_keyed_pages, record_event};
use super::sql::{exec, get, ms, one, opt, rows, Tx};
use crate::domain::svix::{
    alert_changes, AlertChange, DisableTrigger, EndpointSummary, Severity, SvixAlert,
};
use crate::ingest::svix_ops::{AttemptRef, EndpointRef, OpEvent, Trigger};
use crate::store::ops::KeyedAlert;
use crate::store::svix::{
    join_entry, learned, redelivery_hashes, summary_text, tracked, LostMessage, RecoveredMessage,
    SvixApply, SvixEndpointRow, SvixPage, GROUPED_ENDPOINT, MAX_ENDPOINTS_PER_SOURCE,
    RECOVERED_SHOWN, REDELIVERED, REDELIVERED_EVENT,
};
use crate::store::{AlertState, EventOutcome, NewEvent, StoreError, Transition};
use chrono::DateTime;

fn time(ms: Option<i64>) -> Option<chrono::DateTime<chrono::Utc>> {
    ms.and_then(DateTime::from_timestamp_millis)
}

async fn has_row(tx: &Tx<'_>, source: &str, endpoint_id: &str) -> Result<bool, StoreError> {
    Ok(opt(
        tx,
        "SELECT 1 FROM svix_endpoints WHERE source = $1 AND endpoint_id = $2",
        &[&source, &endpoint_id],
    )
    .await?
    .is_some())
}

/// Which row holds `endpoint_id`'s state (see `store::svix::tracked_id`).
/// Two replicas adding new endpoints at once may each see room for one
/// more, so the cap can be passed by at most the number of concurrent
/// writers; it still bounds the series.
async fn tracked_id(
    tx: &Tx<'_>,
    source: &str,
    endpoint_id: &str,
    mapped: bool,
) -> Result<String, StoreError> {
    if mapped || has_row(tx, source, endpoint_id).await? {
        return Ok(endpoint_id.to_string());
    }
    let r = one(
        tx,
        "SELECT count(*) FROM svix_endpoints WHERE source = $1 AND endpoint_id <> $2",
        &[&source, &GROUPED_ENDPOINT],
    )
    .await?;
    let count: i64 = get(&r, 0)?;
    if count < MAX_ENDPOINTS_PER_SOURCE {
        return Ok(endpoint_id.to_string());
    }
    if !has_row(tx, source, GROUPED_ENDPOINT).await? {
        crate::store::svix::warn_grouping(source);
    }
    Ok(GROUPED_ENDPOINT.to_string())
}

/// The row an acknowledgement applies to (see `store::svix::ack_target`).
async fn ack_target(
    tx: &Tx<'_>,
    source: &str,
    endpoint_id: &str,
    mapped: bool,
) -> Result<String, StoreError> {
    if mapped
        || has_row(tx, source, endpoint_id).await?
        || !has_row(tx, source, GROUPED_ENDPOINT).await?
    {
        return Ok(endpoint_id.to_string());
    }
    Ok(GROUPED_ENDPOINT.to_string())
}

async fn touch_endpoint(
    tx: &Tx<'_>,
    source: &str,
    e: &EndpointRef,
    now: i64,
) -> Result<(), StoreError> {
    exec(
        tx,
        "INSERT INTO svix_endpoints (source, endpoint_id, app_id, endpoint_uid, updated_at)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (source, endpoint_id) DO UPDATE SET
           app_id = coalesce(excluded.app_id, svix_endpoints.app_id),
           endpoint_uid = coalesce(excluded.endpoint_uid, svix_endpoints.endpoint_uid),
           updated_at = excluded.updated_at",
        &[&source, &e.endpoint_id, &e.app_id, &e.endpoint_uid, &now],
    )
    .await?;
    Ok(())
}

/// Locks the endpoint's row for the rest of the transaction. With
/// `create_at`, a missing row is created first (the event will touch it
/// anyway), so two replicas recording the first events of a new endpoint
/// also take turns instead of both reading "no state" as their before.
async fn lock_endpoint(
    tx: &Tx<'_>,
    source: &str,
    endpoint_id: &str,
    create_at: Option<i64>,
) -> Result<(), StoreError> {
    if let Some(now) = create_at {
        exec(
            tx,
            "INSERT INTO svix_endpoints (source, endpoint_id, updated_at) VALUES ($1, $2, $3)
             ON CONFLICT (source, endpoint_id) DO NOTHING",
            &[&source, &endpoint_id, &now],
        )
        .await?;
    }
    opt(
        tx,
        "SELECT 1 FROM svix_endpoints WHERE source = $1 AND endpoint_id = $2 FOR UPDATE",
        &[&source, &endpoint_id],
    )
    .await?;
    Ok(())
}

async fn summary(
    tx: &Tx<'_>,
    source: &str,
    endpoint_id: &str,
) -> Result<EndpointSummary, StoreError> {
    let disabled = match opt(
        tx,
        "SELECT disabled, disable_trigger FROM svix_endpoints WHERE source = $1 AND endpoint_id = $2",
        &[&source, &endpoint_id],
    )
    .await?
    {
        Some(r) => Some((get::<i64>(&r, 0)?, get::<Option<String>>(&r, 1)?)),
        None => None,
    };
    let r = one(
        tx,
        "SELECT count(*) FILTER (WHERE state = 'failing'),
                count(*) FILTER (WHERE state = 'exhausted' AND acknowledged = 0)
         FROM svix_messages WHERE source = $1 AND endpoint_id = $2",
        &[&source, &endpoint_id],
    )
    .await?;
    let failing: i64 = get(&r, 0)?;
    let lost: i64 = get(&r, 1)?;
    Ok(EndpointSummary {
        disabled: match disabled {
            Some((1, Some(t))) if t == "manual" => Some(DisableTrigger::Manual),
            Some((1, _)) => Some(DisableTrigger::Automatic),
            _ => None,
        },
        failing: u64::try_from(failing).unwrap_or(0),
        lost: u64::try_from(lost).unwrap_or(0),
    })
}

/// Newer news about a message wins (see `store::svix::message_news`).
async fn message_news(
    tx: &Tx<'_>,
    source: &str,
    endpoint_id: &str,
    a: &AttemptRef,
    state: &str,
    now: i64,
) -> Result<(), StoreError> {
    exec(
        tx,
        "INSERT INTO svix_messages (source, endpoint_id, msg_id, msg_event_id, state, status_code, attempt_at, received_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (source, endpoint_id, msg_id) DO UPDATE SET
           state = excluded.state, status_code = excluded.status_code,
           attempt_at = excluded.attempt_at, received_at = excluded.received_at,
           msg_event_id = coalesce(excluded.msg_event_id, svix_messages.msg_event_id),
           acknowledged = CASE WHEN excluded.state = 'exhausted' THEN 0 ELSE svix_messages.acknowledged END
         WHERE (excluded.attempt_at IS NULL OR svix_messages.attempt_at IS NULL
                OR excluded.attempt_at >= svix_messages.attempt_at)
           AND (excluded.state <> 'failing' OR svix_messages.state <> 'exhausted')",
        &[
            &source,
            &endpoint_id,
            &a.msg_id,
            &a.msg_event_id,
            &state,
            &i64::from(a.status_code),
            &a.attempt_at.map(ms),
            &now,
        ],
    )
    .await?;
    Ok(())
}

/// Applies the event to the row `id` (the endpoint's own, or the grouped row).
async fn apply_event(
    tx: &Tx<'_>,
    a: &SvixApply,
    id: &str,
) -> Result<Option<(String, bool)>, StoreError> {
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
            touch_endpoint(tx, &a.source, endpoint, now).await?;
            let trigger = match trigger {
                Trigger::Automatic => "automatic",
                Trigger::Manual => "manual",
            };
            exec(
                tx,
                "UPDATE svix_endpoints SET disabled = 1, disable_trigger = $3, fail_since = $4, disabled_at = $5
                 WHERE source = $1 AND endpoint_id = $2",
                &[&a.source, &endpoint.endpoint_id, &trigger, &fail_since.map(ms), &now],
            )
            .await?;
            (endpoint, false)
        }
        OpEvent::EndpointEnabled(_) | OpEvent::EndpointUpdated(_) | OpEvent::EndpointCreated(_) => {
            let endpoint = &own;
            touch_endpoint(tx, &a.source, endpoint, now).await?;
            let clears = matches!(a.event, OpEvent::EndpointEnabled(_))
                || a.clears_on.contains(&a.event_type);
            if clears {
                exec(
                    tx,
                    "UPDATE svix_endpoints SET disabled = 0, deleted = 0 WHERE source = $1 AND endpoint_id = $2",
                    &[&a.source, &endpoint.endpoint_id],
                )
                .await?;
            }
            (endpoint, false)
        }
        OpEvent::EndpointDeleted(_) => {
            let endpoint = &own;
            touch_endpoint(tx, &a.source, endpoint, now).await?;
            let clears = a.clears_on.contains(&a.event_type);
            // One grouped endpoint deleted does not delete the others.
            exec(
                tx,
                "UPDATE svix_endpoints SET deleted = CASE WHEN $4 THEN deleted ELSE 1 END,
                   disabled = CASE WHEN $3 THEN 0 ELSE disabled END
                 WHERE source = $1 AND endpoint_id = $2",
                &[&a.source, &endpoint.endpoint_id, &clears, &grouped],
            )
            .await?;
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
            touch_endpoint(tx, &a.source, endpoint, now).await?;
            message_news(tx, &a.source, &endpoint.endpoint_id, attempt, state, now).await?;
            if state == "exhausted" {
                exec(
                    tx,
                    "UPDATE svix_endpoints SET exhausted_total = exhausted_total + 1 WHERE source = $1 AND endpoint_id = $2",
                    &[&a.source, &endpoint.endpoint_id],
                )
                .await?;
            }
            (endpoint, false)
        }
        OpEvent::BackgroundTaskFinished { .. } | OpEvent::Other => return Ok(None),
    };
    Ok(Some((endpoint.endpoint_id.clone(), deleted)))
}

async fn queue_pages(
    tx: &Tx<'_>,
    a: &SvixApply,
    endpoint_id: &str,
    changes: &[AlertChange],
) -> Result<Vec<SvixPage>, StoreError> {
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    let row = endpoints(tx, Some((&a.source, endpoint_id)))
        .await?
        .pop()
        .ok_or_else(|| StoreError::Sql(format!("unknown Svix endpoint {endpoint_id}")))?;
    let mut pages = Vec::new();
    for change in changes {
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
        let key = format!("{}/{}/{}", a.source, endpoint_id, change.alert.as_str());
        let alert = KeyedAlert {
            kind: change.alert.as_str(),
            family: "svix",
            key: &key,
            severity: change.severity.as_str(),
            source: &a.source,
            endpoint_id,
        };
        queue_keyed_pages(tx, &t, a.now, &alert).await?;
        if change.alert == SvixAlert::MessagesExhausted {
            exec(
                tx,
                "UPDATE svix_endpoints SET lost_paged = $3 WHERE source = $1 AND endpoint_id = $2",
                &[&a.source, &endpoint_id, &(row.lost.len() as i64)],
            )
            .await?;
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

pub(super) async fn record(
    tx: &Tx<'_>,
    event: &NewEvent,
    a: &SvixApply,
) -> Result<(EventOutcome, Vec<SvixPage>), StoreError> {
    lock_audit_head(tx, std::slice::from_ref(event)).await?;
    if record_event(tx, event).await? == EventOutcome::Duplicate {
        return Ok((EventOutcome::Duplicate, Vec::new()));
    }
    let Some(real) = a.event.endpoint() else {
        return Ok((EventOutcome::Accepted, Vec::new()));
    };
    let stored_uid: Option<String> = match opt(
        tx,
        "SELECT endpoint_uid FROM svix_endpoints WHERE source = $1 AND endpoint_id = $2",
        &[&a.source, &real.endpoint_id],
    )
    .await?
    {
        Some(r) => get(&r, 0)?,
        None => None,
    };
    let learned = learned(a, stored_uid.as_deref());
    let a = learned.as_ref().unwrap_or(a);
    let endpoint_id = tracked_id(tx, &a.source, &real.endpoint_id, a.mapped).await?;
    lock_endpoint(tx, &a.source, &endpoint_id, Some(ms(a.now))).await?;
    let before = summary(tx, &a.source, &endpoint_id).await?;
    let Some((_, deleted)) = apply_event(tx, a, &endpoint_id).await? else {
        return Ok((EventOutcome::Accepted, Vec::new()));
    };
    // Exhausted after its redelivery was already accepted: never lost
    // (see `store::svix::record`).
    if let OpEvent::AttemptExhausted { attempt, .. } = &a.event {
        let joined =
            join_redelivered(tx, a, &endpoint_id, std::slice::from_ref(&attempt.msg_id)).await?;
        if !joined.is_empty() && event.audit {
            // Only when the event itself was audited: its head lock was
            // taken first, before the endpoint row (`a.audit` is read from
            // the config separately and could differ across a reload).
            let entry = join_entry(a, &endpoint_id, &joined);
            lock_audit_head(tx, std::slice::from_ref(&entry)).await?;
            record_event(tx, &entry).await?;
        }
    }
    let after = summary(tx, &a.source, &endpoint_id).await?;
    let mut changes = alert_changes(&before, &after);
    if deleted && a.mapped {
        changes.push(AlertChange {
            alert: SvixAlert::EndpointDeleted,
            firing: true,
            severity: Severity::Warning,
        });
    }
    let pages = queue_pages(tx, a, &endpoint_id, &changes).await?;
    Ok((EventOutcome::Accepted, pages))
}

pub(super) async fn acknowledge(
    tx: &Tx<'_>,
    a: &SvixApply,
    endpoint_id: &str,
    msg_ids: &[String],
) -> Result<(usize, u64, Vec<SvixPage>), StoreError> {
    let endpoint_id = &ack_target(tx, &a.source, endpoint_id, a.mapped).await?;
    lock_endpoint(tx, &a.source, endpoint_id, None).await?;
    let before = summary(tx, &a.source, endpoint_id).await?;
    let mut acked = 0;
    for msg in msg_ids {
        acked += exec(
            tx,
            "UPDATE svix_messages SET acknowledged = 1
             WHERE source = $1 AND endpoint_id = $2 AND msg_id = $3 AND state = 'exhausted' AND acknowledged = 0",
            &[&a.source, &endpoint_id, msg],
        )
        .await?;
    }
    let after = summary(tx, &a.source, endpoint_id).await?;
    lower_lost_paged(tx, &a.source, endpoint_id, after.lost).await?;
    let pages = queue_pages(tx, a, endpoint_id, &alert_changes(&before, &after)).await?;
    Ok((
        usize::try_from(acked).unwrap_or(usize::MAX),
        after.lost,
        pages,
    ))
}

/// `store::svix::join_redelivered` on PostgreSQL.
async fn join_redelivered(
    tx: &Tx<'_>,
    a: &SvixApply,
    endpoint_id: &str,
    candidates: &[String],
) -> Result<Vec<String>, StoreError> {
    let mut joined = Vec::new();
    for msg in candidates {
        let hashes = redelivery_hashes(a, msg);
        let arrived = opt(
            tx,
            "SELECT 1 FROM seen_deliveries WHERE hash = ANY($1)",
            &[&hashes],
        )
        .await?
        .is_some();
        if arrived
            && exec(
                tx,
                "UPDATE svix_messages SET acknowledged = $5, received_at = $4
                 WHERE source = $1 AND endpoint_id = $2 AND msg_id = $3 AND state = 'exhausted' AND acknowledged = 0",
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

/// `store::svix::redeliver` on PostgreSQL. The caller holds the audit head
/// (when auditing) and then the endpoint row: the order every appending
/// transaction takes them in.
async fn redeliver(
    tx: &Tx<'_>,
    a: &SvixApply,
    endpoint_id: &str,
) -> Result<Vec<SvixPage>, StoreError> {
    let lost: Vec<String> = rows(
        tx,
        "SELECT msg_id FROM svix_messages
         WHERE source = $1 AND endpoint_id = $2 AND state = 'exhausted' AND acknowledged = 0",
        &[&a.source, &endpoint_id],
    )
    .await?
    .iter()
    .map(|r| get(r, 0))
    .collect::<Result<_, StoreError>>()?;
    if lost.is_empty() {
        return Ok(Vec::new());
    }
    let before = summary(tx, &a.source, endpoint_id).await?;
    let joined = join_redelivered(tx, a, endpoint_id, &lost).await?;
    if joined.is_empty() {
        return Ok(Vec::new());
    }
    if a.audit {
        record_event(tx, &join_entry(a, endpoint_id, &joined)).await?;
    }
    let after = summary(tx, &a.source, endpoint_id).await?;
    lower_lost_paged(tx, &a.source, endpoint_id, after.lost).await?;
    let a = SvixApply {
        event_type: REDELIVERED_EVENT.to_string(),
        ..a.clone()
    };
    queue_pages(tx, &a, endpoint_id, &alert_changes(&before, &after)).await
}

/// Whether any lost message of `endpoint_id` has an accepted redelivery
/// (one query over every candidate key; no lock taken).
async fn has_redelivery(tx: &Tx<'_>, a: &SvixApply, endpoint_id: &str) -> Result<bool, StoreError> {
    let hashes: Vec<String> = rows(
        tx,
        "SELECT msg_id FROM svix_messages
         WHERE source = $1 AND endpoint_id = $2 AND state = 'exhausted' AND acknowledged = 0",
        &[&a.source, &endpoint_id],
    )
    .await?
    .iter()
    .map(|r| get::<String>(r, 0))
    .collect::<Result<Vec<_>, StoreError>>()?
    .iter()
    .flat_map(|msg| redelivery_hashes(a, msg))
    .collect();
    if hashes.is_empty() {
        return Ok(false);
    }
    Ok(opt(
        tx,
        "SELECT 1 FROM seen_deliveries WHERE hash = ANY($1) LIMIT 1",
        &[&hashes],
    )
    .await?
    .is_some())
}

/// `store::svix::lower_lost_paged` on PostgreSQL.
async fn lower_lost_paged(
    tx: &Tx<'_>,
    source: &str,
    endpoint_id: &str,
    lost: u64,
) -> Result<(), StoreError> {
    exec(
        tx,
        "UPDATE svix_endpoints SET lost_paged = LEAST(lost_paged, $3) WHERE source = $1 AND endpoint_id = $2",
        &[&source, &endpoint_id, &i64::try_from(lost).unwrap_or(i64::MAX)],
    )
    .await?;
    Ok(())
}

pub(super) async fn grown(
    tx: &Tx<'_>,
    source: &str,
) -> Result<Vec<(String, Option<String>)>, StoreError> {
    rows(
        tx,
        "SELECT e.endpoint_id, e.endpoint_uid FROM svix_endpoints e
         WHERE e.source = $1 AND e.lost_paged > 0 AND e.lost_paged < (
           SELECT count(*) FROM svix_messages m WHERE m.source = e.source AND m.endpoint_id = e.endpoint_id
             AND m.state = 'exhausted' AND m.acknowledged = 0)",
        &[&source],
    )
    .await?
    .iter()
    .map(|r| Ok((get(r, 0)?, get(r, 1)?)))
    .collect()
}

pub(super) async fn regroup(
    tx: &Tx<'_>,
    a: &SvixApply,
    endpoint_id: &str,
) -> Result<Vec<SvixPage>, StoreError> {
    // The join audits, and an audit append needs the audit head locked
    // before the endpoint row; that lock queues every audited ingest, so it
    // is taken only when some lost message has a redelivery (looked up
    // without locks first). A redelivery accepted after the look-up is
    // joined on the next tick.
    let pending = has_redelivery(tx, a, endpoint_id).await?;
    if pending && a.audit {
        let entry = join_entry(a, endpoint_id, &[]);
        lock_audit_head(tx, std::slice::from_ref(&entry)).await?;
    }
    lock_endpoint(tx, &a.source, endpoint_id, None).await?;
    // First what arrived since: a redelivered message is not paged as lost.
    let mut pages = if pending {
        redeliver(tx, a, endpoint_id).await?
    } else {
        Vec::new()
    };
    let still_grown = grown(tx, &a.source)
        .await?
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
    pages.extend(queue_pages(tx, a, endpoint_id, &[change]).await?);
    Ok(pages)
}

pub(super) async fn endpoints(
    tx: &Tx<'_>,
    only: Option<(&str, &str)>,
) -> Result<Vec<SvixEndpointRow>, StoreError> {
    let (source, endpoint) = only.map_or((None, None), |(s, e)| (Some(s), Some(e)));
    let mut out = Vec::new();
    for r in rows(
        tx,
        "SELECT source, endpoint_id, app_id, endpoint_uid, disabled, disable_trigger, fail_since, disabled_at, deleted, exhausted_total,
                (SELECT count(*) FROM svix_messages m WHERE m.source = e.source AND m.endpoint_id = e.endpoint_id AND m.state = 'failing'),
                (SELECT count(*) FROM svix_messages m WHERE m.source = e.source AND m.endpoint_id = e.endpoint_id
                   AND m.state = 'exhausted' AND m.acknowledged = $3)
         FROM svix_endpoints e WHERE ($1::TEXT IS NULL OR source = $1) AND ($2::TEXT IS NULL OR endpoint_id = $2)
         ORDER BY source, endpoint_id",
        &[&source, &endpoint, &REDELIVERED],
    )
    .await?
    {
        let disabled: i64 = get(&r, 4)?;
        let trigger: Option<String> = get(&r, 5)?;
        out.push(SvixEndpointRow {
            source: get(&r, 0)?,
            endpoint_id: get(&r, 1)?,
            app_id: get(&r, 2)?,
            endpoint_uid: get(&r, 3)?,
            disabled: (disabled == 1).then(|| {
                if trigger.as_deref() == Some("manual") {
                    DisableTrigger::Manual
                } else {
                    DisableTrigger::Automatic
                }
            }),
            fail_since: time(get(&r, 6)?),
            disabled_at: time(get(&r, 7)?),
            deleted: get::<i64>(&r, 8)? == 1,
            exhausted_total: u64::try_from(get::<i64>(&r, 9)?).unwrap_or(0),
            failing: u64::try_from(get::<i64>(&r, 10)?).unwrap_or(0),
            lost: Vec::new(),
            recovered: Vec::new(),
            recovered_total: u64::try_from(get::<i64>(&r, 11)?).unwrap_or(0),
        });
    }
    for row in &mut out {
        row.lost = rows(
            tx,
            "SELECT msg_id, msg_event_id, status_code, attempt_at FROM svix_messages
             WHERE source = $1 AND endpoint_id = $2 AND state = 'exhausted' AND acknowledged = 0
             ORDER BY received_at, msg_id",
            &[&row.source, &row.endpoint_id],
        )
        .await?
        .iter()
        .map(|r| {
            Ok(LostMessage {
                msg_id: get(r, 0)?,
                msg_event_id: get(r, 1)?,
                status_code: u16::try_from(get::<i64>(r, 2)?).unwrap_or(0),
                attempt_at: time(get(r, 3)?),
            })
        })
        .collect::<Result<_, StoreError>>()?;
        if row.recovered_total > 0 {
            row.recovered = rows(
                tx,
                "SELECT msg_id, msg_event_id, received_at FROM svix_messages
                 WHERE source = $1 AND endpoint_id = $2 AND state = 'exhausted' AND acknowledged = $3
                 ORDER BY received_at DESC, msg_id LIMIT $4",
                &[&row.source, &row.endpoint_id, &REDELIVERED, &RECOVERED_SHOWN],
            )
            .await?
            .iter()
            .map(|r| {
                Ok(RecoveredMessage {
                    msg_id: get(r, 0)?,
                    msg_event_id: get(r, 1)?,
                    recovered_at: time(get(r, 2)?),
                })
            })
            .collect::<Result<_, StoreError>>()?;
        }
    }
    Ok(out)
}
