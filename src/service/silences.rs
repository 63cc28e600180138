//! Operator silences and acknowledgements on the service side: queuing
//! the firing pages a silence held once it ends, and the
//! `hushwatch_stream_silenced` / `hushwatch_silence_acknowledged` gauges.
//! The decisions themselves read persisted state in the store (see
//! `store::silences`), never this process's memory.

use super::core::Core;
use crate::store::silences::PAGE_KINDS;
use crate::store::{StoreError, Unreadable};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// The operator concern: held pages released when a silence ends, the
/// silenced/acknowledged gauges, maintenance windows stored as silences,
/// and the `operator` section of `/v1/status`.
pub struct Operator {
    core: Arc<Core>,
}

impl Operator {
    pub(super) fn new(core: Arc<Core>) -> Operator {
        Operator { core }
    }

    /// Queues held firing pages whose silence is over; returns when the
    /// next silence ends (the next moment a held page may be released),
    /// and the held pages this binary cannot read (they stay held).
    pub(super) async fn release_held_pages(
        &self,
    ) -> Result<(Option<DateTime<Utc>>, Vec<Unreadable>), StoreError> {
        // Read before the release: a silence that ends while the release
        // runs must still be a wake-up instant, or its held page would
        // wait for an unrelated wake-up.
        let before = self.core.clock.now();
        let released = self.core.store.release_held().await?;
        if released.paged > 0 {
            tracing::info!("a silence ended while its alert still fires: paging it now");
        }
        let silences = self.core.store.silences(before).await?;
        Ok((
            silences.iter().map(|s| s.ends_at).min(),
            released.unreadable,
        ))
    }

    /// Sets the per-stream silence and acknowledgement gauges from the
    /// store. On a storage error the gauges keep their last values and
    /// this answers false (`/metrics` then reports itself stale).
    pub async fn refresh_metrics(&self, streams: &[String]) -> bool {
        let now = self.core.clock.now();
        let (Ok(silences), Ok(acks)) = (
            self.core.store.silences(now).await,
            self.core.store.current_acks().await,
        ) else {
            return false;
        };
        // Only flagged streams are held; the page renders 0 for the rest,
        // and a deleted templated stream's series go with its mirror row.
        let mut flags = crate::metrics::StreamFlags::default();
        for stream in streams {
            // Any kind counts: a stream whose Svix pages are silenced is
            // muted too, and the gauge is there so nobody forgets that.
            if silences
                .iter()
                .any(|s| s.active_at(now) && PAGE_KINDS.iter().any(|k| s.matches(stream, k)))
            {
                flags.silenced.insert(stream.clone());
            }
        }
        flags.acknowledged = acks.into_iter().map(|a| a.stream).collect();
        self.core.metrics.set_stream_flags(flags);
        true
    }

    /// Stores the config's `[[streams.X.maintenance]]` windows as silences,
    /// so they take effect exactly like operator ones (and replicas share
    /// them through the store).
    pub(super) async fn sync_maintenance(&self) -> Result<(), StoreError> {
        let config = self.core.config();
        let windows = config
            .streams
            .values()
            .flat_map(|s| {
                s.maintenance
                    .iter()
                    .map(|w| (s.name.clone(), w.from, w.until, w.comment.clone()))
            })
            .collect();
        self.core
            .store
            .sync_maintenance(windows, config.audit.enabled)
            .await
    }

    /// The `operator` section of `/v1/status`: silences not ended yet and
    /// acknowledgements of episodes still firing; `None` when there are
    /// none (or the store cannot be read: the section is informational).
    pub async fn status(&self) -> Option<serde_json::Value> {
        let now = self.core.clock.now();
        let silences = self.core.store.silences(now).await.ok()?;
        let acks = self.core.store.current_acks().await.ok()?;
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
