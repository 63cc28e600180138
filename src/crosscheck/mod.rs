//! The providers' own APIs, read for the cross-check (issue #45,
//! docs/src/crosscheck.md). This adapter only asks and parses: what a
//! listing or a log entry *means* is decided in `domain::crosscheck`, and
//! the poll task that stores and pages lives in `service`.
//!
//! A provider is one of three shapes, each behind one small trait, so a new
//! provider (Okta's System Log, Auth0's logs) adds a module here and
//! nothing else in this layer:
//! - [`EventLog`]: pages of logged events after a cursor (WorkOS);
//! - [`StateListing`]: every entry that exists now, page by page (Clerk);
//! - [`DeltaFeed`]: what changed since a stored link, page by page, ending
//!   with the link to ask next time (Entra's Graph delta queries).
//!
//! Every answer is untrusted: read through [`http::ApiClient`] (one
//! deadline per request, body capped), parsed into typed structs that
//! require the fields used and tolerate the rest, and checked for the
//! shapes a broken or hostile API produces (a page longer than asked for,
//! a cursor that does not move, more pages than [`MAX_PAGES`]). Each ends
//! the poll with a [`PollError`]; none becomes an empty answer, which
//! would read as "everything was removed".

pub mod auth0;
pub mod clerk;
pub mod entra;
#[cfg(test)]
pub(crate) mod fake;
pub mod http;
pub mod oauth;
pub mod okta;
pub mod workos;

use crate::config::crosscheck::CrosscheckConfig;
use crate::domain::crosscheck::{Entry, LoggedEvent, Provider};
use crate::domain::crosscheck_entra::DeltaChange;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::fmt;
use std::time::Duration;

/// Most pages one poll reads (per listing). Clerk at 500 per page reaches
/// 1,000,000 entries; WorkOS at 100 per page 200,000 events. Past it the
/// poll fails: an endless cursor must not run until the deadline while
/// holding memory.
pub const MAX_PAGES: usize = 2_000;
/// One request, body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a poll failed. The text never carries the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollError {
    /// 401/403: the key is wrong, revoked or lacks a scope (`status` 0: the
    /// key could not even be put in a header).
    Refused { status: u16 },
    /// 429 beyond what the poll may wait.
    RateLimited { retry_after: Option<Duration> },
    /// Anything else: 5xx, a transport error, a deadline, an answer that is
    /// too large, not JSON, or not in the documented shape.
    Failed(String),
}

impl PollError {
    /// The `outcome` label of `hushwatch_crosscheck_polls_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            PollError::Refused { .. } => "refused",
            PollError::RateLimited { .. } => "rate_limited",
            PollError::Failed(_) => "error",
        }
    }
}

impl fmt::Display for PollError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PollError::Refused { status: 0 } => f.write_str("the API key cannot be sent"),
            PollError::Refused { status } => {
                write!(f, "the API refused the key (HTTP {status})")
            }
            PollError::RateLimited { retry_after } => match retry_after {
                Some(d) => write!(f, "rate limited (429, Retry-After {}s)", d.as_secs()),
                None => f.write_str("rate limited (429)"),
            },
            PollError::Failed(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for PollError {}

/// Where an event-log read starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogPosition {
    /// After this provider id (the stored cursor).
    After(String),
    /// The first poll: from this instant (the watch start, at most the
    /// log's retention back).
    Since(DateTime<Utc>),
}

/// One page of a provider's event log, oldest first.
#[derive(Debug, Clone)]
pub struct LogPage {
    pub events: Vec<LogEntry>,
    /// Where the next page starts; `None`: this was the last page.
    pub next: Option<String>,
}

/// A logged event: what the join needs, and the entry as the provider sent
/// it (the body a heal forwards, byte for byte what its webhook carries).
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub event: LoggedEvent,
    pub body: Vec<u8>,
}

/// A provider that keeps a log of the events it sent as webhooks.
#[async_trait]
pub trait EventLog: Send + Sync {
    /// One page from `from`.
    async fn page(&self, from: &LogPosition) -> Result<LogPage, PollError>;
    /// How far back the provider keeps its log.
    fn retention(&self) -> chrono::TimeDelta;

    /// The cursor to keep once the events of the page read at `asked` are
    /// decided through the event `decided` (`None`: none of them), and
    /// whether that was the `whole_page` (an empty one too); `next` is the
    /// page's [`LogPage::next`]. `None` keeps the cursor as it was. By
    /// default the decided event's id (WorkOS's `after`); Okta keeps links.
    fn cursor_after(
        &self,
        _asked: &LogPosition,
        _next: Option<&str>,
        decided: Option<&str>,
        _whole_page: bool,
    ) -> Option<String> {
        decided.map(str::to_owned)
    }

    /// Requests one poll makes at most. Reaching it ends the poll where it
    /// is (the next one goes on from the kept cursor); the default,
    /// [`MAX_PAGES`], fails the poll instead: for a cursor-per-id log that
    /// many pages means a cursor that never ends.
    fn max_requests(&self) -> usize {
        MAX_PAGES
    }
}

