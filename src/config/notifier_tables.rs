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

/// Every notifier kind, one line each: the variant and the type holding
/// its settings, which implements [`KindConfig`] (its `kind = "…"` word,
/// its own keys, its reader). The order is the one `check` lists them in.
/// The sending side is `notify::Kind`, implemented in the kind's own
/// `notify` module; `notify::kind_of` matches this enum exhaustively, so a
/// kind added here does not compile until it can send.
macro_rules! notifier_kinds {
    ($($(#[$doc:meta])* $variant:ident($config:ty),)*) => {
        #[derive(Debug, Clone)]
        pub enum NotifierKind {
            $($(#[$doc])* $variant($config),)*
        }

        impl NotifierKind {
            /// The `kind = "…"` word, also used in logs.
            pub fn name(&self) -> &'static str {
                match self {
                    $(NotifierKind::$variant(_) => <$config as KindConfig>::NAME,)*
                }
            }
        }

        /// Each kind's word, own keys and reader, in the order above.
        const KINDS: &[Kind] = &[$(Kind {
            name: <$config as KindConfig>::NAME,
            keys: <$config as KindConfig>::KEYS,
            read: |r, at| <$config as KindConfig>::read(r, at).map(NotifierKind::$variant),
        },)*];
    };
}

notifier_kinds! {
    Email(EmailConfig),
    Webhook(WebhookConfig),
    PagerDuty(PagerDutyConfig),
    Slack(SlackConfig),
    Alertmanager(AlertmanagerConfig),
    /// One JSON line on stdout.
    Log(LogConfig),
}

/// One notifier kind's configuration: its `kind = "…"` word, the keys of
/// its own (besides the shared `kind`, delivery policy and watchdog keys)
/// and its reader, the one `check`, `serve` and SIGHUP share. Listed once
/// in `notifier_kinds!`.
pub trait KindConfig: Sized {
    const NAME: &'static str;
    const KEYS: &'static [&'static str];
    /// Reads the kind's own keys; `None` after reporting every error found.
    fn read(r: &mut Reader<'_>, at: &KindTable<'_>) -> Option<Self>;
}

/// The `[notifiers.NAME]` table a kind's reader reads.
pub struct KindTable<'a> {
    pub path: &'a str,
    pub table: &'a Table,
    /// The config file's folder: relative paths resolve against it.
    pub base_dir: &'a Path,
    /// The notifier's delivery policy, already read (its `timeout` is the
    /// one a send uses).
    pub policy: &'a DeliveryPolicy,
}

/// A registry row of [`KINDS`].
struct Kind {
    name: &'static str,
    keys: &'static [&'static str],
    read: fn(&mut Reader<'_>, &KindTable<'_>) -> Option<NotifierKind>,
}

/// `kind = "log"`: no settings of its own.
#[derive(Debug, Clone)]
pub struct LogConfig;

impl KindConfig for LogConfig {
    const NAME: &'static str = "log";
    const KEYS: &'static [&'static str] = &[];
    fn read(_: &mut Reader<'_>, _: &KindTable<'_>) -> Option<Self> {
        Some(LogConfig)
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
    let Some(kind) = KINDS.iter().find(|k| k.name == kind_word) else {
        let supported: Vec<String> = KINDS.iter().map(|k| format!("{:?}", k.name)).collect();
        r.error(
            &join(path, "kind"),
            format!(
                "{kind_word:?} is not a notifier kind (supported: {})",
                supported.join(", ")
            ),
        );
        return None;
    };
    let allowed: Vec<&str> = COMMON_NOTIFIER_KEYS
        .iter()
        .chain(kind.keys)
        .chain(&super::watchdog::NOTIFIER_KEYS)
        .copied()
        .collect();
    r.reject_unknown(path, t, &allowed);
    let policy = read_delivery_policy(r, path, t);
    let at = KindTable {
        path,
        table: t,
        base_dir,
        policy: &policy,
    };
    let kind = (kind.read)(r, &at)?;
    Some(NotifierConfig {
        name: name.to_string(),
        kind,
        policy,
    })
}

impl KindConfig for WebhookConfig {
    const NAME: &'static str = "webhook";
    const KEYS: &'static [&'static str] = &["url", "secret"];
    fn read(r: &mut Reader<'_>, at: &KindTable<'_>) -> Option<Self> {
        let (path, t) = (at.path, at.table);
        let url = read_url(r, path, t, "url");
        let secret = r
            .opt_string(path, t, "secret")
            .map(|s| SecretKey::parse(&s))
            .transpose()
            .map_err(|e| r.error(&join(path, "secret"), e.to_string()));
        Some(WebhookConfig {
            url: SecretString::new(url?),
            secret: secret.ok()?,
        })
    }
}

impl KindConfig for PagerDutyConfig {
    const NAME: &'static str = "pagerduty";
    const KEYS: &'static [&'static str] = &["routing_key", "url"];
    fn read(r: &mut Reader<'_>, at: &KindTable<'_>) -> Option<Self> {
        let (path, t) = (at.path, at.table);
        let key = r.req_string(path, t, "routing_key");
        if key.as_deref().is_some_and(|k| k.trim().is_empty()) {
            r.error(&join(path, "routing_key"), "must not be empty");
        }
        let url = if t.contains_key("url") {
            read_url(r, path, t, "url")
        } else {
            Some(PAGERDUTY_URL.to_string())
        };
        Some(PagerDutyConfig {
            routing_key: SecretString::new(key?),
            url: url?,
        })
    }
}

impl KindConfig for SlackConfig {
    const NAME: &'static str = "slack";
    const KEYS: &'static [&'static str] = &["url"];
    fn read(r: &mut Reader<'_>, at: &KindTable<'_>) -> Option<Self> {
        Some(SlackConfig {
            url: SecretString::new(read_url(r, at.path, at.table, "url")?),
        })
    }
}

impl KindConfig for AlertmanagerConfig {
    const NAME: &'static str = "alertmanager";
    const KEYS: &'static [&'static str] = &["urls"];
    fn read(r: &mut Reader<'_>, at: &KindTable<'_>) -> Option<Self> {
        let path = at.path;
        let urls = r.string_list(path, at.table, "urls", true);
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
        ok.then_some(AlertmanagerConfig { urls })
    }
}

impl KindConfig for EmailConfig {
    const NAME: &'static str = "email";
    const KEYS: &'static [&'static str] =
        &["smtp_url", "username", "password", "from", "to", "ca_file"];
    fn read(r: &mut Reader<'_>, at: &KindTable<'_>) -> Option<Self> {
        read_email(r, at.path, at.table, at.base_dir, at.policy)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry is what `kind = "…"` is looked up in: a repeated word
    /// would shadow a kind, and an own key equal to a shared one would be
    /// read twice with two meanings.
    #[test]
    fn every_kind_has_its_own_word_and_keys_apart_from_the_shared_ones() {
        let mut words: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), KINDS.len(), "a kind word is listed twice");
        for kind in KINDS {
            for key in kind.keys {
                assert!(
                    !COMMON_NOTIFIER_KEYS.contains(key)
                        && !super::super::watchdog::NOTIFIER_KEYS.contains(key),
                    "{}: {key} is a shared notifier key",
                    kind.name
                );
            }
        }
    }
}
