//! `[streams.X.ingest] provider = "…"` and each provider's own keys.
//!
//! The provider decides how `POST /v1/streams/X/webhook` authenticates and reads a
//! delivery. Keys that belong to another provider are errors rather than silently ignored:
//! a `client_state` on a WorkOS stream means the operator expected a check that would
//! never run.

use chrono::TimeDelta;
use toml::Table;

use super::reader::{join, Reader};
use super::secret::SecretString;
use crate::ingest::providers::entra::MAX_CLIENT_STATE_LEN;
use crate::ingest::providers::workos::WorkosKey;
use crate::ingest::providers::{self, auth0, entra, google, okta, workos, Provider};

/// Keys of `[streams.X.ingest]` that only some providers use: `provider` and every key in
/// an `ingest::providers::ALL` spec (a test keeps the two equal).
pub const PROVIDER_KEYS: &[&str] = &[
    "provider",
    "authorization",
    "client_state",
    "channel_token",
    "expiry_warning",
];

/// Entra subscriptions for users and groups live at most about 29 days; a day's warning
/// leaves time to renew during business hours.
const ENTRA_EXPIRY_WARNING: TimeDelta = TimeDelta::hours(24);
/// Google channels live at most about six hours, so an hour is proportionate.
const GOOGLE_EXPIRY_WARNING: TimeDelta = TimeDelta::hours(1);

/// How a stream's webhook route authenticates and reads deliveries. Everything but the
/// credentials' storage lives in the provider's module under `ingest::providers`, reached
/// through [`ProviderConfig::intake`].
#[derive(Debug, Clone, Default)]
pub enum ProviderConfig {
    /// Standard Webhooks / Svix signatures (`webhook_secret`), the default.
    #[default]
    Standard,
    Workos {
        keys: Vec<WorkosKey>,
    },
    Okta {
        authorization: Vec<SecretString>,
    },
    Auth0 {
        authorization: Vec<SecretString>,
    },
    Entra {
        client_state: Vec<SecretString>,
        expiry_warning: TimeDelta,
    },
    Google {
        channel_token: Vec<SecretString>,
        expiry_warning: TimeDelta,
    },
}

impl ProviderConfig {
    /// The provider's intake over these credentials; `None` for the standard provider,
    /// whose deliveries `http::ingest` verifies with the stream's `verifier`. The one match
    /// on every provider.
    pub fn intake(&self) -> Option<Box<dyn Provider + '_>> {
        Some(match self {
            ProviderConfig::Standard => return None,
            ProviderConfig::Workos { keys } => Box::new(workos::Workos { keys }),
            ProviderConfig::Okta { authorization } => Box::new(okta::Okta {
                authorization: exposed(authorization),
            }),
            ProviderConfig::Auth0 { authorization } => Box::new(auth0::Auth0 {
                authorization: exposed(authorization),
            }),
            ProviderConfig::Entra { client_state, .. } => Box::new(entra::Entra {
                client_state: exposed(client_state),
            }),
            ProviderConfig::Google { channel_token, .. } => Box::new(google::Google {
                channel_token: exposed(channel_token),
            }),
        })
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
}

fn exposed(values: &[SecretString]) -> Vec<&str> {
    values.iter().map(SecretString::expose).collect()
}

/// Reads `provider` and the keys it owns from an `ingest` table at `path`. `webhook_secret`
/// stays with the caller for the standard provider; for `workos` it is read here, because
/// a WorkOS secret is a plain string, not a `whsec_` key.
pub fn read(r: &mut Reader<'_>, path: &str, t: &Table) -> ProviderConfig {
    let name = r
        .opt_string(path, t, "provider")
        .unwrap_or_else(|| "standard".to_owned());
    let owned: &[&str] = if name == "standard" {
        &[]
    } else if let Some(spec) = providers::ALL.iter().find(|s| s.name == name) {
        spec.keys
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
    for key in &PROVIDER_KEYS[1..] {
        if t.contains_key(*key) && !owned.contains(key) {
            r.error(
                &join(path, key),
                format!("does not apply to provider = {name:?}"),
            );
        }
    }
    match name.as_str() {
        "workos" => ProviderConfig::Workos {
            keys: workos_keys(r, path, t),
        },
        "okta" => ProviderConfig::Okta {
            authorization: shared_values(r, path, t, "authorization", usize::MAX),
        },
        "auth0" => ProviderConfig::Auth0 {
            authorization: shared_values(r, path, t, "authorization", usize::MAX),
        },
        "entra" => ProviderConfig::Entra {
            client_state: shared_values(r, path, t, "client_state", MAX_CLIENT_STATE_LEN),
            expiry_warning: r
                .opt_duration(path, t, "expiry_warning")
                .unwrap_or(ENTRA_EXPIRY_WARNING),
        },
        "google" => ProviderConfig::Google {
            channel_token: shared_values(r, path, t, "channel_token", usize::MAX),
            expiry_warning: r
                .opt_duration(path, t, "expiry_warning")
                .unwrap_or(GOOGLE_EXPIRY_WARNING),
        },
        _ => ProviderConfig::Standard,
    }
}

fn workos_keys(r: &mut Reader<'_>, path: &str, t: &Table) -> Vec<WorkosKey> {
    let mut keys = Vec::new();
    for (i, secret) in r
        .string_list(path, t, "webhook_secret", true)
        .into_iter()
        .enumerate()
    {
        let secret = r.trim_secret(&format!("{path}.webhook_secret[{i}]"), secret);
        if secret.is_empty() {
            r.warnings.push(format!(
                "{path}.webhook_secret[{i}] is empty; WorkOS webhooks are off"
            ));
            continue;
        }
        match WorkosKey::parse(&secret) {
            Ok(key) => keys.push(key),
            Err(e) => r.error(&format!("{path}.webhook_secret[{i}]"), e),
        }
    }
    keys
}

/// A shared value sent verbatim by the provider (a header value, a `clientState`, a channel
/// token); one or several for rotation. Surrounding whitespace is dropped (with a notice),
/// as for secrets: it arrives from files and environment variables, never from the provider.
fn shared_values(
    r: &mut Reader<'_>,
    path: &str,
    t: &Table,
    key: &str,
    max_len: usize,
) -> Vec<SecretString> {
    let mut values = Vec::new();
    for (i, value) in r.string_list(path, t, key, true).into_iter().enumerate() {
        let trimmed = r.trim_secret(&format!("{path}.{key}[{i}]"), value);
        if trimmed.is_empty() {
            r.warnings.push(format!(
                "{path}.{key}[{i}] is empty; this provider's webhooks are off"
            ));
        } else if trimmed.len() > max_len {
            r.error(
                &format!("{path}.{key}[{i}]"),
                format!("is longer than {max_len} characters, which the provider refuses"),
            );
        } else {
            values.push(SecretString::new(trimmed));
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `config::ingest` allows exactly these keys besides its own, so a provider's new key
    /// must be listed here as well as in its spec.
    #[test]
    fn provider_keys_are_the_specs_keys() {
        let mut from_specs: Vec<&str> = providers::ALL
            .iter()
            .flat_map(|s| s.keys.iter().copied())
            .collect();
        from_specs.sort_unstable();
        from_specs.dedup();
        let mut listed = PROVIDER_KEYS[1..].to_vec();
        listed.sort_unstable();
        assert_eq!(listed, from_specs);
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
