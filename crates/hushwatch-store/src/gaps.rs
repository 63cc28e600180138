//! The learned gaps between arrivals ("quieter than usual", issue #18):
//! per stream and UTC day, the bucket counts of that day's
//! `domain::gap_sketch::GapSketch`. Writes are additive (a count adds to
//! what is stored), so replicas flushing the same stream and day never
//! overwrite each other; a 28-day window rolls by deleting old days.

use chrono::NaiveDate;

use super::db::Db;
use super::StoreError;

/// Migration step (SQLite and PostgreSQL alike: only portable types).
pub(crate) const MIGRATION: &str = "CREATE TABLE gap_counts (
        stream TEXT NOT NULL,
        day    BIGINT NOT NULL,
        bucket INTEGER NOT NULL,
        count  BIGINT NOT NULL,
        PRIMARY KEY (stream, day, bucket)
    );
    CREATE INDEX gap_counts_by_day ON gap_counts(day);";

/// One bucket of one stream's sketch on one UTC day: to add (a delta) or
/// as stored (a total).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapCount {
    pub stream: String,
    pub day: NaiveDate,
    /// `GapSketch::to_pairs`'s bucket index (`i32::MIN`: zero gaps).
    pub bucket: i32,
    pub count: i64,
}

/// Days since 1970-01-01, the stored form of a day.
pub(crate) fn day_number(day: NaiveDate) -> i64 {
    (day - NaiveDate::default()).num_days()
}

pub(crate) fn day_of(n: i64) -> Result<NaiveDate, StoreError> {
    NaiveDate::default()
        .checked_add_signed(chrono::TimeDelta::days(n))
        .ok_or_else(|| StoreError::Sql(format!("gap day {n} out of range")))
}

const ADD_SQL: &str = "INSERT INTO gap_counts (stream, day, bucket, count)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (stream, day, bucket) DO UPDATE SET count = gap_counts.count + excluded.count";
const LOAD_SQL: &str = "SELECT stream, day, bucket, count FROM gap_counts
     WHERE day >= $1 ORDER BY stream, day, bucket";
const PRUNE_SQL: &str = "DELETE FROM gap_counts WHERE day < $1";

pub(super) async fn add<D: Db>(db: &D, deltas: &[GapCount]) -> Result<(), StoreError> {
    // Sorted, so two replicas flushing overlapping keys lock rows in the
    // same order and cannot deadlock (PostgreSQL).
    let mut sorted: Vec<&GapCount> = deltas.iter().collect();
    sorted.sort_by(|a, b| (&a.stream, a.day, a.bucket).cmp(&(&b.stream, b.day, b.bucket)));
    for d in sorted {
        db.exec(
            ADD_SQL,
            &[&d.stream, &day_number(d.day), &d.bucket, &d.count],
        )
        .await?;
    }
    Ok(())
}

/// A row of [`LOAD_SQL`].
fn gap_count(
    (stream, day, bucket, count): (String, i64, i32, i64),
) -> Result<GapCount, StoreError> {
    Ok(GapCount {
        stream,
        day: day_of(day)?,
        bucket,
        count,
    })
}

pub(super) async fn load<D: Db>(db: &D, since: NaiveDate) -> Result<Vec<GapCount>, StoreError> {
    db.rows(LOAD_SQL, &[&day_number(since)])
        .await?
        .into_iter()
        .map(gap_count)
        .collect()
}

pub(super) async fn prune<D: Db>(db: &D, before: NaiveDate) -> Result<usize, StoreError> {
    let n = db.exec(PRUNE_SQL, &[&day_number(before)]).await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}
