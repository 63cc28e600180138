//! The loop every background planner runs (the silence timer, the subscription watcher and
//! the reconciliation watch): a pass, then a wait until the pass's next instant on the
//! `Clock`, an explicit wake-up, or shutdown.

use crate::clock::Clock;
use crate::store::StoreError;
use chrono::{DateTime, Utc};
use std::future::Future;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// Runs `pass` until shutdown. After a pass, waits until the instant it returned (forever
/// when `None`) or a wake-up; after a failed one, logs `failed` with the error and tries
/// again `retry` later, since a storage outage must not end the planner.
pub async fn plan<F, Fut>(
    clock: &dyn Clock,
    wake: &Notify,
    retry: Duration,
    failed: &str,
    mut shutdown: watch::Receiver<bool>,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<DateTime<Utc>>, StoreError>>,
{
    loop {
        let next = match pass().await {
            Ok(next) => next,
            Err(e) => {
                tracing::error!(error = %e, "{failed}; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(retry) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        if !until_next_or_woken(clock, next, wake, &mut shutdown).await {
            return;
        }
    }
}

/// Waits until `next` (forever when `None`) or until `wake` is notified. Returns false
/// when shutdown was signalled instead, so the caller stops.
async fn until_next_or_woken(
    clock: &dyn Clock,
    next: Option<DateTime<Utc>>,
    wake: &Notify,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let wait = async {
        match next {
            Some(deadline) => clock.sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = wait => true,
        _ = wake.notified() => true,
        _ = shutdown.changed() => false,
    }
}
