//! `store::svix` on PostgreSQL: the same decisions (the pure functions of
//! `store::svix`) from the same rows, read and written with the same
//! statements (`store::svix::sql`). What is PostgreSQL's own: replicas
//! share this database, so the endpoint row is locked (`FOR UPDATE`)
//! before its before/after summary is read (two replicas applying events
//! for one endpoint take turns and each sees the other's committed
//! change), the audit head is locked before it, and a redelivery is looked
//! up in one round trip (`= ANY($1)`, an array parameter SQLite lacks).

use super::ops::{lock_audit_head, queue_keyed_pages, record_event};
use super::sql::{exec, get, ms, one, opt, rows, Tx};
use crate::domain::svix::{alert_changes, AlertChange, EndpointSummary};
use crate::store::db::Columns;
use crate::store::svix::{
    ack_place, apply, endpoint_row, event_changes, event_place, join_entry, learned, lost_message,
    page_plans, recovered_message, redelivered, redelivery_hashes, sql, summary, SourceRows,
    SvixApply, SvixEndpointRow, SvixPage, Write, GROUPED_ENDPOINT, RECOVERED_SHOWN, REDELIVERED,
    REGROUPED,
};
use crate::store::{EventOutcome, NewEvent, StoreError};

async fn source_rows(
    tx: &Tx<'_>,
    source: &str,
    endpoint_id: &str,
) -> Result<SourceRows, StoreError> {
    let r = one(tx, sql::ROWS, &[&source, &endpoint_id, &GROUPED_ENDPOINT]).await?;
    Ok(SourceRows::of(Columns::pg(&r)?))
}

/// Locks the endpoint's row for the rest of the transaction. With
/// `create_at`, a missing row is created first (the event will touch it
/// anyway), so two replicas recording the first events of a new endpoint
/// also take turns instead of both reading "no state" as their before.
/// (SQLite has one writer: nothing to lock.)
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

async fn read_summary(
    tx: &Tx<'_>,
    source: &str,
    endpoint_id: &str,
) -> Result<EndpointSummary, StoreError> {
    let disabled = match opt(tx, sql::DISABLED, &[&source, &endpoint_id]).await? {
        Some(r) => Some(Columns::pg(&r)?),
        None => None,
    };
    let r = one(tx, sql::COUNTS, &[&source, &endpoint_id]).await?;
    Ok(summary(disabled, get(&r, 0)?, get(&r, 1)?))
}

async fn write(tx: &Tx<'_>, source: &str, id: &str, w: &Write, now: i64) -> Result<(), StoreError> {
    match w {
        Write::Touch(e) => {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                [&source, &e.endpoint_id, &e.app_id, &e.endpoint_uid, &now];
            exec(tx, sql::TOUCH, &params).await
        }
        Write::Disable {
            trigger,
            fail_since,
        } => exec(tx, sql::DISABLE, &[&source, &id, trigger, fail_since, &now]).await,
        Write::Clear => exec(tx, sql::CLEAR, &[&source, &id]).await,
        Write::Delete { clear, grouped } => {
            exec(tx, sql::DELETE, &[&source, &id, clear, grouped]).await
        }
        Write::News { attempt: m, state } => {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
                &source,
                &id,
                &m.msg_id,
                &m.msg_event_id,
                state,
                &i64::from(m.status_code),
                &m.attempt_at.map(ms),
                &now,
            ];
            exec(tx, sql::NEWS, &params).await
        }
        Write::CountExhausted => exec(tx, sql::COUNT_EXHAUSTED, &[&source, &id]).await,
    }?;
    Ok(())
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
    for plan in page_plans(a, endpoint_id, changes, &row) {
        queue_keyed_pages(tx, &plan.transition, a.now, &plan.alert()).await?;
        if let Some(lost) = plan.lost_paged {
            exec(tx, sql::SET_LOST_PAGED, &[&a.source, &endpoint_id, &lost]).await?;
        }
        pages.push(plan.page);
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
    let stored_uid: Option<String> =
        match opt(tx, sql::STORED_UID, &[&a.source, &real.endpoint_id]).await? {
            Some(r) => get(&r, 0)?,
            None => None,
        };
    let learned = learned(a, stored_uid.as_deref());
    let a = learned.as_ref().unwrap_or(a);
    let rows = source_rows(tx, &a.source, &real.endpoint_id).await?;
    let endpoint_id = event_place(a.mapped, rows).id(&a.source, &real.endpoint_id);
    lock_endpoint(tx, &a.source, &endpoint_id, Some(ms(a.now))).await?;
    let before = read_summary(tx, &a.source, &endpoint_id).await?;
    let Some(plan) = apply(a, &endpoint_id) else {
        return Ok((EventOutcome::Accepted, Vec::new()));
    };
    for w in &plan.writes {
        write(tx, &a.source, &endpoint_id, w, ms(a.now)).await?;
    }
    if let Some(msg) = &plan.join {
        let joined = join_redelivered(tx, a, &endpoint_id, std::slice::from_ref(msg)).await?;
        if !joined.is_empty() && event.audit {
            // Only when the event itself was audited: its head lock was
            // taken first, before the endpoint row (`a.audit` is read from
            // the config separately and could differ across a reload).
            let entry = join_entry(a, &endpoint_id, &joined);
            lock_audit_head(tx, std::slice::from_ref(&entry)).await?;
            record_event(tx, &entry).await?;
        }
    }
    let after = read_summary(tx, &a.source, &endpoint_id).await?;
    let changes = event_changes(a, &plan, &before, &after);
    let pages = queue_pages(tx, a, &endpoint_id, &changes).await?;
    Ok((EventOutcome::Accepted, pages))
}

