//! Operator silences and acknowledgements (issue #17) against a real HTTP
//! receiver, with the manual clock: what is paged, what is held, and what
//! the admin routes refuse.

use crate::common::*;
use crate::support;

use hushwatch::store::PageKind;
use support::*;

const ADMIN: &str = "admin-token-for-tests";

fn webhook(name: &str, url: &str) -> String {
    format!("[notifiers.{name}]\nkind = \"webhook\"\nurl = \"{url}\"\nbackoff_initial = \"1s\"\nbackoff_max = \"5s\"\n")
}

/// `identity` with the given stream keys, notifying `team` (and `boss`
/// when given), with `[server] admin_token` set.
fn ops_config(stream_extra: &str, team: &Receiver, boss: Option<&Receiver>) -> String {
    let mut notifiers = webhook("team", &team.url("/team"));
    if let Some(boss) = boss {
        notifiers.push_str(&webhook("boss", &boss.url("/boss")));
    }
    config(&["team"], stream_extra, &notifiers).replace(
        "data_dir = \"data\"",
        &format!("data_dir = \"data\"\nadmin_token = \"{ADMIN}\""),
    )
}

fn admin(s: &InProcess, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let auth = format!("Bearer {ADMIN}");
    let reply = request(
        s.addr,
        method,
        path,
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        body.as_bytes(),
    );
    let json = serde_json::from_str(&reply.body).unwrap_or(serde_json::Value::Null);
    (reply.status, json)
}

fn silence(s: &InProcess, body: &str) -> i64 {
    let (status, json) = admin(s, "POST", "/v1/silences", body);
    assert_eq!(status, 201, "{json}");
    json["id"].as_i64().unwrap()
}

fn silences(s: &InProcess) -> Vec<serde_json::Value> {
    let (status, json) = admin(s, "GET", "/v1/silences", "");
    assert_eq!(status, 200, "{json}");
    json["silences"].as_array().unwrap().clone()
}

/// Whether the store would queue reminder `step` of the current episode
/// due at `at` (the call the delivery worker makes).
fn reminder_queued(s: &InProcess, step: i64) -> bool {
    let due = s.now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(s.app().store().enqueue_extra(
        "identity".into(),
        PageKind::Reminder,
        step,
        vec!["team".into()],
        due,
    ))
    .unwrap()
        > 0
}

/// Runs the store's release of held pages now (what the delivery round
/// does); returns how many alerts it paged.
fn release_held(s: &InProcess) -> usize {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(s.app().store().release_held()).unwrap().paged
}

/// The stored provider subscriptions.
fn subscriptions(s: &InProcess) -> Vec<hushwatch::store::subscriptions::SubscriptionRow> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(s.app().store().subscriptions()).unwrap()
}

/// Pages ever queued for `team` (pending, delivered or failed).
fn queued_for_team(s: &InProcess) -> u64 {
    let n = &s.notifications()["notifiers"]["team"];
    ["pending", "delivered", "failed"]
        .iter()
        .map(|k| n[*k].as_u64().unwrap())
        .sum()
}

#[test]
fn a_silence_holds_the_page_and_its_reminders_and_ending_it_pages_once() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let text = ops_config("repeat_interval = \"1h\"", &team, None);
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-01T10:00:00Z"));
    let id = silence(
        &s,
        r#"{"streams": ["identity"], "duration": "4h", "comment": "IdP migration", "created_by": "ana"}"#,
    );
    assert_eq!(
        metric(s.addr, "hushwatch_stream_silenced{stream=\"identity\"}"),
        1.0
    );

    let status = s.http_status();
    assert_eq!(
        status["operator"]["silences"][0]["comment"],
        "IdP migration"
    );
    let page = request(s.addr, "GET", "/", &[], b"").body;
    assert!(page.contains("id=\"silences\""), "{page}");
    assert!(page.contains("IdP migration"));

    s.fire();
    // Evaluation stays truthful: the stream fires, and the firing metric says so.
    assert_eq!(s.http_status()["streams"][0]["state"], "firing");
    assert_eq!(queued_for_team(&s), 0, "no page queued under the silence");
    // Two reminder intervals pass under the silence: none is queued.
    s.advance(2 * 3600 + 60);
    assert!(!reminder_queued(&s, 2), "no reminder under the silence");

    let (status, _) = admin(
        &s,
        "DELETE",
        &format!("/v1/silences/{id}?created_by=ana"),
        "",
    );
    assert_eq!(status, 200);
    wait_exactly("the held page", 1, || team.delivered());
    wait_until("the outbox to empty", || {
        s.pending().is_empty().then_some(())
    });
    let page = team.delivered()[0].json();
    assert_eq!(page["status"], "firing");
    assert_eq!(page["alert"]["details"]["page_kind"], "page");
    assert_eq!(
        team.received().len(),
        1,
        "one page when the silence ends, not the missed reminders"
    );
    assert_eq!(
        metric(s.addr, "hushwatch_stream_silenced{stream=\"identity\"}"),
        0.0
    );
    let listed = silences(&s);
    assert_eq!(listed.len(), 1, "expired silences stay listed for 7 days");
    assert_eq!(listed[0]["active"], false);
    assert_eq!(listed[0]["expired_by"], "ana");

    // Reminders resume on the episode's schedule.
    s.advance(3600);
    wait_exactly("the next reminder", 2, || team.delivered());
    let reminder = team.delivered()[1].json();
    assert_eq!(reminder["alert"]["details"]["page_kind"], "reminder");
    assert_eq!(reminder["alert"]["id"], page["alert"]["id"]);
    s.stop();
}

