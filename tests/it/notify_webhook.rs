//! The outbox and the webhook notifier against a real HTTP receiver: one
//! key per page across every kind of failed attempt, exactly one delivered
//! page per transition, firing before resolved, permanent failures shown,
//! and delivery after kill -9 with the receiver down.

use crate::common::*;
use crate::support;

use hushwatch::ingest::signature::{sign, SecretKey};
use support::*;

const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const START: &str = "2026-12-01T00:00:00Z";

fn hook(url: &str, extra: &str) -> String {
    format!(
        "[notifiers.hook]\nkind = \"webhook\"\nurl = \"{url}\"\nsecret = \"{WHSEC}\"\ntimeout = \"1s\"\nbackoff_initial = \"1s\"\nbackoff_max = \"1m\"\n{extra}"
    )
}

fn start(recv: &Receiver, extra: &str) -> (tempfile::TempDir, InProcess) {
    let dir = tempfile::tempdir().unwrap();
    let text = config(&["hook"], "", &hook(&recv.url("/hook"), extra));
    let s = InProcess::start_in(dir.path(), &text, utc(START));
    (dir, s)
}

fn assert_signed(r: &Received) {
    let key = SecretKey::parse(WHSEC).unwrap();
    let id = r.header("webhook-id").unwrap();
    let ts: i64 = r.header("webhook-timestamp").unwrap().parse().unwrap();
    assert_eq!(
        r.header("webhook-signature").unwrap(),
        sign(&key, id, ts, &r.body)
    );
}

