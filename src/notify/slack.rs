//! `kind = "slack"`: an incoming-webhook message. The URL embeds a token,
//! so it is only ever shown as `https://hooks.slack.com`.

use super::{http::Client, payload, Outcome, Page};
use crate::config::SlackConfig;
use std::time::Duration;

pub async fn send(
    client: &Client,
    config: &SlackConfig,
    page: &Page,
    timeout: Duration,
) -> Outcome {
    let body = payload::slack_message(page).to_string().into_bytes();
    client
        .post_json(config.url.expose(), &[], body, timeout)
        .await
}
