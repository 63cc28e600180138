//! WorkOS's event log, joined with the stream's webhooks by event id.
//!
//! Shapes, from WorkOS's API reference (workos.com/docs/reference/events,
//! "List events"), and its data-syncing guide
//! (workos.com/docs/events/data-syncing):
//! - `GET /events`, `Authorization: Bearer sk_…`; parameters `events[]`
//!   (the types), `order` (`asc`: oldest first), `limit` 1–100, `after`
//!   (an event id: the cursor kept in the store), `range_start` (ISO 8601;
//!   the first poll only: it cannot be combined with `after`).
//! - The answer: `{"object": "list", "data": [event], "list_metadata":
//!   {"before", "after"}}`; an event is `{"object": "event", "id",
//!   "event", "data", "created_at"}` (all required). Events are kept 30
//!   days. "The Event IDs passed in webhook bodies are the same as those
//!   returned by the Events API" (workos.com/docs/events), so the join is
//!   exact.
//!
//! Each event's subject comes from the webhook parser itself
//! (`ingest::providers::workos::parse` over the event's own JSON), so a
//! finding names the subject exactly as the received webhook would have.

use super::http::ApiClient;
use super::{parse_json, url, EventLog, LogEntry, LogPage, LogPosition, PollError};
use crate::domain::crosscheck::LoggedEvent;
use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde::Deserialize;

/// Events per request: the largest `limit` WorkOS accepts.
pub const PAGE_SIZE: usize = 100;
/// How long WorkOS keeps its event log.
pub const RETENTION: TimeDelta = TimeDelta::days(30);

pub struct Workos {
    client: ApiClient,
    api_url: String,
    types: Vec<String>,
}

impl Workos {
    pub fn new(client: ApiClient, api_url: String, types: Vec<String>) -> Workos {
        Workos {
            client,
            api_url,
            types,
        }
    }
}

#[derive(Debug, Deserialize)]
struct EventList {
    data: Vec<serde_json::Value>,
    list_metadata: ListMetadata,
}

#[derive(Debug, Deserialize)]
struct ListMetadata {
    after: Option<String>,
}

/// The fields of an event the join reads (all required by the reference).
#[derive(Debug, Deserialize)]
struct Event {
    id: String,
    event: String,
    created_at: String,
}

#[async_trait]
impl EventLog for Workos {
    async fn page(&self, from: &LogPosition) -> Result<LogPage, PollError> {
        let mut query: Vec<(&str, String)> =
            self.types.iter().map(|t| ("events[]", t.clone())).collect();
        query.push(("order", "asc".into()));
        query.push(("limit", PAGE_SIZE.to_string()));
        match from {
            LogPosition::After(id) => query.push(("after", id.clone())),
            LogPosition::Since(at) => query.push((
                "range_start",
                at.to_rfc3339_opts(SecondsFormat::Millis, true),
            )),
        }
        let target = url(&self.api_url, "/events", &query)?;
        let body = self.client.get(&target, "GET /events").await?;
        parse_page(&body, from)
    }

    fn retention(&self) -> TimeDelta {
        RETENTION
    }
}

/// Reads and checks one `GET /events` answer.
fn parse_page(body: &[u8], from: &LogPosition) -> Result<LogPage, PollError> {
    const WHAT: &str = "GET /events";
    let list: EventList = parse_json(body, WHAT)?;
    if list.data.len() > PAGE_SIZE {
        return Err(PollError::Failed(format!(
            "{WHAT}: {} events in a page of at most {PAGE_SIZE}",
            list.data.len()
        )));
    }
    let mut events = Vec::with_capacity(list.data.len());
    let mut previous: Option<DateTime<Utc>> = None;
    for value in list.data {
        let event: Event = serde_json::from_value(value.clone()).map_err(|_| {
            PollError::Failed(format!(
                "{WHAT}: an event without a string id, event and created_at"
            ))
        })?;
        let created_at = DateTime::parse_from_rfc3339(&event.created_at)
            .map_err(|_| {
                PollError::Failed(format!(
                    "{WHAT}: event {} has a created_at that is not ISO 8601",
                    event.id
                ))
            })?
            .with_timezone(&Utc);
        // `order=asc`: an answer out of order could move the cursor past
        // events never read.
        if previous.is_some_and(|p| created_at < p) {
            return Err(PollError::Failed(format!(
                "{WHAT}: events out of order (asked for order=asc)"
            )));
        }
        previous = Some(created_at);
        let body = serde_json::to_vec(&value).map_err(|_| {
            PollError::Failed(format!("{WHAT}: event {} cannot be re-encoded", event.id))
        })?;
        if event.id.is_empty() || event.id.len() > 256 {
            return Err(PollError::Failed(format!(
                "{WHAT}: an event id of {} characters",
                event.id.len()
            )));
        }
        events.push(LogEntry {
            event: LoggedEvent {
                subject: subject(&body),
                organization: None,
                id: event.id,
                event_type: event.event,
                created_at,
            },
            body,
        });
    }
    let next = match list.list_metadata.after {
        Some(after) if !events.is_empty() => {
            if matches!(from, LogPosition::After(id) if *id == after) {
                return Err(PollError::Failed(format!(
                    "{WHAT}: the cursor did not move (list_metadata.after is the cursor asked with)"
                )));
            }
            Some(after)
        }
        _ => None,
    };
    Ok(LogPage { events, next })
}

