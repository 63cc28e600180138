//! Operator actions (issue #17): `POST`/`GET /v1/silences`,
//! `DELETE /v1/silences/{id}` and `POST /v1/streams/{stream}/acknowledge`.
//! All take `Authorization: Bearer <[server] admin_token>` (checked before
//! the body is read); without that key the routes answer 404. Decisions
//! about pages are taken by the store (see `store::silences`).

use super::api::Api;
use super::body;
use super::guard::{bearer_matches, body_failure, configured_or_templated};
use super::idempotency::{OpBody, OpRequest};
use super::reply::{self, Reply};
use crate::domain::duration::parse_duration;
use crate::domain::mute::is_known_kind;
use crate::store::silences::{AckOutcome, NewSilence, SilenceRow, MAX_ENDED_KEPT, PAGE_KINDS};
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::{json, Value};
use tokio::time::Instant;

/// Silences that have not ended yet, at most. One more answers 429 and
/// stores nothing, so a runaway script cannot grow the table (and every
/// page decision's scan of it) without bound.
pub const MAX_ACTIVE_SILENCES: usize = 1000;

/// Longest silence accepted, from its start (or now, if it started
/// earlier) to its end: the bound of a `[[streams.X.maintenance]]` window.
/// A silence ending in 9999 would switch paging off for good, and a
/// longer one is more likely a typo than a plan; renew it instead.
pub const MAX_SILENCE: TimeDelta = crate::config::maintenance::MAX_WINDOW;

/// `GET /v1/silences` lists silences that ended at most this long ago.
const LIST_EXPIRED_FOR: TimeDelta = TimeDelta::days(7);

/// Text fields (`comment`, `created_by`, names) longer than this are refused.
const MAX_TEXT: usize = 1024;

/// Entries in `streams` or `kinds`.
const MAX_LIST: usize = 64;

/// A refused request: kept small (not a whole `Reply`) until it is sent.
pub(super) struct Refusal(pub(super) StatusCode, pub(super) String);

impl Refusal {
    pub(super) fn reply(self) -> Reply {
        reply::error(self.0, &self.1)
    }
}

pub(super) fn bad(message: &str) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, message.to_string())
}

pub(super) fn unavailable() -> Reply {
    reply::error(
        StatusCode::SERVICE_UNAVAILABLE,
        "state storage unavailable; retry later",
    )
}

pub(super) fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub fn silence_json(s: &SilenceRow, now: DateTime<Utc>) -> Value {
    json!({
        "id": s.id,
        "streams": s.streams,
        "kinds": s.kinds,
        "starts_at": rfc(s.starts_at),
        "ends_at": rfc(s.ends_at),
        "comment": s.comment,
        "created_by": s.created_by,
        "created_at": rfc(s.created_at),
        "expired_by": s.expired_by,
        "active": s.active_at(now),
    })
}

/// Checks the admin token; `Err` is the reply to send.
pub(super) fn authorize(app: &dyn Api, parts: &hyper::http::request::Parts) -> Result<(), Refusal> {
    let config = app.config();
    let Some(token) = &config.templates.admin_token else {
        return Err(Refusal(
            StatusCode::NOT_FOUND,
            "operator routes need [server] admin_token".into(),
        ));
    };
    bearer_matches(parts, std::slice::from_ref(token))
        .map_err(|reason| Refusal(StatusCode::UNAUTHORIZED, reason.to_string()))
}

/// The admin token, then the JSON body (in that order: no body byte is
/// read for a request without the token), for routes that need nothing
/// else from the head; `Err` is the reply to send.
pub(super) async fn authorized_json(
    app: &dyn Api,
    req: OpRequest,
    deadline: Instant,
) -> Result<Value, Reply> {
    let (parts, body) = req.into_parts();
    authorize(app, &parts).map_err(Refusal::reply)?;
    json_body(&parts, body, deadline)
        .await
        .map_err(Refusal::reply)
}

