//! `App` as the HTTP layer sees it (`http::Api`): each method is one
//! operation a route asks for, and every store call here goes through
//! `App::guarded` (store timeout, `note_storage`) so no route reaches the
//! store on its own.

use super::app::App;
use super::core::STORE_TIMEOUT;
use crate::config::forward::DEFAULT_DEAD_LETTER_RETAIN;
use crate::config::{Config, SvixConfig};
use crate::domain::forward_ops::{ReplayScope, Verdict, REPLAY_CHUNK};
use crate::http::api::{Api, Created, Deleted, ForwardCall, ReplayCall, Unavailable};
use crate::ingest::svix_ops::OpEvent;
use crate::metrics::Metrics;
use crate::status::timeline::Timeline;
use crate::store::ack_codes::{LinkState, LinkUse};
use crate::store::forward::{ReplayOutcome, ReplayRequest};
use crate::store::forward_admin::{
    replay_in_chunks, ForwardList, OperatorAction, RetryOutcome, StreamRemoval,
};
use crate::store::idempotency::{Begun, IdempotencyKey, StoredAnswer};
use crate::store::nul::{nul_safe, nul_safe_event, nul_safe_op, nul_safe_update};
use crate::store::silences::{AckOutcome, NewSilence, SilenceRow};
use crate::store::subscriptions::SubscriptionUpdate;
use crate::store::svix::{SvixApply, SvixPage};
use crate::store::{EventOutcome, NewEvent, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long a scrape waits for the store-backed series before it serves
/// the last known values (`hushwatch_metrics_stale` 1): well inside
/// Prometheus's default 10 s `scrape_timeout`, so the storage-error series
/// are scraped during exactly the outage they describe.
const METRICS_STORE_BUDGET: Duration = Duration::from_secs(3);

impl App {
    /// Who acts on `stream`'s relay rows, with what the pages and dead
    /// letters the action may make need from its config (a stream no
    /// longer configured keeps the defaults, as its rows do).
    fn operator_action(&self, stream: &str, by: String, comment: Option<String>) -> OperatorAction {
        let config = self.config();
        let configured = match config.streams.get(stream) {
            Some(s) => Some(std::borrow::Cow::Borrowed(s)),
            None => config.templates.stream(stream).map(std::borrow::Cow::Owned),
        };
        OperatorAction {
            stream: stream.to_string(),
            by,
            comment,
            now: self.store().now(),
            audit: config.audit.enabled,
            notifiers: configured
                .as_ref()
                .map(|s| s.notify.clone())
                .unwrap_or_default(),
            dead_letter_retain: configured
                .as_ref()
                .and_then(|s| s.forward.as_ref())
                .map_or(DEFAULT_DEAD_LETTER_RETAIN, |f| f.dead_letter_retain),
            config_path: super::forward::config_path(&config),
        }
    }

    /// A read route's wait for the store, bounded like a write's
    /// (`STORE_TIMEOUT`): past it the route answers 503 rather than hold the
    /// connection. Counted as a read timeout, not a storage error (that
    /// counter is for failed writes, which is what `HushwatchStoreDown`
    /// pages on).
    async fn read_bounded<T>(&self, read: impl Future<Output = T>) -> Result<T, Unavailable> {
        match tokio::time::timeout(STORE_TIMEOUT, read).await {
            Ok(value) => Ok(value),
            Err(_) => {
                self.metrics().store_read_timeouts.inc();
                tracing::warn!("a status read gave up on a stalled store (answered 503)");
                Err(Unavailable::Slow)
            }
        }
    }
}

/// The scrape-time store refresh (Svix gauges, silenced and acknowledged
/// flags): joins the one in flight, or starts one. It runs as its own task
/// so a scrape that stops waiting does not abandon store work half done,
/// and so a stall costs one pending refresh, not one per scrape.
fn store_refresh(app: &Arc<App>) -> watch::Receiver<Option<bool>> {
    let mut slot = app
        .metrics()
        .refresh_in_flight
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(running) = slot.as_ref() {
        // Still running: not done yet, and its task is alive.
        if running.borrow().is_none() && running.has_changed().is_ok() {
            return running.clone();
        }
    }
    let (done, running) = watch::channel(None);
    // The task holds only what it refreshes, not the `App`.
    let (svix, operator, streams) = (
        Arc::clone(app.svix()),
        Arc::clone(app.operator()),
        app.stream_names(),
    );
    tokio::spawn(async move {
        let svix = svix.refresh_metrics().await;
        let operator = operator.refresh_metrics(&streams).await;
        let _ = done.send(Some(svix && operator));
    });
    *slot = Some(running.clone());
    running
}

/// Whether the refresh read the store (None: its task ended without saying).
async fn refresh_done(mut running: watch::Receiver<Option<bool>>) -> Option<bool> {
    match running.wait_for(Option::is_some).await {
        Ok(done) => *done,
        Err(_) => None,
    }
}

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
        let mut events = events;
        events.iter_mut().for_each(nul_safe_event);
        let update = update.map(nul_safe_update);
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

    async fn delete_stream(
        &self,
        name: &str,
        force: bool,
        by: String,
    ) -> Result<Deleted, Unavailable> {
        // Issue #44: a stream deleted while relay events are undelivered
        // would leave them unsent and unpaged; refused, or with `force`
        // they become dead letters first (audited, paged, replayable).
        let undelivered = self
            .guarded(self.store().undelivered_forwards(name.to_string()))
            .await?;
        let mut gave_up = 0;
        if undelivered > 0 {
            if !force {
                return Ok(Deleted::Undelivered(undelivered));
            }
            let action = self.operator_action(name, by.clone(), None);
            // A chunk per transaction; bounded, so events still arriving
            // cannot keep the loop going (they stay pending and visible).
            let chunk = REPLAY_CHUNK as u64;
            for _ in 0..=undelivered.div_ceil(chunk) {
                let n = self
                    .guarded(self.store().give_up_forwards(action.clone(), chunk as i64))
                    .await?;
                gave_up += n;
                if n == 0 {
                    break;
                }
            }
        }
        // The count and the removal in one transaction: what arrived since
        // the count above is refused, or (force) given up with it.
        let action = self.operator_action(name, by, None);
        let removal = self.timed(App::delete_stream(self, action, force)).await?;
        if gave_up > 0 || matches!(removal, StreamRemoval::Removed { gave_up: 1.. }) {
            self.outbox_wake.notify_one();
        }
        Ok(match removal {
            StreamRemoval::Removed { gave_up: more } => Deleted::Deleted {
                gave_up: gave_up + more,
            },
            StreamRemoval::NotFound => Deleted::NotFound,
            StreamRemoval::Undelivered(n) => Deleted::Undelivered(n),
        })
    }

    fn svix_apply(
        &self,
        svix: &SvixConfig,
        event: OpEvent,
        event_type: &str,
        endpoint: Option<(&str, Option<&str>)>,
    ) -> SvixApply {
        let event_type = nul_safe(event_type.to_string());
        let endpoint = endpoint.map(|(id, uid)| {
            (
                nul_safe(id.to_string()),
                uid.map(|u| nul_safe(u.to_string())),
            )
        });
        let endpoint = endpoint
            .as_ref()
            .map(|(id, uid)| (id.as_str(), uid.as_deref()));
        self.svix()
            .apply(svix, nul_safe_op(event), &event_type, endpoint)
    }

    async fn svix_record(
        &self,
        event: NewEvent,
        apply: SvixApply,
    ) -> Result<(EventOutcome, Vec<SvixPage>), Unavailable> {
        let mut event = event;
        nul_safe_event(&mut event);
        self.timed(self.svix().record(event, apply)).await
    }

    async fn svix_acknowledge(
        &self,
        apply: SvixApply,
        endpoint_id: String,
        msg_ids: Vec<String>,
        by: String,
    ) -> Result<(usize, u64), Unavailable> {
        // The same encoding as at ingest, so an id stored with U+FFFD in
        // place of NUL is acknowledged by the id the operator copied.
        let endpoint_id = nul_safe(endpoint_id);
        let msg_ids = msg_ids.into_iter().map(nul_safe).collect();
        let by = nul_safe(by);
        self.timed(self.svix().acknowledge(apply, endpoint_id, msg_ids, by))
            .await
    }

    async fn metrics_page(self: Arc<Self>) -> crate::metrics::Page {
        let refresh = store_refresh(&self);
        let fresh = match tokio::time::timeout(METRICS_STORE_BUDGET, refresh_done(refresh)).await {
            Ok(read) => read == Some(true),
            Err(_) => {
                // Only a budget that ran out is a read timeout; a store
                // that answered with an error makes the page stale too
                // (`Ok(Some(false))`) but is not counted here.
                self.metrics().store_read_timeouts.inc();
                false
            }
        };
        self.metrics().metrics_stale.set(i64::from(!fresh));
        // Everything else on the page is in memory.
        self.encode_metrics()
    }

    async fn status_document(&self) -> Result<Value, Unavailable> {
        self.read_bounded(App::status_document(self)).await
    }

    async fn status_page(&self) -> Result<(Value, BTreeMap<String, Timeline>), Unavailable> {
        self.read_bounded(async {
            let doc = App::status_document(self).await;
            let timelines = App::status_timelines(self).await;
            (doc, timelines)
        })
        .await
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
        // Acknowledging the stream also acknowledges the findings of its
        // `provider_missed` pages (issue #45), in the same audited
        // transaction; their pages resolve through the outbox.
        let outcome = self
            .guarded(self.store().acknowledge(stream, created_by, comment, audit))
            .await?;
        self.outbox_wake.notify_one();
        Ok(outcome)
    }

    async fn replay_stream(
        self: Arc<Self>,
        stream: String,
        call: ReplayCall,
    ) -> Result<ReplayOutcome, Unavailable> {
        let config = self.config();
        let notifiers = config
            .streams
            .get(&stream)
            .map(|s| s.notify.clone())
            .unwrap_or_default();
        let now = self.store().now();
        let (scope, (from, to)) = match call.window {
            Some(window) => (ReplayScope::Window, window),
            None => (ReplayScope::DeadLetters, (now, now)),
        };
        let request = ReplayRequest {
            stream,
            from,
            to,
            types: call.types,
            dry_run: call.dry_run,
            by: call.by,
            now,
            audit: config.audit.enabled,
            notifiers,
            config_path: super::forward::config_path(&config),
        };
        // Each chunk is one transaction under the store timeout; the
        // whole replay runs as its own task, so a caller that hangs up
        // does not stop it between chunks, before its audit entry.
        let app = Arc::clone(&self);
        let replay = tokio::spawn(async move {
            replay_in_chunks(request, scope, REPLAY_CHUNK, |chunk| {
                let app = Arc::clone(&app);
                async move { app.guarded(app.store().replay_forwards_chunk(chunk)).await }
            })
            .await
        });
        let outcome = replay.await.map_err(|e| {
            Unavailable::Store(StoreError::Sql(format!("the replay stopped: {e}")))
        })??;
        if !call.dry_run {
            self.forward_wake.notify_one();
            self.outbox_wake.notify_one();
        }
        Ok(outcome)
    }

    async fn list_forwards(
        &self,
        stream: String,
        state: Option<&'static str>,
        limit: usize,
    ) -> Result<ForwardList, Unavailable> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut list = self
            .guarded(
                self.store()
                    .list_forwards(stream, state.map(str::to_string), limit),
            )
            .await?;
        // Subjects are stored veiled under `[store] encryption_key`; the
        // operator reads them as a page would (`store::veil`).
        let config = self.config();
        let veil = config.store.sealer.veil();
        for row in &mut list.rows {
            if let Some(subject) = &mut row.subject {
                *subject = veil.reveal(subject).into_owned();
            }
            if let Some(error) = &mut row.last_error {
                *error = veil.reveal(error).into_owned();
            }
        }
        Ok(list)
    }

    async fn retry_forwards(
        &self,
        call: ForwardCall,
        delivery_id: Option<String>,
    ) -> Result<RetryOutcome, Unavailable> {
        let action = self.operator_action(&call.stream, call.by, call.comment);
        let outcome = self
            .guarded(self.store().retry_forwards(action, delivery_id))
            .await?;
        if matches!(outcome, RetryOutcome::Retried { .. }) {
            self.forward_wake.notify_one();
        }
        Ok(outcome)
    }

    async fn skip_forward(
        &self,
        call: ForwardCall,
        delivery_id: String,
    ) -> Result<Verdict, Unavailable> {
        let action = self.operator_action(&call.stream, call.by, call.comment);
        let verdict = self
            .guarded(self.store().skip_forward(action, delivery_id))
            .await?;
        if verdict == Verdict::Go {
            // What waited behind it may go now, and its page is queued.
            self.forward_wake.notify_one();
            self.outbox_wake.notify_one();
        }
        Ok(verdict)
    }

    async fn open_ack_code(&self, code: [u8; 32]) -> Result<LinkState, Unavailable> {
        self.guarded(self.store().open_ack_code(code)).await
    }

    async fn confirm_ack_code(&self, code: [u8; 32]) -> Result<LinkUse, Unavailable> {
        let audit = self.config().audit.enabled;
        self.guarded(self.store().confirm_ack_code(code, audit))
            .await
    }

    async fn idempotency_begin(&self, key: IdempotencyKey) -> Result<Begun, Unavailable> {
        self.guarded(self.store().idempotency_begin(key)).await
    }

    async fn idempotency_finish(
        &self,
        key: IdempotencyKey,
        started: DateTime<Utc>,
        answer: StoredAnswer,
    ) -> Result<bool, Unavailable> {
        self.guarded(self.store().idempotency_finish(key, started, answer))
            .await
    }

    async fn idempotency_release(
        &self,
        key: IdempotencyKey,
        started: DateTime<Utc>,
    ) -> Result<bool, Unavailable> {
        self.guarded(self.store().idempotency_release(key, started))
            .await
    }
}