/// The user the event is about (as the webhook parser reads it), else the
/// first subject it names.
fn subject(body: &[u8]) -> Option<String> {
    let delivery = crate::ingest::providers::workos::parse(
        // Listed by WorkOS's Events API over TLS with the stream's API key.
        crate::ingest::verified::Verified::fetched_from_provider_api(body),
    )
    .ok()?;
    let ids = &delivery.events.first()?.subject_ids;
    ids.iter()
        .find(|(kind, _)| kind == "user_id")
        .or_else(|| ids.iter().find(|(kind, _)| kind == "directory_user_id"))
        .or_else(|| ids.first())
        .map(|(_, id)| id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's example answer (workos.com/docs/reference/events,
    /// "List events"), with a `dsync.user.deleted` whose data is a
    /// directory user (workos.com/docs/events, "dsync.user.deleted").
    const PAGE: &str = r#"{
      "object": "list",
      "data": [
        {"object": "event", "id": "event_01H2GNQD5B7G5G4XN5W8Z5MA2B", "event": "dsync.user.deleted",
         "data": {"object": "directory_user", "id": "directory_user_01E1X1B89NH8Z3SDFJR4H7RGX7",
                  "directory_id": "directory_01ECAZ4NV9QMV47GW873HDCX74", "state": "inactive"},
         "created_at": "2023-06-09T18:14:03.000Z"},
        {"object": "event", "id": "event_01H2GNQD5B7G5G4XN5W8Z5MA2C", "event": "organization_membership.deleted",
         "data": {"object": "organization_membership", "id": "om_01E4ZCR3C56J083X43JQXF3JK5",
                  "user_id": "user_01E4ZCR3C5A4QZ2Z2JQXGKZJ9E", "organization_id": "org_01EHZNVPK3SFK441A1RGBFSHRT"},
         "created_at": "2023-06-09T18:15:00.000Z"}
      ],
      "list_metadata": {"before": null, "after": "event_01H2GNQD5B7G5G4XN5W8Z5MA2C"}
    }"#;

    #[test]
    fn the_documented_page_parses_with_subjects_and_the_next_cursor() {
        let page = parse_page(PAGE.as_bytes(), &LogPosition::Since(DateTime::UNIX_EPOCH)).unwrap();
        assert_eq!(page.events.len(), 2);
        let first = &page.events[0].event;
        assert_eq!(first.id, "event_01H2GNQD5B7G5G4XN5W8Z5MA2B");
        assert_eq!(first.event_type, "dsync.user.deleted");
        assert_eq!(
            first.subject.as_deref(),
            Some("directory_user_01E1X1B89NH8Z3SDFJR4H7RGX7")
        );
        assert_eq!(
            page.events[1].event.subject.as_deref(),
            Some("user_01E4ZCR3C5A4QZ2Z2JQXGKZJ9E")
        );
        assert_eq!(
            page.next.as_deref(),
            Some("event_01H2GNQD5B7G5G4XN5W8Z5MA2C")
        );
        // The body kept for a heal is the event itself.
        let body: serde_json::Value = serde_json::from_slice(&page.events[0].body).unwrap();
        assert_eq!(body["id"], "event_01H2GNQD5B7G5G4XN5W8Z5MA2B");
    }

    #[test]
    fn an_empty_page_ends_and_broken_pages_fail() {
        let empty = r#"{"object":"list","data":[],"list_metadata":{"before":null,"after":null}}"#;
        let page = parse_page(empty.as_bytes(), &LogPosition::After("event_1".into())).unwrap();
        assert!(page.events.is_empty() && page.next.is_none());
        let stuck = PAGE.replace(
            r#""after": "event_01H2GNQD5B7G5G4XN5W8Z5MA2C""#,
            r#""after": "event_0""#,
        );
        assert!(parse_page(stuck.as_bytes(), &LogPosition::After("event_0".into())).is_err());
        for broken in [
            r#"{"data":[]}"#.to_owned(),
            r#"[]"#.to_owned(),
            PAGE.replace(
                "\"created_at\": \"2023-06-09T18:14:03.000Z\"",
                "\"created_at\": \"yesterday\"",
            ),
            PAGE.replace("2023-06-09T18:14:03", "2023-06-09T19:14:03"),
            PAGE.replace("\"event\": \"dsync.user.deleted\",", ""),
        ] {
            assert!(
                parse_page(broken.as_bytes(), &LogPosition::After("x".into())).is_err(),
                "{broken}"
            );
        }
    }
}
