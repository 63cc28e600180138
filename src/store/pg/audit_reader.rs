//! Read-only access to the audit chain on PostgreSQL, for `hushwatch audit
//! verify/export`. Those commands are synchronous, so the reader owns a
//! small runtime and one connection; entries stream in pages of `PAGE` by
//! sequence number, so memory stays bounded whatever the log's length.

use deadpool_postgres::{Object, Pool};
use tokio::runtime::Runtime;
use tokio_postgres::Row;

use super::{pg_err, pool_err, Settings};
use crate::audit::chain::{from_hex, Entry, GENESIS};
use crate::audit::checkpoint::Checkpoint;
use crate::audit::verify::{Anchor, StoredEntry};
use crate::store::audit::ExportFilter;
use crate::store::StoreError;

const PAGE: i64 = 1_000;

pub(crate) struct PgAuditReader {
    runtime: Runtime,
    // Kept so the connection outlives the client object.
    _pool: Pool,
    client: Object,
}

/// A damaged hex value reads as an impossible hash, so verification
/// reports the entry instead of the reader failing.
const BAD: [u8; 32] = [0xff; 32];

fn entry(r: &Row) -> Result<StoredEntry, tokio_postgres::Error> {
    let prev: String = r.try_get(10)?;
    let hash: String = r.try_get(11)?;
    Ok(StoredEntry {
        entry: Entry {
            seq: r.try_get(0)?,
            received_at_ms: r.try_get(1)?,
            source: r.try_get(2)?,
            channel: r.try_get(3)?,
            delivery_id: r.try_get(4)?,
            event_type: r.try_get(5)?,
            event_time_ms: r.try_get(6)?,
            subject_ids: r.try_get(7)?,
            body_sha256: r.try_get(8)?,
            signature_verified: r.try_get(9)?,
            prev_hash: from_hex(&prev).unwrap_or(BAD),
        },
        stored_hash: from_hex(&hash).unwrap_or(BAD),
    })
}

impl PgAuditReader {
    pub(crate) fn open(settings: &Settings) -> Result<PgAuditReader, StoreError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Open(format!("cannot start a runtime: {e}")))?;
        let pool = super::pool(settings, 1)?;
        let client = runtime
            .block_on(pool.get())
            .map_err(|e| StoreError::Open(pool_err(e).to_string()))?;
        Ok(PgAuditReader {
            runtime,
            _pool: pool,
            client,
        })
    }

    pub(crate) fn anchor(&self) -> Result<Anchor, StoreError> {
        let row = self
            .runtime
            .block_on(
                self.client
                    .query_opt("SELECT seq, hash FROM audit_anchor WHERE id = 1", &[]),
            )
            .map_err(pg_err)?;
        Ok(match row {
            None => Anchor::GENESIS,
            Some(r) => Anchor {
                seq: r.try_get(0).map_err(pg_err)?,
                hash: from_hex(&r.try_get::<_, String>(1).map_err(pg_err)?).unwrap_or(GENESIS),
            },
        })
    }

    pub(crate) fn checkpoints(&self) -> Result<Vec<Checkpoint>, StoreError> {
        let rows = self
            .runtime
            .block_on(self.client.query(
                "SELECT seq, hash, created_at, mac FROM audit_checkpoints ORDER BY seq",
                &[],
            ))
            .map_err(pg_err)?;
        rows.iter()
            .map(|r| {
                let hash: String = r.try_get(1)?;
                let mac: Option<String> = r.try_get(3)?;
                Ok(Checkpoint {
                    seq: r.try_get(0)?,
                    hash: from_hex(&hash).unwrap_or(BAD),
                    created_at_ms: r.try_get(2)?,
                    mac: mac.map(|m| from_hex(&m).unwrap_or(BAD)),
                })
            })
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(pg_err)
    }

    pub(crate) fn for_each(
        &self,
        filter: &ExportFilter,
        mut visit: impl FnMut(StoredEntry) -> bool,
    ) -> Result<(), StoreError> {
        let mut after = i64::MIN;
        loop {
            let rows = self
                .runtime
                .block_on(self.client.query(
                    "SELECT seq, received_at, source, channel, delivery_id, event_type, event_time,
                            subject_ids, body_sha256, signature_verified, prev_hash, hash
                     FROM audit_log
                     WHERE seq > $1
                       AND ($2::BIGINT IS NULL OR received_at >= $2)
                       AND ($3::BIGINT IS NULL OR received_at < $3)
                       AND ($4::TEXT IS NULL OR source = $4)
                     ORDER BY seq LIMIT $5",
                    &[
                        &after,
                        &filter.since_ms,
                        &filter.until_ms,
                        &filter.stream,
                        &PAGE,
                    ],
                ))
                .map_err(pg_err)?;
            let full = rows.len() as i64 == PAGE;
            for r in &rows {
                let e = entry(r).map_err(pg_err)?;
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
