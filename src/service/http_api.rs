//! `App` as the HTTP layer sees it (`http::Api`): each method is one
//! operation a route asks for, and every store call here goes through
//! `App::guarded` (store timeout, `note_storage`) so no route reaches the
//! store on its own.

use super::app::App;
use crate::config::{Config, SvixConfig};
use crate::http::api::{Api, Created, Unavailable};
use crate::ingest::svix_ops::OpEvent;
use crate::metrics::Metrics;
use crate::status::timeline::Timeline;
use crate::store::silences::{AckOutcome, NewSilence, SilenceRow};
use crate::store::subscriptions::SubscriptionUpdate;
use crate::store::svix::{SvixApply, SvixPage};
use crate::store::{EventOutcome, NewEvent, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

#[async_trait]
impl Api for App {
    fn config(&self) -> Arc<Config> {
        self.core().config()
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock().now()
    }

    fn metrics(&self) -> &Metrics {
        self.core().metrics()
    }

    async fn ingest_delivery(
        &self,
        events: Vec<NewEvent>,
        update: Option<SubscriptionUpdate>,
    ) -> Result<Vec<EventOutcome>, Unavailable> {
        // `ingest_delivery` notes the storage outcome itself.
        self.timed(App::ingest_delivery(self, events, update)).await
    }

    async fn record_reconciliation(
        &self,
        stream: &crate::config::StreamConfig,
        report: crate::ingest::reconcile::Report,
        body_sha256: [u8; 32],
    ) -> Result<bool, Unavailable> {
        self.guarded(App::record_reconciliation(
            self,
            stream,
            report,
            body_sha256,
        ))
        .await
    }

    async fn create_stream(&self, name: &str) -> Result<Created, Unavailable> {
        self.timed(App::create_stream(self, name)).await
    }

    async fn delete_stream(&self, name: &str) -> Result<bool, Unavailable> {
        self.timed(App::delete_stream(self, name)).await
    }

    fn svix_apply(
        &self,
        svix: &SvixConfig,
        event: OpEvent,
        event_type: &str,
        endpoint: Option<(&str, Option<&str>)>,
    ) -> SvixApply {
        self.svix().apply(svix, event, event_type, endpoint)
    }

    async fn svix_record(
        &self,
        event: NewEvent,
        apply: SvixApply,
    ) -> Result<(EventOutcome, Vec<SvixPage>), Unavailable> {
        self.timed(self.svix().record(event, apply)).await
    }

    async fn svix_acknowledge(
        &self,
        apply: SvixApply,
        endpoint_id: String,
        msg_ids: Vec<String>,
        by: String,
    ) -> Result<(usize, u64), Unavailable> {
        self.timed(self.svix().acknowledge(apply, endpoint_id, msg_ids, by))
            .await
    }

    async fn metrics_page(&self) -> crate::metrics::Page {
        self.svix().refresh_metrics().await;
        let streams = self.stream_names();
        self.operator().refresh_metrics(&streams).await;
        self.encode_metrics()
    }

    async fn status_document(&self) -> Value {
        App::status_document(self).await
    }

    async fn status_timelines(&self) -> BTreeMap<String, Timeline> {
        App::status_timelines(self).await
    }

    async fn probe_storage(&self) -> Result<(), StoreError> {
        // `/readyz` has its own deadline and caches its answer; a failed
        // probe is counted there, not marked as a failed write here.
        self.store().probe().await
    }

    async fn add_silence(
        &self,
        silence: NewSilence,
        max: usize,
    ) -> Result<Option<i64>, Unavailable> {
        let audit = self.config().audit.enabled;
        let id = self
            .guarded(self.store().add_silence(silence, max, audit))
            .await?;
        if id.is_some() {
            self.outbox_wake.notify_one();
        }
        Ok(id)
    }

    async fn silences(&self, ended_after: DateTime<Utc>) -> Result<Vec<SilenceRow>, Unavailable> {
        self.guarded(self.store().silences(ended_after)).await
    }

    async fn expire_silence(
        &self,
        id: i64,
        by: String,
        comment: Option<String>,
    ) -> Result<bool, Unavailable> {
        let audit = self.config().audit.enabled;
        let expired = self
            .guarded(self.store().expire_silence(id, by, comment, audit))
            .await?;
        if expired {
            self.outbox_wake.notify_one();
        }
        Ok(expired)
    }

    async fn acknowledge_stream(
        &self,
        stream: String,
        created_by: String,
        comment: String,
    ) -> Result<AckOutcome, Unavailable> {
        let audit = self.config().audit.enabled;
        self.guarded(self.store().acknowledge(stream, created_by, comment, audit))
            .await
    }
}
