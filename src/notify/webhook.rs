//! `kind = "webhook"`: POSTs the documented JSON, signed per Standard
//! Webhooks when a `secret` is set. `webhook-id` and `Idempotency-Key` are
//! the page key: the same on every retry of one page.

use super::payload::{details, full_summary, rfc};
use super::{http::Client, Attempt, Kind, Outcome, Page};
use crate::config::WebhookConfig;
use crate::ingest::signature::sign;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use std::time::Duration;

/// Headers for one attempt (signature over exactly `body`).
pub fn headers(
    config: &WebhookConfig,
    page: &Page,
    sent_at: DateTime<Utc>,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let ts = sent_at.timestamp();
    let mut h = vec![
        ("webhook-id", page.key.clone()),
        ("webhook-timestamp", ts.to_string()),
        ("Idempotency-Key", page.key.clone()),
    ];
    if let Some(key) = &config.secret {
        h.push(("webhook-signature", sign(key, &page.key, ts, body)));
    }
    h
}

pub async fn send(
    client: &Client,
    config: &WebhookConfig,
    page: &Page,
    now: DateTime<Utc>,
    timeout: Duration,
) -> Outcome {
    let body = body(page, now).to_string().into_bytes();
    let headers = headers(config, page, now, &body);
    client
        .post_json(config.url.expose(), &headers, body, timeout)
        .await
}

#[async_trait::async_trait]
impl Kind for WebhookConfig {
    async fn send(&self, attempt: &Attempt<'_>, page: &Page) -> Outcome {
        send(attempt.http, self, page, attempt.now, attempt.timeout).await
    }

    fn urls(&self) -> Vec<&str> {
        vec![self.url.expose()]
    }
}

/// `kind = "webhook"`: the documented body.
pub fn body(page: &Page, sent_at: DateTime<Utc>) -> Value {
    json!({
        "status": if page.firing { "firing" } else { "resolved" },
        "alert": {
            "id": page.alert_id,
            "kind": page.alert_kind.as_str(),
            "stream": page.stream,
            "severity": page.severity,
            "started_at": rfc(page.started_at),
            "resolved_at": page.resolved_at.map(rfc),
            "summary": full_summary(page),
            "details": details(page),
        },
        "sent_at": rfc(sent_at),
    })
}
