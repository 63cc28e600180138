//! `[streams.X.crosscheck]` (also in `[templates.NAME]`): ask the identity
//! provider's own API what it did, and page what no webhook told us
//! (docs/src/crosscheck.md). `check` reads this with the parsers the poller
//! uses: the URL through `notifiers::http_target` (the client's own URI
//! check), durations through the one duration parser, the provider through
//! `domain::crosscheck::Provider::parse`.
//!
//! `api_key` is a Bearer secret: it is held as a `SecretString`, and no
//! error or warning here ever quotes it.

use super::providers::ProviderConfig;
use super::reader::{join, Reader};
use super::secret::SecretString;
use crate::domain::crosscheck::Provider;
use chrono::TimeDelta;
use toml::Table;

#[derive(Debug, Clone)]
pub struct CrosscheckConfig {
    pub provider: Provider,
    /// The API root without a trailing `/` (`https://api.clerk.com/v1`);
    /// request paths are appended to it. Never carries userinfo.
    pub api_url: String,
    /// Sent as `Authorization: Bearer …`; never logged or shown.
    pub api_key: SecretString,
    /// Wall-clock time between two polls.
    pub every: TimeDelta,
    /// How late a webhook may still arrive before a change counts as missed.
    pub grace: TimeDelta,
    /// Relay streams only: deliver what was missed to the app.
    pub heal: bool,
    /// WorkOS and Auth0: the event types checked (never empty for them;
    /// empty for Clerk, whose changes are read from state listings).
    pub types: Vec<String>,
    /// Auth0 without `api_key`: the Machine-to-Machine application whose
    /// client-credentials token (`POST <api_url>/oauth/token`) reads the
    /// logs. Exactly one of `api_key` and this pair is set for Auth0.
    pub client_id: Option<String>,
    /// Its secret; never logged or shown.
    pub client_secret: Option<SecretString>,
    /// Entra only: the app registration that signs in to Microsoft Graph
    /// (`api_key` is empty then).
    pub entra: Option<EntraCredentials>,
}

/// `provider = "entra"`: a client-credentials sign-in (Microsoft identity
/// platform, learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow).
#[derive(Debug, Clone)]
pub struct EntraCredentials {
    pub tenant_id: String,
    pub client_id: String,
    /// Never logged or shown; sent only in the token request's form body.
    pub client_secret: SecretString,
    /// Where tokens come from (no userinfo, no query).
    pub token_url: String,
}

/// The keys of the table (listed once: `reject_unknown` and the docs test).
pub const KEYS: &[&str] = &[
    "provider",
    "api_url",
    "api_key",
    "every",
    "grace",
    "heal",
    "types",
    "tenant_id",
    "client_id",
    "client_secret",
    "token_url",
];

/// The keys only `provider = "entra"` takes.
/// Keys only an Entra table takes (`client_id` and `client_secret` are
/// Auth0's too).
const ENTRA_ONLY_KEYS: &[&str] = &["tenant_id", "token_url"];

/// `every` when unset. Clerk's listing of 100,000 members costs ~400
/// requests, so a poll every 15 minutes stays far below its rate limit.
pub const DEFAULT_EVERY: TimeDelta = TimeDelta::minutes(15);
/// `grace` when unset: webhooks are retried for a few minutes at first.
pub const DEFAULT_GRACE: TimeDelta = TimeDelta::minutes(10);
/// Okta: an `every` below this may exceed the smallest plan's 20 requests
/// a minute on `/api/v1/logs` when a poll makes its 10 (a warning).
pub const OKTA_MIN_QUIET_EVERY: TimeDelta = TimeDelta::seconds(30);
/// Longest `every` for Entra: a Graph delta link expires 7 days after it
/// was issued, and a poll a day keeps a few failed polls from losing it.
pub const ENTRA_MAX_EVERY: TimeDelta = TimeDelta::days(1);
/// Shortest `every`: one request a second is still a gentle client.
pub const MIN_EVERY: TimeDelta = TimeDelta::seconds(1);

