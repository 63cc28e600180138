//! `[notifiers.NAME]`: each notifier kind's keys and the retry policy they
//! share. What a send would reject is checked with the parsers in
//! `config::notifiers`, the ones the senders use.

use super::notifiers;
use super::reader::{join, Reader};
use super::secret::SecretString;
use crate::ingest::signature::SecretKey;
use chrono::TimeDelta;
use std::path::{Path, PathBuf};
use toml::Table;

#[derive(Debug, Clone)]
pub enum NotifierKind {
    /// One JSON line on stdout.
    Log,
    Email(EmailConfig),
    Webhook(WebhookConfig),
    PagerDuty(PagerDutyConfig),
    Slack(SlackConfig),
    Alertmanager(AlertmanagerConfig),
}

impl NotifierKind {
    /// The `kind = "…"` word, also used in logs.
    pub fn name(&self) -> &'static str {
        match self {
            NotifierKind::Log => "log",
            NotifierKind::Email(_) => "email",
            NotifierKind::Webhook(_) => "webhook",
            NotifierKind::PagerDuty(_) => "pagerduty",
            NotifierKind::Slack(_) => "slack",
            NotifierKind::Alertmanager(_) => "alertmanager",
        }
    }
}

/// SMTP delivery. `smtp_url` may carry credentials, so it is a secret.
#[derive(Debug, Clone)]
pub struct EmailConfig {
    pub smtp_url: SecretString,
    pub username: Option<String>,
    pub password: Option<SecretString>,
    /// Parsed with lettre's `Mailbox`, as the message builder needs them.
    pub from: lettre::message::Mailbox,
    pub to: Vec<lettre::message::Mailbox>,
    /// Extra trusted root (PEM) for relays with a private CA, resolved
    /// against the config file's folder, and its contents read at load.
    pub ca_file: Option<PathBuf>,
    pub ca_pem: Option<Vec<u8>>,
}

#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// May embed a token in its path or query: never logged.
    pub url: SecretString,
    pub secret: Option<SecretKey>,
}

#[derive(Debug, Clone)]
pub struct PagerDutyConfig {
    pub routing_key: SecretString,
    pub url: String,
}

#[derive(Debug, Clone)]
pub struct SlackConfig {
    /// An incoming-webhook URL embeds its token.
    pub url: SecretString,
}

#[derive(Debug, Clone)]
pub struct AlertmanagerConfig {
    /// Base URLs of every cluster member; `/api/v2/alerts` is appended.
    pub urls: Vec<String>,
}

/// Retry and timeout settings shared by every kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryPolicy {
    pub backoff_initial: TimeDelta,
    pub backoff_max: TimeDelta,
    pub give_up_after: TimeDelta,
    pub timeout: TimeDelta,
}

impl Default for DeliveryPolicy {
    fn default() -> Self {
        DeliveryPolicy {
            backoff_initial: TimeDelta::seconds(5),
            backoff_max: TimeDelta::minutes(10),
            give_up_after: TimeDelta::hours(72),
            timeout: TimeDelta::seconds(10),
        }
    }
}

#[derive(Debug, Clone)]
pub struct NotifierConfig {
    pub name: String,
    pub kind: NotifierKind,
    pub policy: DeliveryPolicy,
}

/// The PagerDuty Events API v2 endpoint (US region).
pub const PAGERDUTY_URL: &str = "https://events.pagerduty.com/v2/enqueue";

const NOTIFIER_KINDS: &str =
    "\"email\", \"webhook\", \"pagerduty\", \"slack\", \"alertmanager\", \"log\"";
const COMMON_NOTIFIER_KEYS: [&str; 5] = [
    "kind",
    "backoff_initial",
    "backoff_max",
    "give_up_after",
    "timeout",
];

pub(super) fn read_notifier(
    r: &mut Reader<'_>,
    path: &str,
    name: &str,
    t: &Table,
    base_dir: &Path,
) -> Option<NotifierConfig> {
    let kind_word = r.req_string(path, t, "kind")?;
    let own: &[&str] = match kind_word.as_str() {
        "log" => &[],
        "email" => &["smtp_url", "username", "password", "from", "to", "ca_file"],
        "webhook" => &["url", "secret"],
        "pagerduty" => &["routing_key", "url"],
        "slack" => &["url"],
        "alertmanager" => &["urls"],
        other => {
            r.error(
                &join(path, "kind"),
                format!("{other:?} is not a notifier kind (supported: {NOTIFIER_KINDS})"),
            );
            return None;
        }
    };
    let allowed: Vec<&str> = COMMON_NOTIFIER_KEYS.iter().chain(own).copied().collect();
    r.reject_unknown(path, t, &allowed);
    let policy = read_delivery_policy(r, path, t);
    let kind = match kind_word.as_str() {
        "email" => NotifierKind::Email(read_email(r, path, t, base_dir, &policy)?),
        "webhook" => {
            let url = read_url(r, path, t, "url");
            let secret = r
                .opt_string(path, t, "secret")
                .map(|s| SecretKey::parse(&s))
                .transpose()
                .map_err(|e| r.error(&join(path, "secret"), e.to_string()));
            NotifierKind::Webhook(WebhookConfig {
                url: SecretString::new(url?),
                secret: secret.ok()?,
            })
        }
        "pagerduty" => {
            let key = r.req_string(path, t, "routing_key");
            if key.as_deref().is_some_and(|k| k.trim().is_empty()) {
                r.error(&join(path, "routing_key"), "must not be empty");
            }
            let url = if t.contains_key("url") {
                read_url(r, path, t, "url")
            } else {
                Some(PAGERDUTY_URL.to_string())
            };
            NotifierKind::PagerDuty(PagerDutyConfig {
                routing_key: SecretString::new(key?),
                url: url?,
            })
        }
        "slack" => NotifierKind::Slack(SlackConfig {
            url: SecretString::new(read_url(r, path, t, "url")?),
        }),
        "alertmanager" => {
            let urls = r.string_list(path, t, "urls", true);
            if urls.is_empty() {
                r.error(
                    &join(path, "urls"),
                    "is required: the base URL of every Alertmanager (e.g. [\"http://alertmanager:9093\"])",
                );
                return None;
            }
            let mut ok = true;
            for (i, u) in urls.iter().enumerate() {
                if let Err(reason) = check_http_url(u) {
                    r.error(&format!("{path}.urls[{i}]"), reason);
                    ok = false;
                }
            }
            ok.then_some(())?;
            NotifierKind::Alertmanager(AlertmanagerConfig { urls })
        }
        _ => NotifierKind::Log,
    };
    Some(NotifierConfig {
        name: name.to_string(),
        kind,
        policy,
    })
}

