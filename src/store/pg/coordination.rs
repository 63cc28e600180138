//! `Coordination` on PostgreSQL: heartbeat rows and the leader lease row,
//! every instant taken from the server's `clock_timestamp()`.
//!
//! It uses a small pool of its own, so a heartbeat or a lease renewal never
//! waits behind an ingest burst that holds every connection of the main
//! pool (a leader starved of connections would lose its lease).
//!
//! The two tables are created here, idempotently, under a transaction-level
//! advisory lock (several replicas start at once). Times are BIGINT epoch
//! milliseconds, as in the rest of the PostgreSQL schema.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;

use super::{ops, pg_err};
use crate::store::backend::StoreResult;
use crate::store::coordination::{Cluster, Coordination, LeaderRow, Lease, ReplicaRow, Settled};
use crate::store::{Attempt, StoreError};

/// Connections for heartbeats, elections and fencing checks.
const POOL_SIZE: usize = 2;

/// Arbitrary constant for the table-creation lock ("hwrepls").
const DDL_LOCK: i64 = 0x0068_7772_6570_6c73;

/// The one lease row's name.
const LEASE: &str = "housekeeping";

/// Heartbeat rows older than this are deleted by the next heartbeat.
const FORGET_AFTER_MS: i64 = 24 * 3600 * 1000;

const DDL: &str = "
    CREATE TABLE IF NOT EXISTS replica_heartbeats (
        id         TEXT PRIMARY KEY,
        started_at BIGINT NOT NULL,
        last_seen  BIGINT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS leader_lease (
        name        TEXT PRIMARY KEY,
        holder      TEXT NOT NULL,
        term        BIGINT NOT NULL,
        elected_at  BIGINT NOT NULL,
        lease_until BIGINT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS outbox_claims (
        outbox_id   BIGINT PRIMARY KEY REFERENCES outbox(id) ON DELETE CASCADE,
        claimed_by  TEXT NOT NULL,
        lease_until BIGINT NOT NULL,
        token       BIGINT NOT NULL
    );";

/// The database's time in epoch milliseconds, as SQL.
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT";

pub struct PgCoordination {
    pool: Pool,
}

fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_err(e),
        other => StoreError::Sql(format!("database unavailable: {other}")),
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn time(ms: i64) -> StoreResult<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StoreError::Sql(format!("stored time {ms} is out of range")))
}

impl PgCoordination {
    /// Builds the pool and creates the tables when missing.
    pub async fn open(settings: &super::Settings) -> StoreResult<PgCoordination> {
        let pool = super::pool(settings, POOL_SIZE)?;
        let mut client = pool
            .get()
            .await
            .map_err(|e| StoreError::Open(pool_err(e).to_string()))?;
        let tx = client.transaction().await.map_err(pg_err)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&DDL_LOCK])
            .await
            .map_err(pg_err)?;
        tx.batch_execute(DDL).await.map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)?;
        drop(client);
        Ok(PgCoordination { pool })
    }

    async fn client(&self) -> StoreResult<deadpool_postgres::Object> {
        self.pool.get().await.map_err(pool_err)
    }
}

