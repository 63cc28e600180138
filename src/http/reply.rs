//! Response builders. Every answer is JSON (or text for metrics) and never
//! carries a `webhook-delivery` header: Svix reads that header (and 410) as
//! "disable this endpoint".

use super::metrics_page::MetricsBody;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

/// Every answer is one buffer, except `/metrics`, which is rendered as it
/// is sent.
pub type Reply = Response<Either<Full<Bytes>, MetricsBody>>;

pub fn json(status: StatusCode, body: &Value) -> Reply {
    build(status, "application/json", body.to_string())
}

pub fn error(status: StatusCode, message: &str) -> Reply {
    debug_assert_ne!(status, StatusCode::GONE, "410 disables Svix endpoints");
    json(status, &json!({ "error": message }))
}

pub fn text(status: StatusCode, content_type: &str, body: String) -> Reply {
    build(status, content_type, body)
}

/// The `/metrics` page in the text exposition format.
pub fn metrics(page: crate::metrics::Page) -> Reply {
    let mut response = Response::new(Either::Right(MetricsBody(page)));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

/// Marks the response as the connection's last (`Connection: close`).
pub fn close(response: &mut Reply) {
    response.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
}

fn build(status: StatusCode, content_type: &str, body: String) -> Reply {
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}
