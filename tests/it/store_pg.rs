//! `hushwatch serve` on PostgreSQL (`[store] url`), end to end with the
//! real binary: ingest acknowledged after commit, dedup across two
//! processes on one database, `audit verify`/`export` against the
//! database, `check` validating the URL, and the password never printed.

use crate::common;
use crate::common::pg;

use std::process::Command;

use common::{basic_config, post_events, Sidecar, Workdir, TOKEN};
use pg::PgDb;

fn pg_config(with: &str) -> String {
    format!(
        "{}\n[store]\nurl = \"${{HW_PG_URL}}\"\n{with}",
        basic_config("calendar = \"always\"\nsilence_threshold = \"1h\"")
    )
}

fn hushwatch(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    common::cli(args).envs(env).output()
}

#[test]
fn serve_on_postgres_dedups_across_two_processes_and_audit_verify_passes() {
    let Some(db) = PgDb::create("serve_on_postgres") else {
        return;
    };
    let work = Workdir::new(&pg_config(""));
    let env = [("HW_PG_URL", db.url.as_str())];
    let a = Sidecar::start_with_env(&work.config_path(), &env);
    let b = Sidecar::start_with_env(&work.config_path(), &env);
    let event = |id: &str| format!(r#"{{"type": "user.deleted", "id": "{id}"}}"#);
    let first = post_events(a.addr, "identity", TOKEN, &event("evt_1"));
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.json()["accepted"], 1);
    // The same delivery through the other process is a duplicate.
    let again = post_events(b.addr, "identity", TOKEN, &event("evt_1"));
    assert_eq!(
        (again.status, again.json()["duplicate"].clone()),
        (200, 1.into())
    );
    let second = post_events(b.addr, "identity", TOKEN, &event("evt_2"));
    assert_eq!(second.json()["accepted"], 1);
    assert_eq!(db.query("SELECT count(*) FROM audit_log"), ["2"]);
    assert_eq!(
        db.query("SELECT last_event_id FROM streams WHERE name = 'identity'"),
        ["evt_2"]
    );
    let logs = format!("{}\n{}", a.stderr_text(), b.stderr_text());
    assert!(a.stop().success() && b.stop().success());
    assert!(logs.contains("store: PostgreSQL"), "{logs}");
    assert!(!logs.contains(&db.password()), "password in logs: {logs}");

    let config = work.config_path();
    let config = config.to_str().unwrap();
    let verify = hushwatch(&["audit", "verify", "--config", config], &env);
    let out = String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success(),
        "{out} {}",
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(out.contains("audit log intact: 2 entries"), "{out}");
    let export = hushwatch(&["audit", "export", "--config", config], &env);
    let lines = String::from_utf8_lossy(&export.stdout);
    assert_eq!(lines.lines().count(), 2, "{lines}");
    assert!(lines.contains("evt_1") && lines.contains("evt_2"));

    // An edited entry is found on PostgreSQL as on SQLite.
    db.query("UPDATE audit_log SET event_type = 'user.created' WHERE seq = 1");
    let tampered = hushwatch(&["audit", "verify", "--config", config], &env);
    assert_eq!(tampered.status.code(), Some(1));
}

#[test]
fn check_validates_the_store_url_without_printing_the_password() {
    let work = Workdir::new(&pg_config(""));
    let config = work.config_path();
    let config = config.to_str().unwrap();
    let secret = "N0t-To-Be-Printed";
    let good = format!("postgres://hw:{secret}@db.example:5432/hw?sslmode=require");
    let ok = hushwatch(&["check", "--config", config], &[("HW_PG_URL", &good)]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&ok.stdout),
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(ok.status.success(), "{all}");
    assert!(!all.contains(secret), "{all}");
    let bad = format!("postgres://hw:{secret}@db.example:5432/hw?sslmode=verify-ca");
    let refused = hushwatch(&["check", "--config", config], &[("HW_PG_URL", &bad)]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("store.url: sslmode must be"), "{err}");
    assert!(!err.contains(secret), "{err}");
}

