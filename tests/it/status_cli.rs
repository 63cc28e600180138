//! `[server] admin_listen` (which listener serves which route, in both
//! modes) and `hushwatch status` against live servers: exit 0 when all is
//! ok, 1 when a stream fires, 2 for a bad config, 3 when the server cannot
//! answer.

use crate::common;
use crate::common::pg;

use common::*;
use std::net::SocketAddr;

const MONDAY_10_TOKYO: &str = "2026-11-30T10:00:00+09:00";

fn config(admin: bool) -> String {
    let text = format!(
        "{}\n[svix.main]\nsecret = \"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"\nstreams = [\"identity\"]\nnotify = [\"stdout\"]\nadmin_token = \"admin-token-1\"\n",
        basic_config("calendar = \"tokyo\"\nsilence_threshold = \"6h\"")
    );
    if admin {
        text.replace(
            "listen = \"127.0.0.1:0\"",
            "listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"",
        )
    } else {
        text
    }
}

fn start(work: &Workdir) -> InProcess {
    InProcess::start(work, utc(MONDAY_10_TOKYO))
}

fn report(addr: SocketAddr, id: &str) -> u16 {
    post_events(
        addr,
        "identity",
        TOKEN,
        &format!(r#"{{"type":"user.created","id":"{id}"}}"#),
    )
    .status
}

fn ack(addr: SocketAddr) -> u16 {
    request(
        addr,
        "POST",
        "/v1/svix/main/acknowledge",
        &[("authorization", "Bearer x")],
        b"{}",
    )
    .status
}

#[test]
fn with_admin_listen_status_and_metrics_leave_the_ingest_port() {
    let work = Workdir::new(&config(true));
    let running = start(&work);
    let public = running.addr;
    let admin = running.admin_addr().expect("admin listener bound");
    assert_ne!(public, admin);
    for path in ["/", "/v1/status", "/metrics"] {
        let r = get(public, path);
        assert_eq!(r.status, 404, "{path} on the ingest port: {}", r.body);
        assert_eq!(r.json()["error"], "no such route");
        assert_eq!(get(admin, path).status, 200, "{path} on the admin port");
    }
    assert_eq!(ack(public), 404, "admin routes are not on the ingest port");
    assert_eq!(ack(admin), 401, "admin routes are on the admin port");
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(get(public, probe).status, 200);
        assert_eq!(get(admin, probe).status, 200);
    }
    assert_eq!(report(public, "e1"), 200, "ingest stays on the main port");
    assert_eq!(report(admin, "e2"), 404, "no ingest on the admin port");
    let html = get(admin, "/");
    assert!(html
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    running.stop();
}

#[test]
fn without_admin_listen_one_port_serves_everything() {
    let work = Workdir::new(&config(false));
    let running = start(&work);
    assert_eq!(running.admin_addr(), None);
    for path in ["/", "/v1/status", "/metrics", "/healthz"] {
        assert_eq!(get(running.addr, path).status, 200, "{path}");
    }
    assert_eq!(ack(running.addr), 401);
    assert_eq!(report(running.addr, "e1"), 200);
    running.stop();
}

fn status_cli(url: &str) -> (i32, String, String) {
    cli(&["status", "--url", url]).run()
}

#[test]
fn status_exits_0_when_ok_and_1_when_a_stream_fires() {
    let work = Workdir::new(&config(false));
    let s = InProcess::start(&work, utc(MONDAY_10_TOKYO));
    let url = format!("http://{}", s.addr);
    assert_eq!(report(s.addr, "e1"), 200);
    s.set_time(utc("2026-11-30T12:13:00+09:00"));
    let (code, out, err) = status_cli(&url);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("hushwatch OK: 0 of 1 stream(s) firing"),
        "{out}"
    );
    assert!(out.contains("identity"), "{out}");
    assert!(out.contains("2h13m/6h (37%)"), "{out}");
    assert!(
        out.contains("fires in 3h47m (Mon 16:00 Asia/Tokyo · 07:00 UTC)"),
        "{out}"
    );
    assert!(!out.contains('\x1b'), "no colour when stdout is a pipe");
    // Monday 16:00 Tokyo completes 6h of business silence.
    s.set_time(utc("2026-11-30T17:05:00+09:00"));
    wait_for(std::time::Duration::from_secs(30), "firing", || {
        (stream_status(s.addr, "identity")["state"] == "firing").then_some(())
    });
    let (code, out, err) = status_cli(&url);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.starts_with("hushwatch NOT OK: 1 of 1 stream(s) firing"),
        "{out}"
    );
    assert!(out.contains("FIRING for 1h05m"), "{out}");
    // The example in docs/src/operating/status.md, line for line.
    assert_eq!(
        out.lines().take(4).collect::<Vec<_>>(),
        [
            "hushwatch NOT OK: 1 of 1 stream(s) firing, as of 2026-11-30 08:05:00 UTC",
            "STREAM    STATE   SILENCE/THRESHOLD  CLOCK    LAST EVENT",
            "identity  FIRING  7h05m/6h (100%)    running  user.created 7h05m ago",
            "  FIRING for 1h05m (silent for 7h05m of business time)",
        ]
    );
    s.stop();
}

