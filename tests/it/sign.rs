//! `hushwatch sign` as a user runs it: the real binary, the secret in an
//! environment variable. (The headers it prints are sent to a running
//! server by the README's walkthrough, which tests/it/readme.rs runs.)

fn sign(env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("event.json"), br#"{"type":"user.created"}"#).unwrap();
    crate::common::cli(&["sign"])
        .args(args)
        .dir(dir.path())
        .env_remove("HW_SIGN_SECRET")
        .envs(env)
        .run()
}

#[test]
fn prints_the_three_headers_for_a_fixed_id_and_time() {
    let (code, out, _) = sign(
        &[("HW_SIGN_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")],
        &[
            "--secret-env",
            "HW_SIGN_SECRET",
            "--body",
            "event.json",
            "--id",
            "msg_1",
            "--timestamp",
            "1764000000",
        ],
    );
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "webhook-id: msg_1");
    assert_eq!(lines[1], "webhook-timestamp: 1764000000");
    assert!(lines[2].starts_with("webhook-signature: v1,"), "{out}");
    assert_eq!(lines.len(), 3);
    assert!(!out.contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
}

#[test]
fn an_unset_variable_or_a_bad_secret_exits_2_without_echoing_it() {
    let (code, out, err) = sign(
        &[],
        &["--secret-env", "HW_SIGN_SECRET", "--body", "event.json"],
    );
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert!(err.contains("HW_SIGN_SECRET is not set"), "{err}");

    let (code, out, err) = sign(
        &[("HW_SIGN_SECRET", "whsec_not*base64*Zq9")],
        &["--secret-env", "HW_SIGN_SECRET", "--body", "event.json"],
    );
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert!(err.contains("not valid"), "{err}");
    assert!(!err.contains("Zq9"), "{err}");

    let (code, _, err) = sign(
        &[("HW_SIGN_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")],
        &["--secret-env", "HW_SIGN_SECRET", "--body", "missing.json"],
    );
    assert_eq!(code, 2);
    assert!(err.contains("--body missing.json"), "{err}");
}
