//! Reconciliation reports (`POST /v1/streams/{stream}/reconciliations`) on
//! a manual clock with a real HTTP receiver: a `revoke_missed` finding
//! pages critical with what hushwatch was told about the subject, a
//! missing reconciliation pages after `every + grace` and resolves on the
//! next report, and a report id is stored once.

use crate::common::*;
use crate::support;

use std::net::SocketAddr;
use support::*;

const START: &str = "2026-12-01T00:00:00Z";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn config(url: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[calendars.tokyo]
timezone = "Asia/Tokyo"
weekly = ["mon-sun 00:00-24:00"]

[streams.identity]
calendar = "tokyo"
silence_threshold = "30d"
notify = ["hook"]
[streams.identity.reconcile]
every = "1h"
[streams.identity.ingest]
token = "{TOKEN}"
webhook_secret = "{SECRET}"

[notifiers.hook]
kind = "webhook"
url = "{url}"
timeout = "1s"
backoff_initial = "1s"
"#
    )
}

fn report(id: &str, drift: &str) -> String {
    format!(
        r#"{{"id":"{id}","started_at":"2026-12-01T00:00:00Z","finished_at":"2026-12-01T00:00:30Z","checked":1234,"drift":[{drift}]}}"#
    )
}

fn post_report(addr: SocketAddr, token: &str, body: &str) -> (u16, serde_json::Value) {
    let auth = format!("Bearer {token}");
    let reply = request(
        addr,
        "POST",
        "/v1/streams/identity/reconciliations",
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        body.as_bytes(),
    );
    (reply.status, reply.json())
}

/// A signed webhook as Svix sends it, to the `identity` stream.
fn post_webhook(addr: SocketAddr, msg_id: &str, ts: i64, body: &str) -> u16 {
    post_signed_webhook(addr, "identity", SECRET, msg_id, ts, body)
}

fn pages(recv: &Receiver) -> Vec<serde_json::Value> {
    recv.delivered_json()
}

fn wait_pages(recv: &Receiver, n: usize) -> Vec<serde_json::Value> {
    recv.wait_delivered_json(n)
}

#[test]
fn revoke_missed_pages_critical_with_what_was_delivered() {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(dir.path(), &config(&recv.url("/hook")), utc(START));

    // user_delivered was created, then revoked, both as signed webhooks.
    let grant = r#"{"type":"user.created","timestamp":1764547100000,"data":{"object":"user","id":"user_delivered"}}"#;
    let status = post_webhook(s.addr, "msg_grant_1", s.now().timestamp(), grant);
    assert_eq!(status, 200);
    let body = r#"{"type":"user.deleted","timestamp":1764547200000,"data":{"object":"user","id":"user_delivered","deleted":true}}"#;
    let status = post_webhook(s.addr, "msg_revoke_1", s.now().timestamp(), body);
    assert_eq!(status, 200);

    let drift = r#"{"subject":"user_lost","kind":"revoke_missed","fixed":true},
                   {"subject":"user_delivered","kind":"revoke_missed","fixed":true,"detail":"still a member"},
                   {"subject":"user_new","kind":"grant_missed","fixed":false}"#;
    let (status, json) = post_report(s.addr, TOKEN, &report("rec-1", drift));
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["status"], "stored");

    let got = wait_pages(&recv, 1);
    let text = got[0].to_string();
    assert!(text.contains("critical"), "{text}");
    assert!(text.contains("reconciliation_revoke_missed"), "{text}");
    assert!(
        text.contains("no revocation for user_lost was ever received"),
        "{text}"
    );
    assert!(
        text.contains(
            "revocation of user_delivered received 2026-12-01 09:00 JST (delivery msg_revoke_1"
        ),
        "{text}"
    );
    assert!(
        !text.contains("user_new"),
        "grant drift is not a revocation: {text}"
    );

    // The same report again is stored once and pages nothing more.
    let (status, json) = post_report(s.addr, TOKEN, &report("rec-1", drift));
    assert_eq!(status, 200);
    assert_eq!(json["status"], "duplicate");
    let series = r#"hushwatch_reconciliation_drift_total{kind="revoke_missed",stream="identity"}"#;
    assert_eq!(s.metric(series), 2.0);
    let series = r#"hushwatch_reconciliation_drift_total{kind="grant_missed",stream="identity"}"#;
    assert_eq!(s.metric(series), 1.0);
    let series = r#"hushwatch_reconciliation_last_timestamp_seconds{stream="identity"}"#;
    assert_eq!(s.metric(series), utc(START).timestamp() as f64);
    // The duplicate was answered only after the first page was queued, so
    // an outbox with nothing pending means no second page exists.
    wait_until("outbox drained", || s.pending().is_empty().then_some(()));
    assert_eq!(pages(&recv).len(), 1, "{:?}", pages(&recv));
    s.stop();

    // The report joined the audit chain once, and the chain verifies.
    let config = dir.path().join("hushwatch.toml");
    let (code, out, err) = run_cli(&["audit", "export", "--kind", "reconciliation"], &config);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(
        lines[0].contains("rec-1") && lines[0].contains("user_lost"),
        "{out}"
    );
    let (code, _, err) = run_cli(&["audit", "verify"], &config);
    assert_eq!(code, 0, "{err}");

    // The subject's timeline: grant, revoke, then the finding, in order.
    let (code, out, err) = run_cli(&["audit", "subject", "user_delivered"], &config);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let access: Vec<&str> = lines
        .iter()
        .map(|l| l["access"].as_str().unwrap())
        .collect();
    assert_eq!(access, ["grant", "revoke", "finding"], "{out}");
    assert_eq!(lines[1]["delivery_id"], "msg_revoke_1");
    assert_eq!(lines[2]["finding"], "revoke_missed");
    assert_eq!(lines[2]["delivery_id"], "rec-1");
    let (code, out, _) = run_cli(
        &["audit", "subject", "user_delivered", "--format", "text"],
        &config,
    );
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(
        out.lines()
            .nth(1)
            .unwrap()
            .contains("revoke  user.deleted  delivery msg_revoke_1"),
        "{out}"
    );
    assert!(
        out.starts_with("2026-12-01 09:00:00 JST  identity"),
        "times read in the stream's zone: {out}"
    );
    let (code, out, _) = run_cli(&["audit", "subject", "nobody"], &config);
    assert_eq!((code, out.as_str()), (0, ""));
}

