//! `POST /v1/streams/{stream}/reconciliations`: a report of the app's
//! reconciliation job. Same order of checks as the app-report route: stream
//! (404), declared size (413), bearer token from the head (401), then the
//! body under the size cap and deadline (413/408), its shape (400), and 200
//! only after the store committed (503 otherwise).

use super::api::{Api, Unavailable};
use super::guard::{bearer_then_body, reject, unknown_stream};
use super::reply::{self, Reply};
use crate::ingest::reconcile;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

pub async fn report(
    app: &dyn Api,
    stream_name: &str,
    req: Request<Incoming>,
    body_deadline: Instant,
) -> Reply {
    let config = app.config();
    // Configured streams only: a report never creates a templated stream.
    let Some(stream) = config.streams.get(stream_name) else {
        return unknown_stream(stream_name);
    };
    let (parts, body) = req.into_parts();
    let (checked, body) = match bearer_then_body(app, stream, &parts, body, body_deadline).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let report = match reconcile::parse(checked.vouch(&body)) {
        Ok(r) => r,
        Err(reason) => return reject(app, stream, StatusCode::BAD_REQUEST, "error", &reason),
    };
    // The report's fields are ours to define: a NUL (PostgreSQL `text`
    // refuses it, SQLite stores it) is answered 400 by field name on both
    // backends, never the 503 that reads as "store down". The parser already
    // refuses control characters in `id` and subjects; `detail` is free
    // text, so this is where its NUL is caught.
    if let Some(field) = nul_field(&report) {
        let reason = format!("{field} must not contain a NUL character (U+0000)");
        return reject(app, stream, StatusCode::BAD_REQUEST, "error", &reason);
    }
    let digest: [u8; 32] = Sha256::digest(&body).into();
    match app.record_reconciliation(stream, report, digest).await {
        Ok(new) => reply::json(
            StatusCode::OK,
            &json!({ "status": if new { "stored" } else { "duplicate" } }),
        ),
        Err(e) => {
            if let Unavailable::Store(e) = &e {
                tracing::error!(stream = %stream.name, error = %e, "reconciliation not stored; answered 503");
            }
            reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "reconciliation report could not be stored; retry later",
            )
        }
    }
}

/// The first report field holding U+0000 (`id`, `drift[3].subject`, …).
fn nul_field(report: &reconcile::Report) -> Option<String> {
    if report.id.contains('\0') {
        return Some("id".to_string());
    }
    report.drift.iter().enumerate().find_map(|(i, d)| {
        if d.subject.contains('\0') {
            Some(format!("drift[{i}].subject"))
        } else if d.detail.as_deref().is_some_and(|s| s.contains('\0')) {
            Some(format!("drift[{i}].detail"))
        } else {
            None
        }
    })
}
