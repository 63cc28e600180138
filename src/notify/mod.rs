//! Outgoing notifications: one module per notifier kind, the pure payload
//! builders (golden-tested), the shared HTTP client and the retry policy.
//!
//! The contract is Alertmanager's: `send` performs exactly one attempt and
//! classifies it as delivered, retryable or permanent; *when* to retry is
//! decided in one place (`retry`). Every retry of a page carries the same
//! key (`Page::key`), so a receiver can collapse an ambiguous duplicate.
//!
//! Secrets (SMTP credentials, routing keys, webhook secrets, URLs with
//! tokens) never appear in an `Outcome`'s text: URLs are shown as
//! `scheme://host:port` only and any configured secret is scrubbed.

pub mod alertmanager;
pub mod email;
pub mod http;
/// The alert kinds live in `domain` (the store needs them as much as the
/// notifiers); `notify::kind` keeps the notifiers' paths short.
pub use crate::domain::alert_kind as kind;
pub mod log;
pub mod pagerduty;
pub mod payload;
pub mod retry;
pub mod slack;
pub mod text;
pub mod webhook;

use crate::config::{Config, NotifierConfig, NotifierKind};
use crate::domain::alert_kind::AlertKind;
use crate::domain::duration::format_duration;
use crate::store::{AlertState, OutboxRow, PageKind};
use chrono::{DateTime, TimeDelta, Utc};
use std::time::Duration;

/// Everything a notifier needs to render one page. Built from an outbox
/// row plus the stream's config; the same row always gives the same page
/// (apart from `sent_at`, which is the attempt's time).
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// Idempotency key: identical on every retry of this page.
    pub key: String,
    /// Stable per alert episode (firing and resolved share it).
    pub alert_id: String,
    /// `silence` (the stream went quiet) or a Svix alert such as
    /// `svix_endpoint_disabled` (see `alertname`).
    pub alert_kind: AlertKind,
    pub stream: String,
    pub firing: bool,
    pub kind: PageKind,
    /// When the transition happened (or the reminder/escalation was due).
    pub at: DateTime<Utc>,
    pub started_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
    /// Silence pages: where the silence began.
    pub silent_since: Option<DateTime<Utc>>,
    /// Silence resolves: when events arrived again, and how much business
    /// time the silence lasted until then.
    pub resumed_at: Option<DateTime<Utc>>,
    pub business_silence: Option<TimeDelta>,
    /// What happened, in one line (a silence resolve says when events
    /// arrived again instead of repeating why it fired).
    pub summary: String,
    /// `critical` or `warning`, as stored with the page.
    pub severity: String,
    /// Svix pages: the `[svix.NAME]` source and the endpoint.
    pub source: Option<String>,
    pub endpoint_id: Option<String>,
    pub calendar: String,
    pub timezone: chrono_tz::Tz,
    pub business_hours: Vec<String>,
    pub threshold: TimeDelta,
    pub max_silence: Option<TimeDelta>,
    /// A `notify-test` page, clearly labelled as such.
    pub test: bool,
    /// Issue #30: the acknowledge link minted for this send of a firing
    /// stream page (`[server] public_url`; `service::delivery`). Never
    /// shown on resolves, test pages or other kinds (`payload::ack_link`).
    pub ack_url: Option<String>,
    /// `[server] runbook_base_url`: every page links to its kind's section
    /// there (`payload::runbook_url`).
    pub runbook_base: crate::config::RunbookUrl,
    /// The sidecar's config file, shell-quoted: the operator hint's
    /// commands name it (`--config`), so they run as printed.
    pub config_path: String,
    /// A silence page of a relay stream whose clock is the app's 2xx
    /// (`[forward] clock = "delivered"`): what went quiet is the app, not
    /// the identity provider, and the page says what to check accordingly.
    pub relay_delivered: bool,
}

/// Severity of every silence page (no per-stream setting yet).
pub const SEVERITY: &str = "critical";

