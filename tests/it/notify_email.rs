//! Email through a real SMTP server (aiosmtpd with its Maildir handler):
//! subject, body, a Message-ID that stays the same across retries and
//! re-sends, threading of firing and resolved, and STARTTLS with a
//! throwaway CA, and SMTP AUTH with percent-encoded URL credentials. Run
//! scripts/test-components first.

use crate::common::*;
use crate::support;

use hushwatch::notify::{email, Page};
use support::*;

fn email_notifier(url: &str, extra: &str) -> String {
    format!(
        "[notifiers.mail]\nkind = \"email\"\nsmtp_url = \"{url}\"\nfrom = \"hushwatch@example.org\"\nto = [\"oncall@example.org\", \"lead@example.org\"]\ntimeout = \"5s\"\nbackoff_initial = \"1s\"\nbackoff_max = \"10s\"\n{extra}"
    )
}

fn body_of(raw: &str) -> String {
    let raw = raw.replace("\r\n", "\n");
    let body = raw
        .split_once("\n\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    let qp = mail_header(&raw, "Content-Transfer-Encoding")
        .is_some_and(|e| e.eq_ignore_ascii_case("quoted-printable"));
    if !qp {
        return body;
    }
    let joined = body.replace("=\n", "");
    let bytes = joined.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'=' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&joined[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn firing_and_resolved_mails_with_a_message_id_stable_across_retries() {
    let dir = tempfile::tempdir().unwrap();
    let maildir = dir.path().join("mail");
    let reserved = ClosedPort::new();
    let port = reserved.port();
    let text = config(
        &["mail"],
        "",
        &email_notifier(&format!("smtp://127.0.0.1:{port}"), ""),
    )
    .replace("calendar = \"always\"", "calendar = \"tokyo\"");
    // Friday 17:30 Tokyo + 1 business hour = Monday 09:30 JST.
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-04T17:30:00+09:00"));
    s.clock.set(utc("2026-12-07T09:30:00+09:00"));
    s.wait_state("firing");
    // The SMTP server is down: the page is retried, its key fixed.
    let row = wait_until("a failed attempt", || {
        s.pending().into_iter().find(|r| r.attempts >= 1)
    });
    assert!(row
        .last_error
        .as_deref()
        .unwrap()
        .contains(&format!("smtp://127.0.0.1:{port}")));
    let _smtp = start_smtp_on(reserved, &maildir);
    let mails = s.advance_until_at_least(10, "the mail", 1, || maildir_messages(&maildir));
    assert_exactly("the mail", 1, &mails);
    let mail = &mails[0];
    assert_eq!(
        mail_header(mail, "Subject").unwrap(),
        "[FIRING critical] identity: no identity events for 1h of business time"
    );
    assert_eq!(
        mail_header(mail, "Message-ID").unwrap(),
        format!("<{}@hushwatch>", row.page_key)
    );
    assert_eq!(mail_header(mail, "From").unwrap(), "hushwatch@example.org");
    assert!(mail_header(mail, "To")
        .unwrap()
        .contains("lead@example.org"));
    assert!(mail_header(mail, "X-RcptTo")
        .unwrap()
        .contains("oncall@example.org"));
    let thread = mail_header(mail, "References").unwrap();
    assert_eq!(thread, format!("<alert-{}@hushwatch>", row.alert_id));
    let body = body_of(mail);
    for needle in [
        "FIRING - identity",
        "What is silent:  the stream \"identity\" has received no events.",
        "Silent since:    2026-12-04 17:30 JST (Asia/Tokyo) = 2026-12-04 08:30 UTC",
        "Severity:        critical",
        "Fired at:        2026-12-07 09:30 JST (Asia/Tokyo) = 2026-12-07 00:30 UTC",
        "Threshold:       1h of business time",
        "Business hours:  mon-fri 09:00-18:00 (Asia/Tokyo, calendar \"tokyo\")",
        "Svix message attempts",
        "reconciliation job",
        "provider's dashboard",
    ] {
        assert!(
            body.contains(needle),
            "missing {needle:?} in\n{body}\nRAW:\n{mail}"
        );
    }

    s.resolve();
    let both = wait_exactly("the resolved mail", 2, || maildir_messages(&maildir));
    let resolved = &both[1];
    let subject = mail_header(resolved, "Subject").unwrap();
    // A resolve reads as one: when events came back and how long the
    // business silence lasted (Fri 17:30-18:00 + Mon 09:00-09:3x).
    assert!(
        subject.starts_with(
            "[RESOLVED critical] identity: identity events arrived again at 2026-12-07 09:3"
        ) && subject.ends_with("of business silence")
            && subject.contains("after 1h"),
        "{subject}"
    );
    let resolved_body = body_of(resolved);
    for needle in [
        // Where the silence began, not the arrival that ended it.
        "Silent since:    2026-12-04 17:30 JST (Asia/Tokyo) = 2026-12-04 08:30 UTC",
        "Arrived again:   2026-12-07 09:3",
        "Silence:         1h",
    ] {
        assert!(
            resolved_body.contains(needle),
            "missing {needle:?} in\n{resolved_body}"
        );
    }
    assert!(!resolved_body.contains("What to check"), "{resolved_body}");
    assert_eq!(mail_header(resolved, "References").unwrap(), thread);
    assert_ne!(
        mail_header(resolved, "Message-ID"),
        mail_header(mail, "Message-ID")
    );
    assert!(body_of(resolved).contains("Resolved at:     2026-12-07 09:3"));
    // The mail can be in the Maildir before hushwatch has read the 250.
    wait_until("the resolve counted as delivered", || {
        (s.metric(r#"hushwatch_notifications_total{notifier="mail",outcome="delivered"}"#) == 2.0)
            .then_some(())
    });
    assert_eq!(maildir_messages(&maildir).len(), 2, "each page mailed once");
}

fn sample_page(key: &str) -> Page {
    Page {
        key: key.into(),
        alert_id: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into(),
        alert_kind: hushwatch::domain::alert_kind::AlertKind::Silence,
        stream: "identity".into(),
        firing: true,
        kind: hushwatch::store::PageKind::Page,
        at: utc("2026-12-07T00:00:00Z"),
        started_at: utc("2026-12-07T00:00:00Z"),
        resolved_at: None,
        silent_since: Some(utc("2026-12-04T08:00:00Z")),
        resumed_at: None,
        business_silence: None,
        summary: "no identity events for 6h of business time".into(),
        severity: "critical".into(),
        source: None,
        endpoint_id: None,
        calendar: "tokyo".into(),
        timezone: chrono_tz::Asia::Tokyo,
        business_hours: vec!["mon-fri 09:00-18:00".into()],
        threshold: chrono::TimeDelta::hours(6),
        max_silence: None,
        test: false,
        ack_url: None,
        runbook_base: hushwatch::config::RunbookUrl::default(),
        config_path: "/etc/hushwatch/hushwatch.toml".into(),
        relay_delivered: false,
    }
}

fn email_config(
    dir: &std::path::Path,
    url: &str,
    ca: Option<&std::path::Path>,
) -> hushwatch::config::EmailConfig {
    let extra = ca
        .map(|p| format!("ca_file = \"{}\"\n", p.display()))
        .unwrap_or_default();
    let text = config(&["mail"], "", &email_notifier(url, &extra));
    std::fs::write(dir.join("c.toml"), text).unwrap();
    let c = hushwatch::config::load(&dir.join("c.toml")).unwrap();
    match &c.notifiers["mail"].kind {
        hushwatch::config::NotifierKind::Email(e) => e.clone(),
        _ => unreachable!(),
    }
}

#[test]
fn a_resent_page_keeps_its_message_id_so_it_threads_as_the_same_mail() {
    let dir = tempfile::tempdir().unwrap();
    let maildir = dir.path().join("mail");
    let (_smtp, port) = start_smtp(&maildir, None);
    let cfg = email_config(dir.path(), &format!("smtp://127.0.0.1:{port}"), None);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let page = sample_page("hw-resent-page");
    // An ambiguous attempt is re-sent whole: both copies carry one id.
    for _ in 0..2 {
        let out = rt.block_on(email::send(&cfg, &page, std::time::Duration::from_secs(5)));
        assert_eq!(out, hushwatch::notify::Outcome::Delivered);
    }
    let mails = maildir_messages(&maildir);
    assert_eq!(mails.len(), 2);
    for m in &mails {
        assert_eq!(
            mail_header(m, "Message-ID").unwrap(),
            "<hw-resent-page@hushwatch>"
        );
    }
}

#[test]
fn starttls_with_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = make_certs(dir.path());
    let maildir = dir.path().join("mail");
    let (_smtp, port) = start_smtp(&maildir, Some((&cert, &key)));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let page = sample_page("hw-starttls");
    let timeout = std::time::Duration::from_secs(5);

    let tls = email_config(
        dir.path(),
        &format!("smtp://127.0.0.1:{port}?tls=required"),
        Some(&ca),
    );
    let out = rt.block_on(email::send(&tls, &page, timeout));
    assert_eq!(out, hushwatch::notify::Outcome::Delivered);
    let mails = maildir_messages(&maildir);
    assert_eq!(mails.len(), 1);
    assert_eq!(
        mail_header(&mails[0], "Message-ID").unwrap(),
        "<hw-starttls@hushwatch>"
    );

    // Without our CA the certificate is not trusted: no mail, retried.
    let untrusted = email_config(
        dir.path(),
        &format!("smtp://127.0.0.1:{port}?tls=required"),
        None,
    );
    let out = rt.block_on(email::send(&untrusted, &page, timeout));
    assert!(
        matches!(out, hushwatch::notify::Outcome::Retry { .. }),
        "{out:?}"
    );
    // Plain SMTP to a server that requires STARTTLS is refused (530):
    // a permanent failure, not an endless retry.
    let plain = email_config(dir.path(), &format!("smtp://127.0.0.1:{port}"), None);
    let out = rt.block_on(email::send(&plain, &page, timeout));
    assert!(
        matches!(out, hushwatch::notify::Outcome::Permanent { .. }),
        "{out:?}"
    );
    assert_eq!(maildir_messages(&maildir).len(), 1);
}

#[test]
fn smtp_credentials_never_appear_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let closed = ClosedPort::new();
    let port = closed.port();
    let cfg = email_config(
        dir.path(),
        &format!("smtp://mailer:Pa55w0rd-XYZ@127.0.0.1:{port}"),
        None,
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let out = rt.block_on(email::send(
        &cfg,
        &sample_page("hw-x"),
        std::time::Duration::from_secs(2),
    ));
    let text = format!("{out:?}");
    assert!(
        matches!(out, hushwatch::notify::Outcome::Retry { .. }),
        "{text}"
    );
    assert!(!text.contains("Pa55w0rd-XYZ"), "{text}");
    assert!(!text.contains("mailer"), "{text}");
    assert!(text.contains(&format!("smtp://127.0.0.1:{port}")), "{text}");
}

#[test]
fn smtps_implicit_tls_with_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = make_certs(dir.path());
    let maildir = dir.path().join("mail");
    let (_smtp, port) = start_smtp_with(&maildir, Some((&cert, &key)), true);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cfg = email_config(dir.path(), &format!("smtps://127.0.0.1:{port}"), Some(&ca));
    let out = rt.block_on(email::send(
        &cfg,
        &sample_page("hw-smtps"),
        std::time::Duration::from_secs(5),
    ));
    assert_eq!(out, hushwatch::notify::Outcome::Delivered);
    let mails = maildir_messages(&maildir);
    assert_eq!(mails.len(), 1);
    assert_eq!(
        mail_header(&mails[0], "Message-ID").unwrap(),
        "<hw-smtps@hushwatch>"
    );
}

/// How the first connection to `flaky_smtp` misbehaves after the body.
#[derive(Clone, Copy)]
enum Fault {
    /// Close without answering: the sender cannot know if it was accepted.
    Drop,
    /// `451`: a transient refusal.
    TryLater,
    /// Answer only after `seconds` (past the notifier's timeout).
    Slow(u64),
}

/// A minimal SMTP peer whose first connection misbehaves after the message
/// body arrived and which accepts every later one. Returns each received
/// message's raw text.
fn flaky_smtp(fault: Fault) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&seen);
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let _ = conn.write_all(b"220 flaky ESMTP\r\n");
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                let cmd = line.to_ascii_uppercase();
                let reply: &[u8] = if cmd.starts_with("EHLO") {
                    b"250-flaky\r\n250 8BITMIME\r\n"
                } else if cmd.starts_with("DATA") {
                    let _ = conn.write_all(b"354 go ahead\r\n");
                    let mut message = String::new();
                    let mut l = String::new();
                    while reader.read_line(&mut l).unwrap_or(0) > 0 && l != ".\r\n" {
                        message.push_str(&l);
                        l.clear();
                    }
                    sink.lock().unwrap().push(message);
                    match (n, fault) {
                        (0, Fault::Drop) => break,
                        (0, Fault::TryLater) => b"451 try again later\r\n",
                        (0, Fault::Slow(seconds)) => {
                            std::thread::sleep(std::time::Duration::from_secs(seconds));
                            b"250 queued, late\r\n"
                        }
                        _ => b"250 queued\r\n",
                    }
                } else if cmd.starts_with("QUIT") {
                    let _ = conn.write_all(b"221 bye\r\n");
                    break;
                } else {
                    b"250 OK\r\n"
                };
                let _ = conn.write_all(reply);
                line.clear();
            }
        }
    });
    (port, seen)
}

