//! Golden tests: the exact bytes each notifier sends for a fixed page.
//! Snapshots live in tests/snapshots/; review changes with `cargo insta
//! review` (or delete the file and re-run with INSTA_UPDATE=always).

use chrono::{DateTime, TimeDelta, Utc};
use hushwatch::config::{PagerDutyConfig, WebhookConfig};
use hushwatch::notify::{email, log, payload, webhook, Page};
use hushwatch::store::PageKind;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn firing() -> Page {
    Page {
        key: "hw-5b1c0e8e-2f7a-4d3c-9a41-0d6e3f2b7c19".into(),
        alert_id: "9c2b7f1e-04d8-4e61-b3a5-7f0c2d9e8a14".into(),
        alert_kind: "silence".into(),
        stream: "identity".into(),
        firing: true,
        kind: PageKind::Page,
        at: t("2026-12-07T01:00:00Z"),
        started_at: t("2026-12-07T01:00:00Z"),
        resolved_at: None,
        silent_since: Some(t("2026-12-04T03:00:00Z")),
        summary: "no identity events for 6h of business time".into(),
        severity: "critical".into(),
        calendar: "tokyo".into(),
        timezone: chrono_tz::Asia::Tokyo,
        business_hours: vec!["mon-fri 09:00-18:00".into()],
        threshold: TimeDelta::hours(6),
        max_silence: Some(TimeDelta::hours(72)),
        test: false,
    }
}

fn resolved() -> Page {
    Page {
        key: "hw-0a7d3e55-91c2-4b8f-a6e0-3c4d5e6f7a8b".into(),
        firing: false,
        at: t("2026-12-07T02:30:00Z"),
        resolved_at: Some(t("2026-12-07T02:30:00Z")),
        ..firing()
    }
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap()
}

const SENT_AT: &str = "2026-12-07T01:00:02.500Z";

#[test]
fn webhook_bodies_and_headers() {
    let sent = t(SENT_AT);
    insta::assert_snapshot!(
        "webhook_firing",
        pretty(&payload::webhook_body(&firing(), sent))
    );
    insta::assert_snapshot!(
        "webhook_resolved",
        pretty(&payload::webhook_body(&resolved(), sent))
    );
    let config = WebhookConfig {
        url: hushwatch::config::secret::SecretString::new("https://example.org/hook".into()),
        secret: Some(
            hushwatch::ingest::signature::SecretKey::parse(
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            )
            .unwrap(),
        ),
    };
    let body = payload::webhook_body(&firing(), sent).to_string();
    let headers: Vec<String> = webhook::headers(&config, &firing(), sent, body.as_bytes())
        .into_iter()
        .map(|(n, v)| format!("{n}: {v}"))
        .collect();
    insta::assert_snapshot!("webhook_headers", headers.join("\n"));
}

#[test]
fn pagerduty_events() {
    let config = PagerDutyConfig {
        routing_key: hushwatch::config::secret::SecretString::new("R0UTING-KEY-golden".into()),
        url: hushwatch::config::PAGERDUTY_URL.into(),
    };
    insta::assert_snapshot!(
        "pagerduty_trigger",
        pretty(&payload::pagerduty_event(&config, &firing()))
    );
    insta::assert_snapshot!(
        "pagerduty_resolve",
        pretty(&payload::pagerduty_event(&config, &resolved()))
    );
}

#[test]
fn slack_messages() {
    insta::assert_snapshot!("slack_firing", pretty(&payload::slack_message(&firing())));
    insta::assert_snapshot!(
        "slack_resolved",
        pretty(&payload::slack_message(&resolved()))
    );
}

#[test]
fn alertmanager_alerts() {
    insta::assert_snapshot!(
        "alertmanager_firing",
        pretty(&payload::alertmanager_alerts(&firing()))
    );
    insta::assert_snapshot!(
        "alertmanager_resolved",
        pretty(&payload::alertmanager_alerts(&resolved()))
    );
}

#[test]
fn email_text() {
    for (name, page) in [("email_firing", firing()), ("email_resolved", resolved())] {
        let text = format!(
            "Subject: {}\nMessage-ID: {}\nReferences: {}\n\n{}",
            payload::email_subject(&page),
            email::message_id(&page),
            email::thread_id(&page),
            payload::email_body(&page)
        );
        insta::assert_snapshot!(name, text);
    }
    let reminder = Page {
        kind: PageKind::Reminder,
        ..firing()
    };
    insta::assert_snapshot!("email_reminder_subject", payload::email_subject(&reminder));
    let test = Page {
        test: true,
        ..firing()
    };
    insta::assert_snapshot!(
        "email_test_page",
        format!(
            "{}\n\n{}",
            payload::email_subject(&test),
            payload::email_body(&test)
        )
    );
}

#[test]
fn log_lines() {
    insta::assert_snapshot!("log_firing", log::line(&firing(), t(SENT_AT)));
    insta::assert_snapshot!("log_resolved", log::line(&resolved(), t(SENT_AT)));
}

#[test]
fn svix_pages_are_not_silence_alerts() {
    let page = Page {
        alert_kind: "svix".into(),
        summary: "[critical] Svix endpoint ep_1 (identity) was DISABLED by Svix.".into(),
        silent_since: None,
        ..firing()
    };
    let page = &page;
    let am = payload::alertmanager_alerts(page);
    assert_eq!(am[0]["labels"]["alertname"], "HushwatchSvix");
    assert_eq!(am[0]["labels"]["kind"], "svix");
    insta::assert_snapshot!("svix_email", payload::email_body(page));
    insta::assert_snapshot!("svix_slack", pretty(&payload::slack_message(page)));
    insta::assert_snapshot!(
        "svix_webhook",
        pretty(&payload::webhook_body(page, t(SENT_AT)))
    );
}
