//! This replica among the others on one database: its identity, its
//! heartbeat, the replicas it sees alive, and the housekeeping leadership
//! (`service::leader`). `/v1/status` shows what the last heartbeat saw.
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

use super::leader::Leadership;
use crate::metrics::Metrics;
use crate::store::coordination::{Cluster, Coordination};

/// Lease length unless `[store] leader_lease` says otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

pub struct Replicas {
    me: String,
    started_at: DateTime<Utc>,
    coordination: Arc<dyn Coordination>,
    pub leadership: Arc<Leadership>,
    lease: Duration,
    /// Heartbeat period; a replica is alive while its last heartbeat is
    /// within three periods.
    every: Duration,
    solo: bool,
    seen: Mutex<Cluster>,
    gauge: IntGauge,
}

impl Replicas {
    /// `solo`: the store allows one process (SQLite), so this one is the
    /// only replica and always the leader.
    pub fn new(
        coordination: Arc<dyn Coordination>,
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
            Arc::clone(&coordination),
            lease,
            solo,
            leader_gauge,
        ));
        Replicas {
            me,
            started_at,
            coordination,
            leadership,
            lease,
            every: (lease / 3).max(Duration::from_millis(100)),
            solo,
            seen: Mutex::new(Cluster::default()),
            gauge,
        }
    }

    pub fn id(&self) -> &str {
        &self.me
    }

    /// See `Coordination::claim_outbox`.
    pub async fn claim(
        &self,
        id: i64,
        lease: Duration,
    ) -> Result<Option<i64>, crate::store::StoreError> {
        self.coordination.claim_outbox(&self.me, id, lease).await
    }

    /// See `Coordination::settle_outbox`.
    pub async fn settle(
        &self,
        id: i64,
        token: i64,
        attempt: crate::store::Attempt,
    ) -> Result<crate::store::coordination::Settled, crate::store::StoreError> {
        self.coordination
            .settle_outbox(&self.me, id, token, attempt)
            .await
    }

    /// How long a delivery claim lasts: the lease, and always longer than
    /// one attempt can take (`timeout`), so a live sender is never
    /// overtaken by a second one.
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
        match self
            .coordination
            .heartbeat(&self.me, self.alive_within())
            .await
        {
            Ok(cluster) => {
                self.gauge.set(cluster.replicas.len() as i64);
                *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = cluster;
            }
            Err(e) => tracing::warn!(error = %e, "replica heartbeat could not reach the database"),
        }
    }

    /// The `replicas` section of `/v1/status`.
    pub fn status(&self) -> Value {
        let rfc = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
        let term = self.leadership.term();
        if self.solo {
            return json!({
                "self": self.me,
                "shared": false,
                "replicas": [{"id": self.me, "started_at": rfc(self.started_at), "last_seen": null, "leader": true}],
                "leader": {"replica": self.me, "term": 1, "lease_until": null},
                "is_leader": true,
            });
        }
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        // The leader row says who holds the lease; a lapsed one names nobody.
        let leader = seen
            .leader
            .as_ref()
            .filter(|l| seen.now.is_none_or(|now| l.lease_until > now));
        let holder = leader.map(|l| l.holder.as_str());
        let replicas: Vec<Value> = seen
            .replicas
            .iter()
            .map(|r| {
                json!({
                    "id": r.id,
                    "started_at": rfc(r.started_at),
                    "last_seen": rfc(r.last_seen),
                    "leader": Some(r.id.as_str()) == holder,
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
                "elected_at": rfc(l.elected_at),
                "lease_until": rfc(l.lease_until),
            })),
            "is_leader": term.is_some(),
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

/// The term under which this replica may run housekeeping right now, after
/// the fencing check; `None` on every replica but the leader. An `App`
/// built without replicas (one process) always may.
pub async fn housekeeping_term(app: &super::app::App) -> Option<i64> {
    match app.replicas() {
        None => Some(1),
        Some(r) => r.leadership.confirm().await,
    }
}

/// Makes this process a replica of `app`'s store: one heartbeat and one
/// election round before serving, so `/v1/status` and `hushwatch_leader`
/// are right from the first request.
pub(super) async fn join(app: &Arc<super::app::App>) -> Result<Arc<Replicas>, super::StartError> {
    let (coordination, solo, lease) = coordination_for(app).await?;
    let replicas = Arc::new(Replicas::new(
        coordination,
        lease,
        solo,
        &app.metrics,
        app.clock.now(),
    ));
    replicas.beat().await;
    replicas.leadership.campaign().await;
    tracing::info!(replica = %replicas.id(), engine = app.store.engine(), leader = replicas.leadership.term().is_some(), "replica joined");
    app.set_replicas(Arc::clone(&replicas));
    Ok(replicas)
}

/// The heartbeat, election and (on a shared store) change-feed tasks.
pub(super) fn spawn(
    app: &Arc<super::app::App>,
    replicas: &Arc<Replicas>,
    shutdown: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    if replicas.solo {
        return Vec::new();
    }
    vec![
        tokio::spawn(run(Arc::clone(replicas), shutdown.clone())),
        tokio::spawn(super::leader::run(
            Arc::clone(&replicas.leadership),
            shutdown.clone(),
        )),
        tokio::spawn(super::feed::run(Arc::clone(app), shutdown.clone())),
    ]
}

/// SQLite: one process, `Solo`. PostgreSQL: the shared lease and heartbeat
/// tables, on a small pool of their own.
async fn coordination_for(
    app: &super::app::App,
) -> Result<(Arc<dyn Coordination>, bool, Duration), super::StartError> {
    let config = app.config();
    let lease = config.store.leader_lease;
    match &config.store.postgres {
        None => Ok((
            Arc::new(crate::store::coordination::Solo {
                store: app.store.clone(),
            }),
            true,
            lease,
        )),
        Some(settings) => {
            let pg = crate::store::pg::coordination::PgCoordination::open(settings)
                .await
                .map_err(|e| super::StartError(format!("cannot open the replica tables: {e}")))?;
            Ok((Arc::new(pg), false, lease))
        }
    }
}

/// `serve`'s clock: the wall clock, or on PostgreSQL the wall clock
/// corrected to the database server's (`store::pg::clock::DbClock`), so
/// every replica stamps arrivals on one timeline.
pub(super) async fn clock_for(
    config: &crate::config::Config,
) -> Result<Arc<dyn crate::clock::Clock>, super::StartError> {
    let Some(settings) = &config.store.postgres else {
        return Ok(Arc::new(crate::clock::SystemClock));
    };
    let failed =
        |e: crate::store::StoreError| super::StartError(format!("cannot reach the database: {e}"));
    let pool = crate::store::pg::pool(settings, 1).map_err(failed)?;
    let clock = crate::store::pg::clock::DbClock::start(pool)
        .await
        .map_err(failed)?;
    Ok(clock)
}

/// Claims outbox row `row` for one attempt on `notifier` (see
/// `Coordination::claim_outbox`); `None` while another replica holds it.
pub(super) async fn claim(
    app: &super::app::App,
    row: &crate::store::OutboxRow,
    notifier: &crate::config::NotifierConfig,
) -> Result<Option<i64>, crate::store::StoreError> {
    let Some(replicas) = app.replicas() else {
        return Ok(Some(0));
    };
    let timeout = notifier.policy.timeout.to_std().unwrap_or_default();
    replicas.claim(row.id, replicas.claim_lease(timeout)).await
}

/// Records an attempt under its claim; a fenced result (the claim lapsed
/// and another replica took the page over) is dropped with a warning.
pub(super) async fn settle(
    app: &super::app::App,
    row: &crate::store::OutboxRow,
    token: i64,
    attempt: crate::store::Attempt,
) -> Result<(), crate::store::StoreError> {
    let Some(replicas) = app.replicas() else {
        return app.store.record_attempt(row.id, attempt).await;
    };
    let settled = replicas.settle(row.id, token, attempt).await?;
    if settled == crate::store::coordination::Settled::Fenced {
        tracing::warn!(page = %row.page_key, "delivery claim lapsed before the attempt ended; another replica owns this page now and its attempt is recorded instead");
    }
    Ok(())
}
