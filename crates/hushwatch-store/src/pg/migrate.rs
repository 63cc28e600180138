//! `hushwatch migrate-store`: copies a SQLite state file into an EMPTY
//! PostgreSQL database, in one transaction, keeping every value as it is
//! (ids, page keys' salt, clocks, the audit chain's hashes and checkpoints),
//! so `audit verify` passes on the copy and no silence clock restarts.
//!
//! Tables are copied generically: every table of the SQLite file (except
//! runtime-only ones) must exist in the PostgreSQL schema, and each
//! PostgreSQL column is filled from the SQLite column of the same name,
//! converted by its PostgreSQL type. A table or column with no
//! counterpart is an error, never a silent loss, so an operator table a
//! later migration adds on both engines is copied without code here.

use std::sync::Arc;

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags};
use tokio_postgres::types::ToSql;

use super::sql::{exec, get, one, rows, Tx};
use super::{pg_err, pool, PgBackend, Settings};
use crate::clock::SystemClock;
use crate::{Store, StoreError};

/// Not copied: per-process runtime state (the readiness probe row, the
/// leader lease, replica heartbeats), SQLite's own tables, and the record of
/// applied schema steps (each engine keeps its own: the target recorded
/// its steps when it was opened, and SQLite records steps PostgreSQL's
/// schema reached differently).
const SKIP: &[&str] = &["probe", "leader", "replicas", "schema_migrations"];

/// Copied first, in this order (foreign keys point at `streams`).
const FIRST: &[&str] = &["meta", "streams"];

#[derive(Debug)]
pub enum MigrateError {
    /// The target already holds tables; nothing was written.
    NotEmpty(String),
    Store(StoreError),
}

impl std::fmt::Display for MigrateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MigrateError::NotEmpty(what) => write!(
                f,
                "the target database is not empty ({what}); migrate-store copies only into an empty database"
            ),
            MigrateError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl From<StoreError> for MigrateError {
    fn from(e: StoreError) -> Self {
        MigrateError::Store(e)
    }
}

/// What was copied: (table, rows), in copy order.
pub type Report = Vec<(String, u64)>;

pub async fn copy_sqlite(
    sqlite_path: &std::path::Path,
    settings: &Settings,
) -> Result<Report, MigrateError> {
    if !sqlite_path.exists() {
        return Err(StoreError::Open(format!("{} does not exist", sqlite_path.display())).into());
    }
    // Bring the file to this binary's schema first (as `serve` would), so
    // its tables match the PostgreSQL ones.
    Store::open(sqlite_path)?.close().await?;
    refuse_non_empty(settings).await?;
    // The copy stamps no instant of its own: any clock will do.
    let backend = PgBackend::open(settings, 1, Arc::new(SystemClock)).await?;
    let mut client = backend.pool.get().await.map_err(super::pool_err)?;
    let tx = client.transaction().await.map_err(pg_err)?;
    // Another migrate-store (or a serve that wrote meanwhile) makes it
    // non-empty: checked again under the migration lock.
    exec(
        &tx,
        "SELECT pg_advisory_xact_lock($1)",
        &[&super::schema::MIGRATION_LOCK],
    )
    .await?;
    let written: i64 = get(
        &one(
            &tx,
            "SELECT (SELECT count(*) FROM streams) + (SELECT count(*) FROM audit_log)
                  + (SELECT count(*) FROM outbox)",
            &[],
        )
        .await?,
        0,
    )?;
    if written > 0 {
        return Err(MigrateError::NotEmpty(format!(
            "{written} rows were written meanwhile"
        )));
    }
    let sqlite = Connection::open_with_flags(sqlite_path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| StoreError::Open(e.to_string()))?;
    let mut tables = sqlite_tables(&sqlite)?;
    tables.sort_by_key(|t| {
        (
            FIRST.iter().position(|f| f == t).unwrap_or(FIRST.len()),
            t.clone(),
        )
    });
    // Step 0001 on PostgreSQL made its own salt; the copy keeps the
    // file's, so every page key stays what it was.
    exec(&tx, "DELETE FROM meta", &[]).await?;
    let mut report = Vec::new();
    for table in tables {
        let n = copy_table(&sqlite, &tx, &table).await?;
        report.push((table, n));
    }
    finish(&tx).await?;
    tx.commit().await.map_err(pg_err)?;
    drop(client);
    crate::backend::Backend::close(&backend).await?;
    Ok(report)
}

/// Any table in the target's schema (hushwatch's or anyone's) refuses it.
async fn refuse_non_empty(settings: &Settings) -> Result<(), MigrateError> {
    let pool = pool(settings, 1)?;
    let client = pool
        .get()
        .await
        .map_err(|e| StoreError::Open(super::pool_err(e).to_string()))?;
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()",
            &[],
        )
        .await
        .map_err(pg_err)?
        .get(0);
    pool.close();
    if tables > 0 {
        return Err(MigrateError::NotEmpty(format!(
            "{tables} tables in its schema"
        )));
    }
    Ok(())
}

