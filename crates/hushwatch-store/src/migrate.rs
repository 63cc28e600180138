//! The one runner of the named schema steps (`store::migrations::STEPS`),
//! written once over [`Db`] for both engines; what the engines do
//! differently is behind two small hooks, [`Migrator`] (the exclusive
//! write transaction) and [`SchemaDb`] (the positional counter and the
//! bookkeeping tables), implemented in `store::schema` (SQLite) and
//! `store::pg::schema` (PostgreSQL).
//!
//! Every step whose name is not in `schema_migrations` runs in its own
//! transaction together with its record and the positional counter, so a
//! crash or a failing step leaves the database at the last fully applied
//! step. Each transaction is exclusive among everything opening the same
//! database (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: an advisory lock held
//! to the end of the transaction) and re-reads the records inside it, so
//! racing openers apply each step exactly once: the others wait, then
//! find it recorded.
//!
//! A database from before names (a positional counter, nothing recorded)
//! is adopted first: the steps its counter stood for are recorded, not
//! re-run. A database this binary must not touch (a counter above this
//! binary's, or a recorded step it does not know) is refused before
//! anything is written.

use crate::db::Db;
use crate::migrations::{self, Engine, Step};
use crate::StoreError;

/// An engine's statements the runner cannot spell engine-neutrally.
pub(crate) trait SchemaDb: Db {
    /// Whose SQL each step runs.
    const ENGINE: Engine;
    /// The SQL expression for "now" in epoch milliseconds, from the
    /// database's own clock: `applied_at` is bookkeeping for operators,
    /// never read by a decision, so it does not go through the `Clock`.
    const NOW_MS: &'static str;

    /// The positional counter older binaries read (0 for a new database).
    async fn positional(&self) -> Result<u32, StoreError>;
    /// Writes the positional counter.
    async fn set_positional(&self, version: u32) -> Result<(), StoreError>;
    /// Whether `schema_migrations` exists (it does not before names).
    async fn records_names(&self) -> Result<bool, StoreError>;
    /// Creates `schema_migrations` and whatever holds the counter.
    async fn create_records(&self) -> Result<(), StoreError>;
    /// Runs a step's SQL (several statements).
    async fn batch(&self, sql: &str) -> Result<(), StoreError>;
}

/// A write transaction of the runner.
pub(crate) trait MigrationTx {
    type Db: SchemaDb;
    fn db(&self) -> &Self::Db;
    async fn commit(self) -> Result<(), StoreError>;
}

/// An engine's connection as the runner uses it.
pub(crate) trait Migrator {
    type Tx<'a>: MigrationTx
    where
        Self: 'a;
    /// Begins a write transaction that no other opener of the database
    /// runs at the same time; dropping it uncommitted rolls it back.
    async fn begin(&mut self) -> Result<Self::Tx<'_>, StoreError>;
}

/// Brings the database up to every step of `migrations::STEPS`, or refuses
/// one written by a newer or different hushwatch (leaving it untouched).
pub(crate) async fn run(conn: &mut impl Migrator) -> Result<(), StoreError> {
    let recorded = adopt(conn).await?;
    for step in migrations::pending(&recorded) {
        apply_step(conn, step).await?;
    }
    Ok(())
}

/// Refuses a database this binary must not touch: a positional counter
/// above this binary's, or a recorded step it does not know. Reads only.
pub(crate) async fn refuse_foreign<D: SchemaDb>(db: &D) -> Result<(), StoreError> {
    let version = db.positional().await?;
    if version > binary_version::<D>() {
        return Err(too_new::<D>(version));
    }
    if db.records_names().await? {
        let unknown = migrations::unknown(&names(db).await?);
        if !unknown.is_empty() {
            return Err(migrations::unknown_error(&unknown));
        }
    }
    Ok(())
}

/// Under the lock: refuses a database this binary must not touch, else
/// makes sure `schema_migrations` exists, recording the steps a positional
/// counter stood for (none for a new database) without running them.
/// Returns the recorded names.
pub(crate) async fn adopt(conn: &mut impl Migrator) -> Result<Vec<String>, StoreError> {
    let fail = |e| failed("recording applied steps", e);
    let tx = conn.begin().await.map_err(fail)?;
    let db = tx.db();
    // A refusal is returned as it is (the caller tells TooNew apart).
    refuse_foreign(db).await?;
    if db.records_names().await.map_err(fail)? {
        return names(db).await.map_err(fail);
    }
    let version = db.positional().await.map_err(fail)?;
    let adopted = positional_names(db, version)?;
    db.create_records().await.map_err(fail)?;
    for name in &adopted {
        record(db, name).await.map_err(fail)?;
    }
    tx.commit().await.map_err(fail)?;
    Ok(adopted.into_iter().map(str::to_owned).collect())
}

