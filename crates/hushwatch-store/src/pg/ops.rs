//! What only PostgreSQL has of the core rows (`store::core` holds the
//! rest, for both engines): the change cursor replicas re-read streams by,
//! and the statement `bulk` reads a batch's streams with.

use tokio_postgres::Row;

use super::sql::Tx;
use crate::core::STREAM_COLUMNS;
use crate::db::{Columns, Db};
use crate::{StoreError, StreamRow};

pub(super) use crate::audit::lock_audit_head;

/// Schema step: every stream row carries the id of the transaction that
/// last wrote it (`changed_xid`, set by a trigger, so every statement that
/// inserts or updates a stream keeps it), indexed, so a replica re-reads
/// only the rows changed since its last read (`streams_changed`).
pub(super) const STREAM_CHANGES_MIGRATION: &str =
    "ALTER TABLE streams ADD COLUMN changed_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
     CREATE INDEX streams_by_change ON streams(changed_xid);
     CREATE FUNCTION hushwatch_stream_changed() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
         NEW.changed_xid := pg_current_xact_id();
         RETURN NEW;
     END $$;
     CREATE TRIGGER streams_changed BEFORE UPDATE ON streams
         FOR EACH ROW EXECUTE FUNCTION hushwatch_stream_changed();";

pub(super) fn stream_from_row(row: &Row) -> Result<StreamRow, StoreError> {
    StreamRow::read(row)
}

pub(super) fn stream_rows_sql() -> String {
    format!("SELECT {STREAM_COLUMNS} FROM streams WHERE name = ANY($1)")
}

/// The rows changed since `since` (all rows without it) and the cursor
/// for the next call. Transaction ids are handed out at a transaction's
/// first write but commit in any order, so the cursor is not the largest
/// id read: it is the oldest transaction still running when this read's
/// snapshot was taken. Everything older was visible to this read; every
/// change not visible to it has an id at or above the cursor. The caller
/// runs this in a REPEATABLE READ transaction: one snapshot for both.
pub(super) async fn streams_changed(
    tx: &Tx<'_>,
    since: Option<i64>,
) -> Result<(Vec<StreamRow>, Option<i64>), StoreError> {
    let (cursor,): (i64,) = tx
        .one(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::TEXT::BIGINT",
            &[],
        )
        .await?;
    let rows = match since {
        None => {
            tx.rows(&format!("SELECT {STREAM_COLUMNS} FROM streams"), &[])
                .await?
        }
        Some(since) => {
            let sql =
                format!("SELECT {STREAM_COLUMNS} FROM streams WHERE changed_xid >= $1::TEXT::xid8");
            tx.rows(&sql, &[&since.to_string()]).await?
        }
    };
    Ok((rows, Some(cursor)))
}
