//! Config validation: every rule has a test that names it.

use super::*;

fn env(name: &str) -> Option<String> {
    match name {
        "CLERK_WEBHOOK_SECRET" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
        "HUSHWATCH_TOKEN" => Some("s3cr3t-token".into()),
        _ => None,
    }
}

fn parse_ok(text: &str) -> Config {
    match parse(text, Path::new("/etc/hw"), &env) {
        Ok(c) => c,
        Err(e) => panic!("expected valid config, got:\n{e}"),
    }
}

fn errors(text: &str) -> Vec<String> {
    match parse(text, Path::new("/etc/hw"), &env) {
        Ok(_) => panic!("expected errors"),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

const FULL: &str = r#"
[server]
listen = "127.0.0.1:9477"
data_dir = "data"

[calendars.tokyo]
timezone = "Asia/Tokyo"
weekly = ["mon-fri 09:00-18:00"]
holidays = ["2026-12-31", "2027-01-01..2027-01-03"]

[streams.identity]
calendar = "tokyo"
silence_threshold = "6h"
max_silence = "72h"
notify = ["oncall"]
event_types = ["user.*", "session.*"]
[streams.identity.ingest]
webhook_secret = "${CLERK_WEBHOOK_SECRET}"
token = "${HUSHWATCH_TOKEN}"

[notifiers.oncall]
kind = "log"
"#;

#[test]
fn the_documented_example_is_valid() {
    let c = parse_ok(FULL);
    let s = &c.streams["identity"];
    assert_eq!(s.policy.threshold, TimeDelta::hours(6));
    assert_eq!(s.policy.max_silence, Some(TimeDelta::hours(72)));
    assert!(s.ingest.verifier.is_some());
    assert!(s.ingest.tokens[0].matches("s3cr3t-token"));
    assert!(!s.event_filter.feeds_clock("email.created"));
    assert_eq!(c.server.data_dir, Path::new("/etc/hw/data"));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn wrong_duration_names_the_key_and_suggests() {
    let text = FULL.replace("\"6h\"", "\"six hours\"");
    assert_eq!(
        errors(&text),
        [r#"streams.identity.silence_threshold: "six hours" is not a duration (try "6h")"#]
    );
}

#[test]
fn unknown_keys_are_typos() {
    let text = FULL.replace("max_silence", "max_silense");
    assert_eq!(
        errors(&text),
        [r#"streams.identity.max_silense: unknown key (did you mean "max_silence"?)"#]
    );
}

#[test]
fn missing_calendar_and_notifier_are_errors() {
    let text = FULL
        .replace("calendar = \"tokyo\"", "calendar = \"osaka\"")
        .replace("notify = [\"oncall\"]", "notify = [\"oncall\", \"pager\"]");
    let errs = errors(&text);
    assert!(
        errs.contains(
            &r#"streams.identity.calendar: no calendar named "osaka" (defined: always, tokyo)"#
                .to_string()
        ),
        "{errs:?}"
    );
    assert!(
        errs.contains(
            &r#"streams.identity.notify[1]: no notifier named "pager" (define [notifiers.pager])"#
                .to_string()
        ),
        "{errs:?}"
    );
}

#[test]
fn unset_environment_variable_is_an_error_without_leaking() {
    let text = FULL.replace("${HUSHWATCH_TOKEN}", "${NOT_SET_ANYWHERE}");
    assert_eq!(
        errors(&text),
        ["streams.identity.ingest.token: environment variable NOT_SET_ANYWHERE is not set"]
    );
}

#[test]
fn bad_secret_does_not_echo_it() {
    let text = FULL.replace("${CLERK_WEBHOOK_SECRET}", "whsec_!!notbase64!!");
    let errs = errors(&text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("streams.identity.ingest.webhook_secret[0]: "),
        "{errs:?}"
    );
    assert!(!errs[0].contains("notbase64"), "{errs:?}");
}

#[test]
fn all_errors_are_reported_at_once() {
    let text = r#"
[calendars.bad]
timezone = "Mars/Olympus"
weekly = ["mon-fri 9-17", "sat 10:00-12:00"]
holidays = ["2026-02-30"]

[streams.x]
calendar = "bad"
silence_threshold = "0s"

[notifiers.n]
kind = "carrier-pigeon"
"#;
    let errs = errors(text);
    let expected = [
        "calendars.bad.timezone: \"Mars/Olympus\" is not an IANA time zone",
        "calendars.bad.weekly[0]: \"9\" is not a time of day",
        "calendars.bad.holidays[0]: \"2026-02-30\" is not a date",
        "notifiers.n.kind: \"carrier-pigeon\" is not a notifier kind",
        "streams.x.silence_threshold: must be longer than zero",
    ];
    for e in expected {
        assert!(
            errs.iter().any(|got| got.starts_with(e)),
            "missing {e:?} in {errs:?}"
        );
    }
    // A calendar that is declared but broken is not reported again as missing.
    assert_eq!(errs.len(), expected.len(), "{errs:?}");
}

#[test]
fn calendar_named_always_is_reserved_and_builtin_works() {
    let text = "[calendars.always]\ntimezone = \"UTC\"\nweekly = [\"mon 09:00-10:00\"]\n";
    assert!(errors(text)[0].starts_with("calendars.always: \"always\" is built in"));
    let c = parse_ok("[streams.s]\ncalendar = \"always\"\nsilence_threshold = \"1h\"\n");
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
}

#[test]
fn invalid_toml_names_the_line() {
    let errs = errors("[server]\nlisten = \n");
    assert!(errs[0].starts_with("line 2: not valid TOML"), "{errs:?}");
}

#[test]
fn wrong_types_are_named() {
    let errs = errors("[server]\nlisten = 9477\n");
    assert_eq!(errs, ["server.listen: expected a string, found integer"]);
    let errs = errors("[server]\nlisten = \"localhost\"\n");
    assert!(errs[0].starts_with("server.listen: \"localhost\" is not an address"));
}

#[test]
fn stream_names_must_be_url_safe() {
    let errs = errors("[streams.\"a b\"]\ncalendar = \"always\"\nsilence_threshold = \"1h\"\n");
    assert!(
        errs[0].starts_with("streams.a b: names may use"),
        "{errs:?}"
    );
}

#[test]
fn several_webhook_secrets_for_rotation() {
    let text = FULL.replace(
        "webhook_secret = \"${CLERK_WEBHOOK_SECRET}\"",
        "webhook_secret = [\"${CLERK_WEBHOOK_SECRET}\", \"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"]",
    );
    assert!(parse_ok(&text).streams["identity"]
        .ingest
        .verifier
        .is_some());
}

#[test]
fn shipped_configs_are_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    for file in ["hushwatch.toml", "example.toml"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        // Every variable gets a well-formed secret, so only structure is tested.
        let example_env = |_: &str| Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string());
        if let Err(e) = parse(&text, &root, &example_env) {
            panic!("{file} is invalid:\n{e}");
        }
    }
}

#[test]
fn holiday_files_are_read_relative_to_the_config() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let text = std::fs::read_to_string(root.join("example.toml")).unwrap();
    let c = parse(&text, &root, &|_| {
        Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into())
    })
    .unwrap();
    let holidays = c.calendars["tokyo"].calendar.holidays().clone();
    let date = |s: &str| chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
    // 成人の日 is the second Monday of January (BYDAY=2MO): 2028-01-10.
    assert!(holidays.contains(date("2028-01-10")));
    assert!(!holidays.contains(date("2028-01-11")));
    // Golden Week from the file, every year.
    assert!(holidays.contains(date("2029-05-04")));

    let missing = text.replace("holidays/jp.ics", "holidays/nope.ics");
    let errs = parse(&missing, &root, &|_| {
        Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into())
    })
    .unwrap_err();
    assert!(
        errs.0[0]
            .to_string()
            .starts_with("calendars.tokyo.holiday_files[0]: cannot read"),
        "{errs}"
    );
}