/// Reads the stream's `crosscheck` table (absent: no cross-check).
/// `provider` is the stream's ingest provider; `forwards` whether the
/// stream has a `[forward]` table (relay mode), which `heal` needs.
pub(super) fn read(
    r: &mut Reader<'_>,
    path: &str,
    t: &Table,
    ingest: &ProviderConfig,
    forwards: bool,
) -> Option<CrosscheckConfig> {
    let value = t.get("crosscheck")?;
    let key_path = join(path, "crosscheck");
    let table = r.table(&key_path, value)?;
    r.reject_unknown(&key_path, table, KEYS);

    let provider = match r.req_string(&key_path, table, "provider") {
        Some(name) => match Provider::parse(&name) {
            Some(p) => Some(p),
            None => {
                r.error(
                    &join(&key_path, "provider"),
                    format!(
                        "unknown provider {name:?} (known: {})",
                        Provider::ALL.map(Provider::name).join(", ")
                    ),
                );
                None
            }
        },
        None => None,
    };
    if let Some(p) = provider {
        check_ingest(r, &key_path, p, ingest);
    }

    let api_url = match r.opt_string(&key_path, table, "api_url") {
        Some(text) => match api_url(&text) {
            Ok(url) => url,
            Err(reason) => {
                r.error(&join(&key_path, "api_url"), reason);
                String::new()
            }
        },
        None if provider == Some(Provider::Auth0) => {
            r.error(
                &join(&key_path, "api_url"),
                "is required for provider = \"auth0\": your tenant's domain, e.g. \"https://YOUR-TENANT.auth0.com\"",
            );
            String::new()
        }
        None => {
            // Every Okta org has its own host: no default to fall back on.
            if provider == Some(Provider::Okta) {
                r.error(
                    &join(&key_path, "api_url"),
                    "is required for provider = \"okta\": your org's URL, e.g. \"https://YOUR-ORG.okta.com\"",
                );
            }
            provider.map_or_else(String::new, |p| p.default_api_url().to_owned())
        }
    };

    let entra = provider == Some(Provider::Entra);
    let (api_key, client_id, client_secret) = if provider == Some(Provider::Auth0) {
        auth0_credentials(r, &key_path, table)
    } else if entra {
        if table.contains_key("api_key") {
            r.error(
                &join(&key_path, "api_key"),
                "is not used by provider = \"entra\": it signs in with client_id and client_secret",
            );
        }
        (String::new(), None, None)
    } else {
        for key in ["client_id", "client_secret"] {
            if table.contains_key(key) {
                r.error(
                    &join(&key_path, key),
                    "applies to provider = \"auth0\" or \"entra\" only (this provider takes api_key)",
                );
            }
        }
        let key = match r.req_string(&key_path, table, "api_key") {
            Some(key) => {
                let key_field = join(&key_path, "api_key");
                let key = r.trim_secret(&key_field, key);
                if let Err(reason) = api_key(&key) {
                    r.error(&key_field, reason);
                }
                key
            }
            None => String::new(),
        };
        (key, None, None)
    };

    let mut every = r
        .opt_duration(&key_path, table, "every")
        .unwrap_or(DEFAULT_EVERY);
    if every < MIN_EVERY {
        r.error(&join(&key_path, "every"), "must be at least 1s");
    } else if provider == Some(Provider::Okta) && every < OKTA_MIN_QUIET_EVERY {
        r.warnings.push(format!(
            "{key_path}.every is under {}s: an Okta poll makes up to {} requests, and Okta's smallest plan allows 20 a minute on /api/v1/logs (a 429 is waited out or fails the poll)",
            OKTA_MIN_QUIET_EVERY.num_seconds(),
            crate::domain::crosscheck::OKTA_MAX_REQUESTS_PER_POLL
        ));
    }
    if provider == Some(Provider::Entra) && every > ENTRA_MAX_EVERY {
        r.warnings.push(format!(
            "{}: Entra is polled at least once a day (a Graph delta link expires after 7 days), so every = 1d",
            join(&key_path, "every")
        ));
        every = ENTRA_MAX_EVERY;
    }
    let grace = r
        .opt_duration(&key_path, table, "grace")
        .unwrap_or(DEFAULT_GRACE);
    if grace < TimeDelta::zero() {
        r.error(&join(&key_path, "grace"), "must not be negative");
    }

    let heal = r.opt_bool(&key_path, table, "heal").unwrap_or(false);
    if heal && entra {
        r.error(
            &join(&key_path, "heal"),
            "does not apply to provider = \"entra\" (Entra streams do not relay): set heal = false",
        );
    } else if heal && !forwards {
        r.error(
            &join(&key_path, "heal"),
            "needs relay mode: heal delivers what was missed to the app, so add [forward] or set heal = false",
        );
    }

    let types = if table.contains_key("types") {
        let listed = r.string_list(&key_path, table, "types", false);
        if provider == Some(Provider::Clerk) {
            r.error(
                &join(&key_path, "types"),
                "applies to provider = \"workos\", \"okta\" or \"auth0\" only (Clerk is checked by listing users and memberships)",
            );
        }
        if provider == Some(Provider::Entra) {
            r.error(
                &join(&key_path, "types"),
                "applies to provider = \"workos\", \"okta\" or \"auth0\" only (Entra is checked by delta queries over users and groups)",
            );
        }
        for (i, ty) in listed.iter().enumerate() {
            if ty.trim().is_empty() || ty.len() > 128 {
                r.error(
                    &format!("{key_path}.types[{i}]"),
                    "must be an event type name (1 to 128 characters)",
                );
            }
        }
        if listed.is_empty() {
            r.error(
                &join(&key_path, "types"),
                "needs at least one event type (remove it for the default list)",
            );
        }
        listed
    } else if provider == Some(Provider::Workos) {
        crate::domain::crosscheck::WORKOS_DEFAULT_TYPES
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    } else if provider == Some(Provider::Okta) {
        crate::domain::crosscheck::OKTA_DEFAULT_TYPES
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    } else if provider == Some(Provider::Auth0) {
        crate::domain::crosscheck::AUTH0_DEFAULT_TYPES
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    } else {
        Vec::new()
    };

    let entra = if entra {
        read_entra(r, &key_path, table)
    } else {
        for key in ENTRA_ONLY_KEYS {
            if table.contains_key(*key) {
                r.error(
                    &join(&key_path, key),
                    "applies to provider = \"entra\" only",
                );
            }
        }
        None
    };

    Some(CrosscheckConfig {
        provider: provider?,
        api_url,
        api_key: SecretString::new(api_key),
        every,
        grace,
        heal,
        types,
        entra,
        client_id,
        client_secret,
    })
}

