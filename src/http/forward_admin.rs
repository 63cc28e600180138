//! The relay's operator routes (issues #29 and #44), all behind
//! `Authorization: Bearer <[server] admin_token>` (404 without that key),
//! the mutating ones behind `idempotency::guard` (`Idempotency-Key`):
//!
//! - `GET /v1/streams/{stream}/forwards?state=&limit=`: a page of the
//!   stream's undelivered events, oldest first, with the total;
//! - `POST /v1/streams/{stream}/forwards/retry`: one pending event (`id`)
//!   or every one of the stream due now;
//! - `POST /v1/streams/{stream}/forwards/skip`: one event a dead letter
//!   now (`id`, `comment`), so what waited behind it goes on;
//! - `POST /v1/streams/{stream}/replay`: a window's stored deliveries, or
//!   every dead letter (`dead_letters: true`), sent again (or counted,
//!   `dry_run`).
//!
//! Every decision about rows is the store's (`store::forward_admin`); this
//! file parses, bounds and answers.

use super::api::{Api, ForwardCall, ReplayCall};
use super::guard::configured_or_templated;
use super::idempotency::OpRequest;
use super::reply::{self, Reply};
use super::silences::{
    authorize, authorized_json, bad, json_body, query_text, rfc, string_list, text_field,
    time_field, unavailable, Refusal,
};
use crate::domain::forward_ops::{self as decide, Verdict};
use crate::store::forward_admin::RetryOutcome;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::time::Instant;

/// Event types named in one replay at most.
const MAX_REPLAY_TYPES: usize = 64;

/// A webhook-id longer than this names no stored event (providers use
/// ids of a few dozen bytes).
const MAX_ID: usize = 256;

/// True for the routes of this module (for `Routes::Admin`).
pub fn is_route(segments: &[&str]) -> bool {
    matches!(
        segments,
        ["v1", "streams", _, "replay"]
            | ["v1", "streams", _, "forwards"]
            | ["v1", "streams", _, "forwards", "retry" | "skip"]
    )
}

/// The read route and the wrong methods; `None` when the request is not
/// one of this module's (the mutating ones are routed through
/// `idempotency::guard` before this).
pub async fn route(app: &dyn Api, segments: &[&str], req: Request<Incoming>) -> Option<Reply> {
    Some(match (req.method().clone(), segments) {
        (Method::GET, ["v1", "streams", stream, "forwards"]) => list(app, stream, req).await,
        (_, ["v1", "streams", _, "forwards"]) => {
            reply::error(StatusCode::METHOD_NOT_ALLOWED, "use GET")
        }
        (_, ["v1", "streams", _, "replay"])
        | (_, ["v1", "streams", _, "forwards", "retry" | "skip"]) => {
            reply::error(StatusCode::METHOD_NOT_ALLOWED, "use POST")
        }
        _ => return None,
    })
}

/// A stream the config names, or one it no longer names whose relay rows
/// are still stored (they outlive their config): `Err` 404 otherwise.
fn known_stream(app: &dyn Api, stream: &str) -> Result<(), Refusal> {
    if configured_or_templated(&app.config(), stream).is_some() {
        return Ok(());
    }
    Err(Refusal(StatusCode::NOT_FOUND, "no such stream".into()))
}