#[async_trait]
impl Coordination for PgCoordination {
    async fn heartbeat(&self, me: &str, alive_within: Duration) -> StoreResult<Cluster> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let now: i64 = tx
            .query_one(&format!("SELECT {NOW_MS}"), &[])
            .await
            .map_err(pg_err)?
            .try_get(0)
            .map_err(pg_err)?;
        tx.execute(
            "INSERT INTO replica_heartbeats (id, started_at, last_seen) VALUES ($1, $2, $2)
             ON CONFLICT (id) DO UPDATE SET last_seen = EXCLUDED.last_seen",
            &[&me, &now],
        )
        .await
        .map_err(pg_err)?;
        tx.execute(
            "DELETE FROM replica_heartbeats WHERE last_seen < $1",
            &[&(now - FORGET_AFTER_MS)],
        )
        .await
        .map_err(pg_err)?;
        let alive = tx
            .query(
                "SELECT id, started_at, last_seen FROM replica_heartbeats
                 WHERE last_seen >= $1 ORDER BY started_at, id",
                &[&(now - millis(alive_within))],
            )
            .await
            .map_err(pg_err)?;
        let leader = tx
            .query_opt(
                "SELECT holder, term, elected_at, lease_until FROM leader_lease WHERE name = $1",
                &[&LEASE],
            )
            .await
            .map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)?;
        let mut replicas = Vec::with_capacity(alive.len());
        for row in alive {
            replicas.push(ReplicaRow {
                id: row.try_get(0).map_err(pg_err)?,
                started_at: time(row.try_get(1).map_err(pg_err)?)?,
                last_seen: time(row.try_get(2).map_err(pg_err)?)?,
            });
        }
        let leader = match leader {
            Some(row) => Some(LeaderRow {
                holder: row.try_get(0).map_err(pg_err)?,
                term: row.try_get(1).map_err(pg_err)?,
                elected_at: time(row.try_get(2).map_err(pg_err)?)?,
                lease_until: time(row.try_get(3).map_err(pg_err)?)?,
            }),
            None => None,
        };
        Ok(Cluster {
            replicas,
            leader,
            now: Some(time(now)?),
        })
    }

    async fn acquire_or_renew(&self, me: &str, lease: Duration) -> StoreResult<Option<Lease>> {
        let client = self.client().await?;
        // All SET expressions see the old row, so `term` and `elected_at`
        // compare against the lease as it was. The WHERE lets the update
        // through only for the holder or over a lapsed lease; otherwise no
        // row comes back and the caller is not the leader.
        let sql = format!(
            "INSERT INTO leader_lease AS l (name, holder, term, elected_at, lease_until)
             SELECT $1, $2, 1, n.ms, n.ms + $3 FROM (SELECT {NOW_MS} AS ms) n
             ON CONFLICT (name) DO UPDATE SET
               term = CASE WHEN l.holder = EXCLUDED.holder AND l.lease_until > EXCLUDED.elected_at
                           THEN l.term ELSE l.term + 1 END,
               elected_at = CASE WHEN l.holder = EXCLUDED.holder AND l.lease_until > EXCLUDED.elected_at
                           THEN l.elected_at ELSE EXCLUDED.elected_at END,
               holder = EXCLUDED.holder,
               lease_until = EXCLUDED.lease_until
             WHERE l.holder = EXCLUDED.holder OR l.lease_until <= EXCLUDED.elected_at
             RETURNING term"
        );
        let row = client
            .query_opt(&sql, &[&LEASE, &me, &millis(lease)])
            .await
            .map_err(pg_err)?;
        match row {
            Some(row) => Ok(Some(Lease {
                term: row.try_get(0).map_err(pg_err)?,
                remaining: lease,
            })),
            None => Ok(None),
        }
    }

    async fn holds(&self, me: &str, term: i64) -> StoreResult<bool> {
        let client = self.client().await?;
        let sql = format!(
            "SELECT 1 FROM leader_lease
             WHERE name = $1 AND holder = $2 AND term = $3 AND lease_until > {NOW_MS}"
        );
        let row = client
            .query_opt(&sql, &[&LEASE, &me, &term])
            .await
            .map_err(pg_err)?;
        Ok(row.is_some())
    }

    async fn claim_outbox(&self, me: &str, id: i64, lease: Duration) -> StoreResult<Option<i64>> {
        let client = self.client().await?;
        // The outbox row is locked with SKIP LOCKED: a row another replica
        // is settling right now is simply not claimable this round. Only a
        // pending row can be claimed, so a page delivered elsewhere since
        // the caller's snapshot is never sent again. A live claim of
        // another replica blocks; a lapsed one is taken over with the next
        // token.
        let sql = format!(
            "WITH p AS (SELECT id FROM outbox WHERE id = $1 AND status = 'pending'
                        FOR UPDATE SKIP LOCKED)
             INSERT INTO outbox_claims AS c (outbox_id, claimed_by, lease_until, token)
             SELECT p.id, $2, {NOW_MS} + $3, 1 FROM p
             ON CONFLICT (outbox_id) DO UPDATE SET
               claimed_by = EXCLUDED.claimed_by,
               lease_until = EXCLUDED.lease_until,
               token = c.token + 1
             WHERE c.lease_until <= EXCLUDED.lease_until - $3
             RETURNING token"
        );
        let row = client
            .query_opt(&sql, &[&id, &me, &millis(lease)])
            .await
            .map_err(pg_err)?;
        row.map(|r| r.try_get(0).map_err(pg_err)).transpose()
    }

    async fn settle_outbox(
        &self,
        me: &str,
        id: i64,
        token: i64,
        attempt: Attempt,
    ) -> StoreResult<Settled> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        // Lock order outbox, then claim, as in `claim_outbox`.
        tx.execute("SELECT 1 FROM outbox WHERE id = $1 FOR UPDATE", &[&id])
            .await
            .map_err(pg_err)?;
        let held = tx
            .query_opt(
                "SELECT 1 FROM outbox_claims
                 WHERE outbox_id = $1 AND claimed_by = $2 AND token = $3 FOR UPDATE",
                &[&id, &me, &token],
            )
            .await
            .map_err(pg_err)?;
        if held.is_none() {
            return Ok(Settled::Fenced);
        }
        ops::record_attempt(&tx, id, &attempt).await?;
        tx.execute("DELETE FROM outbox_claims WHERE outbox_id = $1", &[&id])
            .await
            .map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)?;
        Ok(Settled::Recorded)
    }

    async fn resign(&self, me: &str, term: i64) -> StoreResult<()> {
        let client = self.client().await?;
        let sql = format!(
            "UPDATE leader_lease SET lease_until = {NOW_MS}
             WHERE name = $1 AND holder = $2 AND term = $3"
        );
        client
            .execute(&sql, &[&LEASE, &me, &term])
            .await
            .map_err(pg_err)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testdb::PgTestDb;

    async fn two() -> Option<(PgTestDb, PgCoordination, PgCoordination)> {
        let db = PgTestDb::create().await?;
        let a = PgCoordination::open(&db.settings()).await.expect("open a");
        let b = PgCoordination::open(&db.settings()).await.expect("open b");
        Some((db, a, b))
    }

    #[tokio::test]
    async fn one_leader_at_a_time_and_a_lapsed_lease_starts_a_new_term() {
        let Some((_db, a, b)) = two().await else {
            return;
        };
        let long = Duration::from_secs(30);
        let first = a
            .acquire_or_renew("a", long)
            .await
            .unwrap()
            .expect("a leads");
        assert_eq!(b.acquire_or_renew("b", long).await.unwrap(), None);
        let renewed = a.acquire_or_renew("a", long).await.unwrap().expect("renew");
        assert_eq!(renewed.term, first.term, "a renewal keeps the term");
        assert!(a.holds("a", first.term).await.unwrap());
        assert!(!b.holds("b", first.term).await.unwrap());

        // Resigning lapses the lease: b takes over in a later term and a's
        // old term is no longer held, not even by a.
        a.resign("a", first.term).await.unwrap();
        let taken = b
            .acquire_or_renew("b", long)
            .await
            .unwrap()
            .expect("b leads");
        assert!(taken.term > first.term);
        assert!(!a.holds("a", first.term).await.unwrap());
        assert_eq!(a.acquire_or_renew("a", long).await.unwrap(), None);

        // b lapses and takes it again itself: still a new term.
        b.resign("b", taken.term).await.unwrap();
        let again = b.acquire_or_renew("b", long).await.unwrap().expect("again");
        assert!(again.term > taken.term);
    }

    #[tokio::test]
    async fn heartbeats_list_live_replicas_and_the_leader() {
        let Some((_db, a, b)) = two().await else {
            return;
        };
        a.heartbeat("a", Duration::from_secs(10)).await.unwrap();
        let lease = b
            .acquire_or_renew("b", Duration::from_secs(30))
            .await
            .unwrap()
            .expect("b leads");
        let seen = b.heartbeat("b", Duration::from_secs(10)).await.unwrap();
        let ids: Vec<&str> = seen.replicas.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        let leader = seen.leader.expect("leader row");
        assert_eq!((leader.holder.as_str(), leader.term), ("b", lease.term));
        // A zero window sees nobody but replicas whose heartbeat is "now".
        let none = a.heartbeat("a", Duration::ZERO).await.unwrap();
        assert!(none.replicas.iter().all(|r| r.id == "a"));
    }
}
