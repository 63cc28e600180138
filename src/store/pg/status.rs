//! `store::status` on PostgreSQL: the same statements and row mapping; the
//! audit head is the `audit_head` row.

use chrono::{DateTime, Utc};

use super::sql::{get, ms, one, opt, rows, Tx};
use crate::store::db::Columns;
use crate::store::status::{newest, sql, summary, Arrival, AuditSummary};
use crate::store::StoreError;

pub(super) async fn recent_arrivals(
    tx: &Tx<'_>,
    streams: &[String],
    since: DateTime<Utc>,
    cap: i64,
) -> Result<Vec<(String, Vec<Arrival>)>, StoreError> {
    let since = ms(since);
    let mut out = Vec::with_capacity(streams.len());
    for stream in streams {
        let mut found = Vec::new();
        for statement in sql::ARRIVALS {
            for r in rows(tx, statement, &[stream, &since, &cap]).await? {
                found.push(Columns::pg(&r)?);
            }
        }
        out.push((stream.clone(), newest(found, cap)?));
    }
    Ok(out)
}

pub(super) async fn audit_summary(tx: &Tx<'_>) -> Result<AuditSummary, StoreError> {
    let head = one(tx, "SELECT seq, hash FROM audit_head WHERE id = 1", &[]).await?;
    let checkpoint = opt(tx, sql::LAST_CHECKPOINT, &[]).await?;
    summary(
        Some((get(&head, 0)?, get(&head, 1)?)),
        checkpoint.as_ref().map(Columns::pg).transpose()?,
    )
}
