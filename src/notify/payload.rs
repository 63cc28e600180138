//! What every notifier's payload shares: the bounded summary, the wording
//! of instants (`local_and_utc`), the resolve line, the operator hint and
//! the structured `details`. Each kind's own builder lives in its module
//! (`slack::message`, `pagerduty::event`, …, re-exported at the end under
//! their old names). All of it is golden-tested (tests/it/notify_golden.rs);
//! keep it free of I/O and of "now" except the explicit `sent_at`.

use super::kind::AlertKind;
use super::text;
use super::Page;
use crate::domain::duration::format_duration;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};

/// The longest a page's full text gets in any body (webhook, `log` line,
/// PagerDuty `custom_details`, Alertmanager description, email body). A
/// summary names at most 20 subjects (`service::reconcile`), so in
/// practice this only cuts a hostile field, such as a Svix endpoint id of
/// a megabyte; it keeps every body far below the receivers' size limits
/// (PagerDuty's 512 KB event, a proxy's usual 1 MiB).
pub const TEXT_MAX: usize = 32 * 1024;
/// Identifiers that came from a request (Svix endpoint ids; stream names
/// are at most 128 characters already): real ones are ~30 characters.
pub const ID_MAX: usize = 255;

/// The page's full summary for a structured body, bounded by [`TEXT_MAX`].
pub(super) fn full_summary(page: &Page) -> String {
    text::bounded(
        &format!("{}{}", test_prefix(page), page.summary),
        TEXT_MAX,
        "",
    )
}

pub(super) fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `2026-12-04 15:00 JST (Asia/Tokyo) = 2026-12-04 06:00 UTC`; a calendar
/// in UTC gives the UTC time once (`2026-12-04 06:00 UTC`), not three times.
pub fn local_and_utc(page: &Page, t: DateTime<Utc>) -> String {
    if page.timezone == chrono_tz::UTC {
        return format!("{} UTC", t.format("%Y-%m-%d %H:%M"));
    }
    let local = t.with_timezone(&page.timezone);
    format!(
        "{} ({}) = {} UTC",
        local.format("%Y-%m-%d %H:%M %Z"),
        page.timezone.name(),
        t.format("%Y-%m-%d %H:%M")
    )
}

pub(super) fn test_prefix(page: &Page) -> &'static str {
    if page.test {
        "[TEST] "
    } else {
        ""
    }
}

/// A silence resolve's one line: "identity events arrived again at …,
/// after 6h12m of business silence". `None` for other pages, whose stored
/// summary already says what happened.
pub fn resolve_summary(page: &Page) -> Option<String> {
    if page.firing || !page.is_silence() {
        return None;
    }
    let resumed = page.resumed_at?;
    let after = page
        .business_silence
        .map(|d| format!(", after {} of business silence", minutes_text(d)))
        .unwrap_or_default();
    Some(format!(
        "{} events arrived again at {}{after}",
        page.stream,
        local_and_utc(page, resumed)
    ))
}

/// A duration to the minute (seconds only when under a minute): a page
/// reads "6h12m", not "6h12m7s".
pub(super) fn minutes_text(d: chrono::TimeDelta) -> String {
    if d < chrono::TimeDelta::minutes(1) {
        return format_duration(d);
    }
    format_duration(chrono::TimeDelta::minutes(d.num_minutes()))
}

/// The silence facts of a silence page (`None` on Svix pages, which are
/// not about business time).
fn silence_facts(page: &Page) -> Value {
    let mut v = json!({
        "silent_since": page.silent_since.map(rfc),
        "threshold": page.threshold_text(),
        "max_silence": page.max_silence.map(format_duration),
        "calendar": page.calendar,
        "timezone": page.timezone.name(),
        "business_hours": page.business_hours,
    });
    if page.resumed_at.is_some() {
        v["resumed_at"] = json!(page.resumed_at.map(rfc));
        v["business_silence"] = json!(page.business_silence.map(minutes_text));
    }
    v
}

