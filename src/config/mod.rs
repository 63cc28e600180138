//! Configuration: reads the TOML file, expands `${VAR}`, validates every
//! key and cross-reference, and builds the domain objects (calendars,
//! policies) the service runs on. A `Config` that exists is valid.

mod env;
pub mod maintenance;
pub mod notifiers;
pub mod providers;
mod reader;
pub mod secret;
pub mod templates;

use crate::audit::classify::{Access, Classifier};
use crate::domain::calendar::Calendar;
use crate::domain::event_filter::EventFilter;
use crate::domain::holidays::{parse_holiday, Holidays};
use crate::domain::ics::{parse_ics_bytes, IcsCalendar};
use crate::domain::silence::SilencePolicy;
use crate::domain::weekly::WeeklyHours;
use crate::ingest::signature::{SecretKey, Verifier};
use chrono::TimeDelta;
use reader::{join, valid_name, Reader};
use secret::SecretString;
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Table;

/// The calendar every config has without declaring it: 24x7, UTC.
pub const ALWAYS: &str = "always";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

/// All problems found in one pass, one per line.
#[derive(Debug, Clone)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub calendars: BTreeMap<String, CalendarConfig>,
    pub streams: BTreeMap<String, StreamConfig>,
    pub notifiers: BTreeMap<String, NotifierConfig>,
    pub audit: AuditConfig,
    /// `[svix.NAME]`: Svix environments whose operational webhooks we take.
    pub svix: BTreeMap<String, SvixConfig>,
    /// Things that are allowed but probably not intended.
    pub warnings: Vec<String>,
    /// `[templates.NAME]`, `[streams."PREFIX*"]` and their limits.
    pub templates: templates::Templates,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// `admin_listen`: when set, the status page, `/v1/status`, `/metrics`
    /// and admin routes are served only on this second listener.
    pub admin_listen: Option<SocketAddr>,
    /// Absolute, or relative to the process's working directory: already
    /// resolved against the config file's folder.
    pub data_dir: PathBuf,
    /// `body_timeout`: the whole request body must arrive within this time
    /// of the end of the head, else 408 and the connection is closed.
    pub body_timeout: std::time::Duration,
}

#[derive(Debug, Clone)]
pub struct CalendarConfig {
    pub name: String,
    pub calendar: Arc<Calendar>,
    pub weekly_lines: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct StreamConfig {
    pub name: String,
    pub calendar: String,
    pub policy: SilencePolicy,
    pub notify: Vec<String>,
    pub ingest: IngestConfig,
    pub event_filter: EventFilter,
    /// Business time between reminders while firing; None: no reminders.
    pub repeat_interval: Option<TimeDelta>,
    pub escalate: Vec<EscalationStep>,
    /// `[[streams.NAME.maintenance]]`: planned windows, silenced like an
    /// operator silence.
    pub maintenance: Vec<maintenance::MaintenanceWindow>,
}

#[derive(Debug, Clone, Default)]
pub struct IngestConfig {
    /// Present when `webhook_secret` is set with the standard provider: verifies signed
    /// webhooks.
    pub verifier: Option<Arc<Verifier>>,
    /// How the webhook route authenticates and reads deliveries.
    pub provider: providers::ProviderConfig,
    pub tokens: Vec<SecretString>,
}

#[derive(Debug, Clone)]
pub struct SvixConfig {
    pub name: String,
    /// Verifies the operational endpoint's signatures (several for rotation).
    pub verifier: Arc<Verifier>,
    /// Streams these endpoints feed; the first files unmapped endpoints' pages.
    pub streams: Vec<String>,
    pub notify: Vec<String>,
    /// Endpoint id or uid → stream.
    pub endpoints: BTreeMap<String, String>,
    /// Bearer token for `POST /v1/svix/NAME/acknowledge`.
    pub admin_token: Option<SecretString>,
    /// Event types that also clear a disabled endpoint (`endpoint.updated`, `endpoint.deleted`).
    pub clear_on: Vec<String>,
    /// A burst of exhausted messages is grouped into one updated page per endpoint per window.
    pub group_window: TimeDelta,
}

impl SvixConfig {
    /// The stream an endpoint feeds: mapped by id or uid, else the first.
    pub fn stream_for(&self, endpoint_id: &str, endpoint_uid: Option<&str>) -> (String, bool) {
        let mapped = self
            .endpoints
            .get(endpoint_id)
            .or_else(|| endpoint_uid.and_then(|u| self.endpoints.get(u)));
        match mapped {
            Some(s) => (s.clone(), true),
            None => (self.streams.first().cloned().unwrap_or_default(), false),
        }
    }
}

/// `[audit]`: the tamper-evident log is on with no configuration at all.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    pub enabled: bool,
    /// HMAC key for checkpoints; without it checkpoints carry the hash only.
    pub checkpoint_key: Option<SecretString>,
    pub checkpoint_interval: TimeDelta,
    /// Entries older than this are pruned (whole prefixes, anchored).
    pub retain: Option<TimeDelta>,
    pub classifier: Classifier,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            enabled: true,
            checkpoint_key: None,
            checkpoint_interval: TimeDelta::minutes(5),
            retain: None,
            classifier: Classifier::default(),
        }
    }
}

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

