//! Small helpers over a PostgreSQL transaction: cached statements, rows,
//! and conversions between stored values (BIGINT epoch milliseconds, TEXT
//! states) and the store's types.

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::pg_err;
use crate::db::{Args, Cell, Cells, Columns, Db};
use crate::StoreError;

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

pub(super) fn opt_ms(t: Option<DateTime<Utc>>) -> Option<i64> {
    t.map(crate::ops::millis)
}

impl Cells for Row {
    fn cell<T: Cell>(&self, idx: usize) -> Result<T, StoreError> {
        self.try_get(idx).map_err(pg_err)
    }
}

/// PostgreSQL runs `store::db` operations in the pooled transaction, and
/// `hushwatch audit`'s reads on a pooled connection outside one.
macro_rules! pg_db {
    ($($client:ty),+) => {$(
        impl Db for $client {
            const ROW_LOCK: &'static str = " FOR UPDATE";
            const POSTGRES: bool = true;

            async fn exec(&self, sql: &str, args: Args<'_>) -> Result<u64, StoreError> {
                let stmt = self.prepare_cached(sql).await.map_err(pg_err)?;
                self.execute(&stmt, &pg_args(args)).await.map_err(pg_err)
            }

            async fn rows<C: Columns>(
                &self,
                sql: &str,
                args: Args<'_>,
            ) -> Result<Vec<C>, StoreError> {
                let stmt = self.prepare_cached(sql).await.map_err(pg_err)?;
                let rows = self.query(&stmt, &pg_args(args)).await.map_err(pg_err)?;
                rows.iter().map(C::read).collect()
            }

            async fn opt<C: Columns>(
                &self,
                sql: &str,
                args: Args<'_>,
            ) -> Result<Option<C>, StoreError> {
                let stmt = self.prepare_cached(sql).await.map_err(pg_err)?;
                let row = self
                    .query_opt(&stmt, &pg_args(args))
                    .await
                    .map_err(pg_err)?;
                row.as_ref().map(C::read).transpose()
            }
        }
    )+};
}
pg_db!(
    deadpool_postgres::Transaction<'_>,
    deadpool_postgres::Object
);

fn pg_args<'a>(args: Args<'a>) -> Vec<&'a (dyn ToSql + Sync)> {
    args.iter().map(|a| a.pg()).collect()
}
