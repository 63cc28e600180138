//! SQL for the audit log (see `crate::audit` for the chain itself).
//!
//! Appends ([`append_audit`]) happen inside the transaction that records
//! the event, so an event is acknowledged if and only if its audit entry
//! committed with it. On PostgreSQL every appending transaction first
//! locks the chain's head row ([`lock_head`]), so one chain grows in one
//! order and lock order is always head → stream row. The
//! read side (`AuditReader`) opens its own read-only connection, so
//! `hushwatch audit verify/export` works while `serve` is running (WAL).

use super::db::{Cells, Columns, Db};
use super::ops::{count, millis};
use super::{NewEvent, StoreError};
use hushwatch_core::audit::chain::{from_hex, to_hex, Entry, GENESIS};
use hushwatch_core::audit::checkpoint::Checkpoint;
use hushwatch_core::audit::verify::{Anchor, StoredEntry};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

pub(super) const MIGRATION: &str = "CREATE TABLE audit_log (
        seq                INTEGER PRIMARY KEY,
        received_at        INTEGER NOT NULL,
        source             TEXT NOT NULL,
        channel            TEXT NOT NULL,
        delivery_id        TEXT,
        event_type         TEXT NOT NULL,
        event_time         INTEGER,
        subject_ids        TEXT NOT NULL,
        body_sha256        TEXT,
        signature_verified INTEGER NOT NULL CHECK (signature_verified IN (0, 1)),
        prev_hash          TEXT NOT NULL,
        hash               TEXT NOT NULL
    );
    CREATE TABLE audit_checkpoints (
        seq        INTEGER NOT NULL,
        hash       TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        mac        TEXT
    );
    CREATE TABLE audit_anchor (
        id   INTEGER PRIMARY KEY CHECK (id = 1),
        seq  INTEGER NOT NULL,
        hash TEXT NOT NULL
    );";

