//! Ingest over real HTTP with a real SQLite file: signatures (every
//! published and derived vector), every error status, duplicates, the
//! app-report route, and the event-type filter.

use crate::common;

use common::*;
use serde_json::Value;

fn vectors() -> Vec<Value> {
    let text = include_str!("../data/standard-webhooks-vectors.json");
    let doc: Value = serde_json::from_str(text).unwrap();
    doc["vectors"].as_array().unwrap().clone()
}

/// One stream per vector, each with the vector's secret. The two ed25519
/// vectors carry a `whpk_` public key, which is not an HMAC secret: their
/// stream gets vector A's HMAC secret, so only a `v1` entry could match.
fn vector_config(vectors: &[Value]) -> String {
    let mut config = String::from("[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = \"data\"\n");
    for (i, v) in vectors.iter().enumerate() {
        let secret = v["secret"].as_str().unwrap();
        let secret = if secret.starts_with("whpk_") {
            SECRET
        } else {
            secret
        };
        config.push_str(&format!(
            "[streams.v{i}]\ncalendar = \"always\"\nsilence_threshold = \"1h\"\n[streams.v{i}.ingest]\nwebhook_secret = \"{secret}\"\n"
        ));
    }
    config
}

#[test]
fn every_signature_vector_gets_the_right_answer_over_http() {
    let vectors = vectors();
    let work = Workdir::new(&vector_config(&vectors));
    let server = InProcess::start(&work, utc("2020-01-01T00:00:00Z"));
    for (i, v) in vectors.iter().enumerate() {
        let name = v["name"].as_str().unwrap();
        let verify_at =
            chrono::DateTime::from_timestamp(v["verify_at"].as_i64().unwrap(), 0).unwrap();
        server.set_time(verify_at);
        let ts = v["timestamp"].to_string();
        // Alternate the header families: both must work.
        let family = if i % 2 == 0 { "svix" } else { "webhook" };
        let headers = [
            (
                format!("{family}-id"),
                v["msg_id"].as_str().unwrap().to_string(),
            ),
            (format!("{family}-timestamp"), ts),
            (
                format!("{family}-signature"),
                v["signature"].as_str().unwrap().to_string(),
            ),
        ];
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let reply = request(
            server.addr,
            "POST",
            &format!("/v1/streams/v{i}/webhook"),
            &headers,
            v["payload"].as_str().unwrap().as_bytes(),
        );
        let is_ed25519 = v["signature"].as_str().unwrap().starts_with("v1a,");
        let expected = match (v["expect_valid"].as_bool().unwrap() && !is_ed25519, name) {
            (true, _) => 200,
            (false, n) if n.contains("stale") || n.contains("future") => 400,
            (false, _) => 401,
        };
        assert_eq!(reply.status, expected, "vector {name}: {}", reply.body);
        let status = stream_status(server.addr, &format!("v{i}"));
        assert_eq!(
            status["last_event_at"].is_null(),
            expected != 200,
            "vector {name}: stored only when accepted"
        );
    }
}

fn start_basic() -> (Workdir, InProcess) {
    let work = Workdir::new(&basic_config("calendar = \"always\"\nsilence_threshold = \"1h\"\nevent_types = [\"user.*\", \"session.*\"]"));
    let server = InProcess::start(&work, chrono::Utc::now());
    (work, server)
}

#[test]
fn error_statuses_store_nothing() {
    let (_work, s) = start_basic();
    // The server's (frozen) clock, not the wall clock: a second boundary
    // crossed since start would put "301 s old" at exactly 300 s.
    let now = s.app().clock().now().timestamp();
    let body = r#"{"type":"user.deleted","timestamp":1700000000000,"data":{"id":"user_1","object":"user"}}"#;
    let cases: Vec<(&str, Reply, u16)> = vec![
        (
            "wrong secret",
            post_webhook(
                s.addr,
                "identity",
                "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
                "msg_1",
                now,
                body,
            ),
            401,
        ),
        (
            "stale timestamp",
            post_webhook(s.addr, "identity", SECRET, "msg_2", now - 301, body),
            400,
        ),
        (
            "future timestamp",
            post_webhook(s.addr, "identity", SECRET, "msg_3", now + 301, body),
            400,
        ),
        (
            "unparseable timestamp",
            request(
                s.addr,
                "POST",
                "/v1/streams/identity/webhook",
                &[
                    ("svix-id", "m"),
                    ("svix-timestamp", "soon"),
                    ("svix-signature", "v1,xx"),
                ],
                body.as_bytes(),
            ),
            400,
        ),
        (
            "no signature headers",
            request(
                s.addr,
                "POST",
                "/v1/streams/identity/webhook",
                &[],
                body.as_bytes(),
            ),
            401,
        ),
        (
            "unknown stream",
            post_webhook(s.addr, "nope", SECRET, "msg_4", now, body),
            404,
        ),
        (
            "missing token",
            request(
                s.addr,
                "POST",
                "/v1/streams/identity/events",
                &[],
                br#"{"type":"user.deleted"}"#,
            ),
            401,
        ),
        (
            "wrong token",
            post_events(s.addr, "identity", "guess", r#"{"type":"user.deleted"}"#),
            401,
        ),
        (
            "report without type",
            post_events(s.addr, "identity", TOKEN, r#"{"id":"x"}"#),
            400,
        ),
        (
            "report not JSON",
            post_events(s.addr, "identity", TOKEN, "\u{0}\u{1}garbage"),
            400,
        ),
        (
            "wrong method",
            get(s.addr, "/v1/streams/identity/webhook"),
            405,
        ),
    ];
    for (what, reply, expected) in &cases {
        assert_eq!(reply.status, *expected, "{what}: {}", reply.body);
        assert!(
            reply.json()["error"]
                .as_str()
                .is_some_and(|e| !e.is_empty()),
            "{what}: error says why"
        );
        assert!(
            reply.header("webhook-delivery").is_none(),
            "{what}: never tell Svix to disable us"
        );
    }
    let status = stream_status(s.addr, "identity");
    assert!(
        status["last_event_at"].is_null(),
        "nothing stored: {status}"
    );
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_events_total{outcome="bad_signature",stream="identity"}"#
        ),
        2.0
    );
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_events_total{outcome="stale",stream="identity"}"#
        ),
        3.0
    );
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_events_total{outcome="unauthorized",stream="identity"}"#
        ),
        2.0
    );
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_events_total{outcome="accepted",stream="identity"}"#
        ),
        0.0
    );
}

