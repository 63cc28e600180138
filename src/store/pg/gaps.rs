//! `store::gaps` on PostgreSQL: the same SQL, the same additive upsert.

use chrono::NaiveDate;

use super::sql::{exec, get, rows, Tx};
use crate::store::gaps::{day_number, day_of, GapCount, ADD_SQL, LOAD_SQL, PRUNE_SQL};
use crate::store::StoreError;

pub(super) async fn add(tx: &Tx<'_>, deltas: &[GapCount]) -> Result<(), StoreError> {
    // Sorted, so two replicas flushing overlapping keys lock rows in the
    // same order and cannot deadlock.
    let mut sorted: Vec<&GapCount> = deltas.iter().collect();
    sorted.sort_by(|a, b| (&a.stream, a.day, a.bucket).cmp(&(&b.stream, b.day, b.bucket)));
    for d in sorted {
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
        .map(|r| {
            Ok(GapCount {
                stream: get(r, 0)?,
                day: day_of(get(r, 1)?)?,
                bucket: get(r, 2)?,
                count: get(r, 3)?,
            })
        })
        .collect()
}

pub(super) async fn prune(tx: &Tx<'_>, before: NaiveDate) -> Result<usize, StoreError> {
    let n = exec(tx, PRUNE_SQL, &[&day_number(before)]).await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}