#[test]
fn a_resolve_under_a_silence_whose_page_was_held_is_not_paged() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(
        dir.path(),
        &ops_config("", &team, None),
        utc("2026-12-01T10:00:00Z"),
    );
    let id = silence(
        &s,
        r#"{"streams": ["*"], "ends_at": "2026-12-01T20:00:00Z", "comment": "planned", "created_by": "ana"}"#,
    );
    s.fire();
    s.resolve();
    assert_eq!(queued_for_team(&s), 0, "neither firing nor resolve queued");
    let (status, _) = admin(&s, "DELETE", &format!("/v1/silences/{id}"), "");
    assert_eq!(status, 200);
    // The next episode pages normally, and it is the first thing the receiver sees.
    s.fire();
    wait_exactly("the next episode's page", 1, || team.delivered());
    assert_eq!(team.delivered()[0].json()["status"], "firing");
    wait_until("the outbox to empty", || {
        s.pending().is_empty().then_some(())
    });
    assert_eq!(team.received().len(), 1);
    s.stop();
}

#[test]
fn an_acknowledgement_stops_reminders_and_escalation_but_not_the_resolve_and_is_audited() {
    let team = Receiver::start(vec![]);
    let boss = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let text = ops_config(
        "repeat_interval = \"1h\"\nescalate = [{ after = \"2h\", notify = [\"boss\"] }]",
        &team,
        Some(&boss),
    );
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-01T10:00:00Z"));
    s.fire();
    wait_exactly("the page", 1, || team.delivered());
    let (status, json) = admin(
        &s,
        "POST",
        "/v1/streams/identity/acknowledge",
        r#"{"created_by": "bo", "comment": "looking into it"}"#,
    );
    assert_eq!(status, 200, "{json}");
    assert_eq!(
        metric(
            s.addr,
            "hushwatch_silence_acknowledged{stream=\"identity\"}"
        ),
        1.0
    );
    let page = request(s.addr, "GET", "/", &[], b"").body;
    assert!(page.contains("id=\"acks\""), "{page}");
    assert!(page.contains("looking into it"));
    s.advance(3 * 3600);
    assert!(!reminder_queued(&s, 3), "no reminder once acknowledged");
    s.resolve();
    wait_exactly("the resolve", 2, || team.delivered());
    assert_eq!(team.delivered()[1].json()["status"], "resolved");
    wait_until("the outbox to empty", || {
        s.pending().is_empty().then_some(())
    });
    assert!(
        boss.received().is_empty(),
        "no escalation once acknowledged"
    );
    assert_eq!(team.received().len(), 2, "no reminder once acknowledged");
    assert_eq!(
        metric(
            s.addr,
            "hushwatch_silence_acknowledged{stream=\"identity\"}"
        ),
        0.0
    );

    // The next episode is not acknowledged: it pages and reminds.
    s.fire();
    wait_exactly("the next page", 3, || team.delivered());
    s.advance(3601);
    wait_exactly("its reminder", 4, || team.delivered());
    assert_eq!(
        team.delivered()[3].json()["alert"]["details"]["page_kind"],
        "reminder"
    );
    s.stop();

    let config = dir.path().join("hushwatch.toml");
    let (code, out, err) = run_cli(&["audit", "export"], &config);
    assert_eq!(code, 0, "{err}");
    let ack = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["event_type"] == "hushwatch.stream.acknowledged")
        .unwrap_or_else(|| panic!("no acknowledgement in\n{out}"));
    assert_eq!(ack["channel"], "admin");
    assert_eq!(ack["subject_ids"]["created_by"], "bo");
    assert_eq!(ack["subject_ids"]["comment"], "looking into it");
    let (code, _, err) = run_cli(&["audit", "verify"], &config);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn silences_and_acknowledgements_survive_a_restart() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let text = ops_config("repeat_interval = \"1h\"", &team, None);
    let start = utc("2026-12-01T10:00:00Z");
    let s = InProcess::start_in(dir.path(), &text, start);
    silence(
        &s,
        r#"{"streams": ["identity"], "duration": "2h", "comment": "IdP migration", "created_by": "ana"}"#,
    );
    s.fire();
    assert_eq!(queued_for_team(&s), 0);
    let now = s.now();
    s.stop();

    let s = InProcess::start_in(dir.path(), &text, now);
    let listed = silences(&s);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["comment"], "IdP migration");
    assert_eq!(listed[0]["created_by"], "ana");
    assert_eq!(listed[0]["active"], true);
    s.wait_state("firing");
    assert_eq!(queued_for_team(&s), 0, "still held after the restart");
    // The silence ends on the clock while the stream still fires: one page.
    s.advance(2 * 3600);
    wait_exactly("the held page", 1, || team.delivered());
    let (status, json) = admin(
        &s,
        "POST",
        "/v1/streams/identity/acknowledge",
        r#"{"created_by": "bo", "comment": "known"}"#,
    );
    assert_eq!(status, 200, "{json}");
    let now = s.now();
    s.stop();

    let s = InProcess::start_in(dir.path(), &text, now);
    s.wait_state("firing");
    assert_eq!(
        metric(
            s.addr,
            "hushwatch_silence_acknowledged{stream=\"identity\"}"
        ),
        1.0
    );
    s.advance(3 * 3600);
    assert!(!reminder_queued(&s, 4), "the acknowledgement survived");
    s.stop();
}

