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

use super::payload::{
    ack_link, endpoint_fact, hint_label, local_and_utc, minutes_text, operator_hint, runbook_url,
    test_prefix, ACK_LINK_NOTE, ID_MAX, TEXT_MAX,
};
use super::{redact_url, text, Attempt, Cause, Kind, Outcome, Page};
use crate::config::notifiers::smtp_transport;
use crate::config::EmailConfig;
use crate::domain::duration::format_duration;
use lettre::message::header::ContentType;
use lettre::message::MultiPart;
use lettre::{AsyncTransport, Message};
use std::fmt::Write as _;
use std::time::Duration;

/// Email subject, in characters. RFC 5322 section 2.1.1 allows 998 per
/// line (78 recommended); mail clients show far fewer, and the body has
/// the full text.
pub const EMAIL_SUBJECT_MAX: usize = 200;

/// Where a cut subject's full text is.
const IN_BODY: &str = "; the full text is in the body";

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
        .subject(subject(page))
        .message_id(Some(message_id(page)))
        .references(thread_id(page))
        .in_reply_to(thread_id(page));
    for to in &config.to {
        b = b.to(to.clone());
    }
    // lettre picks 7bit or quoted-printable (long lines) by itself.
    let built = match html_body(page) {
        // With an acknowledge link: text and HTML alternatives, so a mail
        // client that shows HTML gets a button and every other the URL.
        Some(html) => b.multipart(MultiPart::alternative_plain_html(body(page), html)),
        None => b.header(ContentType::TEXT_PLAIN).body(body(page)),
    };
    built.map_err(|e| format!("cannot build the message: {e}"))
}

/// The HTML part of a page that carries an acknowledge link (`None`
/// otherwise: those stay plain text). The link is a plain `<a>`; the rest
/// is the text body in a `<pre>`. Every character of page text is
/// escaped, so a summary cannot add markup or a link of its own.
pub fn html_body(page: &Page) -> Option<String> {
    let url = ack_link(page)?;
    Some(format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>\n<body>\n\
         <p><a href=\"{href}\" style=\"display:inline-block;padding:10px 18px;background:#b3261e;color:#ffffff;text-decoration:none;border-radius:4px;font-family:sans-serif;font-weight:bold\">Acknowledge this alert</a></p>\n\
         <p style=\"font-family:sans-serif;font-size:13px;color:#555555\">{note}.</p>\n\
         <pre style=\"font-family:monospace;white-space:pre-wrap\">{text}</pre>\n</body></html>\n",
        title = text::html(&subject(page)),
        href = text::html(url),
        note = text::html(ACK_LINK_NOTE),
        text = text::html(&body(page)),
    ))
}

pub async fn send(config: &EmailConfig, page: &Page, timeout: Duration) -> Outcome {
    let shown = redact_url(config.smtp_url.expose());
    let message = match build_message(config, page) {
        Ok(m) => m,
        Err(reason) => return Outcome::permanent(Cause::Refused, reason),
    };
    let transport = match smtp_transport(&config.smtp_settings(), timeout) {
        Ok(t) => t,
        Err(reason) => return Outcome::permanent(Cause::Refused, reason),
    };
    match tokio::time::timeout(timeout.saturating_mul(3), transport.send(message)).await {
        Err(_) => Outcome::retry(
            Cause::Timeout,
            format!("{shown} did not finish the SMTP exchange in time (retrying with the same Message-ID)"),
            true,
        ),
        Ok(Ok(_)) => Outcome::Delivered,
        Ok(Err(e)) if e.is_permanent() => {
            Outcome::permanent(Cause::Refused, format!("{shown} refused the message: {e}"))
        }
        Ok(Err(e)) => Outcome::retry(smtp_cause(&e), format!("{shown}: {e}"), !e.is_transient()),
    }
}

/// The `reason` label of an SMTP failure that is retried: a 4xx reply is
/// the server refusing for now; a timeout or a failed TLS handshake is
/// named as such; any other error (the connection dropped mid-exchange)
/// may have left the message with the server.
fn smtp_cause(e: &lettre::transport::smtp::Error) -> Cause {
    if e.is_transient() {
        Cause::Refused
    } else if e.is_timeout() {
        Cause::Timeout
    } else if e.is_tls() {
        Cause::Connect
    } else {
        Cause::Ambiguous
    }
}

#[async_trait::async_trait]
impl Kind for EmailConfig {
    async fn send(&self, attempt: &Attempt<'_>, page: &Page) -> Outcome {
        send(self, page, attempt.timeout).await
    }

    fn urls(&self) -> Vec<&str> {
        vec![self.smtp_url.expose()]
    }

    fn secrets(&self) -> Vec<String> {
        self.password
            .iter()
            .map(|p| p.expose().to_string())
            .collect()
    }
}

/// Subject line of the email.
pub fn subject(page: &Page) -> String {
    let extra = match page.kind {
        crate::store::PageKind::Page => "",
        crate::store::PageKind::Reminder => " (reminder)",
        crate::store::PageKind::Escalation => " (escalation)",
    };
    let head = format!(
        "{}[{} {}] {}: ",
        test_prefix(page),
        page.status_word(),
        text::one_line(&page.severity),
        text::one_line(&page.stream),
    );
    // The summary gets what the subject has left; the body has all of it.
    let room = EMAIL_SUBJECT_MAX
        .saturating_sub(head.chars().count() + extra.chars().count())
        .max(40);
    format!(
        "{head}{}{extra}",
        text::bounded_line(&page.summary, room, IN_BODY)
    )
}

