//! `hushwatch migrate-store`: a real SQLite state (written by a real
//! `hushwatch serve`: events, a firing and a resolved page, the audit chain
//! with its shutdown checkpoint) copied into a real, empty PostgreSQL
//! database; `audit verify` gives the same verdict on both, no clock
//! resets, dedup and the chain continue on PostgreSQL, and a non-empty
//! target is refused.

use crate::common;
use crate::common::pg;

use std::process::Output;
use std::time::Duration;

use common::{basic_config, post_events, sqlite_rows, wait_for, Sidecar, Workdir, TOKEN};
use pg::PgDb;

const LONG: Duration = Duration::from_secs(30);

fn hushwatch(args: &[&str], env: &[(&str, &str)]) -> Output {
    common::cli(args).envs(env).output()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const STREAMS: &str = "SELECT name || '|' || watch_started_at || '|' || coalesce(last_arrival_at, -1)
     || '|' || coalesce(last_event_id, '') || '|' || alert_state || '|' || coalesce(firing_since, -1)
     FROM streams ORDER BY name";
const OUTBOX: &str = "SELECT id || '|' || alert_id || '|' || alert_state || '|' || status
     || '|' || created_at FROM outbox ORDER BY id";

#[test]
fn a_sqlite_state_is_copied_into_an_empty_postgres_and_keeps_working() {
    let Some(db) = PgDb::create("migrate_store") else {
        return;
    };
    let sqlite_config = basic_config("calendar = \"always\"\nsilence_threshold = \"2s\"");
    let work = Workdir::new(&sqlite_config);
    let config = work.config_path();
    let config = config.to_str().unwrap();

    // Real state: fire (never heard from), resolve with events, stop
    // (writes the shutdown checkpoint).
    let s = Sidecar::start(&work.config_path());
    wait_for(LONG, "a firing page", || {
        s.stdout_lines()
            .into_iter()
            .find(|l| l.contains("\"status\":\"firing\""))
    });
    for id in ["evt_1", "evt_2"] {
        let body = format!(r#"{{"type": "user.deleted", "id": "{id}"}}"#);
        assert_eq!(post_events(s.addr, "identity", TOKEN, &body).status, 200);
    }
    wait_for(LONG, "a resolved page", || {
        s.stdout_lines()
            .into_iter()
            .find(|l| l.contains("\"status\":\"resolved\""))
    });
    assert!(s.stop().success());
    let file = work.path().join("data/hushwatch.sqlite3");
    let sqlite_verify = hushwatch(&["audit", "verify", "--config", config], &[]);
    assert!(sqlite_verify.status.success(), "{:?}", text(&sqlite_verify));
    let streams_before = sqlite_rows(&file, STREAMS);
    let outbox_before = sqlite_rows(&file, OUTBOX);
    // A firing and a resolved page (and another firing if the machine was
    // slow enough for 2 s of silence to pass before the stop).
    assert!(outbox_before.len() >= 2, "{outbox_before:?}");

    let env = [("HW_PG_URL", db.url.as_str())];
    let copy = hushwatch(
        &["migrate-store", "--config", config, "--to", "${HW_PG_URL}"],
        &env,
    );
    let (out, err) = text(&copy);
    assert!(copy.status.success(), "{out} {err}");
    assert!(out.contains("audit_log: 2 rows"), "{out}");
    assert!(out.contains("outbox: "), "{out}");
    assert!(!format!("{out}{err}").contains(&db.password()));

    // Same rows, same clocks, same page identity.
    assert_eq!(db.query(STREAMS), streams_before);
    assert_eq!(db.query(OUTBOX), outbox_before);
    assert_eq!(
        db.query("SELECT value FROM meta WHERE key = 'salt'"),
        sqlite_rows(&file, "SELECT value FROM meta WHERE key = 'salt'")
    );

    // The same verdict from the copy, checkpoint included.
    let pg_config = format!("{sqlite_config}\n[store]\nurl = \"${{HW_PG_URL}}\"\n");
    work.write_config(&pg_config);
    let pg_verify = hushwatch(&["audit", "verify", "--config", config], &env);
    assert!(pg_verify.status.success(), "{:?}", text(&pg_verify));
    assert_eq!(text(&pg_verify).0, text(&sqlite_verify).0);
    assert!(text(&pg_verify).0.contains("audit log intact: 2 entries"));

    // Serving from the copy: a redelivery is still a duplicate, the chain
    // continues, and the stream's clock is where it was.
    let s = Sidecar::start_with_env(&work.config_path(), &env);
    let again = post_events(
        s.addr,
        "identity",
        TOKEN,
        r#"{"type": "user.deleted", "id": "evt_1"}"#,
    );
    assert_eq!(again.json()["duplicate"], 1, "{}", again.body);
    let next = post_events(
        s.addr,
        "identity",
        TOKEN,
        r#"{"type": "user.deleted", "id": "evt_3"}"#,
    );
    assert_eq!(next.json()["accepted"], 1);
    assert!(s.stop().success());
    let after = hushwatch(&["audit", "verify", "--config", config], &env);
    assert!(after.status.success(), "{:?}", text(&after));
    assert!(text(&after).0.contains("audit log intact: 3 entries"));
    // The copied pages are untouched; any page queued since (the 2 s
    // threshold may pass again while this test runs: counted from the
    // copied arrival, so no clock restarted) got a new id, never an old
    // one, so never an old page key.
    let outbox_after = db.query(OUTBOX);
    assert_eq!(outbox_after[..outbox_before.len()], outbox_before[..]);
    let watch = "SELECT watch_started_at::TEXT FROM streams WHERE name = 'identity'";
    assert_eq!(
        db.query(watch),
        sqlite_rows(
            &file,
            "SELECT CAST(watch_started_at AS TEXT) FROM streams WHERE name = 'identity'"
        )
    );

    // A second copy into the now non-empty database is refused.
    work.write_config(&sqlite_config);
    let refused = hushwatch(
        &["migrate-store", "--config", config, "--to", "${HW_PG_URL}"],
        &env,
    );
    let (_, err) = text(&refused);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains("not empty"), "{err}");
    assert!(!err.contains(&db.password()));
}

#[test]
fn a_bad_target_url_is_a_usage_error_naming_the_flag() {
    let work = Workdir::new(&basic_config(
        "calendar = \"always\"\nsilence_threshold = \"1h\"",
    ));
    let config = work.config_path();
    let out = hushwatch(
        &[
            "migrate-store",
            "--config",
            config.to_str().unwrap(),
            "--to",
            "postgres://u:S3cr3tX@h/db?sslmode=verify-ca",
        ],
        &[],
    );
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--to: sslmode must be"), "{err}");
    assert!(!err.contains("S3cr3tX"));
}
