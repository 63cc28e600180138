//! `POST /v1/svix/{name}/operational` and `/acknowledge`. Same answers and
//! order as ingest: 404 unknown source, 413 declared size, 401/400 from the
//! head alone, then the body under the cap and deadline (413/408), 401 for a
//! MAC that does not match, 2xx only after the event and its state change
//! committed, 503 otherwise.

use super::api::Api;
use super::body::{self, BodyError};
use super::guard::{bearer_matches, body_failure, signed_head};
use super::log_field::Escaped;
use super::reply::{self, Reply};
use crate::config::SvixConfig;
use crate::ingest::signature::VerifyError;
use crate::ingest::svix_ops::{parse_operational, OpEvent};
use crate::store::{EventOutcome, NewEvent};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

fn unknown_source(name: &str) -> Reply {
    let shown: String = name.chars().take(64).collect();
    tracing::warn!(source = %Escaped(&shown), status = 404, "rejected operational webhook: unknown Svix source");
    reply::error(
        StatusCode::NOT_FOUND,
        "no such Svix source (check [svix.NAME] in the config)",
    )
}

fn reject(
    app: &dyn Api,
    svix: &SvixConfig,
    status: StatusCode,
    outcome: &str,
    reason: &str,
) -> Reply {
    app.metrics().count_svix_rejected(&svix.name, outcome);
    tracing::warn!(source = %svix.name, status = status.as_u16(), outcome, reason = %Escaped(reason), "rejected operational webhook");
    reply::error(status, reason)
}

fn reject_body(app: &dyn Api, svix: &SvixConfig, e: BodyError) -> Reply {
    let (status, outcome, reason) = body_failure(e);
    reject(app, svix, status, outcome, reason)
}

fn reject_verify(app: &dyn Api, svix: &SvixConfig, e: VerifyError) -> Reply {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNAUTHORIZED);
    reject(app, svix, status, e.outcome(), &e.to_string())
}

fn endpoint_of(event: &OpEvent) -> Option<(&str, Option<&str>)> {
    event
        .endpoint()
        .map(|e| (e.endpoint_id.as_str(), e.endpoint_uid.as_deref()))
}

fn subjects(event: &OpEvent) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some((id, _)) = endpoint_of(event) {
        out.push(("endpoint_id".to_string(), id.to_string()));
    }
    if let OpEvent::AttemptFailing { attempt, .. }
    | OpEvent::AttemptExhausted { attempt, .. }
    | OpEvent::AttemptRecovered { attempt, .. } = event
    {
        out.push(("msg_id".to_string(), attempt.msg_id.clone()));
    }
    out
}

