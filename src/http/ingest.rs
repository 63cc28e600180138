//! The two ingest routes. Order of checks: route and stream (404), declared
//! size (413), credentials and timestamp from the head alone (401/400), and
//! only then the body, read under the size cap and the body deadline
//! (413/408); the signature over the body is verified last (401), the body
//! is parsed only after that, and 2xx is answered only after the store
//! committed (503 otherwise, so the sender retries).

use super::api::{Api, Created, Unavailable};
use super::body::{self, BodyError};
use super::log_field::Escaped;
use super::reply::{self, Reply};
use crate::config::forward::ForwardClock;
use crate::config::providers::ProviderConfig;
use crate::config::StreamConfig;
use crate::ingest::payload::{app_reports, webhook_facts};
use crate::ingest::signature::{check_timestamp, SignedHeaders, VerifyError};
use crate::store::forward::ForwardBody;
use crate::store::{EventOutcome, NewEvent};
use hyper::body::Incoming;
use hyper::header::AUTHORIZATION;
use hyper::http::request::Parts;
use hyper::{Request, StatusCode};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// Event types are labels for people, not payloads.
const MAX_TYPE_LEN: usize = 200;
/// Recorded for a verified body that has no recognisable type.
const UNKNOWN_TYPE: &str = "unknown";

pub async fn webhook(
    app: &dyn Api,
    stream_name: &str,
    req: Request<Incoming>,
    body_deadline: Instant,
) -> Reply {
    let config = app.config();
    let Some(stream) = configured_or_templated(&config, stream_name) else {
        return unknown_stream(stream_name);
    };
    let stream = stream.as_ref();
    if !matches!(stream.ingest.provider, ProviderConfig::Standard) {
        return super::providers::webhook(app, stream, &stream.ingest.provider, req, body_deadline)
            .await;
    }
    let (parts, body) = req.into_parts();
    if body::declared_too_large(&parts) {
        return reject_body(app, stream, BodyError::TooLarge);
    }
    let Some(verifier) = &stream.ingest.verifier else {
        return reject(
            app,
            stream,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "signed webhooks are not configured for this stream (set ingest.webhook_secret)",
        );
    };
    let now = app.now().timestamp();
    let headers = match signed_head(&parts, now) {
        Ok(h) => h,
        Err(e) => return reject_verify(app, stream, e),
    };
    let body = match body::read(&parts, body, body_deadline).await {
        Ok(b) => b,
        Err(e) => return reject_body(app, stream, e),
    };
    if let Err(e) = verifier.verify(&headers, &body, now) {
        return reject_verify(app, stream, e);
    }
    let delivery_id = headers.id.to_string();
    // The sender proved who it is, so even an unparseable body is an
    // arrival: refusing it would make Svix retry and eventually disable us.
    let facts = webhook_facts(&body).ok();
    let event_type = facts
        .as_ref()
        .and_then(|f| f.event_type.clone())
        .unwrap_or_else(|| UNKNOWN_TYPE.to_string());
    let (event_time, subject_ids) =
        facts.map_or((None, Vec::new()), |f| (f.event_time, f.subject_ids));
    let feeds_clock = stream.event_filter.feeds_clock(&event_type);
    // Relay mode: the verified body is stored (sealed) with the event and
    // forwarded to the app. With `clock = "delivered"` the app's 2xx moves
    // the clock, not this arrival.
    let forward = match &stream.forward {
        None => None,
        Some(f) => match config.store.sealer.seal(&stream.name, &delivery_id, &body) {
            Ok(sealed) => Some(ForwardBody {
                sealed,
                ordered: f.ordered,
                moves_clock: feeds_clock && f.clock == ForwardClock::Delivered,
            }),
            Err(reason) => {
                tracing::error!(stream = %stream.name, %reason, "relay body could not be sealed; answered 503");
                return reply::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "event could not be stored; retry later",
                );
            }
        },
    };
    let clock_on_arrival = stream
        .forward
        .as_ref()
        .is_none_or(|f| f.clock == ForwardClock::Received);
    let event = NewEvent {
        stream: stream.name.clone(),
        delivery_id: Some(delivery_id),
        feeds_clock: feeds_clock && clock_on_arrival,
        event_type: clip(event_type),
        event_time,
        received_at: app.now(),
        body_sha256: Some(Sha256::digest(&body).into()),
        channel: "webhook",
        signature_verified: true,
        subject_ids,
        audit: config.audit.enabled,
        access: None,
        forward,
    };
    store(app, stream, vec![event]).await
}

pub async fn app_report(
    app: &dyn Api,
    stream_name: &str,
    req: Request<Incoming>,
    body_deadline: Instant,
) -> Reply {
    let config = app.config();
    let Some(stream) = configured_or_templated(&config, stream_name) else {
        return unknown_stream(stream_name);
    };
    let stream = stream.as_ref();
    let (parts, body) = req.into_parts();
    if let Err(reason) = check_bearer(stream, &parts) {
        return reject(
            app,
            stream,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            reason,
        );
    }
    let body = match body::read(&parts, body, body_deadline).await {
        Ok(b) => b,
        Err(e) => return reject_body(app, stream, e),
    };
    let reports = match app_reports(&body) {
        Ok(r) => r,
        Err(e) => {
            return reject(
                app,
                stream,
                StatusCode::BAD_REQUEST,
                "error",
                &e.to_string(),
            )
        }
    };
    // These fields are ours to define, so a NUL (which PostgreSQL `text`
    // cannot hold, while SQLite can) is the caller's mistake: 400 naming
    // the field on both backends, never a 503 that reads as "store down".
    if let Some(field) = nul_in_reports(&reports) {
        return reject(
            app,
            stream,
            StatusCode::BAD_REQUEST,
            "error",
            &format!("{field} must not contain a NUL character (U+0000)"),
        );
    }
    let now = app.now();
    // Every report in one request shares the request body's digest.
    let body_digest: [u8; 32] = Sha256::digest(&body).into();
    let events = reports
        .into_iter()
        .map(|r| NewEvent {
            stream: stream.name.clone(),
            delivery_id: r.id,
            feeds_clock: stream.event_filter.feeds_clock(&r.event_type),
            event_type: clip(r.event_type),
            event_time: r.occurred_at,
            received_at: now,
            body_sha256: Some(body_digest),
            channel: "report",
            signature_verified: false,
            subject_ids: Vec::new(),
            audit: config.audit.enabled,
            access: None,
            forward: None,
        })
        .collect();
    store(app, stream, events).await
}

