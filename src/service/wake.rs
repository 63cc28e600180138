//! The one wait both background planners (the silence timer and the subscription watcher)
//! use between passes: until their next instant on the `Clock`, an explicit wake-up, or
//! shutdown.

use crate::clock::Clock;
use chrono::{DateTime, Utc};
use tokio::sync::{watch, Notify};

/// Waits until `next` (forever when `None`) or until `wake` is notified. Returns false
/// when shutdown was signalled instead, so the caller stops.
pub async fn until_next_or_woken(
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
