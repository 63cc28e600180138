//! `GET /`: the status page, rendered from the same document as
//! `/v1/status` plus each stream's timeline, under a strict CSP.

use super::api::Api;
use super::reply::{self, Reply};
use crate::status::model::StatusDoc;
use crate::status::page;
use hyper::header::{HeaderName, HeaderValue};
use hyper::StatusCode;

pub async fn page(app: &dyn Api) -> Reply {
    let (doc, timelines) = match app.status_page().await {
        Ok(parts) => parts,
        // A stalled store: answer within the bound rather than hold the
        // connection (the page would be mostly "unreadable" anyway).
        Err(e) => return reply::error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    };
    let doc: StatusDoc = match serde_json::from_value(doc) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "status page: status document does not match its model");
            return reply::error(StatusCode::INTERNAL_SERVER_ERROR, "status page unavailable");
        }
    };
    let mut response = reply::text(
        StatusCode::OK,
        "text/html; charset=utf-8",
        page::render(&doc, &timelines),
    );
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    };
    set("content-security-policy", &page::content_security_policy());
    set("x-content-type-options", "nosniff");
    set("referrer-policy", "no-referrer");
    set("cache-control", "no-store");
    response
}