/// One `escalate = [{ after = "2h", notify = [...] }]` step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscalationStep {
    /// Business time after the alert started firing.
    pub after: TimeDelta,
    pub notify: Vec<String>,
}

/// The PagerDuty Events API v2 endpoint (US region).
pub const PAGERDUTY_URL: &str = "https://events.pagerduty.com/v2/enqueue";

impl Config {
    pub fn calendar_of(&self, stream: &StreamConfig) -> Arc<Calendar> {
        self.calendars
            .get(&stream.calendar)
            .map(|c| Arc::clone(&c.calendar))
            .unwrap_or_else(|| Arc::new(Calendar::always()))
    }
}

/// Reads and validates the config file; `${VAR}` comes from the process
/// environment.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            path: String::new(),
            reason: format!("cannot read config file {}: {e}", path.display()),
        }])
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse(&text, base, &|name| std::env::var(name).ok())
}

/// Validates config text. Relative paths are resolved against `base_dir`.
pub fn parse(
    text: &str,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let mut root: Table = text.parse().map_err(|e: toml::de::Error| {
        ConfigErrors(vec![ConfigError {
            path: String::new(),
            reason: format!("not valid TOML: {}", e.message().trim()),
        }])
        .with_span(text, e.span())
    })?;
    let mut r = Reader::new(env);
    r.reject_unknown(
        "",
        &root,
        &[
            "server",
            "calendars",
            "streams",
            "notifiers",
            "audit",
            "svix",
            "templates",
        ],
    );
    let patterns = templates::take_patterns(&mut root);
    let server = read_server(&mut r, &root, base_dir);
    let audit = read_audit(&mut r, &root);
    let calendars = read_named(&mut r, &root, "calendars", |r, path, name, t| {
        read_calendar(r, path, name, t, base_dir)
    });
    let notifiers = read_named(&mut r, &root, "notifiers", |r, path, name, t| {
        read_notifier(r, path, name, t, base_dir)
    });
    let streams = read_named(&mut r, &root, "streams", read_stream);
    let svix = read_named(&mut r, &root, "svix", read_svix);
    let templates = templates::read(
        &mut r,
        &root,
        patterns,
        &section_names(&root, "calendars"),
        &section_names(&root, "notifiers"),
        read_stream,
    );
    let mut config = Config {
        server,
        calendars,
        streams,
        notifiers,
        audit,
        svix,
        warnings: std::mem::take(&mut r.warnings),
        templates,
    };
    // Names declared but invalid are already reported; referring to them is
    // not a second error.
    let declared = |section: &str| -> Vec<String> {
        root.get(section)
            .and_then(toml::Value::as_table)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    };
    let declared = Declared {
        calendars: declared("calendars"),
        notifiers: declared("notifiers"),
    };
    check_references(&mut r, &mut config, &declared);
    if r.errors.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors(r.errors))
    }
}

/// The keys of a top-level section, valid or not.
fn section_names(root: &Table, section: &str) -> Vec<String> {
    root.get(section)
        .and_then(toml::Value::as_table)
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default()
}