#[test]
fn oversize_bodies_get_413() {
    let (_work, s) = start_basic();
    let big = vec![b'x'; 1024 * 1024 + 1];
    let reply = request(
        s.addr,
        "POST",
        "/v1/streams/identity/webhook",
        &[("svix-id", "m")],
        &big,
    );
    assert_eq!(reply.status, 413);
    let reply = post_events(s.addr, "identity", TOKEN, &String::from_utf8(big).unwrap());
    assert_eq!(reply.status, 413);
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_events_total{outcome="too_large",stream="identity"}"#
        ),
        2.0
    );
    // Exactly 1 MiB is allowed through to the signature check.
    let limit = vec![b' '; 1024 * 1024];
    assert_eq!(
        request(s.addr, "POST", "/v1/streams/identity/webhook", &[], &limit).status,
        401
    );
}

#[test]
fn duplicates_are_answered_2xx_and_stored_once() {
    let (_work, s) = start_basic();
    let body = r#"{"type":"user.deleted","timestamp":1700000000000,"data":{"id":"user_1","object":"user"}}"#;
    let first = post_webhook(s.addr, "identity", SECRET, "msg_dup", now_unix(), body);
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.json()["status"], "accepted");
    let again = post_webhook(s.addr, "identity", SECRET, "msg_dup", now_unix(), body);
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["status"], "duplicate");
    let st = stream_status(s.addr, "identity");
    assert_eq!(st["last_event_type"], "user.deleted");
    assert_eq!(st["last_event_id"], "msg_dup");
    // Clerk's body timestamp (ms) is the event time; arrival is separate.
    assert_eq!(st["newest_event_time"], "2023-11-14T22:13:20.000Z");
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_events_total{outcome="duplicate",stream="identity"}"#
        ),
        1.0
    );
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_events_total{outcome="accepted",stream="identity"}"#
        ),
        1.0
    );
    assert!(metric(s.addr, r#"hushwatch_event_lag_seconds{stream="identity"}"#) > 86_400.0 * 365.0);
}

#[test]
fn app_reports_accept_one_or_many_and_dedup_by_id() {
    let (_work, s) = start_basic();
    let one = post_events(
        s.addr,
        "identity",
        TOKEN,
        r#"{"type":"user.created","id":"a1","occurred_at":"2026-11-29T10:00:00Z"}"#,
    );
    assert_eq!(one.status, 200, "{}", one.body);
    let many = post_events(
        s.addr,
        "identity",
        TOKEN,
        r#"[{"type":"session.revoked","id":"a1"},{"type":"session.revoked","id":"a2"},{"type":"user.deleted"}]"#,
    );
    assert_eq!(many.status, 200);
    assert_eq!(many.json()["accepted"], 2);
    assert_eq!(many.json()["duplicate"], 1);
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_events_total{outcome="accepted",stream="identity"}"#
        ),
        3.0
    );
}

#[test]
fn filtered_event_types_are_recorded_but_do_not_reset_the_clock() {
    let (_work, s) = start_basic();
    let reply = post_events(
        s.addr,
        "identity",
        TOKEN,
        r#"{"type":"email.created","id":"e1"}"#,
    );
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["status"], "accepted");
    assert!(stream_status(s.addr, "identity")["last_event_at"].is_null());
    let reply = post_events(
        s.addr,
        "identity",
        TOKEN,
        r#"{"type":"user.updated","id":"e2"}"#,
    );
    assert_eq!(reply.status, 200);
    assert_eq!(
        stream_status(s.addr, "identity")["last_event_type"],
        "user.updated"
    );
}

#[test]
fn health_ready_and_metrics_are_served() {
    let (_work, s) = start_basic();
    assert_eq!(get(s.addr, "/healthz").status, 200);
    assert_eq!(get(s.addr, "/readyz").status, 200);
    let metrics = get(s.addr, "/metrics").body;
    for name in [
        "hushwatch_silence_alert{stream=\"identity\"} 0",
        "hushwatch_last_event_timestamp_seconds{stream=\"identity\"} 0",
        "hushwatch_business_silence_seconds{stream=\"identity\"}",
        "hushwatch_silence_threshold_seconds{stream=\"identity\"} 3600",
        "hushwatch_silence_fires_at_timestamp_seconds{stream=\"identity\"}",
        "hushwatch_event_lag_seconds{stream=\"identity\"} 0",
        "hushwatch_in_business_hours{calendar=\"tokyo\"}",
        "hushwatch_events_total{outcome=\"error\",stream=\"identity\"} 0",
        "hushwatch_config_last_reload_successful 1",
        "hushwatch_config_last_reload_timestamp_seconds",
    ] {
        assert!(metrics.contains(name), "missing {name}\n{metrics}");
    }
    assert_eq!(get(s.addr, "/nope").status, 404);
}