/// Issue #27: the row says who acknowledged the firing stream and who
/// silenced it, until when; the line under it gives the zone and the
/// comment. Line for line, as the docs show it (Operating → `hushwatch status`).
#[test]
fn status_says_who_acknowledged_and_who_silenced_a_firing_stream() {
    who_is_on_it("");
}

/// The same on PostgreSQL: the acknowledgement and the silence come from
/// the store, and both backends must give the same lines.
#[test]
fn status_says_who_acknowledged_and_who_silenced_a_firing_stream_on_postgres() {
    let Some(db) = pg::PgDb::create("status_cli_who_postgres") else {
        return;
    };
    who_is_on_it(&format!("\n[store]\nurl = \"{}\"\n", db.url));
}

/// `store`: `""` for SQLite, else a `[store]` block.
fn who_is_on_it(store: &str) {
    let text = config(false).replace(
        "listen = \"127.0.0.1:0\"",
        "listen = \"127.0.0.1:0\"\nadmin_token = \"admin-token-cli\"",
    );
    let work = Workdir::new(&format!("{text}{store}"));
    let s = InProcess::start(&work, utc(MONDAY_10_TOKYO));
    let url = format!("http://{}", s.addr);
    assert_eq!(report(s.addr, "e1"), 200);
    s.set_time(utc("2026-11-30T17:05:00+09:00"));
    wait_for(std::time::Duration::from_secs(30), "firing", || {
        (stream_status(s.addr, "identity")["state"] == "firing").then_some(())
    });
    let admin = [("authorization", "Bearer admin-token-cli")];
    let r = request(
        s.addr,
        "POST",
        "/v1/streams/identity/acknowledge",
        &admin,
        br#"{"created_by": "ana", "comment": "on it"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let (code, out, err) = status_cli(&url);
    assert_eq!(code, 1, "still firing: {out}{err}");
    assert_eq!(
        out.lines().take(5).collect::<Vec<_>>(),
        [
            "hushwatch NOT OK: 1 of 1 stream(s) firing (1 acknowledged), as of 2026-11-30 08:05:00 UTC",
            "STREAM    STATE                        SILENCE/THRESHOLD  CLOCK    LAST EVENT",
            "identity  FIRING (acked by ana 17:05)  7h05m/6h (100%)    running  user.created 7h05m ago",
            "  FIRING for 1h05m (silent for 7h05m of business time)",
            "  acknowledged by ana at Mon 17:05 Asia/Tokyo · 08:05 UTC: \u{201c}on it\u{201d}",
        ]
    );
    // A silence of the stream's Svix pages only: the quiet page still goes
    // out, so the row does not call the stream silenced.
    let r = request(
        s.addr,
        "POST",
        "/v1/silences",
        &admin,
        br#"{"streams": ["identity"], "kinds": ["svix_*"], "duration": "3h", "comment": "svix work", "created_by": "cy"}"#,
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let status = stream_status(s.addr, "identity");
    assert_eq!(status["silenced"]["by"], "cy", "{status}");
    assert_eq!(status["silenced"]["quiet_page"], false, "{status}");
    let (_, out, _) = status_cli(&url);
    assert!(
        out.contains("identity  FIRING (acked by ana 17:05)  "),
        "{out}"
    );
    assert!(
        out.contains("\n  other pages silenced (svix_*) until Mon 20:05 Asia/Tokyo · 11:05 UTC by cy: \u{201c}svix work\u{201d}\n"),
        "{out}"
    );
    // A silence of every page wins over it, though it ends sooner.
    let r = request(
        s.addr,
        "POST",
        "/v1/silences",
        &admin,
        br#"{"streams": ["identity"], "duration": "2h", "comment": "IdP migration", "created_by": "bob"}"#,
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let (code, out, err) = status_cli(&url);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(
        out.lines().take(6).collect::<Vec<_>>(),
        [
            "hushwatch NOT OK: 1 of 1 stream(s) firing (1 acknowledged), as of 2026-11-30 08:05:00 UTC",
            "STREAM    STATE                                                     SILENCE/THRESHOLD  CLOCK    LAST EVENT",
            "identity  FIRING (acked by ana 17:05; silenced until 19:05 by bob)  7h05m/6h (100%)    running  user.created 7h05m ago",
            "  FIRING for 1h05m (silent for 7h05m of business time)",
            "  acknowledged by ana at Mon 17:05 Asia/Tokyo · 08:05 UTC: \u{201c}on it\u{201d}",
            "  silenced until Mon 19:05 Asia/Tokyo · 10:05 UTC by bob: \u{201c}IdP migration\u{201d}",
        ]
    );
    s.stop();
}

#[test]
fn status_exits_3_when_nothing_answers_http_or_the_port_is_not_the_admin_one() {
    // A listener that accepts and hangs up: a port with no hushwatch behind.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    let (code, out, err) = status_cli(&format!("http://{dead}"));
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains(&dead.to_string()), "{err}");
    assert!(out.is_empty());

    let work = Workdir::new(&config(true));
    let running = start(&work);
    let (code, _, err) = status_cli(&format!("http://{}", running.addr));
    assert_eq!(code, 3, "the ingest port answers 404: {err}");
    assert!(err.contains("404"), "{err}");
    let admin = running.admin_addr().unwrap();
    let (code, out, err) = status_cli(&format!("http://{admin}"));
    assert_eq!(code, 0, "{out}{err}");
    running.stop();
}

#[test]
fn status_finds_the_server_from_the_config_preferring_admin_listen() {
    let work =
        Workdir::new("[server]\nlisten = \"0.0.0.0:9477\"\nadmin_listen = \"127.0.0.1:9478\"\n");
    let url = hushwatch::commands::status::base_url(None, Some(&work.config_path())).unwrap();
    assert_eq!(url, "http://127.0.0.1:9478");
    work.write_config("[server]\nlisten = \"0.0.0.0:9477\"\n");
    let url = hushwatch::commands::status::base_url(None, Some(&work.config_path())).unwrap();
    assert_eq!(
        url, "http://127.0.0.1:9477",
        "a wildcard is asked on loopback"
    );
    let url = hushwatch::commands::status::base_url(Some("http://h:1/"), None).unwrap();
    assert_eq!(url, "http://h:1");
}

/// `hushwatch status --config F` reads only `[server]`: a cron job without
/// the notifiers' `${VAR}` secrets still reaches the server (exit 0), and a
/// broken `[server]` is a config error (2), not "unreachable" (3).
#[test]
fn status_with_config_needs_no_secrets_and_tells_bad_config_from_unreachable() {
    let work = Workdir::new(&config(false));
    let running = start(&work);
    let cron = Workdir::new(&format!(
        "[server]\nlisten = \"{}\"\n\n[notifiers.pager]\nkind = \"pagerduty\"\nrouting_key = \"${{HW_TEST_SECRET_NEVER_SET}}\"\n",
        running.addr
    ));
    let run = |path: &std::path::Path| {
        cli(&["status"])
            .config(path)
            .env_remove("HW_TEST_SECRET_NEVER_SET")
            .run()
    };
    let (code, out, err) = run(&cron.config_path());
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("hushwatch OK"), "{out}");

    cron.write_config("[server]\nlisten = \"not an address\"\n");
    let (code, _, err) = run(&cron.config_path());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("server.listen"),
        "the error names the key: {err}"
    );
    running.stop();
}

