//! Routing and the small read-only endpoints.

use super::ingest;
use super::reply::{self, Reply};
use crate::service::app::App;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use std::sync::Arc;
use std::time::Duration;

const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

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
            Routes::Admin => is_admin(segments) || matches!(segments, ["healthz"] | ["readyz"]),
        }
    }
}

/// The status page, status document, metrics and operator actions: what
/// `admin_listen` keeps off the port the identity provider can reach.
fn is_admin(segments: &[&str]) -> bool {
    matches!(
        segments,
        [""] | ["metrics"] | ["v1", "status"] | ["v1", "svix", _, "acknowledge"]
    )
}

pub async fn handle(app: Arc<App>, routes: Routes, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if !routes.serves(&segments) {
        return reply::error(StatusCode::NOT_FOUND, "no such route");
    }
    match (req.method(), segments.as_slice()) {
        (&Method::GET, [""]) => super::status_page::page(&app).await,
        (&Method::GET, ["healthz"]) => reply::text(StatusCode::OK, "text/plain", "ok\n".into()),
        (&Method::GET, ["readyz"]) => readyz(&app).await,
        (&Method::GET, ["metrics"]) => {
            app.refresh_metrics();
            app.refresh_svix_metrics().await;
            reply::text(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                app.metrics.encode(),
            )
        }
        (&Method::GET, ["v1", "status"]) => status(&app).await,
        (&Method::POST, ["v1", "svix", source, "operational"]) => {
            let source = source.to_string();
            super::svix::operational(&app, &source, req).await
        }
        (&Method::POST, ["v1", "svix", source, "acknowledge"]) => {
            let source = source.to_string();
            super::svix::acknowledge(&app, &source, req).await
        }
        (&Method::POST, ["v1", "streams", stream, "webhook"]) => {
            let stream = stream.to_string();
            ingest::webhook(&app, &stream, req).await
        }
        (&Method::POST, ["v1", "streams", stream, "events"]) => {
            let stream = stream.to_string();
            ingest::app_report(&app, &stream, req).await
        }
        (_, [""] | ["healthz"] | ["readyz"] | ["metrics"] | ["v1", "status"]) => {
            reply::error(StatusCode::METHOD_NOT_ALLOWED, "use GET")
        }
        (
            _,
            ["v1", "streams", _, "webhook" | "events"]
            | ["v1", "svix", _, "operational" | "acknowledge"],
        ) => reply::error(StatusCode::METHOD_NOT_ALLOWED, "use POST"),
        _ => reply::error(StatusCode::NOT_FOUND, "no such route"),
    }
}

/// `/v1/status`: streams, plus the Svix section when sources are configured.
async fn status(app: &App) -> Reply {
    reply::json(StatusCode::OK, &status_document(app).await)
}

/// The `/v1/status` document, which the status page renders too.
pub(super) async fn status_document(app: &App) -> serde_json::Value {
    let mut doc = app.status_with_notifications().await;
    doc["audit"] = app.audit_status().await;
    if !app.config().svix.is_empty() {
        match app.svix_status().await {
            Ok(svix) => doc["svix"] = svix,
            Err(e) => {
                tracing::error!(error = %e, "status: Svix state unreadable");
                doc["svix"] = serde_json::json!({ "error": "state unreadable" });
            }
        }
    }
    doc
}

/// Ready means: config loaded, the state database accepts a write now, and
/// its folder has room for more (SQLite can reuse WAL space for a tiny probe
/// even on a full disk, so that alone would say "ready" too often).
async fn readyz(app: &App) -> Reply {
    let dir = app.config().server.data_dir.clone();
    let checks = async {
        app.store.probe().await.map_err(|e| e.to_string())?;
        tokio::task::spawn_blocking(move || headroom(&dir))
            .await
            .map_err(|e| e.to_string())?
    };
    match tokio::time::timeout(PROBE_TIMEOUT, checks).await {
        Ok(Ok(())) => reply::text(StatusCode::OK, "text/plain", "ready\n".into()),
        Ok(Err(e)) => {
            app.metrics.storage_errors.inc();
            tracing::error!(error = %e, "readiness probe: storage is not writable; hushwatch cannot record events");
            reply::error(StatusCode::SERVICE_UNAVAILABLE, "storage is not writable")
        }
        Err(_) => reply::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage did not answer in time",
        ),
    }
}

/// Room the data folder must have for ingest to count as healthy.
const HEADROOM: usize = 256 * 1024;

/// Writes, syncs and removes a scratch file of `HEADROOM` bytes.
fn headroom(dir: &std::path::Path) -> Result<(), String> {
    use std::io::Write;
    let path = dir.join(".readyz-probe");
    let result = std::fs::File::create(&path).and_then(|mut f| {
        f.write_all(&vec![0u8; HEADROOM])?;
        f.sync_all()
    });
    let _ = std::fs::remove_file(&path);
    result.map_err(|e| format!("data_dir has no room for {} KiB: {e}", HEADROOM / 1024))
}