#[test]
fn bad_requests_are_refused_and_store_nothing() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(
        dir.path(),
        &ops_config("", &team, None),
        utc("2026-12-01T10:00:00Z"),
    );
    let good = r#"{"streams": ["identity"], "duration": "2h", "comment": "c", "created_by": "a"}"#;
    let no_token = request(s.addr, "POST", "/v1/silences", &[], good.as_bytes());
    assert_eq!(no_token.status, 401);
    let wrong = request(
        s.addr,
        "POST",
        "/v1/silences",
        &[("Authorization", "Bearer not-the-token")],
        good.as_bytes(),
    );
    assert_eq!(wrong.status, 401);
    for (body, want) in [
        (
            r#"{"streams": ["identity"], "starts_at": "2026-12-01T12:00:00Z", "ends_at": "2026-12-01T11:00:00Z", "comment": "c", "created_by": "a"}"#,
            400,
        ),
        (
            r#"{"streams": ["nope"], "duration": "2h", "comment": "c", "created_by": "a"}"#,
            404,
        ),
        (
            r#"{"streams": ["identity"], "duration": "2h", "created_by": "a"}"#,
            400,
        ),
        (
            r#"{"streams": ["identity"], "duration": "soon", "comment": "c", "created_by": "a"}"#,
            400,
        ),
        (r#"not json"#, 400),
        (
            r#"{"streams": ["identity"], "kinds": ["svix_exhausted"], "duration": "2h", "comment": "c", "created_by": "a"}"#,
            400,
        ),
        (
            r#"{"streams": ["identity"], "kinds": ["silence", "silenced"], "duration": "2h", "comment": "c", "created_by": "a"}"#,
            400,
        ),
    ] {
        let (status, json) = admin(&s, "POST", "/v1/silences", body);
        assert_eq!(status, want, "{body}: {json}");
    }
    let (status, _) = admin(&s, "DELETE", "/v1/silences/12345", "");
    assert_eq!(status, 404);
    let (status, _) = admin(
        &s,
        "POST",
        "/v1/streams/identity/acknowledge",
        r#"{"created_by": "a", "comment": "c"}"#,
    );
    assert_eq!(status, 409, "nothing to acknowledge while ok");
    assert!(silences(&s).is_empty(), "nothing stored");

    // 10,000 silences: the 1001st live one is refused and not stored.
    let mut refused_at = None;
    for i in 0..10_000 {
        let (status, json) = admin(&s, "POST", "/v1/silences", good);
        if status == 429 {
            refused_at = Some(i);
            break;
        }
        assert_eq!(status, 201, "{json}");
    }
    assert_eq!(refused_at, Some(1000));
    assert_eq!(silences(&s).len(), 1000);
    s.stop();

    // Without [server] admin_token the routes do not exist.
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(
        dir.path(),
        &config(&["team"], "", &webhook("team", &team.url("/team"))),
        utc("2026-12-01T10:00:00Z"),
    );
    let (status, _) = admin(&s, "POST", "/v1/silences", good);
    assert_eq!(status, 404);
    s.stop();
}