// ------------------------------------------------ relay health (issue #44)

/// The provider's endpoint secret (the test signs as Clerk does) and the
/// app's, which hushwatch signs forwards with.
const RELAY_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const APP_SECRET: &str = "whsec_+zPUtq55XAYZ3Ur7mJIL5Mb+uBY8OctQ";

/// The app behind the relay: a real HTTP server on 127.0.0.1 that reads
/// each request whole and answers 204, or 400 to everything while told to
/// refuse (what an app does with an event it will never take).
pub struct RefusableApp {
    pub addr: SocketAddr,
    refuse: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl RefusableApp {
    pub fn start() -> RefusableApp {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let refuse = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&refuse);
        std::thread::spawn(move || {
            for mut conn in listener.incoming().map_while(Result::ok) {
                let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut seen = Vec::new();
                let mut buf = [0u8; 8192];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    if request_complete(&seen) {
                        break;
                    }
                }
                let answer: &[u8] = if flag.load(Ordering::SeqCst) {
                    b"HTTP/1.1 400 Bad Request\r\ncontent-length: 16\r\nconnection: close\r\n\r\nunknown user_xyz"
                } else {
                    b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n"
                };
                let _ = conn.write_all(answer);
            }
        });
        RefusableApp { addr, refuse }
    }

    pub fn refuse(&self, refuse: bool) {
        self.refuse
            .store(refuse, std::sync::atomic::Ordering::SeqCst);
    }
}

