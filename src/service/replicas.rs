//! This replica among the others on one database: its identity, its
//! heartbeat, the replicas it sees alive, and the housekeeping leadership
//! (`service::leader`). `/v1/status` shows what the last heartbeat saw.
//!
//! With `[store] url` any number of `serve` processes share one database
//! (on SQLite the process is `solo`: always leader in term 1, no claims, no
//! feed). `join` does one heartbeat and one election before the listener
//! serves. Ingest commits on any replica. Every replica's timer evaluates
//! every stream and the store's compare-and-set
//! (`record_transition_if_silent`) writes a transition once; the mirror
//! follows arrivals committed elsewhere (`service::feed`). Delivery claims
//! due pages with a lease and a fencing token (`Store::claim_outbox`,
//! `settle_counted`), so a killed sender's page is sent by another replica
//! under the same key. Housekeeping (checkpoints, pruning, Svix grouping,
//! reminders, re-posts) runs only under `housekeeping_term`: the leader,
//! after renewing its lease in the same term. Tests: `tests/it/replicas.rs`,
//! `tests/it/watchdog_replicas.rs`.
//!
//! Heartbeats and leases run on real time (tokio's monotonic timer) and on
//! the database's clock, not on the sidecar's `Clock`: they coordinate
//! separate processes, which a test's `ManualClock` in one of them cannot.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use prometheus::IntGauge;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::core::Core;
use super::leader::Leadership;
use crate::metrics::Metrics;
use crate::store::replica::ReplicaRow;
use crate::store::{Store, StoreError};

pub struct Replicas {
    me: String,
    started_at: DateTime<Utc>,
    store: Store,
    /// The clock the store stamps with (the database server's on PostgreSQL).
    clock: Arc<dyn crate::clock::Clock>,
    pub leadership: Arc<Leadership>,
    lease: Duration,
    /// Heartbeat period; a replica is alive while its last heartbeat is
    /// within three periods.
    every: Duration,
    solo: bool,
    seen: Mutex<Vec<ReplicaRow>>,
    gauge: IntGauge,
}

impl Replicas {
    /// `solo`: the store allows one process (SQLite), so this one is the
    /// only replica and always the leader.
    pub fn new(
        store: Store,
        clock: Arc<dyn crate::clock::Clock>,
        lease: Duration,
        solo: bool,
        metrics: &Metrics,
        started_at: DateTime<Utc>,
    ) -> Replicas {
        let me = identity();
        let (leader_gauge, gauge) = metrics.replica_gauges();
        gauge.set(1);
        let leadership = Arc::new(Leadership::new(
            me.clone(),
            store.clone(),
            lease,
            solo,
            leader_gauge,
        ));
        Replicas {
            me,
            started_at,
            store,
            clock,
            leadership,
            lease,
            every: (lease / 3).max(Duration::from_millis(100)),
            solo,
            seen: Mutex::new(Vec::new()),
            gauge,
        }
    }

    pub fn id(&self) -> &str {
        &self.me
    }

    /// True on a shared store (PostgreSQL), where other replicas may run.
    pub fn shared(&self) -> bool {
        !self.solo
    }

    /// How long a delivery claim lasts: the lease, and always longer than
    /// one attempt can take (`attempt_timeout`), so a live sender is never
    /// overtaken by a second one.
    /// This replica's id (claims and heartbeats carry it).
    pub fn me(&self) -> &str {
        &self.me
    }

    pub fn claim_lease(&self, attempt_timeout: Duration) -> Duration {
        self.lease.max(attempt_timeout + Duration::from_secs(2))
    }

    fn alive_within(&self) -> Duration {
        self.every * 3
    }

    /// One heartbeat: record ourselves, learn who else is alive.
    pub async fn beat(&self) {
        if self.solo {
            return;
        }
        let window = chrono::TimeDelta::from_std(self.alive_within()).unwrap_or_default();
        let seen = async {
            self.store.heartbeat(self.me.clone()).await?;
            self.store.replicas(self.store_now() - window).await
        };
        match seen.await {
            Ok(rows) => {
                self.gauge.set(rows.len() as i64);
                *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = rows;
            }
            Err(e) => tracing::warn!(error = %e, "replica heartbeat could not reach the database"),
        }
    }

    /// The store's clock (the database server's on PostgreSQL).
    fn store_now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// The `replicas` section of `/v1/status`.
    pub fn status(&self) -> Value {
        let rfc = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
        if self.solo {
            return json!({
                "self": self.me,
                "shared": false,
                "replicas": [{"id": self.me, "started_at": rfc(self.started_at), "last_seen": null, "leader": true}],
                "leader": {"replica": self.me, "term": 1, "lease_until": null},
                "is_leader": true,
            });
        }
        let now = self.store_now();
        // The lease row says who holds the lease; a lapsed one names nobody.
        let leader = self
            .leadership
            .last_seen()
            .filter(|l| l.holder.is_some() && l.lease_until.is_some_and(|u| u > now));
        let holder = leader.as_ref().and_then(|l| l.holder.clone());
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let replicas: Vec<Value> = seen
            .iter()
            .map(|r| {
                json!({
                    "id": r.id,
                    "started_at": rfc(r.started_at),
                    "last_seen": rfc(r.seen_at),
                    "leader": Some(&r.id) == holder.as_ref(),
                })
            })
            .collect();
        json!({
            "self": self.me,
            "shared": true,
            "replicas": replicas,
            "leader": leader.map(|l| json!({
                "replica": l.holder,
                "term": l.term,
                "lease_until": l.lease_until.map(rfc),
            })),
            "is_leader": self.leadership.term().is_some(),
        })
    }
}

