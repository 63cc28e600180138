//! Okta's System Log, joined with the stream's Event Hooks by `uuid`.
//!
//! Shapes, from Okta's System Log API reference
//! (developer.okta.com/docs/reference/api/system-log/, "List events",
//! "Polling requests", "LogEvent object"):
//! - `GET {api_url}/api/v1/logs`, `Authorization: SSWS <token>` (an API
//!   token of an admin allowed to read the log; with OAuth the scope is
//!   `okta.logs.read`).
//! - **Polling mode**: the first request gives `since` (the watch start,
//!   at most [`RETENTION`] back), `sortOrder=ASCENDING`, `limit` and a
//!   `filter` on the checked types (`eventType eq "…" or …`, a SCIM filter
//!   expression as the reference's "Filtering" describes), and no `until`; every later request is exactly the URL of the previous
//!   answer's `Link: <…>; rel="next"`, which Okta always sends, even on an
//!   empty page. hushwatch never builds `after` itself: the cursor it keeps
//!   is that link (see [`Okta::cursor_after`]).
//! - The answer: a JSON array of `LogEvent`s, oldest first; each has
//!   `uuid`, `published` (ISO 8601), `eventType` and `target[]` (`id`,
//!   `type`: `User`, `UserGroup`, `AppInstance`, …, `displayName`). Okta
//!   returns no data older than 90 days.
//! - An Event Hook's `data.events[]` are the same `LogEvent` objects, and
//!   `ingest::providers::okta` records each under its `uuid`, so the join
//!   is exact.
//!
//! A next link must stay on the configured origin and path: a hostile or
//! broken API must not steer the key to another host.

use super::http::ApiClient;
use super::{parse_json, url, EventLog, LogEntry, LogPage, LogPosition, PollError};
use crate::domain::crosscheck::LoggedEvent;
use async_trait::async_trait;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde::Deserialize;

/// Events per request: the largest `limit` the System Log API accepts.
pub const PAGE_SIZE: usize = 1_000;
/// Largest answer read: a page of [`PAGE_SIZE`] `LogEvent`s with their
/// request, security and debug contexts runs to a few KiB each, so 4 MiB
/// (the other providers' cap) could refuse a real page and stall the poll
/// at it; one page is held at a time.
pub const MAX_RESPONSE: usize = 16 * 1024 * 1024;
/// How long Okta returns log events.
pub const RETENTION: TimeDelta = TimeDelta::days(90);
/// Requests one poll makes at most (see the constant's comment).
pub const MAX_REQUESTS_PER_POLL: usize = crate::domain::crosscheck::OKTA_MAX_REQUESTS_PER_POLL;
/// The path every request of a poll goes to.
pub const LOGS_PATH: &str = "/api/v1/logs";
const WHAT: &str = "GET /api/v1/logs";

/// Most checked types put in the `filter` (each adds ~40 characters to
/// the URL); with more, every event is read and the join skips the rest.
const MAX_FILTERED_TYPES: usize = 32;

pub struct Okta {
    client: ApiClient,
    api_url: String,
    /// `eventType eq "…" or …` over the checked types, so a poll reads the
    /// events it checks and not every sign-in of the org.
    filter: Option<String>,
}

impl Okta {
    /// `client` sends `SSWS <api_key>` ([`ApiClient::with_scheme`]).
    pub fn new(client: ApiClient, api_url: String, types: &[String]) -> Okta {
        Okta {
            client,
            api_url,
            filter: filter(types),
        }
    }

    /// The first request of polling mode.
    fn since_url(&self, since: DateTime<Utc>) -> Result<String, PollError> {
        let mut query = vec![
            ("since", since.to_rfc3339_opts(SecondsFormat::Millis, true)),
            ("sortOrder", "ASCENDING".into()),
            ("limit", PAGE_SIZE.to_string()),
        ];
        if let Some(f) = &self.filter {
            query.push(("filter", f.clone()));
        }
        url(&self.api_url, LOGS_PATH, &query)
    }