/// The first report field holding U+0000, named as the 400 names it
/// (`type`, or `[3].id` in an array), never with its value.
fn nul_in_reports(reports: &[crate::ingest::payload::AppReport]) -> Option<String> {
    let prefix = |i: usize| {
        if reports.len() == 1 {
            String::new()
        } else {
            format!("[{i}].")
        }
    };
    reports.iter().enumerate().find_map(|(i, r)| {
        if r.event_type.contains('\0') {
            Some(format!("{}type", prefix(i)))
        } else if r.id.as_deref().is_some_and(|id| id.contains('\0')) {
            Some(format!("{}id", prefix(i)))
        } else {
            None
        }
    })
}

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
            super::BODY_TOO_LARGE,
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

pub(super) fn check_bearer(stream: &StreamConfig, parts: &Parts) -> Result<(), &'static str> {
    if stream.ingest.tokens.is_empty() {
        return Err("app reports are not configured for this stream (set ingest.token)");
    }
    bearer_matches(parts, &stream.ingest.tokens)
}

/// Checks `Authorization: Bearer` against every token (no early exit, so
/// timing does not tell which one matched).
pub(super) fn bearer_matches(
    parts: &Parts,
    tokens: &[crate::config::secret::SecretString],
) -> Result<(), &'static str> {
    let presented = parts
        .headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or("missing \"Authorization: Bearer <token>\" header")?;
    let matched = tokens
        .iter()
        .fold(false, |acc, t| t.matches(presented.trim()) | acc);
    if matched {
        Ok(())
    } else {
        Err("token does not match")
    }
}

pub(super) async fn store(
    app: &dyn Api,
    stream: &StreamConfig,
    events: Vec<crate::store::NewEvent>,
) -> Reply {
    store_delivery(app, stream, events, None).await
}

/// `store`, with what the delivery said about the stream's provider subscriptions,
/// committed in the same transaction.
pub(super) async fn store_delivery(
    app: &dyn Api,
    stream: &StreamConfig,
    events: Vec<crate::store::NewEvent>,
    update: Option<crate::store::subscriptions::SubscriptionUpdate>,
) -> Reply {
    if !app.config().streams.contains_key(&stream.name) {
        if let Err(refused) = create_templated(app, &stream.name).await {
            return refused;
        }
    }
    match app.ingest_delivery(events, update).await {
        Ok(outcomes) => {
            let accepted = outcomes
                .iter()
                .filter(|o| **o == EventOutcome::Accepted)
                .count();
            let duplicate = outcomes.len() - accepted;
            for o in &outcomes {
                let label = if *o == EventOutcome::Accepted {
                    "accepted"
                } else {
                    "duplicate"
                };
                app.metrics().count_event(&stream.name, label);
            }
            // A delivery with no events (an Entra lifecycle notice) was still heard.
            let status = if accepted > 0 || outcomes.is_empty() {
                "accepted"
            } else {
                "duplicate"
            };
            reply::json(
                StatusCode::OK,
                &json!({ "status": status, "accepted": accepted, "duplicate": duplicate }),
            )
        }
        Err(Unavailable::Store(e)) => {
            tracing::error!(stream = %stream.name, error = %e, "event not stored; answered 503");
            app.metrics().count_event(&stream.name, "error");
            reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "event could not be stored; retry later",
            )
        }
        Err(Unavailable::Slow) => {
            app.metrics().count_event(&stream.name, "error");
            tracing::error!(stream = %stream.name, "storage did not answer in time; answered 503");
            reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage is slow; retry later",
            )
        }
    }
}

pub(super) fn reject_body(app: &dyn Api, stream: &StreamConfig, e: BodyError) -> Reply {
    let (status, outcome, reason) = body_failure(e);
    reject(app, stream, status, outcome, reason)
}

fn reject_verify(app: &dyn Api, stream: &StreamConfig, e: VerifyError) -> Reply {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNAUTHORIZED);
    reject(app, stream, status, e.outcome(), &e.to_string())
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

/// Creates a templated stream on its first verified request.
async fn create_templated(app: &dyn Api, name: &str) -> Result<(), Reply> {
    match app.create_stream(name).await {
        Ok(Created::New | Created::Exists) => Ok(()),
        Ok(Created::Full) => {
            tracing::warn!(stream = %name, status = 429, "templated stream refused: max_streams reached");
            Err(reply::error(
                StatusCode::TOO_MANY_REQUESTS,
                "max_streams templated streams exist; delete one or raise [server] max_streams",
            ))
        }
        Ok(Created::NoTemplate) => Err(unknown_stream(name)),
        Err(_) => Err(reply::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "state storage unavailable; retry later",
        )),
    }
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

pub(super) fn clip(mut event_type: String) -> String {
    if event_type.len() > MAX_TYPE_LEN {
        let mut cut = MAX_TYPE_LEN;
        while !event_type.is_char_boundary(cut) {
            cut -= 1;
        }
        event_type.truncate(cut);
    }
    event_type
}
