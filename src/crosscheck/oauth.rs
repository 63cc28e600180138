//! An OAuth 2.0 client-credentials token (RFC 6749 §4.4), for providers
//! whose API wants a token obtained with a client id and secret instead of
//! a fixed key: Auth0's Management API (`POST <tenant>/oauth/token` with
//! `audience`; "Get Management API Access Tokens for Production",
//! auth0.com/docs/secure/tokens/access-tokens/management-api-access-tokens/get-management-api-access-tokens-for-production)
//! and Microsoft Graph (`POST <token_url>` with
//! `scope=https://graph.microsoft.com/.default`;
//! learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow).
//! One client for both: they differ only in the token URL, the extra form
//! field and how long before expiry a token is renewed, which are the
//! caller's.
//!
//! This module sends `grant_type=client_credentials`, the client id and
//! secret and those fields as a form, and reads the answer as untrusted
//! input (through [`ApiClient`]: bounded, deadlined; typed: an
//! `access_token` of printable characters and a positive `expires_in`,
//! number or string, are required; `token_type` must be `Bearer` when
//! present). A refusal is read from the OAuth error body (RFC 6749 §5.2)
//! so a wrong or revoked secret is the key refused, not a passing outage.
//!
//! The token is cached and asked for again the caller's margin before it
//! expires (or at once after the API refused it,
//! [`ClientCredentials::forget`]). The cache outlives one poll (the poller
//! builds its source afresh each time): it is shared by every
//! `ClientCredentials` with the same token URL, client, secret and fields,
//! so a stream polled every 15 minutes asks Auth0 for a token once a day,
//! not 96 times (Auth0 counts Machine-to-Machine tokens against a monthly
//! quota), and Graph once an hour. A changed secret (a reload) is another
//! key, so it signs in afresh.
//!
//! The secret and the token stay inside: the secret in a `SecretString`,
//! the token in a sensitive `HeaderValue`, the cache keyed by a digest;
//! no error or `Debug` output carries either, nor the token endpoint's
//! description text (an OAuth error answer may echo what was sent): only
//! its error code.

use super::http::{bearer, Answer, ApiClient, Outgoing};
use super::{parse_json, PollError};
use crate::config::secret::SecretString;
use hyper::header::HeaderValue;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;

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
    /// How long before its `expires_in` runs out a token is renewed, so
    /// no request goes out with a token that expires on the way.
    renew_before: Duration,
    /// `POST <token URL path>`: names the request in errors.
    what: String,
    cached: SharedToken,
    /// Token requests this value sent (for the caller's request count).
    requests: AtomicUsize,
}

/// What may be printed: where the token is asked and for whom.
impl fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret)
            .field("extra", &self.extra)
            .field("renew_before", &self.renew_before)
            .finish_non_exhaustive()
    }
}

/// One cached token, shared by every poll asking with the same client.
/// The async lock is held across a token request, so concurrent polls of
/// one client wait for one sign-in instead of racing to the endpoint.
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

/// The cache key: every part length-prefixed, so no two different
/// (url, id, secret, fields) run together into the same bytes.
fn cache_key(parts: &[&str]) -> [u8; 32] {
    let mut digest = Sha256::new();
    for part in parts {
        digest.update((part.len() as u64).to_be_bytes());
        digest.update(part.as_bytes());
    }
    digest.finalize().into()
}

struct Cached {
    authorization: HeaderValue,
    renew_at: Instant,
}

/// A token as the endpoint issued it.
struct Fresh {
    authorization: HeaderValue,
    lifetime: Duration,
}

/// When a token asked at `asked_at` and living `lifetime` is renewed: a
/// lifetime shorter than the margin renews at every request rather than
/// never.
fn renew_at(asked_at: Instant, lifetime: Duration, renew_before: Duration) -> Instant {
    asked_at + lifetime.min(MAX_LIFETIME).saturating_sub(renew_before)
}

/// The token endpoint's answer (RFC 6749 §5.1): the fields used are
/// required; others (`scope`, `ext_expires_in`, …) are ignored.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    expires_in: Seconds,
    /// Required by §5.1; Auth0 and Entra both send `Bearer`. Checked when
    /// present, as only a bearer token can be sent as one.
    #[serde(default)]
    token_type: Option<String>,
}

/// `expires_in` is a number in Auth0's and Entra's v2.0 answers; Entra's
/// older endpoints sent it as a string.
#[derive(Deserialize)]
#[serde(untagged)]
enum Seconds {
    Number(u64),
    Text(String),
}

