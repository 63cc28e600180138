//! Store operations for running several hushwatch processes on one
//! database (issue #13), and their SQLite implementation (one process:
//! every operation is trivially consistent under the single writer).
//!
//! - **Outbox claims**: `claim_outbox` hands out the oldest due page of
//!   each (alert, notifier) queue with a lease (`claimed_by`,
//!   `lease_until`) and a fencing token (`claim_token`, +1 per claim);
//!   `settle_claim` records an attempt only for the current token. A row
//!   whose lease ran out is claimable again, same id, so the same page key.
//! - **Leader lease**: one `leader` row with a holder, a term and a lease
//!   end. `elect` renews for the current holder of the current term, takes
//!   over (term + 1) once the lease ran out, else reports the holder. A
//!   holder whose term was superseded cannot renew it: it gets a new term
//!   or nothing. `resign` gives it up early.
//! - **Heartbeats**: `heartbeat` marks a replica alive; `replicas` lists
//!   those seen since an instant.
//! - **Change feed**: `Store::changes` yields the streams whose arrival a
//!   commit moved, on any replica (`Change::Resync` when notifications may
//!   have been missed: re-read every stream).
//!
//! Every instant comes from the caller (the store's clock: the database
//! server's on PostgreSQL, see `pg::clock`), so the conformance suite
//! drives lease expiry with a `ManualClock`.

use chrono::{DateTime, TimeDelta, Utc};
use rusqlite::{params, Connection, OptionalExtension};

use super::ops::{outbox_columns, outbox_from_row};
use super::{Attempt, OutboxRow, StoreError};

/// Schema step (SQLite): claim columns on the outbox, the leader row and
/// replica heartbeats.
pub(super) const MIGRATION: &str = "
    ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
    ALTER TABLE outbox ADD COLUMN lease_until INTEGER;
    ALTER TABLE outbox ADD COLUMN claim_token INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE leader (
        id          INTEGER PRIMARY KEY CHECK (id = 1),
        holder      TEXT,
        term        INTEGER NOT NULL,
        lease_until INTEGER NOT NULL
    );
    CREATE TABLE replicas (
        id         TEXT PRIMARY KEY NOT NULL,
        started_at INTEGER NOT NULL,
        seen_at    INTEGER NOT NULL
    );";

/// A page handed to one replica until `lease_until`.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub row: OutboxRow,
    /// Fencing token: `settle_claim` succeeds only with the latest one.
    pub token: i64,
    pub lease_until: DateTime<Utc>,
}

/// The leader row as `elect` left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// True when the caller holds the lease now, in `term`.
    pub leader: bool,
    pub holder: Option<String>,
    pub term: i64,
    pub lease_until: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRow {
    pub id: String,
    pub started_at: DateTime<Utc>,
    pub seen_at: DateTime<Utc>,
}

/// What the change feed says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A commit moved this stream's last arrival.
    Arrival(String),
    /// Notifications may have been lost (reconnect): re-read every stream.
    Resync,
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn time(ms: i64) -> rusqlite::Result<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms).ok_or(rusqlite::Error::IntegralValueOutOfRange(0, ms))
}

/// The due rows a claim may take: pending, not leased (or lease over), not
/// waiting for a backoff, and the oldest pending row of its (alert,
/// notifier) queue, so one alert's pages still go out in order.
pub(super) const CLAIMABLE: &str = "o.status = 'pending'
       AND (o.lease_until IS NULL OR o.lease_until <= ?1)
       AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= ?1)
       AND NOT EXISTS (SELECT 1 FROM outbox p WHERE p.status = 'pending'
                         AND p.alert_id = o.alert_id AND p.notifier = o.notifier AND p.id < o.id)";

