//! The two ingest routes. Order of checks: route and stream (404), declared
//! size (413), credentials and timestamp from the head alone (401/400), and
//! only then the body, read under the size cap and the body deadline
//! (413/408); the signature over the body is verified last (401), the body
//! is parsed only after that, and 2xx is answered only after the store
//! committed (503 otherwise, so the sender retries).

use super::api::Api;
use super::body::{self, BodyError};
use super::guard::{
    bearer_then_body, configured_or_templated, reject, reject_body, signed_head, unknown_stream,
};
use super::record::{clip, store};
use super::reply::{self, Reply};
use crate::config::forward::ForwardClock;
use crate::config::providers::ProviderConfig;
use crate::config::StreamConfig;
use crate::ingest::payload::{app_reports, webhook_facts};
use crate::ingest::signature::VerifyError;
use crate::store::forward::ForwardBody;
use crate::store::NewEvent;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

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
    let verified = match verifier.verify(&headers, &body, now) {
        Ok(v) => v,
        Err(e) => return reject_verify(app, stream, e),
    };
    let delivery_id = headers.id.to_string();
    // The sender proved who it is, so even an unparseable body is an
    // arrival: refusing it would make Svix retry and eventually disable us.
    let facts = webhook_facts(verified).ok();
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
    let forward = match relay_body(
        &config,
        stream,
        &delivery_id,
        &event_type,
        feeds_clock,
        &body,
    ) {
        Ok(f) => f,
        Err(refused) => return *refused,
    };
    let clock_on_arrival = clock_on_arrival(stream);
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

/// Relay mode: what the ingest transaction stores to forward a verified
/// body, sealed under the stream and delivery id (`None` when the stream
/// does not relay). A body that cannot be sealed is answered 503, so the
/// sender retries rather than the event be accepted and never forwarded.
pub(super) fn relay_body(
    config: &crate::config::Config,
    stream: &StreamConfig,
    delivery_id: &str,
    event_type: &str,
    feeds_clock: bool,
    body: &[u8],
) -> Result<Option<ForwardBody>, Box<Reply>> {
    let Some(f) = &stream.forward else {
        return Ok(None);
    };
    match config.store.sealer.seal(&stream.name, delivery_id, body) {
        Ok(sealed) => Ok(Some(ForwardBody {
            sealed,
            order: f.order,
            revocation: config.audit.classifier.revokes(event_type),
            moves_clock: feeds_clock && f.clock == ForwardClock::Delivered,
            origin: None,
            templated: stream.templated,
        })),
        Err(reason) => {
            tracing::error!(stream = %stream.name, %reason, "relay body could not be sealed; answered 503");
            Err(Box::new(reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "event could not be stored; retry later",
            )))
        }
    }
}

/// Whether an arrival moves the stream's clock itself: yes unless the
/// stream relays with `clock = "delivered"` (then the app's 2xx does).
pub(super) fn clock_on_arrival(stream: &StreamConfig) -> bool {
    stream
        .forward
        .as_ref()
        .is_none_or(|f| f.clock == ForwardClock::Received)
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
    let (checked, body) = match bearer_then_body(app, stream, &parts, body, body_deadline).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let reports = match app_reports(checked.vouch(&body)) {
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

fn reject_verify(app: &dyn Api, stream: &StreamConfig, e: VerifyError) -> Reply {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNAUTHORIZED);
    reject(app, stream, status, e.outcome(), &e.to_string())
}
