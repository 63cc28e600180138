//! Recording a delivery and answering with the stream rows it moved, read
//! inside the same transaction: the store alone decides how an arrival moves
//! a stream's clock (`ops::record_event`), and the service's mirror takes
//! the committed rows instead of re-applying that rule itself.

use super::{ops, subscriptions, EventOutcome, NewEvent, Store, StoreError, StreamRow};
use chrono::{DateTime, Utc};

impl Store {
    /// `record_delivery`, plus the committed row of every stream an accepted
    /// clock-feeding event moved (each stream once, in first-event order).
    pub async fn record_delivery_rows(
        &self,
        events: Vec<NewEvent>,
        update: Option<subscriptions::SubscriptionUpdate>,
        now: DateTime<Utc>,
    ) -> Result<(Vec<EventOutcome>, Vec<StreamRow>), StoreError> {
        self.call(move |c| {
            let outcomes = ops::record_events(c, &events)?;
            if let Some(update) = &update {
                subscriptions::record(c, update, now)?;
            }
            let mut moved: Vec<&str> = Vec::new();
            for (event, outcome) in events.iter().zip(&outcomes) {
                let feeds = *outcome == EventOutcome::Accepted && event.feeds_clock;
                if feeds && !moved.contains(&event.stream.as_str()) {
                    moved.push(&event.stream);
                }
            }
            let rows = moved
                .into_iter()
                .map(|name| ops::stream_row(c, name))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((outcomes, rows))
        })
        .await
    }
}