/// One listed entry and the provider's id for it (a Clerk membership id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub entry: Entry,
    pub provider_id: Option<String>,
}

/// A provider whose current state can be listed. A listing is read page
/// by page, so the caller can store each page before asking for the next
/// and never holds the whole listing.
#[async_trait]
pub trait StateListing: Send + Sync {
    /// Starts a fresh listing.
    fn start(&self) -> Box<dyn ListingRun>;
}

#[async_trait]
pub trait ListingRun: Send {
    /// The next page, or `None` when the listing is complete.
    async fn next_page(&mut self) -> Result<Option<Vec<Listed>>, PollError>;
    /// Requests made so far (for the docs' cost figures and `--dry-run`).
    fn requests(&self) -> usize;
}

/// One page of a delta round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaPage {
    /// The revocations this page reports (everything else it lists is
    /// read and dropped).
    pub changes: Vec<DeltaChange>,
    /// The revocations this page shows undone (a user listed as enabled, a
    /// member listed without `@removed`), each named by the change it
    /// undoes (`UserDisabled` for a user that can sign in again).
    pub restored: Vec<DeltaChange>,
    /// Objects the page listed (for the cost figures).
    pub listed: usize,
    pub next: DeltaNext,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeltaNext {
    /// More of this round: ask this link next (`@odata.nextLink`).
    More(String),
    /// The round is complete: ask this link next poll (`@odata.deltaLink`).
    Done(String),
}

/// What asking a delta link answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeltaAnswer {
    Page(DeltaPage),
    /// The provider no longer knows the link's state (Graph's `400
    /// syncStateNotFound`, 7 days after it was issued): only a fresh round
    /// from a full listing can go on.
    Expired,
}

/// A provider that reports changes since a link it issued. Each of its
/// collections (`users`, `groups`) is its own round with its own link; a
/// round is read page by page, so the caller can decide each page and keep
/// the link before asking for the next.
#[async_trait]
pub trait DeltaFeed: Send + Sync {
    /// The collections tracked, in the order polled.
    fn collections(&self) -> &'static [&'static str];
    /// One page of `collection`: a fresh round from a full listing when
    /// `link` is `None`, else from a link an earlier page answered.
    async fn page(&self, collection: &str, link: Option<&str>) -> Result<DeltaAnswer, PollError>;
    /// Requests made so far.
    fn requests(&self) -> usize;
}

/// A configured provider, in the shape it is read.
pub enum Source {
    EventLog(Box<dyn EventLog>),
    State(Box<dyn StateListing>),
    Delta(Box<dyn DeltaFeed>),
}

/// The source for a stream's `[crosscheck]` table.
pub fn source(config: &CrosscheckConfig) -> Source {
    let client = http::ApiClient::new(config.api_key.expose(), REQUEST_TIMEOUT);
    match config.provider {
        Provider::Clerk => {
            Source::State(Box::new(clerk::Clerk::new(client, config.api_url.clone())))
        }
        Provider::Workos => Source::EventLog(Box::new(workos::Workos::new(
            client,
            config.api_url.clone(),
            config.types.clone(),
        ))),
        Provider::Okta => Source::EventLog(Box::new(okta::Okta::new(
            http::ApiClient::with_scheme("SSWS", config.api_key.expose(), REQUEST_TIMEOUT)
                .max_response(okta::MAX_RESPONSE),
            config.api_url.clone(),
            &config.types,
        ))),
        Provider::Entra => Source::Delta(Box::new(entra::Entra::new(config, REQUEST_TIMEOUT))),
        Provider::Auth0 => Source::EventLog(Box::new(auth0::Auth0::new(
            client,
            config.api_url.clone(),
            auth0::Auth0::credentials(config),
        ))),
    }
}

/// Parses a 2xx body into `T`, naming the request on failure without
/// quoting the body (it is the provider's, and may be huge or hostile).
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    body: &[u8],
    what: &str,
) -> Result<T, PollError> {
    serde_json::from_slice(body).map_err(|e| {
        PollError::Failed(format!(
            "{what}: the answer is not in the documented shape ({} at line {} column {})",
            match e.classify() {
                serde_json::error::Category::Data => "unexpected content",
                serde_json::error::Category::Eof => "cut short",
                _ => "not JSON",
            },
            e.line(),
            e.column()
        ))
    })
}

/// `base` + `path` with `query` pairs, percent-encoded.
pub(crate) fn url(base: &str, path: &str, query: &[(&str, String)]) -> Result<String, PollError> {
    let mut url = url::Url::parse(&format!("{base}{path}"))
        .map_err(|_| PollError::Failed(format!("{path}: api_url is not a valid URL")))?;
    {
        let mut pairs = url.query_pairs_mut();
        for (k, v) in query {
            pairs.append_pair(k, v);
        }
    }
    Ok(url.into())
}