// ---- notifiers (issue: Paging) ----

const NOTIFIERS: &str = r#"
[streams.identity]
calendar = "always"
silence_threshold = "6h"
notify = ["mail", "hook", "pager", "chat", "am", "stdout"]
repeat_interval = "4h"
escalate = [{ after = "2h", notify = ["boss"] }, { after = "8h", notify = ["boss", "pager"] }]
[streams.identity.ingest]
token = "t"

[notifiers.mail]
kind = "email"
smtp_url = "smtp://relay.example:587?tls=required"
username = "hushwatch"
password = "${SMTP_PASSWORD}"
from = "hushwatch@example.org"
to = ["oncall@example.org"]
backoff_initial = "10s"
backoff_max = "5m"
give_up_after = "24h"
timeout = "30s"

[notifiers.boss]
kind = "email"
smtp_url = "smtps://mail.example"
from = "hushwatch@example.org"
to = "boss@example.org"

[notifiers.hook]
kind = "webhook"
url = "https://hooks.example/hushwatch"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

[notifiers.pager]
kind = "pagerduty"
routing_key = "R0UTING"

[notifiers.chat]
kind = "slack"
url = "https://hooks.slack.com/services/T0/B0/x"

[notifiers.am]
kind = "alertmanager"
urls = ["http://am-0:9093", "http://am-1:9093/"]