#[test]
fn bad_reports_are_refused_and_store_nothing() {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(dir.path(), &config(&recv.url("/hook")), utc(START));
    let (status, _) = post_report(s.addr, "wrong-token", &report("r", ""));
    assert_eq!(status, 401);
    let (status, json) = post_report(s.addr, TOKEN, r#"{"id":"r"}"#);
    assert_eq!(status, 400, "{json}");
    let (status, _) = post_report(
        s.addr,
        TOKEN,
        &report("r", r#"{"subject":"u","kind":"maybe","fixed":true}"#),
    );
    assert_eq!(status, 400);
    // A 400 names the field and index, never the value sent (SECURITY.md:
    // errors name the field, not the value): serde's own text quoted it.
    let hostile = "<!channel> <https://evil.example|re-auth>";
    for (drift, field) in [
        (
            format!(
                r#"{{"subject":"u","kind":"other","fixed":true}},{{"subject":"u","kind":"{hostile}","fixed":true}}"#
            ),
            "drift[1].kind",
        ),
        (
            format!(r#"{{"subject":"u","kind":"other","fixed":"{hostile}"}}"#),
            "drift[0].fixed",
        ),
    ] {
        let (status, json) = post_report(s.addr, TOKEN, &report("r", &drift));
        assert_eq!(status, 400, "{json}");
        let text = json.to_string();
        assert!(text.contains(field), "{text}");
        assert!(
            !text.contains("evil.example") && !text.contains("channel"),
            "{text}"
        );
    }
    let huge = format!(r#"{{"id":"r","detail":"{}"}}"#, "x".repeat(2 * 1024 * 1024));
    let (status, _) = post_report(s.addr, TOKEN, &huge);
    assert_eq!(status, 413);
    // Nothing was stored: a valid report with the same id is new.
    let (status, json) = post_report(s.addr, TOKEN, &report("r", ""));
    assert_eq!((status, json["status"].as_str()), (200, Some("stored")));
    s.stop();
}

#[test]
fn a_missing_reconciliation_pages_after_every_plus_grace_and_resolves_on_the_next() {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(dir.path(), &config(&recv.url("/hook")), utc(START));
    let (status, _) = post_report(s.addr, TOKEN, &report("run-1", ""));
    assert_eq!(status, 200);

    // every = 1h, grace = 30m (half of every): due at 01:30.
    s.clock.set(utc("2026-12-01T01:29:59Z"));
    let (status, _) = post_report(s.addr, TOKEN, &report("probe-not-a-run", ""));
    assert_eq!(status, 200);
    // That report moved the deadline to 02:59:59; at 02:59:58 still nothing.
    s.clock.set(utc("2026-12-01T02:59:58Z"));
    wait_until("the watcher saw 02:59:58", || {
        s.pending().is_empty().then_some(())
    });
    s.clock.set(utc("2026-12-01T02:59:59Z"));
    let got = wait_pages(&recv, 1);
    let text = got[0].to_string();
    assert!(text.contains("reconciliation_missing"), "{text}");
    assert!(text.contains("warning"), "{text}");
    assert!(
        text.contains("reconciliation has not run since 2026-12-01 10:29 JST"),
        "{text}"
    );
    assert_eq!(got.len(), 1);
    // `/v1/status`, the status page and the deadline gauge say the same.
    let status = s.http_status();
    let block = &status["streams"][0]["reconciliation"];
    assert_eq!(block["state"], "missing", "{block}");
    assert_eq!(block["missing_since"], "2026-12-01T02:59:59Z");
    assert_eq!(block["last_report_id"], "probe-not-a-run");
    assert_eq!(block["last_finished_at"], "2026-12-01T00:00:30Z");
    assert_eq!(
        (
            block["every_seconds"].as_i64(),
            block["grace_seconds"].as_i64()
        ),
        (Some(3600), Some(1800))
    );
    let series = r#"hushwatch_reconciliation_deadline_timestamp_seconds{stream="identity"}"#;
    assert_eq!(
        s.metric(series),
        utc("2026-12-01T02:59:59Z").timestamp() as f64
    );
    let page = get(s.addr, "/").body;
    assert!(
        page.contains("MISSING since Tue 11:59 Asia/Tokyo · 02:59 UTC"),
        "{page}"
    );

    let (status, _) = post_report(s.addr, TOKEN, &report("run-3", ""));
    assert_eq!(status, 200);
    let got = wait_pages(&recv, 2);
    let text = got[1].to_string();
    assert!(text.contains("resolved"), "{text}");
    assert!(text.contains("reconciliation_missing"), "{text}");
    s.stop();
}

fn membership(kind: &str, ts_ms: i64) -> String {
    format!(
        r#"{{"type":"organizationMembership.{kind}","timestamp":{ts_ms},"data":{{"object":"organization_membership","id":"orgmem_1","organization":{{"id":"org_1"}},"public_user_data":{{"user_id":"user_stale"}}}}}}"#
    )
}

#[test]
fn a_grant_retried_after_its_revocation_is_accepted_and_pages_once() {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(dir.path(), &config(&recv.url("/hook")), utc(START));
    // Arrivals carry sub-millisecond times, as the system clock's do; the
    // store keeps milliseconds, and the count must still see the record.
    s.clock
        .set(utc(START) + chrono::TimeDelta::nanoseconds(1_234_567_891));
    let now = s.now().timestamp();
    let created_at = utc(START).timestamp_millis() - 60_000;
    let deleted_at = created_at + 30_000;
    // In order: nothing to say.
    assert_eq!(
        post_webhook(
            s.addr,
            "msg_c1",
            now,
            &membership("created", created_at - 1)
        ),
        200
    );
    assert_eq!(
        post_webhook(s.addr, "msg_d1", now, &membership("deleted", deleted_at)),
        200
    );
    // The creation retried after the deletion, with its older event time.
    assert_eq!(
        post_webhook(s.addr, "msg_c2", now, &membership("created", created_at)),
        200
    );
    let got = wait_pages(&recv, 1);
    let text = got[0].to_string();
    assert!(text.contains("stale_grant"), "{text}");
    assert!(text.contains("warning"), "{text}");
    assert!(
        text.contains(
            "a grant for user_stale arrived after its revocation, with an older event time"
        ),
        "{text}"
    );
    assert!(text.contains("msg_c2") && text.contains("msg_d1"), "{text}");
    // The same delivery again is a duplicate: no second record or page.
    assert_eq!(
        post_webhook(s.addr, "msg_c2", now, &membership("created", created_at)),
        200
    );
    // A grant newer than the revocation (a real re-add) is not stale.
    assert_eq!(
        post_webhook(
            s.addr,
            "msg_c3",
            now,
            &membership("created", deleted_at + 1)
        ),
        200
    );
    let series = r#"hushwatch_stale_grants_total{stream="identity"}"#;
    assert_eq!(s.metric(series), 1.0);
    wait_until("outbox drained", || s.pending().is_empty().then_some(()));
    assert_eq!(pages(&recv).len(), 1, "{:?}", pages(&recv));
    s.stop();
}

const EP: &str = "ep_Kh8oOOL8dKLzdocJ2isAjIhKtJ0";

fn revoke_missed_pages(recv: &Receiver, n: usize) -> Vec<String> {
    wait_until(&format!("{n} revoke_missed pages"), || {
        let got: Vec<String> = pages(recv)
            .iter()
            .map(|p| p.to_string())
            .filter(|p| p.contains("reconciliation_revoke_missed") && p.contains("firing"))
            .collect();
        (got.len() >= n).then_some(got)
    })
}

#[test]
fn without_the_audit_log_the_index_still_answers_and_svix_state_is_named() {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\n[audit]\nenabled = false\n\n[svix.main]\nsecret = \"{SVIX_OPS_SECRET}\"\nstreams = [\"identity\"]\nnotify = [\"hook\"]\nendpoints = {{ \"{EP}\" = \"identity\" }}\n",
        config(&recv.url("/hook"))
    );
    let s = InProcess::start_in(dir.path(), &text, utc(START));
    let now = s.now().timestamp();
    let created_at = utc(START).timestamp_millis() - 60_000;

    // The revocation of user_delivered is indexed though nothing is audited.
    let body = r#"{"type":"user.deleted","timestamp":1764547200000,"data":{"object":"user","id":"user_delivered","deleted":true}}"#;
    assert_eq!(post_webhook(s.addr, "msg_revoke_1", now, body), 200);
    // A stale grant is still found, recorded and paged.
    let deleted = membership("deleted", created_at + 30_000);
    assert_eq!(post_webhook(s.addr, "msg_d1", now, &deleted), 200);
    let created = membership("created", created_at);
    assert_eq!(post_webhook(s.addr, "msg_c2", now, &created), 200);
    wait_until("stale grant page", || {
        pages(&recv)
            .iter()
            .any(|p| p.to_string().contains("stale_grant"))
            .then_some(())
    });

    // Svix disabled the endpoint after exhausting a message.
    let exhausted = format!(
        r#"{{"type":"message.attempt.exhausted","data":{{"appId":"app_1","appUid":null,"msgId":"msg_lost_1","msgEventId":null,"endpointId":"{EP}","lastAttempt":{{"id":"atmpt_1","responseStatusCode":503,"timestamp":"2026-11-30T23:50:00Z"}}}}}}"#
    );
    assert_eq!(post_svix_op(s.addr, now, "op_1", &exhausted), 200);
    let disabled = format!(
        r#"{{"type":"endpoint.disabled","data":{{"appId":"app_1","appUid":null,"endpointId":"{EP}","endpointUid":null,"failSince":"2026-11-30T20:00:00Z","trigger":"automatic"}}}}"#
    );
    assert_eq!(post_svix_op(s.addr, now, "op_2", &disabled), 200);

    let drift = r#"{"subject":"user_lost","kind":"revoke_missed","fixed":true},
                   {"subject":"user_delivered","kind":"revoke_missed","fixed":true}"#;
    let (status, json) = post_report(s.addr, TOKEN, &report("rec-1", drift));
    assert_eq!(status, 200, "{json}");
    let text = &revoke_missed_pages(&recv, 1)[0];
    assert!(
        text.contains(&format!(
            "no revocation for user_lost was ever received (the webhook path lost it: the Svix endpoint {EP} was disabled at 2026-12-01 09:00 JST; 1 message(s) exhausted unacknowledged)"
        )),
        "{text}"
    );
    assert!(
        text.contains(
            "revocation of user_delivered received 2026-12-01 09:00 JST (delivery msg_revoke_1, user.deleted)"
        ),
        "{text}"
    );
    let series = r#"hushwatch_stale_grants_total{stream="identity"}"#;
    assert_eq!(s.metric(series), 1.0);
    s.stop();
}

/// A revocation delivered before the revocation index existed (a state
/// file from before the upgrade) is found in the audit log, so the page
/// does not claim the webhook path lost it.
#[test]
fn a_revocation_from_before_the_index_is_found_in_the_audit_log() {
    let recv = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let text = config(&recv.url("/hook"));
    let s = InProcess::start_in(dir.path(), &text, utc(START));
    let body = r#"{"type":"user.deleted","timestamp":1764547200000,"data":{"object":"user","id":"user_old","deleted":true}}"#;
    let status = post_webhook(s.addr, "msg_revoke_old", s.now().timestamp(), body);
    assert_eq!(status, 200);
    let now = s.now();
    s.stop();

    // As an upgraded state file has it: the audit entry, no index row.
    let db = rusqlite::Connection::open(dir.path().join("data/hushwatch.sqlite3")).unwrap();
    let removed = db.execute("DELETE FROM revocations", []).unwrap();
    assert_eq!(removed, 1, "the revocation was indexed on ingest");
    drop(db);

    let s = InProcess::start_in(dir.path(), &text, now);
    let drift = r#"{"subject":"user_old","kind":"revoke_missed","fixed":true}"#;
    let (status, json) = post_report(s.addr, TOKEN, &report("rec-old", drift));
    assert_eq!(status, 200, "{json}");
    let got = wait_pages(&recv, 1);
    let text = got[0].to_string();
    assert!(
        text.contains(
            "revocation of user_old received 2026-12-01 09:00 JST (delivery msg_revoke_old"
        ),
        "{text}"
    );
    assert!(!text.contains("was ever received"), "{text}");
    s.stop();
}