#[test]
fn every_retry_of_a_page_carries_the_same_key_and_it_is_delivered_once() {
    let recv = Receiver::start(vec![
        Answer::Status(503),
        Answer::Drop,
        Answer::Hang,
        Answer::StatusWith(429, vec![("Retry-After", "90".into())]),
        Answer::Status(200),
    ]);
    let (_dir, s) = start(&recv, "");
    s.fire();
    let delivered =
        s.advance_until_at_least(30, "the page to be delivered", 1, || recv.delivered());
    assert_exactly("the page to be delivered", 1, &delivered);
    let got = recv.received();
    assert_eq!(got.len(), 5, "503, drop, hang, 429, 200: {got:#?}");
    let key = got[0].header("webhook-id").unwrap().to_string();
    assert!(key.starts_with("hw-"), "{key}");
    for r in &got {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/hook");
        assert_eq!(r.header("webhook-id"), Some(key.as_str()));
        assert_eq!(r.header("idempotency-key"), Some(key.as_str()));
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_signed(r);
        let body = r.json();
        assert_eq!(body["status"], "firing");
        assert_eq!(body["alert"]["stream"], "identity");
        assert_eq!(body["alert"]["kind"], "silence");
        assert_eq!(body["alert"]["severity"], "critical");
        assert_eq!(body["alert"]["started_at"], "2026-12-01T01:00:00.000Z");
        assert_eq!(body["alert"]["resolved_at"], serde_json::Value::Null);
        assert_eq!(body["alert"]["details"]["page_key"], key.as_str());
        assert_eq!(
            body["alert"]["summary"],
            "no identity events for 1h of business time"
        );
    }
    let ids: std::collections::BTreeSet<String> = got
        .iter()
        .map(|r| r.json()["alert"]["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 1);
    // Nothing is left to send: the transition produced exactly one page.
    // (The receiver sees it before hushwatch records the delivery.)
    wait_until("the outbox to empty", || {
        s.pending().is_empty().then_some(())
    });
    // The pending gauge is refreshed by the next delivery round, which can
    // run just after the store reports the outbox empty: wait for it.
    let settled = [
        (
            r#"hushwatch_notifications_total{notifier="hook",outcome="retry"}"#,
            4.0,
        ),
        (
            r#"hushwatch_notifications_total{notifier="hook",outcome="delivered"}"#,
            1.0,
        ),
        (
            r#"hushwatch_notification_latency_seconds_count{notifier="hook"}"#,
            1.0,
        ),
        (r#"hushwatch_outbox_pending{notifier="hook"}"#, 0.0),
    ];
    wait_until(
        "4 retries, 1 delivery and nothing pending in /metrics",
        || {
            settled
                .iter()
                .all(|(series, want)| s.metric(series) == *want)
                .then_some(())
        },
    );
    let n = s.notifications();
    assert_eq!(n["notifiers"]["hook"]["delivered"], 1);
    assert_eq!(n["failed_total"], 0);
}

#[test]
fn retry_after_is_honoured_and_backoff_grows_from_backoff_initial() {
    let recv = Receiver::start(vec![
        Answer::StatusWith(429, vec![("Retry-After", "120".into())]),
        Answer::Status(500),
    ]);
    let (_dir, s) = start(&recv, "");
    s.fire();
    let row = wait_until("first attempt recorded", || {
        s.pending().into_iter().find(|r| r.attempts == 1)
    });
    let first = row.first_attempt_at.unwrap();
    assert_eq!(
        row.next_attempt_at,
        Some(first + chrono::TimeDelta::seconds(120))
    );
    assert!(row.last_error.as_deref().unwrap().contains("HTTP 429"));
    // Due exactly when the receiver asked.
    s.clock.set(first + chrono::TimeDelta::seconds(120));
    let row = wait_until("second attempt recorded", || {
        s.pending().into_iter().find(|r| r.attempts == 2)
    });
    let second = s.now();
    let wait = row.next_attempt_at.unwrap() - second;
    // Attempt 2 failed: base = 2 x backoff_initial, jittered into [1s, 2s].
    assert!(
        wait >= chrono::TimeDelta::seconds(1) && wait <= chrono::TimeDelta::seconds(2),
        "{wait}"
    );
    assert_eq!(recv.received().len(), 2);
}

#[test]
fn a_resolve_queued_before_its_firing_page_was_delivered_goes_out_after_it() {
    let recv = Receiver::start(vec![Answer::Status(503), Answer::Status(503)]);
    let (_dir, s) = start(&recv, "");
    s.fire();
    wait_until("the first failed attempt", || {
        (!recv.received().is_empty()).then_some(())
    });
    s.resolve();
    let pending = s.pending();
    assert_eq!(
        pending.len(),
        2,
        "firing still pending, resolve queued behind it"
    );
    let delivered = s.advance_until_at_least(30, "both pages delivered", 2, || recv.delivered());
    assert_exactly("both pages delivered", 2, &delivered);
    let got = recv.received();
    let first_ok = got.iter().position(|r| r.answered == Some(200)).unwrap();
    for r in &got[..=first_ok] {
        assert_eq!(
            r.json()["status"],
            "firing",
            "nothing resolved before the firing page"
        );
    }
    let (fire, clear) = (delivered[0].json(), delivered[1].json());
    assert_eq!(fire["status"], "firing");
    assert_eq!(clear["status"], "resolved");
    assert_eq!(fire["alert"]["id"], clear["alert"]["id"]);
    assert_eq!(clear["alert"]["started_at"], fire["alert"]["started_at"]);
    assert_eq!(clear["alert"]["resolved_at"], "2026-12-01T01:00:01.000Z");
    assert_ne!(
        delivered[0].header("webhook-id"),
        delivered[1].header("webhook-id"),
        "a new page never reuses an old key"
    );
    wait_until("the outbox to empty", || {
        s.pending().is_empty().then_some(())
    });
}

#[test]
fn a_permanent_error_fails_the_page_visibly_without_leaking_secrets() {
    let recv = Receiver::start(vec![Answer::StatusBody(404, "no such hook".into())]);
    let dir = tempfile::tempdir().unwrap();
    let url = recv.url("/hooks/T0KEN-SEKRIT?sig=abcdef");
    let text = config(&["hook"], "", &hook(&url, ""));
    let s = InProcess::start_in(dir.path(), &text, utc(START));
    s.fire();
    let n = wait_until("the page to be marked failed", || {
        let n = s.notifications();
        (n["failed_total"].as_u64() >= Some(1)).then_some(n)
    });
    assert_eq!(n["failed_total"], 1, "one failed page: {n}");
    let failure = &n["recent_failures"][0];
    assert_eq!(failure["notifier"], "hook");
    assert_eq!(failure["status"], "firing");
    assert_eq!(failure["attempts"], 1);
    let error = failure["error"].as_str().unwrap();
    assert!(error.contains("HTTP 404"), "{error}");
    assert!(error.contains(&format!("http://{}", recv.addr)), "{error}");
    assert_eq!(
        s.metric(r#"hushwatch_notifications_total{notifier="hook",outcome="failed"}"#),
        1.0
    );
    let over_http = s.http_status();
    assert_eq!(over_http["notifications"]["failed_total"], 1);
    assert_eq!(over_http["notifications"]["notifiers"]["hook"]["failed"], 1);
    assert_eq!(
        over_http["notifications"]["recent_failures"][0]["error"],
        error
    );
    // No secret anywhere an operator (or attacker) can read.
    let status = format!("{n} {over_http} {}", s.app().metrics().encode());
    for secret in [
        "T0KEN-SEKRIT",
        "sig=abcdef",
        WHSEC,
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ] {
        assert!(!status.contains(secret), "{secret} leaked: {status}");
    }
    // Only one attempt: 404 is not retried. The resolve is not blocked by
    // the failed firing page.
    s.resolve();
    let delivered = s.advance_until_at_least(30, "the resolve delivered", 1, || recv.delivered());
    assert_exactly("the resolve delivered", 1, &delivered);
    let got = recv.received();
    assert_eq!(
        got.len(),
        2,
        "the refused firing page, the resolve: {got:#?}"
    );
    assert_eq!(delivered[0].json()["status"], "resolved");
}

#[test]
fn a_page_still_failing_after_give_up_after_is_marked_failed() {
    let recv = Receiver::start(vec![Answer::Status(503); 200]);
    let (_dir, s) = start(&recv, "give_up_after = \"10m\"\n");
    s.fire();
    let n = s.advance_until(60, "give up", || {
        let n = s.notifications();
        (n["failed_total"].as_u64() >= Some(1)).then_some(n)
    });
    assert_eq!(n["failed_total"], 1, "one failed page: {n}");
    let error = n["recent_failures"][0]["error"].as_str().unwrap();
    assert!(error.starts_with("gave up after"), "{error}");
    assert!(error.contains("HTTP 503"), "{error}");
    assert!(s.pending().is_empty());
    let attempts = recv.received().len();
    assert!(attempts >= 3, "{attempts}");
    assert!(recv
        .received()
        .iter()
        .all(|r| r.header("webhook-id") == recv.received()[0].header("webhook-id")));
}

#[test]
fn pages_survive_kill_9_and_are_delivered_once_under_the_same_key() {
    let reserved = ClosedPort::new();
    let port = reserved.port();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}/hook/SEKRIT-PATH");
    let notifier = format!(
        "[notifiers.hook]\nkind = \"webhook\"\nurl = \"{url}\"\ntimeout = \"2s\"\nbackoff_initial = \"1s\"\nbackoff_max = \"1s\"\n"
    );
    let text = config(&["hook"], "", &notifier)
        .replace("silence_threshold = \"1h\"", "silence_threshold = \"1s\"");
    let path = dir.path().join("hushwatch.toml");
    std::fs::write(&path, text).unwrap();

    // 1. The receiver is down: the page is retried, then the process dies.
    let mut first = Sidecar::start(&path);
    first.wait_log("will retry under the same key");
    let first_logs = first.stderr_text();
    first.kill9();

    // 2. The receiver reads the page but never answers; kill -9 mid-attempt.
    let recv = reserved.listen(vec![Answer::Hang]);
    let second = Sidecar::start(&path);
    wait_until("the page to reach the receiver", || {
        (!recv.received().is_empty()).then_some(())
    });
    second.kill9();

    // 3. Back to normal: the same page is delivered, under the same key.
    let mut third = Sidecar::start(&path);
    wait_exactly("the page to be delivered", 1, || recv.delivered());
    third.wait_log("page delivered");
    let got = recv.received();
    assert_eq!(got.len(), 2, "{:?}", third.stderr_text());
    assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));
    assert_eq!(got[0].json()["alert"]["id"], got[1].json()["alert"]["id"]);
    assert_eq!(got[1].json()["status"], "firing");
    assert_eq!(got[1].path, "/hook/SEKRIT-PATH");
    // Logs name the receiver, never its secret path.
    let logs = third.stderr_text();
    assert!(!logs.contains("SEKRIT"), "{logs}");
    let mut logs = first_logs;
    logs.push_str(&third.stderr_text());
    assert!(logs.contains(&format!("http://127.0.0.1:{port}")), "{logs}");
    assert!(!logs.contains("SEKRIT"), "{logs}");
}

#[test]
fn shutdown_does_not_wait_for_a_hanging_receiver_and_the_page_survives() {
    let recv = Receiver::start(vec![Answer::Hang]);
    let dir = tempfile::tempdir().unwrap();
    let text = config(
        &["hook"],
        "",
        &hook(&recv.url("/hook"), "timeout = \"5m\"\n"),
    )
    .replace("timeout = \"1s\"\n", "");
    let s = InProcess::start_in(dir.path(), &text, utc(START));
    s.fire();
    wait_exactly("the attempt in flight", 1, || recv.received());
    // The attempt would hang for 5 minutes; shutdown must not.
    let stopping = std::thread::spawn(move || s.stop());
    wait_until("shutdown", || stopping.is_finished().then_some(()));
    stopping.join().unwrap();

    let s = InProcess::start_in(dir.path(), &text, utc(START) + chrono::TimeDelta::hours(2));
    wait_exactly("delivery after restart", 1, || recv.delivered());
    let got = recv.received();
    assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));
    wait_until("outbox empty", || s.pending().is_empty().then_some(()));
}

