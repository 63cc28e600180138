//! The sidecar's side of Svix operational webhooks: applying them, the
//! grouping timer for bursts of exhausted messages, status and metrics.

use super::core::Core;
use super::replicas::Lead;
use crate::config::SvixConfig;
use crate::domain::svix::DisableTrigger;
use crate::ingest::svix_ops::OpEvent;
use crate::store::svix::{SvixApply, SvixPage, GROUPED_ENDPOINT, MAX_ENDPOINTS_PER_SOURCE};
use crate::store::{EventOutcome, NewEvent, StoreError};
use chrono::SecondsFormat;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::watch;

/// The Svix concern: applying operational events and acknowledgements
/// (through the store, which decides the alerts), announcing the pages
/// they cause, the Svix gauges and the `svix` section of `/v1/status`.
pub struct Svix {
    core: Arc<Core>,
}

impl Svix {
    pub(super) fn new(core: Arc<Core>) -> Svix {
        Svix { core }
    }

    /// A template of where `source`'s pages for this endpoint go.
    pub fn apply(
        &self,
        svix: &SvixConfig,
        event: OpEvent,
        event_type: &str,
        endpoint: Option<(&str, Option<&str>)>,
    ) -> SvixApply {
        let (stream, mapped) = match endpoint {
            Some((id, uid)) => svix.stream_for(id, uid),
            None => (svix.streams.first().cloned().unwrap_or_default(), false),
        };
        // A mapped endpoint feeds its stream; an unmapped one any of the
        // source's streams, so a redelivery on any of them ends a loss.
        let join_streams = if mapped {
            vec![stream.clone()]
        } else {
            svix.streams.clone()
        };
        SvixApply {
            source: svix.name.clone(),
            stream,
            notifiers: svix.notify.clone(),
            event,
            clears_on: svix.clear_on.clone(),
            event_type: event_type.to_string(),
            mapped,
            now: self.core.clock.now(),
            endpoint_map: Arc::new(svix.endpoints.clone()),
            join_streams,
            audit: self.core.config().audit.enabled,
        }
    }

    pub async fn record(
        &self,
        event: NewEvent,
        apply: SvixApply,
    ) -> Result<(EventOutcome, Vec<SvixPage>), StoreError> {
        let result = self.core.store.record_svix(event, apply).await;
        self.core.note_storage(&result);
        let (outcome, pages) = result?;
        self.announce(&pages);
        Ok((outcome, pages))
    }

    /// Acknowledges lost messages of one endpoint: (acknowledged now, still
    /// lost). When that resolves the critical "messages exhausted" alert,
    /// the resolve page is queued and, with the audit log on, an audit entry
    /// naming `by` commits in the same transaction.
    pub async fn acknowledge(
        &self,
        apply: SvixApply,
        endpoint_id: String,
        msg_ids: Vec<String>,
        by: String,
    ) -> Result<(usize, u64), StoreError> {
        // Filed like the operational events (`svix:SOURCE`), so one export
        // of the source shows what happened to it and who acknowledged.
        let entry = self.core.config().audit.enabled.then(|| NewEvent {
            stream: format!("svix:{}", apply.source),
            delivery_id: Some(format!(
                "svix-ack-{}-{}-{}",
                apply.source,
                endpoint_id,
                apply.now.timestamp_millis()
            )),
            event_type: "hushwatch.svix.acknowledged".to_string(),
            event_time: None,
            received_at: apply.now,
            feeds_clock: false,
            body_sha256: None,
            channel: "admin",
            signature_verified: false,
            subject_ids: vec![
                ("created_by".to_string(), by),
                ("svix_source".to_string(), apply.source.clone()),
                ("endpoint_id".to_string(), endpoint_id.clone()),
                // The count, not the ids: one request may name thousands.
                ("msg_count".to_string(), msg_ids.len().to_string()),
            ],
            audit: true,
            access: None,
            forward: None,
        });
        let result = self
            .core
            .store
            .svix_acknowledge_audited(apply, endpoint_id, msg_ids, entry)
            .await;
        self.core.note_storage(&result);
        let (acknowledged, remaining, pages) = result?;
        self.announce(&pages);
        Ok((acknowledged, remaining))
    }

    pub fn announce(&self, pages: &[SvixPage]) {
        for p in pages {
            tracing::warn!(
                endpoint = %crate::http::Escaped(&p.endpoint_id),
                alert = p.alert.as_str(),
                firing = p.firing,
                severity = p.severity.as_str(),
                "svix alert transition"
            );
        }
        if !pages.is_empty() {
            self.core.outbox_wake.notify_one();
        }
    }

    /// Sets the Svix gauges and counters from the stored state; false
    /// (gauges unchanged) when the store could not be read.
    pub async fn refresh_metrics(&self) -> bool {
        if self.core.config().svix.is_empty() {
            return true;
        }
        let Ok(rows) = self.core.store.svix_endpoints().await else {
            return false;
        };
        let m = &self.core.metrics;
        for row in rows {
            let labels = [row.source.as_str(), row.endpoint_id.as_str()];
            m.svix_disabled
                .with_label_values(&labels)
                .set(i64::from(row.disabled.is_some()));
            m.svix_disabled_manually
                .with_label_values(&labels)
                .set(i64::from(row.disabled == Some(DisableTrigger::Manual)));
            m.svix_failing
                .with_label_values(&labels)
                .set(i64::from(row.failing > 0));
            m.svix_lost
                .with_label_values(&labels)
                .set(row.lost.len() as i64);
            let counter = m.svix_exhausted.with_label_values(&labels);
            // The store's total only grows; catch the counter up to it.
            let behind = row.exhausted_total.saturating_sub(counter.get());
            counter.inc_by(behind);
        }
        true
    }

