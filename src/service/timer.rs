//! The silence timer: sleeps until the exact instant the next stream would
//! fire (no fixed polling), and re-plans whenever an event arrives or the
//! config is reloaded.

use super::app::App;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Pause after a failed state write before evaluating again.
const STORAGE_RETRY: Duration = Duration::from_secs(1);

pub async fn run(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let next = match app.evaluate_all().await {
            Ok(next) => next,
            Err(e) => {
                tracing::error!(error = %e, "silence evaluation could not record a transition; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(STORAGE_RETRY) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        let wait = async {
            match next {
                Some(deadline) => app.clock.sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = wait => {}
            _ = app.replan.notified() => {}
            _ = shutdown.changed() => return,
        }
    }
}