#[test]
fn while_the_database_is_unreachable_ingest_and_readyz_answer_503_then_recover() {
    let Some(db) = PgDb::create("database_outage") else {
        return;
    };
    let work = Workdir::new(&pg_config(""));
    let env = [("HW_PG_URL", db.url.as_str())];
    let s = Sidecar::start_with_env(&work.config_path(), &env);
    let event = |id: &str| format!(r#"{{"type": "user.deleted", "id": "{id}"}}"#);
    assert_eq!(
        post_events(s.addr, "identity", TOKEN, &event("before")).status,
        200
    );
    db.allow_connections(false);
    db.terminate_connections();
    let down = post_events(s.addr, "identity", TOKEN, &event("during"));
    assert_eq!(down.status, 503, "{}", down.body);
    common::wait_for(
        std::time::Duration::from_secs(30),
        "/readyz to answer 503",
        || (common::get(s.addr, "/readyz").status == 503).then_some(()),
    );
    db.allow_connections(true);
    // The sender's retry is accepted once the database is back: nothing was
    // stored from the failed attempt, so it is not a duplicate.
    let retried = common::wait_for(
        std::time::Duration::from_secs(30),
        "ingest to recover",
        || {
            let r = post_events(s.addr, "identity", TOKEN, &event("during"));
            (r.status == 200).then_some(r)
        },
    );
    assert_eq!(retried.json()["accepted"], 1, "{}", retried.body);
    common::wait_for(
        std::time::Duration::from_secs(30),
        "/readyz to answer 200",
        || (common::get(s.addr, "/readyz").status == 200).then_some(()),
    );
    assert_eq!(db.query("SELECT count(*) FROM audit_log"), ["2"]);
    assert!(s.stop().success());
}

/// A TCP relay the test controls: until `open`, it accepts and closes
/// every connection (PostgreSQL "unreachable"); after, it forwards to
/// `target`. Its listener stays bound for the whole test.
struct Relay {
    addr: std::net::SocketAddr,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    refused: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Relay {
    fn start(target: std::net::SocketAddr) -> Relay {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let open = std::sync::Arc::new(AtomicBool::new(false));
        let forwarding = std::sync::Arc::clone(&open);
        let refused = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = std::sync::Arc::clone(&refused);
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if !forwarding.load(Ordering::SeqCst) {
                    count.fetch_add(1, Ordering::SeqCst);
                    drop(client);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(target) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Relay {
            addr,
            open,
            refused,
        }
    }

    fn open(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn serve_started_while_postgres_is_unreachable_answers_unready_then_serves_once_it_is_back() {
    let Some(db) = PgDb::create("serve_waits_for_postgres") else {
        return;
    };
    let mut url = url::Url::parse(&db.url).unwrap();
    let target = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432))
        .parse()
        .unwrap();
    let relay = Relay::start(target);
    url.set_port(Some(relay.addr.port())).unwrap();
    let work = Workdir::new(&pg_config(""));
    let mut child = common::cli(&["serve"])
        .config(work.config_path())
        .env("HW_PG_URL", url.as_str())
        .command()
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = std::sync::Arc::clone(&lines);
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().unwrap().push(line);
        }
    });
    let addr_after = |marker: &str| {
        let marker = marker.to_owned();
        let lines = std::sync::Arc::clone(&lines);
        move || {
            lines.lock().unwrap().iter().find_map(|l| {
                l.split(marker.as_str())
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
            })
        }
    };
    let limit = std::time::Duration::from_secs(30);
    let addr = common::wait_for(
        limit,
        "the unreachable warning",
        addr_after("answering on "),
    );
    assert_eq!(common::get(addr, "/healthz").status, 200);
    assert_eq!(common::get(addr, "/readyz").status, 503);
    let event = r#"{"type": "user.deleted", "id": "evt_waiting"}"#;
    assert_eq!(post_events(addr, "identity", TOKEN, event).status, 503);
    // Still waiting after a few retries (said once, checked below).
    common::wait_for(limit, "three refused attempts", || {
        (relay.refused.load(std::sync::atomic::Ordering::SeqCst) >= 3).then_some(())
    });
    assert!(child.try_wait().unwrap().is_none(), "serve exited");
    assert_eq!(common::get(addr, "/readyz").status, 503);

    relay.open();
    let ready = common::wait_for(
        limit,
        "serve to start",
        addr_after("hushwatch listening on "),
    );
    assert_eq!(ready, addr);
    common::wait_for(limit, "/readyz to answer 200", || {
        (common::get(addr, "/readyz").status == 200).then_some(())
    });
    let stored = post_events(addr, "identity", TOKEN, event);
    assert_eq!(stored.status, 200, "{}", stored.body);
    assert_eq!(stored.json()["accepted"], 1);
    assert_eq!(db.query("SELECT count(*) FROM audit_log"), ["1"]);

    let text = lines.lock().unwrap().join("\n");
    assert_eq!(text.matches("PostgreSQL unreachable").count(), 1, "{text}");
    assert!(text.contains("PostgreSQL reachable; starting"), "{text}");
    assert!(!text.contains(&db.password()), "password in logs: {text}");
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn serve_exits_2_naming_store_url_on_a_refused_login_or_a_missing_database() {
    let Some(db) = PgDb::create("serve_permanent_store_errors") else {
        return;
    };
    let work = Workdir::new(&pg_config(""));
    let mut wrong_password = url::Url::parse(&db.url).unwrap();
    let secret = "not-the-password-4f1a";
    wrong_password.set_password(Some(secret)).unwrap();
    let mut missing_db = url::Url::parse(&db.url).unwrap();
    missing_db.set_path("hw_no_such_database");
    for (case, url) in [
        ("wrong password", &wrong_password),
        ("missing database", &missing_db),
    ] {
        let out = hushwatch(
            &["serve", "--config", work.config_path().to_str().unwrap()],
            &[("HW_PG_URL", url.as_str())],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{case}: {err}");
        assert!(err.contains("hushwatch: store.url: "), "{case}: {err}");
        assert!(!err.contains(secret), "{case}: {err}");
        assert!(!err.contains(&db.password()), "{case}: {err}");
    }
}
