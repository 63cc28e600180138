//! Svix operational webhooks over real HTTP with a real SQLite file: every
//! example payload from the reference, both header families, unknown types,
//! a burst of 500 exhausted messages (one grouped page), out-of-order
//! delivery, acknowledgement, restart persistence, and pages outside
//! business hours.

use crate::common;
use crate::common::pg;

use common::*;
use hushwatch::clock::Clock;
use std::net::SocketAddr;

const OPS_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const ADMIN: &str = "admin-token-1";
const EP: &str = "ep_Kh8oOOL8dKLzdocJ2isAjIhKtJ0";

fn config() -> String {
    format!(
        "{}\n[svix.main]\nsecret = \"{OPS_SECRET}\"\nstreams = [\"identity\"]\nnotify = [\"stdout\"]\nadmin_token = \"{ADMIN}\"\nendpoints = {{ \"{EP}\" = \"identity\" }}\n",
        basic_config("calendar = \"tokyo\"\nsilence_threshold = \"6h\"")
    )
}

fn send(addr: SocketAddr, id: &str, body: &str, family: &str) -> Reply {
    send_at(addr, now_unix(), id, body, family)
}

/// Signed at `ts`, the sender's clock (tests on a manual clock pass its time).
fn send_at(addr: SocketAddr, ts: i64, id: &str, body: &str, family: &str) -> Reply {
    let key = hushwatch::ingest::signature::SecretKey::parse(OPS_SECRET).unwrap();
    let sig = hushwatch::ingest::signature::sign(&key, id, ts, body.as_bytes());
    let ts = ts.to_string();
    let h = [
        (format!("{family}-id"), id.to_string()),
        (format!("{family}-timestamp"), ts),
        (format!("{family}-signature"), sig),
    ];
    let headers: Vec<(&str, &str)> = h.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    request(
        addr,
        "POST",
        "/v1/svix/main/operational",
        &headers,
        body.as_bytes(),
    )
}

fn endpoint_body(kind: &str, extra: &str) -> String {
    format!(
        r#"{{"type":"{kind}","data":{{"appId":"app_u8jzPde0IgxLd6GncfBAepfJBd0","appUid":"acme-prod","endpointId":"{EP}","endpointUid":"identity-sidecar"{extra}}}}}"#
    )
}

fn attempt_body(kind: &str, msg: &str, status: u16, at: &str) -> String {
    format!(
        r#"{{"type":"{kind}","data":{{"appId":"app_u8jzPde0IgxLd6GncfBAepfJBd0","appUid":null,"msgId":"{msg}","msgEventId":null,"endpointId":"{EP}","lastAttempt":{{"id":"atmpt_1","responseStatusCode":{status},"timestamp":"{at}"}}}}}}"#
    )
}

fn endpoint_status(addr: SocketAddr) -> serde_json::Value {
    let status = get(addr, "/v1/status").json();
    status["svix"]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["endpoint_id"] == EP)
        .cloned()
        .unwrap_or_default()
}

/// Pages queued for the Svix alerts, read from the outbox table.
fn outbox_reasons(work: &Workdir) -> Vec<String> {
    let conn = rusqlite::Connection::open(work.path().join("data/hushwatch.sqlite3")).unwrap();
    let mut stmt = conn
        .prepare("SELECT reason FROM outbox WHERE reason LIKE '%Svix endpoint%' ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// (alert kind, severity, state, reason) of every Svix page in the outbox.
fn svix_pages(work: &Workdir) -> Vec<(String, String, String, String)> {
    let conn = rusqlite::Connection::open(work.path().join("data/hushwatch.sqlite3")).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT alert_kind, severity, alert_state, reason FROM outbox
             WHERE alert_kind LIKE 'svix_%' ORDER BY id",
        )
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn reference_payloads_are_accepted_with_both_header_families() {
    let work = Workdir::new(&config());
    let s = InProcess::start(&work, chrono::Utc::now());
    let bodies = [
        endpoint_body("endpoint.created", ""),
        endpoint_body("endpoint.updated", ""),
        endpoint_body("endpoint.enabled", ""),
        endpoint_body("endpoint.disabled", r#","failSince":"2025-03-03T09:12:44Z","trigger":"automatic""#),
        endpoint_body("endpoint.disabled", r#","failSince":null,"trigger":"manual""#),
        attempt_body("message.attempt.failing", "msg_RlgLKOmxgJTeKdNnFRIBXuDL7Dx", 503, "2025-03-03T09:47:52Z"),
        attempt_body("message.attempt.exhausted", "msg_RlgLKOmxgJTeKdNnFRIBXuDL7Dx", 0, "2025-03-04T12:47:51Z"),
        attempt_body("message.attempt.recovered", "msg_other", 204, "2025-03-03T11:49:31Z"),
        r#"{"type":"background_task.finished","data":{"taskId":"qtask_nXsiVpzz63FfkCzJr4i0B3JrTAw","task":"endpoint.recover","status":"finished","data":{"messagesSent":17}}}"#.to_string(),
        r#"{"type":"ingest.endpoint.disabled","data":{"sourceId":"src_1","endpointId":"ep_ingest","failSince":null}}"#.to_string(),
        r#"{"type":"message.attempt.log","data":[{"msgId":"x"}]}"#.to_string(),
        endpoint_body("endpoint.deleted", ""),
    ];
    for (i, body) in bodies.iter().enumerate() {
        let family = if i % 2 == 0 { "svix" } else { "webhook" };
        let reply = send(s.addr, &format!("msg_op_{i}"), body, family);
        assert_eq!(reply.status, 200, "{body}: {}", reply.body);
        assert_eq!(reply.json()["status"], "accepted");
    }
    assert_eq!(
        send(s.addr, "msg_op_0", &bodies[0], "svix").json()["status"],
        "duplicate"
    );
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_svix_events_total{outcome="accepted",source="main",type="other"}"#
        ),
        1.0
    );
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_svix_events_total{outcome="accepted",source="main",type="endpoint.disabled"}"#
        ),
        3.0
    );
    let ep = endpoint_status(s.addr);
    assert_eq!(ep["state"], "deleted");
    assert_eq!(
        ep["lost_messages"][0]["msg_id"],
        "msg_RlgLKOmxgJTeKdNnFRIBXuDL7Dx"
    );
    assert_eq!(ep["lost_messages"][0]["status_code"], 0);
}

