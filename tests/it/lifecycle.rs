//! The real binary as a process: restarts (clean and kill -9) keep every
//! clock, a never-wired stream pages on stdout, SIGHUP reloads (and rejects
//! a bad config), SIGTERM exits cleanly, and a full disk answers 503.

use crate::common;

use common::*;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(20);

#[test]
fn restart_keeps_clocks_even_after_kill_9() {
    let work = Workdir::new(&basic_config(
        "calendar = \"always\"\nsilence_threshold = \"1h\"",
    ));
    let first = Sidecar::start(&work.config_path());
    let watching_since = stream_status(first.addr, "identity")["watching_since"].clone();
    let reply = post_webhook(
        first.addr,
        "identity",
        SECRET,
        "msg_a",
        now_unix(),
        r#"{"type":"user.deleted"}"#,
    );
    assert_eq!(reply.status, 200);
    let before = stream_status(first.addr, "identity");
    // SIGKILL right after the 2xx: the answer promised durability.
    first.kill9();

    let second = Sidecar::start(&work.config_path());
    let after = stream_status(second.addr, "identity");
    assert_eq!(after["last_event_at"], before["last_event_at"]);
    assert_eq!(after["last_event_type"], "user.deleted");
    assert_eq!(
        after["watching_since"], watching_since,
        "clock start must survive"
    );
    // The delivery id survived too: a redelivery is a duplicate.
    let again = post_webhook(
        second.addr,
        "identity",
        SECRET,
        "msg_a",
        now_unix(),
        r#"{"type":"user.deleted"}"#,
    );
    assert_eq!(again.json()["status"], "duplicate");
    assert!(second.stop().success());

    let third = Sidecar::start(&work.config_path());
    assert_eq!(
        stream_status(third.addr, "identity")["last_event_at"],
        before["last_event_at"]
    );
}

