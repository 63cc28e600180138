//! `PUT` and `DELETE /v1/streams/{name}`: create a templated stream before
//! its first event (so a never-wired source still fires) or remove one.
//! Both take `Authorization: Bearer <[server] admin_token>`; without that
//! key the routes do not exist (404).
//!
//! Issue #44: a `DELETE` of a stream whose relay events are undelivered
//! (pending or held) answers 409 naming the count, since deleting it would
//! leave them unsent and unpaged; `?force=true` makes them dead letters
//! first (audited as `?created_by=`, else "admin api"; paged), and the
//! stream goes.

use super::api::{Api, Created, Deleted};
use super::guard::bearer_matches;
use super::idempotency::OpRequest;
use super::reply::{self, Reply};
use hyper::{Method, StatusCode};
use serde_json::json;

/// Longest `?created_by=`.
const MAX_BY: usize = 1024;

/// A query parameter, decoded.
fn query(parts: &hyper::http::request::Parts, key: &str) -> Option<String> {
    parts.uri.query().and_then(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .find(|(name, _)| name == key)
            .map(|(_, v)| v.into_owned())
    })
}

pub(super) async fn handle(app: &dyn Api, name: &str, req: OpRequest) -> Reply {
    let config = app.config();
    let Some(token) = &config.templates.admin_token else {
        return reply::error(
            StatusCode::NOT_FOUND,
            "stream admin routes need [server] admin_token",
        );
    };
    let (parts, _body) = req.into_parts();
    if let Err(reason) = bearer_matches(&parts, std::slice::from_ref(token)) {
        return reply::error(StatusCode::UNAUTHORIZED, reason);
    }
    if config.templates.stream(name).is_none() {
        return reply::error(
            StatusCode::NOT_FOUND,
            "no [streams.\"PREFIX*\"] template covers this name (suffix: letters, digits, '_', '-', '.')",
        );
    }
    let unavailable = || {
        reply::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "state storage unavailable; retry later",
        )
    };
    if parts.method == Method::DELETE {
        let force = match query(&parts, "force").as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(_) => return reply::error(StatusCode::BAD_REQUEST, "force must be true or false"),
        };
        let by = query(&parts, "created_by")
            .filter(|b| !b.trim().is_empty() && b.len() <= MAX_BY && !b.contains('\0'))
            .unwrap_or_else(|| "admin api".to_string());
        return match app.delete_stream(name, force, by).await {
            Ok(Deleted::Deleted { gave_up }) => reply::json(
                StatusCode::OK,
                &json!({ "deleted": name, "dead_letters_made": gave_up }),
            ),
            Ok(Deleted::NotFound) => {
                reply::error(StatusCode::NOT_FOUND, "no such templated stream")
            }
            Ok(Deleted::Undelivered(count)) => reply::json(
                StatusCode::CONFLICT,
                &json!({
                    "error": crate::domain::forward_ops::undelivered_refusal(name, count),
                    "undelivered": count,
                }),
            ),
            Err(_) => unavailable(),
        };
    }
    match app.create_stream(name).await {
        Ok(Created::New) => reply::json(StatusCode::CREATED, &json!({ "created": name })),
        Ok(Created::Exists) => reply::json(StatusCode::OK, &json!({ "exists": name })),
        Ok(Created::Full) => reply::error(
            StatusCode::TOO_MANY_REQUESTS,
            "max_streams templated streams exist; delete one or raise [server] max_streams",
        ),
        Ok(Created::NoTemplate) => reply::error(StatusCode::NOT_FOUND, "no such template"),
        Err(_) => unavailable(),
    }
}