pub(super) async fn acknowledge(
    tx: &Tx<'_>,
    a: &SvixApply,
    endpoint_id: &str,
    msg_ids: &[String],
) -> Result<(usize, u64, Vec<SvixPage>), StoreError> {
    let rows = source_rows(tx, &a.source, endpoint_id).await?;
    let endpoint_id = &ack_place(a.mapped, rows).id(&a.source, endpoint_id);
    lock_endpoint(tx, &a.source, endpoint_id, None).await?;
    let before = read_summary(tx, &a.source, endpoint_id).await?;
    let mut acked = 0;
    for msg in msg_ids {
        acked += exec(tx, sql::ACKNOWLEDGE, &[&a.source, &endpoint_id, msg]).await?;
    }
    let after = read_summary(tx, &a.source, endpoint_id).await?;
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

async fn lost_ids(tx: &Tx<'_>, source: &str, endpoint_id: &str) -> Result<Vec<String>, StoreError> {
    rows(tx, sql::LOST_IDS, &[&source, &endpoint_id])
        .await?
        .iter()
        .map(|r| get(r, 0))
        .collect()
}

/// `store::svix::redeliver` on PostgreSQL. The caller holds the audit head
/// (when auditing) and then the endpoint row: the order every appending
/// transaction takes them in.
async fn redeliver(
    tx: &Tx<'_>,
    a: &SvixApply,
    endpoint_id: &str,
) -> Result<Vec<SvixPage>, StoreError> {
    let lost = lost_ids(tx, &a.source, endpoint_id).await?;
    if lost.is_empty() {
        return Ok(Vec::new());
    }
    let before = read_summary(tx, &a.source, endpoint_id).await?;
    let joined = join_redelivered(tx, a, endpoint_id, &lost).await?;
    if joined.is_empty() {
        return Ok(Vec::new());
    }
    if a.audit {
        record_event(tx, &join_entry(a, endpoint_id, &joined)).await?;
    }
    let after = read_summary(tx, &a.source, endpoint_id).await?;
    lower_lost_paged(tx, &a.source, endpoint_id, after.lost).await?;
    queue_pages(
        tx,
        &redelivered(a),
        endpoint_id,
        &alert_changes(&before, &after),
    )
    .await
}

/// Whether any lost message of `endpoint_id` has an accepted redelivery
/// (one query over every candidate key; no lock taken).
async fn has_redelivery(tx: &Tx<'_>, a: &SvixApply, endpoint_id: &str) -> Result<bool, StoreError> {
    let hashes: Vec<String> = lost_ids(tx, &a.source, endpoint_id)
        .await?
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

async fn lower_lost_paged(
    tx: &Tx<'_>,
    source: &str,
    endpoint_id: &str,
    lost: u64,
) -> Result<(), StoreError> {
    let lost = i64::try_from(lost).unwrap_or(i64::MAX);
    exec(tx, sql::LOWER_LOST_PAGED, &[&source, &endpoint_id, &lost]).await?;
    Ok(())
}

pub(super) async fn grown(
    tx: &Tx<'_>,
    source: &str,
) -> Result<Vec<(String, Option<String>)>, StoreError> {
    rows(tx, sql::GROWN, &[&source])
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
    let grown = grown(tx, &a.source).await?;
    if grown.iter().any(|(id, _)| id == endpoint_id) {
        pages.extend(queue_pages(tx, a, endpoint_id, &[REGROUPED]).await?);
    }
    Ok(pages)
}

pub(super) async fn endpoints(
    tx: &Tx<'_>,
    only: Option<(&str, &str)>,
) -> Result<Vec<SvixEndpointRow>, StoreError> {
    let (source, endpoint) = only.map_or((None, None), |(s, e)| (Some(s), Some(e)));
    let mut out = Vec::new();
    for r in rows(tx, sql::ENDPOINTS, &[&source, &endpoint, &REDELIVERED]).await? {
        out.push(endpoint_row(Columns::pg(&r)?));
    }
    for row in &mut out {
        row.lost = rows(tx, sql::LOST, &[&row.source, &row.endpoint_id])
            .await?
            .iter()
            .map(|r| {
                Ok(lost_message((
                    get(r, 0)?,
                    get(r, 1)?,
                    get(r, 2)?,
                    get(r, 3)?,
                )))
            })
            .collect::<Result<_, StoreError>>()?;
        if row.recovered_total > 0 {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [
                &row.source,
                &row.endpoint_id,
                &REDELIVERED,
                &RECOVERED_SHOWN,
            ];
            row.recovered = rows(tx, sql::RECOVERED, &params)
                .await?
                .iter()
                .map(|r| Ok(recovered_message(Columns::pg(r)?)))
                .collect::<Result<_, StoreError>>()?;
        }
    }
    Ok(out)
}