impl ClientCredentials {
    /// A client for `token_url`, sending `extra` beside the credentials and
    /// renewing each token `renew_before` before it expires (each provider
    /// picks its margin: see its module).
    pub fn new(
        token_url: String,
        client_id: String,
        client_secret: SecretString,
        extra: Vec<(String, String)>,
        renew_before: Duration,
    ) -> ClientCredentials {
        let mut parts = vec![
            token_url.as_str(),
            client_id.as_str(),
            client_secret.expose(),
        ];
        parts.extend(extra.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()]));
        let cached = shared_cache(cache_key(&parts));
        let what = match url::Url::parse(&token_url) {
            Ok(u) => format!("POST {}", u.path().chars().take(128).collect::<String>()),
            Err(_) => "POST token_url".to_owned(),
        };
        ClientCredentials {
            token_url,
            client_id,
            client_secret,
            extra,
            renew_before,
            what,
            cached,
            requests: AtomicUsize::new(0),
        }
    }

    /// The `Authorization` value to send: the cached token while it has
    /// more than the margin left, else a new one from the token endpoint.
    /// A refused client (`invalid_client` and the like, 401, 403) is
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
        *cached = Some(Cached {
            authorization: fresh.authorization.clone(),
            renew_at: renew_at(asked_at, fresh.lifetime, self.renew_before),
        });
        Ok(fresh.authorization)
    }

    /// Drops the cached token (the API refused it: revoked, or its scopes
    /// changed), so the next request asks for a new one.
    pub async fn forget(&self) {
        *self.cached.lock().await = None;
    }

    /// Token requests sent through this value (not the ones a cached token
    /// saved).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }

    async fn request(&self, client: &ApiClient) -> Result<Fresh, PollError> {
        // Without credentials nothing is sent: the stream's key is refused
        // (the config check makes this unreachable for a parsed config).
        if self.client_id.is_empty() || self.client_secret.expose().is_empty() {
            return Err(PollError::Refused { status: 0 });
        }
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "client_credentials")
            .append_pair("client_id", &self.client_id)
            .append_pair("client_secret", self.client_secret.expose())
            .extend_pairs(self.extra.iter())
            .finish();
        self.requests.fetch_add(1, Ordering::Relaxed);
        let answer = client
            .send(
                &Outgoing {
                    url: &self.token_url,
                    authorization: None,
                    form: Some(form),
                    // RFC 6749 §5.2: an error is a 400 (or a 401 for a
                    // client that failed to authenticate) whose JSON body
                    // says which; read it to tell a wrong key from an outage.
                    read_errors: &[400, 401],
                },
                &self.what,
            )
            .await?;
        match answer {
            Answer::Ok(body) => parse_token(&body, &self.what),
            Answer::Status { status, body } => Err(token_error(status, &body, &self.what)),
        }
    }
}

/// Reads a token answer: a bearer token that can be sent and a positive
/// lifetime, else the poll fails (never quoting the token).
fn parse_token(body: &[u8], what: &str) -> Result<Fresh, PollError> {
    let answer: TokenAnswer = parse_json(body, what)?;
    if answer
        .token_type
        .as_deref()
        .is_some_and(|t| !t.eq_ignore_ascii_case("bearer"))
    {
        return Err(PollError::Failed(format!(
            "{what}: the token is not a Bearer token"
        )));
    }
    let seconds = match answer.expires_in {
        Seconds::Number(n) => Some(n),
        Seconds::Text(t) => t.trim().parse::<u64>().ok(),
    }
    .ok_or_else(|| PollError::Failed(format!("{what}: expires_in is not a number of seconds")))?;
    if seconds == 0 {
        return Err(PollError::Failed(format!(
            "{what}: the token expires at once (expires_in 0)"
        )));
    }
    let token = answer.access_token;
    // RFC 6750 §2.1: a bearer token is printable ASCII without spaces.
    if token.is_empty()
        || token.len() > MAX_TOKEN_LEN
        || !token.bytes().all(|b| b.is_ascii_graphic())
    {
        // Its length only: it is a credential.
        return Err(PollError::Failed(format!(
            "{what}: an access_token of {} characters that is not a printable token of at most {MAX_TOKEN_LEN}",
            token.len()
        )));
    }
    Ok(Fresh {
        authorization: bearer(&token),
        lifetime: Duration::from_secs(seconds),
    })
}

