//! The audit log end to end: events go in over HTTP, the real binary
//! verifies and exports, and tampering with the SQLite file is caught.

use crate::common;

use common::*;
use std::path::{Path, PathBuf};

const KEYED: &str = "[audit]\ncheckpoint_key = \"audit-key-for-tests\"\n";

fn hushwatch(args: &[&str], config: &Path) -> (i32, String, String) {
    cli(args).config(config).run()
}

fn config(extra: &str) -> String {
    format!(
        "{}{extra}",
        basic_config("calendar = \"always\"\nsilence_threshold = \"1h\"")
    )
}

/// Sends `batches` app reports of 100 events each, plus one signed webhook
/// per batch. Returns how many events were accepted.
fn send(addr: std::net::SocketAddr, tag: &str, batches: usize) -> usize {
    for b in 0..batches {
        let items: Vec<String> = (0..100)
            .map(|i| {
                let t = if i % 10 == 0 {
                    "session.revoked"
                } else {
                    "user.updated"
                };
                format!(r#"{{"type":"{t}","id":"{tag}-{b}-{i}"}}"#)
            })
            .collect();
        let reply = post_events(addr, "identity", TOKEN, &format!("[{}]", items.join(",")));
        assert_eq!(reply.status, 200, "{}", reply.body);
        let body = format!(
            r#"{{"type":"user.deleted","timestamp":1800000000000,"data":{{"id":"user_{tag}{b}","object":"user"}}}}"#
        );
        assert_eq!(
            post_webhook(
                addr,
                "identity",
                SECRET,
                &format!("msg_{tag}_{b}"),
                now_unix(),
                &body
            )
            .status,
            200
        );
    }
    batches * 101
}

fn db(work: &Workdir) -> PathBuf {
    work.path().join("data/hushwatch.sqlite3")
}

/// A log of 2,020 entries written across a kill -9 and a clean restart.
fn populated() -> Workdir {
    let work = Workdir::new(&config(KEYED));
    let s = Sidecar::start(&work.config_path());
    send(s.addr, "a", 10);
    // Rejected requests are counted, never chained.
    assert_eq!(
        post_webhook(
            s.addr,
            "identity",
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            "msg_x",
            now_unix(),
            "{}"
        )
        .status,
        401
    );
    s.kill9();
    let s = Sidecar::start(&work.config_path());
    send(s.addr, "b", 10);
    assert!(s.stop().success(), "clean stop writes a final checkpoint");
    work
}

#[test]
fn chain_verifies_after_thousands_of_events_and_restarts() {
    let work = populated();
    let (code, out, err) = hushwatch(&["audit", "verify"], &work.config_path());
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("audit log intact: 2020 entries"), "{out}");
    assert!(out.contains("last checkpoint: seq 2020"), "{out}");
    assert!(out.contains("HMAC-signed"), "{out}");
}

fn tamper(work: &Workdir, sql: &str) -> (i32, String) {
    let copy = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(copy.path().join("data")).unwrap();
    std::fs::copy(db(work), copy.path().join("data/hushwatch.sqlite3")).unwrap();
    std::fs::copy(work.config_path(), copy.path().join("hushwatch.toml")).unwrap();
    let conn = rusqlite::Connection::open(copy.path().join("data/hushwatch.sqlite3")).unwrap();
    conn.execute_batch(sql).unwrap();
    drop(conn);
    let (code, out, err) = hushwatch(&["audit", "verify"], &copy.path().join("hushwatch.toml"));
    (code, format!("{out}{err}"))
}

/// SQL for a hex column with its first byte changed. Always a change:
/// writing a fixed `00` was a no-op whenever the hash already began with
/// `00` (1 run in 256), and the tamper went unnoticed because it was none.
fn flip_first_byte(column: &str) -> String {
    format!(
        "(CASE WHEN substr({column}, 1, 2) = 'ff' THEN '00' ELSE 'ff' END) || substr({column}, 3)"
    )
}

#[test]
fn any_altered_byte_removed_entry_or_truncated_tail_is_named() {
    let work = populated();
    let (body_sha256, prev_hash) = (flip_first_byte("body_sha256"), flip_first_byte("prev_hash"));
    let columns = [
        ("received_at", "received_at + 1"),
        ("source", "'other'"),
        ("channel", "'webhook'"),
        ("delivery_id", "delivery_id || 'x'"),
        ("event_type", "'user.created'"),
        ("event_time", "1"),
        ("subject_ids", "'{\"user_id\":\"someone_else\"}'"),
        ("body_sha256", body_sha256.as_str()),
        ("signature_verified", "1 - signature_verified"),
        ("prev_hash", prev_hash.as_str()),
    ];
    for (column, value) in columns {
        let (code, out) = tamper(
            &work,
            &format!("UPDATE audit_log SET {column} = {value} WHERE seq = 777"),
        );
        assert_eq!(code, 1, "{column}: {out}");
        assert!(out.contains("broken at seq 777"), "{column}: {out}");
    }
    // Rewriting a stored hash to match altered content breaks the next link.
    let (code, out) = tamper(
        &work,
        &format!(
            "UPDATE audit_log SET hash = {} WHERE seq = 777",
            flip_first_byte("hash")
        ),
    );
    assert_eq!(code, 1);
    assert!(
        out.contains("broken at seq 777") || out.contains("broken at seq 778"),
        "{out}"
    );

    let (code, out) = tamper(&work, "DELETE FROM audit_log WHERE seq = 1500");
    assert_eq!(code, 1);
    assert!(
        out.contains("broken at seq 1500") && out.contains("missing"),
        "{out}"
    );

    let (code, out) = tamper(&work, "DELETE FROM audit_log WHERE seq > 2000");
    assert_eq!(code, 1);
    assert!(
        out.contains("broken at seq 2001") && out.contains("truncated"),
        "{out}"
    );

    let (code, out) = tamper(&work, "UPDATE audit_checkpoints SET seq = seq - 1");
    assert_eq!(code, 1);
    assert!(
        out.contains("checkpoint signature does not verify"),
        "{out}"
    );
}