[notifiers.stdout]
kind = "log"
"#;

fn env_smtp(name: &str) -> Option<String> {
    (name == "SMTP_PASSWORD")
        .then(|| "pw".to_string())
        .or_else(|| env(name))
}

#[test]
fn every_notifier_kind_and_its_keys_parse() {
    let c = parse(NOTIFIERS, Path::new("/etc/hw"), &env_smtp).unwrap_or_else(|e| panic!("{e}"));
    let kinds: Vec<&str> = c.notifiers.values().map(|n| n.kind.name()).collect();
    assert_eq!(
        kinds,
        [
            "alertmanager",
            "email",
            "slack",
            "webhook",
            "email",
            "pagerduty",
            "log"
        ]
    );
    let mail = &c.notifiers["mail"];
    assert_eq!(mail.policy.backoff_initial, TimeDelta::seconds(10));
    assert_eq!(mail.policy.backoff_max, TimeDelta::minutes(5));
    assert_eq!(mail.policy.give_up_after, TimeDelta::hours(24));
    assert_eq!(mail.policy.timeout, TimeDelta::seconds(30));
    match &mail.kind {
        NotifierKind::Email(e) => {
            assert_eq!(e.password.as_ref().unwrap().expose(), "pw");
            assert_eq!(e.username.as_deref(), Some("hushwatch"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.notifiers["hook"].policy, DeliveryPolicy::default());
    match &c.notifiers["pager"].kind {
        NotifierKind::PagerDuty(p) => assert_eq!(p.url, PAGERDUTY_URL),
        other => panic!("{other:?}"),
    }
    let s = &c.streams["identity"];
    assert_eq!(s.repeat_interval, Some(TimeDelta::hours(4)));
    assert_eq!(s.escalate.len(), 2);
    assert_eq!(s.escalate[1].after, TimeDelta::hours(8));
    assert_eq!(s.escalate[1].notify, ["boss", "pager"]);
    // Secrets never show in Debug output.
    let debug = format!("{c:?}");
    for secret in ["R0UTING", "hooks.slack.com/services", "MfKQ9r8GKYqr"] {
        assert!(!debug.contains(secret), "{secret} in {debug}");
    }
}

#[test]
fn notifier_errors_name_their_key_path() {
    let text = r##"
[streams.s]
calendar = "always"
silence_threshold = "1h"
repeat_interval = "soon"
escalate = [{ after = "2h", notify = ["nobody"] }, { notify = [] }]
[notifiers.pager]
kind = "pagerduty"
[notifiers.mail]
kind = "email"
smtp_url = "http://x"
from = "nope"
to = ["a@b.c", "bad"]
backoff_initial = "1m"
backoff_max = "10s"
[notifiers.hook]
kind = "webhook"
url = "ftp://x"
secret = "whsec_!!"
timeout = "0"
[notifiers.am]
kind = "alertmanager"
[notifiers.chat]
kind = "slack"
url = "https://hooks.slack.com/services/T0/B0/x"
channel = "#ops"
"##;
    let errs = errors(text);
    for e in [
        "notifiers.pager.routing_key: is required",
        "notifiers.mail.smtp_url: is not an SMTP URL lettre accepts",
        "notifiers.mail.from: is not an email address",
        "notifiers.mail.to[1]: is not an email address",
        "notifiers.mail.backoff_max: must not be shorter than backoff_initial",
        "notifiers.hook.url: must start with http:// or https://",
        "notifiers.hook.secret: ",
        "notifiers.hook.timeout: must be longer than zero",
        "notifiers.am.urls: is required",
        "notifiers.chat.channel: unknown key",
        "streams.s.repeat_interval: ",
        "streams.s.escalate[0].notify[0]: no notifier named \"nobody\"",
        "streams.s.escalate[1].after: is required",
        "streams.s.escalate[1].notify: needs at least one notifier",
    ] {
        assert!(
            errs.iter().any(|got| got.starts_with(e)),
            "missing {e:?} in {errs:#?}"
        );
    }
    // Errors never echo a URL that may hold a token.
    assert!(!errs.iter().any(|e| e.contains("hooks.slack.com")));
}

const PROVIDER_STREAM: &str = r#"
[streams.idp]
calendar = "always"
silence_threshold = "1h"
[streams.idp.ingest]
"#;

/// A request head with no headers and no query, for intakes that read only the body.
struct NoHead;

impl crate::ingest::providers::RequestHead for NoHead {
    fn header(&self, _name: &str) -> Option<&str> {
        None
    }
    fn query(&self) -> Option<&str> {
        None
    }
}

#[test]
fn every_provider_reads_its_own_keys() {
    let c = parse_ok(&format!(
        r#"{PROVIDER_STREAM}provider = "workos"
webhook_secret = " wos_plain_secret "
"#
    ));
    let ingest = &c.streams["idp"].ingest;
    assert_eq!(ingest.provider.name(), "workos");
    assert!(
        ingest.verifier.is_none(),
        "a WorkOS secret is not a whsec_ key"
    );
    assert!(ingest.provider.has_credentials());

    for (provider, key) in [("okta", "authorization"), ("auth0", "authorization")] {
        let c = parse_ok(&format!(
            "{PROVIDER_STREAM}provider = \"{provider}\"\n{key} = \"Bearer abc\"\n"
        ));
        assert_eq!(c.streams["idp"].ingest.provider.name(), provider);
    }
    let c = parse_ok(&format!(
        "{PROVIDER_STREAM}provider = \"entra\"\nclient_state = \"cs\"\n"
    ));
    let entra = &c.streams["idp"].ingest.provider;
    assert_eq!(entra.name(), "entra");
    assert_eq!(entra.expiry_warning(), Some(TimeDelta::hours(24)));
    // The configured clientState is the one the intake checks notifications against.
    let notification = |client_state: &str| {
        format!(
            r#"{{"value":[{{"subscriptionId":"s","changeType":"deleted","resource":"Users/u","clientState":"{client_state}"}}]}}"#
        )
    };
    let intake = entra.intake().unwrap();
    let now = chrono::DateTime::UNIX_EPOCH;
    let read = |body: &str| {
        let checked = intake.check_head(&NoHead, now)?;
        let verified = intake.check_body(checked, &NoHead, now, body.as_bytes())?;
        intake.parse(&NoHead, verified)
    };
    assert!(read(&notification("cs")).is_ok());
    assert_eq!(read(&notification("other")).unwrap_err().status(), 401);
    let c = parse_ok(&format!(
        "{PROVIDER_STREAM}provider = \"google\"\nchannel_token = \"t\"\nexpiry_warning = \"30m\"\n"
    ));
    assert_eq!(
        c.streams["idp"].ingest.provider.expiry_warning(),
        Some(TimeDelta::minutes(30))
    );
    let c = parse_ok(&format!(
        "{PROVIDER_STREAM}provider = \"okta\"\nauthorization = \"Bearer abc\"\n"
    ));
    assert_eq!(
        c.streams["idp"].ingest.provider.expiry_warning(),
        None,
        "a provider without subscriptions has no expiry warning"
    );
    let c = parse_ok(&format!(
        "{PROVIDER_STREAM}webhook_secret = \"${{CLERK_WEBHOOK_SECRET}}\"\n"
    ));
    assert_eq!(c.streams["idp"].ingest.provider.name(), "standard");
    assert!(c.streams["idp"].ingest.verifier.is_some());
}

#[test]
fn provider_errors_name_their_key_path() {
    let errs = errors(&format!("{PROVIDER_STREAM}provider = \"ping\"\n"));
    assert!(
        errs.iter()
            .any(|e| e.contains("streams.idp.ingest.provider")
                && e.contains("standard, workos, okta, auth0, entra, google")),
        "{errs:?}"
    );
    let errs = errors(&format!(
        "{PROVIDER_STREAM}provider = \"workos\"\nwebhook_secret = \"s\"\nclient_state = \"cs\"\n"
    ));
    assert!(
        errs.iter()
            .any(|e| e.contains("streams.idp.ingest.client_state") && e.contains("workos")),
        "{errs:?}"
    );
    let errs = errors(&format!(
        "{PROVIDER_STREAM}provider = \"entra\"\nclient_state = \"{}\"\n",
        "x".repeat(129)
    ));
    assert!(
        errs.iter()
            .any(|e| e.contains("streams.idp.ingest.client_state[0]") && e.contains("128")),
        "{errs:?}"
    );
    assert!(
        errs.iter().all(|e| !e.contains("xxxx")),
        "no value echoed: {errs:?}"
    );
    let errs = errors(&format!(
        "{PROVIDER_STREAM}provider = \"google\"\nchannel_token = \"t\"\nexpiry_warning = \"soon\"\n"
    ));
    assert!(
        errs.iter()
            .any(|e| e.contains("streams.idp.ingest.expiry_warning")),
        "{errs:?}"
    );
}

/// A config with one email notifier whose keys are `mail` (TOML lines).
fn email_config(mail: &str) -> String {
    format!(
        r#"
[streams.s]
calendar = "always"
silence_threshold = "1h"
notify = ["mail"]
[streams.s.ingest]
token = "t"
[notifiers.mail]
kind = "email"
{mail}
"#
    )
}

#[test]
fn email_settings_are_checked_by_the_parsers_that_send() {
    let base = r#"from = "hushwatch@example.org"
to = ["oncall@example.org"]"#;
    for (bad_url, why) in [
        ("smtp://relay.example?tls=sometimes", "unknown tls option"),
        ("smtp://", "no host"),
        ("smtps://user:pass@", "no host"),
        ("smtp://relay.example:99999", "port out of range"),
        ("mailto:ops@example.org", "not SMTP"),
    ] {
        let errs = errors(&email_config(&format!("smtp_url = \"{bad_url}\"\n{base}")));
        assert!(
            errs.iter().any(
                |e| e.starts_with("notifiers.mail.smtp_url: is not an SMTP URL lettre accepts")
            ),
            "{why}: {bad_url} gave {errs:#?}"
        );
        // The URL (it may hold a password) is never echoed.
        let host_part = bad_url.split("//").nth(1).unwrap_or(bad_url);
        assert!(
            host_part.is_empty() || !errs.iter().any(|e| e.contains(host_part)),
            "{errs:#?}"
        );
    }
    // Addresses lettre's Mailbox would refuse when building the message.
    let errs = errors(&email_config(
        r#"smtp_url = "smtp://relay.example"
from = "Ops <ops@@example.org>"
to = ["oncall@example.org", "two@ats@example.org", "ok <x@example.org>"]"#,
    ));
    assert!(
        errs.iter()
            .any(|e| e.starts_with("notifiers.mail.from: is not an email address")),
        "{errs:#?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.starts_with("notifiers.mail.to[1]: is not an email address")),
        "{errs:#?}"
    );
    assert_eq!(errs.len(), 2, "{errs:#?}");
    // What lettre accepts passes, including display names and a
    // percent-encoded password.
    parse(
        &email_config(
            r#"smtp_url = "smtp://me%40example.org:p%40ss@relay.example:2525?tls=required"
from = "Hushwatch <hushwatch@example.org>"
to = ["oncall@example.org"]"#,
        ),
        Path::new("/etc/hw"),
        &env,
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn ca_file_is_resolved_against_the_config_folder_and_read_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let mail = |ca: &str| {
        email_config(&format!(
            "smtp_url = \"smtp://relay.example?tls=required\"\nfrom = \"h@example.org\"\nto = [\"o@example.org\"]\nca_file = \"{ca}\""
        ))
    };
    // Missing: named with the resolved path, under the key.
    let errs = parse(&mail("ca/relay.pem"), dir.path(), &env)
        .unwrap_err()
        .0;
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].path, "notifiers.mail.ca_file");
    assert!(
        errs[0]
            .reason
            .contains(&dir.path().join("ca/relay.pem").display().to_string()),
        "{}",
        errs[0].reason
    );
    // Not PEM at all.
    std::fs::create_dir(dir.path().join("ca")).unwrap();
    std::fs::write(dir.path().join("ca/relay.pem"), "hello\n").unwrap();
    let errs = parse(&mail("ca/relay.pem"), dir.path(), &env)
        .unwrap_err()
        .0;
    assert_eq!(errs[0].path, "notifiers.mail.ca_file");
    assert!(
        errs[0].reason.contains("no PEM certificate"),
        "{}",
        errs[0].reason
    );
    // PEM armour around bytes that are not a certificate.
    std::fs::write(
        dir.path().join("ca/relay.pem"),
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let errs = parse(&mail("ca/relay.pem"), dir.path(), &env)
        .unwrap_err()
        .0;
    assert_eq!(errs[0].path, "notifiers.mail.ca_file", "{errs:?}");
}

#[test]
fn http_notifier_urls_use_the_url_parser() {
    let text = r#"
[streams.s]
calendar = "always"
silence_threshold = "1h"
[streams.s.ingest]
token = "t"
[notifiers.hook]
kind = "webhook"
url = "https://exa mple.org/hook"
[notifiers.am]
kind = "alertmanager"
urls = ["http://am:p%40ss@am-0:9093", "http://[::1:9093", "http://am-1:notaport"]
[notifiers.chat]
kind = "slack"
url = "https:"
"#;
    let errs = errors(text);
    for e in [
        "notifiers.hook.url: is not a valid URL",
        "notifiers.am.urls[1]: is not a valid URL",
        "notifiers.am.urls[2]: is not a valid URL",
        "notifiers.chat.url: ",
    ] {
        assert!(
            errs.iter().any(|got| got.starts_with(e)),
            "missing {e:?} in {errs:#?}"
        );
    }
    assert!(!errs.iter().any(|e| e.contains("urls[0]")), "{errs:#?}");
}

/// `${SVIX_OPS_SECRET:-}` with the variable unset: like an empty ingest
/// secret, the operational route is off (every delivery refused), with a
/// warning, instead of failing the whole config. A missing key is still an
/// error.
#[test]
fn an_empty_svix_secret_switches_the_operational_route_off() {
    let svix = "\n[svix.main]\nsecret = \"${SVIX_OPS_SECRET:-}\"\nstreams = [\"identity\"]\nnotify = [\"oncall\"]\n";
    let c = parse_ok(&format!("{FULL}{svix}"));
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains("svix.main.secret[0] is empty")),
        "{:?}",
        c.warnings
    );
    let key = crate::ingest::signature::SecretKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        .unwrap();
    let signature = crate::ingest::signature::sign(&key, "msg_1", 1_764_000_000, b"{}");
    let headers = crate::ingest::signature::SignedHeaders {
        id: "msg_1",
        timestamp: "1764000000",
        signature: &signature,
    };
    assert!(c.svix["main"]
        .verifier
        .verify(&headers, b"{}", 1_764_000_000)
        .is_err());

    let missing = svix.replace("secret = \"${SVIX_OPS_SECRET:-}\"\n", "");
    let errs = errors(&format!("{FULL}{missing}"));
    assert!(
        errs.iter()
            .any(|e| e.starts_with("svix.main.secret: is required")),
        "{errs:?}"
    );
}

#[test]
fn admin_listen_is_optional_and_must_be_a_distinct_address() {
    assert_eq!(parse_ok(FULL).server.admin_listen, None);
    let with = FULL.replace(
        "data_dir = \"data\"",
        "data_dir = \"data\"\nadmin_listen = \"127.0.0.1:9478\"",
    );
    assert_eq!(
        parse_ok(&with).server.admin_listen,
        Some("127.0.0.1:9478".parse().unwrap())
    );
    let errs = errors("[server]\nadmin_listen = \"localhost\"\n");
    assert!(
        errs[0].starts_with("server.admin_listen: \"localhost\" is not an address"),
        "{errs:?}"
    );
    let errs = errors("[server]\nlisten = \"127.0.0.1:9477\"\nadmin_listen = \"127.0.0.1:9477\"\n");
    assert!(
        errs[0].starts_with("server.admin_listen: 127.0.0.1:9477 is also server.listen"),
        "{errs:?}"
    );
}

#[test]
fn body_timeout_defaults_to_ten_seconds_and_is_checked() {
    assert_eq!(
        parse_ok(FULL).server.body_timeout,
        std::time::Duration::from_secs(10)
    );
    let custom = FULL.replace(
        "data_dir = \"data\"",
        "data_dir = \"data\"\nbody_timeout = \"30s\"",
    );
    assert_eq!(
        parse_ok(&custom).server.body_timeout,
        std::time::Duration::from_secs(30)
    );
    for bad in ["\"soon\"", "\"0s\"", "\"1h\"", "10"] {
        let text = FULL.replace(
            "data_dir = \"data\"",
            &format!("data_dir = \"data\"\nbody_timeout = {bad}"),
        );
        let errs = errors(&text);
        assert!(
            errs.iter().any(|e| e.starts_with("server.body_timeout")),
            "{bad}: {errs:?}"
        );
    }
}

#[test]
fn public_url_is_an_absolute_http_url_and_ack_link_ttl_defaults_to_a_day() {
    let c = parse_ok(FULL);
    assert_eq!(c.server.public_url, None);
    assert_eq!(c.server.ack_link_ttl, chrono::TimeDelta::hours(24));
    let with = |lines: &str| {
        FULL.replace(
            "data_dir = \"data\"",
            &format!("data_dir = \"data\"\n{lines}"),
        )
    };
    let c = parse_ok(&with(
        "public_url = \"https://hw.example.com/sub/\"\nack_link_ttl = \"2h\"",
    ));
    let url = c.server.public_url.expect("public_url");
    assert_eq!(url.ack_link("CODE"), "https://hw.example.com/sub/ack/CODE");
    assert_eq!(c.server.ack_link_ttl, chrono::TimeDelta::hours(2));
    for bad in [
        "\"hw.example.com\"",
        "\"/ack\"",
        "\"ftp://hw.example.com\"",
        "\"mailto:ops@example.com\"",
        "\"https://user:pw@hw.example.com\"",
        "\"https://hw.example.com/?x=1\"",
        "\"https://hw.example.com/#top\"",
        "\"http://\"",
        "7",
    ] {
        let errs = errors(&with(&format!("public_url = {bad}")));
        assert!(
            errs.iter().any(|e| e.starts_with("server.public_url")),
            "{bad}: {errs:?}"
        );
    }
    let long = format!("public_url = \"https://{}.example\"", "a".repeat(1100));
    assert!(errors(&with(&long))
        .iter()
        .any(|e| e.starts_with("server.public_url: must be at most")));
    for bad in ["\"0s\"", "\"8d\"", "\"soon\""] {
        let errs = errors(&with(&format!("ack_link_ttl = {bad}")));
        assert!(
            errs.iter().any(|e| e.starts_with("server.ack_link_ttl")),
            "{bad}: {errs:?}"
        );
    }
}

#[test]
fn runbook_base_url_defaults_to_the_book_and_refuses_what_is_not_a_plain_http_url() {
    let c = parse_ok(FULL);
    assert_eq!(
        c.server.runbook_base_url.section("silence"),
        format!("{DEFAULT_RUNBOOK_BASE_URL}#silence")
    );
    let with = |lines: &str| {
        FULL.replace(
            "data_dir = \"data\"",
            &format!("data_dir = \"data\"\n{lines}"),
        )
    };
    let c = parse_ok(&with(
        "runbook_base_url = \"https://wiki.example.com/hw/runbooks\"",
    ));
    assert_eq!(
        c.server.runbook_base_url.section("forward_failing"),
        "https://wiki.example.com/hw/runbooks#forward_failing"
    );
    for bad in [
        "\"wiki.example.com\"",
        "\"ftp://wiki.example.com\"",
        "\"https://user:pw@wiki.example.com\"",
        "\"https://wiki.example.com/?x=1\"",
        "\"https://wiki.example.com/#top\"",
        "7",
    ] {
        let errs = errors(&with(&format!("runbook_base_url = {bad}")));
        assert!(
            errs.iter()
                .any(|e| e.starts_with("server.runbook_base_url")),
            "{bad}: {errs:?}"
        );
    }
}

/// Tokens and secrets from `${VAR}` often end in a newline: trimmed, and a
/// notice names the key without the value.
#[test]
fn surrounding_whitespace_is_trimmed_from_tokens_and_secrets_with_a_notice() {
    let env = |name: &str| match name {
        "CLERK_WEBHOOK_SECRET" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n".to_string()),
        "HUSHWATCH_TOKEN" => Some("  s3cr3t-token\n".to_string()),
        _ => None,
    };
    let c = parse(FULL, Path::new("/etc/hw"), &env).expect("valid");
    let tokens = &c.streams["identity"].ingest.tokens;
    assert!(tokens[0].matches("s3cr3t-token"));
    assert!(c.streams["identity"].ingest.verifier.is_some());
    let notices: Vec<&String> = c
        .warnings
        .iter()
        .filter(|w| w.contains("surrounding whitespace"))
        .collect();
    assert_eq!(notices.len(), 2, "{:?}", c.warnings);
    assert!(notices
        .iter()
        .any(|w| w.starts_with("streams.identity.ingest.token[0] ")));
    assert!(notices
        .iter()
        .any(|w| w.starts_with("streams.identity.ingest.webhook_secret[0] ")));
    assert!(!c
        .warnings
        .iter()
        .any(|w| w.contains("s3cr3t") || w.contains("whsec_")));
    // Without whitespace there is no notice.
    assert!(!parse_ok(FULL)
        .warnings
        .iter()
        .any(|w| w.contains("whitespace")));
}

#[test]
fn backoffs_and_timeouts_take_milliseconds() {
    let text = FULL.replace(
        "kind = \"log\"",
        "kind = \"log\"\nbackoff_initial = \"300ms\"\nbackoff_max = \"1s500ms\"\ntimeout = \"750ms\"",
    );
    let policy = &parse_ok(&text).notifiers["oncall"].policy;
    assert_eq!(policy.backoff_initial, TimeDelta::milliseconds(300));
    assert_eq!(policy.backoff_max, TimeDelta::milliseconds(1_500));
    assert_eq!(policy.timeout, TimeDelta::milliseconds(750));
    let bad = FULL.replace("kind = \"log\"", "kind = \"log\"\ntimeout = \"500ms1s\"");
    assert_eq!(
        errors(&bad),
        [r#"notifiers.oncall.timeout: "500ms1s" is not a duration (try "6h")"#]
    );
}

/// `config/example.toml` with its optional settings switched on: the file's
/// convention is that a line `# key = value` or `# [table]` (one `#`, one
/// space) is a setting shown in place, while prose comments never take that
/// form.
fn example_with_everything() -> String {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/example.toml"))
            .unwrap();
    let setting = |rest: &str| {
        let rest = rest.trim_end();
        if rest.starts_with('[') {
            return rest.contains(']');
        }
        let Some((key, _)) = rest.split_once(" = ") else {
            return false;
        };
        let key = key.trim_matches('"');
        !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':' | '*' | '.'))
    };
    text.lines()
        .map(|line| match line.strip_prefix("# ") {
            // A key that names a file which must exist and parse stays
            // commented; `example_config_names_file_keys` checks its line.
            Some(rest)
                if FILE_KEYS
                    .iter()
                    .any(|k| rest.starts_with(&format!("{k} = "))) =>
            {
                line.to_string()
            }
            Some(rest) if setting(rest) => rest.to_string(),
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Keys whose value is a file read at load (a PEM certificate), shown
/// commented out in the example rather than shipped with a file.
const FILE_KEYS: &[&str] = &["ca_file"];

#[test]
fn example_config_names_file_keys() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/example.toml"))
            .unwrap();
    for key in FILE_KEYS {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("# {key} = "))),
            "config/example.toml shows {key}"
        );
    }
}

