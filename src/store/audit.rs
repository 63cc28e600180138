//! SQL for the audit log (see `crate::audit` for the chain itself).
//!
//! Appends happen inside `record_events`' transaction, so an event is
//! acknowledged if and only if its audit entry committed with it. The
//! read side (`AuditReader`) opens its own read-only connection, so
//! `hushwatch audit verify/export` works while `serve` is running (WAL).

use super::StoreError;
use crate::audit::chain::{from_hex, Entry, GENESIS};
use crate::audit::checkpoint::Checkpoint;
use crate::audit::verify::{Anchor, StoredEntry};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Row};
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

fn anchor(conn: &Connection) -> rusqlite::Result<Anchor> {
    let row = conn
        .query_row("SELECT seq, hash FROM audit_anchor WHERE id = 1", [], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })
        .optional()?;
    Ok(row.map_or(Anchor::GENESIS, |(seq, hash)| Anchor {
        seq,
        hash: from_hex(&hash).unwrap_or(GENESIS),
    }))
}

pub(super) fn subject_json(pairs: &[(String, String)]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = pairs
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// Read-only access for `hushwatch audit`, on either engine.
pub struct AuditReader {
    inner: Reader,
}

enum Reader {
    Sqlite(Connection),
    Postgres(Box<super::pg::audit_reader::PgAuditReader>),
}

/// Filters for export; all optional.
#[derive(Debug, Clone, Default)]
pub struct ExportFilter {
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub stream: Option<String>,
}

fn entry_from_row(r: &Row<'_>) -> rusqlite::Result<StoredEntry> {
    let prev: String = r.get(10)?;
    let hash: String = r.get(11)?;
    // A damaged hex value is kept as an impossible hash so verification
    // reports the entry instead of the reader failing.
    let bad = [0xff; 32];
    Ok(StoredEntry {
        entry: Entry {
            seq: r.get(0)?,
            received_at_ms: r.get(1)?,
            source: r.get(2)?,
            channel: r.get(3)?,
            delivery_id: r.get(4)?,
            event_type: r.get(5)?,
            event_time_ms: r.get(6)?,
            subject_ids: r.get(7)?,
            body_sha256: r.get(8)?,
            signature_verified: r.get(9)?,
            prev_hash: from_hex(&prev).unwrap_or(bad),
        },
        stored_hash: from_hex(&hash).unwrap_or(bad),
    })
}

const COLUMNS: &str = "seq, received_at, source, channel, delivery_id, event_type, event_time,
    subject_ids, body_sha256, signature_verified, prev_hash, hash";

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
            Some(pg) => Ok(AuditReader {
                inner: Reader::Postgres(Box::new(super::pg::audit_reader::PgAuditReader::open(
                    &pg.settings,
                )?)),
            }),
        }
    }

    pub fn anchor(&self) -> Result<Anchor, StoreError> {
        match &self.inner {
            Reader::Sqlite(conn) => Ok(anchor(conn)?),
            Reader::Postgres(pg) => pg.anchor(),
        }
    }

    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>, StoreError> {
        let conn = match &self.inner {
            Reader::Sqlite(conn) => conn,
            Reader::Postgres(pg) => return pg.checkpoints(),
        };
        let mut stmt =
            conn.prepare("SELECT seq, hash, created_at, mac FROM audit_checkpoints ORDER BY seq")?;
        let rows = stmt.query_map([], |r| {
            let hash: String = r.get(1)?;
            let mac: Option<String> = r.get(3)?;
            Ok(Checkpoint {
                seq: r.get(0)?,
                hash: from_hex(&hash).unwrap_or([0xff; 32]),
                created_at_ms: r.get(2)?,
                mac: mac.map(|m| from_hex(&m).unwrap_or([0xff; 32])),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Calls `visit` for every entry in seq order, streaming from SQLite.
    pub fn for_each(
        &self,
        filter: &ExportFilter,
        mut visit: impl FnMut(StoredEntry) -> bool,
    ) -> Result<(), StoreError> {
        let conn = match &self.inner {
            Reader::Sqlite(conn) => conn,
            Reader::Postgres(pg) => return pg.for_each(filter, visit),
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM audit_log
             WHERE (?1 IS NULL OR received_at >= ?1) AND (?2 IS NULL OR received_at < ?2)
               AND (?3 IS NULL OR source = ?3)
             ORDER BY seq"
        );
        let mut stmt = conn.prepare(&sql)?;
        let mut rows = stmt.query(params![filter.since_ms, filter.until_ms, filter.stream])?;
        while let Some(row) = rows.next()? {
            if !visit(entry_from_row(row)?) {
                break;
            }
        }
        Ok(())
    }
}
