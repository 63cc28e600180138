//! The sidecar's side of Svix operational webhooks: applying them, the
//! grouping timer for bursts of exhausted messages, status and metrics.

use super::app::App;
use crate::config::SvixConfig;
use crate::domain::svix::DisableTrigger;
use crate::ingest::svix_ops::OpEvent;
use crate::store::svix::{SvixApply, SvixPage};
use crate::store::{EventOutcome, NewEvent, StoreError};
use chrono::SecondsFormat;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::watch;

impl App {
    /// A template of where `source`'s pages for this endpoint go.
    pub fn svix_apply(
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
        SvixApply {
            source: svix.name.clone(),
            stream,
            notifiers: svix.notify.clone(),
            event,
            clears_on: svix.clear_on.clone(),
            event_type: event_type.to_string(),
            mapped,
            now: self.clock.now(),
        }
    }

    pub async fn svix_record(
        &self,
        event: NewEvent,
        apply: SvixApply,
    ) -> Result<(EventOutcome, Vec<SvixPage>), StoreError> {
        let result = self.store.record_svix(event, apply).await;
        self.note_storage(&result);
        let (outcome, pages) = result?;
        self.announce(&pages);
        Ok((outcome, pages))
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
            self.outbox_wake.notify_one();
        }
    }

    /// Sets the Svix gauges and counters from the stored state.
    pub async fn refresh_svix_metrics(&self) {
        if self.config().svix.is_empty() {
            return;
        }
        let Ok(rows) = self.store.svix_endpoints().await else {
            return;
        };
        let m = &self.metrics;
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
    }

    /// The `svix` section of `/v1/status`.
    pub async fn svix_status(&self) -> Result<Value, StoreError> {
        let config = self.config();
        let rfc = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        let rows = self.store.svix_endpoints().await?;
        let endpoints: Vec<Value> = rows
            .iter()
            .map(|row| {
                let stream = config.svix.get(&row.source).map(|s| s.stream_for(&row.endpoint_id, row.endpoint_uid.as_deref()).0);
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
                    "endpoint_uid": row.endpoint_uid,
                    "app_id": row.app_id,
                    "stream": stream,
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
                })
            })
            .collect();
        Ok(json!({ "endpoints": endpoints }))
    }
}

/// Every `group_window`, one updated page per endpoint whose burst of
/// exhausted messages grew since its last page.
pub async fn regroup_loop(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let config = app.config();
        let window = config.svix.values().map(|s| s.group_window).min();
        let Some(window) = window else {
            // No Svix sources: wait for shutdown (a reload restarts nothing
            // here; sources added by reload are picked up on the next start).
            let _ = shutdown.changed().await;
            return;
        };
        tokio::select! {
            _ = app.clock.sleep_until(app.clock.now() + window) => {}
            _ = shutdown.changed() => return,
        }
        // The grouping timer is housekeeping: the leader's alone.
        if super::replicas::housekeeping_term(&app).await.is_none() {
            continue;
        }
        for svix in config.svix.values() {
            let Ok(grown) = app.store.svix_grown(svix.name.clone()).await else {
                continue;
            };
            for (id, uid) in grown {
                let apply =
                    app.svix_apply(svix, OpEvent::Other, "regroup", Some((&id, uid.as_deref())));
                match app.store.svix_regroup(apply, id).await {
                    Ok(pages) => app.announce(&pages),
                    Err(e) => {
                        tracing::error!(error = %e, "could not queue the grouped exhausted page")
                    }
                }
            }
        }
    }
}