fn request_complete(seen: &[u8]) -> bool {
    let text = String::from_utf8_lossy(seen);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    body.len() >= length
}

/// Two relaying streams to `app` on one-second ladders: `identity` keeps
/// trying for an hour (a failing run), `billing` gives up after 2 s (dead
/// letters). Neither goes quiet for the length of a test.
pub fn relay_config(app: &RefusableApp) -> String {
    let stream = |name: &str, give_up: &str| {
        format!(
            r#"
[streams.{name}]
calendar = "always"
silence_threshold = "1h"
notify = ["stdout"]
[streams.{name}.ingest]
webhook_secret = "{RELAY_SECRET}"
[streams.{name}.forward]
url = "http://{addr}/webhooks"
secret = "{APP_SECRET}"
timeout = "2s"
retry = ["1s"]
give_up_after = "{give_up}"
"#,
            addr = app.addr
        )
    };
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = \"data\"\nadmin_token = \"relay-admin-1\"\n{}{}\n[notifiers.stdout]\nkind = \"log\"\n",
        stream("identity", "1h"),
        stream("billing", "2s")
    )
}

/// Posts one signed Clerk-like delivery to `stream`; it must be accepted.
pub fn send_relayed(addr: SocketAddr, stream: &str, id: &str, kind: &str, user: &str) {
    let body = serde_json::json!({
        "type": kind, "object": "event",
        "timestamp": chrono::Utc::now().timestamp_millis(),
        "data": {"object": "user", "id": user},
    })
    .to_string();
    let r = post_webhook(
        addr,
        stream,
        RELAY_SECRET,
        id,
        chrono::Utc::now().timestamp(),
        &body,
    );
    assert_eq!(r.status, 200, "{id}: {}", r.body);
}

