//! Store operations for running several hushwatch processes on one
//! database (issue #13), written once for both engines over
//! `store::db::Db` (on SQLite, one process: every operation is trivially
//! consistent under the single writer; PostgreSQL adds the row locks).
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
//!   have been missed: re-read every stream). On PostgreSQL that is a
//!   connection of its own, LISTENing (`pg::replica`).
//!
//! Every instant comes from the caller (the store's clock: the database
//! server's on PostgreSQL, see `pg::clock`), so the conformance suite
//! drives lease expiry with a `ManualClock`.

use std::sync::LazyLock;

use chrono::{DateTime, TimeDelta, Utc};

use super::db::Db;
use super::ops::millis;
use super::outbox::{OutboxRead, OUTBOX_COLUMNS};
use super::{stored_time, Attempt, OutboxRow, StoreError};

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

/// The statements both engines run, written once with PostgreSQL's `$N`
/// placeholders (`store::db`). PostgreSQL adds row locks ([`claim`]'s `SKIP LOCKED`, `FOR UPDATE` on
/// [`sql::CLAIM_STATE`] and [`sql::LEADER`]): replicas share it, SQLite
/// has one writer.
pub(super) mod sql {
    /// The due rows a claim may take (`$1` now): pending, not leased (or
    /// lease over), not waiting for a backoff, and the oldest pending row of
    /// its (alert, notifier) queue, so one alert's pages still go out in
    /// order.
    pub const CLAIMABLE: &str = "SELECT o.id FROM outbox o
         WHERE o.status = 'pending'
           AND (o.lease_until IS NULL OR o.lease_until <= $1)
           AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= $1)
           AND NOT EXISTS (SELECT 1 FROM outbox p WHERE p.status = 'pending'
                             AND p.alert_id = o.alert_id AND p.notifier = o.notifier
                             AND p.id < o.id)
         ORDER BY o.id LIMIT $4";
    /// `$2` replica, `$3` lease end; `{}`: [`CLAIMABLE`] (and PostgreSQL's lock).
    pub const CLAIM: &str = "UPDATE outbox
         SET claimed_by = $2, lease_until = $3, claim_token = claim_token + 1
         WHERE id IN ({}) RETURNING id, claim_token";
    pub const CLAIM_STATE: &str = "SELECT claim_token, status FROM outbox WHERE id = $1";
    pub const UNCLAIM: &str =
        "UPDATE outbox SET claimed_by = NULL, lease_until = NULL WHERE id = $1";
    pub const LEADER: &str = "SELECT holder, term, lease_until FROM leader WHERE id = 1";
    /// PostgreSQL's migration inserts the row, SQLite's does not: an upsert
    /// serves both.
    pub const LEAD: &str =
        "INSERT INTO leader (id, holder, term, lease_until) VALUES (1, $1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, term = excluded.term,
             lease_until = excluded.lease_until";
    pub const RESIGN: &str = "UPDATE leader SET holder = NULL, lease_until = 0
         WHERE id = 1 AND holder = $1 AND term = $2";
    /// `seen_at` never moves back (a CASE, where SQLite would say `max(a,
    /// b)` and PostgreSQL `GREATEST(a, b)`).
    pub const HEARTBEAT: &str = "INSERT INTO replicas (id, started_at, seen_at) VALUES ($1, $2, $2)
         ON CONFLICT (id) DO UPDATE SET seen_at = CASE
             WHEN excluded.seen_at > replicas.seen_at THEN excluded.seen_at
             ELSE replicas.seen_at END";
    pub const REPLICAS: &str =
        "SELECT id, started_at, seen_at FROM replicas WHERE seen_at >= $1 ORDER BY id";
}

/// [`sql::CLAIM`] with its subquery; `lock` follows the subquery's rows
/// (PostgreSQL: rows another replica is claiming right now are skipped, not
/// waited for; a younger row of the same queue is not claimable while an
/// older one is pending, so a queue is never split between replicas).
fn claim(lock: &str) -> String {
    sql::CLAIM.replace("{}", &format!("{}{lock}", sql::CLAIMABLE))
}

// ---------------------------------------------------------------------------
// The decisions, taken once for both engines (pure).
// ---------------------------------------------------------------------------

/// True when `token` is still the claim of a pending row, given its
/// [`sql::CLAIM_STATE`] (None: no row).
fn holds(current: Option<(i64, String)>, token: i64) -> bool {
    current.is_some_and(|(t, status)| t == token && status == "pending")
}

/// The leader row: holder, term, lease end (ms).
type LeaderRow = (Option<String>, i64, i64);

/// What `elect` does with the leader row (None: there is none yet): the
/// term to write for the caller with lease end `until`, if any, and the
/// answer. The caller renews the current term it holds, takes a new one
/// once the lease is free or ran out, else is told who holds it.
fn elect_outcome(
    row: Option<LeaderRow>,
    replica: &str,
    term: Option<i64>,
    now_ms: i64,
    until: i64,
) -> Result<(Option<i64>, Leadership), StoreError> {
    let (holder, stored, lease) = row.unwrap_or((None, 0, 0));
    let live = lease > now_ms && holder.is_some();
    let ours = if live && holder.as_deref() == Some(replica) && term == Some(stored) {
        Some(stored)
    } else if !live {
        Some(stored + 1)
    } else {
        None
    };
    let leadership = match ours {
        Some(term) => Leadership {
            leader: true,
            holder: Some(replica.to_owned()),
            term,
            lease_until: Some(stored_time(until)?),
        },
        None => Leadership {
            leader: false,
            holder,
            term: stored,
            lease_until: Some(stored_time(lease)?),
        },
    };
    Ok((ours, leadership))
}

