//! How this replica learns what other replicas changed: while the store is
//! shared (PostgreSQL), every `EVERY` the stream rows are read again and
//! the mirror follows them (`App::absorb_stored`), so the timer evaluates a
//! stream that heard an event through another replica (a resolve is
//! recorded within about `EVERY` of the arrival, wherever it landed) and
//! never fires from an arrival it has not seen. The compare-and-set in the
//! store stays the guard: this only keeps a replica's view fresh.
//!
//! A re-read rather than LISTEN/NOTIFY: it needs no dedicated connection,
//! survives a dropped connection without a resubscribe step, and one read
//! of every stream row every half second is small next to ingest.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::app::App;

/// Re-read period; resolves land within about this much of the arrival.
pub const EVERY: Duration = Duration::from_millis(500);

pub async fn run(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = shutdown.changed() => return,
        }
        match app.store.streams().await {
            Ok(rows) => app.absorb_stored(rows),
            // The outage shows in /readyz and on ingest; the next round
            // retries, and the first one after the outage catches up.
            Err(e) => tracing::debug!(error = %e, "re-reading stream rows failed"),
        }
    }
}