/// The Entra sign-in keys: `tenant_id`, `client_id` and `client_secret`
/// required, `token_url` defaulting to the tenant's v2.0 token endpoint.
fn read_entra(r: &mut Reader<'_>, key_path: &str, table: &Table) -> Option<EntraCredentials> {
    let id = |r: &mut Reader<'_>, key: &str| {
        let value = r.req_string(key_path, table, key)?;
        match graph_id(&value) {
            Ok(()) => Some(value),
            Err(reason) => {
                r.error(&join(key_path, key), reason);
                None
            }
        }
    };
    let tenant_id = id(r, "tenant_id");
    let client_id = id(r, "client_id");
    let client_secret = match r.req_string(key_path, table, "client_secret") {
        Some(secret) => {
            let field = join(key_path, "client_secret");
            let secret = r.trim_secret(&field, secret);
            if let Err(reason) = api_key(&secret) {
                r.error(&field, reason.replace("API key", "client secret"));
            }
            secret
        }
        None => String::new(),
    };
    let token_url = match r.opt_string(key_path, table, "token_url") {
        Some(text) => match api_url(&text) {
            Ok(url) => Some(url),
            Err(reason) => {
                r.error(&join(key_path, "token_url"), reason);
                None
            }
        },
        None => tenant_id.as_deref().map(default_token_url),
    };
    Some(EntraCredentials {
        token_url: token_url?,
        tenant_id: tenant_id?,
        client_id: client_id?,
        client_secret: SecretString::new(client_secret),
    })
}

/// `https://login.microsoftonline.com/<tenant_id>/oauth2/v2.0/token`.
pub fn default_token_url(tenant_id: &str) -> String {
    format!("https://login.microsoftonline.com/{tenant_id}/oauth2/v2.0/token")
}

/// A tenant or application id: a GUID, or for a tenant its domain name
/// (`contoso.onmicrosoft.com`); either goes into a URL path or a form, so
/// only letters, digits, `-` and `.`.
fn graph_id(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 256 {
        return Err("must be 1 to 256 characters (a GUID or a domain name)".into());
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        return Err("must be a GUID or a domain name (letters, digits, '-' and '.')".into());
    }
    Ok(())
}

/// Auth0's credentials: `api_key` (a Management API token, sent as
/// Bearer) or `client_id` + `client_secret` (a Machine-to-Machine
/// application; hushwatch asks `/oauth/token` for the token), exactly one
/// of the two. No reason quotes a value.
fn auth0_credentials(
    r: &mut Reader<'_>,
    key_path: &str,
    table: &Table,
) -> (String, Option<String>, Option<SecretString>) {
    let key = r.opt_string(key_path, table, "api_key").map(|key| {
        let field = join(key_path, "api_key");
        let key = r.trim_secret(&field, key);
        if let Err(reason) = api_key(&key) {
            r.error(&field, reason);
        }
        key
    });
    let id = r.opt_string(key_path, table, "client_id").map(|id| {
        let field = join(key_path, "client_id");
        let id = id.trim().to_owned();
        if let Err(reason) = form_value(&id) {
            r.error(&field, reason);
        }
        id
    });
    let secret = r
        .opt_string(key_path, table, "client_secret")
        .map(|secret| {
            let field = join(key_path, "client_secret");
            let secret = r.trim_secret(&field, secret);
            if let Err(reason) = form_value(&secret) {
                r.error(&field, reason);
            }
            secret
        });
    match (&key, &id, &secret) {
        (Some(_), None, None) | (None, Some(_), Some(_)) => {}
        (Some(_), _, _) => r.error(
            &join(key_path, "api_key"),
            "set either api_key (a Management API token) or client_id and client_secret (a Machine-to-Machine application), not both",
        ),
        (None, Some(_), None) => r.error(
            &join(key_path, "client_secret"),
            "is required with client_id (e.g. \"${AUTH0_CLIENT_SECRET}\")",
        ),
        (None, None, Some(_)) => r.error(
            &join(key_path, "client_id"),
            "is required with client_secret",
        ),
        (None, None, None) => r.error(
            &join(key_path, "api_key"),
            "provider = \"auth0\" needs api_key (a Management API token with read:logs) or client_id and client_secret (a Machine-to-Machine application authorized for the Management API with read:logs)",
        ),
    }
    (key.unwrap_or_default(), id, secret.map(SecretString::new))
}