/// Heartbeats until shutdown.
pub async fn run(replicas: Arc<Replicas>, mut shutdown: watch::Receiver<bool>) {
    if replicas.solo {
        return;
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(replicas.every) => {}
            _ = shutdown.changed() => return,
        }
        replicas.beat().await;
    }
}

/// `HOST-PID-RANDOM`: the host (the pod name in Kubernetes) says where it
/// runs, the pid which process, and the random part keeps a restarted
/// process with a reused pid from inheriting the old one's lease.
fn identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "hushwatch".to_owned());
    // RandomState is seeded from the OS per process.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let random = hasher.finish() & 0xff_ffff;
    format!("{host}-{}-{random:06x}", std::process::id())
}

/// What a task needs of the replicas: may it run housekeeping now, and
/// which due pages may it attempt. Cloned into each task that asks; `None`
/// inside is a sidecar of one process built without replicas (an `App` in
/// a unit test), which always may.
#[derive(Clone, Default)]
pub struct Lead(Option<Arc<Replicas>>);

impl Lead {
    pub fn of(replicas: Option<Arc<Replicas>>) -> Lead {
        Lead(replicas)
    }

    /// The term under which this replica may run housekeeping right now,
    /// after the fencing check; `None` on every replica but the leader.
    pub async fn housekeeping_term(&self) -> Option<i64> {
        match &self.0 {
            None => Some(1),
            Some(r) => r.leadership.confirm().await,
        }
    }

    /// This replica's leadership, when it is one of several.
    pub fn leadership(&self) -> Option<&Arc<Leadership>> {
        self.0.as_ref().map(|r| &r.leadership)
    }

    /// Claims the due pages this replica may attempt now (see
    /// `Store::claim_outbox`): page id → fencing token. `None` on a store of
    /// one process (SQLite), where the delivery worker's own in-flight set is
    /// enough and attempts are recorded directly.
    pub(super) async fn claim_due(
        &self,
        store: &Store,
        config: &crate::config::Config,
    ) -> Result<Option<std::collections::BTreeMap<i64, i64>>, StoreError> {
        let Some(replicas) = self.0.as_ref().filter(|r| !r.solo) else {
            return Ok(None);
        };
        let slowest = config
            .notifiers
            .values()
            .filter_map(|n| n.policy.timeout.to_std().ok())
            .max()
            .unwrap_or_default();
        let lease = chrono::TimeDelta::from_std(replicas.claim_lease(slowest)).unwrap_or_default();
        let claims = store
            .claim_outbox(replicas.me.clone(), lease, CLAIM_BATCH)
            .await?;
        Ok(Some(
            claims.into_iter().map(|c| (c.row.id, c.token)).collect(),
        ))
    }
}

/// Makes this process a replica of the store: one heartbeat and one
/// election round before serving, so `/v1/status` and `hushwatch_leader`
/// are right from the first request.
pub(super) async fn join(core: &Core) -> Arc<Replicas> {
    let config = core.config();
    let shared = config.store.postgres.as_ref();
    let lease = shared.map_or(crate::config::store::DEFAULT_LEADER_LEASE, |pg| {
        pg.leader_lease
    });
    let replicas = Arc::new(Replicas::new(
        core.store.clone(),
        Arc::clone(&core.clock),
        lease,
        shared.is_none(),
        &core.metrics,
        core.clock.now(),
    ));
    replicas.beat().await;
    replicas.leadership.campaign().await;
    tracing::info!(replica = %replicas.id(), engine = core.store.engine(), leader = replicas.leadership.term().is_some(), "replica joined");
    replicas
}

/// The heartbeat, election and (on a shared store) change-feed tasks.
pub(super) fn spawn(
    replicas: &Arc<Replicas>,
    feed: super::feed::Feed,
    shutdown: &watch::Receiver<bool>,
) -> Vec<(&'static str, tokio::task::JoinHandle<()>)> {
    if replicas.solo {
        return Vec::new();
    }
    vec![
        (
            "heartbeat",
            tokio::spawn(run(Arc::clone(replicas), shutdown.clone())),
        ),
        (
            "leader",
            tokio::spawn(super::leader::run(
                Arc::clone(&replicas.leadership),
                shutdown.clone(),
            )),
        ),
        (
            "feed",
            tokio::spawn(super::feed::run(feed, shutdown.clone())),
        ),
    ]
}

/// Pages claimed per delivery round at most.
const CLAIM_BATCH: i64 = 64;
