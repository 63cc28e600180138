//! The learned gaps between arrivals ("quieter than usual", issue #18):
//! per stream and UTC day, the bucket counts of that day's
//! `domain::gap_sketch::GapSketch`. Writes are additive (a count adds to
//! what is stored), so replicas flushing the same stream and day never
//! overwrite each other; a 28-day window rolls by deleting old days.

use chrono::NaiveDate;
use rusqlite::{params, Connection};

use super::db::Columns;
use super::{Store, StoreError};

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

pub(crate) const ADD_SQL: &str = "INSERT INTO gap_counts (stream, day, bucket, count)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (stream, day, bucket) DO UPDATE SET count = gap_counts.count + excluded.count";
pub(crate) const LOAD_SQL: &str = "SELECT stream, day, bucket, count FROM gap_counts
     WHERE day >= $1 ORDER BY stream, day, bucket";
pub(crate) const PRUNE_SQL: &str = "DELETE FROM gap_counts WHERE day < $1";

pub(super) fn add(conn: &Connection, deltas: &[GapCount]) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached(ADD_SQL)?;
    for d in deltas {
        stmt.execute(params![d.stream, day_number(d.day), d.bucket, d.count])?;
    }
    Ok(())
}

/// A row of [`LOAD_SQL`].
pub(crate) fn gap_count(
    (stream, day, bucket, count): (String, i64, i32, i64),
) -> Result<GapCount, StoreError> {
    Ok(GapCount {
        stream,
        day: day_of(day)?,
        bucket,
        count,
    })
}

pub(super) fn load(conn: &Connection, since: NaiveDate) -> Result<Vec<GapCount>, StoreError> {
    conn.prepare_cached(LOAD_SQL)?
        .query_map([day_number(since)], Columns::lite)?
        .collect::<rusqlite::Result<Vec<_>>>()?
        .into_iter()
        .map(gap_count)
        .collect()
}

pub(super) fn prune(conn: &Connection, before: NaiveDate) -> Result<usize, StoreError> {
    Ok(conn
        .prepare_cached(PRUNE_SQL)?
        .execute([day_number(before)])?)
}

impl Store {
    /// Adds learned gap counts to what is stored (never replaces).
    pub async fn add_gap_counts(&self, mut deltas: Vec<GapCount>) -> Result<(), StoreError> {
        if deltas.is_empty() {
            return Ok(());
        }
        // Sorted, so two replicas flushing overlapping keys lock rows in the
        // same order and cannot deadlock (PostgreSQL).
        deltas.sort_by(|a, b| (&a.stream, a.day, a.bucket).cmp(&(&b.stream, b.day, b.bucket)));
        self.backend.add_gap_counts(deltas).await
    }
}
