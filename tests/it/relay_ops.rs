//! The relay's operator commands through the real binary (issue #44):
//! `hushwatch forward list|retry|skip`, `hushwatch replay --dead-letters`,
//! `DELETE` of a templated relaying stream, and a replay of a 400k-row
//! window that stays bounded in memory and never stalls ingest.
//!
//! The app is `tests/support/relay_app.py`, a real HTTP server verifying
//! every forward with the official Standard Webhooks library, told to
//! answer 502 (`down`) or 2xx (`up`). Ladders are an hour long, so every
//! event that arrives within seconds arrived because of the command under
//! test, not a retry.

use crate::common::{cli, get, request, wait_for, Sidecar, Workdir};
use crate::support::{self, post_signed_webhook, wait_listening, ClosedPort, Proc};

use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const APP_SECRET: &str = "whsec_+zPUtq55XAYZ3Ur7mJIL5Mb+uBY8OctQ";
const ADMIN: &str = "relay-ops-admin-1";
const LIMIT: Duration = Duration::from_secs(90);

/// The app: verifies every delivery, answers as told.
struct App {
    _proc: Proc,
    addr: SocketAddr,
}

impl App {
    fn start() -> App {
        let child = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/support/relay_app.py"
            ))
            .arg(APP_SECRET)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3 (scripts/test-components installs standardwebhooks)");
        let mut proc = Proc(child, "relay_app.py".into());
        let port = wait_listening(&mut proc);
        App {
            _proc: proc,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    fn url(&self) -> String {
        format!("http://{}/webhooks", self.addr)
    }

    fn mode(&self, mode: &str) {
        let body = json!({ "mode": mode }).to_string();
        let reply = request(
            self.addr,
            "POST",
            "/control",
            &[("content-type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
    }

    /// Webhook-ids the app accepted (2xx).
    fn accepted(&self) -> BTreeSet<String> {
        get(self.addr, "/deliveries")
            .json()
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["answered"] == true)
            .filter_map(|d| d["id"].as_str().map(str::to_owned))
            .collect()
    }

    fn wait_accepted(&self, ids: &[&str], what: &str) {
        wait_for(Duration::from_secs(30), what, || {
            let got = self.accepted();
            ids.iter().all(|id| got.contains(*id)).then_some(())
        });
    }
}

fn clerk_event(kind: &str, user: &str) -> String {
    json!({
        "type": kind,
        "object": "event",
        "timestamp": chrono::Utc::now().timestamp_millis(),
        "data": { "object": "user", "id": user },
    })
    .to_string()
}

fn send(addr: SocketAddr, stream: &str, id: &str, body: &str) {
    let status = post_signed_webhook(
        addr,
        stream,
        SECRET,
        id,
        chrono::Utc::now().timestamp(),
        body,
    );
    assert!((200..300).contains(&status), "{id}: {status}");
}

/// An admin command against the sidecar at `addr` (`--url`; the test
/// configs listen on port 0), with the admin token in the default variable.
fn run(addr: SocketAddr, args: &[&str]) -> (i32, String, String) {
    let url = format!("http://{addr}");
    let mut args = args.to_vec();
    args.extend(["--url", &url]);
    cli(&args).env("HUSHWATCH_ADMIN_TOKEN", ADMIN).run()
}

fn ok(addr: SocketAddr, args: &[&str]) -> String {
    let (code, out, err) = run(addr, args);
    assert_eq!(code, 0, "{args:?}: {out}{err}");
    out
}

fn pages(hw: &Sidecar, kind: &str, status: &str) -> Vec<Value> {
    hw.stdout_lines()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|p| p["alert_kind"] == kind && p["status"] == status)
        .collect()
}

fn listed(addr: SocketAddr, extra: &[&str]) -> Value {
    let mut args = vec![
        "forward", "list", "--stream", "identity", "--format", "json",
    ];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(addr, &args)).unwrap()
}

fn relay_config(app_url: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"
admin_token = "{ADMIN}"

[streams.identity]
calendar = "always"
silence_threshold = "1h"
notify = ["stdout"]
[streams.identity.ingest]
webhook_secret = "{SECRET}"

[streams.identity.forward]
url = "{app_url}"
secret = "{APP_SECRET}"
timeout = "2s"
ordered = true
retry = ["1h"]

[notifiers.stdout]
kind = "log"
"#
    )
}

