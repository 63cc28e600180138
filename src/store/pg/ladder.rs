//! The fallback ladder's shared count on PostgreSQL (see `store::ladder`
//! for what it means): the attempt, the count and any fallback page commit
//! in one transaction, under the notifier row's lock, so replicas that
//! record attempts at the same time take turns and each step is queued once.

use super::sql::{exec, get, one, rows, time, Tx};
use crate::store::ladder::{decide, transition, Decision, LadderOutcome, LadderUpdate};
use crate::store::{Attempt, StoreError};

pub(super) async fn settle_counted(
    tx: &Tx<'_>,
    id: i64,
    token: Option<i64>,
    attempt: &Attempt,
    u: &LadderUpdate,
) -> Result<LadderOutcome, StoreError> {
    match token {
        Some(token) => {
            if !super::replica::settle_claim(tx, id, token, attempt).await? {
                return Ok(LadderOutcome::fenced());
            }
        }
        None => super::ops::record_attempt(tx, id, attempt).await?,
    }
    // The row exists before it is locked, so two first failures cannot
    // both read "no row".
    exec(
        tx,
        "INSERT INTO notifier_failures (notifier, failures, paged) VALUES ($1, 0, 0)
         ON CONFLICT (notifier) DO NOTHING",
        &[&u.notifier],
    )
    .await?;
    let row = one(
        tx,
        "SELECT failures, paged FROM notifier_failures WHERE notifier = $1 FOR UPDATE",
        &[&u.notifier],
    )
    .await?;
    let (failures, paged): (i64, i64) = (get(&row, 0)?, get(&row, 1)?);
    let (decision, after, paged_after) =
        decide(u.rule.as_ref(), failures, paged, u.error.is_some());
    exec(
        tx,
        "UPDATE notifier_failures SET failures = $2, paged = $3 WHERE notifier = $1",
        &[&u.notifier, &after, &paged_after],
    )
    .await?;
    let (waiting, since) = if matches!(decision, Decision::Step(_)) {
        let row = one(
            tx,
            "SELECT COUNT(*), MIN(created_at) FROM outbox WHERE notifier = $1 AND status = 'pending'",
            &[&u.notifier],
        )
        .await?;
        let since: Option<i64> = get(&row, 1)?;
        (get::<i64>(&row, 0)?, since.map(time).transpose()?)
    } else {
        (0, None)
    };
    let queued = match transition(u, decision, failures, waiting, since) {
        Some(t) => {
            let alert = crate::store::ops::fallback_alert(&u.notifier);
            for notifier in &t.notifiers {
                super::ops::insert_keyed_page(tx, &t, notifier, t.at, &alert).await?;
            }
            Some(t.reason)
        }
        None => None,
    };
    Ok(LadderOutcome {
        settled: true,
        failures: after,
        queued,
    })
}

pub(super) async fn failures(tx: &Tx<'_>) -> Result<Vec<(String, i64)>, StoreError> {
    rows(
        tx,
        "SELECT notifier, failures FROM notifier_failures ORDER BY notifier",
        &[],
    )
    .await?
    .iter()
    .map(|r| Ok((get(r, 0)?, get(r, 1)?)))
    .collect()
}