/// `streams[name].relay` of `/v1/status`.
pub fn relay_of(addr: SocketAddr, name: &str) -> serde_json::Value {
    stream_status(addr, name)["relay"].clone()
}

/// Drives the relay into each state through the binary: both streams
/// delivered (ok), then the app refusing (`identity` failing with its
/// event pending, `billing` given up). Calls `look(state, hushwatch)` in
/// each; returns the running sidecar.
pub fn through_each_relay_state(mut look: impl FnMut(&str, &Sidecar)) -> Sidecar {
    let limit = std::time::Duration::from_secs(60);
    let app = RefusableApp::start();
    let work = Workdir::new(&relay_config(&app));
    let hw = Sidecar::start(&work.config_path());
    send_relayed(hw.addr, "identity", "msg_ok_1", "user.created", "user_1");
    send_relayed(hw.addr, "billing", "msg_ok_2", "user.created", "user_2");
    wait_for(limit, "both relays delivered", || {
        ["identity", "billing"]
            .iter()
            .all(|s| {
                let r = relay_of(hw.addr, s);
                r["state"] == "ok" && !r["last_delivered_at"].is_null()
            })
            .then_some(())
    });
    look("ok", &hw);

    app.refuse(true);
    send_relayed(hw.addr, "identity", "msg_bad_1", "user.deleted", "user_3");
    send_relayed(hw.addr, "billing", "msg_bad_2", "user.deleted", "user_4");
    wait_for(limit, "identity failing, billing given up", || {
        let (i, b) = (relay_of(hw.addr, "identity"), relay_of(hw.addr, "billing"));
        (i["state"] == "failing" && b["state"] == "dead_letters").then_some(())
    });
    look("failing-and-dead-letters", &hw);
    // Keep the app alive as long as hushwatch may still try it.
    std::mem::forget(app);
    hw
}

#[test]
fn a_relay_that_pages_is_in_v1_status_and_status_exits_1() {
    let hw = through_each_relay_state(|state, hw| {
        let url = format!("http://{}", hw.addr);
        let (code, out, err) = status_cli(&url);
        let identity = relay_of(hw.addr, "identity");
        let billing = relay_of(hw.addr, "billing");
        match state {
            "ok" => {
                assert_eq!(code, 0, "{out}{err}");
                assert!(
                    out.starts_with("hushwatch OK: 0 of 2 stream(s) firing"),
                    "{out}"
                );
                assert!(
                    out.contains("\n  relay ok: nothing waiting, last delivered "),
                    "{out}"
                );
                assert_eq!(identity["problems"], serde_json::json!([]), "{identity}");
                assert!(identity["command"].is_null(), "{identity}");
            }
            _ => {
                assert_eq!(code, 1, "a relay that pages is not OK: {out}{err}");
                assert!(
                    out.starts_with("hushwatch NOT OK: 0 of 2 stream(s) firing, 2 relay(s) not OK"),
                    "{out}"
                );
                // /v1/status: the state, the counts and the command.
                assert_eq!(identity["state"], "failing", "{identity}");
                assert!(identity["pending"].as_u64() >= Some(1), "{identity}");
                assert!(identity["consecutive_failures"].as_u64() >= Some(1));
                assert!(
                    identity["last_error"]
                        .as_str()
                        .is_some_and(|e| e.contains("400")),
                    "{identity}"
                );
                assert_eq!(
                    identity["command"],
                    "hushwatch forward retry --stream identity"
                );
                assert_eq!(identity["critical_after_seconds"], 3600);
                assert_eq!(billing["state"], "dead_letters", "{billing}");
                assert!(billing["dead_letters"].as_u64() >= Some(1), "{billing}");
                assert_eq!(
                    billing["command"],
                    "hushwatch replay --stream billing --dead-letters"
                );
                // The terminal: the row's state and the line under it.
                assert!(out.contains("identity  OK, RELAY FAILING  "), "{out}");
                assert!(
                    out.contains("\n  relay failing: 1 pending, oldest "),
                    "{out}"
                );
                assert!(
                    out.contains("(`hushwatch forward retry --stream identity`)\n"),
                    "{out}"
                );
                assert!(
                    out.contains("(`hushwatch replay --stream billing --dead-letters`)\n"),
                    "{out}"
                );
                // Each command runs as printed against this server (only
                // `--url` added: where the admin API listens).
                for relay in [&identity, &billing] {
                    let command = relay["command"].as_str().unwrap();
                    let line = format!(
                        "{} --url {url}",
                        command.replacen("hushwatch", env!("CARGO_BIN_EXE_hushwatch"), 1)
                    );
                    let done = std::process::Command::new("bash")
                        .args(["-c", &line])
                        .env("HUSHWATCH_ADMIN_TOKEN", "relay-admin-1")
                        .output()
                        .unwrap();
                    assert!(
                        done.status.success(),
                        "{command}: {}{}",
                        String::from_utf8_lossy(&done.stdout),
                        String::from_utf8_lossy(&done.stderr)
                    );
                }
            }
        }
    });
    hw.stop();
}