#[test]
fn a_stuck_event_is_listed_skipped_and_replayed_and_retry_sends_at_once() {
    let app = App::start();
    app.mode("down");
    let work = Workdir::new(&relay_config(&app.url()));
    let config = work.config_path();
    let hw = Sidecar::start(&config);
    for (id, user) in [
        ("msg_ops_a", "user_a"),
        ("msg_ops_b", "user_b"),
        ("msg_ops_c", "user_c"),
    ] {
        send(hw.addr, "identity", id, &clerk_event("user.deleted", user));
    }
    // The head failed once; the ladder puts its next try an hour out, and
    // the ordered queue holds b and c behind it. An attempt is counted
    // when it is claimed, before the app answers: wait for its outcome.
    let first = wait_for(LIMIT, "the head's first failed attempt", || {
        let l = listed(hw.addr, &[]);
        let head = &l["events"][0];
        (head["attempts"].as_u64() >= Some(1) && !head["last_status"].is_null()).then_some(l)
    });
    assert_eq!(first["total"], 3, "{first}");
    let head = &first["events"][0];
    assert_eq!(head["id"], "msg_ops_a");
    assert_eq!(head["subject"], "user_a");
    assert_eq!(head["type"], "user.deleted");
    assert_eq!(head["state"], "pending");
    assert_eq!(head["last_status"], 502);
    assert!(head["next_attempt_at"].is_string(), "{head}");
    let page = listed(hw.addr, &["--limit", "1"]);
    assert_eq!(
        (
            page["events"].as_array().unwrap().len(),
            page["more"].as_u64()
        ),
        (1, Some(2))
    );
    let table = ok(hw.addr, &["forward", "list", "--stream", "identity"]);
    for want in [
        "NEXT ATTEMPT",
        "LAST ERROR",
        "msg_ops_a",
        "user_a",
        "pending",
        "3 event(s)",
    ] {
        assert!(table.contains(want), "{want} not in:\n{table}");
    }

    app.mode("up");
    let (code, _, err) = run(
        hw.addr,
        &[
            "forward",
            "skip",
            "--stream",
            "identity",
            "--id",
            "msg_nope",
            "--comment",
            "x",
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("404"), "{err}");

    // Skip the head: what waited behind it is delivered at once.
    let out = ok(
        hw.addr,
        &[
            "forward",
            "skip",
            "--stream",
            "identity",
            "--id",
            "msg_ops_a",
            "--comment",
            "the app refuses it",
        ],
    );
    assert!(out.contains("msg_ops_a is a dead letter now"), "{out}");
    app.wait_accepted(
        &["msg_ops_b", "msg_ops_c"],
        "b and c delivered after the skip",
    );
    assert!(!app.accepted().contains("msg_ops_a"));
    wait_for(LIMIT, "the dead-letter page", || {
        pages(&hw, "forward_dead_letter", "firing")
            .into_iter()
            .next()
    });
    let dead = listed(hw.addr, &["--state", "dead"]);
    assert_eq!(dead["total"], 1, "{dead}");
    let error = dead["events"][0]["last_error"].as_str().unwrap();
    assert!(error.contains("the app refuses it"), "{error}");

    let (code, _, err) = run(
        hw.addr,
        &[
            "forward",
            "skip",
            "--stream",
            "identity",
            "--id",
            "msg_ops_b",
            "--comment",
            "x",
        ],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("409") && err.contains("already delivered"),
        "{err}"
    );
    let (code, _, err) = run(
        hw.addr,
        &[
            "forward",
            "retry",
            "--stream",
            "identity",
            "--id",
            "msg_ops_a",
        ],
    );
    assert_eq!(code, 1);
    assert!(err.contains("--dead-letters"), "{err}");

    // The dead letter, sent again: a dry run counts, then it goes.
    let dry = ok(
        hw.addr,
        &[
            "replay",
            "--stream",
            "identity",
            "--dead-letters",
            "--dry-run",
        ],
    );
    assert!(dry.contains("would send 1 dead letter(s)"), "{dry}");
    assert!(dry.contains("msg_ops_a"), "{dry}");
    assert!(
        !app.accepted().contains("msg_ops_a"),
        "a dry run sends nothing"
    );
    let done = ok(
        hw.addr,
        &["replay", "--stream", "identity", "--dead-letters"],
    );
    assert!(done.contains("sent again: 1"), "{done}");
    app.wait_accepted(&["msg_ops_a"], "the replayed dead letter, under its id");
    wait_for(LIMIT, "the dead-letter resolve page", || {
        pages(&hw, "forward_dead_letter", "resolved")
            .into_iter()
            .next()
    });

    // Retry: a failed event waits an hour, unless someone says "now".
    app.mode("down");
    send(
        hw.addr,
        "identity",
        "msg_ops_d",
        &clerk_event("user.deleted", "user_d"),
    );
    wait_for(LIMIT, "d's first failed attempt", || {
        let l = listed(hw.addr, &["--state", "pending"]);
        let d = &l["events"][0];
        (d["attempts"].as_u64() >= Some(1) && !d["last_status"].is_null()).then_some(())
    });
    app.mode("up");
    let out = ok(hw.addr, &["forward", "retry", "--stream", "identity"]);
    assert!(out.contains("1 pending event(s) due now"), "{out}");
    app.wait_accepted(&["msg_ops_d"], "d delivered right after the retry");

    // Each action is in the chain with who and why.
    let (code, out, err) = support::run_cli(&["audit", "export", "--stream", "identity"], &config);
    assert_eq!(code, 0, "{err}");
    for want in [
        "forward skip by",
        "the app refuses it",
        "replay of dead letters by",
        "forward retry by",
    ] {
        assert!(out.contains(want), "{want} not audited:\n{out}");
    }
    hw.stop();
}

#[test]
fn deleting_a_templated_relaying_stream_with_undelivered_events_needs_force() {
    let app = App::start();
    app.mode("down");
    let config = format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"
admin_token = "{ADMIN}"

[templates.org]
calendar = "always"
silence_threshold = "1h"
notify = ["stdout"]
[templates.org.ingest]
webhook_secret = "{SECRET}"
[templates.org.forward]
url = "{url}"
secret = "{APP_SECRET}"
ordered = true
retry = ["1h"]

[streams."org:*"]
template = "org"

[notifiers.stdout]
kind = "log"
"#,
        url = app.url()
    );
    let work = Workdir::new(&config);
    let hw = Sidecar::start(&work.config_path());
    let auth = format!("Bearer {ADMIN}");
    let call = |method: &str, path: &str| {
        request(
            hw.addr,
            method,
            path,
            &[("authorization", auth.as_str())],
            b"",
        )
    };
    assert_eq!(call("PUT", "/v1/streams/org:acme").status, 201);
    send(
        hw.addr,
        "org:acme",
        "msg_org_1",
        &clerk_event("user.deleted", "user_o1"),
    );
    send(
        hw.addr,
        "org:acme",
        "msg_org_2",
        &clerk_event("user.deleted", "user_o2"),
    );

    let refused = call("DELETE", "/v1/streams/org:acme");
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(refused.json()["undelivered"], 2);
    assert!(refused.json()["error"]
        .as_str()
        .unwrap()
        .contains("?force=true"));
    assert!(
        get(hw.addr, "/v1/status").body.contains("org:acme"),
        "the stream is still there"
    );

    let deleted = call("DELETE", "/v1/streams/org:acme?force=true&created_by=ana");
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(deleted.json()["dead_letters_made"], 2);
    wait_for(LIMIT, "the dead-letter page of the deleted stream", || {
        pages(&hw, "forward_dead_letter", "firing")
            .into_iter()
            .find(|p| p.to_string().contains("org:acme"))
    });
    let (code, out, err) = support::run_cli(
        &["audit", "export", "--stream", "org:acme"],
        &work.config_path(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("stream deleted by ana with force: 2"), "{out}");
    assert!(app.accepted().is_empty());
    hw.stop();
}

/// Rows a bounded replay must handle (issue #44: 400k rows once took 140
/// MiB and held the writer for 9.7 s).
const BULK: i64 = 400_000;

/// `BULK` delivered rows of `identity`, written straight into the SQLite
/// file of a stopped sidecar (ingest would take minutes); received one
/// millisecond apart from `from_ms`.
fn insert_delivered(db: &Path, from_ms: i64) {
    let mut conn = rusqlite::Connection::open(db).unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO forwards (stream, queue, delivery_id, event_type, subject,
                    received_at, give_up_from, moves_clock, body, state, attempts,
                    next_attempt_at, settled_at)
                 VALUES ('identity', 'identity', ?1, 'user.updated', ?2, ?3, ?3, 0, ?4,
                    'delivered', 1, ?3, ?3)",
            )
            .unwrap();
        let body = br#"{"type":"user.updated","data":{"id":"user_bulk"}}"#;
        for i in 0..BULK {
            insert
                .execute(rusqlite::params![
                    format!("msg_bulk_{i}"),
                    format!("user_{}", i % 1000),
                    from_ms + i,
                    &body[..]
                ])
                .unwrap();
        }
    }
    tx.commit().unwrap();
}

