//! Small helpers over a PostgreSQL transaction: cached statements, rows,
//! and conversions between stored values (BIGINT epoch milliseconds, TEXT
//! states) and the store's types.

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::{ops, pg_err};
use crate::store::db::{Args, Columns, Db};
use crate::store::ops::KeyedAlert;
use crate::store::{
    AlertState, EventOutcome, NewEvent, PageKind, StoreError, StreamRow, Transition,
};

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

/// PostgreSQL runs `store::db` operations in the pooled transaction.
impl Db for deadpool_postgres::Transaction<'_> {
    const ROW_LOCK: &'static str = " FOR UPDATE";

    async fn exec(&self, sql: &str, args: Args<'_>) -> Result<u64, StoreError> {
        let stmt = self.prepare_cached(sql).await.map_err(pg_err)?;
        self.execute(&stmt, &pg_args(args)).await.map_err(pg_err)
    }

    async fn rows<C: Columns>(&self, sql: &str, args: Args<'_>) -> Result<Vec<C>, StoreError> {
        let stmt = self.prepare_cached(sql).await.map_err(pg_err)?;
        let rows = self.query(&stmt, &pg_args(args)).await.map_err(pg_err)?;
        rows.iter().map(C::read).collect()
    }

    async fn opt<C: Columns>(&self, sql: &str, args: Args<'_>) -> Result<Option<C>, StoreError> {
        let stmt = self.prepare_cached(sql).await.map_err(pg_err)?;
        let row = self
            .query_opt(&stmt, &pg_args(args))
            .await
            .map_err(pg_err)?;
        row.as_ref().map(C::read).transpose()
    }

    async fn core_append_audit(&self, e: &NewEvent) -> Result<(), StoreError> {
        ops::append_audit(self, e).await
    }
    async fn core_record_event(&self, e: &NewEvent) -> Result<EventOutcome, StoreError> {
        ops::record_event(self, e).await
    }
    async fn core_advance_clock(&self, e: &NewEvent) -> Result<(), StoreError> {
        ops::advance_clock(self, e).await
    }
    async fn core_stream_row(&self, name: &str) -> Result<Option<StreamRow>, StoreError> {
        ops::stream_row(self, name).await
    }
    async fn core_keyed_alert_id(&self, a: &KeyedAlert<'_>) -> Result<String, StoreError> {
        ops::keyed_alert_id(self, a).await
    }
    async fn core_queue_keyed_pages(
        &self,
        t: &Transition,
        created_at: DateTime<Utc>,
        a: &KeyedAlert<'_>,
    ) -> Result<bool, StoreError> {
        ops::queue_keyed_pages(self, t, created_at, a).await
    }
    async fn core_insert_keyed_page(
        &self,
        t: &Transition,
        notifier: &str,
        created_at: DateTime<Utc>,
        a: &KeyedAlert<'_>,
    ) -> Result<(), StoreError> {
        ops::insert_keyed_page(self, t, notifier, created_at, a).await
    }
    async fn core_insert_silence_page(
        &self,
        t: &Transition,
        notifier: &str,
        created_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        ops::insert_silence_page(self, t, notifier, created_at).await
    }
}

pub(crate) fn pg_args<'a>(args: Args<'a>) -> Vec<&'a (dyn tokio_postgres::types::ToSql + Sync)> {
    args.iter().map(|a| a.pg()).collect()
}
