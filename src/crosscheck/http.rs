//! The one HTTP exchange the cross-check makes: a `GET` with the stream's
//! key (`Bearer`, or Okta's `SSWS` scheme), bounded in time (one deadline around the request and the
//! whole body, so a slow drip ends like a hang) and in size (the body is
//! read through `http_body_util::Limited`, so a huge page costs at most
//! [`MAX_RESPONSE`] of memory), classified into a [`PollError`] when it is
//! not a 2xx.
//!
//! The key goes in the `Authorization` header only and never into an
//! error: errors name the URL's path and status, never a header.

use super::PollError;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{
    HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, DATE, RETRY_AFTER, USER_AGENT,
};
use hyper::{Method, Request};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// Largest response body read (a Clerk page of 500 users with every field
/// is well under 1 MiB).
pub const MAX_RESPONSE: usize = 4 * 1024 * 1024;
/// Longest `Retry-After` honoured: a longer one fails the poll as
/// `rate_limited` instead of holding it.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// 429s in a row before the poll gives up as `rate_limited`.
pub const MAX_THROTTLED: u32 = 5;

pub struct ApiClient {
    inner: hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// `Bearer <key>` (or `SSWS <key>`), marked sensitive so hyper never
    /// prints it.
    authorization: HeaderValue,
    /// One request, body included.
    timeout: Duration,
    /// Largest body read ([`MAX_RESPONSE`] unless [`ApiClient::max_response`]).
    max_response: usize,
}

/// A 2xx answer: its body (at most the client's cap) and its headers (for
/// a `Link` to the next page).
#[derive(Debug)]
pub struct Answer {
    pub body: Bytes,
    pub headers: HeaderMap,
}

/// What one request sends besides its URL.
struct Outgoing<'a> {
    method: Method,
    authorization: Option<&'a HeaderValue>,
    /// An `application/x-www-form-urlencoded` body.
    form: Option<Bytes>,
}

impl ApiClient {
    /// `key` was checked by `config::crosscheck::api_key` (printable ASCII),
    /// so the header value cannot fail; if it somehow does, every request
    /// fails as refused rather than going out without a key.
    pub fn new(key: &str, timeout: Duration) -> ApiClient {
        ApiClient::with_scheme("Bearer", key, timeout)
    }

    /// [`ApiClient::new`] with another `Authorization` scheme: Okta's API
    /// tokens go as `Authorization: SSWS <token>`
    /// (developer.okta.com/docs/guides/create-an-api-token/, "Use the API
    /// token").
    pub fn with_scheme(scheme: &str, key: &str, timeout: Duration) -> ApiClient {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let inner = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
        let mut authorization = HeaderValue::from_str(&format!("{scheme} {key}"))
            .unwrap_or_else(|_| HeaderValue::from_static(""));
        authorization.set_sensitive(true);
        ApiClient {
            inner,
            authorization,
            timeout,
            max_response: MAX_RESPONSE,
        }
    }

    /// Reads bodies up to `bytes` instead of [`MAX_RESPONSE`]: Okta's pages
    /// of 1,000 whole `LogEvent`s (a few KiB each) can pass 4 MiB.
    pub fn max_response(mut self, bytes: usize) -> ApiClient {
        self.max_response = bytes;
        self
    }

    /// `GET url`, waiting out 429s (each `Retry-After` up to
    /// [`MAX_RETRY_AFTER`], at most [`MAX_THROTTLED`] in a row). Returns the
    /// 2xx body; `what` names the request in errors (`GET /users`).
    pub async fn get(&self, url: &str, what: &str) -> Result<Bytes, PollError> {
        self.get_with_headers(url, what).await.map(|(_, body)| body)
    }

    /// [`ApiClient::get`], with the answer's headers (Okta's `Link`).
    pub async fn get_with_headers(
        &self,
        url: &str,
        what: &str,
    ) -> Result<(HeaderMap, Bytes), PollError> {
        let auth = self.authorization.clone();
        let answer = self.get_with(url, what, &auth).await?;
        Ok((answer.headers, answer.body))
    }

    /// `GET url` with this `Authorization` value (a token obtained at run
    /// time, `oauth::ClientCredentials`) instead of the key, keeping the
    /// answer's headers. 429s are waited out as in [`ApiClient::get`].
    pub async fn get_with(
        &self,
        url: &str,
        what: &str,
        authorization: &HeaderValue,
    ) -> Result<Answer, PollError> {
        self.throttled(url, what, || Outgoing {
            method: Method::GET,
            authorization: Some(authorization),
            form: None,
        })
        .await
    }