    /// The URL a position asks, and the uuid whose events up to and
    /// including it were decided already (a cursor kept inside a page).
    fn request(&self, from: &LogPosition) -> Result<(String, Option<String>), PollError> {
        match from {
            LogPosition::Since(at) => Ok((self.since_url(*at)?, None)),
            LogPosition::After(cursor) => {
                let (link, through) = match cursor.split_once(' ') {
                    Some((link, uuid)) => (link, Some(uuid.to_owned())),
                    None => (cursor.as_str(), None),
                };
                // Every link is checked before it is stored, so one that
                // fails here was stored under another api_url.
                same_origin(&self.api_url, link).map_err(|_| {
                    PollError::Failed(format!(
                        "{WHAT}: the position kept from earlier polls is not on api_url (was api_url changed?); it is not followed"
                    ))
                })?;
                Ok((link.to_owned(), through))
            }
        }
    }
}

/// The fields of a `LogEvent` the join reads (all present on every event
/// the reference shows); the rest are kept byte for byte in the body.
#[derive(Debug, Deserialize)]
struct Event {
    uuid: String,
    published: String,
    #[serde(rename = "eventType")]
    event_type: String,
    #[serde(default)]
    target: Option<Vec<Target>>,
}

#[derive(Debug, Deserialize)]
struct Target {
    id: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(rename = "displayName")]
    display_name: Option<String>,
}

#[async_trait]
impl EventLog for Okta {
    async fn page(&self, from: &LogPosition) -> Result<LogPage, PollError> {
        let (target, through) = self.request(from)?;
        let (headers, body) = self.client.get_with_headers(&target, WHAT).await?;
        let next = next_link(&headers)?;
        same_origin(&self.api_url, &next)?;
        let mut page = parse_page(&body)?;
        if let Some(uuid) = through {
            // Okta's log does not change behind a link: the page read
            // again starts with the events already decided.
            let Some(at) = page.iter().position(|e| e.event.id == uuid) else {
                return Err(PollError::Failed(format!(
                    "{WHAT}: the kept position (event {uuid}) is no longer on the page it was read from"
                )));
            };
            page.drain(..=at);
        }
        if !page.is_empty() && next == target {
            return Err(PollError::Failed(format!(
                "{WHAT}: the next link is the link asked (the cursor did not move)"
            )));
        }
        Ok(LogPage {
            events: page,
            next: Some(next),
        })
    }

    fn retention(&self) -> TimeDelta {
        RETENTION
    }

    /// The next link once the whole page is decided (an empty page too:
    /// polling mode's "caught up"); inside a page, the link that page was
    /// read from and the last decided uuid, so the next poll reads the
    /// page again from there and nothing undecided is skipped.
    fn cursor_after(
        &self,
        asked: &LogPosition,
        next: Option<&str>,
        decided: Option<&str>,
        whole_page: bool,
    ) -> Option<String> {
        if whole_page {
            if let Some(next) = next {
                return Some(next.to_owned());
            }
        }
        let decided = decided?;
        let (link, _) = self.request(asked).ok()?;
        Some(format!("{link} {decided}"))
    }

    fn max_requests(&self) -> usize {
        MAX_REQUESTS_PER_POLL
    }
}

/// The SCIM filter over the checked types, or `None` (read every event)
/// when there are none, too many, or one a filter string could not quote.
fn filter(types: &[String]) -> Option<String> {
    if types.is_empty()
        || types.len() > MAX_FILTERED_TYPES
        || types
            .iter()
            .any(|t| t.is_empty() || t.contains(['"', '\\']) || t.chars().any(char::is_control))
    {
        return None;
    }
    Some(
        types
            .iter()
            .map(|t| format!("eventType eq \"{t}\""))
            .collect::<Vec<_>>()
            .join(" or "),
    )
}