fn p99(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[(samples.len() * 99 / 100).min(samples.len() - 1)]
}

#[test]
fn a_400k_row_replay_and_dry_run_stay_bounded_while_webhooks_keep_arriving() {
    // Forwards go to a closed port: the replayed queue fails fast at its
    // head and waits an hour; only the replay's own work is measured.
    let closed = ClosedPort::new();
    let work = Workdir::new(&relay_config(&format!(
        "http://127.0.0.1:{}/webhooks",
        closed.port()
    )));
    let config = work.config_path();
    Sidecar::start(&config).stop(); // creates and migrates the file
    let from_ms = chrono::Utc::now().timestamp_millis() - 2 * BULK;
    insert_delivered(&work.path().join("data/hushwatch.sqlite3"), from_ms);

    let hw = Sidecar::start(&config);
    // The chart's memory limit, on the running process.
    let limited = Command::new("prlimit")
        .args(["--pid", &hw.child.id().to_string(), "--data=134217728"])
        .status()
        .expect("prlimit (util-linux)");
    assert!(limited.success());
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", hw.child.id())).unwrap();
    assert!(
        limits
            .lines()
            .any(|l| l.starts_with("Max data size") && l.contains("134217728")),
        "{limits}"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (stop, addr) = (Arc::clone(&stop), hw.addr);
        std::thread::spawn(move || {
            let mut took = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let body = clerk_event("user.created", &format!("user_live_{i}"));
                let started = Instant::now();
                send(addr, "identity", &format!("msg_live_{i}"), &body);
                took.push(started.elapsed());
                i += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            took
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let window = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .to_rfc3339()
    };
    let (from, to) = (window(from_ms), window(from_ms + BULK));
    let replay = |dry_run: bool| {
        let mut args = vec![
            "replay", "--stream", "identity", "--from", &from, "--to", &to, "--format", "json",
        ];
        if dry_run {
            args.push("--dry-run");
        }
        let answer: Value = serde_json::from_str(&ok(hw.addr, &args)).unwrap();
        answer
    };
    let dry = replay(true);
    assert_eq!(dry["requeued"], BULK, "{}", dry["requeued"]);
    assert_eq!(dry["listed"], 1000, "the listing stays capped");
    let done = replay(false);
    assert_eq!(done["requeued"], BULK);
    assert_eq!(done["already_pending"], 0);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let took = sender.join().unwrap();

    assert!(took.len() >= 20, "webhooks kept arriving: {}", took.len());
    let p99 = p99(took.clone());
    assert!(
        p99 < Duration::from_secs(1),
        "webhook p99 {p99:?} during the replay (max {:?})",
        took.iter().max()
    );
    let mut hw = hw;
    assert!(
        hw.child.try_wait().unwrap().is_none(),
        "the sidecar died under the memory limit: {}",
        hw.stderr_text()
    );
    let pending = listed(hw.addr, &["--state", "pending", "--limit", "1"]);
    assert!(
        pending["total"].as_u64() >= Some(BULK as u64),
        "{}",
        pending["total"]
    );
    hw.stop();
}
