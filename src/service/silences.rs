//! Operator silences and acknowledgements on the service side: queuing
//! the firing pages a silence held once it ends, and the
//! `hushwatch_stream_silenced` / `hushwatch_silence_acknowledged` gauges.
//! The decisions themselves read persisted state in the store (see
//! `store::silences`), never this process's memory.

use super::app::App;
use crate::store::silences::PAGE_KINDS;
use crate::store::StoreError;
use chrono::{DateTime, Utc};

impl App {
    /// Queues held firing pages whose silence is over; returns when the
    /// next silence ends (the next moment a held page may be released).
    pub(super) async fn release_held_pages(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        // Read before the release: a silence that ends while the release
        // runs must still be a wake-up instant, or its held page would
        // wait for an unrelated wake-up.
        let before = self.clock.now();
        if self.store.release_held().await? > 0 {
            tracing::info!("a silence ended while its alert still fires: paging it now");
        }
        let silences = self.store.silences(before).await?;
        Ok(silences.iter().map(|s| s.ends_at).min())
    }

    /// Sets the per-stream silence and acknowledgement gauges from the
    /// store. On a storage error the gauges keep their last values.
    pub async fn refresh_operator_metrics(&self) {
        let now = self.clock.now();
        let (Ok(silences), Ok(acks)) = (
            self.store.silences(now).await,
            self.store.current_acks().await,
        ) else {
            return;
        };
        let m = &self.metrics;
        // Rebuilt from the watched streams each time, so a deleted
        // templated stream's series disappear with it.
        m.stream_silenced.reset();
        m.silence_acknowledged.reset();
        for row in self.stream_rows() {
            // Any kind counts: a stream whose Svix pages are silenced is
            // muted too, and the gauge is there so nobody forgets that.
            let silenced = silences
                .iter()
                .any(|s| s.active_at(now) && PAGE_KINDS.iter().any(|k| s.matches(&row.name, k)));
            let acked = acks.iter().any(|a| a.stream == row.name);
            m.stream_silenced
                .with_label_values(&[row.name.as_str()])
                .set(i64::from(silenced));
            m.silence_acknowledged
                .with_label_values(&[row.name.as_str()])
                .set(i64::from(acked));
        }
    }

    /// Stores the config's `[[streams.X.maintenance]]` windows as silences,
    /// so they take effect exactly like operator ones (and replicas share
    /// them through the store).
    pub(super) async fn sync_maintenance(&self) -> Result<(), StoreError> {
        let config = self.config();
        let windows = config
            .streams
            .values()
            .flat_map(|s| {
                s.maintenance
                    .iter()
                    .map(|w| (s.name.clone(), w.from, w.until, w.comment.clone()))
            })
            .collect();
        self.store
            .sync_maintenance(windows, config.audit.enabled)
            .await
    }

    /// The `operator` section of `/v1/status`: silences not ended yet and
    /// acknowledgements of episodes still firing; `None` when there are
    /// none (or the store cannot be read: the section is informational).
    pub async fn operator_status(&self) -> Option<serde_json::Value> {
        let now = self.clock.now();
        let silences = self.store.silences(now).await.ok()?;
        let acks = self.store.current_acks().await.ok()?;
        if silences.is_empty() && acks.is_empty() {
            return None;
        }
        let rfc = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let silences: Vec<_> = silences
            .iter()
            .map(|s| {
                serde_json::json!({
                    "id": s.id,
                    "streams": s.streams,
                    "kinds": s.kinds,
                    "starts_at": rfc(s.starts_at),
                    "ends_at": rfc(s.ends_at),
                    "comment": s.comment,
                    "created_by": s.created_by,
                    "active": s.active_at(now),
                })
            })
            .collect();
        let acks: Vec<_> = acks
            .iter()
            .map(|a| {
                serde_json::json!({
                    "stream": a.stream,
                    "episode_started_at": rfc(a.started_at),
                    "created_by": a.created_by,
                    "comment": a.comment,
                    "created_at": rfc(a.created_at),
                })
            })
            .collect();
        Some(serde_json::json!({ "silences": silences, "acknowledgements": acks }))
    }
}