#[test]
fn a_connection_dropped_mid_data_is_retried_under_the_same_message_id() {
    assert_retried_once_with_one_message_id(Fault::Drop);
}

#[test]
fn a_transient_smtp_refusal_is_retried_under_the_same_message_id() {
    assert_retried_once_with_one_message_id(Fault::TryLater);
}

#[test]
fn a_server_slower_than_the_timeout_is_retried_under_the_same_message_id() {
    assert_retried_once_with_one_message_id(Fault::Slow(3));
}

fn assert_retried_once_with_one_message_id(fault: Fault) {
    let dir = tempfile::tempdir().unwrap();
    let (port, seen) = flaky_smtp(fault);
    let notifier = format!(
        "[notifiers.mail]\nkind = \"email\"\nsmtp_url = \"smtp://127.0.0.1:{port}\"\nfrom = \"hushwatch@example.org\"\nto = [\"oncall@example.org\"]\ntimeout = \"1s\"\nbackoff_initial = \"1s\"\n"
    );
    let text = config(&["mail"], "", &notifier);
    let s = InProcess::start_in(dir.path(), &text, utc("2026-12-01T00:00:00Z"));
    s.fire();
    s.advance_until(5, "the second transmission", || {
        (seen.lock().unwrap().len() >= 2).then_some(())
    });
    wait_until("the page to count as delivered", || {
        s.pending().is_empty().then_some(())
    });
    let messages = seen.lock().unwrap().clone();
    assert_eq!(
        messages.len(),
        2,
        "one failed or ambiguous attempt, one accepted retry, no third copy"
    );
    let ids: Vec<Option<String>> = messages
        .iter()
        .map(|m| mail_header(m, "Message-ID"))
        .collect();
    assert!(ids[0].is_some());
    assert_eq!(ids[0], ids[1], "the receiver can collapse the two copies");
    assert_eq!(
        s.metric(r#"hushwatch_notifications_total{notifier="mail",outcome="delivered"}"#),
        1.0
    );
    assert!(s.metric(r#"hushwatch_notifications_total{notifier="mail",outcome="retry"}"#) >= 1.0);
}

/// An SMTP server (aiosmtpd) that requires AUTH and logs what it got,
/// listening on a port it picks itself and prints.
const AUTH_SMTP: &str = r#"
import asyncio, socket, sys
from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword
log = sys.argv[1]
class Handler:
    async def handle_DATA(self, server, session, envelope):
        with open(log, "a") as f:
            f.write("DATA from %s\n" % envelope.mail_from)
        return "250 OK"
def check(server, session, envelope, mechanism, data):
    ok = isinstance(data, LoginPassword) and data.login == b"ops@example.org" and data.password == b"p@ss:w0rd"
    with open(log, "a") as f:
        f.write("AUTH %s %r %s\n" % (mechanism, data.login if isinstance(data, LoginPassword) else None, ok))
    return AuthResult(success=ok)
async def main():
    # Bound here and kept: the port is never released and picked again.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = await asyncio.get_running_loop().create_server(
        lambda: SMTP(Handler(), authenticator=check, auth_require_tls=False, auth_required=True),
        sock=sock)
    print(sock.getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"#;

#[test]
fn smtp_url_credentials_are_percent_decoded_as_the_server_sees_them() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("smtp.log");
    let mut child = std::process::Command::new("python3")
        .args(["-c", AUTH_SMTP])
        .arg(&log)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 with aiosmtpd");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _server = Proc(child, "aiosmtpd with AUTH".into());
    let port: u16 = line.trim().parse().expect("the server's port");
    // `%40` is `@` and `%3A` is `:`, in the user name and the password.
    let cfg = email_config(
        dir.path(),
        &format!("smtp://ops%40example.org:p%40ss%3Aw0rd@127.0.0.1:{port}"),
        None,
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let out = rt.block_on(email::send(
        &cfg,
        &sample_page("hw-auth-page"),
        std::time::Duration::from_secs(5),
    ));
    assert_eq!(out, hushwatch::notify::Outcome::Delivered);
    let seen = std::fs::read_to_string(&log).unwrap();
    assert!(
        seen.contains("AUTH PLAIN b'ops@example.org' True"),
        "{seen}"
    );
    assert!(seen.contains("DATA from hushwatch@example.org"), "{seen}");
}
