//! Issue #45, "everywhere a person looks": a cross-check finding through
//! the real binary and a running sidecar, against a local Clerk Backend
//! API answering in the shapes of Clerk's OpenAPI specification
//! (clerk/openapi-specs, bapi/2025-11-10.yml: `GET /users` a bare array,
//! `GET /organization_memberships` `{"data", "total_count"}`):
//! `hushwatch crosscheck --dry-run` prints it and stores nothing,
//! `/v1/status` carries the stream's `crosscheck` block, `hushwatch status`
//! prints its line and exits 1, the command it prints runs as printed, and
//! `hushwatch audit subject` lists the finding beside the webhooks.

use crate::common::{get, InProcess, Workdir};
use crate::crosscheck::{memberships, users};
use crate::support::{config, run_cli, Receiver};

const KEY: &str = "sk_test_it_crosscheck_view_never_printed";

/// A Clerk-checked `identity` stream after three polls through the
/// binary: the baseline, the one that saw user_2 leave org_9 with no
/// webhook, and the one that decided it missed. The API then answers the
/// same listing `more` times, for polls still to come.
pub fn a_missed_revocation(more: usize) -> (Receiver, Workdir) {
    let everyone = ["user_1", "user_2"];
    let mut script = vec![
        users(&everyone),
        memberships(&[("org_9", "user_1"), ("org_9", "user_2")]),
    ];
    for _ in 0..2 + more {
        script.push(users(&everyone));
        script.push(memberships(&[("org_9", "user_1")]));
    }
    let api = Receiver::start(script);
    let extra = format!(
        "[streams.identity.crosscheck]\nprovider = \"clerk\"\napi_url = \"{}\"\napi_key = \"{KEY}\"\ngrace = \"0s\"\n",
        api.url("/v1")
    );
    let work = Workdir::new(&config(&[], &extra, ""));
    for expected in [0, 0, 1] {
        let (code, out, err) =
            run_cli(&["crosscheck", "--stream", "identity"], &work.config_path());
        assert_eq!(code, expected, "{out}{err}");
    }
    (api, work)
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn a_dry_run_prints_the_finding_and_stores_nothing_then_status_and_audit_show_it() {
    let everyone = ["user_1", "user_2"];
    let both = [("org_9", "user_1"), ("org_9", "user_2")];
    let one = [("org_9", "user_1")];
    // Two requests per poll (users, then memberships): a baseline, the
    // poll that sees user_2 gone, two dry runs, the poll that decides;
    // then the same listing for any poll the sidecar makes itself.
    let mut script = vec![users(&everyone), memberships(&both)];
    for _ in 0..12 {
        script.push(users(&everyone));
        script.push(memberships(&one));
    }
    let api = Receiver::start(script);
    let extra = format!(
        "[streams.identity.crosscheck]\nprovider = \"clerk\"\napi_url = \"{}\"\napi_key = \"{KEY}\"\ngrace = \"0s\"\n",
        api.url("/v1")
    );
    let work = Workdir::new(&config(&[], &extra, ""));
    let poll = |more: &[&str]| {
        let mut args = vec!["crosscheck", "--stream", "identity", "--format", "json"];
        args.extend_from_slice(more);
        run_cli(&args, &work.config_path())
    };

    let (code, out, err) = poll(&[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(json(&out)["baseline"], true);
    let (code, out, err) = poll(&[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(json(&out)["pending"], 1, "user_2's removal waits a poll");

    // Two dry runs: both decide the removal as missed, both call it new,
    // exit 1 (something found) and store nothing.
    for _ in 0..2 {
        let (code, out, err) = poll(&["--dry-run"]);
        assert_eq!(code, 1, "{out}{err}");
        let dry = json(&out);
        assert_eq!(
            (dry["dry_run"].clone(), dry["committed"].clone()),
            (true.into(), false.into())
        );
        let f = &dry["findings"][0];
        assert_eq!(
            (
                f["subject"].as_str(),
                f["organization"].as_str(),
                f["new"].as_bool()
            ),
            (Some("user_2"), Some("org_9"), Some(true)),
            "{dry}"
        );
    }
    let (code, out, err) = run_cli(
        &["crosscheck", "--stream", "identity", "--dry-run"],
        &work.config_path(),
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.starts_with("dry run: nothing was stored and nothing was paged\n"),
        "{out}"
    );
    assert!(out.contains("organizationMembership.deleted"), "{out}");

    // The real poll still finds it new: the dry runs recorded nothing.
    let (code, out, err) = poll(&[]);
    assert_eq!(code, 1, "{out}{err}");
    let real = json(&out);
    assert_eq!(real["findings"][0]["new"], true, "{real}");
    assert_eq!(real["committed"], true, "{real}");

    // `hushwatch audit subject` lists the finding after the webhooks.
    let (code, out, err) = run_cli(
        &["audit", "subject", "user_2", "--format", "jsonl"],
        &work.config_path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    let line = out
        .lines()
        .map(json)
        .find(|l| l["channel"] == "crosscheck")
        .unwrap_or_else(|| panic!("no crosscheck line: {out}"));
    assert_eq!(
        (
            line["finding"].as_str(),
            line["subject"].as_str(),
            line["organization"].as_str(),
            line["state"].as_str(),
            line["event_type"].as_str()
        ),
        (
            Some("revoke"),
            Some("user_2"),
            Some("org_9"),
            Some("open"),
            Some("organizationMembership.deleted")
        ),
        "{line}"
    );
    let (code, out, _) = run_cli(
        &["audit", "subject", "org_9", "--format", "text"],
        &work.config_path(),
    );
    assert_eq!(code, 0);
    assert!(
        out.contains(
            "  identity  crosscheck  revoke  organizationMembership.deleted  user_2 in org_9  "
        ),
        "{out}"
    );
    let (_, out, _) = run_cli(&["audit", "subject", "user_1"], &work.config_path());
    assert!(!out.contains("crosscheck"), "{out}");

    // The sidecar: `/v1/status` has the block, the page names it, and
    // `hushwatch status` prints the line and exits 1.
    let running = InProcess::start(&work, chrono::Utc::now());
    let status = json(&get(running.addr, "/v1/status").body);
    let c = &status["streams"][0]["crosscheck"];
    assert_eq!(c["provider"], "clerk", "{status}");
    assert_eq!(c["state"], "findings", "{c}");
    assert_eq!(
        (c["open_findings"].as_u64(), c["open_revocations"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(c["healed"], 0);
    assert!(c["last_error"].is_null());
    for field in ["last_success", "next_poll"] {
        let t = c[field].as_str().unwrap_or_else(|| panic!("{field}: {c}"));
        // The document's one format: RFC 3339, UTC, milliseconds.
        assert!(
            t.ends_with('Z') && t.len() == "2026-12-04T10:45:00.000Z".len(),
            "{field} {t}"
        );
    }
    assert_eq!(c["findings"][0]["subject"], "user_2", "{c}");
    let command = c["command"].as_str().unwrap().to_owned();
    assert!(
        command.starts_with("hushwatch audit subject --config ")
            && command.ends_with(" --format text user_2"),
        "{command}"
    );
    assert!(!status.to_string().contains(KEY));

    let page = get(running.addr, "/").body;
    assert!(
        page.contains("CROSS-CHECK NOT OK: identity (1 missed revocation (Clerk))"),
        "{page}"
    );

    let url = format!("http://{}", running.addr);
    let out = crate::common::cli(&["status", "--url", &url]).run();
    assert_eq!(out.0, 1, "{}{}", out.1, out.2);
    assert!(
        out.1
            .contains("  cross-check: 1 missed revocation (Clerk): user_2 in org_9; last poll "),
        "{}",
        out.1
    );

    // The command `/v1/status` prints runs as printed.
    let bin = env!("CARGO_BIN_EXE_hushwatch");
    let ran = std::process::Command::new("bash")
        .args(["-c", &command.replacen("hushwatch", bin, 1)])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&ran.stdout);
    assert!(ran.status.success(), "{command}: {ran:?}");
    assert!(printed.contains("crosscheck  revoke"), "{printed}");
}