pub(super) fn claim_outbox(
    conn: &Connection,
    replica: &str,
    now: DateTime<Utc>,
    lease: TimeDelta,
    limit: i64,
) -> Result<Vec<Claim>, StoreError> {
    let until = now + lease;
    let ids: Vec<i64> = conn
        .prepare_cached(&format!(
            "SELECT o.id FROM outbox o WHERE {CLAIMABLE} ORDER BY o.id LIMIT ?2"
        ))?
        .query_map(params![ms(now), limit], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut claims = Vec::with_capacity(ids.len());
    for id in ids {
        let token: i64 = conn
            .prepare_cached(
                "UPDATE outbox SET claimed_by = ?2, lease_until = ?3, claim_token = claim_token + 1
                 WHERE id = ?1 RETURNING claim_token",
            )?
            .query_row(params![id, replica, ms(until)], |r| r.get(0))?;
        let row = conn
            .prepare_cached(&format!(
                "SELECT {} FROM outbox o WHERE o.id = ?1",
                outbox_columns()
            ))?
            .query_row([id], outbox_from_row)?;
        claims.push(Claim {
            row,
            token,
            lease_until: until,
        });
    }
    Ok(claims)
}

/// Records `attempt` on row `id` if `token` is still its claim (and it is
/// still pending); releases the claim. False: a newer claim owns it now.
pub(super) fn settle_claim(
    conn: &Connection,
    id: i64,
    token: i64,
    attempt: &Attempt,
) -> Result<bool, StoreError> {
    let current: Option<(i64, String)> = conn
        .prepare_cached("SELECT claim_token, status FROM outbox WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if current != Some((token, "pending".to_owned())) {
        return Ok(false);
    }
    super::ops::record_attempt(conn, id, attempt)?;
    conn.prepare_cached("UPDATE outbox SET claimed_by = NULL, lease_until = NULL WHERE id = ?1")?
        .execute([id])?;
    Ok(true)
}

pub(super) fn elect(
    conn: &Connection,
    replica: &str,
    term: Option<i64>,
    now: DateTime<Utc>,
    ttl: TimeDelta,
) -> Result<Leadership, StoreError> {
    let row: Option<(Option<String>, i64, i64)> = conn
        .prepare_cached("SELECT holder, term, lease_until FROM leader WHERE id = 1")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let until = ms(now + ttl);
    let decision = decide(row.clone(), replica, term, ms(now));
    let (holder, new_term, lease_until) = match decision {
        Decision::Renew(t) | Decision::Take(t) => {
            conn.prepare_cached(
                "INSERT INTO leader (id, holder, term, lease_until) VALUES (1, ?1, ?2, ?3)
                 ON CONFLICT (id) DO UPDATE SET holder = ?1, term = ?2, lease_until = ?3",
            )?
            .execute(params![replica, t, until])?;
            (Some(replica.to_owned()), t, Some(until))
        }
        Decision::Other => {
            let (holder, t, u) = row.unwrap_or((None, 0, 0));
            (holder, t, Some(u))
        }
    };
    Ok(Leadership {
        leader: !matches!(decision, Decision::Other),
        holder,
        term: new_term,
        lease_until: lease_until.map(time).transpose()?,
    })
}

/// What `elect` does with the leader row, shared by both backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// The caller holds the current term: extend it.
    Renew(i64),
    /// The lease is free or ran out: a new term for the caller.
    Take(i64),
    /// Someone else holds a live lease.
    Other,
}

pub(super) fn decide(
    row: Option<(Option<String>, i64, i64)>,
    replica: &str,
    term: Option<i64>,
    now_ms: i64,
) -> Decision {
    let Some((holder, stored, until)) = row else {
        return Decision::Take(1);
    };
    let live = until > now_ms && holder.is_some();
    if live && holder.as_deref() == Some(replica) && term == Some(stored) {
        Decision::Renew(stored)
    } else if !live {
        Decision::Take(stored + 1)
    } else {
        Decision::Other
    }
}

pub(super) fn resign(conn: &Connection, replica: &str, term: i64) -> Result<bool, StoreError> {
    let n = conn
        .prepare_cached(
            "UPDATE leader SET holder = NULL, lease_until = 0 WHERE id = 1 AND holder = ?1 AND term = ?2",
        )?
        .execute(params![replica, term])?;
    Ok(n > 0)
}

pub(super) fn heartbeat(
    conn: &Connection,
    replica: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO replicas (id, started_at, seen_at) VALUES (?1, ?2, ?2)
         ON CONFLICT (id) DO UPDATE SET seen_at = max(seen_at, excluded.seen_at)",
    )?
    .execute(params![replica, ms(now)])?;
    Ok(())
}

pub(super) fn replicas(
    conn: &Connection,
    seen_since: DateTime<Utc>,
) -> Result<Vec<ReplicaRow>, StoreError> {
    let rows = conn
        .prepare_cached(
            "SELECT id, started_at, seen_at FROM replicas WHERE seen_at >= ?1 ORDER BY id",
        )?
        .query_map([ms(seen_since)], |r| {
            Ok(ReplicaRow {
                id: r.get(0)?,
                started_at: time(r.get(1)?)?,
                seen_at: time(r.get(2)?)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}