/// The calendar a page about `stream` describes: name, zone and weekly
/// lines (the built-in 24x7 UTC calendar when the stream has none).
pub fn calendar_facts(
    config: &Config,
    stream: Option<&crate::config::StreamConfig>,
) -> (String, chrono_tz::Tz, Vec<String>) {
    match stream.and_then(|s| config.calendars.get(&s.calendar)) {
        Some(c) => (
            c.name.clone(),
            c.calendar.timezone(),
            c.weekly_lines.clone(),
        ),
        None => (
            crate::config::ALWAYS.to_string(),
            chrono_tz::UTC,
            vec!["24x7".to_string()],
        ),
    }
}

impl Page {
    pub fn from_row(row: &OutboxRow, config: &Config) -> Page {
        let stream = config.streams.get(&row.stream);
        let (calendar, timezone, business_hours) = calendar_facts(config, stream);
        let firing = row.state == AlertState::Firing;
        let silence = row.alert_kind == AlertKind::Silence;
        let resumed_at = row.resumed_at.filter(|_| silence && !firing);
        let business_silence = match (resumed_at, row.silent_since, stream) {
            (Some(end), Some(start), Some(s)) => {
                Some(config.calendar_of(s).business_time(start, end))
            }
            _ => None,
        };
        let mut page = Page {
            key: row.page_key.clone(),
            alert_id: row.alert_id.clone(),
            alert_kind: row.alert_kind,
            stream: row.stream.clone(),
            firing,
            kind: row.kind,
            at: row.at,
            started_at: row.started_at.unwrap_or(row.at),
            resolved_at: (!firing).then_some(row.at),
            silent_since: row.silent_since.filter(|_| silence),
            resumed_at,
            business_silence,
            // With `[store] encryption_key` the stored text names subjects
            // by their veiled tokens (`store::veil`): a page reads as without.
            summary: config.store.sealer.veil().reveal(&row.reason).into_owned(),
            severity: row.severity.clone(),
            source: row.source.clone(),
            endpoint_id: row.endpoint_id.clone(),
            calendar,
            timezone,
            business_hours,
            threshold: stream.map_or(TimeDelta::zero(), |s| s.policy.threshold),
            max_silence: stream.and_then(|s| s.policy.max_silence),
            test: false,
            ack_url: None,
            runbook_base: config.server.runbook_base_url.clone(),
            config_path: config.path_for_commands(),
            relay_delivered: stream
                .and_then(|s| s.forward.as_ref())
                .is_some_and(|f| f.clock == crate::config::forward::ForwardClock::Delivered),
        };
        if let Some(text) = payload::resolve_summary(&page) {
            page.summary = text;
        }
        page
    }

    /// "FIRING" or "RESOLVED".
    pub fn status_word(&self) -> &'static str {
        if self.firing {
            "FIRING"
        } else {
            "RESOLVED"
        }
    }

    /// Whether this page is about the stream's silence (else e.g. Svix).
    pub fn is_silence(&self) -> bool {
        self.alert_kind == AlertKind::Silence
    }

    pub fn threshold_text(&self) -> String {
        format_duration(self.threshold)
    }
}

/// The result of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx (or SMTP 250): done.
    Delivered,
    /// 5xx, 429, timeout, connection failure. `ambiguous`: the receiver may
    /// have got it (the retry reuses the same key so it can collapse it).
    Retry {
        cause: Cause,
        reason: String,
        retry_after: Option<Duration>,
        ambiguous: bool,
    },
    /// Other 4xx, SMTP 5xx, invalid configuration: retrying cannot help.
    Permanent { cause: Cause, reason: String },
}

pub use crate::domain::notify_cause::Cause;

impl Outcome {
    pub fn retry(cause: Cause, reason: impl Into<String>, ambiguous: bool) -> Outcome {
        Outcome::Retry {
            cause,
            reason: reason.into(),
            retry_after: None,
            ambiguous,
        }
    }

    pub fn permanent(cause: Cause, reason: impl Into<String>) -> Outcome {
        Outcome::Permanent {
            cause,
            reason: reason.into(),
        }
    }

