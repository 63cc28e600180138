//! `kind = "alertmanager"`: POST /api/v2/alerts to every configured member
//! of the cluster. Alertmanager dedups by label set, so posting to all
//! members (and re-posting while firing) is safe; the page counts as
//! delivered once any member accepted it (members gossip), and the
//! outcome of the others is logged.

use super::{http::Client, payload, Outcome, Page};
use crate::config::AlertmanagerConfig;
use std::time::Duration;

/// How often a still-firing alert is re-posted. Alertmanager resolves an
/// alert that was not re-posted within `resolve_timeout` (default 5m).
pub const REPOST_EVERY: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

pub fn endpoint(base: &str) -> String {
    format!("{}/api/v2/alerts", base.trim_end_matches('/'))
}

pub async fn send(
    client: &Client,
    config: &AlertmanagerConfig,
    page: &Page,
    timeout: Duration,
) -> Outcome {
    let body = payload::alertmanager_alerts(page).to_string().into_bytes();
    let posts = config.urls.iter().map(|base| {
        let body = body.clone();
        async move { client.post_json(&endpoint(base), &[], body, timeout).await }
    });
    let results = futures_join_all(posts).await;
    if results.contains(&Outcome::Delivered) {
        for o in results.iter().filter(|o| **o != Outcome::Delivered) {
            tracing::warn!(stream = %page.stream, outcome = ?o, "an Alertmanager cluster member did not accept the alert; another one did");
        }
        return Outcome::Delivered;
    }
    // Prefer a retryable outcome: one member being down is not permanent.
    results
        .iter()
        .find(|o| matches!(o, Outcome::Retry { .. }))
        .or(results.first())
        .cloned()
        .unwrap_or(Outcome::Permanent {
            reason: "no Alertmanager urls configured".to_string(),
        })
}

/// Runs the futures concurrently and returns their outputs in order.
async fn futures_join_all<F: std::future::Future<Output = Outcome>>(
    futs: impl Iterator<Item = F>,
) -> Vec<Outcome> {
    let mut set = Vec::new();
    for f in futs {
        set.push(Box::pin(f));
    }
    let mut out = Vec::with_capacity(set.len());
    // Sequential awaits of already-created futures would not overlap, so
    // poll them together.
    let mut pending: Vec<Option<std::pin::Pin<Box<F>>>> = set.into_iter().map(Some).collect();
    let mut results: Vec<Option<Outcome>> = vec![None; pending.len()];
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (i, slot) in pending.iter_mut().enumerate() {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(o) => {
                        results[i] = Some(o);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    for r in results {
        out.push(r.unwrap_or(Outcome::retry("lost result", false)));
    }
    out
}