pub(super) async fn json_body(
    parts: &hyper::http::request::Parts,
    body: OpBody,
    deadline: Instant,
) -> Result<Value, Refusal> {
    let bytes = body::read(parts, body, deadline).await.map_err(|e| {
        let (status, _, reason) = body_failure(e);
        Refusal(status, reason.to_string())
    })?;
    serde_json::from_slice(&bytes).map_err(|_| bad("body must be a JSON object"))
}

/// PostgreSQL `text` cannot hold U+0000 and SQLite can: refused here, by
/// field name, so both backends answer 400 rather than one of them 503.
fn no_nul(key: &str, s: &str) -> Result<(), Refusal> {
    if s.contains('\0') {
        return Err(bad(&format!(
            "\"{key}\" must not contain a NUL character (U+0000)"
        )));
    }
    Ok(())
}

pub(super) fn text_field(v: &Value, key: &str) -> Result<String, Refusal> {
    if let Some(Value::String(s)) = v.get(key) {
        no_nul(key, s)?;
    }
    match v.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= MAX_TEXT => Ok(s.clone()),
        _ => Err(bad(&format!(
            "\"{key}\" must be a non-empty string of at most {MAX_TEXT} bytes"
        ))),
    }
}

pub(super) fn string_list(v: &Value, key: &str) -> Result<Option<Vec<String>>, Refusal> {
    let Some(value) = v.get(key) else {
        return Ok(None);
    };
    for item in value.as_array().into_iter().flatten() {
        no_nul(key, item.as_str().unwrap_or_default())?;
    }
    let list = value.as_array().and_then(|a| {
        a.iter()
            .map(|x| x.as_str().filter(|s| !s.is_empty() && s.len() <= MAX_TEXT))
            .map(|x| x.map(str::to_string))
            .collect::<Option<Vec<_>>>()
    });
    match list {
        Some(l) if !l.is_empty() && l.len() <= MAX_LIST => Ok(Some(l)),
        _ => Err(bad(&format!(
            "\"{key}\" must be a list of 1 to {MAX_LIST} non-empty strings"
        ))),
    }
}

pub(super) fn time_field(v: &Value, key: &str) -> Result<Option<DateTime<Utc>>, Refusal> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => DateTime::parse_from_rfc3339(s)
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|_| bad(&format!("\"{key}\" must be an RFC 3339 time"))),
        Some(_) => Err(bad(&format!("\"{key}\" must be an RFC 3339 time"))),
    }
}

/// Validates a `POST /v1/silences` body against the config and `now`.
fn parse_silence(app: &dyn Api, v: &Value, now: DateTime<Utc>) -> Result<NewSilence, Refusal> {
    let streams = string_list(v, "streams")?.ok_or_else(|| bad("\"streams\" is required"))?;
    let config = app.config();
    if let Some(unknown) = streams
        .iter()
        .find(|s| s.as_str() != "*" && configured_or_templated(&config, s).is_none())
    {
        return Err(Refusal(
            StatusCode::NOT_FOUND,
            format!("no such stream: {unknown:?} (name a configured stream or \"*\")"),
        ));
    }
    let kinds = string_list(v, "kinds")?.unwrap_or_else(|| vec!["*".to_string()]);
    // A pattern that matches no page kind is a typo: refused rather than
    // stored as a silence that holds nothing.
    if let Some(unknown) = kinds.iter().find(|k| !is_known_kind(k)) {
        return Err(bad(&format!(
            "no page kind matches {unknown:?}; kinds are {}",
            PAGE_KINDS.join(", ")
        )));
    }
    let starts_at = time_field(v, "starts_at")?.unwrap_or(now);
    let (ends_at, end_field) = match (time_field(v, "ends_at")?, v.get("duration")) {
        (Some(end), None) => (end, "ends_at"),
        (None, Some(Value::String(d))) => {
            let d = parse_duration(d).map_err(|e| bad(&format!("\"duration\": {e}")))?;
            let end = starts_at
                .checked_add_signed(d)
                .ok_or_else(|| bad("\"duration\": a silence may last at most 30 days"))?;
            (end, "duration")
        }
        _ => return Err(bad("give exactly one of \"ends_at\" or \"duration\"")),
    };
    if ends_at <= starts_at {
        return Err(bad("the silence must end after it starts"));
    }
    if ends_at <= now {
        return Err(bad("the silence must end in the future"));
    }
    // Measured from when it takes effect (a backdated start holds nothing
    // before now), and checked whichever field set the end, so neither can
    // mute pages for longer than a maintenance window may.
    if ends_at - starts_at.max(now) > MAX_SILENCE {
        return Err(bad(&format!(
            "\"{end_field}\": a silence may last at most 30 days"
        )));
    }
    Ok(NewSilence {
        streams,
        kinds,
        starts_at,
        ends_at,
        comment: text_field(v, "comment")?,
        created_by: text_field(v, "created_by")?,
    })
}

