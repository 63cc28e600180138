//! `kind = "email"`: SMTP through lettre (tokio, rustls).
//!
//! `smtp_url` is read by lettre itself (`AsyncSmtpTransport::from_url`,
//! through `config::notifiers::smtp_transport`, the same call config
//! loading makes): `smtp://host[:port]` plain (port 25),
//! `smtp://…?tls=required` STARTTLS (port 587), `smtps://host[:port]`
//! implicit TLS (port 465); credentials in the URL (`smtp://user:pass@host`,
//! percent-encoded) or in `username`/`password`. The `Message-ID` is the
//! page key, so a re-sent mail (after an ambiguous attempt) is recognisably
//! the same message, and every page of one alert episode references the
//! same thread id.

use super::{payload, redact_url, Outcome, Page};
use crate::config::notifiers::smtp_transport;
use crate::config::EmailConfig;
use lettre::message::header::ContentType;
use lettre::{AsyncTransport, Message};
use std::time::Duration;

/// The `Message-ID` of a page.
pub fn message_id(page: &Page) -> String {
    format!("<{}@hushwatch>", page.key)
}

/// The thread every page of one alert episode refers to.
pub fn thread_id(page: &Page) -> String {
    format!("<alert-{}@hushwatch>", page.alert_id)
}

/// Builds the message (pure apart from lettre's Date header).
pub fn build_message(config: &EmailConfig, page: &Page) -> Result<Message, String> {
    let mut b = Message::builder()
        .from(config.from.clone())
        .subject(payload::email_subject(page))
        .message_id(Some(message_id(page)))
        .references(thread_id(page))
        .in_reply_to(thread_id(page))
        .header(ContentType::TEXT_PLAIN);
    for to in &config.to {
        b = b.to(to.clone());
    }
    // lettre picks 7bit or quoted-printable (long lines) by itself.
    b.body(payload::email_body(page))
        .map_err(|e| format!("cannot build the message: {e}"))
}

pub async fn send(config: &EmailConfig, page: &Page, timeout: Duration) -> Outcome {
    let shown = redact_url(config.smtp_url.expose());
    let message = match build_message(config, page) {
        Ok(m) => m,
        Err(reason) => return Outcome::Permanent { reason },
    };
    let transport = match smtp_transport(&config.smtp_settings(), timeout) {
        Ok(t) => t,
        Err(reason) => return Outcome::Permanent { reason },
    };
    match tokio::time::timeout(timeout.saturating_mul(3), transport.send(message)).await {
        Err(_) => Outcome::retry(
            format!("{shown} did not finish the SMTP exchange in time (retrying with the same Message-ID)"),
            true,
        ),
        Ok(Ok(_)) => Outcome::Delivered,
        Ok(Err(e)) if e.is_permanent() => Outcome::Permanent {
            reason: format!("{shown} refused the message: {e}"),
        },
        Ok(Err(e)) => Outcome::retry(format!("{shown}: {e}"), !e.is_transient()),
    }
}