#[test]
fn never_wired_stream_pages_on_stdout_and_resolves() {
    let work = Workdir::new(&basic_config(
        "calendar = \"always\"\nsilence_threshold = \"2s\"",
    ));
    let s = Sidecar::start(&work.config_path());
    let firing = wait_for(LONG, "a firing page", || {
        s.stdout_lines()
            .into_iter()
            .find(|l| l.contains("\"status\":\"firing\""))
    });
    let page: serde_json::Value = serde_json::from_str(&firing).unwrap();
    assert_eq!(page["stream"], "identity");
    assert_eq!(
        page["summary"],
        "no identity events for 2s of business time"
    );
    assert_eq!(stream_status(s.addr, "identity")["state"], "firing");
    assert_eq!(
        post_events(s.addr, "identity", TOKEN, r#"{"type":"user.created"}"#).status,
        200
    );
    wait_for(LONG, "a resolved page", || {
        s.stdout_lines()
            .into_iter()
            .find(|l| l.contains("\"status\":\"resolved\""))
    });
}

#[test]
fn sighup_reloads_a_valid_config_and_keeps_the_old_one_on_errors() {
    let work = Workdir::new(&basic_config(
        "calendar = \"always\"\nsilence_threshold = \"1h\"",
    ));
    let s = Sidecar::start(&work.config_path());
    assert_eq!(
        post_events(s.addr, "identity", TOKEN, r#"{"type":"user.created"}"#).status,
        200
    );
    let last = stream_status(s.addr, "identity")["last_event_at"].clone();

    work.write_config(&basic_config(
        "calendar = \"tokyo\"\nsilence_threshold = \"3h\"",
    ));
    s.signal("HUP");
    wait_for(LONG, "the new threshold", || {
        (stream_status(s.addr, "identity")["threshold_seconds"] == 10_800).then_some(())
    });
    assert_eq!(
        stream_status(s.addr, "identity")["last_event_at"],
        last,
        "clock kept across reload"
    );
    assert_eq!(
        metric(s.addr, "hushwatch_config_last_reload_successful"),
        1.0
    );

    work.write_config(&basic_config(
        "calendar = \"tokyo\"\nsilence_threshold = \"three hours\"",
    ));
    s.signal("HUP");
    wait_for(LONG, "the reload failure metric", || {
        (metric(s.addr, "hushwatch_config_last_reload_successful") == 0.0).then_some(())
    });
    assert_eq!(
        stream_status(s.addr, "identity")["threshold_seconds"],
        10_800
    );
    // The metric can drop before the log line has crossed the pipe.
    wait_for(LONG, "the log to name the key", || {
        s.stderr_text()
            .contains("streams.identity.silence_threshold")
            .then_some(())
    });
    assert!(s.stop().success(), "SIGTERM exits 0");
}

#[test]
fn bad_config_exits_2_with_key_paths() {
    let work = Workdir::new(&basic_config(
        "calendar = \"mars\"\nsilence_threshold = \"6 hours\"",
    ));
    let out = cli(&["serve"]).config(work.config_path()).output();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            r#"streams.identity.silence_threshold: "6 hours" is not a duration (try "6h")"#
        ),
        "{err}"
    );
    assert!(
        err.contains(r#"streams.identity.calendar: no calendar named "mars""#),
        "{err}"
    );
}

/// A data directory on a tiny tmpfs: filling it must turn ingest into 503
/// (never a silent 2xx), fail /readyz, count storage errors, and recover by
/// itself once space returns. Needs root (CI runs as root).
#[test]
fn full_disk_answers_503_and_recovers() {
    if skip_unless_root("full_disk_answers_503_and_recovers", "mounts a tmpfs") {
        return;
    }
    let work = Workdir::new(&basic_config(
        "calendar = \"always\"\nsilence_threshold = \"1h\"",
    ));
    let data = work.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mount = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(&data)
        .status()
        .unwrap();
    assert!(
        mount.success(),
        "mounting a tmpfs needs root; run the suite as root (as CI does)"
    );
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _guard = Unmount(data.clone());
    let s = Sidecar::start(&work.config_path());
    let filler = "x".repeat(150);
    let mut accepted = 0;
    let failure = (0..20_000).find_map(|i| {
        let body = format!(r#"[{{"type":"user.updated","id":"{i}-a-{filler}"}},{{"type":"user.updated","id":"{i}-b-{filler}"}}]"#);
        let reply = post_events(s.addr, "identity", TOKEN, &body);
        if reply.status == 200 {
            accepted += 1;
            None
        } else {
            Some(reply)
        }
    });
    let failure = failure.expect("the disk never filled up");
    assert_eq!(failure.status, 503, "{}", failure.body);
    assert!(accepted > 10, "some writes fit before the disk filled");
    assert_eq!(get(s.addr, "/readyz").status, 503);
    assert!(metric(s.addr, "hushwatch_storage_errors_total") >= 1.0);
    assert!(
        metric(
            s.addr,
            r#"hushwatch_events_total{outcome="error",stream="identity"}"#
        ) >= 1.0
    );
    assert_eq!(stream_status(s.addr, "identity")["state"], "ok");

    let grow = std::process::Command::new("mount")
        .args(["-o", "remount,size=20m"])
        .arg(&data)
        .status()
        .unwrap();
    assert!(grow.success());
    let reply = wait_for(LONG, "ingest to recover", || {
        let r = post_events(
            s.addr,
            "identity",
            TOKEN,
            r#"{"type":"user.updated","id":"after"}"#,
        );
        (r.status == 200).then_some(r)
    });
    assert_eq!(reply.json()["accepted"], 1);
    // /readyz reuses its answer for up to 1 s, so it may lag ingest by that.
    wait_for(LONG, "/readyz to recover", || {
        (get(s.addr, "/readyz").status == 200).then_some(())
    });
    drop(s);
}

/// The state files turning unwritable under a running hushwatch (here:
/// `chattr +i`, which even root cannot write through): ingest answers 503
/// and moves no clock, /readyz fails, the failure is counted and logged, and
/// it recovers by itself once the files are writable again.
#[test]
fn unwritable_state_answers_503_and_recovers() {
    if skip_unless_root(
        "unwritable_state_answers_503_and_recovers",
        "sets chattr +i",
    ) {
        return;
    }
    let work = Workdir::new(&basic_config(
        "calendar = \"always\"\nsilence_threshold = \"1h\"",
    ));
    let s = Sidecar::start(&work.config_path());
    assert_eq!(
        post_events(
            s.addr,
            "identity",
            TOKEN,
            r#"{"type":"user.created","id":"before"}"#
        )
        .status,
        200
    );
    let before = stream_status(s.addr, "identity")["last_event_at"].clone();
    let data = work.path().join("data");
    let targets = [
        data.join("hushwatch.sqlite3"),
        data.join("hushwatch.sqlite3-wal"),
        data.clone(),
    ];
    let chattr = |flag: &str| {
        targets.iter().all(|t| {
            std::process::Command::new("chattr")
                .arg(flag)
                .arg(t)
                .status()
                .is_ok_and(|s| s.success())
        })
    };
    struct Writable(Vec<std::path::PathBuf>);
    impl Drop for Writable {
        fn drop(&mut self) {
            for t in &self.0 {
                let _ = std::process::Command::new("chattr")
                    .arg("-i")
                    .arg(t)
                    .status();
            }
        }
    }
    let _guard = Writable(targets.to_vec());
    assert!(
        chattr("+i"),
        "chattr +i needs root and an ext4-like /tmp; run the suite as root (as CI does)"
    );

    let reply = post_events(
        s.addr,
        "identity",
        TOKEN,
        r#"{"type":"user.deleted","id":"during"}"#,
    );
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert_eq!(get(s.addr, "/readyz").status, 503);
    assert!(metric(s.addr, "hushwatch_storage_errors_total") >= 1.0);
    assert_eq!(
        stream_status(s.addr, "identity")["last_event_at"],
        before,
        "nothing moved the clock"
    );
    wait_for(LONG, "the failure to be logged loudly", || {
        s.stderr_text()
            .contains("cannot write its state")
            .then_some(())
    });

    assert!(chattr("-i"));
    wait_for(LONG, "ingest to recover", || {
        (post_events(
            s.addr,
            "identity",
            TOKEN,
            r#"{"type":"user.deleted","id":"during"}"#,
        )
        .status
            == 200)
            .then_some(())
    });
    // /readyz reuses its answer for up to 1 s, so it may lag ingest by that.
    wait_for(LONG, "/readyz to recover", || {
        (get(s.addr, "/readyz").status == 200).then_some(())
    });
    assert_eq!(
        stream_status(s.addr, "identity")["last_event_type"],
        "user.deleted"
    );
}