pub(super) fn subject_json(pairs: &[(String, String)]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = pairs
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// Read-only access for `hushwatch audit`, on either engine: the reads
/// are written once over [`Db`], and entries come in pages of [`PAGE`] by
/// sequence number, so memory stays bounded whatever the log's length.
/// Every read of one reader sees one snapshot (a read transaction held
/// for the reader's life), so the anchor, the checkpoints and the entries
/// agree even while `serve` prunes and appends: without it, a prune
/// between two reads would look like deleted entries to `audit verify`.
pub struct AuditReader {
    inner: Reader,
}

enum Reader {
    Sqlite(Connection),
    Postgres(Box<super::pg::PgReader>),
}

/// Runs one read written over [`Db`] on the reader's engine.
macro_rules! on_reader {
    ($reader:expr, |$db:ident| $read:expr) => {
        match &$reader.inner {
            Reader::Sqlite($db) => super::db::ready($read),
            Reader::Postgres(pg) => {
                let $db = pg.db();
                pg.block_on($read)
            }
        }
    };
}

/// Filters for export; all optional.
#[derive(Debug, Clone, Default)]
pub struct ExportFilter {
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub stream: Option<String>,
}

const PAGE: i64 = 1_000;

/// A damaged hex value reads as an impossible hash, so verification
/// reports the entry instead of the reader failing.
fn stored_hash(hex: &str) -> [u8; 32] {
    from_hex(hex).unwrap_or([0xff; 32])
}

impl Columns for StoredEntry {
    fn read(r: &impl Cells) -> Result<Self, StoreError> {
        Ok(StoredEntry {
            entry: Entry {
                seq: r.cell(0)?,
                received_at_ms: r.cell(1)?,
                source: r.cell(2)?,
                channel: r.cell(3)?,
                delivery_id: r.cell(4)?,
                event_type: r.cell(5)?,
                event_time_ms: r.cell(6)?,
                subject_ids: r.cell(7)?,
                body_sha256: r.cell(8)?,
                signature_verified: r.cell(9)?,
                prev_hash: stored_hash(&r.cell::<String>(10)?),
            },
            stored_hash: stored_hash(&r.cell::<String>(11)?),
        })
    }
}

impl Columns for Checkpoint {
    fn read(r: &impl Cells) -> Result<Self, StoreError> {
        Ok(Checkpoint {
            seq: r.cell(0)?,
            hash: stored_hash(&r.cell::<String>(1)?),
            created_at_ms: r.cell(2)?,
            mac: r.cell::<Option<String>>(3)?.map(|m| stored_hash(&m)),
        })
    }
}

async fn anchor<D: Db>(db: &D) -> Result<Anchor, StoreError> {
    let row: Option<(i64, String)> = db
        .opt("SELECT seq, hash FROM audit_anchor WHERE id = 1", &[])
        .await?;
    Ok(row.map_or(Anchor::GENESIS, |(seq, hash)| Anchor {
        seq,
        hash: from_hex(&hash).unwrap_or(GENESIS),
    }))
}

async fn checkpoints<D: Db>(db: &D) -> Result<Vec<Checkpoint>, StoreError> {
    db.rows(
        "SELECT seq, hash, created_at, mac FROM audit_checkpoints ORDER BY seq",
        &[],
    )
    .await
}

async fn entries_after<D: Db>(
    db: &D,
    after: i64,
    filter: &ExportFilter,
) -> Result<Vec<StoredEntry>, StoreError> {
    db.rows(
        "SELECT seq, received_at, source, channel, delivery_id, event_type, event_time,
                subject_ids, body_sha256, signature_verified, prev_hash, hash
         FROM audit_log
         WHERE seq > $1
           AND (CAST($2 AS BIGINT) IS NULL OR received_at >= $2)
           AND (CAST($3 AS BIGINT) IS NULL OR received_at < $3)
           AND (CAST($4 AS TEXT) IS NULL OR source = $4)
         ORDER BY seq LIMIT $5",
        &[
            &after,
            &filter.since_ms,
            &filter.until_ms,
            &filter.stream,
            &PAGE,
        ],
    )
    .await
}

impl AuditReader {
    pub fn open(path: &Path) -> Result<AuditReader, StoreError> {
        if !path.exists() {
            return Err(StoreError::Open(format!(
                "{} does not exist (has hushwatch run with this data_dir?)",
                path.display()
            )));
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| StoreError::Open(e.to_string()))?;
        // Deferred: the snapshot is taken by the first read. In WAL mode it
        // never blocks the writer.
        conn.execute_batch("BEGIN")
            .map_err(|e| StoreError::Open(e.to_string()))?;
        Ok(AuditReader {
            inner: Reader::Sqlite(conn),
        })
    }

    /// The chain of the store `config` names: the SQLite file
    /// `sqlite_path` without `[store] url`, else the PostgreSQL database.
    pub fn open_configured(
        store: &super::location::StoreConfig,
        sqlite_path: &Path,
    ) -> Result<AuditReader, StoreError> {
        match &store.postgres {
            None => Self::open(sqlite_path),
            Some(pg) => Self::open_postgres(&pg.settings),
        }
    }

    pub(crate) fn open_postgres(settings: &super::pg::Settings) -> Result<AuditReader, StoreError> {
        Ok(AuditReader {
            inner: Reader::Postgres(Box::new(super::pg::PgReader::open(settings)?)),
        })
    }

    pub fn anchor(&self) -> Result<Anchor, StoreError> {
        on_reader!(self, |db| anchor(db))
    }

    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>, StoreError> {
        on_reader!(self, |db| checkpoints(db))
    }

    /// Calls `visit` for every entry the filter admits, in seq order,
    /// until it returns false.
    pub fn for_each(
        &self,
        filter: &ExportFilter,
        mut visit: impl FnMut(StoredEntry) -> bool,
    ) -> Result<(), StoreError> {
        let mut after = i64::MIN;
        loop {
            let page = on_reader!(self, |db| entries_after(db, after, filter))?;
            let full = page.len() as i64 == PAGE;
            for e in page {
                after = e.entry.seq;
                if !visit(e) {
                    return Ok(());
                }
            }
            if !full {
                return Ok(());
            }
        }
    }
}

/// Takes the audit head's row lock when the transaction will append,
/// before any other row lock, so every appending transaction locks
/// head → rows and queues on the same first lock. (SQLite's one writer
/// needs no lock.)
pub(super) async fn lock_head<D: Db>(db: &D, audit: bool) -> Result<(), StoreError> {
    if audit && D::POSTGRES {
        let _: (i64,) = db
            .one(&D::locked("SELECT seq FROM audit_head WHERE id = 1"), &[])
            .await?;
    }
    Ok(())
}

/// [`lock_head`] for a batch: when any of `events` is chained.
pub(super) async fn lock_audit_head<D: Db>(db: &D, events: &[NewEvent]) -> Result<(), StoreError> {
    lock_head(db, events.iter().any(|e| e.audit)).await
}

/// The chain's head: the last entry appended, else the prune anchor, else
/// genesis. PostgreSQL keeps it in the `audit_head` row, which is also the
/// lock appenders queue on; SQLite's one writer reads the last entry.
async fn audit_head<D: Db>(db: &D) -> Result<Anchor, StoreError> {
    let last = if D::POSTGRES {
        "SELECT seq, hash FROM audit_head WHERE id = 1"
    } else {
        "SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1"
    };
    match db.opt::<(i64, Option<String>)>(last, &[]).await? {
        Some((seq, hash)) => Ok(Anchor {
            seq,
            hash: hash.as_deref().and_then(from_hex).unwrap_or(GENESIS),
        }),
        None if D::POSTGRES => Ok(Anchor::GENESIS),
        None => anchor(db).await,
    }
}

/// Appends `event` to the audit chain in the caller's transaction (under
/// the head lock on PostgreSQL, taken by the caller): an event is
/// acknowledged if and only if its entry committed with it.
pub(super) async fn append_audit<D: Db>(db: &D, event: &NewEvent) -> Result<(), StoreError> {
    let head = audit_head(db).await?;
    let entry = Entry {
        seq: head.seq + 1,
        received_at_ms: millis(event.received_at),
        source: event.stream.clone(),
        channel: event.channel.to_string(),
        delivery_id: event.delivery_id.clone(),
        event_type: event.event_type.clone(),
        event_time_ms: event.event_time.map(millis),
        subject_ids: subject_json(&event.subject_ids),
        body_sha256: event.body_sha256.map(|d| to_hex(&d)),
        signature_verified: event.signature_verified,
        prev_hash: head.hash,
    };
    let hash = to_hex(&entry.hash());
    db.exec(
        "INSERT INTO audit_log (seq, received_at, source, channel, delivery_id, event_type,
             event_time, subject_ids, body_sha256, signature_verified, prev_hash, hash)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        &[
            &entry.seq,
            &entry.received_at_ms,
            &entry.source,
            &entry.channel,
            &entry.delivery_id,
            &entry.event_type,
            &entry.event_time_ms,
            &entry.subject_ids,
            &entry.body_sha256,
            &entry.signature_verified,
            &to_hex(&entry.prev_hash),
            &hash,
        ],
    )
    .await?;
    if D::POSTGRES {
        db.exec(
            "UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1",
            &[&entry.seq, &hash],
        )
        .await?;
    }
    Ok(())
}