/// The `rel="next"` target among the answer's `Link` headers (one header
/// per link, or several comma-separated in one), which polling mode says
/// is always there.
fn next_link(headers: &hyper::HeaderMap) -> Result<String, PollError> {
    for value in headers.get_all(hyper::header::LINK) {
        let Ok(text) = value.to_str() else { continue };
        for link in text.split(',') {
            let mut parts = link.split(';').map(str::trim);
            let Some(target) = parts
                .next()
                .and_then(|t| t.strip_prefix('<'))
                .and_then(|t| t.strip_suffix('>'))
            else {
                continue;
            };
            if parts.any(|p| {
                p.split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("rel") && v.trim().trim_matches('"') == "next"
                })
            }) {
                return Ok(target.to_owned());
            }
        }
    }
    Err(PollError::Failed(format!(
        "{WHAT}: the answer has no Link rel=\"next\" (polling mode always sends one)"
    )))
}

/// A link must go to the configured scheme, host and port and to the logs
/// path, so a hostile API cannot send the key anywhere else.
fn same_origin(api_url: &str, link: &str) -> Result<(), PollError> {
    let refuse = || {
        PollError::Failed(format!(
            "{WHAT}: a next link that leaves api_url's origin or {LOGS_PATH}; not followed"
        ))
    };
    let base = url::Url::parse(api_url).map_err(|_| refuse())?;
    let link = url::Url::parse(link).map_err(|_| refuse())?;
    let path = format!("{}{LOGS_PATH}", base.path().trim_end_matches('/'));
    if link.origin() != base.origin()
        || link.path() != path
        || !link.username().is_empty()
        || link.password().is_some()
        || link.fragment().is_some()
    {
        return Err(refuse());
    }
    Ok(())
}

/// Reads and checks one answer: at most [`PAGE_SIZE`] events, each with
/// its `uuid`, `published` and `eventType`, in ascending order.
fn parse_page(body: &[u8]) -> Result<Vec<LogEntry>, PollError> {
    let raw: Vec<Box<serde_json::value::RawValue>> = parse_json(body, WHAT)?;
    if raw.len() > PAGE_SIZE {
        return Err(PollError::Failed(format!(
            "{WHAT}: {} events in a page of at most {PAGE_SIZE}",
            raw.len()
        )));
    }
    let mut events = Vec::with_capacity(raw.len());
    let mut previous: Option<DateTime<Utc>> = None;
    for value in raw {
        let event: Event = serde_json::from_str(value.get()).map_err(|_| {
            PollError::Failed(format!(
                "{WHAT}: an event without a string uuid, published and eventType"
            ))
        })?;
        if event.uuid.is_empty() || event.uuid.len() > 256 || event.uuid.contains(' ') {
            return Err(PollError::Failed(format!(
                "{WHAT}: an event uuid of {} characters",
                event.uuid.len()
            )));
        }
        let published = DateTime::parse_from_rfc3339(&event.published)
            .map_err(|_| {
                PollError::Failed(format!(
                    "{WHAT}: event {} has a published that is not ISO 8601",
                    event.uuid
                ))
            })?
            .with_timezone(&Utc);
        // ASCENDING: an answer out of order could move the cursor past
        // events never read.
        if previous.is_some_and(|p| published < p) {
            return Err(PollError::Failed(format!(
                "{WHAT}: events out of order (asked for sortOrder=ASCENDING)"
            )));
        }
        previous = Some(published);
        let (subject, organization) = subject(event.target.as_deref().unwrap_or_default());
        events.push(LogEntry {
            event: LoggedEvent {
                id: event.uuid,
                event_type: event.event_type,
                created_at: published,
                subject,
                organization,
            },
            body: value.get().as_bytes().to_vec(),
        });
    }
    Ok(events)
}