fn read_delivery_policy(r: &mut Reader<'_>, path: &str, t: &Table) -> DeliveryPolicy {
    let d = DeliveryPolicy::default();
    let mut get = |key: &str, default: TimeDelta| -> TimeDelta {
        match r.opt_duration(path, t, key) {
            Some(v) if v <= TimeDelta::zero() => {
                r.error(&join(path, key), "must be longer than zero");
                default
            }
            Some(v) => v,
            None => default,
        }
    };
    let policy = DeliveryPolicy {
        backoff_initial: get("backoff_initial", d.backoff_initial),
        backoff_max: get("backoff_max", d.backoff_max),
        give_up_after: get("give_up_after", d.give_up_after),
        timeout: get("timeout", d.timeout),
    };
    if policy.backoff_max < policy.backoff_initial {
        r.error(
            &join(path, "backoff_max"),
            "must not be shorter than backoff_initial",
        );
    }
    policy
}

/// A required http(s) URL. The error never echoes the value, which may
/// embed a token (Slack, webhook query strings).
fn read_url(r: &mut Reader<'_>, path: &str, t: &Table, key: &str) -> Option<String> {
    let url = r.req_string(path, t, key)?;
    match check_http_url(&url) {
        Ok(()) => Some(url),
        Err(reason) => {
            r.error(&join(path, key), reason);
            None
        }
    }
}

/// The check the HTTP client makes before every send.
fn check_http_url(url: &str) -> Result<(), String> {
    notifiers::http_target(url).map(|_| ())
}

fn read_email(
    r: &mut Reader<'_>,
    path: &str,
    t: &Table,
    base_dir: &Path,
    policy: &DeliveryPolicy,
) -> Option<EmailConfig> {
    let smtp_url = r.req_string(path, t, "smtp_url");
    let username = r.opt_string(path, t, "username");
    let password = r.opt_string(path, t, "password").map(SecretString::new);
    if username.is_some() != password.is_some() {
        r.error(path, "username and password go together");
    }
    let mailbox = |r: &mut Reader<'_>, key: &str, text: &str| {
        text.parse::<lettre::message::Mailbox>()
            .map_err(|_| {
                r.error(
                    key,
                    "is not an email address (\"ops@example.org\" or \"Ops <ops@example.org>\")",
                )
            })
            .ok()
    };
    let from = r
        .req_string(path, t, "from")
        .and_then(|f| mailbox(r, &join(path, "from"), &f));
    let to = r.string_list(path, t, "to", true);
    if t.contains_key("to") && to.is_empty() {
        r.error(&join(path, "to"), "needs at least one address");
    } else if !t.contains_key("to") {
        r.error(&join(path, "to"), "is required");
    }
    let to: Vec<_> = to
        .iter()
        .enumerate()
        .filter_map(|(i, addr)| mailbox(r, &format!("{path}.to[{i}]"), addr))
        .collect();
    // Relative to the config file's folder, like data_dir and holiday files.
    let ca_file = r.opt_string(path, t, "ca_file").map(|f| base_dir.join(f));
    let ca_pem = ca_file.as_ref().and_then(|file| {
        notifiers::read_ca_pem(file)
            .map_err(|e| r.error(&join(path, "ca_file"), e))
            .ok()
    });
    let smtp_url = smtp_url?;
    // The transport every send builds: what lettre rejects here would fail
    // every page.
    let settings = notifiers::SmtpSettings {
        smtp_url: &smtp_url,
        credentials: username
            .as_deref()
            .zip(password.as_ref().map(SecretString::expose)),
        ca_pem: ca_pem.as_deref(),
    };
    if let Err(reason) =
        notifiers::smtp_transport(&settings, policy.timeout.to_std().unwrap_or_default())
    {
        r.error(&join(path, "smtp_url"), reason);
        return None;
    }
    Some(EmailConfig {
        smtp_url: SecretString::new(smtp_url),
        username,
        password,
        from: from?,
        to,
        ca_file,
        ca_pem,
    })
}
