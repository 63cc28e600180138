//! `store::revocations` on PostgreSQL: the same statements, run in the
//! ingest transaction by `ops::record_event` for accepted events.

use chrono::{DateTime, Utc};

use super::sql::{exec, get, ms, opt, opt_ms, opt_time, time, Tx};
use crate::store::revocations::{
    grant_forms, newer_of, org_from_key, org_key, stale_grant, AccessNote, Revocation, LATEST_SQL,
    NEWER_SQL, PRUNE_SQL, UPSERT_SQL,
};
use crate::store::{NewEvent, StoreError};

fn revocation(row: &tokio_postgres::Row) -> Result<Revocation, StoreError> {
    Ok(Revocation {
        organization: org_from_key(get(row, 0)?),
        event_time: opt_time(get(row, 1)?)?,
        received_at: time(get(row, 2)?)?,
        delivery_id: get(row, 3)?,
        event_type: get(row, 4)?,
    })
}

/// See `store::revocations::note`.
pub(super) async fn note(tx: &Tx<'_>, event: &NewEvent) -> Result<(), StoreError> {
    match &event.access {
        None => Ok(()),
        Some(AccessNote::Revoke {
            subject,
            organization,
        }) => {
            exec(
                tx,
                UPSERT_SQL,
                &[
                    &event.stream,
                    subject,
                    &org_key(organization),
                    &opt_ms(event.event_time),
                    &ms(event.received_at),
                    &event.delivery_id,
                    &event.event_type,
                ],
            )
            .await?;
            Ok(())
        }
        Some(AccessNote::Grant {
            subject,
            organization,
            page,
            earlier,
        }) => {
            let Some(grant_time) = event.event_time else {
                return Ok(());
            };
            let mut newer = None;
            for (form, org) in grant_forms(subject, organization, earlier) {
                let row = opt(
                    tx,
                    NEWER_SQL,
                    &[&event.stream, &form, &ms(grant_time), &org_key(org)],
                )
                .await?;
                newer = newer_of(newer, row.as_ref().map(revocation).transpose()?);
            }
            let Some(revoke) = newer else {
                return Ok(());
            };
            if let Some(g) = stale_grant(event, subject, page, &revoke) {
                super::reconcile::record_stale(tx, &g, event.received_at).await?;
            }
            Ok(())
        }
    }
}

pub(super) async fn latest(
    tx: &Tx<'_>,
    stream: &str,
    subject: &str,
) -> Result<Option<Revocation>, StoreError> {
    opt(tx, LATEST_SQL, &[&stream, &subject])
        .await?
        .as_ref()
        .map(revocation)
        .transpose()
}

pub(super) async fn prune(tx: &Tx<'_>, before: DateTime<Utc>) -> Result<usize, StoreError> {
    let n = exec(tx, PRUNE_SQL, &[&ms(before)]).await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

pub(super) async fn stale_recorded_at(
    tx: &Tx<'_>,
    stream: &str,
    delivery_id: &str,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    opt(
        tx,
        "SELECT recorded_at FROM stale_grants WHERE stream = $1 AND delivery_id = $2",
        &[&stream, &delivery_id],
    )
    .await?
    .map(|r| time(get(&r, 0)?))
    .transpose()
}