fn example_env(name: &str) -> Option<String> {
    Some(match name {
        n if n.contains("URL") => "http://127.0.0.1:9/hook".into(),
        // [store] encryption_key: 32 bytes of base64 (this is b"0123456789abcdef" twice).
        n if n.ends_with("STORE_KEY") => "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=".into(),
        n if n.contains("SVIX") || n.contains("CLERK") || n.ends_with("WEBHOOK_SECRET") => {
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()
        }
        n if n.contains("PASSWORD") => "pw".into(),
        _ => "example-secret-value".into(),
    })
}

/// `streams.identity.maintenance[0]` → `streams.*.maintenance`: the tables
/// of one shape, whatever their names (templates take the stream keys).
fn table_shape(path: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut rest = path;
    for section in [
        "streams.",
        "templates.",
        "notifiers.",
        "calendars.",
        "svix.",
    ] {
        if let Some(after) = rest.strip_prefix(section) {
            let name_end = if let Some(quoted) = after.strip_prefix('"') {
                quoted.find('"').map_or(after.len(), |i| i + 2)
            } else {
                after.find('.').unwrap_or(after.len())
            };
            let section = if section == "templates." {
                "streams."
            } else {
                section
            };
            parts.push(format!("{section}*"));
            rest = &after[name_end..];
            break;
        }
    }
    let tail: String = rest
        .split('[')
        .map(|p| p.split_once(']').map_or(p, |(_, after)| after))
        .collect();
    parts.push(tail);
    parts.concat()
}

