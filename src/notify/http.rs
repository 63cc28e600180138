//! The one HTTP client every HTTP notifier uses: a POST with a hard
//! timeout around the whole exchange, classified into an `Outcome`.
//!
//! hyper-util's legacy client with hyper-rustls (webpki roots, ring): the
//! server side already uses hyper, so this adds only a TLS connector.
//! Notifiers' connections are not pooled: pages are rare, and a fresh
//! connection per attempt means a half-closed pooled socket can never turn
//! a good attempt into an ambiguous one. The relay's are
//! ([`Client::keep_alive`]): it sends every event to one app, and a new
//! TCP (and TLS) connection per event was most of its cost (issue #46).
//! There an ambiguous attempt is retried under the same `webhook-id`
//! anyway, and hyper never returns a connection that failed to the pool.

use super::{redact_url, retry, Cause, Outcome};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE, USER_AGENT};
use hyper::{Method, Request};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// How much of a response body is read (and at most 200 chars shown).
const MAX_RESPONSE: usize = 64 * 1024;
/// How long a 2xx's body may take to read before its connection is
/// dropped instead of reused.
const DRAIN_2XX: Duration = Duration::from_secs(1);
/// An idle pooled connection is closed after this: shorter than the
/// usual server keep-alive timeouts (60 s and more), so the server seldom
/// closes one just as it is reused.
const KEEP_ALIVE_IDLE: Duration = Duration::from_secs(30);

pub struct Client {
    inner: hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl Client {
    pub fn new() -> Client {
        Client::with_pool(0)
    }

    /// Keeps up to `max_idle_per_host` idle connections per scheme, host
    /// and port, each for at most [`KEEP_ALIVE_IDLE`].
    pub fn keep_alive(max_idle_per_host: usize) -> Client {
        Client::with_pool(max_idle_per_host)
    }

    fn with_pool(max_idle_per_host: usize) -> Client {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        // rustls' default provider: only the `ring` backend is compiled in.
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let inner = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(max_idle_per_host)
            .pool_idle_timeout(KEEP_ALIVE_IDLE)
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(https);
        Client { inner }
    }

    /// POSTs `body` as JSON to `url` and classifies the answer. Errors name
    /// the URL only as `scheme://host:port`.
    pub async fn post_json(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
        timeout: Duration,
    ) -> Outcome {
        self.request(Method::POST, url, headers, body, timeout)
            .await
    }

    /// `post_json` with any method (the heartbeat may `GET`); a body, when
    /// not empty, is sent as JSON.
    pub async fn request(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
        timeout: Duration,
    ) -> Outcome {
        self.request_status(method, url, headers, body, timeout)
            .await
            .0
    }

    /// `request`, plus the HTTP status when a response arrived (relay mode
    /// records the app's status with every outcome).
    pub async fn request_status(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
        timeout: Duration,
    ) -> (Outcome, Option<u16>) {
        let shown = redact_url(url);
        // The parser config loading used, so this cannot fail on a URL
        // that passed `check`.
        let target = match crate::config::notifiers::http_target(url) {
            Ok(t) => t,
            Err(reason) => {
                return (
                    Outcome::permanent(Cause::Refused, format!("{shown}: URL {reason}")),
                    None,
                )
            }
        };
        let basic = target.basic_auth;
        let mut req = Request::builder()
            .method(method)
            .uri(target.url.as_str())
            .header(USER_AGENT, concat!("hushwatch/", env!("CARGO_PKG_VERSION")));
        if !body.is_empty() {
            req = req.header(CONTENT_TYPE, "application/json");
        }
        if let Some(credentials) = basic {
            req = req.header(hyper::header::AUTHORIZATION, credentials);
        }
        for (name, value) in headers {
            let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) else {
                return (
                    Outcome::permanent(
                        Cause::Refused,
                        format!("invalid header {name} for {shown}"),
                    ),
                    None,
                );
            };
            req = req.header(n, v);
        }
        let req = match req.body(Full::new(Bytes::from(body))) {
            Ok(r) => r,
            Err(_) => {
                return (
                    Outcome::permanent(Cause::Refused, format!("invalid URL for {shown}")),
                    None,
                )
            }
        };
        let exchange = async {
            let resp = self.inner.request(req).await?;
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get(hyper::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            // The status is what counts: a 2xx is delivered whatever its
            // body does (read after the deadline, below); other bodies
            // are read (bounded) for the error text.
            let (text, unread) = if (200..300).contains(&status) {
                (String::new(), Some(resp.into_body()))
            } else {
                match Limited::new(resp.into_body(), MAX_RESPONSE).collect().await {
                    Ok(b) => (String::from_utf8_lossy(&b.to_bytes()).into_owned(), None),
                    Err(_) => (String::new(), None),
                }
            };
            Ok::<_, hyper_util::client::legacy::Error>((status, retry_after, text, unread))
        };
        let answered = tokio::time::timeout(timeout, exchange).await;
        let answered = match answered {
            Ok(Ok((status, retry_after, text, Some(body)))) => {
                // A 2xx's body is read to its end, briefly and bounded, only
                // so a keep-alive connection can be reused; a slow or huge
                // one just closes the connection and never turns the 2xx
                // into a failure.
                let drain = Limited::new(body, MAX_RESPONSE).collect();
                let _ = tokio::time::timeout(DRAIN_2XX, drain).await;
                Ok(Ok((status, retry_after, text)))
            }
            Ok(Ok((status, retry_after, text, None))) => Ok(Ok((status, retry_after, text))),
            Ok(Err(e)) => Ok(Err(e)),
            Err(e) => Err(e),
        };
        match answered {
            Err(_) => (Outcome::retry(
                Cause::Timeout,
                format!(
                    "{shown} did not answer within {}s (it may have received the page; retrying under the same key)",
                    timeout.as_secs()
                ),
                true,
            ), None),
            Ok(Err(e)) => {
                // Connect errors happen before anything was sent.
                let ambiguous = !e.is_connect();
                let what = if e.is_connect() {
                    "could not connect"
                } else {
                    "connection closed before a response (it may have received the page; retrying under the same key)"
                };
                let cause = if ambiguous {
                    Cause::Ambiguous
                } else {
                    Cause::Connect
                };
                (Outcome::retry(cause, format!("{shown}: {what}"), ambiguous), None)
            }
            Ok(Ok((status, retry_after, text))) => {
                let outcome = match retry::classify_status(status, retry_after.as_deref(), &shown) {
                    Outcome::Permanent { cause, reason } if !text.trim().is_empty() => {
                        Outcome::Permanent {
                            cause,
                            reason: format!("{reason}: {}", snippet(&text)),
                        }
                    }
                    other => other,
                };
                (outcome, Some(status))
            }
        }
    }
}

fn snippet(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    one_line.chars().take(200).collect()
}
