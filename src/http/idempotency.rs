//! `Idempotency-Key` on every mutating operator route (issue #30): the one
//! wrapper `routes` puts around `POST /v1/silences`,
//! `DELETE /v1/silences/{id}`, `POST /v1/streams/{stream}/acknowledge`,
//! `POST /v1/streams/{stream}/replay`,
//! `POST /v1/streams/{stream}/forwards/retry` and `…/skip`,
//! `PUT`/`DELETE /v1/streams/{stream}` and
//! `POST /v1/svix/{source}/acknowledge`.
//!
//! The answers follow the IETF httpapi draft's error scenarios
//! (<https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/>,
//! "Error Scenarios": a key reused for a different request payload is 422,
//! a request while the first with its key is still being processed is
//! 409). In order:
//! - no `Idempotency-Key` / `X-Idempotency-Key` header: the route runs as
//!   it always did;
//! - the route's token does not match (or the route has none): the route
//!   runs and refuses (401/404) as it always did, so the key is only ever
//!   looked at for a caller who proved the credential;
//! - a key that is empty, over 255 bytes or not visible ASCII
//!   (0x21..=0x7E), or two header lines that disagree: 400;
//! - the body is read under the usual limits; the record is claimed in
//!   the store (`store::idempotency`, one statement: of concurrent calls
//!   on any replica one runs, the others get 409);
//! - a key already answered for the same request: that answer replayed
//!   with `X-Idempotent-Replayed: true`; for another request: 422;
//! - after the route ran: a 2xx answer is stored; anything else deletes
//!   the claim, so a retry runs again (a 4xx/5xx is never replayed).
//!
//! Only hashes reach the store: the key as SHA-256 over (SHA-256 of the
//! route's token, method and route template, key), so one token's key
//! never finds another's answer and `/v1/silences` never meets
//! `/acknowledge`; the request as SHA-256 over (method, path and query,
//! body), so the same key on `DELETE /v1/silences/1` and `/2` is a 422,
//! not a replay of the wrong answer. Records expire after
//! `store::idempotency::TTL` (24 h). The key is never logged.
//! A request's own `X-Idempotent-Replayed` header is never read.

use super::api::Api;
use super::body;
use super::guard::{bearer_matches, body_failure};
use super::reply::{self, Reply};
use crate::config::secret::SecretString;
use crate::config::Config;
use crate::store::idempotency::{Begun, IdempotencyKey, StoredAnswer};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};
use sha2::{Digest, Sha256};
use std::future::Future;
use tokio::time::Instant;

/// The body a wrapped route reads: the connection's (no key given) or the
/// bytes the wrapper already read and hashed.
pub(super) type OpBody = Either<Incoming, Full<Bytes>>;

/// The request a wrapped route gets.
pub(super) type OpRequest = Request<OpBody>;

/// Longest accepted key, in bytes (Stripe's limit; UUIDs are 36).
pub const MAX_KEY: usize = 255;

/// The request headers that carry a key (the draft's name, and the `X-`
/// name many clients still send).
const KEY_HEADERS: [&str; 2] = ["idempotency-key", "x-idempotency-key"];

/// The response header that marks a replayed answer.
pub const REPLAYED: &str = "x-idempotent-replayed";

/// A mutating operator route: its template (the scope of its keys) and the
/// token that authorizes it.
pub(super) struct Operation {
    template: &'static str,
    token: Option<SecretString>,
}

/// The mutating operator routes; `None` for every other request.
pub(super) fn operation(config: &Config, method: &Method, segments: &[&str]) -> Option<Operation> {
    let admin = || config.templates.admin_token.clone();
    let (template, token) = match (method, segments) {
        (&Method::POST, ["v1", "silences"]) => ("POST /v1/silences", admin()),
        (&Method::DELETE, ["v1", "silences", _]) => ("DELETE /v1/silences/{id}", admin()),
        (&Method::POST, ["v1", "streams", _, "acknowledge"]) => {
            ("POST /v1/streams/{stream}/acknowledge", admin())
        }
        (&Method::POST, ["v1", "streams", _, "replay"]) => {
            ("POST /v1/streams/{stream}/replay", admin())
        }
        (&Method::POST, ["v1", "streams", _, "forwards", "retry"]) => {
            ("POST /v1/streams/{stream}/forwards/retry", admin())
        }
        (&Method::POST, ["v1", "streams", _, "forwards", "skip"]) => {
            ("POST /v1/streams/{stream}/forwards/skip", admin())
        }
        (&Method::PUT, ["v1", "streams", _]) => ("PUT /v1/streams/{stream}", admin()),
        (&Method::DELETE, ["v1", "streams", _]) => ("DELETE /v1/streams/{stream}", admin()),
        (&Method::POST, ["v1", "svix", source, "acknowledge"]) => (
            "POST /v1/svix/{source}/acknowledge",
            config.svix.get(*source).and_then(|s| s.admin_token.clone()),
        ),
        _ => return None,
    };
    Some(Operation { template, token })
}