#[test]
fn planned_maintenance_in_the_config_holds_pages_like_a_silence() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let window = "[[streams.identity.maintenance]]\nfrom = 2026-12-01T10:30:00Z\nuntil = \"2026-12-01T13:00:00Z\"\ncomment = \"IdP migration\"\n";
    let text = ops_config("", &team, None).replace(
        "[streams.identity.ingest]",
        &format!("{window}\n[streams.identity.ingest]"),
    );
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-01T10:00:00Z"));
    let listed = silences(&s);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["created_by"], "config");
    assert_eq!(listed[0]["comment"], "IdP migration");
    s.fire();
    assert_eq!(queued_for_team(&s), 0, "held during the window");
    s.clock.set(utc("2026-12-01T13:00:00Z"));
    wait_exactly("the page when the window ends", 1, || team.delivered());
    s.stop();
    // A restart does not store the window twice.
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-01T12:00:00Z"));
    assert_eq!(silences(&s).len(), 1);
    s.stop();
}

#[test]
fn check_refuses_bad_maintenance_windows_naming_the_key() {
    let team = Receiver::start(vec![]);
    for (window, key) in [
        (
            "from = \"2026-12-02T00:00:00Z\"\nuntil = \"2026-12-01T00:00:00Z\"",
            "streams.identity.maintenance[0].until",
        ),
        (
            "from = \"2026-12-01T00:00:00Z\"\nuntil = \"2027-01-15T00:00:00Z\"",
            "streams.identity.maintenance[0].until",
        ),
        (
            "from = \"tomorrow\"\nuntil = \"2026-12-01T00:00:00Z\"",
            "streams.identity.maintenance[0].from",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let text = ops_config("", &team, None).replace(
            "[streams.identity.ingest]",
            &format!("[[streams.identity.maintenance]]\n{window}\n\n[streams.identity.ingest]"),
        );
        let path = dir.path().join("hushwatch.toml");
        std::fs::write(&path, text).unwrap();
        let (code, out, err) = run_cli(&["check"], &path);
        assert_eq!(code, 2, "{window}: {out}{err}");
        assert!(
            err.contains(key) || out.contains(key),
            "{key} in {out}{err}"
        );
    }
}

fn cli_env(args: &[&str], token: &str) -> (i32, String, String) {
    cli(args).env("OPS_TOKEN", token).run()
}

#[test]
fn the_cli_adds_lists_expires_and_acknowledges() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(
        dir.path(),
        &ops_config("", &team, None),
        utc("2026-12-01T10:00:00Z"),
    );
    let url = format!("http://{}", s.addr);
    let target = ["--url", url.as_str(), "--token-env", "OPS_TOKEN"];
    let add = |extra: &[&str], token: &str| {
        let mut args = vec!["silence", "add"];
        args.extend(target);
        args.extend(extra);
        cli_env(&args, token)
    };
    let (code, out, err) = add(
        &[
            "--stream",
            "identity",
            "--for",
            "2h",
            "--comment",
            "IdP migration",
            "--created-by",
            "ana",
        ],
        ADMIN,
    );
    assert_eq!(code, 0, "{err}");
    let id = serde_json::from_str::<serde_json::Value>(&out).unwrap()["id"]
        .as_i64()
        .unwrap();
    let (code, _, err) = add(
        &["--stream", "identity", "--for", "2h", "--comment", "x"],
        "wrong",
    );
    assert_eq!(code, 1, "refused by the server");
    assert!(err.contains("401"), "{err}");

    let mut list = vec!["silence", "list"];
    list.extend(target);
    let (code, out, err) = cli_env(&list, ADMIN);
    assert_eq!(code, 0, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["silences"][0]["comment"], "IdP migration");
    assert_eq!(
        listed["silences"][0]["starts_at"],
        "2026-12-01T10:00:00.000Z"
    );
    assert_eq!(listed["silences"][0]["ends_at"], "2026-12-01T12:00:00.000Z");

    let id_text = id.to_string();
    let mut expire = vec![
        "silence",
        "expire",
        id_text.as_str(),
        "--created-by",
        "ana b",
        "--comment",
        "done early",
    ];
    expire.extend(target);
    let (code, _, err) = cli_env(&expire, ADMIN);
    assert_eq!(code, 0, "{err}");
    assert_eq!(silences(&s)[0]["expired_by"], "ana b");

    // --until and --kind: a silence of the Svix pages only, so the
    // stream's own page below still goes out.
    let (code, _, err) = add(
        &[
            "--stream",
            "identity",
            "--kind",
            "svix_*",
            "--until",
            "2026-12-01T15:00:00Z",
            "--comment",
            "Svix move",
        ],
        ADMIN,
    );
    assert_eq!(code, 0, "{err}");
    let listed = silences(&s);
    assert_eq!(listed[1]["kinds"], serde_json::json!(["svix_*"]));
    assert_eq!(listed[1]["ends_at"], "2026-12-01T15:00:00.000Z");

    s.fire();
    wait_exactly("the page", 1, || team.delivered());
    let mut ack = vec![
        "ack",
        "--stream",
        "identity",
        "--comment",
        "on it",
        "--created-by",
        "bo",
    ];
    ack.extend(target);
    let (code, _, err) = cli_env(&ack, ADMIN);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        metric(
            s.addr,
            "hushwatch_silence_acknowledged{stream=\"identity\"}"
        ),
        1.0
    );
    s.stop();
}

