//! `store::gaps` on PostgreSQL: the same SQL, the same additive upsert.

use chrono::NaiveDate;

use super::sql::{exec, rows, Tx};
use crate::store::db::Columns;
use crate::store::gaps::{day_number, gap_count, GapCount, ADD_SQL, LOAD_SQL, PRUNE_SQL};
use crate::store::StoreError;

pub(super) async fn add(tx: &Tx<'_>, deltas: &[GapCount]) -> Result<(), StoreError> {
    for d in deltas {
        exec(
            tx,
            ADD_SQL,
            &[&d.stream, &day_number(d.day), &d.bucket, &d.count],
        )
        .await?;
    }
    Ok(())
}

pub(super) async fn load(tx: &Tx<'_>, since: NaiveDate) -> Result<Vec<GapCount>, StoreError> {
    rows(tx, LOAD_SQL, &[&day_number(since)])
        .await?
        .iter()
        .map(|r| gap_count(Columns::pg(r)?))
        .collect()
}

pub(super) async fn prune(tx: &Tx<'_>, before: NaiveDate) -> Result<usize, StoreError> {
    let n = exec(tx, PRUNE_SQL, &[&day_number(before)]).await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}