    /// `POST url` with a form body and no `Authorization` (the credentials
    /// are in the form: an OAuth token request). 429s are waited out too.
    pub async fn post_form(
        &self,
        url: &str,
        what: &str,
        form: &[(&str, &str)],
    ) -> Result<Answer, PollError> {
        let body: Bytes = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish()
            .into();
        self.throttled(url, what, || Outgoing {
            method: Method::POST,
            authorization: None,
            form: Some(body.clone()),
        })
        .await
    }

    async fn throttled<'a>(
        &self,
        url: &str,
        what: &str,
        outgoing: impl Fn() -> Outgoing<'a>,
    ) -> Result<Answer, PollError> {
        let mut throttled = 0;
        loop {
            match self.once(url, what, outgoing()).await {
                Err(PollError::RateLimited { retry_after }) if throttled < MAX_THROTTLED => {
                    throttled += 1;
                    let wait = retry_after.unwrap_or(Duration::from_secs(1));
                    if wait > MAX_RETRY_AFTER {
                        return Err(PollError::RateLimited { retry_after });
                    }
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    async fn once(&self, url: &str, what: &str, out: Outgoing<'_>) -> Result<Answer, PollError> {
        let mut req = Request::builder()
            .method(out.method)
            .uri(url)
            .header(USER_AGENT, concat!("hushwatch/", env!("CARGO_PKG_VERSION")))
            .header(ACCEPT, "application/json");
        if let Some(authorization) = out.authorization {
            if authorization.is_empty() {
                return Err(PollError::Refused { status: 0 });
            }
            req = req.header(AUTHORIZATION, authorization.clone());
        }
        if out.form.is_some() {
            req = req.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
        }
        let req = req
            .body(Full::new(out.form.unwrap_or_default()))
            .map_err(|_| PollError::Failed(format!("{what}: not a valid request URL")))?;
        let exchange = async {
            let resp = self
                .inner
                .request(req)
                .await
                .map_err(|e| PollError::Failed(format!("{what}: {}", connect_error(&e))))?;
            let status = resp.status().as_u16();
            match status {
                200..=299 => {}
                401 | 403 => return Err(PollError::Refused { status }),
                429 => {
                    let retry_after = retry_after(resp.headers());
                    return Err(PollError::RateLimited { retry_after });
                }
                _ => return Err(PollError::Failed(format!("{what} answered HTTP {status}"))),
            }
            let (parts, body) = resp.into_parts();
            match Limited::new(body, self.max_response).collect().await {
                Ok(body) => Ok(Answer {
                    body: body.to_bytes(),
                    headers: parts.headers,
                }),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                    Err(PollError::Failed(format!(
                        "{what}: the answer is larger than {} MiB",
                        self.max_response >> 20
                    )))
                }
                Err(_) => Err(PollError::Failed(format!(
                    "{what}: the connection closed in the middle of the answer"
                ))),
            }
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(PollError::Failed(format!(
                "{what} did not answer in full within {}s",
                self.timeout.as_secs()
            ))),
        }
    }
}

/// `Bearer <token>` as a sensitive header value, or `None` when the token
/// cannot be a header value.
pub fn bearer(token: &str) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// How long a 429 asks to wait: `Retry-After` in seconds, else the epoch
/// second the limit resets less the answer's own `Date`, so the wait is
/// the server's and no local clock is read; a reset already past is a 1 s
/// wait. The reset comes as Okta's `X-Rate-Limit-Reset`
/// (developer.okta.com/docs/reference/rl-best-practices/, "Check your rate
/// limits with Okta's rate limit headers") or Auth0's `X-RateLimit-Reset`
/// ("a UTC epoch timestamp indicating when the limit will reset", Auth0's
/// rate limit policy,
/// auth0.com/docs/troubleshoot/customer-support/operational-policies/rate-limit-policy).
/// `None`: neither is readable.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(secs) = text(RETRY_AFTER.as_str()).and_then(|v| v.parse::<u64>().ok()) {
        return Some(Duration::from_secs(secs));
    }
    let reset = text("x-rate-limit-reset")
        .or_else(|| text("x-ratelimit-reset"))?
        .parse::<i64>()
        .ok()?;
    let now = chrono::DateTime::parse_from_rfc2822(text(DATE.as_str())?).ok()?;
    let wait = reset.saturating_sub(now.timestamp()).max(1);
    Some(Duration::from_secs(u64::try_from(wait).ok()?))
}