/// A client id or secret sent in the token request's form: not empty and
/// printable, so what is sent is what was configured. The reason never
/// quotes the value.
pub fn form_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("is empty".into());
    }
    if !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be printable ASCII without spaces".into());
    }
    Ok(())
}

/// Clerk's changes are explained by the webhooks the audit log recorded
/// (`service::crosscheck` reads `subject_entries`): with `[audit] enabled =
/// false` nothing could explain a change, and every one would be reported
/// as missed.
pub(super) fn check_audit(r: &mut Reader<'_>, config: &super::Config) {
    if config.audit.enabled {
        return;
    }
    let streams = config.streams.iter().map(|(n, s)| ("streams", n, s));
    let templates = config
        .templates
        .templates
        .iter()
        .map(|(n, s)| ("templates", n, s));
    for (section, name, stream) in streams.chain(templates) {
        if let Some(p) = stream
            .crosscheck
            .as_ref()
            .map(|c| c.provider)
            .filter(|p| matches!(p, Provider::Clerk | Provider::Entra))
        {
            r.error(
                &format!("{section}.{name}.crosscheck.provider"),
                format!("provider = \"{}\" explains each change by the webhooks the audit log recorded: remove [audit] enabled = false", p.name()),
            );
        }
    }
}

/// WorkOS checks event ids against the ids its webhooks carried, so the
/// stream must receive WorkOS webhooks; Clerk's deliveries are Standard
/// Webhooks (Svix).
fn check_ingest(r: &mut Reader<'_>, key_path: &str, provider: Provider, ingest: &ProviderConfig) {
    let wanted = match provider {
        Provider::Clerk => "standard",
        Provider::Workos => "workos",
        Provider::Okta => "okta",
        Provider::Entra => "entra",
        Provider::Auth0 => "auth0",
    };
    if ingest.name() != wanted {
        let reason = match provider {
            Provider::Clerk => format!(
                "provider = \"clerk\" needs a Standard Webhooks stream (Clerk sends through Svix), but ingest.provider = {:?}",
                ingest.name()
            ),
            Provider::Workos => format!(
                "provider = \"workos\" needs ingest.provider = \"workos\" (the event ids are joined with its webhooks), found {:?}",
                ingest.name()
            ),
            Provider::Okta => format!(
                "provider = \"okta\" needs ingest.provider = \"okta\" (each LogEvent's uuid is joined with its Event Hooks), found {:?}",
                ingest.name()
            ),
            Provider::Entra => format!(
                "provider = \"entra\" needs ingest.provider = \"entra\" (each change is explained by the change notifications it received), found {:?}",
                ingest.name()
            ),
            Provider::Auth0 => format!(
                "provider = \"auth0\" needs ingest.provider = \"auth0\" (the log ids are joined with its Log Stream's records), found {:?}",
                ingest.name()
            ),
        };
        r.error(&join(key_path, "provider"), reason);
    }
}

