//! `store::reconcile` on PostgreSQL: the same decisions (the pure functions of
//! `store::reconcile`) from the same rows, with the same statements
//! (`store::reconcile::sql`); the alert row is locked for its compare-and-set.

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;

use super::ops::{append_audit, queue_keyed_pages};
use super::sql::{exec, get, ms, opt, rows, state, state_str, Tx};
use crate::store::db::Columns;
use crate::store::reconcile::{
    drift_json, first_per_stream, latest_report, missing_alert, reconcile_move, reconcile_row,
    revoke_alert, revoke_alert_key, sql, stale_alert, stale_key, subject_entry, subject_needle,
    LatestReport, NewReconciliation, ReconcileRow, ReconcileTransition, StaleGrant, SubjectEntry,
};
use crate::store::StoreError;

pub(super) async fn record(
    tx: &Tx<'_>,
    r: &NewReconciliation,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let params: [&(dyn ToSql + Sync); 7] = [
        &r.stream,
        &r.id,
        &ms(now),
        &ms(r.started_at),
        &ms(r.finished_at),
        &r.checked,
        &drift_json(&r.drift),
    ];
    if exec(tx, sql::RECORD, &params).await? == 0 {
        return Ok(false);
    }
    exec(tx, sql::LAST_REPORT, &[&r.stream, &ms(now)]).await?;
    if let Some(entry) = &r.entry {
        append_audit(tx, entry).await?;
    }
    if let Some(page) = &r.page {
        let key = revoke_alert_key(&r.stream, &r.id);
        queue_keyed_pages(tx, page, now, &revoke_alert(&key, &r.id)).await?;
    }
    Ok(true)
}

pub(super) async fn states(tx: &Tx<'_>) -> Result<Vec<ReconcileRow>, StoreError> {
    rows(tx, sql::STATES, &[])
        .await?
        .iter()
        .map(|r| reconcile_row(get(r, 0)?, get(r, 1)?, state(get(r, 2)?)?))
        .collect()
}

pub(super) async fn latest_reports(tx: &Tx<'_>) -> Result<Vec<LatestReport>, StoreError> {
    let reports = rows(tx, sql::LATEST_REPORTS, &[])
        .await?
        .iter()
        .map(|r| latest_report(Columns::pg(r)?))
        .collect::<Result<_, _>>()?;
    Ok(first_per_stream(reports))
}

/// Compare-and-set on the stream's alert. The row is created first so that
/// it can be locked (`FOR UPDATE`): replicas share this database, and two
/// of them evaluating the same stream take turns (SQLite has one writer).
pub(super) async fn transition(tx: &Tx<'_>, t: &ReconcileTransition) -> Result<bool, StoreError> {
    exec(
        tx,
        "INSERT INTO reconcile_state (stream) VALUES ($1) ON CONFLICT (stream) DO NOTHING",
        &[&t.stream],
    )
    .await?;
    let locked = format!("{} FOR UPDATE", sql::STATE);
    let current = match opt(tx, &locked, &[&t.stream]).await? {
        Some(row) => Some(state(get(&row, 0)?)?),
        None => None,
    };
    let Some(page) = reconcile_move(current, t) else {
        return Ok(false);
    };
    exec(tx, sql::SET_STATE, &[&t.stream, &state_str(&t.to)]).await?;
    queue_keyed_pages(tx, &page, t.at, &missing_alert(&t.stream)).await?;
    Ok(true)
}

pub(super) async fn subject_entries(
    tx: &Tx<'_>,
    subject: &str,
    window: Option<&(String, DateTime<Utc>)>,
    limit: i64,
) -> Result<Vec<SubjectEntry>, StoreError> {
    let needle = subject_needle(subject);
    let found = match window {
        Some((stream, since)) => {
            let params: [&(dyn ToSql + Sync); 4] = [&needle, &limit, stream, &ms(*since)];
            rows(tx, sql::WINDOWED_SUBJECTS_PG, &params).await?
        }
        None => rows(tx, sql::SUBJECTS_PG, &[&needle, &limit]).await?,
    };
    let mut out = Vec::new();
    for r in found {
        out.extend(subject_entry(Columns::pg(&r)?, subject)?);
    }
    Ok(out)
}

pub(super) async fn record_stale(
    tx: &Tx<'_>,
    g: &StaleGrant,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let params: [&(dyn ToSql + Sync); 7] = [
        &g.stream,
        &g.delivery_id,
        &g.subject,
        &ms(g.grant_event_time),
        &g.revoke_seq,
        &ms(now),
        &g.revoke_delivery_id,
    ];
    if exec(tx, sql::STALE, &params).await? == 0 {
        return Ok(false);
    }
    queue_keyed_pages(tx, &g.page, now, &stale_alert(&stale_key(g))).await?;
    Ok(true)
}
