//! `kind = "webhook"`: POSTs the documented JSON, signed per Standard
//! Webhooks when a `secret` is set. `webhook-id` and `Idempotency-Key` are
//! the page key: the same on every retry of one page.

use super::{http::Client, payload, Outcome, Page};
use crate::config::WebhookConfig;
use crate::ingest::signature::sign;
use chrono::{DateTime, Utc};
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
    let body = payload::webhook_body(page, now).to_string().into_bytes();
    let headers = headers(config, page, now, &body);
    client
        .post_json(config.url.expose(), &headers, body, timeout)
        .await
}