/// `GET /v1/streams/{stream}/forwards`.
async fn list(app: &dyn Api, stream: &str, req: Request<Incoming>) -> Reply {
    let (parts, _) = req.into_parts();
    if let Err(r) = authorize(app, &parts) {
        return r.reply();
    }
    let (state, limit) = match (query_text(&parts, "state"), query_text(&parts, "limit")) {
        (Ok(state), Ok(limit)) => (state, limit),
        (Err(r), _) | (_, Err(r)) => return r.reply(),
    };
    let state = match decide::list_state(state.as_deref()) {
        Ok(s) => s,
        Err(e) => return bad(&e).reply(),
    };
    let limit = match decide::list_limit(limit.as_deref()) {
        Ok(l) => l,
        Err(e) => return bad(&e).reply(),
    };
    let list = match app.list_forwards(stream.to_string(), state, limit).await {
        Ok(list) => list,
        Err(_) => return unavailable(),
    };
    if list.total == 0 {
        if let Err(r) = known_stream(app, stream) {
            return r.reply();
        }
    }
    let shown = list.rows.len() as u64;
    reply::json(
        StatusCode::OK,
        &json!({
            "stream": stream,
            "state": state,
            "total": list.total,
            "more": list.total.saturating_sub(shown),
            "events": list.rows.iter().map(|r| json!({
                "id": r.delivery_id,
                "type": r.event_type,
                "subject": r.subject,
                "state": r.state,
                "received_at": rfc(r.received_at),
                "attempts": r.attempts,
                "last_error": r.last_error,
                "last_status": r.last_status,
                "next_attempt_at": r.next_attempt_at.map(rfc),
            })).collect::<Vec<_>>(),
        }),
    )
}

/// Fields a body may have; anything else is refused by name.
fn only_fields(v: &Value, allowed: &[&str]) -> Result<(), Refusal> {
    if !v.is_object() {
        return Err(bad("body must be a JSON object"));
    }
    for key in v.as_object().into_iter().flat_map(|o| o.keys()) {
        if !allowed.contains(&key.as_str()) {
            return Err(bad(&format!(
                "unknown field \"{}\" ({})",
                key.chars().take(64).collect::<String>(),
                allowed.join(", ")
            )));
        }
    }
    Ok(())
}

fn optional_text(v: &Value, key: &str) -> Result<Option<String>, Refusal> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => text_field(v, key).map(Some),
    }
}

fn webhook_id(v: &Value) -> Result<Option<String>, Refusal> {
    let id = optional_text(v, "id")?;
    if id.as_ref().is_some_and(|id| id.len() > MAX_ID) {
        return Err(bad(&format!("\"id\" must be at most {MAX_ID} bytes")));
    }
    Ok(id)
}

/// A body for retry or skip: who, why, which event.
fn parse_action(
    stream: &str,
    v: &Value,
    comment_required: bool,
) -> Result<(ForwardCall, Option<String>), Refusal> {
    only_fields(v, &["id", "comment", "created_by"])?;
    let comment = if comment_required {
        Some(text_field(v, "comment")?)
    } else {
        optional_text(v, "comment")?
    };
    let call = ForwardCall {
        stream: stream.to_string(),
        by: optional_text(v, "created_by")?.unwrap_or_else(|| "api".to_string()),
        comment,
    };
    Ok((call, webhook_id(v)?))
}

/// The answer to a refused retry or skip of one event.
fn refused(stream: &str, id: &str, verdict: Verdict) -> Reply {
    let id: String = id.chars().take(64).collect();
    match verdict {
        Verdict::Unknown => reply::error(
            StatusCode::NOT_FOUND,
            &format!("no stored event {id:?} in stream {stream}"),
        ),
        Verdict::Delivered => reply::error(
            StatusCode::CONFLICT,
            &format!("{id} was already delivered to the app"),
        ),
        Verdict::Dead => reply::error(
            StatusCode::CONFLICT,
            &format!(
                "{id} is a dead letter; send it again with: hushwatch replay --stream {stream} --dead-letters"
            ),
        ),
        Verdict::Held => reply::error(
            StatusCode::CONFLICT,
            &format!(
                "{id} is held: hushwatch cannot send it until its cause is fixed (see hushwatch forward list --stream {stream} --state held); or skip it"
            ),
        ),
        Verdict::Go => reply::error(StatusCode::INTERNAL_SERVER_ERROR, "not refused"),
    }
}