/// The user the event is about (its `User` target), and the group or app
/// of a membership event (`group Engineering (00g…)`); without a user, the
/// group or app itself is the subject.
fn subject(targets: &[Target]) -> (Option<String>, Option<String>) {
    let of = |kind: &str| {
        targets.iter().find(|t| {
            t.kind.as_deref() == Some(kind) && t.id.as_deref().is_some_and(|i| !i.is_empty())
        })
    };
    let user = of("User").and_then(|t| t.id.clone());
    let container = of("UserGroup")
        .map(|t| ("group", t))
        .or_else(|| of("AppInstance").map(|t| ("app", t)))
        .map(|(word, t)| {
            let id = t.id.as_deref().unwrap_or_default();
            match t.display_name.as_deref().filter(|n| !n.is_empty()) {
                Some(name) => format!("{word} {name} ({id})"),
                None => format!("{word} {id}"),
            }
        });
    match user {
        Some(user) => (Some(user), container),
        None => (container, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crosscheck::fake::{query, FakeApi};
    use std::sync::Arc;

    /// A page as the System Log reference shows a LogEvent
    /// (developer.okta.com/docs/reference/api/system-log/, "LogEvent
    /// object" example; ids invented): a user deactivated, then removed
    /// from a group.
    const PAGE: &str = r#"[
      {"uuid": "dc9fd3c0-598c-11ef-8478-2b7584bf8d5a", "published": "2026-12-01T10:00:00.000Z",
       "eventType": "user.lifecycle.deactivate", "version": "0", "severity": "INFO",
       "displayMessage": "Deactivate Okta user", "legacyEventType": "core.user.config.user_deactivated",
       "actor": {"id": "00uadmin", "type": "User", "alternateId": "admin@example.com", "displayName": "Admin"},
       "outcome": {"result": "SUCCESS"},
       "target": [{"id": "00u1abcd", "type": "User", "alternateId": "someone@example.com", "displayName": "Some One"}]},
      {"uuid": "dc9fd3c0-598c-11ef-8478-2b7584bf8d5b", "published": "2026-12-01T10:00:01.000Z",
       "eventType": "group.user_membership.remove", "version": "0", "severity": "INFO",
       "target": [{"id": "00u2efgh", "type": "User", "alternateId": "other@example.com"},
                  {"id": "00g1grp", "type": "UserGroup", "displayName": "Engineering"}]}
    ]"#;

    #[test]
    fn the_documented_page_parses_with_subjects_and_keeps_each_event_as_logged() {
        let events = parse_page(PAGE.as_bytes()).unwrap();
        assert_eq!(events.len(), 2);
        let first = &events[0].event;
        assert_eq!(first.id, "dc9fd3c0-598c-11ef-8478-2b7584bf8d5a");
        assert_eq!(first.event_type, "user.lifecycle.deactivate");
        assert_eq!(first.subject.as_deref(), Some("00u1abcd"));
        assert_eq!(first.organization, None);
        let second = &events[1].event;
        assert_eq!(second.subject.as_deref(), Some("00u2efgh"));
        assert_eq!(
            second.organization.as_deref(),
            Some("group Engineering (00g1grp)")
        );
        // The body a heal forwards is the LogEvent byte for byte.
        let body = std::str::from_utf8(&events[0].body).unwrap();
        assert!(body.starts_with(r#"{"uuid": "dc9fd3c0"#), "{body}");
        assert!(body.contains(r#""legacyEventType": "core.user.config.user_deactivated""#));
        assert_eq!(parse_page(b"[]").unwrap().len(), 0);
    }

    #[test]
    fn broken_pages_fail() {
        for broken in [
            r#"{"events": []}"#.to_owned(),
            PAGE.replace(r#""published": "2026-12-01T10:00:00.000Z","#, ""),
            PAGE.replace("2026-12-01T10:00:00.000Z", "yesterday"),
            PAGE.replace("2026-12-01T10:00:00.000Z", "2026-12-01T11:00:00.000Z"),
            PAGE.replace(
                r#""uuid": "dc9fd3c0-598c-11ef-8478-2b7584bf8d5a""#,
                r#""uuid": 7"#,
            ),
            format!(
                "[{}]",
                vec![
                    r#"{"uuid":"u","published":"2026-12-01T10:00:00Z","eventType":"x"}"#;
                    PAGE_SIZE + 1
                ]
                .join(",")
            ),
        ] {
            assert!(parse_page(broken.as_bytes()).is_err(), "{broken}");
        }
    }

    #[test]
    fn next_links_are_read_from_any_link_header_and_must_stay_on_the_origin() {
        let mut h = hyper::HeaderMap::new();
        h.append(
            hyper::header::LINK,
            r#"<https://org.okta.com/api/v1/logs?since=x&sortOrder=ASCENDING>; rel="self""#
                .parse()
                .unwrap(),
        );
        h.append(
            hyper::header::LINK,
            r#"<https://org.okta.com/api/v1/logs?after=1733&sortOrder=ASCENDING>; rel="next""#
                .parse()
                .unwrap(),
        );
        let next = next_link(&h).unwrap();
        assert_eq!(
            next,
            "https://org.okta.com/api/v1/logs?after=1733&sortOrder=ASCENDING"
        );
        let mut joined = hyper::HeaderMap::new();
        joined.insert(
            hyper::header::LINK,
            r#"<https://org.okta.com/api/v1/logs?a=1>; rel="self", <https://org.okta.com/api/v1/logs?a=2>; rel=next"#
                .parse()
                .unwrap(),
        );
        assert_eq!(
            next_link(&joined).unwrap(),
            "https://org.okta.com/api/v1/logs?a=2"
        );
        assert!(next_link(&hyper::HeaderMap::new()).is_err());

        let base = "https://org.okta.com";
        same_origin(base, &next).unwrap();
        for hostile in [
            "https://evil.example/api/v1/logs?after=1",
            "http://org.okta.com/api/v1/logs?after=1",
            "https://org.okta.com:8443/api/v1/logs?after=1",
            "https://org.okta.com/api/v1/users?after=1",
            "https://user:pw@org.okta.com/api/v1/logs?after=1",
            "https://org.okta.com.evil.example/api/v1/logs",
            "/api/v1/logs?after=1",
        ] {
            assert!(same_origin(base, hostile).is_err(), "{hostile}");
        }
    }

    #[tokio::test]
    async fn since_once_then_only_next_links_and_a_kept_position_inside_a_page() {
        let api = FakeApi::start(Arc::new(|_t: &str| (200, String::new()))).await;
        let types = vec![
            "user.lifecycle.deactivate".to_owned(),
            "group.user_membership.remove".to_owned(),
        ];
        let okta = Okta::new(
            ApiClient::with_scheme("SSWS", "k", std::time::Duration::from_secs(2)),
            api.base.clone(),
            &types,
        );
        let since = DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let (first, through) = okta.request(&LogPosition::Since(since)).unwrap();
        assert_eq!(through, None);
        assert!(
            first.starts_with(&format!("{}/api/v1/logs?", api.base)),
            "{first}"
        );
        assert_eq!(query(&first, "since"), ["2026-12-01T00:00:00.000Z"]);
        assert_eq!(query(&first, "sortOrder"), ["ASCENDING"]);
        assert_eq!(query(&first, "limit"), ["1000"]);
        assert!(query(&first, "until").is_empty() && query(&first, "after").is_empty());
        assert_eq!(
            query(&first, "filter"),
            [
                r#"eventType eq "user.lifecycle.deactivate" or eventType eq "group.user_membership.remove""#
            ]
        );
        assert_eq!(filter(&[]), None);
        assert_eq!(filter(&[r#"x" or true or ""#.to_owned()]), None);
        assert_eq!(filter(&vec!["t".to_owned(); MAX_FILTERED_TYPES + 1]), None);
        let next = format!("{}/api/v1/logs?after=abc&limit=1000", api.base);
        let kept = okta.cursor_after(
            &LogPosition::After(next.clone()),
            Some("ignored"),
            Some("uuid-7"),
            false,
        );
        assert_eq!(kept, Some(format!("{next} uuid-7")));
        assert_eq!(
            okta.request(&LogPosition::After(kept.unwrap())).unwrap(),
            (next.clone(), Some("uuid-7".to_owned()))
        );
        // Whole page decided (an empty one too): the next link itself.
        assert_eq!(
            okta.cursor_after(&LogPosition::After(next.clone()), Some("n2"), None, true),
            Some("n2".to_owned())
        );
        // Nothing decided inside the page: keep what was kept.
        assert_eq!(
            okta.cursor_after(&LogPosition::After(next), Some("n2"), None, false),
            None
        );
        // A stored cursor pointing elsewhere is never requested.
        assert!(okta
            .request(&LogPosition::After(
                "https://evil.example/api/v1/logs".into()
            ))
            .is_err());
    }
}