/// Applies `step` unless the database already records it (re-read inside
/// the exclusive transaction), with its record and the positional counter,
/// in one transaction.
pub(crate) async fn apply_step(conn: &mut impl Migrator, step: &Step) -> Result<(), StoreError> {
    let fail = |e| failed(&format!("step {}", step.name), e);
    let tx = conn.begin().await.map_err(fail)?;
    let db = tx.db();
    let mut recorded = names(db).await.map_err(fail)?;
    if recorded.iter().any(|r| r == step.name) {
        return Ok(());
    }
    let engine = engine_of(db);
    if let Some(sql) = step.sql(engine) {
        db.batch(sql).await.map_err(fail)?;
    }
    record(db, step.name).await.map_err(fail)?;
    recorded.push(step.name.to_owned());
    db.set_positional(migrations::positional_version(engine, &recorded))
        .await
        .map_err(fail)?;
    tx.commit().await.map_err(fail)
}

fn engine_of<D: SchemaDb>(_: &D) -> Engine {
    D::ENGINE
}

fn binary_version<D: SchemaDb>() -> u32 {
    migrations::binary_version(D::ENGINE)
}

fn too_new<D: SchemaDb>(file: u32) -> StoreError {
    StoreError::TooNew {
        file,
        binary: binary_version::<D>(),
    }
}

fn positional_names<D: SchemaDb>(_: &D, version: u32) -> Result<Vec<&'static str>, StoreError> {
    // Unreachable after `refuse_foreign`, kept as a refusal.
    migrations::positional_names(D::ENGINE, version).ok_or_else(|| too_new::<D>(version))
}

async fn names(db: &impl Db) -> Result<Vec<String>, StoreError> {
    let rows: Vec<(String,)> = db.rows("SELECT name FROM schema_migrations", &[]).await?;
    Ok(rows.into_iter().map(|(name,)| name).collect())
}

async fn record<D: SchemaDb>(db: &D, name: &str) -> Result<(), StoreError> {
    let sql = format!(
        "INSERT INTO schema_migrations (name, applied_at) VALUES ($1, {})",
        D::NOW_MS
    );
    db.exec(&sql, &[&name]).await.map(drop)
}

/// A failed statement of the runner, saying what it was doing.
fn failed(doing: &str, e: StoreError) -> StoreError {
    match e {
        StoreError::Sql(msg) | StoreError::Open(msg) | StoreError::Migration(msg) => {
            StoreError::Migration(format!("{doing}: {msg}"))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Creates a table, then fails: neither the table, nor the record, nor
    /// the counter may stay.
    const BROKEN: &str = "CREATE TABLE half_done (a BIGINT);
        INSERT INTO no_such_table (a) VALUES (1);";

    /// The recorded names and the counter, read in a transaction of the runner.
    async fn state(conn: &mut impl Migrator) -> (Vec<String>, u32) {
        let tx = conn.begin().await.unwrap();
        let mut recorded = names(tx.db()).await.unwrap();
        recorded.sort();
        (recorded, tx.db().positional().await.unwrap())
    }

    /// The same on either engine: a fully migrated database, a step that
    /// fails half way, and the database is left at its last good step.
    async fn a_failing_step_leaves_the_last_good_step(conn: &mut impl Migrator) {
        run(conn).await.unwrap();
        let before = state(conn).await;
        assert_eq!(before.0.len(), migrations::STEPS.len());
        let broken = Step {
            name: "9999_broken",
            sqlite: Some(BROKEN),
            postgres: Some(BROKEN),
        };
        let err = apply_step(conn, &broken).await.expect_err("the step fails");
        assert!(
            matches!(&err, StoreError::Migration(m) if m.starts_with("step 9999_broken: ")),
            "{err:?}"
        );
        assert_eq!(state(conn).await, before);
        let tx = conn.begin().await.unwrap();
        let half: Result<(i64,), _> = tx.db().one("SELECT count(*) FROM half_done", &[]).await;
        assert!(half.is_err(), "the step's table was rolled back");
        drop(tx);
        // And the database still opens as it was.
        run(conn).await.unwrap();
        assert_eq!(state(conn).await, before);
    }

    #[test]
    fn sqlite_a_failing_step_leaves_the_last_good_step() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = crate::schema::open(&dir.path().join("hushwatch.sqlite3")).unwrap();
        crate::db::ready(async {
            a_failing_step_leaves_the_last_good_step(&mut conn).await;
            Ok(())
        })
        .unwrap();
    }

    #[tokio::test]
    async fn postgres_a_failing_step_leaves_the_last_good_step() {
        let Some(db) = crate::testdb::PgTestDb::create().await else {
            return;
        };
        let pool = crate::pg::pool(&db.settings(), 1).unwrap();
        let mut client = pool.get().await.unwrap();
        a_failing_step_leaves_the_last_good_step(&mut client).await;
    }
}