impl ConfigErrors {
    fn with_span(mut self, text: &str, span: Option<std::ops::Range<usize>>) -> ConfigErrors {
        if let (Some(span), Some(first)) = (span, self.0.first_mut()) {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            first.reason = format!("line {line}: {}", first.reason);
        }
        self
    }
}

fn read_audit(r: &mut Reader<'_>, root: &Table) -> AuditConfig {
    let mut audit = AuditConfig::default();
    let Some(t) = r.sub_table("", root, "audit") else {
        return audit;
    };
    r.reject_unknown(
        "audit",
        t,
        &[
            "enabled",
            "checkpoint_key",
            "checkpoint_interval",
            "retain",
            "revoke_types",
            "grant_types",
        ],
    );
    audit.enabled = r.opt_bool("audit", t, "enabled").unwrap_or(true);
    audit.checkpoint_key = r
        .opt_string("audit", t, "checkpoint_key")
        .filter(|k| !k.is_empty())
        .map(SecretString::new);
    if let Some(every) = r.opt_duration("audit", t, "checkpoint_interval") {
        if every < TimeDelta::seconds(1) {
            r.error("audit.checkpoint_interval", "must be at least 1s");
        }
        audit.checkpoint_interval = every;
    }
    audit.retain = r.opt_duration("audit", t, "retain");
    if audit.retain.is_some_and(|d| d < TimeDelta::days(1)) {
        r.error(
            "audit.retain",
            "must be at least 1d (auditors ask about months, not hours)",
        );
    }
    let mut extra = Vec::new();
    for (key, access) in [
        ("revoke_types", Access::Revoke),
        ("grant_types", Access::Grant),
    ] {
        for t in r.string_list("audit", t, key, false) {
            extra.push((t, access));
        }
    }
    audit.classifier = Classifier::new(extra);
    if audit.checkpoint_key.is_none() && audit.enabled {
        r.warnings.push(
            "audit: no checkpoint_key, so checkpoints are unsigned (they catch accidental truncation, not a deliberate rewrite)"
                .to_string(),
        );
    }
    audit
}

fn read_server(r: &mut Reader<'_>, root: &Table, base_dir: &Path) -> ServerConfig {
    let empty = Table::new();
    let t = r.sub_table("", root, "server").unwrap_or(&empty);
    r.reject_unknown(
        "server",
        t,
        &[
            "listen",
            "admin_listen",
            "data_dir",
            "body_timeout",
            "max_streams",
            "admin_token",
        ],
    );
    let listen_text = r
        .opt_string("server", t, "listen")
        .unwrap_or_else(|| "127.0.0.1:9477".to_string());
    let listen = listen_text.parse().unwrap_or_else(|_| {
        r.error(
            "server.listen",
            format!("{listen_text:?} is not an address (use HOST:PORT, e.g. \"127.0.0.1:9477\")"),
        );
        SocketAddr::from(([127, 0, 0, 1], 9477))
    });
    let data_dir = r
        .opt_string("server", t, "data_dir")
        .unwrap_or_else(|| "data".to_string());
    if data_dir.is_empty() {
        r.error("server.data_dir", "must not be empty");
    }
    let admin_listen = read_admin_listen(r, t, listen);
    let body_timeout = read_body_timeout(r, t);
    ServerConfig {
        listen,
        admin_listen,
        data_dir: base_dir.join(data_dir),
        body_timeout,
    }
}

/// `[server] admin_listen`: optional, and never the same socket as `listen`
/// (both would fail to bind at start, or one port would serve both sets).
fn read_admin_listen(r: &mut Reader<'_>, t: &Table, listen: SocketAddr) -> Option<SocketAddr> {
    let text = r.opt_string("server", t, "admin_listen")?;
    let Ok(addr) = text.parse::<SocketAddr>() else {
        r.error(
            "server.admin_listen",
            format!("{text:?} is not an address (use HOST:PORT, e.g. \"127.0.0.1:9478\")"),
        );
        return None;
    };
    if addr == listen && addr.port() != 0 {
        r.error(
            "server.admin_listen",
            format!("{addr} is also server.listen; use a different port"),
        );
    }
    Some(addr)
}

