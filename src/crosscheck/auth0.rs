//! Auth0's tenant logs, joined with the stream's Log Stream records by
//! `log_id` (issue #48).
//!
//! Shapes, from Auth0's "Retrieve Log Events Using the Management API"
//! (auth0.com/docs/deploy-monitor/logs/retrieve-log-events-using-mgmt-api)
//! and the Management API reference for `GET /api/v2/logs`
//! (auth0.com/docs/api/management/v2/logs/get-logs):
//! - **By checkpoint**: `GET /api/v2/logs?from=<log_id>&take=100` returns
//!   up to 100 logs *newer than* `log_id` as a bare JSON array, ordered by
//!   `log_id` ("rather than event generation time, to prevent skipping past
//!   records due to Auth0 system delays"); every other parameter is
//!   ignored. Each answer has a `Link` header whose `rel="next"` URL is the
//!   next request; when there is nothing newer the answer is `[]` and the
//!   `next` URL is the one just asked. An empty page ends the poll.
//! - **The first poll** has no checkpoint. It finds the first log at or
//!   after the watch start by search criteria (`q=date:[<day> TO *]`,
//!   `sort=date:1`, `per_page`, `page`; `date` is searched by day, Auth0's
//!   "Log Search Query Syntax",
//!   auth0.com/docs/deploy-monitor/logs/log-search-query-syntax), then goes
//!   on by checkpoint from it, leaving out that poll's logs dated before
//!   the watch start. A search older than the tenant's retention simply
//!   starts at the oldest log kept.
//! - A log is `{"log_id", "date", "type", "user_id", "user_name",
//!   "description", "details", …}` (the tenant log schemas,
//!   auth0.com/docs/tenant-logs); `log_id`, `date` and `type` are required
//!   here. The same object, as `data` beside its `log_id`, is what a Log
//!   Stream delivers (`ingest::providers::auth0`), so a heal forwards
//!   `{"log_id", "data": {…}}` exactly as the stream would have.
//! - **A checkpoint the retention dropped**: Auth0 keeps logs 1 to 30 days
//!   by plan ("Log Data Retention",
//!   auth0.com/docs/deploy-monitor/logs/log-data-retention) and documents
//!   no answer for a `from` that is no longer kept. So a poll that starts
//!   from a stored checkpoint first asks for that log itself
//!   (`GET /api/v2/logs/{id}`, whose documented 404 is "log not found"):
//!   when it is gone the poll fails with [`retention_lost`], which the
//!   `crosscheck_failing` page carries, instead of reading on from
//!   wherever Auth0 would start.
//! - **429**: Auth0 sends `X-RateLimit-Reset` (Unix seconds) and sometimes
//!   `Retry-After`; `http::ApiClient` waits either out.
//!
//! Credentials: a Management API token (`api_key`), or a Machine-to-
//! Machine application's client credentials exchanged at
//! `POST <api_url>/oauth/token` with `audience = <api_url>/api/v2/`
//! ([`super::oauth`]; "Get Management API Access Tokens for Production",
//! auth0.com/docs/secure/tokens/access-tokens/management-api-access-tokens/get-management-api-access-tokens-for-production).
//! Both need the `read:logs` scope.

use super::http::{checked_bearer, ApiClient, Fetched};
use super::oauth::ClientCredentials;
use super::{parse_json, url, EventLog, LogEntry, LogPage, LogPosition, PollError};
use crate::domain::crosscheck::{auth0_sapi_direction, LoggedEvent, SapiRequest, CHECKPOINT_LOST};
use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use hyper::header::{HeaderValue, LINK};
use serde::Deserialize;
use std::sync::Mutex;

/// Logs per request: the largest `take` Auth0 accepts.
pub const PAGE_SIZE: usize = 100;
/// The longest retention of any Auth0 plan (Enterprise: 30 days); the
/// first poll never reads further back (the engine's own look-back is
/// shorter still).
pub const RETENTION: TimeDelta = TimeDelta::days(30);
/// Search pages the first poll reads at most: Auth0 pages through 1,000
/// search results ("you may paginate only through 1,000 search results").
const SEARCH_PAGES: usize = 10;
/// Longest `log_id` accepted (Auth0's are 56 digits).
const MAX_ID_LEN: usize = 256;
/// A client-credentials token is renewed this long before it expires:
/// Auth0's Management API tokens live 24 hours by default and a poll is
/// a few requests, so a minute covers the poll while asking as rarely as
/// the monthly Machine-to-Machine token quota wants. A token that lapses
/// during long 429 waits anyway is refused with a 401 and asked for again
/// once ([`Auth0::get`]).
pub const RENEW_BEFORE: std::time::Duration = std::time::Duration::from_secs(60);