#[test]
fn an_escalation_only_stream_still_escalates() {
    // No direct notifier, so no firing page: the escalation must not wait
    // for one (only a page held by a silence holds the steps back).
    let boss = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let text = config(
        &[],
        "escalate = [{ after = \"1h\", notify = [\"boss\"] }]",
        &webhook("boss", &boss.url("/boss")),
    );
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-01T10:00:00Z"));
    s.fire();
    s.advance(3600);
    wait_exactly("the escalation", 1, || boss.delivered());
    assert_eq!(
        boss.delivered()[0].json()["alert"]["details"]["page_kind"],
        "escalation"
    );
    s.stop();
}

const EP: &str = "ep_Kh8oOOL8dKLzdocJ2isAjIhKtJ0";

/// `ops_config` plus the Svix source `main`, whose endpoint `EP` feeds
/// `identity` and pages `team`.
fn svix_ops_config(team: &Receiver) -> String {
    ops_config("", team, None)
        + &format!(
            "\n[svix.main]\nsecret = \"{SVIX_OPS_SECRET}\"\nstreams = [\"identity\"]\nnotify = [\"team\"]\nendpoints = {{ \"{EP}\" = \"identity\" }}\n"
        )
}

fn svix_op(s: &InProcess, msg_id: &str, kind: &str) {
    let trigger = (kind == "endpoint.disabled").then_some("automatic");
    let body = svix_endpoint_body(kind, EP, trigger);
    assert_eq!(
        post_svix_op(s.addr, s.now().timestamp(), msg_id, &body),
        200
    );
}

