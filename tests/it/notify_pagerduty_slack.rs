//! PagerDuty (Events API v2, `url` overridden) and Slack incoming webhooks
//! against a real HTTP receiver: one dedup_key per alert episode, a
//! readable message, and no routing key or webhook token anywhere in
//! errors, status or metrics (like Alertmanager's AssertNotifyLeaksNoSecret).

use crate::common::*;
use crate::support;

use support::*;

const ROUTING_KEY: &str = "R0UT1NG-KEY-0123456789abcdef";
const SLACK_TOKEN: &str = "XoXbSeCrEtT0kEn42";

fn start(notifiers: &str, notify: &[&str]) -> (tempfile::TempDir, InProcess) {
    let dir = tempfile::tempdir().unwrap();
    let text = config(notify, "", notifiers);
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-01T00:00:00Z"));
    (dir, s)
}

fn assert_no_secret(s: &InProcess, extra: &str) {
    let seen = format!(
        "{} {} {} {extra}",
        s.notifications(),
        s.app().status(),
        s.app().metrics().encode()
    );
    for secret in [ROUTING_KEY, SLACK_TOKEN] {
        assert!(!seen.contains(secret), "{secret} leaked in {seen}");
    }
}

#[test]
fn pagerduty_triggers_and_resolves_one_incident_per_episode() {
    let recv = Receiver::start(vec![Answer::Status(502), Answer::Status(202)]);
    let notifier = format!(
        "[notifiers.pd]\nkind = \"pagerduty\"\nrouting_key = \"{ROUTING_KEY}\"\nurl = \"{}\"\nbackoff_initial = \"1s\"\nbackoff_max = \"5s\"\n",
        recv.url("/v2/enqueue")
    );
    let (_dir, s) = start(&notifier, &["pd"]);
    s.fire();
    let got = s.advance_until_at_least(5, "the trigger", 1, || recv.delivered());
    assert_exactly("the trigger", 1, &got);
    s.resolve();
    wait_exactly("the resolve", 2, || recv.delivered());
    let got = recv.received();
    assert_eq!(got.len(), 3, "502, trigger, resolve: {got:#?}");
    let (first_try, trigger, resolve) = (got[0].json(), got[1].json(), got[2].json());
    assert_eq!(
        first_try, trigger,
        "a retried event is byte-for-byte the same"
    );
    assert_eq!(trigger["event_action"], "trigger");
    assert_eq!(trigger["routing_key"], ROUTING_KEY);
    assert_eq!(trigger["payload"]["source"], "hushwatch");
    assert_eq!(trigger["payload"]["severity"], "critical");
    assert_eq!(trigger["payload"]["component"], "identity");
    assert_eq!(
        trigger["payload"]["summary"],
        "identity: no identity events for 1h of business time"
    );
    assert_eq!(resolve["event_action"], "resolve");
    assert_eq!(resolve["dedup_key"], trigger["dedup_key"]);
    assert_eq!(got[0].path, "/v2/enqueue");
    assert_eq!(
        got[0].header("idempotency-key"),
        got[1].header("idempotency-key")
    );
    assert_ne!(
        got[1].header("idempotency-key"),
        got[2].header("idempotency-key")
    );

    // The next episode is a new incident.
    s.fire();
    let next = wait_exactly("the second trigger", 3, || recv.delivered())[2].json();
    assert_eq!(next["event_action"], "trigger");
    assert_ne!(next["dedup_key"], trigger["dedup_key"]);
    assert_no_secret(&s, "");
}

#[test]
fn pagerduty_rejecting_the_event_fails_it_without_echoing_the_routing_key() {
    // PagerDuty's 400 body can quote the event back, routing key included.
    let echo = format!(
        r#"{{"status":"invalid event","message":"Event object is invalid","errors":["routing_key {ROUTING_KEY} unknown"]}}"#
    );
    let recv = Receiver::start(vec![Answer::StatusBody(400, echo)]);
    let notifier = format!(
        "[notifiers.pd]\nkind = \"pagerduty\"\nrouting_key = \"{ROUTING_KEY}\"\nurl = \"{}\"\n",
        recv.url("/v2/enqueue")
    );
    let (_dir, s) = start(&notifier, &["pd"]);
    s.fire();
    let n = wait_until("failed", || {
        let n = s.notifications();
        (n["failed_total"].as_u64() >= Some(1)).then_some(n)
    });
    assert_eq!(n["failed_total"], 1, "one failed page: {n}");
    let error = n["recent_failures"][0]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.contains("HTTP 400"), "{error}");
    assert!(error.contains("<redacted>"), "{error}");
    assert_no_secret(&s, &error);
}

#[test]
fn slack_gets_a_readable_message_and_its_token_stays_secret() {
    let recv = Receiver::start(vec![Answer::Status(500)]);
    let url = recv.url(&format!("/services/T000/B000/{SLACK_TOKEN}"));
    let notifier = format!(
        "[notifiers.chat]\nkind = \"slack\"\nurl = \"{url}\"\nbackoff_initial = \"1s\"\nbackoff_max = \"5s\"\n"
    );
    let (_dir, s) = start(&notifier, &["chat"]);
    s.fire();
    let row = wait_until("the failed attempt", || {
        s.pending().into_iter().find(|r| r.attempts == 1)
    });
    let error = row.last_error.unwrap();
    assert!(error.contains("HTTP 500"), "{error}");
    assert_no_secret(&s, &error);
    let got = s.advance_until_at_least(5, "the message", 1, || recv.delivered());
    assert_exactly("the message", 1, &got);
    s.resolve();
    let msgs = wait_exactly("the resolved message", 2, || recv.delivered());
    assert_eq!(msgs[0].path, format!("/services/T000/B000/{SLACK_TOKEN}"));
    let firing = msgs[0].json()["text"].as_str().unwrap().to_string();
    assert!(
        firing.starts_with(
            ":rotating_light: *FIRING* (critical) `identity`: no identity events for 1h"
        ),
        "{firing}"
    );
    assert!(
        firing.contains("Firing since: 2026-12-01 01:00 UTC"),
        "{firing}"
    );
    let resolved = msgs[1].json()["text"].as_str().unwrap().to_string();
    assert!(
        resolved.starts_with(
            ":white_check_mark: *RESOLVED* (critical) `identity`: identity events arrived again at \
             2026-12-01 01:00 UTC, after 1h of business silence\n"
        ),
        "{resolved}"
    );
    assert!(
        resolved.contains("Resolved at: 2026-12-01 01:00"),
        "{resolved}"
    );
    assert_no_secret(&s, "");
}