#[test]
fn wrong_checkpoint_key_fails_verification() {
    let work = populated();
    let text = std::fs::read_to_string(work.config_path())
        .unwrap()
        .replace("audit-key-for-tests", "another-key");
    work.write_config(&text);
    let (code, out, err) = hushwatch(&["audit", "verify"], &work.config_path());
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("checkpoint signature does not verify"),
        "{err}"
    );
}

#[test]
fn export_round_trips_and_filters() {
    let work = populated();
    let (code, out, err) = hushwatch(&["audit", "export"], &work.config_path());
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2020);
    for pair in lines.windows(2) {
        assert_eq!(
            pair[1]["prev_hash"], pair[0]["hash"],
            "each line links to the previous one"
        );
        assert_eq!(
            pair[1]["seq"].as_i64().unwrap(),
            pair[0]["seq"].as_i64().unwrap() + 1
        );
    }
    let webhook = lines
        .iter()
        .find(|l| l["delivery_id"] == "msg_a_3")
        .unwrap();
    assert_eq!(webhook["event_type"], "user.deleted");
    assert_eq!(webhook["signature_verified"], true);
    assert_eq!(webhook["channel"], "webhook");
    assert_eq!(webhook["subject_ids"]["user_id"], "user_a3");
    assert_eq!(webhook["event_time"], "2027-01-15T08:00:00.000Z");
    assert_eq!(webhook["access"], "revoke");
    let report = lines.iter().find(|l| l["delivery_id"] == "b-2-7").unwrap();
    assert_eq!(
        (
            report["channel"].as_str(),
            report["signature_verified"].as_bool()
        ),
        (Some("report"), Some(false))
    );

    // The revocations view: user.deleted webhooks and session.revoked reports.
    let (_, revokes, _) = hushwatch(
        &["audit", "export", "--kind", "revoke"],
        &work.config_path(),
    );
    let revokes: Vec<serde_json::Value> = revokes
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(revokes.len(), 20 + 200);
    assert!(revokes.iter().all(|l| l["access"] == "revoke"));

    let (code, csv, _) = hushwatch(
        &["audit", "export", "--format", "csv", "--stream", "identity"],
        &work.config_path(),
    );
    assert_eq!(code, 0);
    let mut rows = csv.lines();
    assert!(rows.next().unwrap().starts_with("seq,received_at,stream"));
    assert_eq!(rows.count(), 2020);

    let (code, none, _) = hushwatch(
        &["audit", "export", "--until", "2000-01-01T00:00:00Z"],
        &work.config_path(),
    );
    assert_eq!((code, none.lines().count()), (0, 0));
    let (code, _, err) = hushwatch(&["audit", "export", "--format", "xml"], &work.config_path());
    assert_eq!(code, 2);
    assert!(err.contains("--format"), "{err}");
}

#[test]
fn retention_prunes_whole_prefixes_and_verify_stays_green() {
    let work = Workdir::new(&config(
        "[audit]\nretain = \"1d\"\ncheckpoint_key = \"k\"\n",
    ));
    let t0 = utc("2026-12-01T00:00:00Z");
    let s = InProcess::start(&work, t0);
    let body = |i: usize| format!(r#"{{"type":"user.updated","id":"old-{i}"}}"#);
    for i in 0..30 {
        assert_eq!(post_events(s.addr, "identity", TOKEN, &body(i)).status, 200);
    }
    s.stop();
    // Two days later the old entries are past retention; startup prunes.
    let s = InProcess::start(&work, t0 + chrono::TimeDelta::days(2));
    for i in 0..5 {
        assert_eq!(
            post_events(
                s.addr,
                "identity",
                TOKEN,
                &format!(r#"{{"type":"user.updated","id":"new-{i}"}}"#)
            )
            .status,
            200
        );
    }
    s.stop();
    let (code, out, err) = hushwatch(&["audit", "verify"], &work.config_path());
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("audit log intact: 5 entries"), "{out}");
    assert!(out.contains("pruned before seq 31"), "{out}");
}