/// (kind, status) of every delivered page, in order.
fn delivered_kinds(r: &Receiver) -> Vec<(String, String)> {
    r.delivered()
        .iter()
        .map(|p| {
            let j = p.json();
            (
                j["alert"]["kind"].as_str().unwrap().to_string(),
                j["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pair(kind: &str, status: &str) -> (String, String) {
    (kind.to_string(), status.to_string())
}

#[test]
fn a_silence_of_svix_kinds_holds_svix_pages_only_and_pages_once_when_it_ends() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(
        dir.path(),
        &svix_ops_config(&team),
        utc("2026-12-01T10:00:00Z"),
    );
    let id = silence(
        &s,
        r#"{"streams": ["identity"], "kinds": ["svix_*"], "duration": "4h", "comment": "Svix maintenance", "created_by": "ana"}"#,
    );
    assert_eq!(
        metric(s.addr, "hushwatch_stream_silenced{stream=\"identity\"}"),
        1.0,
        "a stream with silenced Svix pages counts as silenced"
    );
    let html = request(s.addr, "GET", "/", &[], b"").body;
    assert!(html.contains("identity (pages: svix_*)"), "{html}");
    svix_op(&s, "msg_disable_1", "endpoint.disabled");
    assert_eq!(
        s.http_status()["svix"]["endpoints"][0]["state"],
        "disabled",
        "the endpoint state stays truthful under the silence"
    );
    // The stream's own silence alert is not covered by ["svix_*"]: it pages.
    s.fire();
    wait_exactly("the silence page", 1, || team.delivered());
    wait_until("the outbox to empty", || {
        s.pending().is_empty().then_some(())
    });
    assert_eq!(delivered_kinds(&team), [pair("silence", "firing")]);

    let (status, _) = admin(&s, "DELETE", &format!("/v1/silences/{id}"), "");
    assert_eq!(status, 200);
    wait_exactly("the held Svix page", 2, || team.delivered());
    let page = team.delivered()[1].json();
    assert_eq!(page["alert"]["kind"], "svix_endpoint_disabled");
    assert_eq!(page["status"], "firing");
    assert!(
        page["alert"]["details"]["how_to_ack"]
            .as_str()
            .unwrap()
            .contains("--kind svix_endpoint_disabled"),
        "{page}"
    );

    // Its receivers know it fires, so its resolve under a new silence is paged.
    let id = silence(
        &s,
        r#"{"streams": ["*"], "kinds": ["svix_endpoint_disabled"], "duration": "2h", "comment": "c", "created_by": "ana"}"#,
    );
    svix_op(&s, "msg_enable_1", "endpoint.enabled");
    wait_exactly("the resolve", 3, || team.delivered());
    assert_eq!(
        delivered_kinds(&team)[2],
        pair("svix_endpoint_disabled", "resolved")
    );

    // Disabled and enabled again under the silence: nobody was told, so
    // neither page goes out, not even when the silence ends.
    svix_op(&s, "msg_disable_2", "endpoint.disabled");
    svix_op(&s, "msg_enable_2", "endpoint.enabled");
    let (status, _) = admin(&s, "DELETE", &format!("/v1/silences/{id}"), "");
    assert_eq!(status, 200);
    // Run the release round the DELETE triggers (again): nothing to page.
    assert_eq!(release_held(&s), 0);
    assert_eq!(
        queued_for_team(&s),
        3,
        "nothing queued for the cancelled episode"
    );
    wait_until("the outbox to empty", || {
        s.pending().is_empty().then_some(())
    });
    assert_eq!(
        delivered_kinds(&team),
        [
            pair("silence", "firing"),
            pair("svix_endpoint_disabled", "firing"),
            pair("svix_endpoint_disabled", "resolved"),
        ]
    );
    assert_eq!(team.received().len(), 3);
    s.stop();
}

#[test]
fn a_held_svix_page_is_released_when_the_silence_ends_on_the_clock_after_a_restart() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let text = svix_ops_config(&team);
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-01T10:00:00Z"));
    silence(
        &s,
        r#"{"streams": ["identity"], "kinds": ["svix_endpoint_*"], "ends_at": "2026-12-01T10:30:00Z", "comment": "c", "created_by": "ana"}"#,
    );
    svix_op(&s, "msg_disable_1", "endpoint.disabled");
    assert_eq!(queued_for_team(&s), 0, "held");
    let now = s.now();
    s.stop();

    let s = InProcess::start_in(dir.path(), &text, now);
    assert_eq!(queued_for_team(&s), 0, "still held after the restart");
    s.clock.set(utc("2026-12-01T10:30:00Z"));
    wait_exactly("the held page", 1, || team.delivered());
    wait_until("the outbox to empty", || {
        s.pending().is_empty().then_some(())
    });
    assert_eq!(
        delivered_kinds(&team),
        [pair("svix_endpoint_disabled", "firing")]
    );
    s.stop();
}

#[test]
fn silences_are_audited_with_who_when_what_and_why_and_the_chain_verifies() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(
        dir.path(),
        &ops_config("", &team, None),
        utc("2026-12-01T10:00:00Z"),
    );
    let id = silence(
        &s,
        r#"{"streams": ["identity"], "kinds": ["silence", "svix_*"], "duration": "2h", "comment": "IdP migration", "created_by": "ana"}"#,
    );
    s.advance(600);
    let (status, _) = admin(
        &s,
        "DELETE",
        &format!("/v1/silences/{id}?created_by=bo%20b&comment=migration+done+early"),
        "",
    );
    assert_eq!(status, 200);
    s.fire();
    let (status, _) = admin(
        &s,
        "POST",
        "/v1/streams/identity/acknowledge",
        r#"{"created_by": "cy", "comment": "on it"}"#,
    );
    assert_eq!(status, 200);
    s.stop();

    let config = dir.path().join("hushwatch.toml");
    let (code, out, err) = run_cli(&["audit", "export"], &config);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let find = |t: &str| {
        lines
            .iter()
            .find(|l| l["event_type"] == t)
            .unwrap_or_else(|| panic!("no {t} in\n{out}"))
            .clone()
    };
    let created = find("hushwatch.silence.created");
    assert_eq!(created["channel"], "admin");
    assert_eq!(created["stream"], "identity");
    assert_eq!(created["received_at"], "2026-12-01T10:00:00.000Z");
    let subjects = &created["subject_ids"];
    assert_eq!(subjects["created_by"], "ana");
    assert_eq!(subjects["comment"], "IdP migration");
    assert_eq!(subjects["silence_id"], id.to_string());
    assert_eq!(subjects["kinds"], "silence,svix_*");
    assert_eq!(subjects["ends_at"], "2026-12-01T12:00:00.000Z");

    let expired = find("hushwatch.silence.expired");
    assert_eq!(expired["received_at"], "2026-12-01T10:10:00.000Z");
    assert_eq!(expired["subject_ids"]["created_by"], "bo b");
    assert_eq!(expired["subject_ids"]["comment"], "migration done early");
    assert_eq!(expired["subject_ids"]["silence_id"], id.to_string());

    let ack = find("hushwatch.stream.acknowledged");
    assert_eq!(ack["subject_ids"]["created_by"], "cy");
    assert_eq!(ack["subject_ids"]["comment"], "on it");
    assert!(
        created["seq"].as_i64() < expired["seq"].as_i64()
            && expired["seq"].as_i64() < ack["seq"].as_i64(),
        "appended in the order they happened"
    );
    let (code, out, err) = run_cli(&["audit", "verify"], &config);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn with_admin_listen_the_operator_routes_are_served_only_there() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let text = ops_config("", &team, None).replace(
        "listen = \"127.0.0.1:0\"",
        "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"",
    );
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-01T10:00:00Z"));
    let admin_addr = s.admin_addr().expect("admin listener bound");
    let auth = format!("Bearer {ADMIN}");
    let headers = [("Authorization", auth.as_str())];
    let body = br#"{"streams": ["identity"], "duration": "2h", "comment": "c", "created_by": "a"}"#;
    for (method, path, body) in [
        ("POST", "/v1/silences", &body[..]),
        ("GET", "/v1/silences", b""),
        ("DELETE", "/v1/silences/1", b""),
        (
            "POST",
            "/v1/streams/identity/acknowledge",
            br#"{"created_by": "a", "comment": "c"}"#,
        ),
    ] {
        let r = request(s.addr, method, path, &headers, body);
        assert_eq!(r.status, 404, "{method} {path} on the ingest port");
    }
    let created = request(admin_addr, "POST", "/v1/silences", &headers, body);
    assert_eq!(created.status, 201, "{}", created.body);
    let listed = request(admin_addr, "GET", "/v1/silences", &headers, b"");
    assert_eq!(listed.status, 200);
    assert!(listed.body.contains("\"comment\":\"c\""), "{}", listed.body);
    s.stop();
}

#[test]
fn check_says_whether_the_operator_routes_are_on() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hushwatch.toml");
    std::fs::write(&path, ops_config("", &team, None)).unwrap();
    let (code, out, err) = run_cli(&["check"], &path);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("operator routes (/v1/silences, /v1/streams/NAME/acknowledge): on"),
        "{out}"
    );
    std::fs::write(
        &path,
        config(&["team"], "", &webhook("team", &team.url("/team"))),
    )
    .unwrap();
    let (code, out, err) = run_cli(&["check"], &path);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("off (404) without [server] admin_token"),
        "{out}"
    );

    // The token may come from the environment.
    std::fs::write(
        &path,
        ops_config("", &team, None).replace(ADMIN, "${HW_TEST_OPS_ADMIN}"),
    )
    .unwrap();
    let out = cli(&["check"])
        .config(&path)
        .env("HW_TEST_OPS_ADMIN", "from-the-environment")
        .output();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("acknowledge): on, with [server] admin_token"),
        "{text}"
    );
    assert!(
        !text.contains("from-the-environment"),
        "the token is never printed"
    );
}

