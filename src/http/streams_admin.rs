//! `PUT` and `DELETE /v1/streams/{name}`: create a templated stream before
//! its first event (so a never-wired source still fires) or remove one.
//! Both take `Authorization: Bearer <[server] admin_token>`; without that
//! key the routes do not exist (404).

use super::api::{Api, Created};
use super::guard::bearer_matches;
use super::idempotency::OpRequest;
use super::reply::{self, Reply};
use hyper::{Method, StatusCode};
use serde_json::json;

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
        return match app.delete_stream(name).await {
            Ok(true) => reply::json(StatusCode::OK, &json!({ "deleted": name })),
            Ok(false) => reply::error(StatusCode::NOT_FOUND, "no such templated stream"),
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