/// The key the request carries: `Ok(None)` without one, `Err` (400) for a
/// malformed one or two that disagree.
fn presented_key(parts: &Parts) -> Result<Option<&[u8]>, &'static str> {
    let mut found: Option<&[u8]> = None;
    for name in KEY_HEADERS {
        for value in parts.headers.get_all(name) {
            let value = value.as_bytes();
            match found {
                Some(earlier) if earlier != value => {
                    return Err("Idempotency-Key given twice with different values")
                }
                _ => found = Some(value),
            }
        }
    }
    match found {
        Some(key)
            if key.is_empty()
                || key.len() > MAX_KEY
                || !key.iter().all(|b| (0x21..=0x7e).contains(b)) =>
        {
            Err("Idempotency-Key must be 1 to 255 visible ASCII characters (0x21-0x7E)")
        }
        found => Ok(found),
    }
}

/// Each part with its length first, so no two part lists hash alike.
fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}

fn record_key(
    token: &SecretString,
    template: &str,
    key: &[u8],
    parts: &Parts,
    body: &[u8],
) -> IdempotencyKey {
    let credential: [u8; 32] = Sha256::digest(token.expose().as_bytes()).into();
    let target = parts
        .uri
        .path_and_query()
        .map_or(parts.uri.path(), |p| p.as_str());
    IdempotencyKey {
        key_sha256: digest(&[
            b"hushwatch idempotency-key v1",
            &credential,
            template.as_bytes(),
            key,
        ]),
        request_sha256: digest(&[parts.method.as_str().as_bytes(), target.as_bytes(), body]),
    }
}

fn unavailable() -> Reply {
    reply::error(
        StatusCode::SERVICE_UNAVAILABLE,
        "state storage unavailable; retry later",
    )
}

fn replay(answer: StoredAnswer) -> Reply {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let mut response = reply::text(status, &answer.content_type, answer.body);
    response
        .headers_mut()
        .insert(REPLAYED, HeaderValue::from_static("true"));
    response
}

/// Runs `route` under the request's `Idempotency-Key`, if it has one (see
/// the module documentation).
pub(super) async fn guard<F, Fut>(
    app: &dyn Api,
    op: Operation,
    req: Request<Incoming>,
    deadline: Instant,
    route: F,
) -> Reply
where
    F: FnOnce(OpRequest) -> Fut,
    Fut: Future<Output = Reply>,
{
    let (parts, body) = req.into_parts();
    let has_key = KEY_HEADERS.iter().any(|h| parts.headers.contains_key(*h));
    // The credential first: without it the route answers as it always did.
    let token = match op.token {
        Some(token) if has_key && bearer_matches(&parts, std::slice::from_ref(&token)).is_ok() => {
            token
        }
        _ => return route(Request::from_parts(parts, Either::Left(body))).await,
    };
    let key = match presented_key(&parts) {
        Ok(Some(key)) => key.to_vec(),
        Ok(None) => return route(Request::from_parts(parts, Either::Left(body))).await,
        Err(reason) => return reply::error(StatusCode::BAD_REQUEST, reason),
    };
    let bytes = match body::read(&parts, body, deadline).await {
        Ok(b) => b,
        Err(e) => {
            let (status, _, reason) = body_failure(e);
            return reply::error(status, reason);
        }
    };
    let record = record_key(&token, op.template, &key, &parts, &bytes);
    drop(key);
    let started = match app.idempotency_begin(record).await {
        Ok(Begun::Claimed(started)) => started,
        Ok(Begun::Done(answer)) => return replay(answer),
        Ok(Begun::Mismatch) => {
            return reply::error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "this Idempotency-Key was used for a different request; use a new key",
            )
        }
        Ok(Begun::Running) => {
            let mut response = reply::error(
                StatusCode::CONFLICT,
                "a request with this Idempotency-Key is still running; retry later",
            );
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            return response;
        }
        Err(e) => {
            tracing::error!(route = op.template, error = %e, "idempotency key not claimed; answered 503");
            return unavailable();
        }
    };
    let request = Request::from_parts(parts, Either::Right(Full::new(Bytes::from(bytes))));
    let response = route(request).await;
    settle(app, op.template, record, started, response).await
}

