//! What the HTTP layer asks of the running sidecar, and nothing more. The
//! routes hold an `Arc<dyn Api>`; `service::App` implements it. So `http`
//! never names `service` (which wires `http` in), and every route reaches
//! the store through the one place that applies the store timeout, marks
//! storage healthy or not (`storage_ok`, `/readyz`), counts storage errors
//! and writes the audit entries.

use crate::config::{Config, SvixConfig};
use crate::domain::forward_ops::Verdict;
use crate::ingest::svix_ops::OpEvent;
use crate::metrics::Metrics;
use crate::status::timeline::Timeline;
use crate::store::ack_codes::{LinkState, LinkUse};
use crate::store::forward_admin::{ForwardList, RetryOutcome};
use crate::store::idempotency::{Begun, IdempotencyKey, StoredAnswer};
use crate::store::silences::{AckOutcome, NewSilence, SilenceRow};
use crate::store::subscriptions::SubscriptionUpdate;
use crate::store::svix::{SvixApply, SvixPage};
use crate::store::{EventOutcome, NewEvent, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// What [`Api::create_stream`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Created {
    New,
    Exists,
    /// `max_streams` templated streams exist already.
    Full,
    /// No `[streams."PREFIX*"]` pattern covers the name.
    NoTemplate,
}

/// Why a route's store call did not complete: answered 503 either way.
#[derive(Debug)]
pub enum Unavailable {
    /// The store answered with an error (already logged and counted).
    Store(StoreError),
    /// The store did not answer within the store timeout.
    Slow,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::Store(e) => write!(f, "{e}"),
            Unavailable::Slow => f.write_str("storage did not answer in time"),
        }
    }
}

/// What a replay body asks for (the store adds who, when and the pages).
pub struct ReplayCall {
    /// `(from, to)`: the stored deliveries received in it; `None`: every
    /// dead letter of the stream (`dead_letters: true`).
    pub window: Option<(DateTime<Utc>, DateTime<Utc>)>,
    pub types: Vec<String>,
    pub dry_run: bool,
    pub by: String,
}

/// Who asks for a relay action on one stream, and why (audited).
pub struct ForwardCall {
    pub stream: String,
    pub by: String,
    pub comment: Option<String>,
}

/// What [`Api::delete_stream`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Deleted {
    /// Removed; `gave_up` undelivered relay events became dead letters.
    Deleted {
        gave_up: u64,
    },
    NotFound,
    /// Not removed: this many relay events are pending or held, and the
    /// call did not force it.
    Undelivered(u64),
}

#[async_trait]
pub trait Api: Send + Sync {
    /// The config in force (a reload swaps it; a request keeps the one it read).
    fn config(&self) -> Arc<Config>;
    /// The service's clock (a `ManualClock` in tests).
    fn now(&self) -> DateTime<Utc>;
    fn metrics(&self) -> &Metrics;

    /// Commits a delivery's events (and what it said about the provider's
    /// subscriptions); returns only after the commit.
    async fn ingest_delivery(
        &self,
        events: Vec<NewEvent>,
        update: Option<SubscriptionUpdate>,
    ) -> Result<Vec<EventOutcome>, Unavailable>;
    /// Stores a reconciliation report (deduplicated by id, with its pages);
    /// true when it was new.
    async fn record_reconciliation(
        &self,
        stream: &crate::config::StreamConfig,
        report: crate::ingest::reconcile::Report,
        body_sha256: [u8; 32],
    ) -> Result<bool, Unavailable>;
    /// Creates the templated stream `name`; idempotent.
    async fn create_stream(&self, name: &str) -> Result<Created, Unavailable>;
    /// Removes the templated stream `name`. While relay events of it are
    /// undelivered (pending or held) it refuses, unless `force`, which
    /// first makes them dead letters (audited as `by`'s, paged).
    async fn delete_stream(
        &self,
        name: &str,
        force: bool,
        by: String,
    ) -> Result<Deleted, Unavailable>;

    /// Where `svix`'s pages for this endpoint go.
    fn svix_apply(
        &self,
        svix: &SvixConfig,
        event: OpEvent,
        event_type: &str,
        endpoint: Option<(&str, Option<&str>)>,
    ) -> SvixApply;
    /// Commits one operational event and the pages it causes.
    async fn svix_record(
        &self,
        event: NewEvent,
        apply: SvixApply,
    ) -> Result<(EventOutcome, Vec<SvixPage>), Unavailable>;
    /// Acknowledges lost messages, audited (`by` is who asked):
    /// (acknowledged now, still lost).
    async fn svix_acknowledge(
        &self,
        apply: SvixApply,
        endpoint_id: String,
        msg_ids: Vec<String>,
        by: String,
    ) -> Result<(usize, u64), Unavailable>;

