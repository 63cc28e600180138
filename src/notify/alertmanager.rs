//! `kind = "alertmanager"`: POST /api/v2/alerts to every configured member
//! of the cluster. Alertmanager dedups by label set, so posting to all
//! members (and re-posting while firing) is safe; the page counts as
//! delivered once any member accepted it (members gossip), and the
//! outcome of the others is logged.

use super::kind::AlertKind;
use super::payload::{
    ack_link, local_and_utc, operator_hint, resolve_summary, rfc, runbook_url, test_prefix, ID_MAX,
    TEXT_MAX,
};
use super::{http::Client, text, Attempt, Cause, Kind, Outcome, Page};
use crate::config::AlertmanagerConfig;
use serde_json::{json, Value};
use std::time::Duration;

/// Alertmanager sets no limit on annotations, but its own PagerDuty
/// notifier cuts a summary to 1,024 characters and chat receivers show a
/// line: the same bound as PagerDuty's summary.
pub const AM_SUMMARY_MAX: usize = 1024;

/// Where a cut summary's full text is.
const IN_DESCRIPTION: &str = "; the full text is in the description annotation";

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
    let body = alerts(page).to_string().into_bytes();
    let posts = config.urls.iter().map(|base| {
        let body = body.clone();
        async move { client.post_json(&endpoint(base), &[], body, timeout).await }
    });
    let results = futures_join_all(posts).await;
    if results.contains(&Outcome::Delivered) {
        let link = super::link_secrets(page.ack_url.as_deref());
        let link: Vec<&str> = link.iter().map(String::as_str).collect();
        for o in results.iter().filter(|o| **o != Outcome::Delivered) {
            // A member's error text may echo the body, acknowledge link
            // included (the returned outcome is scrubbed by `Sender`).
            let shown = super::scrub(&format!("{o:?}"), &link);
            tracing::warn!(stream = %page.stream, outcome = %shown, "an Alertmanager cluster member did not accept the alert; another one did");
        }
        return Outcome::Delivered;
    }
    // Prefer a retryable outcome: one member being down is not permanent.
    results
        .iter()
        .find(|o| matches!(o, Outcome::Retry { .. }))
        .or(results.first())
        .cloned()
        .unwrap_or(Outcome::permanent(
            Cause::Refused,
            "no Alertmanager urls configured",
        ))
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
        out.push(r.unwrap_or(Outcome::retry(Cause::Ambiguous, "lost result", false)));
    }
    out
}

#[async_trait::async_trait]
impl Kind for AlertmanagerConfig {
    async fn send(&self, attempt: &Attempt<'_>, page: &Page) -> Outcome {
        send(attempt.http, self, page, attempt.timeout).await
    }

    fn urls(&self) -> Vec<&str> {
        self.urls.iter().map(String::as_str).collect()
    }
}

/// The Alertmanager alert for this page. Labels are the same for every
/// replica of hushwatch watching the same stream (no per-database ids), so
/// several replicas posting to one Alertmanager never double-page. The
/// alertname and the labels are those of the shipped Prometheus rules
/// (charts/hushwatch/rules/hushwatch.rules.yml), so both paths group,
/// inhibit and silence together.
pub fn alerts(page: &Page) -> Value {
    // Labels name the alert: a value too long is shortened with a digest
    // of the whole (`text::bounded_id`), so two alerts never merge.
    let label = |v: &str| text::bounded_id(v, ID_MAX);
    let line = format!("{}{}: {}", test_prefix(page), page.stream, page.summary);
    let mut alert = json!({
        "labels": {
            "alertname": alertname(page),
            "stream": label(&page.stream),
            "severity": label(&page.severity),
            "kind": label(page.alert_kind.as_str()),
        },
        "annotations": {
            "summary": text::bounded(&line, AM_SUMMARY_MAX, IN_DESCRIPTION),
            "description": text::bounded(&description(page), TEXT_MAX, ""),
            "alert_id": page.alert_id,
            // The annotation Prometheus rules use for the same link.
            "runbook_url": runbook_url(page),
        },
        "startsAt": rfc(page.started_at),
    });
    if let Some(source) = &page.source {
        alert["labels"]["source"] = json!(label(source));
    }
    if let Some(endpoint) = &page.endpoint_id {
        alert["labels"]["endpoint_id"] = json!(label(endpoint));
        // HushwatchNotificationsFailing (the rule this page shares its
        // name with) is per `notifier`.
        if page.alert_kind == AlertKind::Fallback {
            alert["labels"]["notifier"] = json!(label(endpoint));
        }
    }
    if let Some(resolved) = page.resolved_at {
        alert["endsAt"] = json!(rfc(resolved));
    }
    if page.test {
        alert["labels"]["test"] = json!("true");
    }
    // An annotation, not a label: labels name the alert, and this text
    // must not split one alert into two.
    if let Some(hint) = operator_hint(page) {
        alert["annotations"]["how_to_ack"] = json!(hint);
    }
    // Each re-post carries the link minted for it; Alertmanager keeps the
    // newest annotations, and the earlier links keep working.
    if let Some(url) = ack_link(page) {
        alert["annotations"]["ack_url"] = json!(url);
    }
    json!([alert])
}

/// The alert's name in Alertmanager (`AlertKind::alertname`): the shipped
/// rule's name where a rule watches the same condition, so both paths
/// group, inhibit and silence together.
pub fn alertname(page: &Page) -> &'static str {
    // Svix pages queued before schema v8 (`SvixUnrecorded`) did not
    // record which alert: the catch-all `IdentityWebhookAlert`.
    page.alert_kind.alertname()
}

fn description(page: &Page) -> String {
    if !page.is_silence() {
        return page.summary.clone();
    }
    if let Some(text) = resolve_summary(page) {
        return format!("Stream {}: {text}.", page.stream);
    }
    let since = page
        .silent_since
        .map(|t| format!(" since {}", local_and_utc(page, t)))
        .unwrap_or_default();
    format!(
        "Stream {} has received no events{since}; threshold {} of business time on calendar {} ({}).",
        page.stream,
        page.threshold_text(),
        page.calendar,
        page.business_hours.join(", ")
    )
}