fn connect_error(e: &hyper_util::client::legacy::Error) -> &'static str {
    if e.is_connect() {
        "could not connect"
    } else {
        "the connection closed before an answer"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const KEY: &str = "sk_test_never_shown_4f9a";

    /// What the local API answers on its n-th connection.
    #[derive(Clone)]
    enum Reply {
        Raw(&'static str),
        /// A 200 with a body of this many bytes (declared length).
        Huge(usize),
        /// Headers, then one byte a second, forever.
        Drip,
    }

    /// A local HTTP/1.1 server on port 0 that plays `replies` in turn and
    /// records each request head.
    async fn serve(replies: Vec<Reply>) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&heads);
        tokio::spawn(async move {
            for reply in replies.into_iter().cycle() {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut head = Vec::new();
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        let Ok(n) = sock.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        head.extend_from_slice(&buf[..n]);
                    }
                    seen.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&head).into_owned());
                    match reply {
                        Reply::Raw(text) => {
                            let _ = sock.write_all(text.as_bytes()).await;
                        }
                        Reply::Huge(len) => {
                            let _ = sock
                                .write_all(
                                    format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n")
                                        .as_bytes(),
                                )
                                .await;
                            let chunk = vec![b' '; 64 * 1024];
                            let mut left = len;
                            while left > 0 {
                                let n = left.min(chunk.len());
                                if sock.write_all(&chunk[..n]).await.is_err() {
                                    return;
                                }
                                left -= n;
                            }
                        }
                        Reply::Drip => {
                            let _ = sock
                                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n[")
                                .await;
                            loop {
                                tokio::time::sleep(Duration::from_millis(200)).await;
                                if sock.write_all(b" ").await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                    let _ = sock.shutdown().await;
                });
            }
        });
        (format!("http://{addr}/v1/users?limit=500"), heads)
    }

    fn ok(body: &'static str) -> Reply {
        Reply::Raw(Box::leak(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_boxed_str(),
        ))
    }

    fn client() -> ApiClient {
        ApiClient::new(KEY, Duration::from_secs(2))
    }

    fn assert_no_key(e: &PollError) {
        assert!(!e.to_string().contains(KEY), "{e}");
        assert!(!format!("{e:?}").contains(KEY), "{e:?}");
    }

    #[tokio::test]
    async fn the_key_goes_as_a_bearer_header_and_a_2xx_body_comes_back() {
        let (url, heads) = serve(vec![ok("[]")]).await;
        let body = client().get(&url, "GET /users").await.unwrap();
        assert_eq!(&body[..], b"[]");
        let head = heads.lock().unwrap()[0].to_ascii_lowercase();
        assert!(head.starts_with("get /v1/users?limit=500 "), "{head}");
        assert!(head.contains(&format!(
            "authorization: bearer {}",
            KEY.to_ascii_lowercase()
        )));
    }

    #[tokio::test]
    async fn refused_keys_and_server_errors_are_classified_without_the_key() {
        for (status, outcome) in [
            ("401 Unauthorized", "refused"),
            ("403 Forbidden", "refused"),
            ("503 Service Unavailable", "error"),
        ] {
            let raw: &'static str = Box::leak(
                format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n").into_boxed_str(),
            );
            let (url, _) = serve(vec![Reply::Raw(raw)]).await;
            let e = client().get(&url, "GET /users").await.unwrap_err();
            assert_eq!(e.outcome(), outcome, "{status}: {e}");
            assert_no_key(&e);
        }
    }

    #[tokio::test]
    async fn a_429_is_waited_out_for_its_retry_after_and_a_long_one_fails_as_rate_limited() {
        let throttle = Reply::Raw(
            "HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n",
        );
        let (url, heads) = serve(vec![throttle, ok("[]")]).await;
        let started = std::time::Instant::now();
        client().get(&url, "GET /users").await.unwrap();
        assert!(started.elapsed() >= Duration::from_secs(1));
        assert_eq!(heads.lock().unwrap().len(), 2);

        let long = Reply::Raw(
            "HTTP/1.1 429 Too Many Requests\r\nretry-after: 3600\r\ncontent-length: 0\r\n\r\n",
        );
        let (url, _) = serve(vec![long]).await;
        let e = client().get(&url, "GET /users").await.unwrap_err();
        assert_eq!(
            e,
            PollError::RateLimited {
                retry_after: Some(Duration::from_secs(3600))
            }
        );
        assert_eq!(e.outcome(), "rate_limited");
    }

    #[test]
    fn a_429_waits_for_retry_after_else_for_x_ratelimit_reset_against_the_answer_s_date() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_static(v));
            }
            h
        };
        assert_eq!(
            retry_after(&headers(&[
                ("retry-after", "7"),
                ("x-ratelimit-reset", "1")
            ])),
            Some(Duration::from_secs(7))
        );
        // Auth0: a Unix time, read against the server's own Date.
        assert_eq!(
            retry_after(&headers(&[
                ("date", "Fri, 04 Dec 2026 08:00:00 GMT"),
                ("x-ratelimit-reset", "1796371203"),
            ])),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            retry_after(&headers(&[
                ("date", "Fri, 04 Dec 2026 08:00:00 GMT"),
                ("x-ratelimit-reset", "1"),
            ])),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            retry_after(&headers(&[("x-ratelimit-reset", "1796371203")])),
            None
        );
        assert_eq!(retry_after(&headers(&[])), None);
    }

    #[tokio::test]
    async fn okta_s_ssws_scheme_and_its_rate_limit_reset_header_are_honoured() {
        let (url, heads) = serve(vec![ok("[]")]).await;
        ApiClient::with_scheme("SSWS", KEY, Duration::from_secs(2))
            .get(&url, "GET /api/v1/logs")
            .await
            .unwrap();
        let head = heads.lock().unwrap()[0].clone();
        assert!(
            head.contains(&format!("authorization: SSWS {KEY}\r\n")),
            "{head}"
        );
        // Okta's 429 (developer.okta.com/docs/reference/rl-best-practices/):
        // no Retry-After, `X-Rate-Limit-Reset` one second after `Date`.
        let throttle = Reply::Raw(
            "HTTP/1.1 429 Too Many Requests\r\ndate: Fri, 04 Dec 2026 08:00:00 GMT\r\nx-rate-limit-limit: 20\r\nx-rate-limit-remaining: 0\r\nx-rate-limit-reset: 1796371201\r\ncontent-length: 0\r\n\r\n",
        );
        let (url, heads) = serve(vec![throttle, ok("[]")]).await;
        let started = std::time::Instant::now();
        client().get(&url, "GET /api/v1/logs").await.unwrap();
        assert!(started.elapsed() >= Duration::from_secs(1));
        assert_eq!(heads.lock().unwrap().len(), 2);
        // A reset an hour away is not waited for: the poll ends rate limited.
        let long = Reply::Raw(
            "HTTP/1.1 429 Too Many Requests\r\ndate: Fri, 04 Dec 2026 08:00:00 GMT\r\nx-rate-limit-reset: 1796374800\r\ncontent-length: 0\r\n\r\n",
        );
        let (url, _) = serve(vec![long]).await;
        let e = client().get(&url, "GET /api/v1/logs").await.unwrap_err();
        assert_eq!(
            e,
            PollError::RateLimited {
                retry_after: Some(Duration::from_secs(3600))
            }
        );
    }

    #[tokio::test]
    async fn a_client_with_a_larger_cap_reads_past_4_mib_and_stops_at_its_own() {
        let (url, _) = serve(vec![Reply::Huge(MAX_RESPONSE + 1)]).await;
        let big = client().max_response(8 * 1024 * 1024);
        assert_eq!(
            big.get(&url, "GET /api/v1/logs").await.unwrap().len(),
            MAX_RESPONSE + 1
        );
        let (url, _) = serve(vec![Reply::Huge(8 * 1024 * 1024 + 1)]).await;
        let e = big.get(&url, "GET /api/v1/logs").await.unwrap_err();
        assert!(e.to_string().contains("larger than 8 MiB"), "{e}");
    }

    #[tokio::test]
    async fn a_huge_answer_stops_at_the_cap_and_a_slow_drip_at_the_deadline() {
        let (url, _) = serve(vec![Reply::Huge(MAX_RESPONSE + 1)]).await;
        let e = client().get(&url, "GET /users").await.unwrap_err();
        assert!(e.to_string().contains("larger than 4 MiB"), "{e}");
        let (url, _) = serve(vec![Reply::Drip]).await;
        let started = std::time::Instant::now();
        let e = client().get(&url, "GET /users").await.unwrap_err();
        assert!(
            e.to_string().contains("did not answer in full within 2s"),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_no_key(&e);
    }
}
