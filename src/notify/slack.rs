//! `kind = "slack"`: an incoming-webhook message. The URL embeds a token,
//! so it is only ever shown as `https://hooks.slack.com`.

use super::payload::{
    ack_link, endpoint_fact, hint_label, local_and_utc, operator_hint, runbook_url, test_prefix,
    ID_MAX,
};
use super::{http::Client, text, Attempt, Kind, Outcome, Page};
use crate::config::SlackConfig;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::time::Duration;

/// Slack truncates a message's `text` beyond 40,000 characters
/// (https://api.slack.com/changelog/2018-04-truncating-really-long-messages),
/// cutting off whatever follows (the alert id, how to acknowledge). The
/// summary gets a part of that, so the lines after it always fit.
pub const SLACK_TEXT_MAX: usize = 40_000;
pub const SLACK_SUMMARY_MAX: usize = 12_000;

pub async fn send(
    client: &Client,
    config: &SlackConfig,
    page: &Page,
    timeout: Duration,
) -> Outcome {
    let body = message(page).to_string().into_bytes();
    client
        .post_json(config.url.expose(), &[], body, timeout)
        .await
}

#[async_trait::async_trait]
impl Kind for SlackConfig {
    async fn send(&self, attempt: &Attempt<'_>, page: &Page) -> Outcome {
        send(attempt.http, self, page, attempt.timeout).await
    }

    fn urls(&self) -> Vec<&str> {
        vec![self.url.expose()]
    }
}

/// `kind = "slack"`: a readable incoming-webhook message. Every field is
/// escaped for mrkdwn (`text::slack`): a reconciliation subject such as
/// `<!channel> <https://evil.example|Sign in>` must not ping a channel or
/// show a disguised link; values inside a code span cannot close it.
pub fn message(page: &Page) -> Value {
    let mut text = String::new();
    let icon = if page.firing {
        ":rotating_light:"
    } else {
        ":white_check_mark:"
    };
    let _ = write!(
        text,
        "{icon} {}*{}* ({}) `{}`: {}",
        test_prefix(page),
        page.status_word(),
        text::slack(&page.severity, ID_MAX),
        text::slack_code(&page.stream, ID_MAX),
        text::slack(&page.summary, SLACK_SUMMARY_MAX)
    );
    if let Some(since) = page.silent_since {
        let _ = write!(text, "\n• Silent since: {}", local_and_utc(page, since));
    }
    let _ = write!(
        text,
        "\n• Firing since: {}",
        local_and_utc(page, page.started_at)
    );
    if let Some(r) = page.resolved_at {
        let _ = write!(text, "\n• Resolved at: {}", local_and_utc(page, r));
    }
    if page.is_silence() {
        let _ = write!(
            text,
            "\n• Threshold: {} of business time (calendar `{}`: {})",
            page.threshold_text(),
            text::slack_code(&page.calendar, ID_MAX),
            text::slack(&page.business_hours.join(", "), SLACK_SUMMARY_MAX)
        );
    } else if let Some((label, endpoint, source)) = endpoint_fact(page) {
        let _ = write!(
            text,
            "\n• {label}: `{}`",
            text::slack_code(endpoint, ID_MAX)
        );
        if let Some(source) = source {
            let _ = write!(text, " (`{}`)", text::slack_code(source, ID_MAX));
        }
    }
    let _ = write!(
        text,
        "\n• Alert id: `{}`",
        text::slack_code(&page.alert_id, ID_MAX)
    );
    if let Some(hint) = operator_hint(page) {
        let _ = write!(
            text,
            "\n• {}: `{}`",
            hint_label(page),
            text::slack_code(&hint, SLACK_SUMMARY_MAX)
        );
    }
    // Slack makes a link of it; the URL is ours (config), escaped like any
    // text so it cannot carry a label or a mention of its own.
    let _ = write!(
        text,
        "\n• Runbook: {}",
        text::slack(&runbook_url(page), SLACK_SUMMARY_MAX)
    );
    let mut message = json!({ "text": text });
    // A link button (Block Kit, in an attachment so the full `text` above
    // still shows): clicking it opens the confirmation page, which alone
    // acknowledges. The URL is ours (public_url plus a base64url code).
    if let Some(url) = ack_link(page) {
        message["attachments"] = json!([{
            "blocks": [{
                "type": "actions",
                "elements": [{
                    "type": "button",
                    "text": { "type": "plain_text", "text": super::pagerduty::ACK_LINK_TEXT },
                    "url": url,
                    "style": "primary",
                }],
            }],
        }]);
    }
    message
}