fn sqlite_tables(conn: &Connection) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
    )?;
    let names = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(names
        .into_iter()
        .filter(|n| !SKIP.contains(&n.as_str()))
        .collect())
}

/// PostgreSQL's columns of `table` with their types, in order.
async fn pg_columns(tx: &Tx<'_>, table: &str) -> Result<Vec<(String, String)>, StoreError> {
    let cols: Vec<(String, String)> = rows(
        tx,
        "SELECT column_name::TEXT, data_type::TEXT FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
        &[&table],
    )
    .await?
    .iter()
    .map(|r| Ok((get(r, 0)?, get(r, 1)?)))
    .collect::<Result<_, StoreError>>()?;
    if cols.is_empty() {
        return Err(StoreError::Migration(format!(
            "table {table} of the SQLite file has no PostgreSQL counterpart"
        )));
    }
    Ok(cols)
}

async fn copy_table(sqlite: &Connection, tx: &Tx<'_>, table: &str) -> Result<u64, StoreError> {
    let cols = pg_columns(tx, table).await?;
    let sqlite_cols: Vec<String> = sqlite
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    // Columns PostgreSQL has and the file lacks keep their defaults; a
    // file column PostgreSQL lacks would be lost, so it is an error.
    if let Some(lost) = sqlite_cols
        .iter()
        .find(|c| !cols.iter().any(|(p, _)| p == *c))
    {
        return Err(StoreError::Migration(format!(
            "column {table}.{lost} of the SQLite file has no PostgreSQL counterpart"
        )));
    }
    let cols: Vec<(String, String)> = cols
        .into_iter()
        .filter(|(c, _)| sqlite_cols.contains(c))
        .collect();
    let names: Vec<&str> = cols.iter().map(|(c, _)| c.as_str()).collect();
    let placeholders: Vec<String> = (1..=cols.len()).map(|i| format!("${i}")).collect();
    let insert = format!(
        "INSERT INTO {table} ({}) VALUES ({})",
        names.join(", "),
        placeholders.join(", ")
    );
    let mut stmt = sqlite.prepare(&format!("SELECT {} FROM {table}", names.join(", ")))?;
    let mut source = stmt.query([])?;
    let mut n = 0;
    while let Some(row) = source.next()? {
        let mut values: Vec<Box<dyn ToSql + Sync + Send>> = Vec::with_capacity(cols.len());
        for (i, (col, ty)) in cols.iter().enumerate() {
            let v: Value = row.get(i)?;
            values.push(convert(table, col, ty, v)?);
        }
        let params: Vec<&(dyn ToSql + Sync)> = values
            .iter()
            .map(|v| v.as_ref() as &(dyn ToSql + Sync))
            .collect();
        exec(tx, &insert, &params).await?;
        n += 1;
    }
    Ok(n)
}

/// One SQLite value as the PostgreSQL column type wants it.
fn convert(
    table: &str,
    col: &str,
    ty: &str,
    v: Value,
) -> Result<Box<dyn ToSql + Sync + Send>, StoreError> {
    let bad = || {
        StoreError::Migration(format!(
            "{table}.{col}: a stored value does not fit PostgreSQL type {ty}"
        ))
    };
    Ok(match (ty, v) {
        ("bigint", Value::Null) => Box::new(None::<i64>),
        ("bigint", Value::Integer(i)) => Box::new(i),
        ("integer", Value::Null) => Box::new(None::<i32>),
        ("integer", Value::Integer(i)) => Box::new(i32::try_from(i).map_err(|_| bad())?),
        ("boolean", Value::Null) => Box::new(None::<bool>),
        ("boolean", Value::Integer(i)) => Box::new(i != 0),
        ("text", Value::Null) => Box::new(None::<String>),
        ("text", Value::Text(s)) => Box::new(s),
        ("bytea", Value::Null) => Box::new(None::<Vec<u8>>),
        ("bytea", Value::Blob(b)) => Box::new(b),
        _ => return Err(bad()),
    })
}

/// What PostgreSQL keeps beside the copied rows: the chain head row and the
/// identity sequences (so new ids continue after the copied ones).
async fn finish(tx: &Tx<'_>) -> Result<(), StoreError> {
    exec(
        tx,
        "UPDATE audit_head SET (seq, hash) = (
            SELECT seq, hash FROM (
                SELECT seq, hash FROM audit_log
                UNION ALL SELECT seq, hash FROM audit_anchor
            ) h ORDER BY seq DESC LIMIT 1)
         WHERE id = 1 AND EXISTS (SELECT 1 FROM audit_log UNION ALL SELECT 1 FROM audit_anchor)",
        &[],
    )
    .await?;
    for table in ["events", "outbox", "silences"] {
        exec(
            tx,
            &format!(
                "SELECT setval(pg_get_serial_sequence('{table}', 'id'),
                               coalesce((SELECT max(id) FROM {table}), 0) + 1, false)"
            ),
            &[],
        )
        .await?;
    }
    Ok(())
}
