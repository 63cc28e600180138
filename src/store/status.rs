//! Bounded reads for the status page: recent arrivals per stream (for the
//! 7-day timeline) and the audit chain's head and last checkpoint.

use super::StoreError;
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension};

/// v6: lets the timeline read one stream's recent audit entries without
/// scanning the whole log (the `events` table already has such an index).
pub(super) const MIGRATION: &str =
    "CREATE INDEX audit_log_by_source ON audit_log(source, received_at);";

/// One recorded event on a stream: when it arrived and its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    pub at: DateTime<Utc>,
    pub event_type: String,
}

/// The audit chain as the status page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSummary {
    /// Sequence number and hex hash of the newest entry (or the prune anchor).
    pub head_seq: i64,
    pub head_hash: String,
    pub last_checkpoint: Option<CheckpointSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointSummary {
    pub seq: i64,
    pub at: DateTime<Utc>,
    pub signed: bool,
}

fn time(ms: i64) -> rusqlite::Result<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms).ok_or(rusqlite::Error::IntegralValueOutOfRange(0, ms))
}

/// The newest `cap` events of each stream received at or after `since`,
/// newest first. Each event lives in exactly one of `events` (audit off) or
/// `audit_log` (audit on); Svix operational messages are not stream events.
pub(super) fn recent_arrivals(
    conn: &Connection,
    streams: &[String],
    since: DateTime<Utc>,
    cap: i64,
) -> Result<Vec<(String, Vec<Arrival>)>, StoreError> {
    let mut from_events = conn.prepare_cached(
        "SELECT received_at, event_type FROM events
         WHERE stream = ?1 AND received_at >= ?2 AND feeds_clock = 1
         ORDER BY received_at DESC LIMIT ?3",
    )?;
    let mut from_audit = conn.prepare_cached(
        "SELECT received_at, event_type FROM audit_log
         WHERE source = ?1 AND received_at >= ?2 AND channel != 'svix'
         ORDER BY received_at DESC LIMIT ?3",
    )?;
    let since = since.timestamp_millis();
    let mut out = Vec::with_capacity(streams.len());
    for stream in streams {
        let mut arrivals = Vec::new();
        for stmt in [&mut from_events, &mut from_audit] {
            let rows = stmt.query_map(params![stream, since, cap], |r| {
                Ok(Arrival {
                    at: time(r.get(0)?)?,
                    event_type: r.get(1)?,
                })
            })?;
            for row in rows {
                arrivals.push(row?);
            }
        }
        arrivals.sort_by_key(|a| std::cmp::Reverse(a.at));
        arrivals.truncate(usize::try_from(cap).unwrap_or(0));
        out.push((stream.clone(), arrivals));
    }
    Ok(out)
}

pub(super) fn audit_summary(conn: &Connection) -> Result<AuditSummary, StoreError> {
    let head: Option<(i64, String)> = conn
        .query_row(
            "SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let head = match head {
        Some(h) => Some(h),
        None => conn
            .query_row("SELECT seq, hash FROM audit_anchor WHERE id = 1", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?,
    };
    let (head_seq, head_hash) = head.unwrap_or((0, String::new()));
    let last_checkpoint = conn
        .query_row(
            "SELECT seq, created_at, mac IS NOT NULL FROM audit_checkpoints
             ORDER BY created_at DESC, seq DESC LIMIT 1",
            [],
            |r| {
                Ok(CheckpointSummary {
                    seq: r.get(0)?,
                    at: time(r.get(1)?)?,
                    signed: r.get(2)?,
                })
            },
        )
        .optional()?;
    Ok(AuditSummary {
        head_seq,
        head_hash,
        last_checkpoint,
    })
}
