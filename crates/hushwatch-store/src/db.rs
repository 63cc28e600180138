//! One statement runner for both engines (issue #28): a store operation
//! that reads and writes rows is written once, as an `async fn` generic
//! over [`Db`], and each backend runs it in its own transaction.
//!
//! - **PostgreSQL** implements [`Db`] (and [`Cells`] on its rows) on its
//!   pooled transaction, in `store::pg::sql`; the operation is awaited
//!   like any other query.
//! - **SQLite** implements it on the writer thread's `Connection`. Every
//!   call there finishes synchronously, so the future is complete the first
//!   time it is polled: [`ready`] polls it once on the writer thread, with
//!   no runtime and nothing sent to another thread.
//!
//! Statements are written in PostgreSQL's `$N` placeholders; SQLite reads
//! them as `?N` (its own `$NAME` form numbers parameters by first
//! appearance, not by the digits). Where the dialects really differ the
//! operation asks [`Db::ROW_LOCK`] or keeps a statement per engine, with a
//! comment saying why.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use chrono::{DateTime, Utc};

use super::pg;
use super::StoreError;

/// A statement argument both drivers can bind. The argument types are
/// PostgreSQL's (which checks them against the column: `i64` for BIGINT,
/// `bool` for BOOLEAN); SQLite binds the same values into its affinities.
pub(crate) trait Arg: rusqlite::ToSql + pg::ToSql + Sync {
    fn lite(&self) -> &dyn rusqlite::ToSql;
    fn pg(&self) -> &(dyn pg::ToSql + Sync);
}

impl<T: rusqlite::ToSql + pg::ToSql + Sync> Arg for T {
    fn lite(&self) -> &dyn rusqlite::ToSql {
        self
    }
    fn pg(&self) -> &(dyn pg::ToSql + Sync) {
        self
    }
}

pub(crate) type Args<'a> = &'a [&'a dyn Arg];

/// A column value both drivers can read.
pub(crate) trait Cell: rusqlite::types::FromSql + for<'a> pg::FromSql<'a> {}
impl<T: rusqlite::types::FromSql + for<'a> pg::FromSql<'a>> Cell for T {}

/// A row of either engine, read by column index; a type mismatch is a
/// storage error, not a panic.
pub(crate) trait Cells {
    fn cell<T: Cell>(&self, idx: usize) -> Result<T, StoreError>;

    /// A stored epoch-millisecond time (`store::stored_time`).
    fn time(&self, idx: usize) -> Result<DateTime<Utc>, StoreError> {
        super::stored_time(self.cell(idx)?)
    }
    fn opt_time(&self, idx: usize) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.cell::<Option<i64>>(idx)?
            .map(super::stored_time)
            .transpose()
    }
}

impl Cells for rusqlite::Row<'_> {
    fn cell<T: Cell>(&self, idx: usize) -> Result<T, StoreError> {
        Ok(self.get(idx)?)
    }
}

/// What a row reads into, the same way on either engine: a tuple of its
/// columns in order (then handed to a shared constructor), or a row type
/// that reads itself from [`Cells`].
pub(crate) trait Columns: Sized {
    fn read(r: &impl Cells) -> Result<Self, StoreError>;
}

macro_rules! columns {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Cell),+> Columns for ($($t,)+) {
            fn read(r: &impl Cells) -> Result<Self, StoreError> {
                Ok(($(r.cell($i)?,)+))
            }
        }
    };
}
columns!(A 0);
columns!(A 0, B 1);
columns!(A 0, B 1, C 2);
columns!(A 0, B 1, C 2, D 3);
columns!(A 0, B 1, C 2, D 3, E 4);
columns!(A 0, B 1, C 2, D 3, E 4, F 5);
columns!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
columns!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
columns!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
columns!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
columns!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
columns!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
columns!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
columns!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);

/// Statements inside one transaction, on either engine.
pub(crate) trait Db {
    /// What a read that the transaction will update appends: PostgreSQL's
    /// `FOR UPDATE`, so two replicas deciding from the same row take turns;
    /// nothing on SQLite, whose one writer thread already serialises every
    /// transaction.
    const ROW_LOCK: &'static str;
    /// For the few statements the dialects spell differently.
    const POSTGRES: bool;

