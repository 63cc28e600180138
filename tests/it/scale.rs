//! Many streams: the timer orders them by `fires_at` and evaluates only the
//! due ones, so each of 1,000 streams with its own deadline fires when the
//! clock reaches that deadline, and not a second before.

use crate::common;

use common::*;
use hushwatch::store::AlertState;
use std::time::Duration;

const STREAMS: usize = 1_000;
/// Streams fire this far apart.
const STAGGER_SECS: i64 = 7;

fn many_streams_config(n: usize) -> String {
    let mut text = String::from(
        "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = \"data\"\n\n[notifiers.stdout]\nkind = \"log\"\n",
    );
    for i in 0..n {
        // Thresholds of one hour plus a per-stream offset: deadlines in a
        // shuffled order relative to the names, so the order is the timer's.
        let offset = (i * 613) % n;
        text.push_str(&format!(
            "\n[streams.s{i:04}]\ncalendar = \"always\"\nsilence_threshold = \"{}s\"\nnotify = [\"stdout\"]\n[streams.s{i:04}.ingest]\ntoken = \"{TOKEN}\"\n",
            3600 + offset as i64 * STAGGER_SECS
        ));
    }
    text
}

/// Names of the streams the store has firing, with when each fired.
fn firing(s: &InProcess) -> Vec<(String, chrono::DateTime<chrono::Utc>)> {
    let rows = s.block_on(s.app().store().streams()).unwrap();
    rows.into_iter()
        .filter(|r| r.alert_state == AlertState::Firing)
        .map(|r| (r.name, r.firing_since.unwrap()))
        .collect()
}

#[test]
fn a_thousand_streams_each_fire_at_their_own_instant() {
    let start = utc("2026-12-01T00:00:00Z");
    let work = Workdir::new(&many_streams_config(STREAMS));
    let s = InProcess::start(&work, start);
    // Stream with offset k fires at start + 1h + 7k s.
    let mut by_offset = vec![String::new(); STREAMS];
    for i in 0..STREAMS {
        by_offset[(i * 613) % STREAMS] = format!("s{i:04}");
    }
    let wait = Duration::from_secs(10);
    for (k, name) in by_offset.iter().enumerate() {
        let due = start + chrono::TimeDelta::seconds(3600 + k as i64 * STAGGER_SECS);
        // One second before: everything earlier has fired, this one has not.
        s.set_time(due - chrono::TimeDelta::seconds(1));
        let before = wait_for(wait, &format!("{k} streams firing"), || {
            let f = firing(&s);
            (f.len() >= k).then_some(f)
        });
        assert_eq!(before.len(), k, "{name} or a later stream fired early");
        assert!(!before.iter().any(|(n, _)| n == name));
        // At its instant: this one fires, at exactly its fires_at.
        s.set_time(due);
        let after = wait_for(wait, &format!("{name} firing"), || {
            let f = firing(&s);
            (f.len() > k).then_some(f)
        });
        assert_eq!(after.len(), k + 1, "only {name} is due at {due}");
        let (_, since) = after.iter().find(|(n, _)| n == name).expect("fired");
        assert_eq!(*since, due);
    }
}

const ADMIN: &str = "admin-token-for-tests";

fn templated_config(max_streams: usize) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"
max_streams = {max_streams}
admin_token = "{ADMIN}"

[notifiers.stdout]
kind = "log"

[templates.org]
calendar = "always"
silence_threshold = "1h"
notify = ["stdout"]
[templates.org.ingest]
token = "{TOKEN}"

[streams."org:*"]
template = "org"
"#
    )
}

fn admin(s: &InProcess, method: &str, name: &str, token: &str) -> Reply {
    let auth = format!("Bearer {token}");
    request(
        s.addr,
        method,
        &format!("/v1/streams/{name}"),
        &[("authorization", &auth)],
        b"",
    )
}

fn stream_names(s: &InProcess) -> Vec<String> {
    let status = get(s.addr, "/v1/status").json();
    status["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|st| st["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_templated_stream_is_created_by_its_first_verified_event_only() {
    let work = Workdir::new(&templated_config(10));
    let s = InProcess::start(&work, utc("2026-12-01T00:00:00Z"));
    assert_eq!(stream_names(&s), Vec::<String>::new());

    let event = r#"{"type":"user.updated","id":"e1"}"#;
    assert_eq!(post_events(s.addr, "org:acme", "wrong", event).status, 401);
    assert_eq!(post_events(s.addr, "other:acme", TOKEN, event).status, 404);
    assert_eq!(post_events(s.addr, "org:a/b", TOKEN, event).status, 404);
    assert_eq!(stream_names(&s), Vec::<String>::new());
    let metrics = get(s.addr, "/metrics").body;
    assert!(!metrics.contains("org:acme"), "no series before it exists");

    assert_eq!(post_events(s.addr, "org:acme", TOKEN, event).status, 200);
    assert_eq!(stream_names(&s), ["org:acme"]);
    let st = stream_status(s.addr, "org:acme");
    assert_eq!(st["last_event_at"], "2026-12-01T00:00:00.000Z");
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_events_total{outcome="accepted",stream="org:acme"}"#
        ),
        1.0
    );
    assert_eq!(
        metric(
            s.addr,
            r#"hushwatch_silence_threshold_seconds{stream="org:acme"}"#
        ),
        3600.0
    );

    // It fires from the template's threshold like any stream.
    s.set_time(utc("2026-12-01T01:00:00Z"));
    wait_for(Duration::from_secs(10), "org:acme firing", || {
        (stream_status(s.addr, "org:acme")["state"] == "firing").then_some(())
    });
}