// ------------------------------------- every command the runbooks print

/// The `hushwatch …` lines of the runbook's `text` blocks (they need a
/// live incident, so tests/it/readme.rs does not run them as a session;
/// the runbook keeps every command it suggests in such a block).
fn runbook_commands() -> Vec<String> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/src/operating/runbooks.md"
    ))
    .unwrap();
    let mut out = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = line == "```text";
            continue;
        }
        if in_block && line.starts_with("hushwatch ") {
            out.push(line.to_string());
        }
    }
    out
}

/// A port with a listener that hangs up on every connection: a command
/// that parsed its arguments tries it and names it in its error; one that
/// refused them prints its usage instead.
fn hanging_up() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    addr
}

/// Runs `command` exactly as printed, plus `--url` of a listener that
/// hangs up (the only addition: where the admin listener is); its exit
/// code and stderr.
fn run_as_printed(command: &str, url: &str) -> (i32, String) {
    let bin = env!("CARGO_BIN_EXE_hushwatch");
    let line = if command.contains("--help") {
        command.replacen("hushwatch", bin, 1)
    } else {
        format!("{} --url {url}", command.replacen("hushwatch", bin, 1))
    };
    let out = std::process::Command::new("bash")
        .args(["-c", &line])
        .env("HUSHWATCH_ADMIN_TOKEN", "runbook-admin-token")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Commands that only exist with `hushwatch forward` and `replay
/// --dead-letters` (the relay operator commands of issue #44).
fn needs_forward_commands(command: &str) -> bool {
    command.starts_with("hushwatch forward ") || command.contains("--dead-letters")
}

#[test]
fn every_command_the_runbooks_print_parses_as_printed() {
    let commands = runbook_commands();
    assert!(commands.len() >= 10, "{commands:?}");
    let url = format!("http://{}", hanging_up());
    for command in commands.iter().filter(|c| !needs_forward_commands(c)) {
        let (code, err) = run_as_printed(command, &url);
        assert!(
            code == 0 || (err.contains(&url) && !err.contains("Usage:")),
            "{command}: exit {code}, not parsed as printed: {err}"
        );
    }
}

/// The relay commands the runbooks, `/v1/status` (`relay.command`) and the
/// relay's silence page print (`hushwatch forward`, `replay --dead-letters`).
#[test]
fn every_relay_command_status_and_the_runbooks_print_parses_as_printed() {
    let url = format!("http://{}", hanging_up());
    let mut commands: Vec<String> = runbook_commands()
        .into_iter()
        .filter(|c| needs_forward_commands(c))
        .collect();
    commands.extend(
        [
            "hushwatch forward retry --stream identity",
            "hushwatch forward list --stream identity --state held",
            "hushwatch forward list --stream identity",
            "hushwatch replay --stream identity --dead-letters",
        ]
        .map(String::from),
    );
    for command in &commands {
        let (code, err) = run_as_printed(command, &url);
        assert!(
            err.contains(&url) && !err.contains("Usage:"),
            "{command}: exit {code}, not parsed as printed: {err}"
        );
    }
}

/// Issue #44: in relay mode with `clock = "delivered"` the silence is the
/// app's. Through the binary, with an app refusing every event: the firing
/// page says the app has not accepted events while hushwatch holds what the
/// provider sent, names the app's last answer, and links its runbook.
#[test]
fn a_relay_silence_page_says_the_app_is_silent_and_what_hushwatch_holds() {
    let app = RefusableApp::start();
    app.refuse(true);
    let text = relay_config(&app)
        .replacen(
            "silence_threshold = \"1h\"",
            "silence_threshold = \"3s\"",
            1,
        )
        .replacen(
            "give_up_after = \"1h\"",
            "give_up_after = \"1h\"\nclock = \"delivered\"",
            1,
        );
    let work = Workdir::new(&text);
    let hw = Sidecar::start(&work.config_path());
    send_relayed(
        hw.addr,
        "identity",
        "msg_silent_1",
        "user.deleted",
        "user_9",
    );
    wait_for(
        std::time::Duration::from_secs(60),
        "the app refused it",
        || (relay_of(hw.addr, "identity")["state"] == "failing").then_some(()),
    );
    let page = wait_for(
        std::time::Duration::from_secs(60),
        "a firing silence page",
        || {
            hw.stdout_lines()
                .iter()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|p| {
                    p["alert_kind"] == "silence"
                        && p["status"] == "firing"
                        && p["stream"] == "identity"
                })
        },
    );
    let summary = page["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("the app has not accepted identity events for 3s of business time, while hushwatch holds 1 received from the provider (1 pending)"),
        "{summary}"
    );
    assert!(summary.contains("; the relay's last error: "), "{summary}");
    assert!(summary.contains("HTTP 400"), "{summary}");
    assert!(!summary.contains("identity provider"), "{summary}");
    assert_eq!(
        page["runbook_url"],
        format!("{}#silence", hushwatch::config::DEFAULT_RUNBOOK_BASE_URL)
    );
    hw.stop();
    drop(app);
}

// ------------------------------- held and overdue relays (issue #44)

/// `identity` relays with a one-second `critical_after` (its refused
/// revocation is overdue at once); `billing` relays while `billing_forwards`
/// and has no `[forward]` otherwise (what it stored is then held). Ladders
/// are an hour long: nothing is retried while the test looks.
fn held_overdue_config(app: &RefusableApp, billing_forwards: bool) -> String {
    let forward = |name: &str, extra: &str| {
        format!(
            "[streams.{name}.forward]\nurl = \"http://{}/webhooks\"\nsecret = \"{APP_SECRET}\"\ntimeout = \"2s\"\nretry = [\"1h\"]\n{extra}",
            app.addr
        )
    };
    let stream = |name: &str| {
        format!(
            "\n[streams.{name}]\ncalendar = \"always\"\nsilence_threshold = \"1h\"\nnotify = [\"stdout\"]\n[streams.{name}.ingest]\nwebhook_secret = \"{RELAY_SECRET}\"\n"
        )
    };
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = \"data\"\nadmin_token = \"relay-admin-1\"\n{}{}{}{}\n[notifiers.stdout]\nkind = \"log\"\n",
        stream("identity"),
        forward("identity", "critical_after = \"1s\"\n"),
        stream("billing"),
        if billing_forwards {
            forward("billing", "")
        } else {
            String::new()
        },
    )
}

