//! `kind = "pagerduty"`: Events API v2. The `dedup_key` (alert id) makes a
//! retried trigger collapse into the same incident; the resolve closes it.

use super::payload::{ack_link, details, full_summary, rfc, runbook_url, test_prefix, ID_MAX};
use super::{http::Client, text, Attempt, Kind, Outcome, Page};
use crate::config::PagerDutyConfig;
use serde_json::{json, Value};
use std::time::Duration;

/// PagerDuty Events API v2 (https://developer.pagerduty.com/docs/events-api-v2/trigger-events/):
/// `payload.summary` at most 1,024 characters and `dedup_key` at most 255;
/// longer events are refused with 400, which loses the page. The whole
/// event must stay under 512 KB (Alertmanager's own PagerDuty notifier
/// enforces the same: `maxV2SummaryLenRunes = 1024`,
/// `maxEventSize = 512000`).
pub const PD_SUMMARY_MAX: usize = 1024;
pub const PD_DEDUP_KEY_MAX: usize = 255;

/// Where a cut summary's full text is.
const IN_DETAILS: &str = "; the full text is in custom_details.summary";

pub async fn send(
    client: &Client,
    config: &PagerDutyConfig,
    page: &Page,
    timeout: Duration,
) -> Outcome {
    let body = event(config, page).to_string().into_bytes();
    let headers = [("Idempotency-Key", page.key.clone())];
    client.post_json(&config.url, &headers, body, timeout).await
}

#[async_trait::async_trait]
impl Kind for PagerDutyConfig {
    async fn send(&self, attempt: &Attempt<'_>, page: &Page) -> Outcome {
        send(attempt.http, self, page, attempt.timeout).await
    }

    fn secrets(&self) -> Vec<String> {
        vec![self.routing_key.expose().to_string()]
    }
}

/// `kind = "pagerduty"`: an Events API v2 event; `dedup_key` is the alert
/// id, so the trigger and the resolve of one episode meet in one incident.
pub fn event(config: &PagerDutyConfig, page: &Page) -> Value {
    // The alert id is ours (36 characters); bounded all the same, the
    // same way for the trigger and the resolve so they still meet.
    let dedup_key = text::bounded_id(&page.alert_id, PD_DEDUP_KEY_MAX);
    if !page.firing {
        return json!({
            "routing_key": config.routing_key.expose(),
            "event_action": "resolve",
            "dedup_key": dedup_key,
        });
    }
    let line = format!("{}{}: {}", test_prefix(page), page.stream, page.summary);
    let summary = text::bounded(&line, PD_SUMMARY_MAX, IN_DETAILS);
    let mut details = details(page);
    if summary != line {
        details["summary"] = json!(full_summary(page));
    }
    let mut event = json!({
        "routing_key": config.routing_key.expose(),
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "client": "hushwatch",
        "payload": {
            "summary": summary,
            "source": "hushwatch",
            "severity": page.severity,
            "timestamp": rfc(page.started_at),
            "component": text::bounded_id(&page.stream, ID_MAX),
            "group": "hushwatch",
            "class": page.alert_kind.as_str(),
            "custom_details": details,
        },
    });
    // Events API v2 `links` (href and text): PagerDuty sets no length of
    // its own on them; the link is bounded by `config::server::PUBLIC_URL_MAX`
    // plus the code, far inside the 512 KB event.
    let mut links = Vec::new();
    if let Some(url) = ack_link(page).filter(|u| u.len() <= PD_LINK_MAX) {
        links.push(json!({ "href": url, "text": ACK_LINK_TEXT }));
    }
    // The runbook (also `custom_details.runbook_url`): from config, bounded
    // by `config::server::PUBLIC_URL_MAX` plus the kind.
    let runbook = runbook_url(page);
    if runbook.len() <= PD_LINK_MAX {
        links.push(json!({ "href": runbook, "text": RUNBOOK_LINK_TEXT }));
    }
    event["links"] = json!(links);
    event
}

/// The longest acknowledge link put in `links` (a longer one cannot come
/// from a valid `public_url`; the link stays in `custom_details` anyway).
pub const PD_LINK_MAX: usize = 2048;

/// The text of the runbook link in PagerDuty.
pub const RUNBOOK_LINK_TEXT: &str = "Runbook: what to check, what to run";

/// The text of the acknowledge link in PagerDuty and Slack.
pub const ACK_LINK_TEXT: &str = "Acknowledge in hushwatch";
