//! `[streams.NAME.ingest]`: how a stream authenticates what reports to it
//! (Standard Webhooks secrets, bearer tokens, or a provider's own keys).

use super::providers;
use super::reader::{join, Reader};
use super::secret::SecretString;
use crate::ingest::signature::{SecretKey, Verifier};
use std::sync::Arc;
use toml::Table;

#[derive(Debug, Clone, Default)]
pub struct IngestConfig {
    /// Present when `webhook_secret` is set with the standard provider: verifies signed
    /// webhooks.
    pub verifier: Option<Arc<Verifier>>,
    /// How the webhook route authenticates and reads deliveries.
    pub provider: providers::ProviderConfig,
    pub tokens: Vec<SecretString>,
}

pub(super) fn read_ingest(r: &mut Reader<'_>, stream_path: &str, stream: &Table) -> IngestConfig {
    let path = join(stream_path, "ingest");
    let Some(t) = r.sub_table(stream_path, stream, "ingest") else {
        return IngestConfig::default();
    };
    let allowed: Vec<&str> = ["webhook_secret", "token"]
        .into_iter()
        .chain(providers::provider_keys().iter().copied())
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
