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