/// Drives the relay through the binary into the two states the failing
/// and dead-letter driver above does not reach: `identity` with a
/// revocation the app refused, undelivered past `critical_after`
/// (`overdue`), and `billing` holding the event it stored before its
/// `[forward]` was removed and the config reloaded (`held`). Calls
/// `look("overdue-and-held", hushwatch)`; returns the running sidecar.
pub fn through_held_and_overdue_relay_states(mut look: impl FnMut(&str, &Sidecar)) -> Sidecar {
    let limit = std::time::Duration::from_secs(60);
    let app = RefusableApp::start();
    app.refuse(true);
    let work = Workdir::new(&held_overdue_config(&app, true));
    let hw = Sidecar::start(&work.config_path());
    send_relayed(hw.addr, "identity", "msg_late_1", "user.deleted", "user_5");
    send_relayed(hw.addr, "billing", "msg_held_1", "user.created", "user_6");
    wait_for(limit, "both refused once", || {
        ["identity", "billing"]
            .iter()
            .all(|s| relay_of(hw.addr, s)["consecutive_failures"].as_u64() >= Some(1))
            .then_some(())
    });
    work.write_config(&held_overdue_config(&app, false));
    hw.signal("HUP");
    wait_for(limit, "identity overdue, billing held", || {
        let (i, b) = (relay_of(hw.addr, "identity"), relay_of(hw.addr, "billing"));
        (i["state"] == "overdue" && b["state"] == "held").then_some(())
    });
    look("overdue-and-held", &hw);
    std::mem::forget(app);
    hw
}

