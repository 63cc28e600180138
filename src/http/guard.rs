//! What every route checks around its work: the stream a route names, a
//! bearer token, a signed head, a body that could not be read, and the one
//! logged and counted refusal. Shared by the ingest, provider, Svix,
//! reconciliation and operator routes, so each refuses alike.

use super::api::Api;
use super::body::{self, BodyError};
use super::log_field::Escaped;
use super::reply::{self, Reply};
use crate::config::StreamConfig;
use crate::ingest::bearer::TokenChecked;
use crate::ingest::signature::{check_timestamp, SignedHeaders, VerifyError};
use hyper::body::Incoming;
use hyper::header::AUTHORIZATION;
use hyper::http::request::Parts;
use hyper::StatusCode;
use tokio::time::Instant;

/// The signed headers, present and with a timestamp inside the tolerance:
/// everything about a Standard Webhooks delivery that can be judged before
/// its body is read. Shared by ingest and operational webhooks.
pub(super) fn signed_head(parts: &Parts, now_unix: i64) -> Result<SignedHeaders<'_>, VerifyError> {
    let lookup = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let headers = SignedHeaders::find(lookup)?;
    check_timestamp(&headers, now_unix)?;
    Ok(headers)
}

/// Status, metric outcome and reason for a body that could not be read.
pub(super) fn body_failure(e: BodyError) -> (StatusCode, &'static str, &'static str) {
    match e {
        BodyError::TooLarge => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            body::BODY_TOO_LARGE,
        ),
        BodyError::TimedOut => (
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            "request body did not arrive in time (server.body_timeout)",
        ),
        BodyError::Broken => (
            StatusCode::BAD_REQUEST,
            "error",
            "request body could not be read",
        ),
    }
}

fn check_bearer(stream: &StreamConfig, parts: &Parts) -> Result<TokenChecked, &'static str> {
    if stream.ingest.tokens.is_empty() {
        return Err("app reports are not configured for this stream (set ingest.token)");
    }
    bearer(parts, &stream.ingest.tokens)
}

/// A bearer-token route's request up to its body, in the order every
/// route keeps: a declared size over the cap (413) before the token (401),
/// and only then the body, under the cap and the body deadline (413, 408,
/// 400). Each refusal is counted and logged against `stream`. The token's
/// proof comes back with the body: `TokenChecked::vouch` makes the
/// `Verified` body the report readers take.
pub(super) async fn bearer_then_body(
    app: &dyn Api,
    stream: &StreamConfig,
    parts: &Parts,
    body: Incoming,
    deadline: Instant,
) -> Result<(TokenChecked, Vec<u8>), Reply> {
    if body::declared_too_large(parts) {
        return Err(reject_body(app, stream, BodyError::TooLarge));
    }
    let checked = match check_bearer(stream, parts) {
        Ok(checked) => checked,
        Err(reason) => {
            return Err(reject(
                app,
                stream,
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                reason,
            ))
        }
    };
    let body = body::read(parts, body, deadline)
        .await
        .map_err(|e| reject_body(app, stream, e))?;
    Ok((checked, body))
}

/// Checks `Authorization: Bearer` against every token (no early exit, so
/// timing does not tell which one matched).
pub(super) fn bearer_matches(
    parts: &Parts,
    tokens: &[crate::config::secret::SecretString],
) -> Result<(), &'static str> {
    bearer(parts, tokens).map(|_| ())
}

/// `ingest::bearer::check` on the request's `Authorization` header.
fn bearer(
    parts: &Parts,
    tokens: &[crate::config::secret::SecretString],
) -> Result<TokenChecked, &'static str> {
    let header = parts
        .headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    crate::ingest::bearer::check(header, tokens.iter().map(|t| t.expose()))
}

pub(super) fn reject_body(app: &dyn Api, stream: &StreamConfig, e: BodyError) -> Reply {
    let (status, outcome, reason) = body_failure(e);
    reject(app, stream, status, outcome, reason)
}

/// Counts and logs a rejected request (one line, no body, no secrets).
pub(super) fn reject(
    app: &dyn Api,
    stream: &StreamConfig,
    status: StatusCode,
    outcome: &str,
    reason: &str,
) -> Reply {
    app.metrics().count_event(&stream.name, outcome);
    // A parser's reason can quote the request, so it is escaped too.
    tracing::warn!(stream = %stream.name, status = status.as_u16(), outcome, reason = %Escaped(reason), "rejected request");
    reply::error(status, reason)
}

/// The stream a route names: a configured one, or one a `[streams."PREFIX*"]` pattern
/// covers, which is checked with its template's credentials (and created only once a
/// request to it verified).
pub(super) fn configured_or_templated<'c>(
    config: &'c crate::config::Config,
    name: &str,
) -> Option<std::borrow::Cow<'c, StreamConfig>> {
    match config.streams.get(name) {
        Some(s) => Some(std::borrow::Cow::Borrowed(s)),
        None => config.templates.stream(name).map(std::borrow::Cow::Owned),
    }
}

pub(super) fn unknown_stream(name: &str) -> Reply {
    // Not counted per stream: labels only come from config.
    let shown: String = name.chars().take(64).collect();
    tracing::warn!(stream = %Escaped(&shown), status = 404, "rejected request: unknown stream");
    reply::error(
        StatusCode::NOT_FOUND,
        "no such stream (check [streams.NAME] in the config)",
    )
}