#[test]
fn a_silence_of_subscription_kinds_holds_the_expiry_warning_until_it_ends() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = \"data\"\nadmin_token = \"{ADMIN}\"\n\n\
         [streams.directory]\ncalendar = \"always\"\nsilence_threshold = \"30d\"\nnotify = [\"team\"]\n\
         [streams.directory.ingest]\nprovider = \"entra\"\nclient_state = \"entra-state\"\n\n{}",
        webhook("team", &team.url("/team"))
    );
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-01T00:00:00Z"));
    silence(
        &s,
        r#"{"streams": ["directory"], "kinds": ["subscription_*"], "ends_at": "2026-12-02T06:00:00Z", "comment": "renewal job being fixed", "created_by": "ana"}"#,
    );
    let body = r#"{"value":[{"subscriptionId":"sub-1","subscriptionExpirationDateTime":"2026-12-03T00:00:00Z","changeType":"updated","resource":"Users/u1","resourceData":{"id":"u1"},"clientState":"entra-state","tenantId":"t"}]}"#;
    let reply = request(
        s.addr,
        "POST",
        "/v1/streams/directory/webhook",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);

    // Entra's default warning starts 24 h before the expiry: under the silence.
    s.clock.set(utc("2026-12-02T00:00:00Z"));
    wait_until("the warning to fire", || {
        let rows = subscriptions(&s)
            .into_iter()
            .filter(|r| r.state == hushwatch::store::AlertState::Firing)
            .count();
        (rows == 1).then_some(())
    });
    assert_eq!(queued_for_team(&s), 0, "held by the silence");

    s.clock.set(utc("2026-12-02T06:00:00Z"));
    wait_exactly("the held warning", 1, || team.delivered());
    let page = team.delivered()[0].json();
    assert_eq!(page["alert"]["kind"], "subscription_expiring");
    assert_eq!(page["status"], "firing");
    wait_until("the outbox to empty", || {
        s.pending().is_empty().then_some(())
    });
    assert_eq!(team.received().len(), 1);
    s.stop();
}