#[test]
fn bad_requests_get_the_ingest_answers() {
    let work = Workdir::new(&config());
    let s = InProcess::start(&work, chrono::Utc::now());
    let body = endpoint_body("endpoint.disabled", "");
    let key = hushwatch::ingest::signature::SecretKey::parse(SECRET).unwrap();
    let sig = hushwatch::ingest::signature::sign(&key, "m1", now_unix(), body.as_bytes());
    let ts = now_unix().to_string();
    let wrong = request(
        s.addr,
        "POST",
        "/v1/svix/main/operational",
        &[
            ("svix-id", "m1"),
            ("svix-timestamp", &ts),
            ("svix-signature", &sig),
        ],
        body.as_bytes(),
    );
    assert_eq!(wrong.status, 401);
    let old = (now_unix() - 400).to_string();
    assert_eq!(
        request(
            s.addr,
            "POST",
            "/v1/svix/main/operational",
            &[
                ("svix-id", "m1"),
                ("svix-timestamp", &old),
                ("svix-signature", "v1,x")
            ],
            body.as_bytes()
        )
        .status,
        400
    );
    assert_eq!(
        request(s.addr, "POST", "/v1/svix/nope/operational", &[], b"{}").status,
        404
    );
    assert_eq!(
        request(
            s.addr,
            "POST",
            "/v1/svix/main/operational",
            &[],
            &vec![b'x'; 1_100_000]
        )
        .status,
        413
    );
    assert!(endpoint_status(s.addr).is_null(), "nothing stored");
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_svix_events_total{outcome="bad_signature",source="main",type="unverified"}"#
        ),
        1.0
    );
}

