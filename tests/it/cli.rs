//! The command line as users run it: `check` and `explain` exit codes and
//! output.

fn hushwatch(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    crate::common::cli(args)
        .dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("CLERK_WEBHOOK_SECRET")
        .env_remove("HUSHWATCH_TOKEN")
        .env_remove("SVIX_OPS_SECRET")
        .envs(env)
        .run()
}

const SECRETS: [(&str, &str); 4] = [
    (
        "CLERK_WEBHOOK_SECRET",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ),
    ("HUSHWATCH_TOKEN", "token"),
    ("SVIX_OPS_SECRET", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"),
    ("ENTRA_CLIENT_STATE", "entra-client-state"),
];

#[test]
fn default_config_checks_without_any_secret() {
    let (code, out, err) = hushwatch(&["check", "--config", "config/hushwatch.toml"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("identity: calendar office, fires after 6h of business silence"),
        "{out}"
    );
    assert!(out.contains("next business window:"), "{out}");
}

#[test]
fn example_config_checks_with_no_variable_exported_and_says_what_is_off() {
    let (code, out, err) = hushwatch(&["check", "--config", "config/example.toml"], &[]);
    assert_eq!(code, 0, "{err}");
    let said = format!("{out}{err}");
    for off in [
        "streams.identity.ingest.webhook_secret[0] is empty; signed webhooks are off",
        "streams.identity.ingest.token[0] is empty; app reports are off",
        "svix.main.secret[0] is empty; operational webhooks to this source are refused",
        "streams.directory.ingest.client_state[0] is empty; this provider's webhooks are off",
    ] {
        assert!(said.contains(off), "{said}");
    }
    let (code, out, err) = hushwatch(&["check", "--config", "config/example.toml"], &SECRETS);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("tokyo: Asia/Tokyo"), "{out}");
    assert!(!out.contains("whsec_"), "secrets never printed");
    assert!(!format!("{out}{err}").contains("is empty"), "{out}{err}");
}

#[test]
fn explain_prints_the_documented_json() {
    let (code, out, err) = hushwatch(
        &[
            "explain",
            "--config",
            "config/example.toml",
            "--stream",
            "identity",
            "--last-event",
            "2026-12-04T15:00:00+09:00",
            "--now",
            "2026-12-07T10:00:00+09:00",
        ],
        &SECRETS,
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "stream": "identity",
            "last_event": "2026-12-04T06:00:00Z",
            "fires_at": "2026-12-07T03:00:00Z",
            "reason": "business_silence",
            "business_silence_seconds": 14400,
            "firing": false,
            "effective_threshold_seconds": 21600,
            "configured_threshold_seconds": 21600,
            "threshold_source": "configured",
            "learned": null
        })
    );
}

#[test]
fn explain_reports_firing_and_the_backstop() {
    let (code, out, _) = hushwatch(
        &[
            "explain",
            "--config",
            "config/example.toml",
            "--stream",
            "identity",
            "--last-event",
            "2026-12-30T17:00:00+09:00",
            "--now",
            "2027-01-04T12:00:00+09:00",
        ],
        &SECRETS,
    );
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    // 1h on Dec 30, then holidays and a weekend: the 72h backstop wins.
    assert_eq!(v["reason"], "max_silence");
    assert_eq!(v["fires_at"], "2027-01-02T08:00:00Z");
    assert_eq!(v["firing"], true);
}

#[test]
fn explain_rejects_bad_arguments_with_exit_2() {
    let (code, _, err) = hushwatch(
        &[
            "explain",
            "--config",
            "config/hushwatch.toml",
            "--stream",
            "nope",
            "--last-event",
            "2026-12-04T15:00:00Z",
        ],
        &[],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("no stream named \"nope\" (configured: identity)"),
        "{err}"
    );
    let (code, _, err) = hushwatch(
        &[
            "explain",
            "--config",
            "config/hushwatch.toml",
            "--stream",
            "identity",
            "--last-event",
            "yesterday",
        ],
        &[],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("--last-event: \"yesterday\" is not an RFC 3339 time"),
        "{err}"
    );
}