    /// The `reason` label: empty for a delivered page (a label with an
    /// empty value is the same series as one without it, so
    /// `{outcome="delivered"}` reads as it did before the label).
    pub fn cause_label(&self) -> &'static str {
        match self {
            Outcome::Delivered => "",
            Outcome::Retry { cause, .. } | Outcome::Permanent { cause, .. } => cause.label(),
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Retry { .. } => "retry",
            Outcome::Permanent { .. } => "failed",
        }
    }

    /// Removes any of `secrets` from the reason text (defence in depth:
    /// reasons are built without secrets in the first place).
    fn scrubbed(self, secrets: &[&str]) -> Outcome {
        match self {
            Outcome::Delivered => Outcome::Delivered,
            Outcome::Retry {
                cause,
                reason,
                retry_after,
                ambiguous,
            } => Outcome::Retry {
                cause,
                reason: scrub(&reason, secrets),
                retry_after,
                ambiguous,
            },
            Outcome::Permanent { cause, reason } => Outcome::Permanent {
                cause,
                reason: scrub(&reason, secrets),
            },
        }
    }
}

/// Replaces every occurrence of each non-empty secret with `<redacted>`.
pub fn scrub(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        if s.len() >= 4 {
            out = out.replace(s, "<redacted>");
        }
    }
    out
}

/// `scheme://host:port` of a URL: no credentials, path or query (a Slack
/// or webhook URL carries its token there).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("?", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    format!("{scheme}://{host}")
}

