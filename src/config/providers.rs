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

/// Every provider name `check` accepts, in the order the error lists them.
pub const PROVIDERS: &[&str] = &["standard", "workos", "okta", "auth0", "entra", "google"];

/// Keys of `[streams.X.ingest]` that only some providers use.
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

/// How a stream's webhook route authenticates and reads deliveries.
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
    pub fn name(&self) -> &'static str {
        match self {
            ProviderConfig::Standard => "standard",
            ProviderConfig::Workos { .. } => "workos",
            ProviderConfig::Okta { .. } => "okta",
            ProviderConfig::Auth0 { .. } => "auth0",
            ProviderConfig::Entra { .. } => "entra",
            ProviderConfig::Google { .. } => "google",
        }
    }

    /// The key that holds this provider's credential, for messages.
    pub fn credential_key(&self) -> &'static str {
        match self {
            ProviderConfig::Standard | ProviderConfig::Workos { .. } => "webhook_secret",
            ProviderConfig::Okta { .. } | ProviderConfig::Auth0 { .. } => "authorization",
            ProviderConfig::Entra { .. } => "client_state",
            ProviderConfig::Google { .. } => "channel_token",
        }
    }

    /// Whether a non-standard provider has the credentials to accept anything. (The
    /// standard provider's credentials are the stream's `verifier`.)
    pub fn has_credentials(&self) -> bool {
        match self {
            ProviderConfig::Standard => false,
            ProviderConfig::Workos { keys } => !keys.is_empty(),
            ProviderConfig::Okta { authorization } | ProviderConfig::Auth0 { authorization } => {
                !authorization.is_empty()
            }
            ProviderConfig::Entra { client_state, .. } => !client_state.is_empty(),
            ProviderConfig::Google { channel_token, .. } => !channel_token.is_empty(),
        }
    }
}

/// Reads `provider` and the keys it owns from an `ingest` table at `path`. `webhook_secret`
/// stays with the caller for the standard provider; for `workos` it is read here, because
/// a WorkOS secret is a plain string, not a `whsec_` key.
pub fn read(r: &mut Reader<'_>, path: &str, t: &Table) -> ProviderConfig {
    let name = r
        .opt_string(path, t, "provider")
        .unwrap_or_else(|| "standard".to_owned());
    let owned: &[&str] = match name.as_str() {
        "standard" => &[],
        "workos" => &[],
        "okta" | "auth0" => &["authorization"],
        "entra" => &["client_state", "expiry_warning"],
        "google" => &["channel_token", "expiry_warning"],
        other => {
            r.error(
                &join(path, "provider"),
                format!(
                    "unknown provider {other:?} (known: {})",
                    PROVIDERS.join(", ")
                ),
            );
            return ProviderConfig::Standard;
        }
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