#[test]
fn example_config_shows_every_key_the_reader_accepts() {
    let text = example_with_everything();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let (result, uses) = parse_reporting_keys(&text, &base, &example_env);
    if let Err(e) = result {
        panic!(
            "config/example.toml with every setting switched on must be valid:\n{e}\n---\n{text}"
        );
    }
    let mut shown: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    let mut allowed: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for u in &uses {
        let shape = table_shape(&u.path);
        let file_keys = u.unset.iter().filter(|k| FILE_KEYS.contains(&k.as_str()));
        shown
            .entry(shape.clone())
            .or_default()
            .extend(u.set.iter().chain(file_keys).cloned());
        allowed
            .entry(shape)
            .or_default()
            .extend(u.set.iter().chain(&u.unset).cloned());
    }
    let missing: Vec<String> = allowed
        .iter()
        .filter_map(|(shape, keys)| {
            let absent: Vec<&str> = keys
                .iter()
                .filter(|k| !shown[shape].contains(*k))
                .map(String::as_str)
                .collect();
            (!absent.is_empty()).then(|| {
                let shape = if shape.is_empty() {
                    "(top level)"
                } else {
                    shape.as_str()
                };
                format!("{shape}: {}", absent.join(", "))
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "config/example.toml must show every key the config reader accepts \
         (as `key = …` or a commented `# key = …`); missing:\n{}",
        missing.join("\n")
    );
}