    /// The `svix` section of `/v1/status`.
    pub async fn status(&self) -> Result<Value, StoreError> {
        let config = self.core.config();
        let rfc = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        let rows = self.core.store.svix_endpoints().await?;
        let endpoints: Vec<Value> = rows
            .iter()
            .map(|row| {
                let source = config.svix.get(&row.source);
                let mapping = source.map(|s| s.stream_for(&row.endpoint_id, row.endpoint_uid.as_deref()));
                let stream = mapping.as_ref().map(|m| m.0.clone());
                // Not matched by id or (stored) uid although the source maps
                // endpoints: its events are kept, filed under the source's
                // first stream, and shown as unmapped rather than dropped.
                let unmapped = row.endpoint_id != GROUPED_ENDPOINT
                    && source.is_some_and(|s| !s.endpoints.is_empty())
                    && mapping.as_ref().is_some_and(|m| !m.1);
                let state = if row.deleted {
                    "deleted"
                } else if row.disabled.is_some() {
                    "disabled"
                } else if !row.lost.is_empty() {
                    "exhausted"
                } else if row.failing > 0 {
                    "failing"
                } else {
                    "ok"
                };
                json!({
                    "source": row.source,
                    "endpoint_id": row.endpoint_id,
                    // The row the endpoints past the cap share.
                    "grouped": row.endpoint_id == GROUPED_ENDPOINT,
                    "endpoint_uid": row.endpoint_uid,
                    "app_id": row.app_id,
                    "stream": stream,
                    "mapped": mapping.as_ref().is_some_and(|m| m.1),
                    "unmapped": unmapped,
                    "state": state,
                    "disabled": row.disabled.map(|t| json!({
                        "trigger": if t == crate::domain::svix::DisableTrigger::Manual { "manual" } else { "automatic" },
                        "fail_since": row.fail_since.map(rfc),
                        "since": row.disabled_at.map(rfc),
                    })),
                    "failing_messages": row.failing,
                    "exhausted_total": row.exhausted_total,
                    "lost_messages": row.lost.iter().map(|m| json!({
                        "msg_id": m.msg_id,
                        "msg_event_id": m.msg_event_id,
                        "status_code": m.status_code,
                        "attempt_at": m.attempt_at.map(rfc),
                    })).collect::<Vec<_>>(),
                    // Lost messages whose svix-id was later accepted on a
                    // stream this endpoint feeds (the newest; total counts all).
                    "recovered_total": row.recovered_total,
                    "recovered_messages": row.recovered.iter().map(|m| json!({
                        "msg_id": m.msg_id,
                        "msg_event_id": m.msg_event_id,
                        "recovered_at": m.recovered_at.map(rfc),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        // Sources that hit the cap: their further endpoints are folded into
        // the `other` row, which the status page and `hushwatch status` say.
        let mut grouped_sources: Vec<&str> = rows
            .iter()
            .filter(|r| r.endpoint_id == GROUPED_ENDPOINT)
            .map(|r| r.source.as_str())
            .collect();
        grouped_sources.dedup();
        let sources: serde_json::Map<String, Value> = config
            .svix
            .values()
            .map(|s| (s.name.clone(), json!({ "flavor": s.flavor.as_str() })))
            .collect();
        Ok(json!({
            "sources": sources,
            "max_endpoints_per_source": MAX_ENDPOINTS_PER_SOURCE,
            "grouped_sources": grouped_sources,
            "endpoints": endpoints,
        }))
    }
}

/// Every `group_window`: lost messages joined with their redelivery, and
/// one updated page per endpoint whose burst of exhausted messages grew
/// since its last page.
pub async fn regroup_loop(svix: Arc<Svix>, lead: Lead, mut shutdown: watch::Receiver<bool>) {
    let core = &svix.core;
    loop {
        let config = core.config();
        let window = config.svix.values().map(|s| s.group_window).min();
        let Some(window) = window else {
            // No Svix sources: wait for shutdown (a reload restarts nothing
            // here; sources added by reload are picked up on the next start).
            let _ = shutdown.changed().await;
            return;
        };
        tokio::select! {
            _ = core.clock.sleep_until(core.clock.now() + window) => {}
            _ = shutdown.changed() => return,
        }
        // The grouping timer is housekeeping: the leader's alone.
        if lead.housekeeping_term().await.is_none() {
            continue;
        }
        // Every endpoint with lost messages, not only those whose count
        // grew: `svix_regroup` first joins lost messages with redeliveries
        // accepted since (in its transaction, so on every replica and
        // after a restart alike), then pages a grown count.
        let Ok(rows) = core.store.svix_endpoints().await else {
            continue;
        };
        for source in config.svix.values() {
            let with_lost = rows
                .iter()
                .filter(|r| r.source == source.name && !r.lost.is_empty())
                .map(|r| (r.endpoint_id.clone(), r.endpoint_uid.clone()));
            for (id, uid) in with_lost {
                let apply = svix.apply(
                    source,
                    OpEvent::Other,
                    "regroup",
                    Some((&id, uid.as_deref())),
                );
                match core.store.svix_regroup(apply, id).await {
                    Ok(pages) => svix.announce(&pages),
                    Err(e) => {
                        tracing::error!(error = %e, "could not queue the grouped exhausted page")
                    }
                }
            }
        }
    }
}
