//! Storing a verified delivery and answering its sender: the templated
//! stream is created on its first verified request, 2xx only once the store
//! committed, 503 otherwise (so the sender retries). Shared by the
//! Standard Webhooks, app-report and provider routes.

use super::api::{Api, Created, Unavailable};
use super::guard::unknown_stream;
use super::reply::{self, Reply};
use crate::config::StreamConfig;
use crate::store::EventOutcome;
use hyper::StatusCode;
use serde_json::json;

/// Event types are labels for people, not payloads.
const MAX_TYPE_LEN: usize = 200;

pub(super) async fn store(
    app: &dyn Api,
    stream: &StreamConfig,
    events: Vec<crate::store::NewEvent>,
) -> Reply {
    store_delivery(app, stream, events, None).await
}

/// `store`, with what the delivery said about the stream's provider subscriptions,
/// committed in the same transaction.
pub(super) async fn store_delivery(
    app: &dyn Api,
    stream: &StreamConfig,
    events: Vec<crate::store::NewEvent>,
    update: Option<crate::store::subscriptions::SubscriptionUpdate>,
) -> Reply {
    if !app.config().streams.contains_key(&stream.name) {
        if let Err(refused) = create_templated(app, &stream.name).await {
            return refused;
        }
    }
    match app.ingest_delivery(events, update).await {
        Ok(outcomes) => {
            let accepted = outcomes
                .iter()
                .filter(|o| **o == EventOutcome::Accepted)
                .count();
            let duplicate = outcomes.len() - accepted;
            for o in &outcomes {
                let label = if *o == EventOutcome::Accepted {
                    "accepted"
                } else {
                    "duplicate"
                };
                app.metrics().count_event(&stream.name, label);
            }
            // A delivery with no events (an Entra lifecycle notice) was still heard.
            let status = if accepted > 0 || outcomes.is_empty() {
                "accepted"
            } else {
                "duplicate"
            };
            reply::json(
                StatusCode::OK,
                &json!({ "status": status, "accepted": accepted, "duplicate": duplicate }),
            )
        }
        Err(Unavailable::Store(e)) => {
            tracing::error!(stream = %stream.name, error = %e, "event not stored; answered 503");
            app.metrics().count_event(&stream.name, "error");
            reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "event could not be stored; retry later",
            )
        }
        Err(Unavailable::Slow) => {
            app.metrics().count_event(&stream.name, "error");
            tracing::error!(stream = %stream.name, "storage did not answer in time; answered 503");
            reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage is slow; retry later",
            )
        }
    }
}

/// Creates a templated stream on its first verified request.
async fn create_templated(app: &dyn Api, name: &str) -> Result<(), Reply> {
    match app.create_stream(name).await {
        Ok(Created::New | Created::Exists) => Ok(()),
        Ok(Created::Full) => {
            tracing::warn!(stream = %name, status = 429, "templated stream refused: max_streams reached");
            Err(reply::error(
                StatusCode::TOO_MANY_REQUESTS,
                "max_streams templated streams exist; delete one or raise [server] max_streams",
            ))
        }
        Ok(Created::NoTemplate) => Err(unknown_stream(name)),
        Err(_) => Err(reply::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "state storage unavailable; retry later",
        )),
    }
}

pub(super) fn clip(mut event_type: String) -> String {
    if event_type.len() > MAX_TYPE_LEN {
        let mut cut = MAX_TYPE_LEN;
        while !event_type.is_char_boundary(cut) {
            cut -= 1;
        }
        event_type.truncate(cut);
    }
    event_type
}