/// `[server] body_timeout`: default 10 s; at least 1 s (a webhook body
/// needs no less) and at most 10 min (longer would let stalled bodies hold
/// connection slots for that long).
fn read_body_timeout(r: &mut Reader<'_>, t: &Table) -> std::time::Duration {
    const DEFAULT: std::time::Duration = std::time::Duration::from_secs(10);
    let Some(d) = r.opt_duration("server", t, "body_timeout") else {
        return DEFAULT;
    };
    if d < TimeDelta::seconds(1) || d > TimeDelta::minutes(10) {
        r.error(
            "server.body_timeout",
            "must be between 1s and 10m (e.g. \"10s\")",
        );
        return DEFAULT;
    }
    d.to_std().unwrap_or(DEFAULT)
}

/// Reads `[section.NAME]` tables in name order.
fn read_named<T>(
    r: &mut Reader<'_>,
    root: &Table,
    section: &str,
    mut read: impl FnMut(&mut Reader<'_>, &str, &str, &Table) -> Option<T>,
) -> BTreeMap<String, T> {
    let mut out = BTreeMap::new();
    let Some(entries) = r.sub_table("", root, section) else {
        return out;
    };
    for (name, value) in entries {
        let path = join(section, name);
        if !valid_name(name) {
            r.error(
                &path,
                "names may use letters, digits, '_', '-' and '.', up to 64 characters",
            );
            continue;
        }
        if let Some(t) = r.table(&path, value) {
            if let Some(item) = read(r, &path, name, t) {
                out.insert(name.clone(), item);
            }
        }
    }
    out
}

fn read_calendar(
    r: &mut Reader<'_>,
    path: &str,
    name: &str,
    t: &Table,
    base_dir: &Path,
) -> Option<CalendarConfig> {
    r.reject_unknown(
        path,
        t,
        &["timezone", "weekly", "holidays", "holiday_files"],
    );
    if name == ALWAYS {
        r.error(
            path,
            "\"always\" is built in (24x7, UTC); choose another name",
        );
        return None;
    }
    let tz = r.req_string(path, t, "timezone").and_then(|zone| {
        zone.parse::<chrono_tz::Tz>().map_err(|_| {
            r.error(
                &join(path, "timezone"),
                format!("{zone:?} is not an IANA time zone (e.g. \"Asia/Tokyo\", \"Europe/London\")"),
            )
        })
        .ok()
    });
    let weekly_lines = r.string_list(path, t, "weekly", false);
    if !t.contains_key("weekly") || weekly_lines.is_empty() {
        r.error(
            &join(path, "weekly"),
            "needs at least one line such as \"mon-fri 09:00-18:00\"",
        );
    }
    let mut weekly = WeeklyHours::default();
    for (i, line) in weekly_lines.iter().enumerate() {
        match WeeklyHours::parse_lines(std::slice::from_ref(line)) {
            Ok(_) => {}
            Err(e) => r.error(&format!("{path}.weekly[{i}]"), e.to_string()),
        }
    }
    if let Ok(all) = WeeklyHours::parse_lines(&weekly_lines) {
        weekly = all;
    }
    let mut ranges = Vec::new();
    for (i, text) in r.string_list(path, t, "holidays", false).iter().enumerate() {
        match parse_holiday(text) {
            Ok(range) => ranges.push(range),
            Err(e) => r.error(&format!("{path}.holidays[{i}]"), e.to_string()),
        }
    }
    let mut files = Vec::new();
    for (i, file) in r
        .string_list(path, t, "holiday_files", false)
        .iter()
        .enumerate()
    {
        if let Some(ics) = read_ics(
            r,
            &format!("{path}.holiday_files[{i}]"),
            &base_dir.join(file),
        ) {
            files.push(ics);
        }
    }
    Some(CalendarConfig {
        name: name.to_string(),
        calendar: Arc::new(Calendar::new(tz?, weekly, Holidays::new(ranges, files))),
        weekly_lines,
    })
}

fn read_ics(r: &mut Reader<'_>, path: &str, file: &Path) -> Option<IcsCalendar> {
    // Bytes, not a String: some exporters fold lines inside a UTF-8 character.
    let bytes = std::fs::read(file)
        .map_err(|e| r.error(path, format!("cannot read {}: {e}", file.display())))
        .ok()?;
    let ics = parse_ics_bytes(&bytes)
        .map_err(|e| r.error(path, format!("{}: {e}", file.display())))
        .ok()?;
    if ics.skipped_timed_events > 0 {
        r.warnings.push(format!(
            "{path}: {} timed event(s) in {} ignored; only all-day events are holidays",
            ics.skipped_timed_events,
            file.display()
        ));
    }
    Some(ics)
}

const NOTIFIER_KINDS: &str =
    "\"email\", \"webhook\", \"pagerduty\", \"slack\", \"alertmanager\", \"log\"";
const COMMON_NOTIFIER_KEYS: [&str; 5] = [
    "kind",
    "backoff_initial",
    "backoff_max",
    "give_up_after",
    "timeout",
];

fn read_notifier(
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

fn read_escalate(r: &mut Reader<'_>, path: &str, t: &Table) -> Vec<EscalationStep> {
    let key_path = join(path, "escalate");
    let Some(value) = t.get("escalate") else {
        return Vec::new();
    };
    let Some(items) = value.as_array() else {
        r.error(
            &key_path,
            "expected a list of { after = \"2h\", notify = [\"NAME\"] }",
        );
        return Vec::new();
    };
    let mut steps = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let step_path = format!("{key_path}[{i}]");
        let Some(st) = r.table(&step_path, item) else {
            continue;
        };
        r.reject_unknown(&step_path, st, &["after", "notify"]);
        let after = if st.contains_key("after") {
            r.opt_duration(&step_path, st, "after")
        } else {
            r.error(&join(&step_path, "after"), "is required (e.g. \"2h\")");
            None
        };
        if after.is_some_and(|d| d <= TimeDelta::zero()) {
            r.error(&join(&step_path, "after"), "must be longer than zero");
        }
        let notify = r.string_list(&step_path, st, "notify", false);
        if notify.is_empty() {
            r.error(&join(&step_path, "notify"), "needs at least one notifier");
        }
        if let Some(after) = after {
            steps.push(EscalationStep { after, notify });
        }
    }
    steps
}

fn read_stream(r: &mut Reader<'_>, path: &str, name: &str, t: &Table) -> Option<StreamConfig> {
    r.reject_unknown(
        path,
        t,
        &[
            "calendar",
            "silence_threshold",
            "max_silence",
            "notify",
            "ingest",
            "event_types",
            "repeat_interval",
            "escalate",
            "maintenance",
        ],
    );
    let calendar = r.req_string(path, t, "calendar");
    let threshold = if t.contains_key("silence_threshold") {
        r.opt_duration(path, t, "silence_threshold")
    } else {
        r.error(
            &join(path, "silence_threshold"),
            "is required (e.g. \"6h\")",
        );
        None
    };
    let max_silence = r.opt_duration(path, t, "max_silence");
    for (key, value) in [
        ("silence_threshold", threshold),
        ("max_silence", max_silence),
    ] {
        if value.is_some_and(|d| d <= TimeDelta::zero()) {
            r.error(&join(path, key), "must be longer than zero");
        }
    }
    let notify = r.string_list(path, t, "notify", false);
    let ingest = read_ingest(r, path, t);
    let event_types = r.string_list(path, t, "event_types", false);
    let repeat_interval = r
        .opt_duration(path, t, "repeat_interval")
        .filter(|d| *d > TimeDelta::zero());
    let escalate = read_escalate(r, path, t);
    let maintenance = maintenance::read(r, path, t);
    // Placeholders keep the stream in the map after a field error, so its
    // references are still checked; any error discards the whole config.
    Some(StreamConfig {
        name: name.to_string(),
        calendar: calendar.unwrap_or_else(|| ALWAYS.to_string()),
        policy: SilencePolicy {
            threshold: threshold.unwrap_or_else(|| TimeDelta::hours(1)),
            max_silence,
        },
        notify,
        ingest,
        event_filter: EventFilter::new(event_types),
        repeat_interval,
        escalate,
        maintenance,
    })
}

fn read_svix(r: &mut Reader<'_>, path: &str, name: &str, t: &Table) -> Option<SvixConfig> {
    r.reject_unknown(
        path,
        t,
        &[
            "secret",
            "streams",
            "notify",
            "endpoints",
            "admin_token",
            "clear_on",
            "group_window",
        ],
    );
    let mut keys = Vec::new();
    let mut switched_off = false;
    for (i, secret) in r
        .string_list(path, t, "secret", true)
        .into_iter()
        .enumerate()
    {
        let secret = r.trim_secret(&format!("{path}.secret[{i}]"), secret);
        // As for ingest secrets: an empty value (`${VAR:-}` with VAR unset)
        // switches the route off; every delivery is refused with 401.
        if secret.is_empty() {
            r.warnings.push(format!(
                "{path}.secret[{i}] is empty; operational webhooks to this source are refused"
            ));
            switched_off = true;
            continue;
        }
        match SecretKey::parse(&secret) {
            Ok(k) => keys.push(k),
            Err(e) => r.error(&format!("{path}.secret[{i}]"), e.to_string()),
        }
    }
    if keys.is_empty()
        && !switched_off
        && !r
            .errors
            .iter()
            .any(|e| e.path.starts_with(&join(path, "secret")))
    {
        r.error(
            &join(path, "secret"),
            "is required: the operational endpoint's whsec_ secret",
        );
    }
    let streams = r.string_list(path, t, "streams", false);
    if streams.is_empty() {
        r.error(
            &join(path, "streams"),
            "needs at least one stream these endpoints feed",
        );
    }
    let mut endpoints = BTreeMap::new();
    if let Some(map) = r.sub_table(path, t, "endpoints") {
        let map_path = join(path, "endpoints");
        for (endpoint, value) in map {
            if let Some(stream) = r.string(&join(&map_path, endpoint), value) {
                endpoints.insert(endpoint.clone(), stream);
            }
        }
    }
    let clear_on = r.string_list(path, t, "clear_on", false);
    for (i, c) in clear_on.iter().enumerate() {
        if c != "endpoint.updated" && c != "endpoint.deleted" {
            r.error(&format!("{path}.clear_on[{i}]"), format!("{c:?} cannot clear a disabled endpoint (use \"endpoint.updated\" or \"endpoint.deleted\")"));
        }
    }
    let group_window = r
        .opt_duration(path, t, "group_window")
        .unwrap_or(TimeDelta::seconds(30));
    Some(SvixConfig {
        name: name.to_string(),
        verifier: Arc::new(Verifier::new(keys)),
        streams,
        notify: r.string_list(path, t, "notify", false),
        endpoints,
        admin_token: r
            .opt_string(path, t, "admin_token")
            .map(|s| r.trim_secret(&join(path, "admin_token"), s))
            .filter(|s| !s.is_empty())
            .map(SecretString::new),
        clear_on,
        group_window,
    })
}

fn read_ingest(r: &mut Reader<'_>, stream_path: &str, stream: &Table) -> IngestConfig {
    let path = join(stream_path, "ingest");
    let Some(t) = r.sub_table(stream_path, stream, "ingest") else {
        return IngestConfig::default();
    };
    let allowed: Vec<&str> = ["webhook_secret", "token"]
        .into_iter()
        .chain(providers::PROVIDER_KEYS.iter().copied())
        .collect();
    r.reject_unknown(&path, t, &allowed);
    let provider = providers::read(r, &path, t);
    let standard_secrets = if matches!(provider, providers::ProviderConfig::Standard) {
        r.string_list(&path, t, "webhook_secret", true)
    } else {
        Vec::new()
    };
    let mut keys = Vec::new();
    for (i, secret) in standard_secrets.into_iter().enumerate() {
        let secret = r.trim_secret(&format!("{path}.webhook_secret[{i}]"), secret);
        // An empty value (e.g. `${VAR:-}` with VAR unset) switches the
        // method off; the stream then fires, which is the safe direction.
        if secret.trim().is_empty() {
            r.warnings.push(format!(
                "{path}.webhook_secret[{i}] is empty; signed webhooks are off"
            ));
            continue;
        }
        match SecretKey::parse(&secret) {
            Ok(key) => keys.push(key),
            // The error text never echoes the secret itself.
            Err(e) => r.error(&format!("{path}.webhook_secret[{i}]"), e.to_string()),
        }
    }
    let mut tokens = Vec::new();
    for (i, token) in r
        .string_list(&path, t, "token", true)
        .into_iter()
        .enumerate()
    {
        // Trimmed like webhook secrets: the presented token is trimmed too
        // (`bearer_matches`), so a configured one with a newline never matched.
        let token = r.trim_secret(&format!("{path}.token[{i}]"), token);
        if token.is_empty() {
            r.warnings
                .push(format!("{path}.token[{i}] is empty; app reports are off"));
        } else {
            tokens.push(SecretString::new(token));
        }
    }
    IngestConfig {
        verifier: (!keys.is_empty()).then(|| Arc::new(Verifier::new(keys))),
        provider,
        tokens,
    }
}

struct Declared {
    calendars: Vec<String>,
    notifiers: Vec<String>,
}

fn check_references(r: &mut Reader<'_>, config: &mut Config, declared: &Declared) {
    for stream in config.streams.values() {
        let path = join("streams", &stream.name);
        if stream.calendar != ALWAYS && !declared.calendars.contains(&stream.calendar) {
            let known: Vec<&str> = std::iter::once(ALWAYS)
                .chain(config.calendars.keys().map(String::as_str))
                .collect();
            r.error(
                &join(&path, "calendar"),
                format!(
                    "no calendar named {:?} (defined: {})",
                    stream.calendar,
                    known.join(", ")
                ),
            );
        }
        for (i, notifier) in stream.notify.iter().enumerate() {
            if !declared.notifiers.contains(notifier) {
                r.error(
                    &format!("{path}.notify[{i}]"),
                    format!("no notifier named {notifier:?} (define [notifiers.{notifier}])"),
                );
            }
        }
        for (i, step) in stream.escalate.iter().enumerate() {
            for (j, notifier) in step.notify.iter().enumerate() {
                if !declared.notifiers.contains(notifier) {
                    r.error(
                        &format!("{path}.escalate[{i}].notify[{j}]"),
                        format!("no notifier named {notifier:?} (define [notifiers.{notifier}])"),
                    );
                }
            }
        }
        if stream.notify.is_empty() {
            config.warnings.push(format!(
                "{path}: no notifiers; it will only show in metrics and /v1/status"
            ));
        }
        if stream.ingest.verifier.is_none()
            && stream.ingest.tokens.is_empty()
            && !stream.ingest.provider.has_credentials()
        {
            let credential = stream.ingest.provider.credential_key();
            config.warnings.push(format!(
                "{path}.ingest: no {credential} or token, so nothing can report to it and it will fire"
            ));
        }
    }
    for svix in config.svix.values() {
        let path = join("svix", &svix.name);
        let mut refs: Vec<(String, &String)> = svix
            .streams
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("{path}.streams[{i}]"), s))
            .collect();
        refs.extend(
            svix.endpoints
                .iter()
                .map(|(e, s)| (format!("{path}.endpoints.{e}"), s)),
        );
        for (key, stream) in refs {
            if !config.streams.contains_key(stream) {
                r.error(&key, format!("no stream named {stream:?}"));
            }
        }
        for (i, notifier) in svix.notify.iter().enumerate() {
            if !declared.notifiers.contains(notifier) {
                r.error(
                    &format!("{path}.notify[{i}]"),
                    format!("no notifier named {notifier:?} (define [notifiers.{notifier}])"),
                );
            }
        }
    }
    if config.streams.is_empty() && config.templates.is_empty() {
        config
            .warnings
            .push("no [streams.NAME] defined: nothing is watched".to_string());
    }
}

#[cfg(test)]
mod tests;