/// How to acknowledge or silence a firing page from a shell with the
/// admin API in reach: copy-paste commands, never the token (the CLI reads
/// it from `$HUSHWATCH_ADMIN_TOKEN`). A stream's silence alert can be
/// acknowledged; other alerts (Svix, subscriptions) are silenced by their
/// kind. `None` on resolves and test pages.
pub fn operator_hint(page: &Page) -> Option<String> {
    if !page.firing || page.test {
        return None;
    }
    // Pages about hushwatch itself (fallback ladder, store) cannot be
    // silenced: a hint would suggest a command the API refuses.
    if !page.alert_kind.silenceable() {
        return None;
    }
    // `--config` finds the admin listener and its address the way the
    // sidecar does, so the command runs as printed; the token stays in
    // the environment.
    let cfg = &page.config_path;
    let token = "token in $HUSHWATCH_ADMIN_TOKEN";
    Some(if page.alert_kind == AlertKind::ProviderMissed {
        // Acknowledging the stream marks the page's findings handled,
        // which resolves it (issue #45).
        format!(
            "hushwatch ack --config {cfg} --stream {s} --comment \"...\"  (marks the findings handled and resolves this page; {token})",
            s = page.stream
        )
    } else if page.is_silence() {
        format!(
            "hushwatch ack --config {cfg} --stream {s} --comment \"...\"  (or: hushwatch silence add --config {cfg} --stream {s} --for 2h --comment \"...\"; {token})",
            s = page.stream
        )
    } else {
        format!(
            "hushwatch silence add --config {cfg} --stream {s} --kind {k} --for 2h --comment \"...\"  ({token})",
            s = page.stream,
            k = page.alert_kind
        )
    })
}

/// The endpoint line of a text page: its label, the endpoint id and, on
/// Svix pages, the source. `None` when the kind names nothing there (or
/// the id is empty). Pre-v8 `svix` rows are Svix pages.
pub(super) fn endpoint_fact(page: &Page) -> Option<(&'static str, &str, Option<&str>)> {
    let endpoint = page.endpoint_id.as_deref().filter(|e| !e.is_empty())?;
    let kind = page.alert_kind;
    let (label, svix) = (kind.endpoint_label()?, kind.is_svix());
    Some((label, endpoint, page.source.as_deref().filter(|_| svix)))
}

/// The acknowledge link of a firing stream page (issue #30): only those
/// can be acknowledged (other kinds are silenced by kind), and a resolve
/// or a test page never carries one.
pub fn ack_link(page: &Page) -> Option<&str> {
    page.ack_url
        .as_deref()
        .filter(|_| page.firing && !page.test && page.is_silence())
}

/// The runbook section of the page's kind ("what it means, what to check,
/// what to run"): on every page, firing or resolved, test pages included.
pub fn runbook_url(page: &Page) -> String {
    page.runbook_base.section(page.alert_kind.as_str())
}

/// What a page says beside its acknowledge link.
pub const ACK_LINK_NOTE: &str = "opens a confirmation page; works until the alert resolves or the link expires, and the first link used retires the others";

/// The label in front of [`operator_hint`] in text pages.
pub(super) fn hint_label(page: &Page) -> &'static str {
    if page.is_silence() || page.alert_kind == AlertKind::ProviderMissed {
        "To acknowledge"
    } else {
        "To silence"
    }
}

/// Extra facts every structured payload carries under `details`: the
/// silence facts on silence pages, the endpoint on Svix pages.
pub fn details(page: &Page) -> Value {
    let mut v = if page.is_silence() {
        silence_facts(page)
    } else {
        json!({
            "source": page.source,
            "endpoint_id": page.endpoint_id.as_deref().map(|e| text::bounded_id(e, ID_MAX)),
        })
    };
    v["page_key"] = json!(page.key);
    v["page_kind"] = json!(page.kind.as_str());
    v["test"] = json!(page.test);
    v["runbook_url"] = json!(runbook_url(page));
    if let Some(hint) = operator_hint(page) {
        v["how_to_ack"] = json!(hint);
    }
    if let Some(url) = ack_link(page) {
        v["ack_url"] = json!(url);
    }
    v
}

// Each kind's payload lives in its own module, beside its sender; these
// keep the paths the golden tests and older callers use.
pub use super::alertmanager::{alertname, alerts as alertmanager_alerts, AM_SUMMARY_MAX};
pub use super::email::{
    body as email_body, html_body as email_html_body, subject as email_subject, EMAIL_SUBJECT_MAX,
};
pub use super::log::json_line as log_line;
pub use super::pagerduty::{event as pagerduty_event, PD_DEDUP_KEY_MAX, PD_SUMMARY_MAX};
pub use super::slack::{message as slack_message, SLACK_SUMMARY_MAX, SLACK_TEXT_MAX};
pub use super::webhook::body as webhook_body;
