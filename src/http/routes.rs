//! Routing and the small read-only endpoints.

use super::api::Api;
use super::ingest;
use super::readiness::{NotReady, Readiness};
use super::reply::{self, Reply};
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use hyper::{Method, Request, StatusCode};
use std::sync::Arc;
use tokio::time::Instant;

/// Routes one request. hyper calls this once the head is complete, which is
/// where the body deadline starts.
///
/// The request runs in a task of its own, so a sender that hangs up does
/// not cut it short: hyper drops a connection's pending handler when the
/// peer closes, and an ingest whose commit was under way then committed
/// without being counted in `hushwatch_events_total` or shown in
/// `/v1/status` (issue #44; the Svix server's 3 s request timeout did
/// this). Every route is bounded in time (body deadline, store timeout),
/// so an abandoned task ends on its own; it holds its connection's slot
/// (`held`) until then, so hanging up frees no room for more work.
pub async fn handle<Slot: Send + Sync + 'static>(
    app: Arc<dyn Api>,
    routes: Routes,
    readiness: Arc<Readiness>,
    req: Request<Incoming>,
    held: Arc<Slot>,
) -> Reply {
    let task = tokio::spawn(async move {
        let _held = held;
        let body_deadline = Instant::now() + app.config().server.body_timeout;
        let had_body = has_body(&req);
        let mut response = route(app, routes, &readiness, req, body_deadline).await;
        // An error answered before the body was read in full leaves the rest of
        // it on the wire; the connection cannot carry another request, so say
        // so and let hyper close it rather than wait for the remainder.
        if had_body && (response.status().is_client_error() || response.status().is_server_error())
        {
            reply::close(&mut response);
        }
        response
    });
    match task.await {
        Ok(response) => response,
        // A handler's panic reaches the connection as it did before.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Cancelled only while the runtime shuts down.
        Err(_) => reply::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down; retry later",
        ),
    }
}

/// Which routes a listener answers. With `[server] admin_listen` set, the
/// main listener is `Public` (ingest and probes only) and the admin one is
/// `Admin`; without it the one listener serves `All`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routes {
    All,
    Public,
    Admin,
}

impl Routes {
    fn serves(self, segments: &[&str]) -> bool {
        match self {
            Routes::All => true,
            Routes::Public => !is_admin(segments),
            // Probes answer on both, so they can follow whichever port a
            // deployment exposes to its orchestrator.
            // So do acknowledge links: `public_url` points at whichever
            // one the people paged can open.
            Routes::Admin => {
                is_admin(segments) || matches!(segments, ["healthz"] | ["readyz"] | ["ack", _])
            }
        }
    }
}

/// The status page, status document, metrics and operator actions: what
/// `admin_listen` keeps off the port the identity provider can reach.
fn is_admin(segments: &[&str]) -> bool {
    matches!(
        segments,
        [""] | ["metrics"]
            | ["v1", "status"]
            | ["v1", "svix", _, "acknowledge"]
            | ["v1", "streams", _]
    ) || super::silences::is_route(segments)
        || super::forward_admin::is_route(segments)
}

async fn route(
    app: Arc<dyn Api>,
    routes: Routes,
    readiness: &Readiness,
    req: Request<Incoming>,
    body_deadline: Instant,
) -> Reply {
    let shared = Arc::clone(&app);
    let app: &dyn Api = &*app;
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if !routes.serves(&segments) {
        return reply::error(StatusCode::NOT_FOUND, "no such route");
    }
    // Issue #30: every mutating operator route runs under its
    // Idempotency-Key, through this one wrapper.
    if let Some(op) = super::idempotency::operation(&app.config(), req.method(), &segments) {
        let arc = Arc::clone(&shared);
        return super::idempotency::guard(app, op, req, body_deadline, |req| {
            operator(arc, &segments, req, body_deadline)
        })
        .await;
    }
    if let ["ack", code] = segments.as_slice() {
        return super::ack_link::handle(app, code, req, body_deadline).await;
    }
    if super::silences::is_route(&segments) {
        if let Some(reply) = super::silences::route(app, &segments, req).await {
            return reply;
        }
        return reply::error(StatusCode::NOT_FOUND, "no such route");
    }
    if super::forward_admin::is_route(&segments) {
        if let Some(reply) = super::forward_admin::route(app, &segments, req).await {
            return reply;
        }
        return reply::error(StatusCode::NOT_FOUND, "no such route");
    }
    match (req.method(), segments.as_slice()) {
        (&Method::GET, [""]) => super::status_page::page(app).await,
        (&Method::GET, ["healthz"]) => reply::text(StatusCode::OK, "text/plain", "ok\n".into()),
        (&Method::GET, ["readyz"]) => readyz(app, readiness).await,
        (&Method::GET, ["metrics"]) => reply::metrics(shared.metrics_page().await),
        (&Method::GET, ["v1", "status"]) => status(app).await,
        (&Method::POST, ["v1", "svix", source, "operational"]) => {
            let source = source.to_string();
            super::svix::operational(app, &source, req, body_deadline).await
        }
        (&Method::POST, ["v1", "streams", stream, "webhook"]) => {
            let stream = stream.to_string();
            ingest::webhook(app, &stream, req, body_deadline).await
        }
        (&Method::GET, ["v1", "streams", stream, "webhook"]) => {
            let config = app.config();
            match config.streams.get(*stream) {
                Some(stream) => super::providers::verification(app, stream, req).await,
                None => super::guard::unknown_stream(stream),
            }
        }
        (&Method::POST, ["v1", "streams", stream, "events"]) => {
            let stream = stream.to_string();
            ingest::app_report(app, &stream, req, body_deadline).await
        }
        (&Method::POST, ["v1", "streams", stream, "reconciliations"]) => {
            let stream = stream.to_string();
            super::reconcile::report(app, &stream, req, body_deadline).await
        }
        (_, [""] | ["healthz"] | ["readyz"] | ["metrics"] | ["v1", "status"]) => {
            reply::error(StatusCode::METHOD_NOT_ALLOWED, "use GET")
        }
        (
            _,
            ["v1", "streams", _, "webhook" | "events" | "reconciliations"]
            | ["v1", "svix", _, "operational" | "acknowledge"],
        ) => reply::error(StatusCode::METHOD_NOT_ALLOWED, "use POST"),
        _ => reply::error(StatusCode::NOT_FOUND, "no such route"),
    }
}

