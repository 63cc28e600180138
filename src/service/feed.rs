//! How this replica learns what other replicas changed. While the store is
//! shared (PostgreSQL), the stream rows are read again whenever the
//! store's change feed reports an arrival committed anywhere
//! (`Store::changes`: LISTEN/NOTIFY), and at least every `EVERY` (the feed
//! does not carry transitions, and may miss notifications across a
//! reconnect). The mirror follows the rows (`App::absorb_stored`), so the
//! timer evaluates a stream that heard an event through another replica (a
//! resolve is recorded within about a second of the arrival, wherever it
//! landed) and never fires from an arrival it has not seen. The store's
//! compare-and-set stays the guard; this keeps each replica's view fresh.
//!
//! Each re-read asks only for the rows changed since the previous one
//! (`Store::streams_changed`: a cursor over the transaction that last
//! wrote each row), so at 10,000 streams a quiet round reads nothing
//! instead of every row. After a failed read, or when the change feed
//! closed, the next round reads every row again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use crate::store::{Store, StreamRow};

/// Who keeps the stream rows this replica evaluates from (`App`'s read
/// cache): the feed hands it every row it re-read.
pub trait Mirror: Send + Sync {
    fn absorb_stored(&self, rows: Vec<StreamRow>);
    /// The rows as the mirror holds them now.
    fn stream_rows(&self) -> Vec<StreamRow>;
}

/// The feed task's handle: the store it re-reads and the mirror it feeds.
pub struct Feed {
    pub store: Store,
    pub mirror: Arc<dyn Mirror>,
}

/// Longest time between two re-reads.
pub const EVERY: Duration = Duration::from_millis(500);

/// Shortest time between two re-reads: under an ingest burst every commit
/// notifies, and one read per notification would compete with ingest for
/// the database.
const MIN_GAP: Duration = Duration::from_millis(100);

pub async fn run(feed: Feed, mut shutdown: watch::Receiver<bool>) {
    let Feed { store, mirror } = feed;
    let mut changes = store.changes();
    let mut cursor = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            got = changes.recv() => {
                if matches!(got, Err(RecvError::Closed)) {
                    // The store closed: only the periodic re-read is left.
                    changes = store.changes();
                    cursor = None;
                    tokio::time::sleep(EVERY).await;
                }
                // One re-read covers every change queued meanwhile.
                while changes.try_recv().is_ok() {}
            }
            _ = shutdown.changed() => return,
        }
        match store.streams_changed(cursor).await {
            Ok((rows, next)) => {
                cursor = next;
                mirror.absorb_stored(rows);
            }
            // The outage shows in /readyz and on ingest; the next round
            // retries, reading every row, so it catches up after the outage.
            Err(e) => {
                cursor = None;
                tracing::debug!(error = %e, "re-reading stream rows failed");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(MIN_GAP) => {}
            _ = shutdown.changed() => return,
        }
    }
}
