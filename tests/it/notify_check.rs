//! `hushwatch check` against the real binary: notifier settings that every
//! send would reject are config errors (exit 2, key path, no secret in the
//! text), a stream nothing can report to is a `WARNING:` line (exit 0), and
//! a SIGHUP that moves `server.listen` says it needs a restart.

use crate::common;

use common::*;
use std::process::Command;
use std::time::Duration;

fn check(work: &Workdir) -> (i32, String, String) {
    cli(&["check"]).config(work.config_path()).run()
}

const STREAM: &str = r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.identity]
calendar = "always"
silence_threshold = "1h"
notify = ["mail"]
[streams.identity.ingest]
token = "t0ken"
"#;

#[test]
fn notifier_settings_every_send_would_reject_fail_check_with_their_key() {
    let work = Workdir::new(&format!(
        r#"{STREAM}
[notifiers.mail]
kind = "email"
smtp_url = "smtp://ops:hunter22@relay.example?tls=maybe"
from = "hushwatch at example.org"
to = ["oncall@example.org"]
ca_file = "certs/relay-ca.pem"

[notifiers.am]
kind = "alertmanager"
urls = ["http://am:hunter22@[::1/"]
"#
    ));
    let (code, stdout, stderr) = check(&work);
    assert_eq!(code, 2, "{stdout}{stderr}");
    for key in [
        "notifiers.mail.smtp_url: is not an SMTP URL lettre accepts",
        "notifiers.mail.from: is not an email address",
        "notifiers.mail.ca_file: cannot read",
        "notifiers.am.urls[0]: is not a valid URL",
    ] {
        assert!(stderr.contains(key), "missing {key:?} in\n{stderr}");
    }
    // ca_file is looked for next to the config file, not in the cwd.
    let resolved = work.path().join("certs/relay-ca.pem");
    assert!(stderr.contains(&resolved.display().to_string()), "{stderr}");
    assert!(!stderr.contains("hunter22"), "{stderr}");

    // The same file with every value fixed passes.
    std::fs::create_dir(work.path().join("certs")).unwrap();
    std::fs::rename(make_ca(work.path()), &resolved).unwrap();
    work.write_config(&format!(
        r#"{STREAM}
[notifiers.mail]
kind = "email"
smtp_url = "smtp://ops:hunter22@relay.example?tls=required"
from = "Hushwatch <hushwatch@example.org>"
to = ["oncall@example.org"]
ca_file = "certs/relay-ca.pem"
"#
    ));
    let (code, stdout, stderr) = check(&work);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

/// A throwaway self-signed CA certificate (openssl), as a relay's private
/// CA would be.
fn make_ca(dir: &std::path::Path) -> std::path::PathBuf {
    let (cert, key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=test-ca",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl")
        .status
        .success();
    assert!(ok, "openssl could not make a CA");
    cert
}

#[test]
fn a_stream_nothing_can_report_to_is_a_warning_line_not_an_error() {
    let work = Workdir::new(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[streams.identity]
calendar = "always"
silence_threshold = "1h"
notify = ["stdout"]

[notifiers.stdout]
kind = "log"
"#,
    );
    let (code, stdout, stderr) = check(&work);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("WARNING: streams.identity.ingest: no webhook_secret or token")),
        "{stdout}"
    );
}

#[test]
fn sighup_that_moves_server_listen_says_it_needs_a_restart() {
    let work = Workdir::new(&basic_config(
        "calendar = \"always\"\nsilence_threshold = \"1h\"",
    ));
    let s = Sidecar::start(&work.config_path());
    work.write_config(
        &basic_config("calendar = \"always\"\nsilence_threshold = \"2h\"")
            .replace("listen = \"127.0.0.1:0\"", "listen = \"127.0.0.1:1\""),
    );
    s.signal("HUP");
    wait_for(Duration::from_secs(20), "the restart warning", || {
        s.stderr_text()
            .lines()
            .find(|l| l.contains("server.listen changed"))
            .map(str::to_string)
    });
    // The rest of the reload applied, and the old socket still answers.
    wait_for(Duration::from_secs(20), "the new threshold", || {
        (stream_status(s.addr, "identity")["threshold_seconds"] == 7200).then_some(())
    });
    s.stop();
}