#[test]
fn a_held_or_overdue_relay_is_in_v1_status_and_status_exits_1() {
    let hw = through_held_and_overdue_relay_states(|_, hw| {
        let url = format!("http://{}", hw.addr);
        let (code, out, err) = status_cli(&url);
        assert_eq!(code, 1, "held and overdue relays are not OK: {out}{err}");
        assert!(
            out.starts_with("hushwatch NOT OK: 0 of 2 stream(s) firing, 2 relay(s) not OK"),
            "{out}"
        );
        let identity = relay_of(hw.addr, "identity");
        assert_eq!(identity["state"], "overdue", "{identity}");
        assert_eq!(
            identity["problems"],
            serde_json::json!(["overdue", "failing"]),
            "{identity}"
        );
        assert!(identity["oldest_revocation_at"].is_string(), "{identity}");
        assert_eq!(identity["critical_after_seconds"], 1);
        assert_eq!(
            identity["command"],
            "hushwatch forward retry --stream identity"
        );
        let billing = relay_of(hw.addr, "billing");
        assert_eq!(billing["state"], "held", "{billing}");
        assert_eq!(
            billing["problems"],
            serde_json::json!(["held"]),
            "{billing}"
        );
        assert_eq!(billing["held"], 1, "{billing}");
        assert_eq!(billing["pending"], 0, "{billing}");
        assert_eq!(
            billing["command"],
            "hushwatch forward list --stream billing --state held"
        );
        assert!(
            out.contains("identity  OK, REVOCATION UNDELIVERED TOO LONG  ")
                || out.contains("identity  OK, RELAY "),
            "{out}"
        );
        assert!(
            out.contains(
                "\n  revocation undelivered too long: 1 pending, oldest user.deleted user_5 since "
            ),
            "{out}"
        );
        assert!(out.contains(" undelivered for "), "{out}");
        assert!(
            out.contains("\n  relay holds events it cannot send: 1 held (hushwatch cannot send them) (`hushwatch forward list --stream billing --state held`)\n"),
            "{out}"
        );
        // Each command runs as printed (with `--url`: where the admin API
        // listens) and shows what it is about.
        for (relay, shows) in [(&identity, "due now"), (&billing, "msg_held_1")] {
            let command = relay["command"].as_str().unwrap();
            let (code, out, err) = cli(&[])
                .args(&command.split(' ').skip(1).collect::<Vec<_>>())
                .args(&["--url", &url])
                .env("HUSHWATCH_ADMIN_TOKEN", "relay-admin-1")
                .run();
            assert_eq!(code, 0, "{command}: {out}{err}");
            assert!(out.contains(shows), "{command}: {out}");
        }
    });
    hw.stop();
}
