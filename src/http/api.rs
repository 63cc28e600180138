//! What the HTTP layer asks of the running sidecar, and nothing more. The
//! routes hold an `Arc<dyn Api>`; `service::App` implements it. So `http`
//! never names `service` (which wires `http` in), and every route reaches
//! the store through the one place that applies the store timeout, marks
//! storage healthy or not (`storage_ok`, `/readyz`), counts storage errors
//! and writes the audit entries.

use crate::config::{Config, SvixConfig};
use crate::ingest::svix_ops::OpEvent;
use crate::metrics::Metrics;
use crate::status::timeline::Timeline;
use crate::store::ack_codes::{LinkState, LinkUse};
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
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub types: Vec<String>,
    pub dry_run: bool,
    pub by: String,
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
    /// Removes the templated stream `name`; false if there is none.
    async fn delete_stream(&self, name: &str) -> Result<bool, Unavailable>;

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

    /// Relay mode: re-queues (or lists) a forwarding stream's stored
    /// deliveries of a window, audited; wakes the forwarder.
    async fn replay_stream(
        &self,
        stream: String,
        call: ReplayCall,
    ) -> Result<crate::store::forward::ReplayOutcome, Unavailable>;
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
