//! The CLI's one HTTP exchange with a running hushwatch (`status`,
//! `silence`, `ack`): `http://` only, one deadline from connect to the
//! answer's last byte, and a cap on how much of the answer is read.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// Whole request, connect to last byte.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Sends one request and reads at most `max_answer` bytes of the answer.
/// Errors are one line for the operator, without the request's headers
/// (which may carry the admin token).
pub(super) async fn exchange(
    url: &str,
    method: hyper::Method,
    headers: &[(&str, String)],
    body: Bytes,
    max_answer: usize,
) -> Result<(hyper::StatusCode, Bytes), String> {
    exchange_within(TIMEOUT, url, method, headers, body, max_answer).await
}

/// [`exchange`] under another whole-request deadline: a replay of a large
/// window answers when its last chunk committed, which may take longer
/// than a status read.
pub(super) async fn exchange_within(
    deadline: Duration,
    url: &str,
    method: hyper::Method,
    headers: &[(&str, String)],
    body: Bytes,
    max_answer: usize,
) -> Result<(hyper::StatusCode, Bytes), String> {
    let uri: hyper::Uri = url.parse().map_err(|_| "not a valid URL".to_string())?;
    if uri.scheme_str() != Some("http") {
        return Err("only http:// URLs are supported".to_string());
    }
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(TIMEOUT));
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build::<_, Full<Bytes>>(connector);
    let mut request = hyper::Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let request = request
        .body(Full::new(body))
        .map_err(|e| format!("cannot build the request ({e})"))?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| format!("unreachable ({e})"))?;
        let status = response.status();
        let answer = Limited::new(response.into_body(), max_answer)
            .collect()
            .await
            .map_err(|e| format!("reading the answer failed ({e})"))?
            .to_bytes();
        Ok((status, answer))
    };
    tokio::time::timeout(deadline, exchange)
        .await
        .map_err(|_| format!("no answer within {} s", deadline.as_secs()))?
}
