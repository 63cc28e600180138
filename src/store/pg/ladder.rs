//! The fallback ladder's shared count on PostgreSQL (see `store::ladder`
//! for what it means), with the same decision and statements: the attempt,
//! the count and any fallback page commit in one transaction, under the
//! notifier row's lock, so replicas that record attempts at the same time
//! take turns and each step is queued once.

use super::sql::{exec, one, rows, Tx};
use crate::store::db::Columns;
use crate::store::ladder::{
    decide, opt_time, sql, transition, Decision, LadderOutcome, LadderUpdate,
};
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
    exec(tx, sql::ENSURE, &[&u.notifier]).await?;
    let locked = format!("{} FOR UPDATE", sql::READ);
    let (failures, paged) = Columns::pg(&one(tx, &locked, &[&u.notifier]).await?)?;
    let (decision, after, paged_after) =
        decide(u.rule.as_ref(), failures, paged, u.error.is_some());
    exec(tx, sql::WRITE, &[&u.notifier, &after, &paged_after]).await?;
    let (waiting, since) = match decision {
        Decision::Step(_) => Columns::pg(&one(tx, sql::WAITING, &[&u.notifier]).await?)?,
        _ => (0, None),
    };
    let mut queued = None;
    if let Some(t) = transition(u, decision, failures, waiting, opt_time(since)?) {
        let alert = crate::store::ops::fallback_alert(&u.notifier);
        for notifier in &t.notifiers {
            super::ops::insert_keyed_page(tx, &t, notifier, t.at, &alert).await?;
        }
        queued = Some(t.reason);
    }
    Ok(LadderOutcome {
        settled: true,
        failures: after,
        queued,
    })
}

pub(super) async fn failures(tx: &Tx<'_>) -> Result<Vec<(String, i64)>, StoreError> {
    rows(tx, sql::FAILURES, &[])
        .await?
        .iter()
        .map(Columns::pg)
        .collect()
}
