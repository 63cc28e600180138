//! An OAuth 2.0 client-credentials token (RFC 6749 §4.4), for providers
//! whose API wants a token obtained with a client id and secret instead of
//! a fixed key: Auth0's Management API (`POST <tenant>/oauth/token` with
//! `audience`), Microsoft Graph (`POST <token_url>` with `scope`).
//!
//! Generic on purpose: the token URL and the extra form fields are the
//! caller's; this module sends `grant_type=client_credentials`, the client
//! id and secret and those fields as a form, reads the answer as untrusted
//! input (through [`ApiClient`]: bounded, deadlined; typed: an
//! `access_token` and a positive `expires_in` are required, `token_type`
//! must be `Bearer` when present), caches the token and asks again
//! [`RENEW_BEFORE`] before it expires (or at once after the API refused
//! it, [`ClientCredentials::forget`]). The cache outlives one poll (the
//! poller builds its source afresh each time): it is shared by every
//! `ClientCredentials` with the same token URL, client, secret and fields,
//! so a stream polled every 15 minutes asks for a token once a day, not 96
//! times (Auth0 counts Machine-to-Machine tokens against a monthly quota).
//!
//! The secret and the token stay inside: the secret in a `SecretString`,
//! the token in a sensitive `HeaderValue`; no error carries either, nor the
//! token endpoint's body (an OAuth error answer may echo what was sent).

use super::http::{checked_bearer, ApiClient};
use super::{parse_json, PollError};
use crate::config::secret::SecretString;
use hyper::header::HeaderValue;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// A token is renewed this long before its `expires_in` runs out, so no
/// request goes out with a token that expires on the way.
pub const RENEW_BEFORE: Duration = Duration::from_secs(60);
/// Longest lifetime believed: a provider claiming more is read as this.
pub const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Longest `access_token` accepted (a JWT with many scopes is ~2 KiB).
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

pub struct ClientCredentials {
    token_url: String,
    client_id: String,
    client_secret: SecretString,
    /// Extra form fields: `audience` (Auth0), `scope` (Entra).
    extra: Vec<(String, String)>,
    cached: SharedToken,
}

/// One cached token, shared by every poll asking with the same client.
type SharedToken = Arc<Mutex<Option<Cached>>>;

/// The process's token caches, by a digest of what the token is asked
/// with (never the secret itself as a key).
fn shared_cache(key: [u8; 32]) -> SharedToken {
    static CACHES: OnceLock<std::sync::Mutex<HashMap<[u8; 32], SharedToken>>> = OnceLock::new();
    let mut all = CACHES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Arc::clone(all.entry(key).or_default())
}

struct Cached {
    authorization: HeaderValue,
    renew_at: Instant,
}

/// The token endpoint's answer (RFC 6749 §5.1): the fields used are
/// required; others (`scope`, …) are ignored.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: u64,
    #[serde(default)]
    token_type: Option<String>,
}

