//! The HTTP exchanges the cross-check makes: a `GET` with the stream's key
//! (`Bearer`, or Okta's `SSWS` scheme) or a token obtained at run time, or
//! a form `POST` for a client-credentials token, each bounded in time (one
//! deadline around the request and the whole body, so a slow drip ends like a hang) and in size (the body is
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
/// Largest error body read when a caller asks for one (a Graph or OAuth
/// error object is a few hundred bytes).
pub const MAX_ERROR_BODY: usize = 64 * 1024;

/// One request beyond a plain `GET` with the client's key: another
/// credential (a token obtained at run time), a form body (`POST`), and
/// the error statuses whose bodies the caller reads itself (Graph's `400
/// syncStateNotFound`, an OAuth `invalid_client`).
pub struct Outgoing<'a> {
    pub url: &'a str,
    /// `Authorization` value (marked sensitive); `None`: none at all.
    pub authorization: Option<&'a HeaderValue>,
    /// `application/x-www-form-urlencoded` body: the request is a `POST`.
    pub form: Option<String>,
    /// Statuses answered as [`Answer::Status`] with their body (at most
    /// [`MAX_ERROR_BODY`]) instead of a [`PollError`].
    pub read_errors: &'a [u16],
}

/// What an [`Outgoing`] request answered.
#[derive(Debug)]
pub enum Answer {
    Ok(Bytes),
    Status { status: u16, body: Bytes },
}

/// A bearer header value marked sensitive (hyper never prints it); an
/// empty value when `token` cannot be a header, which every request
/// refuses to send.
pub fn bearer(token: &str) -> HeaderValue {
    credential("Bearer", token)
}

/// `<scheme> <key>` as a sensitive header value (empty, and refused by
/// every request, when it cannot be one).
fn credential(scheme: &str, key: &str) -> HeaderValue {
    let mut value = HeaderValue::from_str(&format!("{scheme} {key}"))
        .unwrap_or_else(|_| HeaderValue::from_static(""));
    value.set_sensitive(true);
    value
}

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

/// A 2xx answer with its headers (a `Link` to the next page): what
/// [`ApiClient::get_with`] and [`ApiClient::post_form`] return.
#[derive(Debug)]
pub struct Fetched {
    pub body: Bytes,
    pub headers: HeaderMap,
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
        let authorization = credential(scheme, key);
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
        let req = Outgoing {
            url,
            authorization: Some(&self.authorization),
            form: None,
            read_errors: &[],
        };
        match self.send_with_headers(&req, what).await? {
            (headers, Answer::Ok(body)) => Ok((headers, body)),
            (_, Answer::Status { status, .. }) => {
                Err(PollError::Failed(format!("{what} answered HTTP {status}")))
            }
        }
    }

    /// Sends `req`, waiting out 429s as [`ApiClient::get`] does.
    pub async fn send(&self, req: &Outgoing<'_>, what: &str) -> Result<Answer, PollError> {
        self.send_with_headers(req, what)
            .await
            .map(|(_, answer)| answer)
    }

    /// `GET url` with this `Authorization` value (a token obtained at run
    /// time, `oauth::ClientCredentials`) instead of the key, with the
    /// answer's headers. 429s are waited out as in [`ApiClient::get`].
    pub async fn get_with(
        &self,
        url: &str,
        what: &str,
        authorization: &HeaderValue,
    ) -> Result<Fetched, PollError> {
        let req = Outgoing {
            url,
            authorization: Some(authorization),
            form: None,
            read_errors: &[],
        };
        fetched(self.send_with_headers(&req, what).await?, what)
    }

    /// `POST url` with a form body and no `Authorization` (the credentials
    /// are in the form: an OAuth token request). 429s are waited out too.
    pub async fn post_form(
        &self,
        url: &str,
        what: &str,
        form: &[(&str, &str)],
    ) -> Result<Fetched, PollError> {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let req = Outgoing {
            url,
            authorization: None,
            form: Some(body),
            read_errors: &[],
        };
        fetched(self.send_with_headers(&req, what).await?, what)
    }

    async fn send_with_headers(
        &self,
        req: &Outgoing<'_>,
        what: &str,
    ) -> Result<(HeaderMap, Answer), PollError> {
        let mut throttled = 0;
        loop {
            match self.send_once(req, what).await {
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

    async fn send_once(
        &self,
        out: &Outgoing<'_>,
        what: &str,
    ) -> Result<(HeaderMap, Answer), PollError> {
        if out.authorization.is_some_and(HeaderValue::is_empty) {
            return Err(PollError::Refused { status: 0 });
        }
        let mut builder = Request::builder()
            .method(if out.form.is_some() {
                Method::POST
            } else {
                Method::GET
            })
            .uri(out.url)
            .header(USER_AGENT, concat!("hushwatch/", env!("CARGO_PKG_VERSION")))
            .header(ACCEPT, "application/json");
        if let Some(value) = out.authorization {
            builder = builder.header(AUTHORIZATION, value.clone());
        }
        if out.form.is_some() {
            builder = builder.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
        }
        let req = builder
            .body(Full::new(Bytes::from(out.form.clone().unwrap_or_default())))
            .map_err(|_| PollError::Failed(format!("{what}: not a valid request URL")))?;
        let exchange = async {
            let resp = self
                .inner
                .request(req)
                .await
                .map_err(|e| PollError::Failed(format!("{what}: {}", connect_error(&e))))?;
            let status = resp.status().as_u16();
            let limit = match status {
                200..=299 => self.max_response,
                s if out.read_errors.contains(&s) => MAX_ERROR_BODY,
                401 | 403 => return Err(PollError::Refused { status }),
                429 => {
                    let retry_after = retry_after(resp.headers());
                    return Err(PollError::RateLimited { retry_after });
                }
                _ => return Err(PollError::Failed(format!("{what} answered HTTP {status}"))),
            };
            let (parts, body) = resp.into_parts();
            let body = match Limited::new(body, limit).collect().await {
                Ok(body) => body.to_bytes(),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                    let size = if limit >= 1 << 20 {
                        format!("{} MiB", limit >> 20)
                    } else {
                        format!("{} KiB", limit >> 10)
                    };
                    return Err(PollError::Failed(format!(
                        "{what}: the answer is larger than {size}"
                    )));
                }
                Err(_) => {
                    return Err(PollError::Failed(format!(
                        "{what}: the connection closed in the middle of the answer"
                    )))
                }
            };
            let answer = if (200..=299).contains(&status) {
                Answer::Ok(body)
            } else {
                Answer::Status { status, body }
            };
            Ok((parts.headers, answer))
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

/// [`bearer`], or `None` when the token cannot be a header value (for a
/// caller that reports that itself rather than sending an empty value).
pub fn checked_bearer(token: &str) -> Option<HeaderValue> {
    let value = bearer(token);
    (!value.is_empty()).then_some(value)
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

/// A 2xx as [`Fetched`]; any status a caller did not ask to read fails.
fn fetched((headers, answer): (HeaderMap, Answer), what: &str) -> Result<Fetched, PollError> {
    match answer {
        Answer::Ok(body) => Ok(Fetched { body, headers }),
        Answer::Status { status, .. } => {
            Err(PollError::Failed(format!("{what} answered HTTP {status}")))
        }
    }
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