/// Issue #26: `ends_at` has the same maximum as `duration` (30 days, the
/// bound of a maintenance window), measured from the start or from now
/// when the start is earlier; the 400 names the field that set the end.
#[test]
fn a_silence_may_last_at_most_30_days_however_its_end_is_given() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(
        dir.path(),
        &ops_config("", &team, None),
        utc("2026-12-01T10:00:00Z"),
    );
    for (end, field) in [
        (r#""ends_at": "9999-12-31T23:59:59Z""#, "ends_at"),
        (r#""ends_at": "2026-12-31T10:00:01Z""#, "ends_at"),
        (
            r#""starts_at": "2026-11-01T00:00:00Z", "ends_at": "2026-12-31T10:00:01Z""#,
            "ends_at",
        ),
        (r#""duration": "999999999d""#, "duration"),
        (r#""duration": "30d1s""#, "duration"),
        (
            r#""starts_at": "2026-12-05T00:00:00Z", "duration": "31d""#,
            "duration",
        ),
    ] {
        let body =
            format!(r#"{{"streams": ["identity"], {end}, "comment": "c", "created_by": "a"}}"#);
        let (status, json) = admin(&s, "POST", "/v1/silences", &body);
        assert_eq!(status, 400, "{body}: {json}");
        let error = json.to_string();
        assert!(
            error.contains(&format!("\\\"{field}\\\"")) && error.contains("30 days"),
            "{body}: {error}"
        );
    }
    assert!(silences(&s).is_empty(), "nothing stored");
    // Exactly 30 days is accepted, however it is given; a backdated start
    // counts from now.
    for end in [
        r#""duration": "30d""#,
        r#""ends_at": "2026-12-31T10:00:00Z""#,
        r#""starts_at": "2026-11-01T00:00:00Z", "ends_at": "2026-12-31T10:00:00Z""#,
        r#""starts_at": "2027-01-01T00:00:00Z", "ends_at": "2027-01-31T00:00:00Z""#,
    ] {
        silence(
            &s,
            &format!(r#"{{"streams": ["identity"], {end}, "comment": "c", "created_by": "a"}}"#),
        );
    }
    assert_eq!(silences(&s).len(), 4);
    s.stop();
}

/// Issue #26: creating and deleting silences in a loop used to grow
/// `GET /v1/silences` without bound (every silence ended in the last 7
/// days was listed). Now every silence that has not ended is listed and
/// only the 100 most recently ended ones; the store keeps no more.
#[test]
fn churned_silences_keep_the_listing_bounded_and_every_active_one_in_it() {
    let team = Receiver::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let s = InProcess::start_in(
        dir.path(),
        &ops_config("", &team, None),
        utc("2026-12-01T10:00:00Z"),
    );
    let body =
        r#"{"streams": ["identity"], "duration": "2h", "comment": "keep", "created_by": "a"}"#;
    let active: Vec<i64> = (0..5).map(|_| silence(&s, body)).collect();
    let churn =
        r#"{"streams": ["identity"], "duration": "2h", "comment": "churn", "created_by": "a"}"#;
    let mut last = 0;
    for _ in 0..300 {
        last = silence(&s, churn);
        s.advance(1);
        let (status, json) = admin(&s, "DELETE", &format!("/v1/silences/{last}"), "");
        assert_eq!(status, 200, "{json}");
    }
    // Some also end on the clock rather than by DELETE.
    for _ in 0..50 {
        silence(
            &s,
            r#"{"streams": ["identity"], "duration": "1s", "comment": "short", "created_by": "a"}"#,
        );
    }
    s.advance(2);
    let listed = silences(&s);
    let ids = |pred: &dyn Fn(&serde_json::Value) -> bool| -> Vec<i64> {
        listed
            .iter()
            .filter(|x| pred(x))
            .map(|x| x["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(
        ids(&|x| x["active"] == true),
        active,
        "every active silence"
    );
    let ended = ids(&|x| x["active"] == false);
    assert_eq!(ended.len(), 100, "the 100 most recently ended");
    // The newest to end are the 50 short ones, then the last deletions.
    assert!(ended.contains(&last), "{ended:?}");
    assert!(!ended.contains(&(last - 60)), "{ended:?}");
    assert!(listed.len() <= 105, "{}", listed.len());
    s.stop();
}