#[test]
fn put_creates_a_stream_that_fires_never_seen_and_survives_a_restart() {
    let work = Workdir::new(&templated_config(10));
    let start = utc("2026-12-01T00:00:00Z");
    let s = InProcess::start(&work, start);
    assert_eq!(admin(&s, "PUT", "org:acme", "wrong").status, 401);
    assert_eq!(admin(&s, "PUT", "nope:acme", ADMIN).status, 404);
    assert_eq!(stream_names(&s), Vec::<String>::new());
    assert_eq!(admin(&s, "PUT", "org:acme", ADMIN).status, 201);
    assert_eq!(
        admin(&s, "PUT", "org:acme", ADMIN).status,
        200,
        "idempotent"
    );
    assert_eq!(
        stream_status(s.addr, "org:acme")["fires_at"],
        "2026-12-01T01:00:00.000Z"
    );
    // A reload (SIGHUP) keeps it too.
    let config = hushwatch::config::load(&work.config_path()).unwrap();
    s.block_on(s.app().reload(config)).unwrap();
    assert_eq!(stream_names(&s), ["org:acme"]);
    s.stop();

    // A restart watches it again, with its clock from the PUT.
    let s = InProcess::start(&work, utc("2026-12-01T00:30:00Z"));
    assert_eq!(stream_names(&s), ["org:acme"]);
    assert_eq!(
        stream_status(s.addr, "org:acme")["watching_since"],
        "2026-12-01T00:00:00.000Z"
    );
    s.set_time(utc("2026-12-01T01:00:00Z"));
    let st = wait_for(Duration::from_secs(10), "org:acme firing", || {
        let st = stream_status(s.addr, "org:acme");
        (st["state"] == "firing").then_some(st)
    });
    assert_eq!(st["firing_since"], "2026-12-01T01:00:00.000Z");
}

#[test]
fn max_streams_refuses_with_429_and_counts_and_delete_frees_a_slot() {
    let work = Workdir::new(&templated_config(2));
    let s = InProcess::start(&work, utc("2026-12-01T00:00:00Z"));
    let event = r#"{"type":"user.updated","id":"e1"}"#;
    assert_eq!(admin(&s, "PUT", "org:a", ADMIN).status, 201);
    assert_eq!(post_events(s.addr, "org:b", TOKEN, event).status, 200);
    assert_eq!(post_events(s.addr, "org:c", TOKEN, event).status, 429);
    assert_eq!(admin(&s, "PUT", "org:c", ADMIN).status, 429);
    assert_eq!(
        metric(s.addr, "hushwatch_templated_streams_refused_total"),
        2.0
    );
    assert_eq!(stream_names(&s), ["org:a", "org:b"]);
    assert!(!get(s.addr, "/metrics").body.contains("org:c"));

    assert_eq!(admin(&s, "DELETE", "org:a", "wrong").status, 401);
    assert_eq!(admin(&s, "DELETE", "org:a", ADMIN).status, 200);
    assert_eq!(admin(&s, "DELETE", "org:a", ADMIN).status, 404);
    assert_eq!(stream_names(&s), ["org:b"]);
    assert!(!get(s.addr, "/metrics").body.contains("\"org:a\""));
    assert_eq!(post_events(s.addr, "org:c", TOKEN, event).status, 200);
    assert_eq!(stream_names(&s), ["org:b", "org:c"]);
    s.stop();
    let s = InProcess::start(&work, utc("2026-12-01T00:10:00Z"));
    assert_eq!(stream_names(&s), ["org:b", "org:c"], "the delete persisted");
}

#[test]
fn without_an_admin_token_the_stream_routes_do_not_exist() {
    let work =
        Workdir::new(&templated_config(2).replace(&format!("admin_token = \"{ADMIN}\"\n"), ""));
    let s = InProcess::start(&work, utc("2026-12-01T00:00:00Z"));
    assert_eq!(admin(&s, "PUT", "org:a", ADMIN).status, 404);
    assert_eq!(stream_names(&s), Vec::<String>::new());
}

#[test]
fn explain_takes_a_templated_stream_name() {
    let work = Workdir::new(&templated_config(2));
    let out = cli(&["explain"])
        .config(work.config_path())
        .args(&[
            "--stream",
            "org:acme",
            "--last-event",
            "2026-12-01T00:00:00Z",
            "--now",
            "2026-12-01T00:30:00Z",
        ])
        .output();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stream"], "org:acme");
    assert_eq!(v["fires_at"], "2026-12-01T01:00:00Z");
}