/// One notifier kind's sending side, implemented on its settings type
/// (`config::KindConfig`, which reads it) in the kind's own module, beside
/// the payload it builds. Adding a kind: its settings type and reader in
/// `config::notifier_tables` (one line in `notifier_kinds!`), its module
/// here implementing this trait, and one line in [`kind_of`].
#[async_trait::async_trait]
pub trait Kind: Sync {
    /// One classified attempt (see [`Outcome`]); retries are `retry`'s.
    async fn send(&self, attempt: &Attempt<'_>, page: &Page) -> Outcome;

    /// The configured URLs that may carry a password or a token: their
    /// secret parts are scrubbed from every outcome (see [`secrets_of`]).
    fn urls(&self) -> Vec<&str> {
        Vec::new()
    }

    /// Every other secret in the settings, as written.
    fn secrets(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What one attempt may use besides the kind's settings and the page.
pub struct Attempt<'a> {
    pub http: &'a http::Client,
    /// The attempt's time (`sent_at`).
    pub now: DateTime<Utc>,
    /// The notifier's `timeout`.
    pub timeout: Duration,
}

/// The sending side of a configured kind: the one list of kinds in
/// `notify`. The match is exhaustive, so a kind added to
/// `config::NotifierKind` does not compile until it is listed here.
pub fn kind_of(kind: &NotifierKind) -> &dyn Kind {
    match kind {
        NotifierKind::Email(c) => c,
        NotifierKind::Webhook(c) => c,
        NotifierKind::PagerDuty(c) => c,
        NotifierKind::Slack(c) => c,
        NotifierKind::Alertmanager(c) => c,
        NotifierKind::Log(c) => c,
    }
}

/// Whether pages through this kind may carry an acknowledge link. Not a
/// `log` line: whoever reads the logs (or the log pipeline's storage)
/// could acknowledge the alert with it, so delivery mints no link (and
/// stores no code) for it.
pub fn carries_ack_links(kind: &NotifierKind) -> bool {
    !matches!(kind, NotifierKind::Log(_))
}

/// Shared per-process resources for sending (HTTP connection setup).
pub struct Sender {
    http: http::Client,
}

impl Default for Sender {
    fn default() -> Self {
        Self::new()
    }
}

impl Sender {
    pub fn new() -> Sender {
        Sender {
            http: http::Client::new(),
        }
    }

    /// One delivery attempt of `page` through `notifier`.
    pub async fn send(
        &self,
        notifier: &NotifierConfig,
        page: &Page,
        now: DateTime<Utc>,
    ) -> Outcome {
        let timeout = notifier
            .policy
            .timeout
            .to_std()
            .unwrap_or(Duration::from_secs(10));
        let attempt = Attempt {
            http: &self.http,
            now,
            timeout,
        };
        let outcome = kind_of(&notifier.kind).send(&attempt, page).await;
        let mut secrets = secrets_of(notifier);
        // A receiver that echoes the body in its error must not put the
        // one-time acknowledge link into a log line.
        secrets.extend(link_secrets(page.ack_url.as_deref()));
        let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        outcome.scrubbed(&secrets)
    }
}

/// The page's acknowledge link and its code (the last path segment), for
/// scrubbing from outcome texts: a code must never reach a log.
pub fn link_secrets(ack_url: Option<&str>) -> Vec<String> {
    let Some(url) = ack_url else {
        return Vec::new();
    };
    let code = url.rsplit('/').next().unwrap_or_default().to_string();
    vec![url.to_string(), code]
}

/// Every secret a notifier holds, for scrubbing: as written in the config
/// and, for URL passwords, percent-decoded as they are sent.
pub fn secrets_of(notifier: &NotifierConfig) -> Vec<String> {
    let kind = kind_of(&notifier.kind);
    let urls = kind.urls();
    let mut v: Vec<String> = urls
        .iter()
        .flat_map(|u| url_secrets(u))
        .map(str::to_string)
        .collect();
    v.extend(urls.iter().filter_map(|u| decoded_password(u)));
    v.extend(kind.secrets());
    v
}

fn decoded_password(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    let raw = parsed.password()?;
    percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .ok()
        .map(|p| p.into_owned())
}

/// The parts of a URL that may carry a token: the password in its
/// userinfo, and everything after the authority (path, query).
pub fn url_secrets(url: &str) -> Vec<&str> {
    let mut v = Vec::new();
    let Some((_, rest)) = url.split_once("://") else {
        return vec![url];
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if let Some((userinfo, _)) = authority.rsplit_once('@') {
        v.push(userinfo.split_once(':').map_or(userinfo, |(_, p)| p));
    }
    if tail.len() > 1 {
        v.push(tail);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_credentials_path_and_query() {
        assert_eq!(
            redact_url("https://hooks.slack.com/services/T0/B0/secret"),
            "https://hooks.slack.com"
        );
        assert_eq!(
            redact_url("smtp://user:pw@mail.example:587?tls=required"),
            "smtp://mail.example:587"
        );
        assert_eq!(
            redact_url("http://127.0.0.1:9/x?token=abc"),
            "http://127.0.0.1:9"
        );
    }

    #[test]
    fn url_secrets_are_password_and_path() {
        assert_eq!(
            url_secrets("https://hooks.slack.com/services/T0/B0/x"),
            vec!["/services/T0/B0/x"]
        );
        assert_eq!(url_secrets("smtp://u:pw@h:25"), vec!["pw"]);
        assert!(url_secrets("smtp://h:25").is_empty());
    }

    #[test]
    fn url_passwords_are_scrubbed_as_written_and_as_sent() {
        let notifier = NotifierConfig {
            name: "am".into(),
            kind: NotifierKind::Alertmanager(crate::config::AlertmanagerConfig {
                urls: vec!["http://am:p%40ssw0rd@am-0:9093".into()],
            }),
            policy: crate::config::DeliveryPolicy::default(),
        };
        let secrets = secrets_of(&notifier);
        assert!(secrets.contains(&"p%40ssw0rd".to_string()), "{secrets:?}");
        assert!(secrets.contains(&"p@ssw0rd".to_string()), "{secrets:?}");
    }

    #[test]
    fn an_echoed_acknowledge_link_is_scrubbed_whole_or_as_its_code() {
        let secrets = link_secrets(Some("https://hw.example/ack/q7Yw0sXk3nB9vLmP2rT4uA"));
        let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        assert_eq!(
            scrub(
                "400: bad ack_url https://hw.example/ack/q7Yw0sXk3nB9vLmP2rT4uA (q7Yw0sXk3nB9vLmP2rT4uA)",
                &secrets
            ),
            "400: bad ack_url <redacted> (<redacted>)"
        );
    }

    #[test]
    fn scrub_removes_secrets() {
        assert_eq!(
            scrub("bad key R0UT1NG here", &["R0UT1NG"]),
            "bad key <redacted> here"
        );
    }
}
