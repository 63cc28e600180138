//! `store::reconcile` on PostgreSQL: same rules, same SQL decisions; the
//! alert row is locked for its compare-and-set.

use chrono::{DateTime, Utc};

use super::ops::{append_audit, queue_keyed_pages};
use super::sql::{exec, get, ms, opt, opt_time, rows, state, state_str, time, Tx};
use crate::store::reconcile::{
    drift_counts, drift_json, first_per_stream, missing_alert, names_subject, revoke_alert,
    revoke_alert_key, stale_alert, subject_needle, subject_pairs, LatestReport, NewReconciliation,
    ReconcileRow, ReconcileTransition, StaleGrant, SubjectEntry, LATEST_REPORTS_SQL,
};
use crate::store::{AlertState, StoreError, Transition};

pub(super) async fn record(
    tx: &Tx<'_>,
    r: &NewReconciliation,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let inserted = exec(
        tx,
        "INSERT INTO reconciliations (stream, id, received_at, started_at, finished_at,
                                      checked, drift)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (stream, id) DO NOTHING",
        &[
            &r.stream,
            &r.id,
            &ms(now),
            &ms(r.started_at),
            &ms(r.finished_at),
            &r.checked,
            &drift_json(&r.drift),
        ],
    )
    .await?;
    if inserted == 0 {
        return Ok(false);
    }
    exec(
        tx,
        "INSERT INTO reconcile_state (stream, last_report_at) VALUES ($1, $2)
         ON CONFLICT (stream) DO UPDATE SET last_report_at =
           GREATEST(coalesce(reconcile_state.last_report_at, 0), excluded.last_report_at)",
        &[&r.stream, &ms(now)],
    )
    .await?;
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
    rows(
        tx,
        "SELECT stream, last_report_at, alert_state FROM reconcile_state ORDER BY stream",
        &[],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(ReconcileRow {
            stream: get(r, 0)?,
            last_report_at: opt_time(get(r, 1)?)?,
            state: state(get(r, 2)?)?,
        })
    })
    .collect()
}

pub(super) async fn latest_reports(tx: &Tx<'_>) -> Result<Vec<LatestReport>, StoreError> {
    let mut out = Vec::new();
    for r in rows(tx, LATEST_REPORTS_SQL, &[]).await? {
        out.push(LatestReport {
            stream: get(&r, 0)?,
            id: get(&r, 1)?,
            finished_at: time(get(&r, 2)?)?,
            received_at: time(get(&r, 3)?)?,
            checked: get(&r, 4)?,
            drift: drift_counts(&get::<String>(&r, 5)?),
        });
    }
    Ok(first_per_stream(out))
}

pub(super) async fn transition(tx: &Tx<'_>, t: &ReconcileTransition) -> Result<bool, StoreError> {
    exec(
        tx,
        "INSERT INTO reconcile_state (stream) VALUES ($1) ON CONFLICT (stream) DO NOTHING",
        &[&t.stream],
    )
    .await?;
    let row = opt(
        tx,
        "SELECT alert_state FROM reconcile_state WHERE stream = $1 FOR UPDATE",
        &[&t.stream],
    )
    .await?;
    let current = match row {
        Some(row) => state(get(&row, 0)?)?,
        None => AlertState::Ok,
    };
    if current == t.to {
        return Ok(false);
    }
    exec(
        tx,
        "UPDATE reconcile_state SET alert_state = $2 WHERE stream = $1",
        &[&t.stream, &state_str(&t.to)],
    )
    .await?;
    let page = Transition {
        stream: t.stream.clone(),
        to: t.to.clone(),
        at: t.at,
        reason: t.reason.clone(),
        notifiers: t.notifiers.clone(),
    };
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
            rows(
                tx,
                "SELECT seq, source, channel, event_type, delivery_id, event_time, received_at,
                        subject_ids
                 FROM audit_log
                 WHERE source = $3 AND received_at >= $4 AND strpos(subject_ids, $1) > 0
                 ORDER BY seq DESC LIMIT $2",
                &[&needle, &limit, stream, &ms(*since)],
            )
            .await?
        }
        None => {
            rows(
                tx,
                "SELECT seq, source, channel, event_type, delivery_id, event_time, received_at,
                        subject_ids
                 FROM audit_log WHERE strpos(subject_ids, $1) > 0 ORDER BY seq DESC LIMIT $2",
                &[&needle, &limit],
            )
            .await?
        }
    };
    let mut out = Vec::new();
    for r in found {
        let ids: String = get(&r, 7)?;
        if !names_subject(&ids, subject) {
            continue;
        }
        out.push(SubjectEntry {
            seq: get(&r, 0)?,
            stream: get(&r, 1)?,
            channel: get(&r, 2)?,
            event_type: get(&r, 3)?,
            delivery_id: get(&r, 4)?,
            event_time: opt_time(get(&r, 5)?)?,
            received_at: time(get(&r, 6)?)?,
            subject_ids: subject_pairs(&ids),
        });
    }
    Ok(out)
}

pub(super) async fn record_stale(
    tx: &Tx<'_>,
    g: &StaleGrant,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let inserted = exec(
        tx,
        "INSERT INTO stale_grants (stream, delivery_id, subject, grant_event_time,
                                   revoke_seq, recorded_at, revoke_delivery_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (stream, delivery_id) DO NOTHING",
        &[
            &g.stream,
            &g.delivery_id,
            &g.subject,
            &ms(g.grant_event_time),
            &g.revoke_seq,
            &ms(now),
            &g.revoke_delivery_id,
        ],
    )
    .await?;
    if inserted == 0 {
        return Ok(false);
    }
    let key = format!("{}/{}", g.stream, g.delivery_id);
    queue_keyed_pages(tx, &g.page, now, &stale_alert(&key)).await?;
    Ok(true)
}