/// The API root the poller sends to: http(s), a host, no userinfo (the key
/// goes in a header), no query or fragment (paths are appended). Used by
/// `check` and by the poller, so both accept the same URLs.
pub fn api_url(text: &str) -> Result<String, String> {
    let target = super::notifiers::http_target(text)?;
    if target.basic_auth.is_some() {
        return Err(
            "must not carry a user name or password (api_key is sent as a Bearer token)".into(),
        );
    }
    let url = url::Url::parse(&target.url).map_err(|e| format!("is not a valid URL ({e})"))?;
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not have a query or fragment: request paths are appended to it".into());
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// A Bearer key: not empty, and only characters an HTTP header value may
/// carry (a stray newline would otherwise end the header). The reason
/// never quotes the key.
pub fn api_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err(
            "is empty: set the provider's secret API key (e.g. \"${CLERK_SECRET_KEY}\")".into(),
        );
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be printable ASCII without spaces (it is sent in an HTTP header)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{parse, Config};
    use crate::domain::crosscheck::Provider;
    use chrono::TimeDelta;
    use std::path::Path;

    const KEY: &str = "sk_test_Zm9vYmFyYmF6cXV4";

    fn env(name: &str) -> Option<String> {
        match name {
            "CLERK_WEBHOOK_SECRET" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
            "CLERK_SECRET_KEY" => Some(format!("{KEY}\n")),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    /// One stream (`ingest` and `extra` tables appended) and a notifier.
    fn config(ingest: &str, crosscheck: &str, extra: &str) -> String {
        format!(
            r#"
[streams.identity]
calendar = "always"
silence_threshold = "6h"
notify = ["oncall"]
[streams.identity.ingest]
{ingest}
[streams.identity.crosscheck]
{crosscheck}
{extra}
[notifiers.oncall]
kind = "log"
"#
        )
    }

    const CLERK_INGEST: &str = r#"webhook_secret = "${CLERK_WEBHOOK_SECRET}""#;
    const WORKOS_INGEST: &str = "provider = \"workos\"\nwebhook_secret = \"plain-workos-secret\"";

    fn ok(text: &str) -> Config {
        parse(text, Path::new("/etc/hw"), &env).unwrap_or_else(|e| panic!("{e}"))
    }

    fn errors(text: &str) -> Vec<String> {
        match parse(text, Path::new("/etc/hw"), &env) {
            Ok(_) => panic!("expected errors"),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn clerk_defaults_and_a_key_from_the_environment() {
        let c = ok(&config(
            CLERK_INGEST,
            "provider = \"clerk\"\napi_key = \"${CLERK_SECRET_KEY}\"",
            "",
        ));
        let x = c.streams["identity"].crosscheck.as_ref().unwrap();
        assert_eq!(x.provider, Provider::Clerk);
        assert_eq!(x.api_url, "https://api.clerk.com/v1");
        // The trailing newline of a pasted key is dropped, with a notice
        // that never quotes the key.
        assert_eq!(x.api_key.expose(), KEY);
        assert!(c.warnings.iter().any(|w| w.contains("crosscheck.api_key")));
        assert!(c.warnings.iter().all(|w| !w.contains(KEY)));
        assert_eq!(x.every, TimeDelta::minutes(15));
        assert_eq!(x.grace, TimeDelta::minutes(10));
        assert!(!x.heal);
        assert!(x.types.is_empty());
        assert!(!format!("{c:?}").contains(KEY), "Debug redacts the key");
    }

    const OKTA_INGEST: &str = "provider = \"okta\"\nauthorization = \"okta-hook-value\"";

    #[test]
    fn okta_needs_its_org_url_an_okta_stream_and_defaults_its_types() {
        let c = ok(&config(
            OKTA_INGEST,
            "provider = \"okta\"\napi_key = \"00abc_ssws_token\"\napi_url = \"https://example.okta.com/\"",
            "",
        ));
        let x = c.streams["identity"].crosscheck.as_ref().unwrap();
        assert_eq!(x.provider, Provider::Okta);
        assert_eq!(x.api_url, "https://example.okta.com");
        assert_eq!(x.every, TimeDelta::minutes(15));
        assert_eq!(
            x.types,
            crate::domain::crosscheck::OKTA_DEFAULT_TYPES
                .iter()
                .map(|s| (*s).to_owned())
                .collect::<Vec<_>>()
        );
        let p = "streams.identity.crosscheck";
        let errs = errors(&config(
            OKTA_INGEST,
            "provider = \"okta\"\napi_key = \"k\"",
            "",
        ));
        assert!(
            errs.iter().any(
                |e| e.starts_with(&format!("{p}.api_url: is required for provider = \"okta\""))
            ),
            "{errs:?}"
        );
        let errs = errors(&config(
            WORKOS_INGEST,
            "provider = \"okta\"\napi_key = \"k\"\napi_url = \"https://example.okta.com\"",
            "",
        ));
        assert!(
            errs.iter().any(|e| e.starts_with(&format!(
                "{p}.provider: provider = \"okta\" needs ingest.provider = \"okta\""
            ))),
            "{errs:?}"
        );
        let c = ok(&config(
            OKTA_INGEST,
            "provider = \"okta\"\napi_key = \"k\"\napi_url = \"https://example.okta.com\"\nevery = \"5s\"",
            "",
        ));
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("crosscheck.every is under 30s")),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn workos_reads_every_key_and_defaults_its_types() {
        let c = ok(&config(
            WORKOS_INGEST,
            "provider = \"workos\"\napi_key = \"sk_x\"\napi_url = \"http://127.0.0.1:8080/\"\nevery = \"1s\"\ngrace = \"0s\"",
            "",
        ));
        let x = c.streams["identity"].crosscheck.as_ref().unwrap();
        assert_eq!(x.provider, Provider::Workos);
        assert_eq!(x.api_url, "http://127.0.0.1:8080");
        assert_eq!(x.every, TimeDelta::seconds(1));
        assert_eq!(x.grace, TimeDelta::zero());
        assert!(x.types.iter().any(|t| t == "dsync.user.deleted"));
        let c = ok(&config(
            WORKOS_INGEST,
            "provider = \"workos\"\napi_key = \"sk_x\"\ntypes = [\"dsync.user.deleted\"]",
            "",
        ));
        assert_eq!(
            c.streams["identity"].crosscheck.as_ref().unwrap().types,
            ["dsync.user.deleted"]
        );
    }

    #[test]
    fn check_refuses_what_the_poller_could_not_use_with_the_key_path() {
        let p = "streams.identity.crosscheck";
        for (ingest, table, want) in [
            (
                CLERK_INGEST,
                "provider = \"clerk\"\napi_key = \"k\"\napi_url = \"ftp://api.clerk.com\"",
                format!("{p}.api_url: must start with http:// or https://"),
            ),
            (
                CLERK_INGEST,
                "provider = \"clerk\"\napi_key = \"k\"\napi_url = \"https://user:pw@api.clerk.com/v1\"",
                format!("{p}.api_url: must not carry a user name or password"),
            ),
            (
                CLERK_INGEST,
                "provider = \"clerk\"\napi_key = \"${EMPTY}\"",
                format!("{p}.api_key: is empty"),
            ),
            (
                CLERK_INGEST,
                "provider = \"clerk\"",
                format!("{p}.api_key: "),
            ),
            (
                CLERK_INGEST,
                "provider = \"clerk\"\napi_key = \"k\"\nheal = true",
                format!("{p}.heal: needs relay mode"),
            ),
            (
                CLERK_INGEST,
                "provider = \"clerk\"\napi_key = \"k\"\nevery = \"500ms\"",
                format!("{p}.every: must be at least 1s"),
            ),
            (
                CLERK_INGEST,
                "provider = \"clerk\"\napi_key = \"k\"\ntypes = [\"user.deleted\"]",
                format!("{p}.types: applies to provider = \"workos\", \"okta\" or \"auth0\" only"),
            ),
            (
                CLERK_INGEST,
                "provider = \"workos\"\napi_key = \"k\"",
                format!("{p}.provider: provider = \"workos\" needs ingest.provider = \"workos\""),
            ),
            (
                WORKOS_INGEST,
                "provider = \"clerk\"\napi_key = \"k\"",
                format!("{p}.provider: provider = \"clerk\" needs a Standard Webhooks stream"),
            ),
            (
                CLERK_INGEST,
                "provider = \"google\"\napi_key = \"k\"",
                format!("{p}.provider: unknown provider \"google\" (known: clerk, workos, okta"),
            ),
            (
                CLERK_INGEST,
                "provider = \"clerk\"\napi_key = \"k\"\nintervl = \"1m\"",
                format!("{p}.intervl: unknown key"),
            ),
        ] {
            let errs = errors(&config(ingest, table, ""));
            assert!(
                errs.iter().any(|e| e.starts_with(&want)),
                "{table}: want {want:?}, got {errs:?}"
            );
        }
    }

    const ENTRA_INGEST: &str = "provider = \"entra\"\nclient_state = \"graph-client-state\"";
    const ENTRA_SECRET: &str = "Qx8Q~entra.client.secret_never_shown";

    fn entra_env(name: &str) -> Option<String> {
        match name {
            "ENTRA_CLIENT_SECRET" => Some(format!("{ENTRA_SECRET}\n")),
            other => env(other),
        }
    }

    const AUTH0_INGEST: &str = "provider = \"auth0\"\nauthorization = \"Bearer stream-token\"";
    const M2M_SECRET: &str = "m2m_Secret_9f2c_never_shown";

    fn auth0_env(name: &str) -> Option<String> {
        match name {
            "AUTH0_CLIENT_SECRET" => Some(format!("{M2M_SECRET}\n")),
            _ => env(name),
        }
    }

    #[test]
    fn entra_signs_in_with_client_credentials_and_defaults_its_urls() {
        let text = config(
            ENTRA_INGEST,
            "provider = \"entra\"\ntenant_id = \"0b4f4c8e-1c4d-4c3a-9a62-3f1e2d5c6b7a\"\nclient_id = \"6731de76-14a6-49ae-97bc-6eba6914391e\"\nclient_secret = \"${ENTRA_CLIENT_SECRET}\"\nevery = \"3d\"",
            "",
        );
        let c = parse(&text, Path::new("/etc/hw"), &entra_env).unwrap_or_else(|e| panic!("{e}"));
        let x = c.streams["identity"].crosscheck.as_ref().unwrap();
        assert_eq!(x.provider, Provider::Entra);
        assert_eq!(x.api_url, "https://graph.microsoft.com/v1.0");
        assert!(x.api_key.expose().is_empty());
        let e = x.entra.as_ref().unwrap();
        assert_eq!(
            e.token_url,
            "https://login.microsoftonline.com/0b4f4c8e-1c4d-4c3a-9a62-3f1e2d5c6b7a/oauth2/v2.0/token"
        );
        assert_eq!(e.client_id, "6731de76-14a6-49ae-97bc-6eba6914391e");
        assert_eq!(e.client_secret.expose(), ENTRA_SECRET);
        // Polled at least daily whatever `every` says, with a notice.
        assert_eq!(x.every, TimeDelta::days(1));
        assert!(c.warnings.iter().any(|w| w.contains("crosscheck.every")));
        assert!(c.warnings.iter().all(|w| !w.contains(ENTRA_SECRET)));
        assert!(
            !format!("{c:?}").contains(ENTRA_SECRET),
            "Debug redacts the secret"
        );
    }

    #[test]
    fn entra_check_refuses_missing_or_foreign_keys_with_the_key_path() {
        let p = "streams.identity.crosscheck";
        let full = "tenant_id = \"t1\"\nclient_id = \"c1\"\nclient_secret = \"s\"";
        for (ingest, table, want) in [
            (
                ENTRA_INGEST,
                "provider = \"entra\"\nclient_id = \"c1\"\nclient_secret = \"s\"".to_owned(),
                format!("{p}.tenant_id: is required"),
            ),
            (
                ENTRA_INGEST,
                "provider = \"entra\"\ntenant_id = \"t1\"\nclient_secret = \"s\"".to_owned(),
                format!("{p}.client_id: is required"),
            ),
            (
                ENTRA_INGEST,
                "provider = \"entra\"\ntenant_id = \"t1\"\nclient_id = \"c1\"".to_owned(),
                format!("{p}.client_secret: is required"),
            ),
            (
                ENTRA_INGEST,
                "provider = \"entra\"\ntenant_id = \"t1\"\nclient_id = \"c1\"\nclient_secret = \"${EMPTY}\"".to_owned(),
                format!("{p}.client_secret: is empty"),
            ),
            (
                ENTRA_INGEST,
                format!("provider = \"entra\"\n{full}\napi_key = \"k\""),
                format!("{p}.api_key: is not used by provider = \"entra\""),
            ),
            (
                ENTRA_INGEST,
                format!("provider = \"entra\"\n{full}\nheal = true"),
                format!("{p}.heal: does not apply to provider = \"entra\""),
            ),
            (
                ENTRA_INGEST,
                format!("provider = \"entra\"\n{full}\ntoken_url = \"ftp://login.example\""),
                format!("{p}.token_url: must start with http:// or https://"),
            ),
            (
                ENTRA_INGEST,
                "provider = \"entra\"\ntenant_id = \"t1/../x\"\nclient_id = \"c1\"\nclient_secret = \"s\"".to_owned(),
                format!("{p}.tenant_id: must be a GUID or a domain name"),
            ),
            (
                CLERK_INGEST,
                format!("provider = \"entra\"\n{full}"),
                format!("{p}.provider: provider = \"entra\" needs ingest.provider = \"entra\""),
            ),
            (
                CLERK_INGEST,
                "provider = \"clerk\"\napi_key = \"k\"\nclient_id = \"c1\"".to_owned(),
                format!("{p}.client_id: applies to provider = \"auth0\" or \"entra\" only"),
            ),
        ] {
            let errs = errors(&config(ingest, &table, ""));
            assert!(
                errs.iter().any(|e| e.starts_with(&want)),
                "{table}: want {want:?}, got {errs:?}"
            );
        }
        let errs = errors(&format!(
            "[audit]\nenabled = false\n{}",
            config(ENTRA_INGEST, &format!("provider = \"entra\"\n{full}"), "")
        ));
        assert!(
            errs.iter().any(|e| e.starts_with(
                "streams.identity.crosscheck.provider: provider = \"entra\" explains"
            )),
            "{errs:?}"
        );
    }

    #[test]
    fn auth0_takes_a_token_or_client_credentials_and_defaults_its_codes() {
        let text = config(
            AUTH0_INGEST,
            "provider = \"auth0\"\napi_url = \"https://acme.eu.auth0.com/\"\nclient_id = \"cid_1\"\nclient_secret = \"${AUTH0_CLIENT_SECRET}\"",
            "",
        );
        let c = parse(&text, Path::new("/etc/hw"), &auth0_env).unwrap_or_else(|e| panic!("{e}"));
        let x = c.streams["identity"].crosscheck.as_ref().unwrap();
        assert_eq!(x.provider, Provider::Auth0);
        assert_eq!(x.api_url, "https://acme.eu.auth0.com");
        assert_eq!(x.client_id.as_deref(), Some("cid_1"));
        assert_eq!(x.client_secret.as_ref().unwrap().expose(), M2M_SECRET);
        assert!(x.api_key.expose().is_empty());
        assert!(x.types.iter().any(|t| t == "sdu") && x.types.iter().any(|t| t == "sapi"));
        assert!(!format!("{c:?}").contains(M2M_SECRET));
        assert!(c.warnings.iter().all(|w| !w.contains(M2M_SECRET)));

        let c = ok(&config(
            AUTH0_INGEST,
            "provider = \"auth0\"\napi_url = \"https://acme.auth0.com\"\napi_key = \"${CLERK_SECRET_KEY}\"",
            "",
        ));
        let x = c.streams["identity"].crosscheck.as_ref().unwrap();
        assert_eq!(x.api_key.expose(), KEY);
        assert!(x.client_id.is_none() && x.client_secret.is_none());
    }

    #[test]
    fn auth0_refuses_both_or_neither_credential_a_half_pair_a_missing_api_url_and_another_ingest() {
        let p = "streams.identity.crosscheck";
        let url = "api_url = \"https://acme.auth0.com\"";
        for (ingest, table, want) in [
            (
                AUTH0_INGEST,
                format!("provider = \"auth0\"\n{url}"),
                format!("{p}.api_key: provider = \"auth0\" needs api_key"),
            ),
            (
                AUTH0_INGEST,
                format!("provider = \"auth0\"\n{url}\napi_key = \"k\"\nclient_id = \"c\"\nclient_secret = \"s\""),
                format!("{p}.api_key: set either api_key"),
            ),
            (
                AUTH0_INGEST,
                format!("provider = \"auth0\"\n{url}\nclient_id = \"c\""),
                format!("{p}.client_secret: is required with client_id"),
            ),
            (
                AUTH0_INGEST,
                format!("provider = \"auth0\"\n{url}\nclient_secret = \"s\""),
                format!("{p}.client_id: is required with client_secret"),
            ),
            (
                AUTH0_INGEST,
                format!("provider = \"auth0\"\n{url}\nclient_id = \"c\"\nclient_secret = \"${{EMPTY}}\""),
                format!("{p}.client_secret: is empty"),
            ),
            (
                AUTH0_INGEST,
                "provider = \"auth0\"\napi_key = \"k\"".to_owned(),
                format!("{p}.api_url: is required for provider = \"auth0\""),
            ),
            (
                CLERK_INGEST,
                format!("provider = \"auth0\"\n{url}\napi_key = \"k\""),
                format!("{p}.provider: provider = \"auth0\" needs ingest.provider = \"auth0\""),
            ),
            (
                CLERK_INGEST,
                "provider = \"clerk\"\napi_key = \"k\"\nclient_id = \"c\"".to_owned(),
                format!("{p}.client_id: applies to provider = \"auth0\" or \"entra\" only"),
            ),
        ] {
            let errs = errors(&config(ingest, &table, ""));
            assert!(
                errs.iter().any(|e| e.starts_with(&want)),
                "{table}: want {want:?}, got {errs:?}"
            );
        }
    }

    #[test]
    fn clerk_needs_the_audit_log_that_explains_its_changes() {
        let text = format!(
            "[audit]\nenabled = false\n{}",
            config(CLERK_INGEST, "provider = \"clerk\"\napi_key = \"k\"", "")
        );
        let errs = errors(&text);
        assert!(
            errs.iter().any(|e| e.starts_with(
                "streams.identity.crosscheck.provider: provider = \"clerk\" explains"
            )),
            "{errs:?}"
        );
    }

    #[test]
    fn a_key_with_a_space_or_newline_inside_is_refused_without_being_quoted() {
        let errs = errors(&config(
            CLERK_INGEST,
            "provider = \"clerk\"\napi_key = \"sk_live_abc\\r\\nX-Evil: 1\"",
            "",
        ));
        assert!(
            errs.iter()
                .any(|e| e
                    .starts_with("streams.identity.crosscheck.api_key: must be printable ASCII")),
            "{errs:?}"
        );
        assert!(errs.iter().all(|e| !e.contains("sk_live_abc")), "{errs:?}");
    }

    #[test]
    fn heal_is_accepted_on_a_relay_stream_and_templates_take_the_table() {
        let forward = "[streams.identity.forward]\nurl = \"http://127.0.0.1:3000/hook\"\nsecret = \"${CLERK_WEBHOOK_SECRET}\"";
        let c = ok(&config(
            CLERK_INGEST,
            "provider = \"clerk\"\napi_key = \"k\"\nheal = true",
            forward,
        ));
        assert!(c.streams["identity"].crosscheck.as_ref().unwrap().heal);
        // A WorkOS stream relays too (one plain-string forward secret), so
        // it may heal; without `[forward]` it may not.
        let forward = "[streams.identity.forward]\nurl = \"http://127.0.0.1:3000/hook\"\nsecret = \"app-plain-secret\"";
        let c = ok(&config(
            WORKOS_INGEST,
            "provider = \"workos\"\napi_key = \"k\"\nheal = true",
            forward,
        ));
        assert!(c.streams["identity"].crosscheck.as_ref().unwrap().heal);
        let errs = errors(&config(
            WORKOS_INGEST,
            "provider = \"workos\"\napi_key = \"k\"\nheal = true",
            "",
        ));
        assert!(
            errs.iter()
                .any(|e| e.starts_with("streams.identity.crosscheck.heal: needs relay mode")),
            "{errs:?}"
        );

        let text = format!(
            "{}\n[templates.tenant]\ncalendar = \"always\"\nsilence_threshold = \"6h\"\nnotify = [\"oncall\"]\n\
             [templates.tenant.ingest]\n{CLERK_INGEST}\n[templates.tenant.crosscheck]\nprovider = \"clerk\"\napi_key = \"\"\n\
             [streams.\"tenant-*\"]\ntemplate = \"tenant\"\n",
            config(CLERK_INGEST, "provider = \"clerk\"\napi_key = \"k\"", "")
        );
        let errs = errors(&text);
        assert!(
            errs.iter()
                .any(|e| e.starts_with("templates.tenant.crosscheck.api_key: is empty")),
            "{errs:?}"
        );
    }
}