/// `POST /v1/streams/{stream}/forwards/retry`.
pub(super) async fn retry(app: &dyn Api, stream: &str, req: OpRequest, deadline: Instant) -> Reply {
    let v = match authorized_json(app, req, deadline).await {
        Ok(v) => v,
        Err(reply) => return reply,
    };
    let (call, id) = match parse_action(stream, &v, false) {
        Ok(a) => a,
        Err(r) => return r.reply(),
    };
    match app.retry_forwards(call, id.clone()).await {
        Ok(RetryOutcome::Retried { pending, held }) => {
            if id.is_none() && pending == 0 && held == 0 {
                if let Err(r) = known_stream(app, stream) {
                    return r.reply();
                }
            }
            reply::json(
                StatusCode::OK,
                &json!({ "stream": stream, "id": id, "due_now": pending, "held": held }),
            )
        }
        Ok(RetryOutcome::Refused(verdict)) => {
            refused(stream, id.as_deref().unwrap_or_default(), verdict)
        }
        Err(_) => unavailable(),
    }
}

/// `POST /v1/streams/{stream}/forwards/skip`.
pub(super) async fn skip(app: &dyn Api, stream: &str, req: OpRequest, deadline: Instant) -> Reply {
    let v = match authorized_json(app, req, deadline).await {
        Ok(v) => v,
        Err(reply) => return reply,
    };
    let (call, id) = match parse_action(stream, &v, true) {
        Ok((call, Some(id))) => (call, id),
        Ok((_, None)) => return bad("\"id\" (the event's webhook-id) is required").reply(),
        Err(r) => return r.reply(),
    };
    match app.skip_forward(call, id.clone()).await {
        Ok(Verdict::Go) => reply::json(
            StatusCode::OK,
            &json!({ "stream": stream, "skipped": id, "state": "dead" }),
        ),
        Ok(verdict) => refused(stream, &id, verdict),
        Err(_) => unavailable(),
    }
}

/// `POST /v1/streams/{stream}/replay` (relay mode, issue #29): re-queues
/// the stored deliveries of a window or every dead letter, or counts them
/// (`dry_run`). Takes the `Arc`: the replay runs on to its end even if the
/// caller hangs up (`Api::replay_stream`).
pub(super) async fn replay(
    app: Arc<dyn Api>,
    stream: &str,
    req: OpRequest,
    deadline: Instant,
) -> Reply {
    let (parts, body) = req.into_parts();
    if let Err(r) = authorize(&*app, &parts) {
        return r.reply();
    }
    let config = app.config();
    match config.streams.get(stream) {
        None => return reply::error(StatusCode::NOT_FOUND, "no such stream"),
        Some(s) if s.forward.is_none() => return reply::error(
            StatusCode::NOT_FOUND,
            "the stream does not forward (no [streams.NAME.forward]): nothing is stored to replay",
        ),
        Some(_) => {}
    }
    let v = match json_body(&parts, body, deadline).await {
        Ok(v) => v,
        Err(r) => return r.reply(),
    };
    let request = match parse_replay(&v) {
        Ok(r) => r,
        Err(r) => return r.reply(),
    };
    let (window, dry_run) = (request.window, request.dry_run);
    match app.replay_stream(stream.to_string(), request).await {
        Ok(outcome) => reply::json(
            StatusCode::OK,
            &json!({
                "stream": stream,
                "from": window.map(|w| rfc(w.0)),
                "to": window.map(|w| rfc(w.1)),
                "dead_letters": window.is_none(),
                "dry_run": dry_run,
                "requeued": outcome.count,
                "already_pending": outcome.already_pending,
                "listed": outcome.items.len(),
                "deliveries": outcome.items.iter().map(|i| json!({
                    "id": i.delivery_id,
                    "type": i.event_type,
                    "received_at": rfc(i.received_at),
                    "state": i.state,
                })).collect::<Vec<_>>(),
            }),
        ),
        Err(_) => unavailable(),
    }
}