/// The mutating operator routes (`idempotency::operation` names the same
/// ones), behind `idempotency::guard`.
async fn operator(
    shared: Arc<dyn Api>,
    segments: &[&str],
    req: super::idempotency::OpRequest,
    body_deadline: Instant,
) -> Reply {
    let app: &dyn Api = &*shared;
    match (req.method(), segments) {
        (&Method::POST, ["v1", "silences"]) => {
            super::silences::create(app, req, body_deadline).await
        }
        (&Method::DELETE, ["v1", "silences", id]) => super::silences::expire(app, id, req).await,
        (&Method::POST, ["v1", "streams", stream, "acknowledge"]) => {
            super::silences::acknowledge(app, stream, req, body_deadline).await
        }
        (&Method::POST, ["v1", "streams", stream, "replay"]) => {
            super::forward_admin::replay(Arc::clone(&shared), stream, req, body_deadline).await
        }
        (&Method::POST, ["v1", "streams", stream, "forwards", "retry"]) => {
            super::forward_admin::retry(app, stream, req, body_deadline).await
        }
        (&Method::POST, ["v1", "streams", stream, "forwards", "skip"]) => {
            super::forward_admin::skip(app, stream, req, body_deadline).await
        }
        (&Method::PUT | &Method::DELETE, ["v1", "streams", stream]) => {
            super::streams_admin::handle(app, stream, req).await
        }
        (&Method::POST, ["v1", "svix", source, "acknowledge"]) => {
            super::svix::acknowledge(app, source, req, body_deadline).await
        }
        _ => reply::error(StatusCode::NOT_FOUND, "no such route"),
    }
}

/// `/v1/status` (assembled by the service: `Api::status_document`); 503
/// when the store does not answer within the store timeout.
async fn status(app: &dyn Api) -> Reply {
    match app.status_document().await {
        Ok(doc) => reply::json(StatusCode::OK, &doc),
        Err(e) => reply::error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// `/readyz`: the cached readiness answer (see `readiness`).
async fn readyz(app: &dyn Api, readiness: &Readiness) -> Reply {
    match readiness.check(app).await {
        Ok(()) => reply::text(StatusCode::OK, "text/plain", "ready\n".into()),
        Err(NotReady::Storage(_)) => {
            reply::error(StatusCode::SERVICE_UNAVAILABLE, "storage is not writable")
        }
        Err(NotReady::Slow) => reply::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage did not answer in time",
        ),
    }
}

/// True when the request announces a body (a length other than 0, or any
/// transfer coding).
fn has_body(req: &Request<Incoming>) -> bool {
    let headers = req.headers();
    headers.contains_key(TRANSFER_ENCODING)
        || headers
            .get(CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0")
}

#[cfg(test)]
mod tests {
    use super::Routes;

    /// The relay's operator routes are admin routes: with `admin_listen`
    /// they are served there only, never on the port the provider reaches.
    #[test]
    fn relay_operator_routes_are_served_on_the_admin_listener_only() {
        for path in [
            "v1/streams/identity/forwards",
            "v1/streams/identity/forwards/retry",
            "v1/streams/identity/forwards/skip",
            "v1/streams/identity/replay",
            "v1/streams/org:acme",
        ] {
            let segments: Vec<&str> = path.split('/').collect();
            assert!(
                !Routes::Public.serves(&segments),
                "{path} on the public listener"
            );
            assert!(
                Routes::Admin.serves(&segments),
                "{path} not on the admin listener"
            );
            assert!(Routes::All.serves(&segments));
        }
        let ingest: Vec<&str> = "v1/streams/identity/webhook".split('/').collect();
        assert!(Routes::Public.serves(&ingest) && !Routes::Admin.serves(&ingest));
    }
}