/// Writes a checkpoint of the chain's head (none while the chain is
/// empty). On PostgreSQL the head row is locked, so the checkpoint pins an
/// entry that is committed, not one another replica is appending.
pub(super) async fn audit_checkpoint<D: Db>(
    db: &D,
    now_ms: i64,
    key: Option<&[u8]>,
) -> Result<Option<Checkpoint>, StoreError> {
    lock_head(db, true).await?;
    let head = audit_head(db).await?;
    if head.seq == 0 {
        return Ok(None);
    }
    let c = Checkpoint::new(head.seq, head.hash, now_ms, key);
    db.exec(
        "INSERT INTO audit_checkpoints (seq, hash, created_at, mac) VALUES ($1, $2, $3, $4)",
        &[
            &c.seq,
            &to_hex(&c.hash),
            &c.created_at_ms,
            &c.mac.map(|m| to_hex(&m)),
        ],
    )
    .await?;
    Ok(Some(c))
}

/// Deletes whole prefixes older than `before_ms`, remembering the last
/// pruned entry as the new anchor so the rest still verifies.
pub(super) async fn audit_prune<D: Db>(db: &D, before_ms: i64) -> Result<usize, StoreError> {
    let last: Option<(i64, String)> = db
        .opt(
            "SELECT seq, hash FROM audit_log WHERE received_at < $1 ORDER BY seq DESC LIMIT 1",
            &[&before_ms],
        )
        .await?;
    let Some((seq, hash)) = last else {
        return Ok(0);
    };
    db.exec(
        "INSERT INTO audit_anchor (id, seq, hash) VALUES (1, $1, $2)
         ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
        &[&seq, &hash],
    )
    .await?;
    let deleted = db
        .exec("DELETE FROM audit_log WHERE seq <= $1", &[&seq])
        .await?;
    db.exec("DELETE FROM audit_checkpoints WHERE seq <= $1", &[&seq])
        .await?;
    Ok(count(deleted))
}