fn parse_replay(v: &Value) -> Result<ReplayCall, Refusal> {
    only_fields(
        v,
        &[
            "from",
            "to",
            "dead_letters",
            "types",
            "dry_run",
            "created_by",
        ],
    )?;
    let flag = |key: &str| match v.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(&format!("\"{key}\" must be true or false"))),
    };
    let dead_letters = flag("dead_letters")?;
    let window = match (time_field(v, "from")?, time_field(v, "to")?, dead_letters) {
        (Some(from), Some(to), false) => {
            if from >= to {
                return Err(bad("\"from\" must be before \"to\""));
            }
            Some((from, to))
        }
        (None, None, true) => None,
        (_, _, true) => {
            return Err(bad(
                "give either \"from\" and \"to\" or \"dead_letters\": true, not both",
            ))
        }
        (None, _, false) => return Err(bad("\"from\" is required (RFC 3339)")),
        (_, None, false) => return Err(bad("\"to\" is required (RFC 3339)")),
    };
    let types = string_list(v, "types")?.unwrap_or_default();
    if types.len() > MAX_REPLAY_TYPES {
        return Err(bad("\"types\" names too many types"));
    }
    Ok(ReplayCall {
        window,
        types,
        dry_run: flag("dry_run")?,
        by: optional_text(v, "created_by")?.unwrap_or_else(|| "api".to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::{parse_action, parse_replay};
    use serde_json::json;

    #[test]
    fn a_replay_body_is_typed_bounded_and_named_field_by_field() {
        let ok = parse_replay(&json!({
            "from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z",
            "types": ["user.deleted"], "dry_run": true
        }))
        .ok()
        .unwrap();
        assert!(ok.dry_run);
        assert!(ok.window.is_some());
        assert_eq!(ok.types, ["user.deleted"]);
        assert_eq!(ok.by, "api");
        let dead = parse_replay(&json!({ "dead_letters": true })).ok().unwrap();
        assert!(dead.window.is_none() && !dead.dry_run);
        for (body, want) in [
            (json!([]), "JSON object"),
            (
                json!({"to": "2026-12-02T00:00:00Z"}),
                "\"from\" is required",
            ),
            (json!({}), "\"from\" is required"),
            (
                json!({"from": "yesterday", "to": "2026-12-02T00:00:00Z"}),
                "\"from\" must be an RFC 3339",
            ),
            (
                json!({"from": "2026-12-02T00:00:00Z", "to": "2026-12-01T00:00:00Z"}),
                "before",
            ),
            (
                json!({"from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z", "dry_run": "yes"}),
                "dry_run",
            ),
            (
                json!({"from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z", "dead_letters": true}),
                "not both",
            ),
            (json!({"dead_letters": "yes"}), "dead_letters"),
            (
                json!({"from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z", "types": ["a\u{0}"]}),
                "NUL",
            ),
            (
                json!({"from": "2026-12-01T00:00:00Z", "to": "2026-12-02T00:00:00Z", "window": 1}),
                "unknown field \"window\"",
            ),
        ] {
            let Err(refusal) = parse_replay(&body) else {
                panic!("{body} was accepted");
            };
            assert!(refusal.1.contains(want), "{body}: {}", refusal.1);
            assert_eq!(refusal.0, hyper::StatusCode::BAD_REQUEST);
        }
    }

    #[test]
    fn a_skip_needs_its_comment_and_a_retry_does_not() {
        let (call, id) = parse_action("s", &json!({"id": "msg_1"}), false)
            .ok()
            .unwrap();
        assert_eq!((call.by.as_str(), id.as_deref()), ("api", Some("msg_1")));
        assert!(parse_action("s", &json!({"id": "msg_1"}), true).is_err());
        let (call, _) = parse_action(
            "s",
            &json!({"id": "m", "comment": "poison", "created_by": "ana"}),
            true,
        )
        .ok()
        .unwrap();
        assert_eq!(
            (call.by.as_str(), call.comment.as_deref()),
            ("ana", Some("poison"))
        );
        for body in [
            json!({"id": 5}),
            json!({"id": "x".repeat(300)}),
            json!({"why": "x"}),
        ] {
            assert!(parse_action("s", &body, false).is_err(), "{body}");
        }
    }
}
