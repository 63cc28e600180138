//! Bounded reads for the status page: recent arrivals per stream (for the
//! 7-day timeline) and the audit chain's head and last checkpoint.

use super::db::Db;
use super::{stored_time, StoreError};
use chrono::{DateTime, Utc};

/// Schema step `0007_audit_by_stream`: lets the timeline read one stream's recent audit
/// entries without scanning the whole log (`events` has such an index).
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

/// The statements both engines run, written once with PostgreSQL's `$N`
/// placeholders (`store::db`). Only the audit head differs: SQLite reads
/// the newest entry, else the prune anchor; PostgreSQL keeps it in its
/// `audit_head` row.
pub(super) mod sql {
    /// The newest arrivals (`$3` of them) of stream `$1` since `$2`. Each
    /// event lives in exactly one of `events` (audit off) or `audit_log`
    /// (audit on); Svix operational messages are not stream events.
    pub const ARRIVALS: [&str; 2] = [
        "SELECT received_at, event_type FROM events
         WHERE stream = $1 AND received_at >= $2 AND feeds_clock
         ORDER BY received_at DESC LIMIT $3",
        "SELECT received_at, event_type FROM audit_log
         WHERE source = $1 AND received_at >= $2 AND channel <> 'svix'
         ORDER BY received_at DESC LIMIT $3",
    ];
    pub const LAST_CHECKPOINT: &str = "SELECT seq, created_at, mac IS NOT NULL
         FROM audit_checkpoints ORDER BY created_at DESC, seq DESC LIMIT 1";
    pub const HEAD: &str = "SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1";
    pub const ANCHOR: &str = "SELECT seq, hash FROM audit_anchor WHERE id = 1";
    /// PostgreSQL's head row (its schema's addition: concurrent appenders
    /// lock it, see `store::audit::lock_head`).
    pub const HEAD_ROW: &str = "SELECT seq, hash FROM audit_head WHERE id = 1";
}

/// One stream's newest `cap` arrivals from the rows of [`sql::ARRIVALS`]
/// (received at, event type), newest first.
fn newest(rows: Vec<(i64, String)>, cap: i64) -> Result<Vec<Arrival>, StoreError> {
    let mut arrivals = rows
        .into_iter()
        .map(|(at, event_type)| {
            Ok(Arrival {
                at: stored_time(at)?,
                event_type,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    arrivals.sort_by_key(|a| std::cmp::Reverse(a.at));
    arrivals.truncate(usize::try_from(cap).unwrap_or(0));
    Ok(arrivals)
}

/// The summary from the head (seq, hash; none before the first entry) and
/// the row of [`sql::LAST_CHECKPOINT`].
fn summary(
    head: Option<(i64, Option<String>)>,
    checkpoint: Option<(i64, i64, bool)>,
) -> Result<AuditSummary, StoreError> {
    let (head_seq, head_hash) = head.unwrap_or((0, None));
    Ok(AuditSummary {
        head_seq,
        head_hash: head_hash.unwrap_or_default(),
        last_checkpoint: match checkpoint {
            Some((seq, at, signed)) => Some(CheckpointSummary {
                seq,
                at: stored_time(at)?,
                signed,
            }),
            None => None,
        },
    })
}

/// The newest `cap` events of each stream received at or after `since`,
/// newest first.
pub(super) async fn recent_arrivals<D: Db>(
    db: &D,
    streams: &[String],
    since: DateTime<Utc>,
    cap: i64,
) -> Result<Vec<(String, Vec<Arrival>)>, StoreError> {
    let since = since.timestamp_millis();
    let mut out = Vec::with_capacity(streams.len());
    for stream in streams {
        let mut rows: Vec<(i64, String)> = Vec::new();
        for statement in sql::ARRIVALS {
            rows.extend(db.rows(statement, &[stream, &since, &cap]).await?);
        }
        out.push((stream.clone(), newest(rows, cap)?));
    }
    Ok(out)
}

pub(super) async fn audit_summary<D: Db>(db: &D) -> Result<AuditSummary, StoreError> {
    // Where the head is kept differs by engine (see `sql`); SQLite's has
    // no lock, so that is how it is told apart.
    let head = if D::ROW_LOCK.is_empty() {
        match db.opt(sql::HEAD, &[]).await? {
            Some(head) => Some(head),
            None => db.opt(sql::ANCHOR, &[]).await?,
        }
    } else {
        Some(db.one(sql::HEAD_ROW, &[]).await?)
    };
    summary(head, db.opt(sql::LAST_CHECKPOINT, &[]).await?)
}

#[cfg(test)]
mod tests {
    use super::super::{NewEvent, Store};
    use chrono::{DateTime, Utc};

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn event(
        stream: &str,
        id: &str,
        received: i64,
        audit: bool,
        channel: &'static str,
    ) -> NewEvent {
        NewEvent {
            stream: stream.to_owned(),
            delivery_id: Some(id.to_owned()),
            event_type: format!("type.{id}"),
            event_time: None,
            received_at: at(received),
            feeds_clock: true,
            body_sha256: None,
            channel,
            signature_verified: false,
            subject_ids: Vec::new(),
            audit,
            access: None,
            forward: None,
        }
    }

    #[tokio::test]
    async fn arrivals_come_from_both_tables_newest_first_capped_and_bounded_in_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.sqlite3")).unwrap();
        let names = vec!["a".to_string(), "b".to_string()];
        store.watch_streams(names.clone(), at(0)).await.unwrap();
        let events = vec![
            event("a", "old", 50, true, "report"),  // before `since`
            event("a", "e1", 100, false, "report"), // events table (audit off)
            event("a", "e2", 200, true, "webhook"), // audit log
            event("a", "e3", 300, true, "report"),
            event("a", "e4", 400, false, "report"),
            event("b", "svix", 250, true, "svix"), // an operational message, not an arrival
            event("b", "b1", 150, true, "report"),
        ];
        store.record_events(events).await.unwrap();
        let got = store.recent_arrivals(names, at(100), 3).await.unwrap();
        let times = |i: usize| -> Vec<i64> { got[i].1.iter().map(|a| a.at.timestamp()).collect() };
        assert_eq!(got[0].0, "a");
        assert_eq!(times(0), [400, 300, 200], "newest first, capped at 3");
        assert_eq!(got[0].1[0].event_type, "type.e4");
        assert_eq!(times(1), [150]);
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn audit_summary_names_head_and_last_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.sqlite3")).unwrap();
        let empty = store.audit_summary().await.unwrap();
        assert_eq!((empty.head_seq, empty.last_checkpoint), (0, None));
        store.watch_streams(vec!["a".into()], at(0)).await.unwrap();
        store
            .record_events(vec![event("a", "e1", 10, true, "report")])
            .await
            .unwrap();
        store.audit_checkpoint(at(20), None).await.unwrap();
        store
            .record_events(vec![event("a", "e2", 30, true, "report")])
            .await
            .unwrap();
        let s = store.audit_summary().await.unwrap();
        assert_eq!(s.head_seq, 2);
        assert_eq!(s.head_hash.len(), 64);
        let c = s.last_checkpoint.unwrap();
        assert_eq!((c.seq, c.at, c.signed), (1, at(20), false));
        store.close().await.unwrap();
    }
}