    /// Runs a statement; the number of rows it changed.
    async fn exec(&self, sql: &str, args: Args<'_>) -> Result<u64, StoreError>;
    /// Every row of a query.
    async fn rows<C: Columns>(&self, sql: &str, args: Args<'_>) -> Result<Vec<C>, StoreError>;
    /// The first row of a query, if any.
    async fn opt<C: Columns>(&self, sql: &str, args: Args<'_>) -> Result<Option<C>, StoreError>;

    /// The one row a query must return (a missing row is an error).
    async fn one<C: Columns>(&self, sql: &str, args: Args<'_>) -> Result<C, StoreError> {
        self.opt(sql, args)
            .await?
            .ok_or_else(|| StoreError::Sql("query returned no rows".into()))
    }

    /// `sql` with [`Db::ROW_LOCK`] appended.
    fn locked(sql: &str) -> Cow<'_, str> {
        if Self::ROW_LOCK.is_empty() {
            Cow::Borrowed(sql)
        } else {
            Cow::Owned(format!("{sql}{}", Self::ROW_LOCK))
        }
    }
}

impl Db for rusqlite::Connection {
    const ROW_LOCK: &'static str = "";
    const POSTGRES: bool = false;

    async fn exec(&self, sql: &str, args: Args<'_>) -> Result<u64, StoreError> {
        let n = with_lite(sql, |s| {
            Ok(self
                .prepare_cached(s)?
                .execute(rusqlite::params_from_iter(args.iter().map(|a| a.lite())))?)
        })?;
        Ok(u64::try_from(n).unwrap_or(u64::MAX))
    }

    async fn rows<C: Columns>(&self, sql: &str, args: Args<'_>) -> Result<Vec<C>, StoreError> {
        with_lite(sql, |s| {
            let mut stmt = self.prepare_cached(s)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(args.iter().map(|a| a.lite())))?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                out.push(C::read(r)?);
            }
            Ok(out)
        })
    }

    async fn opt<C: Columns>(&self, sql: &str, args: Args<'_>) -> Result<Option<C>, StoreError> {
        with_lite(sql, |s| {
            let mut stmt = self.prepare_cached(s)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(args.iter().map(|a| a.lite())))?;
            match rows.next()? {
                Some(r) => Ok(Some(C::read(r)?)),
                None => Ok(None),
            }
        })
    }
}

thread_local! {
    /// `$N` statements already rewritten for SQLite, on the writer thread:
    /// the hot ingest statements run thousands of times a second, and the
    /// rewrite would otherwise allocate each time.
    static LITE: RefCell<HashMap<String, Box<str>>> = RefCell::new(HashMap::new());
}

/// Runs `f` with `sql` in SQLite's placeholders (`$N` → `?N`).
fn with_lite<T>(sql: &str, f: impl FnOnce(&str) -> Result<T, StoreError>) -> Result<T, StoreError> {
    if !sql.contains('$') {
        return f(sql);
    }
    LITE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(text) = cache.get(sql) {
            return f(text);
        }
        // Distinct texts are the program's constants plus a few built from
        // config; the bound only matters if something ever built them from
        // data.
        if cache.len() >= 4096 {
            cache.clear();
        }
        let text = cache
            .entry(sql.to_owned())
            .or_insert_with(|| sql.replace('$', "?").into_boxed_str());
        f(text)
    })
}

/// Runs an operation written against [`Db`] on SQLite's writer thread. Its
/// `Db` calls never wait, so the future is complete on its first poll; one
/// that is not (a bug: something in it awaited real I/O) is an error, not
/// a hang of the writer.
pub(crate) fn ready<T>(op: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    let mut op = pin!(op);
    match op.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => Err(StoreError::Sql(
            "a store operation waited on SQLite's writer thread".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn round_trip<D: Db>(db: &D) -> Result<Vec<(i64, String, Option<bool>)>, StoreError> {
        db.exec(
            "INSERT INTO t (a, b, c) VALUES ($2, $1, $3)",
            &[&"x", &7_i64, &Some(true)],
        )
        .await?;
        db.exec(
            "INSERT INTO t (a, b, c) VALUES ($1, $2, $3)",
            &[&8_i64, &"y", &None::<bool>],
        )
        .await?;
        let none: Option<(i64,)> = db.opt("SELECT a FROM t WHERE a = $1", &[&9_i64]).await?;
        assert!(none.is_none());
        let (n,): (i64,) = db.one("SELECT count(*) FROM t", &[]).await?;
        assert_eq!(n, 2);
        db.rows("SELECT a, b, c FROM t ORDER BY a", &[]).await
    }

    #[test]
    fn sqlite_runs_dollar_statements_in_place_order() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (a INTEGER, b TEXT, c INTEGER)")
            .unwrap();
        let got = ready(round_trip(&conn)).unwrap();
        assert_eq!(
            got,
            vec![(7, "x".into(), Some(true)), (8, "y".into(), None)]
        );
        assert!(ready(conn.one::<(i64,)>("SELECT 1 WHERE 0", &[])).is_err());
    }

    #[test]
    fn an_operation_that_waits_is_an_error_not_a_hang() {
        let op = async {
            std::future::pending::<()>().await;
            Ok(())
        };
        assert!(ready(op).is_err());
    }

    #[tokio::test]
    async fn postgres_runs_the_same_statements() {
        let Some(db) = crate::testdb::PgTestDb::create().await else {
            return;
        };
        let pool = crate::pg::pool(&db.settings(), 1).unwrap();
        let mut client = pool.get().await.unwrap();
        let tx = client.transaction().await.unwrap();
        tx.batch_execute("CREATE TEMP TABLE t (a BIGINT, b TEXT, c BOOLEAN)")
            .await
            .unwrap();
        let got = round_trip(&tx).await.unwrap();
        assert_eq!(
            got,
            vec![(7, "x".into(), Some(true)), (8, "y".into(), None)]
        );
    }
}