pub async fn operational(
    app: &dyn Api,
    name: &str,
    req: Request<Incoming>,
    body_deadline: Instant,
) -> Reply {
    let config = app.config();
    let Some(svix) = config.svix.get(name) else {
        return unknown_source(name);
    };
    let (parts, body) = req.into_parts();
    if body::declared_too_large(&parts) {
        return reject_body(app, svix, BodyError::TooLarge);
    }
    let now = app.now().timestamp();
    let headers = match signed_head(&parts, now) {
        Ok(h) => h,
        Err(e) => return reject_verify(app, svix, e),
    };
    let body = match body::read(&parts, body, body_deadline).await {
        Ok(b) => b,
        Err(e) => return reject_body(app, svix, e),
    };
    let verified = match svix.verifier.verify(&headers, &body, now) {
        Ok(v) => v,
        Err(e) => return reject_verify(app, svix, e),
    };
    let delivery_id = headers.id.to_string();
    // Verified senders are never refused: an unreadable body is recorded
    // as `other` (refusing would make Svix retry and then disable us).
    let (event_type, event) = match parse_operational(verified) {
        Ok(m) => (m.event_type, m.event),
        Err(e) => {
            // serde's message can quote part of the body, so it is escaped.
            let reason = e.to_string();
            tracing::warn!(source = %svix.name, reason = %Escaped(&reason), "operational webhook not understood; recorded as other");
            let t = serde_json::from_slice::<Value>(verified.bytes())
                .ok()
                .and_then(|v| v["type"].as_str().map(str::to_string));
            (t.unwrap_or_else(|| "unknown".into()), OpEvent::Other)
        }
    };
    let event_type: String = event_type.chars().take(200).collect();
    let record = NewEvent {
        stream: format!("svix:{}", svix.name),
        delivery_id: Some(delivery_id),
        event_type: event_type.clone(),
        event_time: None,
        received_at: app.now(),
        feeds_clock: false,
        body_sha256: Some(Sha256::digest(&body).into()),
        channel: "svix",
        signature_verified: true,
        subject_ids: subjects(&event),
        audit: config.audit.enabled,
        access: None,
        forward: None,
    };
    let endpoint = endpoint_of(&event).map(|(id, uid)| (id.to_string(), uid.map(str::to_string)));
    let apply = app.svix_apply(
        svix,
        event,
        &event_type,
        endpoint
            .as_ref()
            .map(|(id, uid)| (id.as_str(), uid.as_deref())),
    );
    match app.svix_record(record, apply).await {
        Ok((outcome, pages)) => {
            let label = if outcome == EventOutcome::Accepted {
                "accepted"
            } else {
                "duplicate"
            };
            app.metrics().count_svix(&svix.name, &event_type, label);
            reply::json(
                StatusCode::OK,
                &json!({ "status": label, "pages": pages.len() }),
            )
        }
        Err(e) => {
            app.metrics().count_svix(&svix.name, &event_type, "error");
            tracing::error!(source = %svix.name, error = %e, "operational webhook not stored; answered 503");
            reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "event could not be stored; retry later",
            )
        }
    }
}

pub(super) async fn acknowledge(
    app: &dyn Api,
    name: &str,
    req: super::idempotency::OpRequest,
    body_deadline: Instant,
) -> Reply {
    let config = app.config();
    let Some(svix) = config.svix.get(name) else {
        return unknown_source(name);
    };
    let (parts, body) = req.into_parts();
    let Some(token) = &svix.admin_token else {
        return reply::error(
            StatusCode::UNAUTHORIZED,
            "acknowledging is not configured (set admin_token)",
        );
    };
    if let Err(reason) = bearer_matches(&parts, std::slice::from_ref(token)) {
        tracing::warn!(source = %svix.name, reason, "rejected acknowledge");
        return reply::error(StatusCode::UNAUTHORIZED, reason);
    }
    let body = match body::read(&parts, body, body_deadline).await {
        Ok(b) => b,
        Err(e) => {
            let (status, _, reason) = body_failure(e);
            return reply::error(status, reason);
        }
    };
    let parsed: Option<(String, Vec<String>)> =
        serde_json::from_slice::<Value>(&body).ok().and_then(|v| {
            let endpoint = v["endpoint_id"].as_str()?.to_string();
            let ids = v["msg_ids"]
                .as_array()?
                .iter()
                .map(|m| m.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()?;
            Some((endpoint, ids))
        });
    let Some((endpoint_id, msg_ids)) = parsed else {
        return reply::error(
            StatusCode::BAD_REQUEST,
            r#"body must be {"endpoint_id": "...", "msg_ids": ["..."]}"#,
        );
    };
    let apply = app.svix_apply(
        svix,
        OpEvent::Other,
        "acknowledge",
        Some((&endpoint_id, None)),
    );
    // Whoever holds the source's admin token: the audit entry's actor.
    let by = "admin api".to_string();
    match app.svix_acknowledge(apply, endpoint_id, msg_ids, by).await {
        Ok((acknowledged, remaining)) => reply::json(
            StatusCode::OK,
            &json!({ "acknowledged": acknowledged, "remaining": remaining }),
        ),
        Err(e) => {
            tracing::error!(source = %svix.name, error = %e, "acknowledge not stored");
            reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "could not be stored; retry later",
            )
        }
    }
}
