//! One clock for every replica: the local wall clock corrected by its
//! offset to the database server's `clock_timestamp()`, measured at connect
//! and refreshed every `REFRESH`. Instants stamped by any replica (arrivals,
//! transitions) then come from one timeline, so replica clock skew cannot
//! reorder arrivals. Tests keep using `ManualClock` through the same trait.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use deadpool_postgres::Pool;

use super::pool_err;
use crate::clock::{Clock, SystemClock, WaitFuture};
use crate::StoreError;

/// How often the offset is measured again.
pub const REFRESH: Duration = Duration::from_secs(60);

/// `SystemClock` plus the database's offset (milliseconds).
pub struct DbClock {
    offset_ms: AtomicI64,
}

impl DbClock {
    /// Measures the offset once and keeps refreshing it on a task until
    /// the pool is closed. A failed refresh keeps the last offset.
    pub async fn start(pool: Pool) -> Result<Arc<DbClock>, StoreError> {
        let clock = Arc::new(DbClock {
            offset_ms: AtomicI64::new(measure(&pool).await?),
        });
        let weak = Arc::downgrade(&clock);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REFRESH).await;
                let Some(clock) = weak.upgrade() else { return };
                if pool.is_closed() {
                    return;
                }
                if let Ok(offset) = measure(&pool).await {
                    clock.offset_ms.store(offset, Ordering::Relaxed);
                }
            }
        });
        Ok(clock)
    }

    pub fn offset(&self) -> TimeDelta {
        TimeDelta::milliseconds(self.offset_ms.load(Ordering::Relaxed))
    }
}

/// Server time minus the midpoint of the local times around the query.
async fn measure(pool: &Pool) -> Result<i64, StoreError> {
    let client = pool.get().await.map_err(pool_err)?;
    let before = SystemClock.now();
    let row = client
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT",
            &[],
        )
        .await
        .map_err(super::pg_err)?;
    let after = SystemClock.now();
    let server: i64 = row.try_get(0).map_err(super::pg_err)?;
    let mid = before + (after - before) / 2;
    Ok(server - mid.timestamp_millis())
}

impl Clock for DbClock {
    fn now(&self) -> DateTime<Utc> {
        SystemClock.now() + self.offset()
    }

    fn sleep_until(&self, deadline: DateTime<Utc>) -> WaitFuture<'_> {
        Box::pin(async move {
            // The offset may change while waiting; re-check after each wait.
            while self.now() < deadline {
                SystemClock.sleep_until(deadline - self.offset()).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdb::PgTestDb;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_database_clock_follows_the_server_and_sleeps_on_it() {
        let Some(db) = PgTestDb::create().await else {
            return;
        };
        let pool = crate::pg::pool(&db.settings(), 1).unwrap();
        let clock = DbClock::start(pool.clone()).await.unwrap();
        // Same host: the server's clock is the local one, up to the
        // measurement's half round trip.
        assert!(
            clock.offset().num_milliseconds().abs() < 1_000,
            "{:?}",
            clock.offset()
        );
        let server: i64 = pool
            .get()
            .await
            .unwrap()
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        let ours = clock.now().timestamp_millis();
        assert!(
            (ours - server).abs() < 1_000,
            "ours {ours}, server {server}"
        );
        let deadline = clock.now() + TimeDelta::milliseconds(50);
        clock.sleep_until(deadline).await;
        assert!(clock.now() >= deadline);
        pool.close();
    }
}
