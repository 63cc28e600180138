//! Configuration: reads the TOML file, expands `${VAR}`, validates every
//! key and cross-reference, and builds the domain objects (calendars,
//! policies) the service runs on. A `Config` that exists is valid.

mod adaptive;
mod audit;
mod calendars;
pub mod crosscheck;
pub(crate) mod env;
pub mod forward;
mod ingest;
pub mod maintenance;
mod notifier_tables;
pub mod notifiers;
pub mod providers;
mod reader;
pub mod reconcile;
mod references;
pub mod secret;
mod server;
pub mod store;
mod streams;
mod svix;
pub mod templates;
pub mod watchdog;

// Each section's types live beside its reader; these keep every
// `crate::config::X` path the rest of the crate uses.
pub use audit::AuditConfig;
pub use calendars::{CalendarConfig, ALWAYS};
pub use ingest::IngestConfig;
// Every public item, so a new notifier kind's settings type needs no line here.
pub use notifier_tables::*;
pub use server::{RunbookUrl, ServerConfig, DEFAULT_RUNBOOK_BASE_URL};
pub use streams::{EscalationStep, StreamConfig};
pub use svix::SvixConfig;

use reader::{join, valid_name, Reader};
use references::{check_references, Declared};
// `tests` (unchanged by the split) names it through `use super::*`.
#[cfg(test)]
use chrono::TimeDelta;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use toml::Table;

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
    /// `[store]`: SQLite in `data_dir` (default) or a PostgreSQL URL.
    pub store: store::StoreConfig,
    /// `[heartbeat]`, `[server] store_alarm_after`/`emergency_notify`,
    /// `[notifiers.X] fallback`/`fallback_after` (issue #19).
    pub watchdog: watchdog::WatchdogConfig,
    /// The file it was loaded from, absolute when it can be made so (empty
    /// when parsed from text): pages print commands that name it.
    pub source: String,
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
    let mut config = parse(&text, base, &|name| std::env::var(name).ok())?;
    config.source = std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string();
    Ok(config)
}

/// Reads only `[server]` (listeners, data directory) with the same parser
/// `load` uses, for commands that only need to find the running server
/// (`hushwatch status`, `hushwatch silence`). Other sections are not read,
/// so an unset `${VAR}` secret elsewhere (a cron job has none) is no error.
pub fn load_server(path: &Path) -> Result<server::ServerConfig, ConfigErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            path: String::new(),
            reason: format!("cannot read config file {}: {e}", path.display()),
        }])
    })?;
    let root: Table = text.parse().map_err(|e: toml::de::Error| {
        ConfigErrors(vec![ConfigError {
            path: String::new(),
            reason: format!("not valid TOML: {}", e.message().trim()),
        }])
        .with_span(&text, e.span())
    })?;
    let env = |name: &str| std::env::var(name).ok();
    let mut r = Reader::new(&env);
    let base = path.parent().unwrap_or(Path::new("."));
    let server = server::read_server(&mut r, &root, base);
    if r.errors.is_empty() {
        Ok(server)
    } else {
        Err(ConfigErrors(r.errors))
    }
}

/// Validates config text. Relative paths are resolved against `base_dir`.
pub fn parse(
    text: &str,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    parse_with(&mut Reader::new(env), text, base_dir)
}

/// `parse`, plus each table's allowed keys, set and not set (see
/// `Reader::key_uses`).
#[cfg(test)]
pub(crate) fn parse_reporting_keys(
    text: &str,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> (Result<Config, ConfigErrors>, Vec<reader::KeyUse>) {
    let mut r = Reader::new(env);
    r.key_uses = Some(Vec::new());
    let result = parse_with(&mut r, text, base_dir);
    (result, r.key_uses.take().unwrap_or_default())
}

fn parse_with(r: &mut Reader<'_>, text: &str, base_dir: &Path) -> Result<Config, ConfigErrors> {
    let mut root: Table = text.parse().map_err(|e: toml::de::Error| {
        ConfigErrors(vec![ConfigError {
            path: String::new(),
            reason: format!("not valid TOML: {}", e.message().trim()),
        }])
        .with_span(text, e.span())
    })?;
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
            "store",
            "heartbeat",
        ],
    );
    let patterns = templates::take_patterns(&mut root);
    let server = server::read_server(r, &root, base_dir);
    let audit = audit::read_audit(r, &root);
    let calendars = read_named(r, &root, "calendars", |r, path, name, t| {
        calendars::read_calendar(r, path, name, t, base_dir)
    });
    let notifiers = read_named(r, &root, "notifiers", |r, path, name, t| {
        notifier_tables::read_notifier(r, path, name, t, base_dir)
    });
    let streams = read_named(r, &root, "streams", streams::read_stream);
    let svix = read_named(r, &root, "svix", svix::read_svix);
    let templates = templates::read(
        r,
        &root,
        patterns,
        &section_names(&root, "calendars"),
        &section_names(&root, "notifiers"),
        streams::read_stream,
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
        store: store::read(r, &root, base_dir),
        watchdog: watchdog::read(r, &root, &section_names(&root, "notifiers")),
        source: String::new(),
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
    check_references(r, &mut config, &declared);
    crosscheck::check_audit(r, &config);
    let forwards = config
        .streams
        .values()
        .chain(config.templates.templates.values())
        .any(|s| s.forward.is_some());
    if forwards && !config.store.sealer.is_on() {
        config.warnings.push(
            "store.encryption_key is not set: relay bodies (streams with forward) and subject ids are stored in plaintext"
                .to_string(),
        );
    }
    if r.errors.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors(std::mem::take(&mut r.errors)))
    }
}

/// The keys of a top-level section, valid or not.
fn section_names(root: &Table, section: &str) -> Vec<String> {
    root.get(section)
        .and_then(toml::Value::as_table)
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default()
}

impl Config {
    /// The config path a page's commands name (`--config`), quoted for a
    /// POSIX shell when it needs it: the file this config was loaded from,
    /// or the packaged default when it was parsed from text.
    pub fn path_for_commands(&self) -> String {
        let path = if self.source.is_empty() {
            crate::domain::forward::DEFAULT_CONFIG_PATH
        } else {
            self.source.as_str()
        };
        crate::domain::forward::shell_word(path)
    }
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

#[cfg(test)]
mod tests;