/// A token endpoint's refusal (RFC 6749 §5.2). A wrong or expired secret,
/// an unknown client or tenant, a client not allowed this grant or
/// audience is the key refused (`crosscheck_failing` critical at once);
/// anything else (`temporarily_unavailable`, a proxy's page) a failed
/// poll. A 401 is always the client refused (§5.2: its authentication
/// failed). Only the error code is kept: the description is the
/// provider's text and may echo what was sent.
fn token_error(status: u16, body: &[u8], what: &str) -> PollError {
    #[derive(Deserialize)]
    struct OAuthError {
        error: String,
    }
    let code = serde_json::from_slice::<OAuthError>(body)
        .ok()
        .map(|e| e.error);
    let refused = matches!(
        code.as_deref(),
        Some(
            "invalid_client"
                | "unauthorized_client"
                | "invalid_grant"
                | "invalid_request"
                // Auth0's answer for a client not granted the audience.
                | "access_denied"
        )
    );
    if status == 401 || status == 403 || refused {
        return PollError::Refused { status };
    }
    // Only a code RFC 6749 §5.2 (or §4.1.2.1) defines is named: a hostile
    // endpoint could put anything, the secret it was sent included, in
    // the `error` field.
    let known = code.as_deref().filter(|c| {
        matches!(
            *c,
            "invalid_scope" | "unsupported_grant_type" | "server_error" | "temporarily_unavailable"
        )
    });
    match known {
        Some(code) => PollError::Failed(format!("{what} answered HTTP {status} ({code})")),
        None => PollError::Failed(format!("{what} answered HTTP {status}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crosscheck::fake::FakeApi;
    use std::sync::Mutex as StdMutex;

    const SECRET: &str = "m2m_secret_never_shown_7c1d";
    /// Auth0's margin, as `auth0::RENEW_BEFORE`.
    const MARGIN: Duration = Duration::from_secs(60);

    fn credentials(base: &str) -> ClientCredentials {
        ClientCredentials::new(
            format!("{base}/oauth/token"),
            "cid_1".into(),
            SecretString::new(SECRET.into()),
            vec![("audience".into(), format!("{base}/api/v2/"))],
            MARGIN,
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
        assert_eq!(c.requests(), 1);
        assert_eq!(a.to_str().unwrap(), "Bearer eyJ.token_0");
        assert!(a.is_sensitive());
        c.forget().await;
        let renewed = c.authorization(&client()).await.unwrap();
        assert_eq!(renewed.to_str().unwrap(), "Bearer eyJ.token_1");
        assert_eq!(c.requests(), 2);

        // A token that lives less than the margin is asked for each time.
        let short = FakeApi::start(token_api(Arc::new(StdMutex::new(Vec::new())), 30)).await;
        let c = credentials(&short.base);
        c.authorization(&client()).await.unwrap();
        c.authorization(&client()).await.unwrap();
        assert_eq!(short.requests(), 2);

        // Another secret for the same client is another sign-in.
        let other = ClientCredentials::new(
            format!("{}/oauth/token", api.base),
            "cid_1".into(),
            SecretString::new("rotated".into()),
            vec![("audience".into(), format!("{}/api/v2/", api.base))],
            MARGIN,
        );
        assert_eq!(
            other
                .authorization(&client())
                .await
                .unwrap()
                .to_str()
                .unwrap(),
            "Bearer eyJ.token_2"
        );
    }

    #[tokio::test]
    async fn errors_name_the_token_endpoint_by_its_path() {
        // The form itself is checked where the request is read whole: the
        // local token endpoints of tests/it/crosscheck_entra.rs and
        // crosscheck_auth0.rs.
        let targets = Arc::new(StdMutex::new(Vec::new()));
        let seen = Arc::clone(&targets);
        let api = FakeApi::start(Arc::new(move |target: &str| {
            seen.lock().unwrap().push(target.to_owned());
            (503, "{}".into())
        }))
        .await;
        let c = ClientCredentials::new(
            format!("{}/tenant/oauth2/v2.0/token", api.base),
            "cid_form".into(),
            SecretString::new(SECRET.into()),
            vec![(
                "scope".into(),
                "https://graph.microsoft.com/.default".into(),
            )],
            Duration::from_secs(300),
        );
        let e = c.authorization(&client()).await.unwrap_err();
        assert_eq!(*targets.lock().unwrap(), ["/tenant/oauth2/v2.0/token"]);
        assert_eq!(
            e.to_string(),
            PollError::Failed("POST /tenant/oauth2/v2.0/token answered HTTP 503".into())
                .to_string()
        );
    }

    #[tokio::test]
    async fn missing_credentials_are_refused_without_a_request() {
        let api = FakeApi::start(token_api(Arc::new(StdMutex::new(Vec::new())), 60)).await;
        let c = ClientCredentials::new(
            format!("{}/oauth/token", api.base),
            String::new(),
            SecretString::new(String::new()),
            Vec::new(),
            MARGIN,
        );
        let e = c.authorization(&client()).await.unwrap_err();
        assert_eq!(e, PollError::Refused { status: 0 });
        assert_eq!(api.requests(), 0);
    }

    #[tokio::test]
    async fn a_refused_client_is_refused_and_broken_answers_fail_without_the_secret() {
        for (status, body, outcome) in [
            (401, r#"{"error":"access_denied"}"#, "refused"),
            (401, "<html>", "refused"),
            (403, r#"{"error":"access_denied"}"#, "refused"),
            (
                400,
                r#"{"error":"invalid_client","error_description":"m2m_secret_never_shown_7c1d"}"#,
                "refused",
            ),
            (400, r#"{"error":"unauthorized_client"}"#, "refused"),
            (400, r#"{"error":"temporarily_unavailable"}"#, "error"),
            // A hostile endpoint echoing the secret as the code.
            (400, r#"{"error":"m2m_secret_never_shown_7c1d"}"#, "error"),
            (400, "<html>", "error"),
            (200, r#"{"access_token":"x"}"#, "error"),
            (200, r#"{"access_token":"","expires_in":60}"#, "error"),
            (200, r#"{"access_token":"x","expires_in":0}"#, "error"),
            (200, r#"{"access_token":"x","expires_in":-5}"#, "error"),
            (200, r#"{"access_token":"x","expires_in":"soon"}"#, "error"),
            (
                200,
                r#"{"access_token":"x","expires_in":60,"token_type":"mac"}"#,
                "error",
            ),
            (200, r#"{"access_token":"a b\nc","expires_in":60}"#, "error"),
            (200, "<html>", "error"),
        ] {
            let api = FakeApi::start(Arc::new(move |_: &str| (status, body.to_owned()))).await;
            let c = credentials(&api.base);
            let e = c.authorization(&client()).await.unwrap_err();
            assert_eq!(e.outcome(), outcome, "{status} {body}: {e}");
            assert!(!e.to_string().contains(SECRET) && !format!("{e:?}").contains(SECRET));
            assert!(!format!("{c:?}").contains(SECRET));
        }
    }

    #[test]
    fn a_token_answer_is_read_and_renewed_before_it_expires_and_errors_never_quote_it() {
        // The example answer of Microsoft's client-credentials flow page
        // (learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow).
        let body = r#"{"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599,
                       "access_token": "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiIsIng1dCI6Ik1uQ19WWmNBVGZNNXBP"}"#;
        let t = parse_token(body.as_bytes(), "POST token_url").unwrap();
        assert_eq!(t.lifetime, Duration::from_secs(3599));
        assert!(t.authorization.is_sensitive());
        let now = Instant::now();
        let entra_margin = Duration::from_secs(300);
        assert_eq!(
            renew_at(now, t.lifetime, entra_margin),
            now + Duration::from_secs(3599) - entra_margin
        );
        // A lifetime under the margin renews at once; one past a day is a day.
        assert_eq!(renew_at(now, Duration::from_secs(30), MARGIN), now);
        assert_eq!(
            renew_at(now, Duration::from_secs(10 * 86_400), MARGIN),
            now + MAX_LIFETIME - MARGIN
        );
        // Entra's older endpoints sent expires_in as a string.
        let text = r#"{"token_type": "Bearer", "expires_in": "3599", "access_token": "abc"}"#;
        assert_eq!(
            parse_token(text.as_bytes(), "POST token_url")
                .ok()
                .unwrap()
                .lifetime,
            Duration::from_secs(3599)
        );
        let bad =
            r#"{"token_type": "Bearer", "expires_in": 3599, "access_token": "a b\nc-secret"}"#;
        let e = parse_token(bad.as_bytes(), "POST token_url").err().unwrap();
        assert!(!e.to_string().contains("secret"), "{e}");
        // invalid_client (a wrong secret) is the key refused.
        let refused = token_error(
            401,
            br#"{"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."}"#,
            "POST token_url",
        );
        assert_eq!(refused, PollError::Refused { status: 401 });
        let e = token_error(
            400,
            br#"{"error": "temporarily_unavailable"}"#,
            "POST token_url",
        );
        assert_eq!(e.outcome(), "error");
        assert_eq!(
            e.to_string(),
            PollError::Failed("POST token_url answered HTTP 400 (temporarily_unavailable)".into())
                .to_string()
        );
    }
}
