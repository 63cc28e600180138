//! `[streams.X.ingest] provider = "…"` and each provider's own keys.
//!
//! The provider decides how `POST /v1/streams/X/webhook` authenticates and reads a
//! delivery. Keys that belong to another provider are errors rather than silently ignored:
//! a `client_state` on a WorkOS stream means the operator expected a check that would
//! never run.

use std::fmt;
use std::sync::Arc;

use chrono::TimeDelta;
use toml::Table;

use super::reader::{join, Reader};
use crate::ingest::providers::{self, Provider, Spec};

/// Keys of `[streams.X.ingest]` that only some providers use: `provider` and every key in
/// an `ingest::providers::ALL` spec, so a provider's new key is allowed where its spec lists
/// it and refused everywhere else without being listed here too.
pub fn provider_keys() -> &'static [&'static str] {
    // Built once: `[ingest]` of every stream asks for it, and a fresh list
    // per stream was 20,000 short-lived allocations at 10,000 streams.
    static KEYS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = vec!["provider"];
        for key in providers::ALL.iter().flat_map(|s| s.keys) {
            if !keys.contains(key) {
                keys.push(key);
            }
        }
        keys
    })
}

/// How a stream's webhook route authenticates and reads deliveries. Nothing here names a
/// provider: each one's keys, defaults and intake live in its module under
/// `ingest::providers`, described by its [`Spec`].
#[derive(Clone, Default)]
pub enum ProviderConfig {
    /// Standard Webhooks / Svix signatures (`webhook_secret`), the default.
    #[default]
    Standard,
    /// A provider of `ingest::providers::ALL`, built over the stream's credentials.
    Native {
        intake: Arc<dyn Provider>,
        /// How long before a subscription expires to warn; `None` for a provider without
        /// subscriptions.
        expiry_warning: Option<TimeDelta>,
    },
}

/// Names the provider only: its intake holds the credentials.
impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderConfig::Standard => f.write_str("Standard"),
            ProviderConfig::Native {
                intake,
                expiry_warning,
            } => f
                .debug_struct("Native")
                .field("provider", &intake.spec().name)
                .field("expiry_warning", expiry_warning)
                .finish(),
        }
    }
}

impl ProviderConfig {
    /// The provider's intake over these credentials; `None` for the standard provider,
    /// whose deliveries `http::ingest` verifies with the stream's `verifier`.
    pub fn intake(&self) -> Option<&dyn Provider> {
        match self {
            ProviderConfig::Standard => None,
            ProviderConfig::Native { intake, .. } => Some(intake.as_ref()),
        }
    }

    pub fn name(&self) -> &'static str {
        self.intake().map_or("standard", |p| p.spec().name)
    }

    /// The key that holds this provider's credential, for messages.
    pub fn credential_key(&self) -> &'static str {
        self.intake()
            .map_or("webhook_secret", |p| p.spec().credential_key)
    }

    /// Whether a non-standard provider has the credentials to accept anything. (The
    /// standard provider's credentials are the stream's `verifier`.)
    pub fn has_credentials(&self) -> bool {
        self.intake().is_some_and(|p| p.has_credentials())
    }

    /// How long before a subscription expires to warn; `None` when the provider has no
    /// subscriptions that expire.
    pub fn expiry_warning(&self) -> Option<TimeDelta> {
        match self {
            ProviderConfig::Standard => None,
            ProviderConfig::Native { expiry_warning, .. } => *expiry_warning,
        }
    }
}

/// Reads `provider` and the keys it owns from an `ingest` table at `path`. `webhook_secret`
/// stays with the caller for the standard provider; for a provider whose credential key it
/// is (`workos`) it is read here, because that secret is not a `whsec_` key.
pub fn read(r: &mut Reader<'_>, path: &str, t: &Table) -> ProviderConfig {
    let name = r
        .opt_string(path, t, "provider")
        .unwrap_or_else(|| "standard".to_owned());
    let spec: Option<&'static Spec> = if name == "standard" {
        None
    } else if let Some(spec) = providers::ALL.iter().find(|s| s.name == name) {
        Some(*spec)
    } else {
        let known: Vec<&str> = std::iter::once("standard")
            .chain(providers::ALL.iter().map(|s| s.name))
            .collect();
        r.error(
            &join(path, "provider"),
            format!("unknown provider {name:?} (known: {})", known.join(", ")),
        );
        return ProviderConfig::Standard;
    };
    let owned = spec.map_or(&[][..], |s| s.keys);
    for key in &provider_keys()[1..] {
        if t.contains_key(*key) && !owned.contains(key) {
            r.error(
                &join(path, key),
                format!("does not apply to provider = {name:?}"),
            );
        }
    }
    let Some(spec) = spec else {
        return ProviderConfig::Standard;
    };
    let (positions, values) = credential_values(r, path, t, spec.credential_key);
    let (intake, refused) = (spec.intake)(values);
    for (index, reason) in refused {
        let position = positions[index];
        r.error(
            &format!("{path}.{}[{position}]", spec.credential_key),
            reason,
        );
    }
    ProviderConfig::Native {
        intake,
        expiry_warning: spec
            .expiry_warning
            .map(|default| r.opt_duration(path, t, "expiry_warning").unwrap_or(default)),
    }
}

/// The values of a provider's credential key (one or several, for rotation), each with its
/// position in the list for messages. Surrounding whitespace is dropped (with a notice), as
/// for secrets: it arrives from files and environment variables, never from the provider.
/// An empty value is left out with a warning, so a `${VAR:-}` left unset switches the
/// provider's webhooks off (the stream then goes quiet and pages, the safe direction).
fn credential_values(
    r: &mut Reader<'_>,
    path: &str,
    t: &Table,
    key: &str,
) -> (Vec<usize>, Vec<String>) {
    let mut positions = Vec::new();
    let mut values = Vec::new();
    for (i, value) in r.string_list(path, t, key, true).into_iter().enumerate() {
        let trimmed = r.trim_secret(&format!("{path}.{key}[{i}]"), value);
        if trimmed.is_empty() {
            r.warnings.push(format!(
                "{path}.{key}[{i}] is empty; this provider's webhooks are off"
            ));
        } else {
            positions.push(i);
            values.push(trimmed);
        }
    }
    (positions, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider's default expiry warning and its `expiry_warning` key come together: a
    /// default without the key could not be changed, a key without a default would be
    /// read and ignored.
    #[test]
    fn expiry_warning_is_a_key_exactly_when_it_has_a_default() {
        for spec in providers::ALL {
            assert_eq!(
                spec.keys.contains(&"expiry_warning"),
                spec.expiry_warning.is_some(),
                "{}",
                spec.name
            );
        }
    }

    /// Every spec the reader accepts builds its own intake, under its own name.
    #[test]
    fn every_spec_reads_back_as_itself() {
        for spec in providers::ALL {
            let table: Table = toml::from_str(&format!("provider = {:?}", spec.name)).unwrap();
            let env = |_: &str| None;
            let mut r = Reader::new(&env);
            let config = read(&mut r, "streams.idp.ingest", &table);
            assert_eq!(config.name(), spec.name);
            assert_eq!(config.credential_key(), spec.credential_key);
        }
    }
}
