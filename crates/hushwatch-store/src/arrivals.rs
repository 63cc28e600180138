//! Recording a delivery and answering with the stream rows it moved, read
//! inside the same transaction (`Backend::record_delivery_rows`): the store
//! alone decides how an arrival moves a stream's clock, and the service's
//! cache takes the committed rows instead of re-applying that rule.

use super::{EventOutcome, NewEvent};

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