    /// The whole `/metrics` page, rendered as it is sent. Answers within a
    /// few seconds whatever the store does: the store-backed series are
    /// refreshed within a budget, else shown as last known with
    /// `hushwatch_metrics_stale` 1 (so the storage-error series stay
    /// scrapeable during an outage). Takes the `Arc` because the refresh
    /// outlives a scrape that stops waiting for it (one at a time).
    async fn metrics_page(self: Arc<Self>) -> crate::metrics::Page;
    /// The `/v1/status` document, or `Slow` when the store did not answer
    /// within the store timeout.
    async fn status_document(&self) -> Result<Value, Unavailable>;
    /// The status page's document and each stream's 7-day timeline, under
    /// one store timeout.
    async fn status_page(&self) -> Result<(Value, BTreeMap<String, Timeline>), Unavailable>;
    /// A tiny write, for `/readyz`.
    async fn probe_storage(&self) -> Result<(), StoreError>;

    /// Stores a silence unless `max` have not ended yet (`None`).
    async fn add_silence(
        &self,
        silence: NewSilence,
        max: usize,
    ) -> Result<Option<i64>, Unavailable>;
    /// Silences that end after `ended_after`.
    async fn silences(&self, ended_after: DateTime<Utc>) -> Result<Vec<SilenceRow>, Unavailable>;
    /// Ends a silence now (who, and why if given, go to the audit log);
    /// false if there is none with that id.
    async fn expire_silence(
        &self,
        id: i64,
        by: String,
        comment: Option<String>,
    ) -> Result<bool, Unavailable>;
    /// Acknowledges the stream's current firing episode.
    async fn acknowledge_stream(
        &self,
        stream: String,
        created_by: String,
        comment: String,
    ) -> Result<AckOutcome, Unavailable>;

    /// Relay mode: re-queues (or counts) a forwarding stream's stored
    /// deliveries of a window, or its dead letters, in bounded chunks,
    /// audited; wakes the forwarder. Takes the `Arc` so the replay runs to
    /// its end (and its audit entry) even if the caller stops waiting.
    async fn replay_stream(
        self: Arc<Self>,
        stream: String,
        call: ReplayCall,
    ) -> Result<crate::store::forward::ReplayOutcome, Unavailable>;
    /// Issue #44, `forward list`: a page of the stream's undelivered
    /// events (subjects readable), and how many there are.
    async fn list_forwards(
        &self,
        stream: String,
        state: Option<&'static str>,
        limit: usize,
    ) -> Result<ForwardList, Unavailable>;
    /// `forward retry`: one pending event or all of them due now; wakes
    /// the forwarder.
    async fn retry_forwards(
        &self,
        call: ForwardCall,
        delivery_id: Option<String>,
    ) -> Result<RetryOutcome, Unavailable>;
    /// `forward skip`: the event becomes a dead letter now (paged).
    async fn skip_forward(
        &self,
        call: ForwardCall,
        delivery_id: String,
    ) -> Result<Verdict, Unavailable>;
    /// Issue #30 (`http::ack_link`): what an acknowledge-link code (its
    /// SHA-256) opens; changes nothing.
    async fn open_ack_code(&self, code: [u8; 32]) -> Result<LinkState, Unavailable>;
    /// Uses an acknowledge-link code: acknowledges its episode (audited,
    /// `created_by` "link") and retires the episode's other codes.
    async fn confirm_ack_code(&self, code: [u8; 32]) -> Result<LinkUse, Unavailable>;

    /// Issue #30 (`http::idempotency`): claims an `Idempotency-Key`, or says
    /// who has it.
    async fn idempotency_begin(&self, key: IdempotencyKey) -> Result<Begun, Unavailable>;
    /// Stores the 2xx answer of the claim made at `started`.
    async fn idempotency_finish(
        &self,
        key: IdempotencyKey,
        started: DateTime<Utc>,
        answer: StoredAnswer,
    ) -> Result<bool, Unavailable>;
    /// Forgets the claim made at `started` (the call was not a success).
    async fn idempotency_release(
        &self,
        key: IdempotencyKey,
        started: DateTime<Utc>,
    ) -> Result<bool, Unavailable>;
}