impl ClientCredentials {
    pub fn new(
        token_url: String,
        client_id: String,
        client_secret: SecretString,
        extra: Vec<(String, String)>,
    ) -> ClientCredentials {
        let mut digest = Sha256::new();
        for part in [
            token_url.as_str(),
            client_id.as_str(),
            client_secret.expose(),
        ]
        .into_iter()
        .chain(extra.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()]))
        {
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part);
        }
        let cached = shared_cache(digest.finalize().into());
        ClientCredentials {
            token_url,
            client_id,
            client_secret,
            extra,
            cached,
        }
    }

    /// The `Authorization` value to send: the cached token while it has
    /// more than [`RENEW_BEFORE`] left, else a new one from the token
    /// endpoint. A refused client (400 `invalid_client`, 401, 403) is
    /// [`PollError::Refused`], so `crosscheck_failing` pages at once.
    pub async fn authorization(&self, client: &ApiClient) -> Result<HeaderValue, PollError> {
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref() {
            if Instant::now() < c.renew_at {
                return Ok(c.authorization.clone());
            }
        }
        let asked_at = Instant::now();
        let fresh = self.request(client).await?;
        let lifetime = fresh.1.min(MAX_LIFETIME);
        *cached = Some(Cached {
            authorization: fresh.0.clone(),
            renew_at: asked_at + lifetime.saturating_sub(RENEW_BEFORE),
        });
        Ok(fresh.0)
    }

    /// Drops the cached token (the API refused it: revoked, or its scopes
    /// changed), so the next request asks for a new one.
    pub async fn forget(&self) {
        *self.cached.lock().await = None;
    }

    async fn request(&self, client: &ApiClient) -> Result<(HeaderValue, Duration), PollError> {
        const WHAT: &str = "POST /oauth/token";
        let mut form: Vec<(&str, &str)> = vec![
            ("grant_type", "client_credentials"),
            ("client_id", &self.client_id),
            ("client_secret", self.client_secret.expose()),
        ];
        form.extend(self.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let answer = match client.post_form(&self.token_url, WHAT, &form).await {
            Ok(answer) => answer,
            // RFC 6749 §5.2: a wrong client is a 400 `invalid_client` (or
            // a 401); both mean the configured credentials are refused.
            Err(PollError::Failed(reason)) if reason.ends_with("answered HTTP 400") => {
                return Err(PollError::Refused { status: 400 })
            }
            Err(e) => return Err(e),
        };
        let token: TokenAnswer = parse_json(&answer.body, WHAT)?;
        if token
            .token_type
            .as_deref()
            .is_some_and(|t| !t.eq_ignore_ascii_case("bearer"))
        {
            return Err(PollError::Failed(format!(
                "{WHAT}: the token is not a Bearer token"
            )));
        }
        if token.access_token.is_empty() || token.access_token.len() > MAX_TOKEN_LEN {
            return Err(PollError::Failed(format!(
                "{WHAT}: an access_token of {} characters",
                token.access_token.len()
            )));
        }
        if token.expires_in == 0 {
            return Err(PollError::Failed(format!(
                "{WHAT}: the token expires at once (expires_in 0)"
            )));
        }
        let authorization = checked_bearer(&token.access_token).ok_or_else(|| {
            PollError::Failed(format!(
                "{WHAT}: the access_token cannot be sent in a header"
            ))
        })?;
        Ok((authorization, Duration::from_secs(token.expires_in)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crosscheck::fake::FakeApi;
    use std::sync::Mutex as StdMutex;

    const SECRET: &str = "m2m_secret_never_shown_7c1d";

    fn credentials(base: &str) -> ClientCredentials {
        ClientCredentials::new(
            format!("{base}/oauth/token"),
            "cid_1".into(),
            SecretString::new(SECRET.into()),
            vec![("audience".into(), format!("{base}/api/v2/"))],
        )
    }

    fn client() -> ApiClient {
        ApiClient::new("", Duration::from_secs(5))
    }

    /// The token endpoint as Auth0 documents it ("Get Access Tokens for
    /// Production", auth0.com/docs/secure/tokens/access-tokens/management-api-access-tokens/get-management-api-access-tokens-for-production):
    /// `{"access_token", "token_type": "Bearer", "expires_in": 86400, "scope"}`.
    fn token_api(
        tokens: Arc<StdMutex<Vec<String>>>,
        expires_in: u64,
    ) -> crate::crosscheck::fake::Answer {
        Arc::new(move |target: &str| {
            if target != "/oauth/token" {
                return (404, "{}".into());
            }
            let mut t = tokens.lock().unwrap();
            let token = format!("eyJ.token_{}", t.len());
            t.push(token.clone());
            (
                200,
                serde_json::json!({"access_token": token, "token_type": "Bearer",
                                   "expires_in": expires_in, "scope": "read:logs"})
                .to_string(),
            )
        })
    }

    #[tokio::test]
    async fn a_token_is_cached_until_shortly_before_it_expires_and_asked_again_after_forget() {
        let tokens = Arc::new(StdMutex::new(Vec::new()));
        let api = FakeApi::start(token_api(tokens.clone(), 86_400)).await;
        let c = credentials(&api.base);
        let a = c.authorization(&client()).await.unwrap();
        let b = c.authorization(&client()).await.unwrap();
        assert_eq!(a, b);
        // The next poll's source shares the cache.
        let again = credentials(&api.base)
            .authorization(&client())
            .await
            .unwrap();
        assert_eq!(a, again);
        assert_eq!(api.requests(), 1);
        assert_eq!(a.to_str().unwrap(), "Bearer eyJ.token_0");
        assert!(a.is_sensitive());
        c.forget().await;
        let renewed = c.authorization(&client()).await.unwrap();
        assert_eq!(renewed.to_str().unwrap(), "Bearer eyJ.token_1");

        // A token that lives less than RENEW_BEFORE is asked for each time.
        let short = FakeApi::start(token_api(Arc::new(StdMutex::new(Vec::new())), 30)).await;
        let c = credentials(&short.base);
        c.authorization(&client()).await.unwrap();
        c.authorization(&client()).await.unwrap();
        assert_eq!(short.requests(), 2);
    }

    #[tokio::test]
    async fn a_refused_client_is_refused_and_broken_answers_fail_without_the_secret() {
        for (status, body, outcome) in [
            (401, r#"{"error":"access_denied"}"#, "refused"),
            (
                400,
                r#"{"error":"invalid_client","error_description":"m2m_secret_never_shown_7c1d"}"#,
                "refused",
            ),
            (200, r#"{"access_token":"x"}"#, "error"),
            (200, r#"{"access_token":"","expires_in":60}"#, "error"),
            (
                200,
                r#"{"access_token":"x","expires_in":60,"token_type":"mac"}"#,
                "error",
            ),
            (200, r#"{"access_token":"a b\nc","expires_in":60}"#, "error"),
            (200, "<html>", "error"),
        ] {
            let api = FakeApi::start(Arc::new(move |_: &str| (status, body.to_owned()))).await;
            let e = credentials(&api.base)
                .authorization(&client())
                .await
                .unwrap_err();
            assert_eq!(e.outcome(), outcome, "{status} {body}: {e}");
            assert!(!e.to_string().contains(SECRET) && !format!("{e:?}").contains(SECRET));
        }
    }
}
