//! Recording a delivery and answering with the stream rows it moved, read
//! inside the same transaction (`Backend::record_delivery_rows`): the store
//! alone decides how an arrival moves a stream's clock, and the service's
//! cache takes the committed rows instead of re-applying that rule.

use super::subscriptions::SubscriptionUpdate;
use super::{EventOutcome, NewEvent, Store, StoreError, StreamRow};
use chrono::{DateTime, Utc};

impl Store {
    /// `record_delivery`, plus the committed row of every stream an accepted
    /// clock-feeding event moved (each stream once, in first-event order).
    pub async fn record_delivery_rows(
        &self,
        events: Vec<NewEvent>,
        update: Option<SubscriptionUpdate>,
        now: DateTime<Utc>,
    ) -> Result<(Vec<EventOutcome>, Vec<StreamRow>), StoreError> {
        self.backend.record_delivery_rows(events, update, now).await
    }
}

/// The streams whose clock a delivery moved: those of accepted,
/// clock-feeding events, each once, in first-event order (both backends).
pub(crate) fn moved_streams<'e>(events: &'e [NewEvent], outcomes: &[EventOutcome]) -> Vec<&'e str> {
    let mut moved: Vec<&str> = Vec::new();
    for (event, outcome) in events.iter().zip(outcomes) {
        let feeds = *outcome == EventOutcome::Accepted && event.feeds_clock;
        if feeds && !moved.contains(&event.stream.as_str()) {
            moved.push(&event.stream);
        }
    }
    moved
}