/// Plain-text body of the email.
pub fn body(page: &Page) -> String {
    let mut b = String::new();
    if page.test {
        b.push_str("THIS IS A TEST PAGE sent by `hushwatch notify-test`. No action is needed.\n\n");
    }
    // Plain text (no markup to escape), but one-line fields stay one line:
    // a newline in a summary or endpoint id could fake a line of the page.
    let _ = writeln!(
        b,
        "{} - {}",
        page.status_word(),
        text::one_line(&page.stream)
    );
    let _ = writeln!(b, "{}", text::bounded_line(&page.summary, TEXT_MAX, ""));
    b.push('\n');
    let _ = writeln!(b, "Severity:        {}", page.severity);
    let _ = writeln!(b, "Runbook:         {}", runbook_url(page));
    if let Some(url) = ack_link(page) {
        let _ = writeln!(b, "Acknowledge:     {url}");
        let _ = writeln!(b, "                 ({ACK_LINK_NOTE})");
    }
    if !page.is_silence() {
        let _ = writeln!(b, "Kind:            {}", page.alert_kind);
        if let Some((label, endpoint, source)) = endpoint_fact(page) {
            let endpoint = text::one_line(&text::bounded_id(endpoint, ID_MAX));
            let label = format!("{label}:");
            match source {
                Some(source) => {
                    let source = text::one_line(source);
                    let _ = writeln!(b, "{label:<17}{endpoint} (svix source \"{source}\")");
                }
                None => {
                    let _ = writeln!(b, "{label:<17}{endpoint}");
                }
            }
        }
        let _ = writeln!(b, "At:              {}", local_and_utc(page, page.at));
        b.push('\n');
        if let Some(hint) = operator_hint(page) {
            let _ = writeln!(b, "{}: {hint}", hint_label(page));
            b.push('\n');
        }
        let _ = writeln!(b, "Alert id: {}", page.alert_id);
        let _ = writeln!(b, "Page key: {}", page.key);
        return b;
    }
    if page.firing && page.relay_delivered {
        let _ = writeln!(
            b,
            "What is silent:  the app behind the relay has accepted no \"{}\" events (clock = \"delivered\").",
            page.stream
        );
    } else if page.firing {
        let _ = writeln!(
            b,
            "What is silent:  the stream \"{}\" has received no events.",
            page.stream
        );
    }
    if let Some(since) = page.silent_since {
        let _ = writeln!(b, "Silent since:    {}", local_and_utc(page, since));
    }
    if let Some(resumed) = page.resumed_at {
        let _ = writeln!(b, "Arrived again:   {}", local_and_utc(page, resumed));
    }
    if let Some(d) = page.business_silence {
        let _ = writeln!(b, "Silence:         {} of business time", minutes_text(d));
    }
    let _ = writeln!(
        b,
        "Fired at:        {}",
        local_and_utc(page, page.started_at)
    );
    if let Some(r) = page.resolved_at {
        let _ = writeln!(b, "Resolved at:     {}", local_and_utc(page, r));
    }
    let _ = writeln!(
        b,
        "Threshold:       {} of business time",
        page.threshold_text()
    );
    if let Some(m) = page.max_silence {
        let _ = writeln!(
            b,
            "Backstop:        {} of wall-clock time",
            format_duration(m)
        );
    }
    let _ = writeln!(
        b,
        "Business hours:  {} ({}, calendar \"{}\")",
        page.business_hours.join(", "),
        page.timezone.name(),
        page.calendar
    );
    b.push('\n');
    if page.firing && page.relay_delivered {
        // The provider may well be delivering: the summary says how many
        // events hushwatch holds for the app and the app's last answer.
        let _ = writeln!(
            b,
            "What to check:\n\
             - The relay: `hushwatch status --config {cfg}` (or GET /v1/status) shows what waits for the app, its last answer and the next attempt.\n\
             - The app's webhook handler: its logs for the deliveries hushwatch sent (header webhook-id), and that it verifies with the current secret.\n\
             - Once the app is fixed: `hushwatch forward retry --config {cfg} --stream {s}` sends what waits now (token in $HUSHWATCH_ADMIN_TOKEN).",
            cfg = page.config_path,
            s = page.stream
        );
        b.push('\n');
    } else if page.firing {
        b.push_str(
            "What to check:\n\
             - The identity provider's dashboard: is it up, and is the webhook endpoint still enabled?\n\
             - Svix message attempts for this endpoint: failed or disabled deliveries, error codes.\n\
             - The reconciliation job: did it run, and does it find events that never arrived here?\n\
             - hushwatch itself: GET /v1/status shows the last event it accepted.\n",
        );
        b.push('\n');
    }
    if let Some(hint) = operator_hint(page) {
        let _ = writeln!(b, "{}: {hint}", hint_label(page));
        b.push('\n');
    }
    let _ = writeln!(b, "Alert id: {}", page.alert_id);
    let _ = writeln!(b, "Page key: {}", page.key);
    b
}
