//! `kind = "pagerduty"`: Events API v2. The `dedup_key` (alert id) makes a
//! retried trigger collapse into the same incident; the resolve closes it.

use super::{http::Client, payload, Outcome, Page};
use crate::config::PagerDutyConfig;
use std::time::Duration;

pub async fn send(
    client: &Client,
    config: &PagerDutyConfig,
    page: &Page,
    timeout: Duration,
) -> Outcome {
    let body = payload::pagerduty_event(config, page)
        .to_string()
        .into_bytes();
    let headers = [("Idempotency-Key", page.key.clone())];
    client.post_json(&config.url, &headers, body, timeout).await
}
