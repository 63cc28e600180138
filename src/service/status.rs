//! What the status page needs beyond the stream evaluation: the audit
//! section of `/v1/status` and each stream's 7-day timeline.

use super::app::App;
use crate::status::timeline::{self, Timeline};
use chrono::{SecondsFormat, TimeDelta};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Newest arrivals read per stream for its timeline: ticks beyond a few
/// hundred a week merge into one band anyway, and the cap bounds the read.
pub const TIMELINE_ARRIVALS: i64 = 500;
/// Streams that get a timeline on one page (the rest are listed without):
/// bounds the page's size and the store work behind one request.
pub const TIMELINE_STREAMS: usize = 100;

impl App {
    /// The `audit` section of `/v1/status`: chain head and last checkpoint.
    pub async fn audit_status(&self) -> Value {
        let enabled = self.config().audit.enabled;
        match self.store.audit_summary().await {
            Ok(a) => json!({
                "enabled": enabled,
                "head_seq": a.head_seq,
                "head_hash": a.head_hash,
                "last_checkpoint": a.last_checkpoint.map(|c| json!({
                    "seq": c.seq,
                    "at": c.at.to_rfc3339_opts(SecondsFormat::Millis, true),
                    "signed": c.signed,
                })),
            }),
            Err(e) => {
                tracing::error!(error = %e, "status: audit state unreadable");
                json!({ "enabled": enabled, "error": "audit state unreadable" })
            }
        }
    }

    /// Timelines of the first `TIMELINE_STREAMS` streams (by name), ending now.
    pub async fn status_timelines(&self) -> BTreeMap<String, Timeline> {
        let config = self.config();
        let now = self.clock.now();
        let rows: Vec<_> = self
            .stream_rows()
            .into_iter()
            .filter(|r| config.streams.contains_key(&r.name))
            .take(TIMELINE_STREAMS)
            .collect();
        let names = rows.iter().map(|r| r.name.clone()).collect();
        let since = now - TimeDelta::days(timeline::DAYS);
        let arrivals = match self
            .store
            .recent_arrivals(names, since, TIMELINE_ARRIVALS)
            .await
        {
            Ok(a) => a.into_iter().collect::<BTreeMap<_, _>>(),
            Err(e) => {
                tracing::error!(error = %e, "status page: arrivals unreadable");
                BTreeMap::new()
            }
        };
        rows.iter()
            .filter_map(|row| {
                let stream = config.streams.get(&row.name)?;
                let list = arrivals.get(&row.name).map(Vec::as_slice).unwrap_or(&[]);
                let times = list
                    .iter()
                    .filter(|a| stream.event_filter.feeds_clock(&a.event_type))
                    .map(|a| a.at)
                    .collect();
                let truncated = list.len() as i64 >= TIMELINE_ARRIVALS;
                let t = timeline::build(
                    &config.calendar_of(stream),
                    &stream.policy,
                    row.watch_started_at,
                    times,
                    truncated,
                    now,
                );
                Some((row.name.clone(), t))
            })
            .collect()
    }
}