/// `POST /v1/silences`.
pub(super) async fn create(app: &dyn Api, req: OpRequest, deadline: Instant) -> Reply {
    let v = match authorized_json(app, req, deadline).await {
        Ok(v) => v,
        Err(reply) => return reply,
    };
    let silence = match parse_silence(app, &v, app.now()) {
        Ok(s) => s,
        Err(r) => return r.reply(),
    };
    match app.add_silence(silence, MAX_ACTIVE_SILENCES).await {
        Ok(Some(id)) => reply::json(StatusCode::CREATED, &json!({ "id": id })),
        Ok(None) => reply::error(
            StatusCode::TOO_MANY_REQUESTS,
            "1000 silences have not ended yet; expire some first",
        ),
        Err(e) => {
            tracing::error!(error = %e, "silence not stored");
            unavailable()
        }
    }
}

/// `GET /v1/silences`: active, future and recently ended silences (at
/// most `MAX_ENDED_KEPT` of those, the most recently ended).
pub async fn list(app: &dyn Api, req: Request<Incoming>) -> Reply {
    let (parts, _) = req.into_parts();
    if let Err(r) = authorize(app, &parts) {
        return r.reply();
    }
    let now = app.now();
    match app.silences(now - LIST_EXPIRED_FOR).await {
        Ok(rows) => {
            // Every silence that has not ended, and of the ended ones only
            // the most recently ended: the store prunes them when a silence
            // is added, but ones that ended on the clock since then wait.
            let mut ended: Vec<&SilenceRow> = rows.iter().filter(|s| s.ends_at <= now).collect();
            ended.sort_by_key(|s| std::cmp::Reverse((s.ends_at, s.id)));
            let shown: std::collections::HashSet<i64> =
                ended.iter().take(MAX_ENDED_KEPT).map(|s| s.id).collect();
            let list: Vec<Value> = rows
                .iter()
                .filter(|s| s.ends_at > now || shown.contains(&s.id))
                .map(|s| silence_json(s, now))
                .collect();
            reply::json(StatusCode::OK, &json!({ "silences": list }))
        }
        Err(_) => unavailable(),
    }
}

/// A query parameter of at most `MAX_TEXT` bytes; `Err` when it is longer.
pub(super) fn query_text(
    parts: &hyper::http::request::Parts,
    key: &str,
) -> Result<Option<String>, Refusal> {
    let value = parts.uri.query().and_then(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .find(|(name, _)| name == key)
            .map(|(_, v)| v.into_owned())
    });
    if let Some(v) = &value {
        no_nul(key, v)?;
    }
    match value {
        Some(v) if v.len() > MAX_TEXT => {
            Err(bad(&format!("\"{key}\" must be at most {MAX_TEXT} bytes")))
        }
        Some(v) if v.trim().is_empty() => Ok(None),
        v => Ok(v),
    }
}

