//! Coordination between replicas sharing one database: who is alive
//! (heartbeat rows) and who does housekeeping (a leader lease with terms).
//!
//! Every instant here is the database's (`clock_timestamp()` on
//! PostgreSQL), never a replica's own, so clock skew between replicas
//! cannot make two of them believe they hold the lease. The lease is a row,
//! not a session advisory lock: a session lock survives a SIGSTOPped
//! holder (its connection stays open) and breaks behind transaction
//! poolers, while a row lease simply runs out.
//!
//! SQLite allows one process per file, so there `Solo` answers: the one
//! process is the only replica and always the leader, in term 1.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::backend::StoreResult;
use super::{Attempt, Store};

/// A replica seen alive: its last heartbeat is within the window asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRow {
    pub id: String,
    pub started_at: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
}

/// The current (or last) holder of the leader lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderRow {
    pub holder: String,
    pub term: i64,
    pub elected_at: DateTime<Utc>,
    pub lease_until: DateTime<Utc>,
}

/// A lease just granted or renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Increases each time the lease changes hands or lapses, so work
    /// stamped with an old term is recognisably stale.
    pub term: i64,
    /// What remained of the lease, on the database clock, when the grant
    /// committed.
    pub remaining: Duration,
}

/// What one heartbeat learns.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// Replicas whose heartbeat is within the window, oldest first.
    pub replicas: Vec<ReplicaRow>,
    pub leader: Option<LeaderRow>,
    /// The database's time when it answered.
    pub now: Option<DateTime<Utc>>,
}

#[async_trait]
pub trait Coordination: Send + Sync + 'static {
    /// Records that `me` is alive and returns every replica seen within
    /// `alive_within`, and the leader row.
    async fn heartbeat(&self, me: &str, alive_within: Duration) -> StoreResult<Cluster>;

    /// Takes the lease when it is free or lapsed, or renews it when `me`
    /// holds it and it has not lapsed; `None` when another replica holds
    /// a live lease. A lapsed lease always starts a new term, even for its
    /// last holder: nobody may act on a term that ran out.
    async fn acquire_or_renew(&self, me: &str, lease: Duration) -> StoreResult<Option<Lease>>;

    /// Whether `me` still holds a live lease in `term` (the fencing check
    /// right before a housekeeping action).
    async fn holds(&self, me: &str, term: i64) -> StoreResult<bool>;

    /// Gives the lease up (at shutdown), so another replica need not wait
    /// for it to lapse.
    async fn resign(&self, me: &str, term: i64) -> StoreResult<()>;

    /// Claims pending outbox row `id` for one attempt: `Some(token)` when
    /// it is pending and nobody holds a live claim; the claim lapses after
    /// `lease` (a holder killed mid-send leaves the row to another replica,
    /// which sends it under the same page key). The token grows with every
    /// claim of the row and fences `settle_outbox`.
    async fn claim_outbox(&self, me: &str, id: i64, lease: Duration) -> StoreResult<Option<i64>>;

    /// Records the attempt's result and releases the claim, in one
    /// transaction, only if `me` still holds the claim with `token`.
    async fn settle_outbox(
        &self,
        me: &str,
        id: i64,
        token: i64,
        attempt: Attempt,
    ) -> StoreResult<Settled>;
}

/// What `settle_outbox` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Recorded,
    /// The claim had lapsed and another replica took the row over: the
    /// result is not recorded (that replica's attempt decides).
    Fenced,
}

/// The single-process answer (SQLite).
pub struct Solo {
    /// Attempts are recorded through the ordinary store call.
    pub store: Store,
}

#[async_trait]
impl Coordination for Solo {
    async fn heartbeat(&self, me: &str, _alive_within: Duration) -> StoreResult<Cluster> {
        let _ = me;
        Ok(Cluster::default())
    }

    async fn acquire_or_renew(&self, _me: &str, lease: Duration) -> StoreResult<Option<Lease>> {
        Ok(Some(Lease {
            term: 1,
            remaining: lease,
        }))
    }

    async fn holds(&self, _me: &str, _term: i64) -> StoreResult<bool> {
        Ok(true)
    }

    async fn resign(&self, _me: &str, _term: i64) -> StoreResult<()> {
        Ok(())
    }

    /// One process: the delivery worker's own in-flight set is the claim.
    async fn claim_outbox(
        &self,
        _me: &str,
        _id: i64,
        _lease: Duration,
    ) -> StoreResult<Option<i64>> {
        Ok(Some(1))
    }

    async fn settle_outbox(
        &self,
        _me: &str,
        id: i64,
        _token: i64,
        attempt: Attempt,
    ) -> StoreResult<Settled> {
        self.store.record_attempt(id, attempt).await?;
        Ok(Settled::Recorded)
    }
}
