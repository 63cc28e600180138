//! Small helpers over a PostgreSQL transaction: cached statements, rows,
//! and conversions between stored values (BIGINT epoch milliseconds, TEXT
//! states) and the store's types.

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::pg_err;
use crate::store::{AlertState, PageKind, StoreError};

pub(super) type Tx<'a> = deadpool_postgres::Transaction<'a>;
pub(super) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

pub(super) async fn exec(tx: &Tx<'_>, sql: &str, params: Params<'_>) -> Result<u64, StoreError> {
    let stmt = tx.prepare_cached(sql).await.map_err(pg_err)?;
    tx.execute(&stmt, params).await.map_err(pg_err)
}

pub(super) async fn rows(
    tx: &Tx<'_>,
    sql: &str,
    params: Params<'_>,
) -> Result<Vec<Row>, StoreError> {
    let stmt = tx.prepare_cached(sql).await.map_err(pg_err)?;
    tx.query(&stmt, params).await.map_err(pg_err)
}

pub(super) async fn opt(
    tx: &Tx<'_>,
    sql: &str,
    params: Params<'_>,
) -> Result<Option<Row>, StoreError> {
    let stmt = tx.prepare_cached(sql).await.map_err(pg_err)?;
    tx.query_opt(&stmt, params).await.map_err(pg_err)
}

pub(super) async fn one(tx: &Tx<'_>, sql: &str, params: Params<'_>) -> Result<Row, StoreError> {
    let stmt = tx.prepare_cached(sql).await.map_err(pg_err)?;
    tx.query_one(&stmt, params).await.map_err(pg_err)
}

/// A typed column read; a type mismatch is a storage error, not a panic.
pub(super) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    idx: usize,
) -> Result<T, StoreError> {
    row.try_get(idx).map_err(pg_err)
}

pub(super) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(super) fn opt_ms(t: Option<DateTime<Utc>>) -> Option<i64> {
    t.map(ms)
}

pub(super) fn time(ms: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StoreError::Sql(format!("stored time {ms} is out of range")))
}

pub(super) fn opt_time(ms: Option<i64>) -> Result<Option<DateTime<Utc>>, StoreError> {
    ms.map(time).transpose()
}

pub(super) fn state_str(s: &AlertState) -> &'static str {
    match s {
        AlertState::Ok => "ok",
        AlertState::Firing => "firing",
    }
}

pub(super) fn state(s: &str) -> Result<AlertState, StoreError> {
    match s {
        "ok" => Ok(AlertState::Ok),
        "firing" => Ok(AlertState::Firing),
        other => Err(StoreError::Sql(format!("unknown alert state {other:?}"))),
    }
}

pub(super) fn page_kind(s: &str) -> Result<PageKind, StoreError> {
    match s {
        "page" => Ok(PageKind::Page),
        "reminder" => Ok(PageKind::Reminder),
        "escalation" => Ok(PageKind::Escalation),
        other => Err(StoreError::Sql(format!("unknown page kind {other:?}"))),
    }
}