/// `DELETE /v1/silences/{id}`: ends the silence now. Who and why are the
/// optional `?created_by=` (else "admin api") and `?comment=` query
/// parameters, recorded in the audit log.
pub(super) async fn expire(app: &dyn Api, id: &str, req: OpRequest) -> Reply {
    let (parts, _) = req.into_parts();
    if let Err(r) = authorize(app, &parts) {
        return r.reply();
    }
    let Ok(id) = id.parse::<i64>() else {
        return reply::error(StatusCode::NOT_FOUND, "no such silence");
    };
    let (by, comment) = match (
        query_text(&parts, "created_by"),
        query_text(&parts, "comment"),
    ) {
        (Ok(by), Ok(comment)) => (by.unwrap_or_else(|| "admin api".to_string()), comment),
        (Err(r), _) | (_, Err(r)) => return r.reply(),
    };
    match app.expire_silence(id, by, comment).await {
        Ok(true) => reply::json(StatusCode::OK, &json!({ "expired": id })),
        Ok(false) => reply::error(StatusCode::NOT_FOUND, "no such silence"),
        Err(_) => unavailable(),
    }
}

/// `POST /v1/streams/{stream}/acknowledge`.
pub(super) async fn acknowledge(
    app: &dyn Api,
    stream: &str,
    req: OpRequest,
    deadline: Instant,
) -> Reply {
    let (parts, body) = req.into_parts();
    if let Err(r) = authorize(app, &parts) {
        return r.reply();
    }
    if configured_or_templated(&app.config(), stream).is_none() {
        return reply::error(StatusCode::NOT_FOUND, "no such stream");
    }
    let v = match json_body(&parts, body, deadline).await {
        Ok(v) => v,
        Err(r) => return r.reply(),
    };
    let (created_by, comment) = match (text_field(&v, "created_by"), text_field(&v, "comment")) {
        (Ok(by), Ok(c)) => (by, c),
        (Err(r), _) | (_, Err(r)) => return r.reply(),
    };
    match app
        .acknowledge_stream(stream.to_string(), created_by, comment)
        .await
    {
        Ok(AckOutcome::Acknowledged(started)) => reply::json(
            StatusCode::OK,
            &json!({ "acknowledged": stream, "episode_started_at": rfc(started) }),
        ),
        Ok(AckOutcome::Findings(n)) => reply::json(
            StatusCode::OK,
            &json!({ "acknowledged": stream, "crosscheck_findings": n }),
        ),
        Ok(AckOutcome::NotFiring) => reply::error(
            StatusCode::CONFLICT,
            "the stream is not firing; there is nothing to acknowledge",
        ),
        Err(_) => unavailable(),
    }
}

/// True for the routes of this module (for `Routes::Admin`).
pub fn is_route(segments: &[&str]) -> bool {
    matches!(
        segments,
        ["v1", "silences"] | ["v1", "silences", _] | ["v1", "streams", _, "acknowledge"]
    )
}

/// Dispatches this module's routes; `None` when the request is not one.
pub async fn route(app: &dyn Api, segments: &[&str], req: Request<Incoming>) -> Option<Reply> {
    Some(match (req.method().clone(), segments) {
        // POST, DELETE and acknowledge are routed through
        // `idempotency::guard` (`routes::operator`) before this.
        (Method::GET, ["v1", "silences"]) => list(app, req).await,
        (_, ["v1", "silences"]) => reply::error(StatusCode::METHOD_NOT_ALLOWED, "use GET or POST"),
        (_, ["v1", "silences", _]) => reply::error(StatusCode::METHOD_NOT_ALLOWED, "use DELETE"),
        (_, ["v1", "streams", _, "acknowledge"]) => {
            reply::error(StatusCode::METHOD_NOT_ALLOWED, "use POST")
        }
        _ => return None,
    })
}