fn replica_row((id, started_at, seen_at): (String, i64, i64)) -> Result<ReplicaRow, StoreError> {
    Ok(ReplicaRow {
        id,
        started_at: stored_time(started_at)?,
        seen_at: stored_time(seen_at)?,
    })
}

static READ_CLAIMED: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {OUTBOX_COLUMNS} FROM outbox o WHERE o.id = $1"));

// ---------------------------------------------------------------------------
// Rows, on either engine (`store::db`): read them, call the decisions,
// write the outcome.
// ---------------------------------------------------------------------------

pub(super) async fn claim_outbox<D: Db>(
    db: &D,
    replica: &str,
    now: DateTime<Utc>,
    lease: TimeDelta,
    limit: i64,
) -> Result<Vec<Claim>, StoreError> {
    let until = now + lease;
    // PostgreSQL: skip, not wait for, rows another replica is claiming
    // right now (see [`claim`]). SQLite's one writer claims alone.
    let lock = if D::ROW_LOCK.is_empty() {
        ""
    } else {
        " FOR UPDATE SKIP LOCKED"
    };
    let mut claimed: Vec<(i64, i64)> = db
        .rows(
            &claim(lock),
            &[&millis(now), &replica, &millis(until), &limit],
        )
        .await?;
    // In id order: the order RETURNING gives is unspecified.
    claimed.sort_unstable();
    let mut out = Vec::with_capacity(claimed.len());
    for (id, token) in claimed {
        let OutboxRead(row) = db.one(&READ_CLAIMED, &[&id]).await?;
        // A row this binary cannot read is let go at once, for a replica
        // that can (a newer one, mid-rollout); the pending read names it.
        let Ok(row) = row else {
            db.exec(sql::UNCLAIM, &[&id]).await?;
            continue;
        };
        out.push(Claim {
            row,
            token,
            lease_until: until,
        });
    }
    Ok(out)
}

/// Records `attempt` on row `id` if `token` is still its claim (and it is
/// still pending); releases the claim. False: a newer claim owns it now.
/// The row is locked on PostgreSQL, so a concurrent claim waits for this.
pub(super) async fn settle_claim<D: Db>(
    db: &D,
    id: i64,
    token: i64,
    attempt: &Attempt,
) -> Result<bool, StoreError> {
    let current = db.opt(&D::locked(sql::CLAIM_STATE), &[&id]).await?;
    if !holds(current, token) {
        return Ok(false);
    }
    super::outbox::record_attempt(db, id, attempt).await?;
    db.exec(sql::UNCLAIM, &[&id]).await?;
    Ok(true)
}

/// Under the leader row's lock on PostgreSQL: two replicas electing at
/// once take turns.
pub(super) async fn elect<D: Db>(
    db: &D,
    replica: &str,
    term: Option<i64>,
    now: DateTime<Utc>,
    ttl: TimeDelta,
) -> Result<Leadership, StoreError> {
    let row: Option<LeaderRow> = db.opt(&D::locked(sql::LEADER), &[]).await?;
    let (write, leadership) = elect_outcome(row, replica, term, millis(now), millis(now + ttl))?;
    if let Some(t) = write {
        db.exec(sql::LEAD, &[&replica, &t, &millis(now + ttl)])
            .await?;
    }
    Ok(leadership)
}

pub(super) async fn resign<D: Db>(db: &D, replica: &str, term: i64) -> Result<bool, StoreError> {
    Ok(db.exec(sql::RESIGN, &[&replica, &term]).await? > 0)
}

pub(super) async fn heartbeat<D: Db>(
    db: &D,
    replica: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    db.exec(sql::HEARTBEAT, &[&replica, &millis(now)]).await?;
    Ok(())
}

pub(super) async fn replicas<D: Db>(
    db: &D,
    seen_since: DateTime<Utc>,
) -> Result<Vec<ReplicaRow>, StoreError> {
    db.rows(sql::REPLICAS, &[&millis(seen_since)])
        .await?
        .into_iter()
        .map(replica_row)
        .collect()
}

#[cfg(test)]
mod tests {
    //! The decisions both engines call (the conformance suite runs them
    //! through both).
    use super::*;

    #[test]
    fn a_lease_is_renewed_by_its_holder_taken_when_over_else_reported() {
        let row =
            |holder: Option<&str>, term, until| Some((holder.map(str::to_owned), term, until));
        let elect = |row, term| {
            let (write, l) = elect_outcome(row, "a", term, 5, 99).unwrap();
            (
                write,
                l.leader,
                l.holder,
                l.term,
                l.lease_until.unwrap().timestamp_millis(),
            )
        };
        let mine = |t| (Some(t), true, Some("a".to_owned()), t, 99);
        let other = |t, until| (None, false, Some("b".to_owned()), t, until);
        assert_eq!(elect(None, None), mine(1));
        assert_eq!(elect(row(Some("a"), 3, 10), Some(3)), mine(3));
        // A superseded term cannot be renewed, even by the same holder.
        let stale = elect(row(Some("a"), 3, 10), Some(2));
        assert_eq!(stale, (None, false, Some("a".to_owned()), 3, 10));
        assert_eq!(elect(row(Some("b"), 3, 10), None), other(3, 10));
        assert_eq!(elect(row(Some("b"), 3, 5), None), mine(4), "lease over");
        assert_eq!(elect(row(None, 3, 10), None), mine(4), "resigned");
    }

    #[test]
    fn only_the_latest_token_of_a_pending_row_settles() {
        assert!(holds(Some((2, "pending".into())), 2));
        assert!(
            !holds(Some((3, "pending".into())), 2),
            "claimed again since"
        );
        assert!(!holds(Some((2, "sent".into())), 2), "settled already");
        assert!(!holds(None, 2));
    }
}
