//! `store::idempotency` on PostgreSQL: the same SQL. The claim is one
//! `INSERT … ON CONFLICT … RETURNING`, so two replicas presenting the same
//! key at once get one `Claimed` (the second waits for the first's insert
//! to commit, then finds its row; see the module documentation there).

use chrono::{DateTime, Utc};

use super::sql::{exec, opt, Tx};
use crate::store::db::Columns;
use crate::store::idempotency::{
    begin_times, found, hex, Begun, IdempotencyKey, StoredAnswer, BEGIN_SQL, FIND_SQL, FINISH_SQL,
    PRUNE_SQL, RELEASE_SQL,
};
use crate::store::StoreError;

pub(super) async fn begin(
    tx: &Tx<'_>,
    key: &IdempotencyKey,
    now: DateTime<Utc>,
) -> Result<Begun, StoreError> {
    let (k, r) = hex(key);
    let [at, expires, stale] = begin_times(now);
    if opt(tx, BEGIN_SQL, &[&k, &r, &at, &expires, &stale])
        .await?
        .is_some()
    {
        return Ok(Begun::Claimed(now));
    }
    let row = opt(tx, FIND_SQL, &[&k]).await?;
    found(&r, row.as_ref().map(Columns::pg).transpose()?)
}

pub(super) async fn finish(
    tx: &Tx<'_>,
    key: &IdempotencyKey,
    started: DateTime<Utc>,
    answer: &StoredAnswer,
) -> Result<bool, StoreError> {
    let (k, r) = hex(key);
    let status = i32::from(answer.status);
    let n = exec(
        tx,
        FINISH_SQL,
        &[
            &status,
            &answer.content_type,
            &answer.body,
            &k,
            &r,
            &started.timestamp_millis(),
        ],
    )
    .await?;
    Ok(n == 1)
}

pub(super) async fn release(
    tx: &Tx<'_>,
    key: &IdempotencyKey,
    started: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let (k, r) = hex(key);
    let n = exec(tx, RELEASE_SQL, &[&k, &r, &started.timestamp_millis()]).await?;
    Ok(n == 1)
}

pub(super) async fn prune(tx: &Tx<'_>, now: DateTime<Utc>) -> Result<usize, StoreError> {
    let n = exec(tx, PRUNE_SQL, &[&now.timestamp_millis()]).await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}