/// How the requests are authorized.
pub enum Credentials {
    /// `api_key`: a Management API token, sent as Bearer.
    Token(HeaderValue),
    /// `client_id` + `client_secret`.
    Client(ClientCredentials),
}

pub struct Auth0 {
    client: ApiClient,
    api_url: String,
    credentials: Credentials,
    /// The `from` of the next page this adapter handed out in this poll:
    /// a position equal to it continues the poll; any other `After` is a
    /// stored checkpoint, checked to still exist first.
    continuing: Mutex<Option<String>>,
    /// The first poll's start (the watch start): logs dated before it are
    /// left out of that poll's pages.
    not_before: Mutex<Option<DateTime<Utc>>>,
}

impl Auth0 {
    pub fn new(client: ApiClient, api_url: String, credentials: Credentials) -> Auth0 {
        Auth0 {
            client,
            api_url,
            credentials,
            continuing: Mutex::new(None),
            not_before: Mutex::new(None),
        }
    }

    /// The first poll's first page: the first log dated at or after `at`,
    /// found by search. Auth0 searches `date` by day ("Log Search Query
    /// Syntax": `date` is "YYYY-MM-DD"), so this reads that day's logs in
    /// date order, 100 a request, up to the search's 1,000 results, and
    /// returns the first one at or after `at` (joined, and the checkpoint
    /// to go on from). With none yet, nothing; with a day busier than
    /// 1,000 logs before `at`, the poll goes on by checkpoint from the last
    /// one read, leaving out what is dated before `at`.
    async fn first_log_since(&self, at: DateTime<Utc>) -> Result<LogPage, PollError> {
        const WHAT: &str = "GET /api/v2/logs (search)";
        let mut last_read = None;
        for page in 0..SEARCH_PAGES {
            let query = vec![
                ("q", format!("date:[{} TO *]", at.format("%Y-%m-%d"))),
                ("sort", "date:1".into()),
                ("per_page", PAGE_SIZE.to_string()),
                ("page", page.to_string()),
                ("include_totals", "false".into()),
            ];
            let target = url(&self.api_url, "/api/v2/logs", &query)?;
            let answer = self.get(&target, WHAT).await?;
            let logs = parse_logs_by_date(&answer.body, WHAT)?;
            let full = logs.len() == PAGE_SIZE;
            if let Some(first) = logs.iter().find(|e| e.event.created_at >= at) {
                let next = Some(first.event.id.clone());
                return Ok(LogPage {
                    events: vec![first.clone()],
                    next,
                });
            }
            if let Some(last) = logs.last() {
                last_read = Some(last.event.id.clone());
            }
            if !full {
                break;
            }
        }
        Ok(LogPage {
            events: Vec::new(),
            next: last_read,
        })
    }

    /// Builds the credentials from a stream's config: `api_key` when set,
    /// else the client credentials against `<api_url>/oauth/token`.
    pub fn credentials(config: &crate::config::crosscheck::CrosscheckConfig) -> Credentials {
        match (&config.client_id, &config.client_secret) {
            (Some(id), Some(secret)) if config.api_key.expose().is_empty() => {
                Credentials::Client(ClientCredentials::new(
                    format!("{}/oauth/token", config.api_url),
                    id.clone(),
                    secret.clone(),
                    vec![("audience".into(), format!("{}/api/v2/", config.api_url))],
                    RENEW_BEFORE,
                ))
            }
            _ => Credentials::Token(
                checked_bearer(config.api_key.expose())
                    .unwrap_or_else(|| HeaderValue::from_static("")),
            ),
        }
    }

    /// `GET` with the current authorization. A 401 with client credentials
    /// drops the cached token and asks once more with a new one (the
    /// token may have been revoked before it expired).
    async fn get(&self, target: &str, what: &str) -> Result<Fetched, PollError> {
        match &self.credentials {
            Credentials::Token(value) => self.client.get_with(target, what, value).await,
            Credentials::Client(cc) => {
                let value = cc.authorization(&self.client).await?;
                match self.client.get_with(target, what, &value).await {
                    Err(PollError::Refused { status: 401 }) => {
                        cc.forget().await;
                        let value = cc.authorization(&self.client).await?;
                        self.client.get_with(target, what, &value).await
                    }
                    other => other,
                }
            }
        }
    }