#[test]
fn a_hanging_receiver_holds_up_neither_other_notifiers_nor_ingest() {
    let slow = Receiver::start(vec![Answer::Hang]);
    let fast = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let notifiers = format!(
        "{}[notifiers.fast]\nkind = \"webhook\"\nurl = \"{}\"\n",
        hook(&slow.url("/slow"), "").replace("timeout = \"1s\"", "timeout = \"5m\""),
        fast.url("/fast")
    );
    let text = config(&["hook", "fast"], "", &notifiers);
    let s = InProcess::start_in(dir.path(), &text, utc(START));
    s.fire();
    wait_exactly("the slow attempt in flight", 1, || slow.received());
    wait_exactly("the fast notifier's page", 1, || fast.delivered());
    // Ingest (and the resolve it causes) goes through while the slow
    // receiver still holds its connection.
    s.resolve();
    let got = wait_exactly("the fast notifier's resolve", 2, || fast.delivered());
    assert_eq!(got[1].json()["status"], "resolved");
    assert!(slow.delivered().is_empty());
}

/// `hushwatch_notifications_total` says why an attempt failed, from a
/// closed set: a receiver answering 503 counts under `status_5xx`, a port
/// nobody listens on under `connect` (through the real binary's /metrics).
#[test]
fn failed_attempts_count_under_a_bounded_reason_on_metrics() {
    let five = Receiver::start(vec![Answer::Status(503); 50]);
    let gone = ClosedPort::new();
    let work = Workdir::new(&format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.identity]
calendar = "always"
silence_threshold = "2s"
notify = ["five", "gone"]
[streams.identity.ingest]
token = "{TOKEN}"

[notifiers.five]
kind = "webhook"
url = "{}"
timeout = "2s"
backoff_initial = "1s"
backoff_max = "2s"

[notifiers.gone]
kind = "webhook"
url = "http://127.0.0.1:{}/hook"
timeout = "2s"
backoff_initial = "1s"
backoff_max = "2s"
"#,
        five.url("/hook"),
        gone.port()
    ));
    let s = Sidecar::start(&work.config_path());
    let counted = |series: &str| metric(s.addr, series);
    // Declared before any attempt, so increase() sees the first failure.
    assert_eq!(
        counted(
            r#"hushwatch_notifications_total{notifier="gone",outcome="failed",reason="connect"}"#
        ),
        0.0
    );
    wait_until(
        "a 503 counted as status_5xx and a refused connection as connect",
        || {
            (counted(r#"hushwatch_notifications_total{notifier="five",outcome="retry",reason="status_5xx"}"#)
            >= 1.0
            && counted(r#"hushwatch_notifications_total{notifier="gone",outcome="retry",reason="connect"}"#)
                >= 1.0)
            .then_some(())
        },
    );
    let text = get(s.addr, "/metrics").body;
    let reasons: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("hushwatch_notifications_total{"))
        .filter_map(|l| l.split("reason=\"").nth(1)?.split('"').next())
        .collect();
    assert!(
        reasons.iter().all(|r| [
            "",
            "timeout",
            "connect",
            "status_4xx",
            "status_5xx",
            "refused",
            "ambiguous"
        ]
        .contains(r)),
        "{reasons:?}"
    );
    assert!(s.stop().success());
}
