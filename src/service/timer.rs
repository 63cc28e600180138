//! The silence timer: sleeps until the exact instant the next stream would
//! fire (no fixed polling), and re-plans whenever an event arrives or the
//! config is reloaded.
//!
//! Streams are kept ordered by their next `fires_at` in a [`Schedule`], so a
//! wake-up evaluates only the streams that are due or whose clock moved: the
//! cost of one event does not grow with the number of streams. A pass over
//! every stream happens only at start, on reload and after a failed write.
//! No calendar boundary needs a pass: a stream's `fires_at` depends only on
//! its last arrival, its calendar and its policy, which change only by an
//! event (that stream alone) or a reload (every stream).

use super::core::Core;
use crate::store::StoreError;
use chrono::{DateTime, Utc};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Pause after a failed state write before evaluating again.
const STORAGE_RETRY: Duration = Duration::from_secs(1);

/// What the timer asks of the streams it watches (`App`, which keeps their
/// rows and the [`Schedule`]): evaluate the due ones, record what fires
/// or resolves, and say when to look next.
#[async_trait::async_trait]
pub trait Evaluate: Send + Sync {
    async fn evaluate_due(&self) -> Result<Option<DateTime<Utc>>, StoreError>;
}

pub async fn run(core: Arc<Core>, streams: Arc<dyn Evaluate>, shutdown: watch::Receiver<bool>) {
    super::wake::plan(
        &*core.clock,
        &core.replan,
        STORAGE_RETRY,
        "silence evaluation could not record a transition",
        shutdown,
        || streams.evaluate_due(),
    )
    .await;
}

/// Which streams need evaluating, and when.
#[derive(Debug)]
pub struct Schedule {
    /// Quiet streams by the instant they fire; ties broken by name.
    queue: BTreeSet<(DateTime<Utc>, String)>,
    /// Each queued stream's key in `queue`, to move or drop it in O(log n).
    queued_at: HashMap<String, DateTime<Utc>>,
    /// Streams whose clock moved since they were last evaluated.
    moved: HashSet<String>,
    /// Set when every stream must be evaluated (start, reload, failed write).
    full: bool,
    /// The last recorded pass: the clock reading it evaluated at, and the
    /// instant the timer sleeps until after it (None: until an event).
    /// Shown in `/v1/status`, so a reader can tell "nothing fired" from
    /// "the timer has not looked yet".
    pub evaluated: Option<(DateTime<Utc>, Option<DateTime<Utc>>)>,
    /// The clock reading of the last pass that finished, whether it was
    /// recorded or the store refused it. Shown in `/v1/status` beside
    /// `evaluated`: later than it means the last pass could not record,
    /// so during a storage outage a reader can still tell "the timer looked
    /// at T and could not page" from "the timer has not looked yet".
    pub attempted: Option<DateTime<Utc>>,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            queue: BTreeSet::new(),
            queued_at: HashMap::new(),
            moved: HashSet::new(),
            full: true,
            evaluated: None,
            attempted: None,
        }
    }
}

/// What the next evaluation covers.
#[derive(Debug, PartialEq, Eq)]
pub enum Due {
    Every,
    Only(Vec<String>),
}

impl Schedule {
    /// Queues `stream` to be evaluated at `at`, or unqueues it (`None`:
    /// it is firing already, or can never fire).
    pub fn set(&mut self, stream: &str, at: Option<DateTime<Utc>>) {
        if let Some(old) = self.queued_at.remove(stream) {
            self.queue.remove(&(old, stream.to_string()));
        }
        if let Some(at) = at {
            self.queue.insert((at, stream.to_string()));
            self.queued_at.insert(stream.to_string(), at);
        }
    }

    /// An event moved this stream's clock: evaluate it on the next wake-up.
    pub fn mark_moved(&mut self, stream: &str) {
        if !self.moved.contains(stream) {
            self.moved.insert(stream.to_string());
        }
    }

    pub fn request_full(&mut self) {
        self.full = true;
    }

    /// Takes what must be evaluated at `now`: every stream, or the moved
    /// ones plus those due. Due streams stay queued until their evaluation
    /// is recorded ([`Schedule::set`]), so nothing is lost if it fails.
    pub fn take_due(&mut self, now: DateTime<Utc>) -> Due {
        if std::mem::take(&mut self.full) {
            self.moved.clear();
            return Due::Every;
        }
        let mut due: HashSet<String> = self.moved.drain().collect();
        for (at, stream) in &self.queue {
            if *at > now {
                break;
            }
            if !due.contains(stream) {
                due.insert(stream.clone());
            }
        }
        Due::Only(due.into_iter().collect())
    }

    /// Forgets every queued stream (before a full pass re-queues them).
    pub fn clear_queue(&mut self) {
        self.queue.clear();
        self.queued_at.clear();
    }

    /// The earliest instant a queued stream fires.
    pub fn next(&self) -> Option<DateTime<Utc>> {
        self.queue.first().map(|(at, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn only_due_and_moved_streams_are_taken_after_the_first_full_pass() {
        let mut s = Schedule::default();
        assert_eq!(s.take_due(t("2026-12-01T00:00:00Z")), Due::Every);
        s.set("a", Some(t("2026-12-01T01:00:00Z")));
        s.set("b", Some(t("2026-12-01T02:00:00Z")));
        s.set("c", Some(t("2026-12-01T03:00:00Z")));
        assert_eq!(s.next(), Some(t("2026-12-01T01:00:00Z")));
        s.mark_moved("c");
        let Due::Only(mut due) = s.take_due(t("2026-12-01T02:00:00Z")) else {
            panic!("expected a partial pass")
        };
        due.sort();
        assert_eq!(due, ["a", "b", "c"]);
        // Still queued until re-set: a failed record loses nothing.
        assert_eq!(s.next(), Some(t("2026-12-01T01:00:00Z")));
        s.set("a", None);
        s.set("b", Some(t("2026-12-01T05:00:00Z")));
        assert_eq!(s.next(), Some(t("2026-12-01T03:00:00Z")));
        assert_eq!(s.take_due(t("2026-12-01T02:30:00Z")), Due::Only(vec![]));
        s.request_full();
        assert_eq!(s.take_due(t("2026-12-01T02:30:00Z")), Due::Every);
    }
}