    /// Whether log `id` is still kept: `GET /api/v2/logs/{id}`, 404 when
    /// it is not.
    async fn still_kept(&self, id: &str) -> Result<bool, PollError> {
        const WHAT: &str = "GET /api/v2/logs/{id}";
        let path = format!(
            "/api/v2/logs/{}",
            url::form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>()
        );
        let target = url(&self.api_url, &path, &[])?;
        match self.get(&target, WHAT).await {
            Ok(answer) => {
                let log: Log = parse_json(&answer.body, WHAT)?;
                Ok(log.log_id == id)
            }
            Err(PollError::Failed(reason)) if reason.ends_with("answered HTTP 404") => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The reason a poll fails when the checkpoint is gone: what happened and
/// what to do (the `crosscheck_failing` page quotes it).
pub fn retention_lost(checkpoint: &str) -> String {
    format!(
        "{CHECKPOINT_LOST}Auth0 no longer keeps log {checkpoint}, where the last successful poll stopped (GET /api/v2/logs/{{id}} answered 404): the tenant's log retention (1 to 30 days by plan) dropped it, so the logs between it and the oldest one Auth0 still keeps cannot be checked against the Log Stream any more, and hushwatch does not silently go on from later logs"
    )
}

#[async_trait]
impl EventLog for Auth0 {
    async fn page(&self, from: &LogPosition) -> Result<LogPage, PollError> {
        let page = match from {
            LogPosition::Since(at) => {
                if let Ok(mut n) = self.not_before.lock() {
                    *n = Some(*at);
                }
                self.first_log_since(*at).await?
            }
            LogPosition::After(id) => {
                const WHAT: &str = "GET /api/v2/logs";
                let continuing = self.continuing.lock().map(|c| c.clone()).unwrap_or(None);
                if continuing.as_deref() != Some(id.as_str()) && !self.still_kept(id).await? {
                    return Err(PollError::Failed(retention_lost(id)));
                }
                let target = url(
                    &self.api_url,
                    "/api/v2/logs",
                    &[("from", id.clone()), ("take", PAGE_SIZE.to_string())],
                )?;
                let answer = self.get(&target, WHAT).await?;
                let mut events = parse_logs(&answer.body, WHAT, PAGE_SIZE)?;
                let next_raw = events.last().map(|e| e.event.id.clone());
                // The first poll goes on from a checkpoint found by day:
                // logs of that poll dated before the watch start are not
                // the stream's to have received.
                let not_before = self.not_before.lock().map(|n| *n).unwrap_or(None);
                if let Some(at) = not_before {
                    events.retain(|e| e.event.created_at >= at);
                }
                if next_raw.is_none() {
                    // `[]` with `next` at the same place: nothing newer yet.
                    LogPage { events, next: None }
                } else {
                    let next = next_from(answer.headers.get(LINK), WHAT)?
                        .or(next_raw)
                        .expect("non-empty");
                    if next == *id {
                        return Err(PollError::Failed(format!(
                            "{WHAT}: the Link next did not move past from={id} although the page had logs"
                        )));
                    }
                    LogPage {
                        events,
                        next: Some(next),
                    }
                }
            }
        };
        if let Ok(mut c) = self.continuing.lock() {
            c.clone_from(&page.next);
        }
        Ok(page)
    }

    fn retention(&self) -> TimeDelta {
        RETENTION
    }
}

/// A log as the API answers it: the fields read are required (`type` is
/// the log type code); `user_id` and `details` are optional (not every
/// type has a user), the rest is kept in the body as it came.
#[derive(Debug, Deserialize)]
struct Log {
    log_id: String,
    date: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    user_id: Option<serde_json::Value>,
    #[serde(default)]
    details: Option<serde_json::Value>,
}

/// A search answer (`sort=date:1`): the same logs, in date order rather
/// than `log_id` order.
fn parse_logs_by_date(body: &[u8], what: &str) -> Result<Vec<LogEntry>, PollError> {
    let logs = parse_logs_ordered(body, what, PAGE_SIZE, false)?;
    if logs
        .windows(2)
        .any(|w| w[1].event.created_at < w[0].event.created_at)
    {
        return Err(PollError::Failed(format!(
            "{what}: logs out of date order (asked for sort=date:1)"
        )));
    }
    Ok(logs)
}

/// Reads one answer: a bare array of logs, at most `cap` of them, in
/// ascending `log_id` order.
fn parse_logs(body: &[u8], what: &str, cap: usize) -> Result<Vec<LogEntry>, PollError> {
    parse_logs_ordered(body, what, cap, true)
}

fn parse_logs_ordered(
    body: &[u8],
    what: &str,
    cap: usize,
    by_id: bool,
) -> Result<Vec<LogEntry>, PollError> {
    let list: Vec<serde_json::Value> = parse_json(body, what)?;
    if list.len() > cap {
        return Err(PollError::Failed(format!(
            "{what}: {} logs in a page of at most {cap}",
            list.len()
        )));
    }
    let mut out = Vec::with_capacity(list.len());
    let mut previous: Option<String> = None;
    for value in list {
        let log: Log = serde_json::from_value(value.clone()).map_err(|_| {
            PollError::Failed(format!(
                "{what}: a log without a string log_id, date and type"
            ))
        })?;
        if log.log_id.is_empty()
            || log.log_id.len() > MAX_ID_LEN
            || !log.log_id.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(PollError::Failed(format!(
                "{what}: a log_id of {} characters",
                log.log_id.len()
            )));
        }
        let created_at = DateTime::parse_from_rfc3339(&log.date)
            .map_err(|_| {
                PollError::Failed(format!(
                    "{what}: log {} has a date that is not ISO 8601",
                    log.log_id
                ))
            })?
            .with_timezone(&Utc);
        // Ordered by log_id: an answer out of order could move the
        // checkpoint past logs never read.
        if by_id
            && previous
                .as_deref()
                .is_some_and(|p| id_order(p, &log.log_id) != std::cmp::Ordering::Less)
        {
            return Err(PollError::Failed(format!(
                "{what}: logs out of log_id order"
            )));
        }
        previous = Some(log.log_id.clone());
        let subject = subject(&log);
        let body = serde_json::to_vec(&serde_json::json!({"log_id": log.log_id, "data": value}))
            .map_err(|_| {
                PollError::Failed(format!("{what}: log {} cannot be re-encoded", log.log_id))
            })?;
        out.push(LogEntry {
            event: LoggedEvent {
                id: log.log_id,
                event_type: log.kind,
                created_at,
                subject,
                organization: None,
            },
            body,
        });
    }
    Ok(out)
}

/// Auth0's ids are decimal digits of one length; compared as numbers when
/// they are, else as text.
fn id_order(a: &str, b: &str) -> std::cmp::Ordering {
    let digits = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
    if digits(a) && digits(b) {
        a.len().cmp(&b.len()).then_with(|| a.cmp(b))
    } else {
        a.cmp(b)
    }
}

/// The user a log is about: its `user_id`, the id the Log Stream's record
/// files it under (`audit subject`, status, the veil all key on it, so
/// the `user_name` is not folded in). A `sapi` log's `user_id` is the
/// administrator's; the user it acted on is in its request path.
fn subject(log: &Log) -> Option<String> {
    let text = |v: &Option<serde_json::Value>| {
        v.as_ref()
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    if log.kind == "sapi" {
        return log
            .details
            .as_ref()
            .and_then(sapi_request)
            .and_then(|r| auth0_sapi_direction(&r))
            .and_then(|(_, user)| user);
    }
    text(&log.user_id)
}

/// A `sapi` log's `details.request`: its method, percent-decoded path and
/// the `blocked` value of its body.
pub fn sapi_request(details: &serde_json::Value) -> Option<SapiRequest> {
    let request = details.get("request")?;
    let method = request.get("method")?.as_str()?.to_owned();
    let raw = request.get("path")?.as_str()?;
    let path = percent_decode(raw);
    let blocked = request
        .get("body")
        .and_then(|b| b.get("blocked"))
        .and_then(serde_json::Value::as_bool);
    Some(SapiRequest {
        method,
        path,
        blocked,
    })
}

/// The `sapi` request in a healed or logged body (`{"log_id", "data"}`).
pub fn sapi_request_of(body: &[u8]) -> Option<SapiRequest> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    sapi_request(value.get("data")?.get("details")?)
}

fn percent_decode(text: &str) -> String {
    url::form_urlencoded::parse(format!("p={}", text.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| text.to_owned())
}

/// The `from` of the `Link` header's `rel="next"` URL (RFC 8288), or
/// `None` without a `Link`. Only the checkpoint is taken from it: the
/// request is rebuilt on `api_url`, so a `Link` pointing at another host
/// never receives the token.
fn next_from(link: Option<&HeaderValue>, what: &str) -> Result<Option<String>, PollError> {
    let Some(link) = link else {
        return Ok(None);
    };
    let text = link
        .to_str()
        .map_err(|_| PollError::Failed(format!("{what}: a Link header that is not text")))?;
    for part in text.split(',') {
        let mut fields = part.split(';');
        let target = fields.next().unwrap_or_default().trim();
        let is_next = fields.any(|f| {
            let f = f.trim();
            f.eq_ignore_ascii_case("rel=\"next\"") || f.eq_ignore_ascii_case("rel=next")
        });
        if !is_next {
            continue;
        }
        let target = target.trim_start_matches('<').trim_end_matches('>');
        let parsed = url::Url::parse(target)
            .map_err(|_| PollError::Failed(format!("{what}: a Link next that is not a URL")))?;
        let from = parsed
            .query_pairs()
            .find(|(k, _)| k == "from")
            .map(|(_, v)| v.into_owned())
            .filter(|v| !v.is_empty() && v.len() <= MAX_ID_LEN)
            .ok_or_else(|| PollError::Failed(format!("{what}: a Link next without from")))?;
        return Ok(Some(from));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two logs as `GET /api/v2/logs` answers them (the tenant log
    /// schemas: `sdu` "Successful User Deletion",
    /// auth0.com/docs/tenant-logs/management-success/sdu, and `sapi`
    /// "Successful API Operation",
    /// auth0.com/docs/tenant-logs/management-success/sapi).
    const PAGE: &str = r#"[
      {"date": "2026-12-01T10:00:00.000Z", "type": "sdu", "description": "User deleted",
       "client_id": "cli_1", "client_name": "", "ip": "203.0.113.9",
       "user_id": "auth0|u1", "user_name": "jane@example.com",
       "log_id": "90020261201100000000000000000000000000000000000001",
       "_id": "90020261201100000000000000000000000000000000000001"},
      {"date": "2026-12-01T10:01:00.000Z", "type": "sapi", "description": "Update a User",
       "client_id": "cli_admin", "ip": "203.0.113.9", "user_id": "", "user_name": "",
       "details": {"request": {"method": "patch", "path": "/api/v2/users/auth0%7Cu2",
                               "body": {"blocked": true}, "channel": "api"},
                   "response": {"statusCode": 200, "body": {}}},
       "log_id": "90020261201100100000000000000000000000000000000002"}
    ]"#;

    #[test]
    fn the_documented_page_parses_with_users_and_the_log_stream_record_shape() {
        let logs = parse_logs(PAGE.as_bytes(), "GET /api/v2/logs", 100).unwrap();
        assert_eq!(logs.len(), 2);
        assert_eq!(
            logs[0].event.id,
            "90020261201100000000000000000000000000000000000001"
        );
        assert_eq!(logs[0].event.event_type, "sdu");
        assert_eq!(logs[0].event.subject.as_deref(), Some("auth0|u1"));
        // A sapi names the user it acted on, not the administrator.
        assert_eq!(logs[1].event.subject.as_deref(), Some("auth0|u2"));
        let record: serde_json::Value = serde_json::from_slice(&logs[0].body).unwrap();
        assert_eq!(record["log_id"], logs[0].event.id.as_str());
        assert_eq!(record["data"]["type"], "sdu");
        // What a Log Stream delivery of it would read as.
        let delivery = crate::ingest::providers::auth0::parse(
            crate::ingest::verified::Verified::fetched_from_provider_api(&logs[0].body),
        )
        .unwrap();
        assert_eq!(
            delivery.events[0].delivery_id.as_deref(),
            Some(logs[0].event.id.as_str())
        );
        let sapi = sapi_request_of(&logs[1].body).unwrap();
        assert_eq!(sapi.method, "patch");
        assert_eq!(sapi.path, "/api/v2/users/auth0|u2");
        assert_eq!(sapi.blocked, Some(true));
    }

    #[test]
    fn broken_pages_fail_the_poll() {
        for broken in [
            r#"{"logs": []}"#.to_owned(),
            PAGE.replace("\"type\": \"sdu\",", ""),
            PAGE.replace("2026-12-01T10:00:00.000Z", "yesterday"),
            // Out of log_id order.
            PAGE.replace(
                "90020261201100100000000000000000000000000000000002",
                "90020261201090000000000000000000000000000000000000",
            ),
        ] {
            assert!(
                parse_logs(broken.as_bytes(), "GET /api/v2/logs", 100).is_err(),
                "{broken}"
            );
        }
        assert!(parse_logs(PAGE.as_bytes(), "GET /api/v2/logs", 1).is_err());
        assert!(parse_logs(b"[]", "GET /api/v2/logs", 100)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_link_next_gives_only_its_from() {
        let link = HeaderValue::from_static(
            "<https://acme.auth0.com/api/v2/logs?from=900202&take=100>; rel=\"next\"",
        );
        assert_eq!(
            next_from(Some(&link), "x").unwrap().as_deref(),
            Some("900202")
        );
        assert_eq!(next_from(None, "x").unwrap(), None);
        let other = HeaderValue::from_static("<https://acme.auth0.com/x?from=1>; rel=\"prev\"");
        assert_eq!(next_from(Some(&other), "x").unwrap(), None);
        let bad = HeaderValue::from_static("<https://acme.auth0.com/api/v2/logs>; rel=\"next\"");
        assert!(next_from(Some(&bad), "x").is_err());
    }

    /// The first poll: the search by day (Auth0's "Log Search Query
    /// Syntax": `date` in YYYY-MM-DD) finds logs from before the watch
    /// start; the first one at or after it is the start, and the poll's
    /// later pages leave out logs dated before it.
    #[tokio::test]
    async fn the_first_poll_starts_at_the_first_log_at_or_after_the_watch_start() {
        let at = DateTime::parse_from_rfc3339("2026-12-01T10:00:30Z")
            .unwrap()
            .with_timezone(&Utc);
        let entry = |n: u32, date: &str| {
            serde_json::json!({"log_id": format!("900{n:053}"), "date": date, "type": "sdu",
                               "user_id": format!("auth0|u{n}")})
        };
        let api =
            crate::crosscheck::fake::FakeApi::start(std::sync::Arc::new(move |target: &str| {
                let q = crate::crosscheck::fake::query;
                if let Some(from) = q(target, "from").first() {
                    assert_eq!(from, &format!("900{:053}", 2));
                    // A late log from before the watch start, then one after.
                    let page = [
                        entry(3, "2026-12-01T10:00:29.000Z"),
                        entry(4, "2026-12-01T10:00:31.000Z"),
                    ];
                    return (200, serde_json::to_string(&page).unwrap());
                }
                assert_eq!(q(target, "q"), ["date:[2026-12-01 TO *]"]);
                assert_eq!(q(target, "sort"), ["date:1"]);
                let page = [
                    entry(1, "2026-12-01T09:00:00.000Z"),
                    entry(2, "2026-12-01T10:00:30.000Z"),
                ];
                (200, serde_json::to_string(&page).unwrap())
            }))
            .await;
        let a = Auth0::new(
            ApiClient::new("", std::time::Duration::from_secs(5)),
            api.base.clone(),
            Credentials::Token(checked_bearer("tok").unwrap()),
        );
        let first = a.page(&LogPosition::Since(at)).await.unwrap();
        let ids: Vec<&str> = first.events.iter().map(|e| e.event.id.as_str()).collect();
        assert_eq!(ids, [format!("900{:053}", 2)]);
        let next = first.next.clone().unwrap();
        let second = a.page(&LogPosition::After(next)).await.unwrap();
        let ids: Vec<String> = second.events.iter().map(|e| e.event.id.clone()).collect();
        assert_eq!(ids, [format!("900{:053}", 4)]);
        // No Link: the next page starts after the last log read.
        assert_eq!(second.next, Some(format!("900{:053}", 4)));
    }

    #[test]
    fn the_retention_reason_says_what_happened_and_what_to_do() {
        let text = retention_lost("900123");
        assert!(text.contains("no longer keeps log 900123"), "{text}");
        assert!(text.contains("retention"));
        assert!(text.starts_with(CHECKPOINT_LOST));
    }
}