#[test]
fn disabled_endpoint_pages_at_once_even_on_a_saturday_night_and_resolves_when_enabled() {
    let work = Workdir::new(&config());
    // Saturday 23:00 in Tokyo: far outside business hours.
    let s = InProcess::start(&work, utc("2026-12-05T23:00:00+09:00"));
    let ts = s.clock.now().timestamp();
    let send = |id: &str, body: &str, family: &str| send_at(s.addr, ts, id, body, family);
    let reply = send(
        "d1",
        &endpoint_body(
            "endpoint.disabled",
            r#","failSince":"2026-12-01T09:12:44Z","trigger":"automatic""#,
        ),
        "svix",
    );
    assert_eq!(reply.json()["pages"], 1, "{}", reply.body);
    assert_eq!(
        metric(
            s.addr,
            &format!(r#"hushwatch_svix_endpoint_disabled{{endpoint_id="{EP}",source="main"}}"#)
        ),
        1.0
    );
    assert_eq!(
        metric(
            s.addr,
            &format!(
                r#"hushwatch_svix_endpoint_disabled_manually{{endpoint_id="{EP}",source="main"}}"#
            )
        ),
        0.0
    );
    let ep = endpoint_status(s.addr);
    assert_eq!(ep["state"], "disabled");
    assert_eq!(ep["disabled"]["trigger"], "automatic");
    assert_eq!(ep["disabled"]["fail_since"], "2026-12-01T09:12:44Z");
    // A second disabled notice is not a second page.
    assert_eq!(
        send("d2", &endpoint_body("endpoint.disabled", ""), "svix").json()["pages"],
        0
    );
    assert_eq!(
        send("e1", &endpoint_body("endpoint.enabled", ""), "svix").json()["pages"],
        1
    );
    assert_eq!(endpoint_status(s.addr)["state"], "ok");
    s.stop();
    let pages = outbox_reasons(&work);
    assert_eq!(pages.len(), 2, "{pages:?}");
    assert!(
        pages[0].contains("DISABLED") && pages[0].contains("recover"),
        "{}",
        pages[0]
    );
    let kinds: Vec<(String, String, String)> = svix_pages(&work)
        .into_iter()
        .map(|(kind, severity, state, _)| (kind, severity, state))
        .collect();
    let row = |state: &str| {
        (
            "svix_endpoint_disabled".to_string(),
            "critical".to_string(),
            state.to_string(),
        )
    };
    assert_eq!(kinds, [row("firing"), row("ok")]);
    assert!(
        pages[0].contains("2026-12-01T09:12:44Z"),
        "the page says since when"
    );
    assert!(pages[1].contains("enabled again"));
}

#[test]
fn manual_disable_is_a_warning() {
    let work = Workdir::new(&config());
    let s = InProcess::start(&work, chrono::Utc::now());
    assert_eq!(
        send(
            s.addr,
            "d1",
            &endpoint_body("endpoint.disabled", r#","trigger":"manual""#),
            "webhook"
        )
        .json()["pages"],
        1
    );
    // The rules tell a manual disable apart by this series.
    assert_eq!(
        metric(
            s.addr,
            &format!(
                r#"hushwatch_svix_endpoint_disabled_manually{{endpoint_id="{EP}",source="main"}}"#
            )
        ),
        1.0
    );
    // Re-enabling resolves it, still as a warning.
    assert_eq!(
        send(
            s.addr,
            "e1",
            &endpoint_body("endpoint.enabled", ""),
            "webhook"
        )
        .json()["pages"],
        1
    );
    s.stop();
    let pages = svix_pages(&work);
    let severities: Vec<(&str, &str, &str)> = pages
        .iter()
        .map(|(k, sev, state, _)| (k.as_str(), sev.as_str(), state.as_str()))
        .collect();
    assert_eq!(
        severities,
        [
            ("svix_endpoint_disabled", "warning", "firing"),
            ("svix_endpoint_disabled", "warning", "ok")
        ]
    );
    assert!(pages[0].3.contains("manual trigger"), "{}", pages[0].3);
}

#[test]
fn a_burst_of_500_exhausted_messages_is_one_grouped_page_with_every_id_kept() {
    let work = Workdir::new(&config());
    let t0 = utc("2026-12-02T10:00:00Z");
    let s = InProcess::start(&work, t0);
    let mut pages = 0;
    for i in 0..500 {
        let body = attempt_body(
            "message.attempt.exhausted",
            &format!("msg_{i:05}"),
            if i % 2 == 0 { 0 } else { 503 },
            "2026-12-02T09:59:00Z",
        );
        let reply = send_at(s.addr, t0.timestamp(), &format!("ex_{i}"), &body, "svix");
        assert_eq!(reply.status, 200);
        pages += reply.json()["pages"].as_i64().unwrap();
    }
    assert_eq!(
        pages, 1,
        "the first exhaustion pages at once, the rest are grouped"
    );
    let ep = endpoint_status(s.addr);
    assert_eq!(ep["lost_messages"].as_array().unwrap().len(), 500);
    assert_eq!(ep["exhausted_total"], 500);
    assert_eq!(
        metric(
            s.addr,
            &format!(r#"hushwatch_svix_lost_messages{{endpoint_id="{EP}",source="main"}}"#)
        ),
        500.0
    );
    assert_eq!(
        metric(
            s.addr,
            &format!(
                r#"hushwatch_svix_attempts_exhausted_total{{endpoint_id="{EP}",source="main"}}"#
            )
        ),
        500.0
    );
    // After the grouping window, one updated page carries the total.
    s.set_time(t0 + chrono::TimeDelta::seconds(31));
    let reasons = wait_for(
        std::time::Duration::from_secs(5),
        "the grouped page",
        || {
            let got = outbox_reasons(&work);
            (got.len() >= 2).then_some(got)
        },
    );
    assert_exactly("the first page and the grouped page", 2, &reasons);
    assert!(
        reasons[0].contains(": 1 message(s) used up"),
        "{}",
        reasons[0]
    );
    assert!(
        reasons[1].contains(": 500 message(s) used up"),
        "{}",
        reasons[1]
    );

    // Acknowledging everything resolves the alert.
    let ids: Vec<String> = (0..500).map(|i| format!("\"msg_{i:05}\"")).collect();
    let body = format!(r#"{{"endpoint_id":"{EP}","msg_ids":[{}]}}"#, ids.join(","));
    let auth = format!("Bearer {ADMIN}");
    assert_eq!(
        request(
            s.addr,
            "POST",
            "/v1/svix/main/acknowledge",
            &[("authorization", "Bearer nope")],
            body.as_bytes()
        )
        .status,
        401
    );
    let ack = request(
        s.addr,
        "POST",
        "/v1/svix/main/acknowledge",
        &[("authorization", &auth)],
        body.as_bytes(),
    );
    assert_eq!(ack.status, 200, "{}", ack.body);
    assert_eq!(ack.json()["acknowledged"], 500);
    assert_eq!(ack.json()["remaining"], 0);
    s.stop();
    let reasons = outbox_reasons(&work);
    assert_eq!(reasons.len(), 3);
    assert!(reasons[2].contains("every lost message was acknowledged"));
}

#[test]
fn recovered_before_failing_out_of_order_leaves_no_stuck_state() {
    let work = Workdir::new(&config());
    let s = InProcess::start(&work, chrono::Utc::now());
    let recovered = attempt_body(
        "message.attempt.recovered",
        "msg_a",
        204,
        "2026-12-02T11:00:00Z",
    );
    let failing = attempt_body(
        "message.attempt.failing",
        "msg_a",
        503,
        "2026-12-02T10:35:00Z",
    );
    assert_eq!(send(s.addr, "r1", &recovered, "svix").status, 200);
    assert_eq!(send(s.addr, "f1", &failing, "svix").json()["pages"], 0);
    assert_eq!(endpoint_status(s.addr)["failing_messages"], 0);
    // In order, failing raises the early warning and recovered clears it.
    let failing_b = attempt_body(
        "message.attempt.failing",
        "msg_b",
        503,
        "2026-12-02T10:35:00Z",
    );
    let recovered_b = attempt_body(
        "message.attempt.recovered",
        "msg_b",
        204,
        "2026-12-02T11:00:00Z",
    );
    assert_eq!(send(s.addr, "f2", &failing_b, "svix").json()["pages"], 1);
    assert_eq!(endpoint_status(s.addr)["state"], "failing");
    assert_eq!(
        metric(
            s.addr,
            &format!(r#"hushwatch_svix_endpoint_failing{{endpoint_id="{EP}",source="main"}}"#)
        ),
        1.0
    );
    assert_eq!(send(s.addr, "r2", &recovered_b, "svix").json()["pages"], 1);
    assert_eq!(endpoint_status(s.addr)["state"], "ok");
}

#[test]
fn svix_state_survives_kill_9() {
    let work = Workdir::new(&config());
    let s = Sidecar::start(&work.config_path());
    assert_eq!(
        send(
            s.addr,
            "d1",
            &endpoint_body(
                "endpoint.disabled",
                r#","failSince":"2026-12-01T09:12:44Z""#
            ),
            "svix"
        )
        .status,
        200
    );
    let ex = attempt_body(
        "message.attempt.exhausted",
        "msg_lost",
        0,
        "2026-12-02T09:59:00Z",
    );
    assert_eq!(send(s.addr, "x1", &ex, "svix").status, 200);
    s.kill9();
    let s = Sidecar::start(&work.config_path());
    let ep = endpoint_status(s.addr);
    assert_eq!(ep["state"], "disabled");
    assert_eq!(ep["lost_messages"][0]["msg_id"], "msg_lost");
    assert_eq!(
        send(s.addr, "x1", &ex, "svix").json()["status"],
        "duplicate"
    );
    // The two operational events acknowledged before the kill -9 are in
    // the audit chain, once each: the resent `x1` was a duplicate and
    // appended nothing. (This counts audit lines, not pages.)
    let (code, out, _) = cli(&["audit", "export", "--stream", "svix:main"])
        .config(work.config_path())
        .run();
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().count(),
        2,
        "operational events are in the audit log: {out}"
    );
}

/// The audit export lines of the Svix source `main`.
fn audit_export(work: &Workdir) -> Vec<serde_json::Value> {
    audit_export_with_env(work, &[])
}

fn audit_export_with_env(work: &Workdir, env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let o = cli(&["audit", "export", "--stream", "svix:main"])
        .config(work.config_path())
        .envs(env)
        .output();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn an_acknowledgement_that_resolves_the_exhausted_alert_is_audited() {
    let work = Workdir::new(&config());
    let t0 = utc("2026-12-02T10:00:00Z");
    let s = InProcess::start(&work, t0);
    let ex = attempt_body(
        "message.attempt.exhausted",
        "msg_lost",
        0,
        "2026-12-02T09:59:00Z",
    );
    assert_eq!(
        send_at(s.addr, t0.timestamp(), "x1", &ex, "svix").json()["pages"],
        1
    );
    let auth = format!("Bearer {ADMIN}");
    let ack = |ids: &str| {
        let body = format!(r#"{{"endpoint_id":"{EP}","msg_ids":[{ids}]}}"#);
        request(
            s.addr,
            "POST",
            "/v1/svix/main/acknowledge",
            &[("authorization", &auth)],
            body.as_bytes(),
        )
    };
    // Naming an unknown message acknowledges nothing: no action, no entry.
    assert_eq!(ack(r#""msg_other""#).json()["acknowledged"], 0);
    assert_eq!(audit_export(&work).len(), 1, "only the operational event");
    let reply = ack(r#""msg_lost""#);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["remaining"], 0);
    let lines = audit_export(&work);
    assert_eq!(lines.len(), 2, "{lines:?}");
    let entry = &lines[1];
    assert_eq!(
        entry["event_type"], "hushwatch.svix.acknowledged",
        "{entry}"
    );
    let text = entry.to_string();
    assert!(text.contains("admin api"), "names who acknowledged: {text}");
    assert!(text.contains(EP), "names the endpoint: {text}");
    assert!(!text.contains(ADMIN), "never the token: {text}");
    // The resolve page went out with it.
    s.stop();
    let reasons = outbox_reasons(&work);
    assert!(
        reasons
            .last()
            .is_some_and(|r| r.contains("every lost message was acknowledged")),
        "{reasons:?}"
    );
}

/// Past `MAX_ENDPOINTS_PER_SOURCE`, new endpoint ids share the `other`
/// row: the `/metrics` series, status rows and pages stay bounded, and
/// the cap is said (status page, `/v1/status`, the grouped page's text)
/// instead of anything being dropped. Through the real binary, on the
/// store `store` (`""`: SQLite; else a `[store]` block) with `env`.
fn endpoints_past_the_cap_are_grouped(
    store: &str,
    env: &[(&str, &str)],
    pages: &dyn Fn(&Workdir) -> Vec<String>,
) {
    use hushwatch::store::svix::MAX_ENDPOINTS_PER_SOURCE;
    let cap = usize::try_from(MAX_ENDPOINTS_PER_SOURCE).unwrap();
    let work = Workdir::new(&format!("{}{store}", config()));
    let s = Sidecar::start_with_env(&work.config_path(), env);
    let disabled = |ep: &str| {
        format!(
            r#"{{"type":"endpoint.disabled","data":{{"appId":"app_1","endpointId":"{ep}","failSince":"2026-12-01T09:00:00Z","trigger":"automatic"}}}}"#
        )
    };
    let sent = cap + 100;
    for i in 0..sent {
        let reply = send(
            s.addr,
            &format!("msg_cap_{i}"),
            &disabled(&format!("ep_cap_{i:04}")),
            "svix",
        );
        assert_eq!(reply.status, 200, "{i}: {}", reply.body);
        assert_eq!(reply.json()["status"], "accepted");
    }
    // The mapped endpoint keeps its own row past the cap (config bounds it).
    assert_eq!(
        send(s.addr, "msg_cap_mapped", &disabled(EP), "svix").status,
        200
    );

    let text = get(s.addr, "/metrics").body;
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("hushwatch_svix_endpoint_disabled{"))
        .collect();
    assert_eq!(series.len(), cap + 2, "cap + other + mapped: {series:?}");
    assert!(
        series
            .contains(&r#"hushwatch_svix_endpoint_disabled{endpoint_id="other",source="main"} 1"#),
        "{series:?}"
    );
    assert!(
        !text.contains(&format!("ep_cap_{:04}", cap)),
        "first grouped id has no series"
    );

    let status = get(s.addr, "/v1/status").json();
    let svix = &status["svix"];
    assert_eq!(
        svix["grouped_sources"],
        serde_json::json!(["main"]),
        "{svix}"
    );
    assert_eq!(svix["max_endpoints_per_source"], MAX_ENDPOINTS_PER_SOURCE);
    let endpoints = svix["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), cap + 2);
    let other = endpoints
        .iter()
        .find(|e| e["endpoint_id"] == "other")
        .unwrap();
    assert_eq!(
        (other["grouped"].clone(), other["state"].clone()),
        (true.into(), "disabled".into())
    );
    let page = get(s.addr, "/").body;
    assert!(
        page.contains(&format!(
            "Svix source main has more than {cap} endpoints; further endpoints are grouped as <code>other</code>"
        )),
        "status page says the cap was hit"
    );

    // Logged once, when the first endpoint was folded.
    let logs = s.stderr_text();
    assert_eq!(
        logs.matches("further endpoints are grouped").count(),
        1,
        "{}",
        logs.lines()
            .filter(|l| l.contains("grouped"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // A grouped endpoint's lost message is kept (in the group) and is
    // acknowledged under the endpoint's own id.
    let last = format!("ep_cap_{:04}", sent - 1);
    let exhausted = format!(
        r#"{{"type":"message.attempt.exhausted","data":{{"appId":"app_1","endpointId":"{last}","msgId":"msg_grouped_lost","lastAttempt":{{"id":"atmpt_1","responseStatusCode":0,"timestamp":"2026-12-01T09:00:00Z"}}}}}}"#
    );
    let reply = send(s.addr, "msg_cap_exhausted", &exhausted, "svix");
    assert_eq!(reply.json()["pages"], 1, "{}", reply.body);
    let body = format!(r#"{{"endpoint_id":"{last}","msg_ids":["msg_grouped_lost"]}}"#);
    let auth = format!("Bearer {ADMIN}");
    let ack = request(
        s.addr,
        "POST",
        "/v1/svix/main/acknowledge",
        &[("authorization", &auth)],
        body.as_bytes(),
    );
    assert_eq!(
        (
            ack.json()["acknowledged"].clone(),
            ack.json()["remaining"].clone()
        ),
        (1.into(), 0.into()),
        "{}",
        ack.body
    );

    // One page per tracked endpoint, one for the group (naming the cap and
    // the first grouped endpoint), one for the mapped endpoint, and the
    // group's exhausted page and its resolve: 105 pages for 201 endpoints,
    // where each endpoint used to page.
    s.stop();
    let reasons = pages(&work);
    assert_eq!(reasons.len(), cap + 4, "{:?}", &reasons[..3]);
    let grouped: Vec<&String> = reasons
        .iter()
        .filter(|r| r.contains("grouped as") && r.contains("DISABLED"))
        .collect();
    assert_eq!(grouped.len(), 1, "{grouped:?}");
    assert!(
        grouped[0].contains(&format!("past the first {cap} of source main"))
            && grouped[0].contains(&format!("this event: endpoint ep_cap_{cap:04}"))
            && grouped[0].contains("DISABLED"),
        "{}",
        grouped[0]
    );
}

#[test]
fn endpoints_past_the_cap_are_grouped_on_sqlite() {
    endpoints_past_the_cap_are_grouped("", &[], &|work| {
        svix_pages(work).into_iter().map(|p| p.3).collect()
    });
}

#[test]
fn endpoints_past_the_cap_are_grouped_on_postgres() {
    let Some(db) = pg::PgDb::create("svix_cap_postgres") else {
        return;
    };
    let url = db.url.clone();
    endpoints_past_the_cap_are_grouped(
        "\n[store]\nurl = \"${HW_PG_URL}\"\n",
        &[("HW_PG_URL", url.as_str())],
        &|_| db.query("SELECT reason FROM outbox WHERE alert_kind LIKE 'svix_%' ORDER BY id"),
    );
}

// ---- Issue 31: Svix as the open-source server really behaves ----

/// `message.attempt.*` exactly as the open-source `svix-server` 1.100 sent
/// it in the issue-31 run: camelCase, no `endpointUid`, RFC 3339 with
/// microseconds, `responseStatusCode` 0 for a connection error.
fn oss_attempt(kind: &str, msg: &str, status: u16, at: &str) -> String {
    format!(
        r#"{{"data":{{"appId":"app_2pQOSSRunApp00000000000000","appUid":"clerk-app","endpointId":"{EP}","lastAttempt":{{"id":"atmpt_2pQOSSAttempt000000000000","responseStatusCode":{status},"timestamp":"{at}"}},"msgEventId":"evt_down_9","msgId":"{msg}"}},"type":"{kind}"}}"#
    )
}

/// `endpoint.disabled` as the open-source server sends it: automatic only,
/// no `trigger`, `endpointUid` null.
fn oss_disabled() -> String {
    format!(
        r#"{{"data":{{"appId":"app_2pQOSSRunApp00000000000000","appUid":null,"endpointId":"{EP}","endpointUid":null,"failSince":"2026-12-01T18:29:19.969852Z"}},"type":"endpoint.disabled"}}"#
    )
}

/// A Clerk delivery on `identity` whose `svix-id` is `msg` (a recover or a
/// resend of that message).
fn redeliver(addr: SocketAddr, msg: &str) {
    let body = r#"{"type":"user.updated","object":"event","timestamp":1764618137000,"data":{"id":"user_2pQ"}}"#;
    let reply = post_webhook(addr, "identity", SECRET, msg, now_unix(), body);
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// What `hushwatch status` prints for the server at `addr`.
fn status_terminal(addr: SocketAddr) -> String {
    let o = cli(&["status", "--url", &format!("http://{addr}")]).output();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn hushwatch_check(work: &Workdir) -> (Option<i32>, String) {
    let o = cli(&["check"]).config(work.config_path()).output();
    (
        o.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// Lost messages whose `svix-id` is later accepted on the stream are
/// recovered: status, metric, one resolve page when the last arrives, the
/// join in the audit chain; an exhausted event for a message that had
/// already arrived is never lost; all of it survives a restart. Through the
/// real binary on `store` (`""`: SQLite) with `env`; `pages` reads the
/// outbox's Svix pages (alert_state, reason).
fn lost_messages_are_recovered_by_their_redelivery(
    store: &str,
    env: &[(&str, &str)],
    pages: &dyn Fn(&Workdir) -> Vec<(String, String)>,
) {
    // The join runs on the grouping timer: 1 s here.
    let cfg = config().replace("admin_token", "group_window = \"1s\"\nadmin_token");
    let work = Workdir::new(&format!("{cfg}{store}"));
    let s = Sidecar::start_with_env(&work.config_path(), env);
    let lost_metric =
        format!(r#"hushwatch_svix_lost_messages{{endpoint_id="{EP}",source="main"}}"#);
    for (i, msg) in ["msg_2pQlost1", "msg_2pQlost2"].iter().enumerate() {
        let ex = oss_attempt(
            "message.attempt.exhausted",
            msg,
            0,
            "2026-12-01T19:42:17.551032Z",
        );
        let reply = send(s.addr, &format!("op_ex_{i}"), &ex, "svix");
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    // The first exhaustion paged; the grouping timer adds the total.
    let first = wait_for(
        std::time::Duration::from_secs(20),
        "the grouped page",
        || {
            let got = pages(&work);
            (got.len() >= 2).then_some(got)
        },
    );
    assert_exactly("the first page and the grouped page", 2, &first);
    assert!(
        first[0]
            .1
            .contains("last attempt at 2026-12-01T19:42:17Z (no HTTP response: status 0"),
        "{}",
        first[0].1
    );
    assert!(
        first[0]
            .1
            .contains("on Svix Cloud's default schedule, about 27.6 h"),
        "{}",
        first[0].1
    );
    assert!(!first[0].1.contains("all 8 attempts"), "{}", first[0].1);
    assert_eq!(metric(s.addr, &lost_metric), 2.0);

    // An app report (bearer token, not signed) whose id is the second lost
    // message's is not its delivery: still lost after the join below, which
    // saw this report already (it committed first).
    let report = post_events(
        s.addr,
        "identity",
        TOKEN,
        r#"{"type":"user.updated","id":"msg_2pQlost2"}"#,
    );
    assert_eq!(report.status, 200, "{}", report.body);
    // A recover (or resend) delivers the first again with the same svix-id.
    redeliver(s.addr, "msg_2pQlost1");
    let ep = wait_for(std::time::Duration::from_secs(20), "the first join", || {
        let ep = endpoint_status(s.addr);
        (ep["recovered_total"].as_u64() >= Some(1)).then_some(ep)
    });
    assert_eq!(ep["recovered_total"], 1, "{ep}");
    assert_eq!(ep["lost_messages"].as_array().unwrap().len(), 1, "{ep}");
    assert_eq!(ep["lost_messages"][0]["msg_id"], "msg_2pQlost2");
    assert_eq!(ep["recovered_messages"][0]["msg_id"], "msg_2pQlost1");
    assert_eq!(ep["state"], "exhausted");
    assert_eq!(metric(s.addr, &lost_metric), 1.0);
    assert_eq!(pages(&work).len(), 2, "one still lost: no page");

    redeliver(s.addr, "msg_2pQlost2");
    let ep = wait_for(std::time::Duration::from_secs(20), "the last join", || {
        let ep = endpoint_status(s.addr);
        (ep["recovered_total"].as_u64() >= Some(2)).then_some(ep)
    });
    assert_eq!(ep["recovered_total"], 2, "{ep}");
    assert_eq!(ep["state"], "ok", "{ep}");
    assert_eq!(ep["lost_messages"], serde_json::json!([]));
    assert_eq!(metric(s.addr, &lost_metric), 0.0);
    let html = get(s.addr, "/").body;
    assert!(
        html.contains("2 lost message(s) recovered (redelivered)"),
        "status page"
    );
    let terminal = status_terminal(s.addr);
    assert!(
        terminal.contains(&format!(
            "svix main/{EP}: 2 lost message(s) recovered (redelivered)"
        )),
        "{terminal}"
    );

    // Exhausted after its redelivery had been accepted (the receiver
    // committed, Svix saw no 2xx in time): recovered at once, no page.
    redeliver(s.addr, "msg_2pQlate");
    let ex = oss_attempt(
        "message.attempt.exhausted",
        "msg_2pQlate",
        0,
        "2026-12-01T19:43:00.000001Z",
    );
    assert_eq!(send(s.addr, "op_ex_late", &ex, "svix").json()["pages"], 0);
    let ep = endpoint_status(s.addr);
    assert_eq!(
        (ep["recovered_total"].clone(), ep["state"].clone()),
        (3.into(), "ok".into()),
        "{ep}"
    );

    // Restart: the state is the store's.
    s.stop();
    let s = Sidecar::start_with_env(&work.config_path(), env);
    let ep = endpoint_status(s.addr);
    assert_eq!(
        (ep["recovered_total"].clone(), ep["state"].clone()),
        (3.into(), "ok".into()),
        "{ep}"
    );
    assert_eq!(metric(s.addr, &lost_metric), 0.0);
    s.stop();

    let all = pages(&work);
    let resolves: Vec<&(String, String)> = all.iter().filter(|p| p.0 == "ok").collect();
    assert_eq!(resolves.len(), 1, "one resolve page: {all:?}");
    assert!(
        resolves[0].1.contains(
            "every lost message has since arrived: its svix-id was accepted on stream identity"
        ),
        "{}",
        resolves[0].1
    );
    assert_eq!(all.len(), 3, "{all:?}");
    // The joins are on the audit chain.
    let joins: Vec<serde_json::Value> = audit_export_with_env(&work, env)
        .into_iter()
        .filter(|e| e["event_type"] == "hushwatch.svix.redelivered")
        .collect();
    assert_eq!(joins.len(), 3, "{joins:?}");
    let text = serde_json::to_string(&joins).unwrap();
    for msg in ["msg_2pQlost1", "msg_2pQlost2", "msg_2pQlate"] {
        assert!(text.contains(msg), "{text}");
    }
}

#[test]
fn lost_messages_are_recovered_by_their_redelivery_on_sqlite() {
    lost_messages_are_recovered_by_their_redelivery("", &[], &|work| {
        svix_pages(work)
            .into_iter()
            .filter(|p| p.0 == "svix_messages_exhausted")
            .map(|p| (p.2, p.3))
            .collect()
    });
}

#[test]
fn lost_messages_are_recovered_by_their_redelivery_on_postgres() {
    let Some(db) = pg::PgDb::create("svix_redelivered_postgres") else {
        return;
    };
    let url = db.url.clone();
    lost_messages_are_recovered_by_their_redelivery(
        "\n[store]\nurl = \"${HW_PG_URL}\"\n",
        &[("HW_PG_URL", url.as_str())],
        &|_| {
            db.query(
                "SELECT alert_state || '|' || reason FROM outbox WHERE alert_kind = 'svix_messages_exhausted' ORDER BY id",
            )
            .into_iter()
            .map(|l| {
                let (state, reason) = l.split_once('|').unwrap();
                (state.to_string(), reason.to_string())
            })
            .collect()
        },
    );
}

/// Ordering is decided by the payload's attempt timestamps, not arrival:
/// `recovered` before the retried `failing` it followed ends ok (as the
/// issue-31 run saw), and an `exhausted` arriving after a later
/// `recovered` of the same message is old news; a later one is not.
#[test]
fn attempt_timestamps_decide_the_order_not_arrival() {
    let work = Workdir::new(&config());
    let s = InProcess::start(&work, chrono::Utc::now());
    let recovered = oss_attempt(
        "message.attempt.recovered",
        "msg_2pQa",
        204,
        "2026-12-01T19:41:40.123456Z",
    );
    let failing = oss_attempt(
        "message.attempt.failing",
        "msg_2pQa",
        0,
        "2026-12-01T19:41:30.654321Z",
    );
    assert_eq!(send(s.addr, "o1", &recovered, "svix").json()["pages"], 0);
    assert_eq!(send(s.addr, "o2", &failing, "svix").json()["pages"], 0);
    let ep = endpoint_status(s.addr);
    assert_eq!(
        (ep["state"].clone(), ep["failing_messages"].clone()),
        ("ok".into(), 0.into()),
        "{ep}"
    );

    // Exhausted whose last attempt is older than the recovered attempt.
    let old_exhausted = oss_attempt(
        "message.attempt.exhausted",
        "msg_2pQa",
        0,
        "2026-12-01T19:41:35.000001Z",
    );
    assert_eq!(
        send(s.addr, "o3", &old_exhausted, "svix").json()["pages"],
        0
    );
    let ep = endpoint_status(s.addr);
    assert_eq!(
        (ep["state"].clone(), ep["lost_messages"].clone()),
        ("ok".into(), serde_json::json!([])),
        "{ep}"
    );

    // Same microsecond-stamped order, other message: exhausted after it
    // recovered, with a later attempt (a resend that failed again), is lost.
    let recovered_b = oss_attempt(
        "message.attempt.recovered",
        "msg_2pQb",
        204,
        "2026-12-01T19:41:40.000000Z",
    );
    let exhausted_b = oss_attempt(
        "message.attempt.exhausted",
        "msg_2pQb",
        0,
        "2026-12-01T19:42:17.551032Z",
    );
    assert_eq!(send(s.addr, "o4", &recovered_b, "svix").json()["pages"], 0);
    assert_eq!(send(s.addr, "o5", &exhausted_b, "svix").json()["pages"], 1);
    assert_eq!(
        endpoint_status(s.addr)["lost_messages"][0]["msg_id"],
        "msg_2pQb"
    );
    s.stop();
}

/// Open-source server: no manual-disable event, no `endpoint.enabled`, no
/// `trigger`; re-enabling sends only `endpoint.updated`, which clears only
/// with `flavor = "oss"`, and the resolve page says what cleared it. On
/// Cloud (the default) `clear_on = ["endpoint.updated"]` is ignored and
/// `check` says so.
#[test]
fn endpoint_updated_clears_a_disable_only_on_the_open_source_flavor() {
    let oss = config().replace(
        "admin_token",
        "flavor = \"oss\"\nclear_on = [\"endpoint.updated\"]\nadmin_token",
    );
    let work = Workdir::new(&oss);
    let (code, said) = hushwatch_check(&work);
    assert_eq!(code, Some(0), "{said}");
    assert!(!said.contains("clear_on"), "{said}");
    let s = InProcess::start(&work, chrono::Utc::now());
    let reply = send(s.addr, "d1", &oss_disabled(), "svix");
    assert_eq!(reply.json()["pages"], 1, "{}", reply.body);
    let ep = endpoint_status(s.addr);
    assert_eq!(
        ep["disabled"]["trigger"], "automatic",
        "no trigger: automatic"
    );
    assert_eq!(ep["disabled"]["fail_since"], "2026-12-01T18:29:19Z");
    let updated = r#"{"data":{"appId":"app_2pQOSSRunApp00000000000000","appUid":null,"endpointId":"EP","endpointUid":null},"type":"endpoint.updated"}"#.replace("EP", EP);
    assert_eq!(send(s.addr, "u1", &updated, "svix").json()["pages"], 1);
    assert_eq!(endpoint_status(s.addr)["state"], "ok");
    s.stop();
    let pages = svix_pages(&work);
    assert_eq!(pages.len(), 2, "{pages:?}");
    assert_eq!(pages[0].1, "critical");
    assert!(
        pages[0].3.contains("failing since 2026-12-01T18:29:19Z"),
        "{}",
        pages[0].3
    );
    assert!(
        pages[1].3.contains("cleared by endpoint.updated")
            && pages[1]
                .3
                .contains("check in Svix that the endpoint is enabled"),
        "{}",
        pages[1].3
    );

    // Cloud (default flavor): the same line is ignored, and check says so.
    let cloud = config().replace(
        "admin_token",
        "clear_on = [\"endpoint.updated\"]\nadmin_token",
    );
    let work = Workdir::new(&cloud);
    let (code, said) = hushwatch_check(&work);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains(
            "svix.main.clear_on: \"endpoint.updated\" is ignored with flavor = \"cloud\""
        ),
        "{said}"
    );
    let s = InProcess::start(&work, chrono::Utc::now());
    assert_eq!(
        send(s.addr, "d1", &oss_disabled(), "svix").json()["pages"],
        1
    );
    assert_eq!(
        send(s.addr, "u1", &updated, "svix").json()["pages"],
        0,
        "a rename does not resolve"
    );
    assert_eq!(endpoint_status(s.addr)["state"], "disabled");
    let enabled = updated.replace("endpoint.updated", "endpoint.enabled");
    assert_eq!(send(s.addr, "e1", &enabled, "svix").json()["pages"], 1);
    s.stop();
    let pages = svix_pages(&work);
    assert!(
        pages[1].3.contains("enabled again (endpoint.enabled)"),
        "{}",
        pages[1].3
    );
    let status = {
        let s = InProcess::start(&work, chrono::Utc::now());
        let v = get(s.addr, "/v1/status").json();
        s.stop();
        v
    };
    assert_eq!(status["svix"]["sources"]["main"]["flavor"], "cloud");
}

/// `endpointUid` is absent from OSS `message.attempt.*`: `check` warns
/// about a uid-only mapping; the event is kept and shown as unmapped until
/// an `endpoint.updated` shows the uid with its id, after which the stored
/// pair maps the next event.
#[test]
fn a_uid_only_mapping_is_warned_and_unmapped_events_are_kept() {
    let cfg = config().replace(
        &format!("endpoints = {{ \"{EP}\" = \"identity\" }}"),
        "endpoints = { \"identity-sidecar\" = \"identity\" }",
    );
    let work = Workdir::new(&cfg);
    let (code, said) = hushwatch_check(&work);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("svix.main.endpoints.identity-sidecar is not an endpoint id (ep_…), so it maps by endpointUid"),
        "{said}"
    );
    let s = InProcess::start(&work, chrono::Utc::now());
    let ex = oss_attempt(
        "message.attempt.exhausted",
        "msg_2pQu1",
        0,
        "2026-12-01T19:42:17.551032Z",
    );
    let reply = send(s.addr, "x1", &ex, "svix");
    assert_eq!(reply.json()["status"], "accepted", "{}", reply.body);
    let ep = endpoint_status(s.addr);
    assert_eq!(
        (ep["unmapped"].clone(), ep["mapped"].clone()),
        (true.into(), false.into()),
        "{ep}"
    );
    assert_eq!(
        ep["lost_messages"][0]["msg_id"], "msg_2pQu1",
        "kept, not dropped"
    );
    let html = get(s.addr, "/").body;
    assert!(
        html.contains("unmapped (filed under the source&#39;s first stream)")
            || html.contains("unmapped (filed under the source's first stream)"),
        "status page"
    );
    let terminal = status_terminal(s.addr);
    assert!(
        terminal.contains(&format!(
            "svix main/{EP}: unmapped (filed under the source's first stream)"
        )),
        "{terminal}"
    );

    // endpoint.updated teaches the uid; from then on the endpoint maps.
    let updated = format!(
        r#"{{"data":{{"appId":"app_2pQOSSRunApp00000000000000","appUid":null,"endpointId":"{EP}","endpointUid":"identity-sidecar"}},"type":"endpoint.updated"}}"#
    );
    assert_eq!(send(s.addr, "u1", &updated, "svix").status, 200);
    let ep = endpoint_status(s.addr);
    assert_eq!(
        (ep["unmapped"].clone(), ep["mapped"].clone()),
        (false.into(), true.into()),
        "{ep}"
    );
    s.stop();
}

/// Two replicas on one PostgreSQL database: the exhausted event reaches
/// one, which is then killed; the redelivery reaches the other, which
/// takes over the lease and makes the join from the shared state.
#[test]
fn a_redelivery_to_another_replica_recovers_the_message_on_postgres() {
    let Some(db) = pg::PgDb::create("svix_redelivered_replicas") else {
        return;
    };
    let cfg = config().replace("admin_token", "group_window = \"1s\"\nadmin_token");
    let work = Workdir::new(&format!(
        "{cfg}\n[store]\nurl = \"${{HW_PG_URL}}\"\npool_size = 3\nleader_lease = \"2s\"\n"
    ));
    let env = [("HW_PG_URL", db.url.as_str())];
    let a = Sidecar::start_with_env(&work.config_path(), &env);
    let b = Sidecar::start_with_env(&work.config_path(), &env);
    let ex = oss_attempt(
        "message.attempt.exhausted",
        "msg_2pQreplica",
        0,
        "2026-12-01T19:42:17.551032Z",
    );
    assert_eq!(send(a.addr, "op_rep_1", &ex, "svix").json()["pages"], 1);
    a.kill9();
    assert_eq!(
        endpoint_status(b.addr)["lost_messages"][0]["msg_id"],
        "msg_2pQreplica"
    );
    redeliver(b.addr, "msg_2pQreplica");
    let ep = wait_for(
        std::time::Duration::from_secs(30),
        "the join on the replica left",
        || {
            let ep = endpoint_status(b.addr);
            (ep["recovered_total"].as_u64() >= Some(1)).then_some(ep)
        },
    );
    assert_eq!(ep["recovered_total"], 1, "{ep}");
    assert_eq!(ep["state"], "ok", "{ep}");
    b.stop();
    let resolves = db.query(
        "SELECT reason FROM outbox WHERE alert_kind = 'svix_messages_exhausted' AND alert_state = 'ok'",
    );
    assert_eq!(resolves.len(), 1, "{resolves:?}");
    assert!(
        resolves[0].contains("every lost message has since arrived"),
        "{}",
        resolves[0]
    );
}