/// Stores a 2xx answer under the claim, or gives the claim up.
async fn settle(
    app: &dyn Api,
    template: &'static str,
    record: IdempotencyKey,
    started: DateTime<Utc>,
    response: Reply,
) -> Reply {
    let (parts, body) = response.into_parts();
    let full = match body {
        Either::Left(full) if parts.status.is_success() => full,
        body => {
            release(app, template, record, started).await;
            return Response::from_parts(parts, body);
        }
    };
    let Ok(collected) = full.collect().await;
    let bytes = collected.to_bytes();
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    match String::from_utf8(bytes.to_vec()) {
        Ok(text) => {
            let answer = StoredAnswer {
                status: parts.status.as_u16(),
                content_type,
                body: text,
            };
            match app.idempotency_finish(record, started, answer).await {
                Ok(true) => {}
                // The action happened either way, so its answer is sent;
                // a retry finds the key running (409) until the claim's
                // lease runs out, then runs again.
                Ok(false) => tracing::warn!(
                    route = template,
                    "idempotency claim was taken over before the answer was stored"
                ),
                Err(e) => tracing::error!(
                    route = template,
                    error = %e,
                    "the answer to an idempotent request was not stored"
                ),
            }
        }
        // Every operator answer is JSON; anything else is not replayable.
        Err(_) => release(app, template, record, started).await,
    }
    Response::from_parts(parts, Either::Left(Full::new(bytes)))
}

async fn release(
    app: &dyn Api,
    template: &'static str,
    record: IdempotencyKey,
    started: DateTime<Utc>,
) {
    if let Err(e) = app.idempotency_release(record, started).await {
        // The claim then holds the key (409) until its lease runs out.
        tracing::warn!(route = template, error = %e, "idempotency claim not released");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &[u8])]) -> Parts {
        let mut b = Request::builder().method("POST").uri("/v1/silences?x=1");
        for (name, value) in headers {
            b = b.header(*name, HeaderValue::from_bytes(value).unwrap());
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn keys_are_bounded_visible_ascii_and_agree() {
        assert_eq!(presented_key(&parts(&[])), Ok(None));
        let ok = parts(&[("Idempotency-Key", b"abc-123")]);
        assert_eq!(presented_key(&ok), Ok(Some(&b"abc-123"[..])));
        let x = parts(&[("X-Idempotency-Key", b"k")]);
        assert_eq!(presented_key(&x), Ok(Some(&b"k"[..])));
        let both = parts(&[("Idempotency-Key", b"k"), ("X-Idempotency-Key", b"k")]);
        assert_eq!(presented_key(&both), Ok(Some(&b"k"[..])));
        let max = vec![b'a'; MAX_KEY];
        assert!(presented_key(&parts(&[("Idempotency-Key", &max)])).is_ok());
        for bad in [
            &[b'a'; MAX_KEY + 1][..],
            b"has space",
            b"tab\there",
            "caf\u{e9}".as_bytes(),
            b"\x80",
        ] {
            assert!(
                presented_key(&parts(&[("Idempotency-Key", bad)])).is_err(),
                "{bad:?}"
            );
        }
        let differ = parts(&[("Idempotency-Key", b"a"), ("X-Idempotency-Key", b"b")]);
        assert!(presented_key(&differ).is_err());
    }

    #[test]
    fn the_record_key_depends_on_token_route_and_key_and_the_request_on_the_rest() {
        let a = SecretString::new("token-a".into());
        let b = SecretString::new("token-b".into());
        let p = parts(&[]);
        let base = record_key(&a, "POST /v1/silences", b"k", &p, b"{}");
        let other_token = record_key(&b, "POST /v1/silences", b"k", &p, b"{}");
        let other_route = record_key(&a, "POST /v1/streams/{stream}/acknowledge", b"k", &p, b"{}");
        let other_body = record_key(&a, "POST /v1/silences", b"k", &p, b"{ }");
        assert_ne!(base.key_sha256, other_token.key_sha256);
        assert_ne!(base.key_sha256, other_route.key_sha256);
        assert_eq!(base.key_sha256, other_body.key_sha256);
        assert_ne!(base.request_sha256, other_body.request_sha256);
        assert_eq!(base, record_key(&a, "POST /v1/silences", b"k", &p, b"{}"));
    }
}
