//! What every concern of the running sidecar shares: the config in force,
//! the store, the metrics, the clock, the wake-ups between tasks, and
//! whether storage is healthy. Each concern (`App`'s stream cache,
//! `Svix`, `Operator`, `Delivery`, `Watchdog`) and each background task's
//! handle holds an `Arc<Core>`; `service::start` wires them together.

use crate::clock::Clock;
use crate::config::Config;
use crate::http::api::Unavailable;
use crate::metrics::Metrics;
use crate::store::{Store, StoreError, Unreadable};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::Notify;

/// Upper bound on a route's wait for the store; past it the route answers
/// 503 and the sender retries.
pub(super) const STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub struct Core {
    config: RwLock<Arc<Config>>,
    pub(super) store: Store,
    pub(super) metrics: Metrics,
    pub(super) clock: Arc<dyn Clock>,
    /// Wakes the silence timer to re-plan (new event, reload).
    pub(super) replan: Notify,
    /// Wakes the delivery worker (new pages in the outbox).
    pub(super) outbox_wake: Notify,
    /// Wakes the relay forwarder (a delivery to forward was stored, a replay).
    pub(super) forward_wake: Notify,
    /// Wakes the subscription watcher (a delivery changed a provider subscription).
    pub(super) subscriptions_changed: Notify,
    /// Wakes the reconciliation watcher (a report was stored, reload).
    pub(super) reconcile_changed: Notify,
    /// False after a failed write, until a write succeeds again.
    storage_ok: AtomicBool,
    /// The stored pages the outbox worker's last round could not read:
    /// each is held back alone; the watchdog reports and pages them.
    unreadable: Mutex<Vec<Unreadable>>,
}

impl Core {
    pub(super) fn new(config: Config, store: Store, clock: Arc<dyn Clock>) -> Core {
        Core {
            config: RwLock::new(Arc::new(config)),
            store,
            metrics: Metrics::new(),
            clock,
            replan: Notify::new(),
            outbox_wake: Notify::new(),
            forward_wake: Notify::new(),
            subscriptions_changed: Notify::new(),
            reconcile_changed: Notify::new(),
            storage_ok: AtomicBool::new(true),
            unreadable: Mutex::new(Vec::new()),
        }
    }

    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Swaps in a new config; readers keep the one they hold.
    pub(super) fn set_config(&self, config: Config) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
    }

    /// The durable state (tests and the service's own tasks read it).
    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn storage_ok(&self) -> bool {
        self.storage_ok.load(Ordering::Relaxed)
    }

    /// The stored pages the last outbox round could not read (empty: none).
    pub fn unreadable(&self) -> Vec<Unreadable> {
        self.unreadable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Publishes what an outbox round could not read (`hushwatch_outbox_unreadable`
    /// and the watchdog's reason), logging only rows newly met.
    pub(super) fn set_unreadable(&self, rows: Vec<Unreadable>) {
        let mut held = self.unreadable.lock().unwrap_or_else(|p| p.into_inner());
        for row in rows.iter().filter(|r| !held.contains(r)) {
            tracing::error!(row = %row.what, why = %row.why, "a stored page cannot be read by this binary; it is held back alone and every other page goes out");
        }
        self.metrics
            .outbox_unreadable
            .set(i64::try_from(rows.len()).unwrap_or(i64::MAX));
        *held = rows;
    }

    /// The watchdog's own storage check (it writes nothing the caller
    /// waits for, so it sets the flag without logging each failed tick).
    pub(super) fn set_storage_ok(&self, ok: bool) {
        self.storage_ok.store(ok, Ordering::Relaxed);
    }

    pub(super) fn note_storage(&self, result: &Result<impl Sized, StoreError>) {
        match result {
            Ok(_) => self.storage_ok.store(true, Ordering::Relaxed),
            // The store answered; it refused this one write by design.
            Err(e @ StoreError::Gone(_)) => {
                tracing::warn!(error = %e, "write refused; the sender's retry settles it");
            }
            Err(e) => {
                self.storage_ok.store(false, Ordering::Relaxed);
                self.metrics.storage_errors.inc();
                tracing::error!(error = %e, "hushwatch cannot write its state: ingest answers 503 until storage recovers");
            }
        }
    }

    /// A route's wait for an operation that notes its own storage outcome:
    /// bounded by `STORE_TIMEOUT` (a timeout counts as a storage error).
    pub(super) async fn timed<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, Unavailable> {
        match tokio::time::timeout(STORE_TIMEOUT, call).await {
            Ok(result) => result.map_err(Unavailable::Store),
            Err(_) => {
                self.metrics.storage_errors.inc();
                Err(Unavailable::Slow)
            }
        }
    }

    /// A route's store call: `timed`, and its result marks storage healthy
    /// or not (`note_storage`).
    pub(super) async fn guarded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, Unavailable> {
        self.timed(async {
            let result = call.await;
            self.note_storage(&result);
            result
        })
        .await
    }
}
