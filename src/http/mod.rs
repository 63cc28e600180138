//! The HTTP adapter: a hyper HTTP/1.1 server on one listener. It owns
//! connection handling (limits, timeouts, graceful shutdown). `routes`
//! dispatches to one module per family of routes (`ingest`, `providers`,
//! `svix`, `reconcile`, `silences`, …); what they share sits below them:
//! `guard` (stream, token and signed-head checks, the counted refusal),
//! `record` (storing a verified delivery and answering), `body` (bounded
//! reading), `reply`, and `api` (what a route may ask of the sidecar).
//! The cached `/readyz` answer is in `readiness`.
//!
//! Deadlines bound every connection that sends nothing useful: the
//! head (and, between requests, the idle keep-alive wait, since hyper starts
//! the same timer when it waits for the next head) within
//! [`HEADER_TIMEOUT`]; the body within `[server] body_timeout` of the end of
//! the head (408, then close); and a response write that makes no progress
//! for [`write_deadline::WRITE_STALL`] (a client that does not read) fails
//! and closes the connection.

mod ack_link;
pub mod api;
mod body;
mod forward_admin;
mod guard;
mod idempotency;
mod ingest;
mod log_field;
mod metrics_page;
mod providers;
mod readiness;
pub(crate) use readiness::storage_health;
mod reconcile;
mod record;
mod reply;
mod routes;
mod silences;
mod status_page;
mod streams_admin;
mod svix;
pub mod unready;
mod write_deadline;

pub use body::MAX_BODY;
pub use log_field::Escaped;

pub use routes::Routes;

use api::Api;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// A client must send its complete headers within this time (slowloris);
/// hyper also applies it to an idle keep-alive connection's next head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head (request line, headers and the blank line that
/// ends them); a larger one is answered 431. Webhook heads are a few KiB,
/// signature headers with rotated keys well under 1 KiB.
///
/// It is set twice. As hyper's `max_buf_size` it bounds the read buffer a
/// half-sent head can pin (hyper's default, ~400 KiB, would let
/// `MAX_CONNECTIONS` of them pin ~1.6 GiB). But that is only a buffer
/// bound: one read may fill the buffer's whole spare capacity, so a
/// complete head of up to ~49 KiB arriving in a single read used to pass.
/// As `max_header_size` hyper compares the parsed head's exact length, so
/// the limit is the same however the head arrives (one write or a drip).
const MAX_HEAD_BUFFER: usize = 32 * 1024;
/// Open connections beyond this wait in the accept queue.
const MAX_CONNECTIONS: usize = 4096;
/// How long shutdown waits for in-flight requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `routes` on `listener` until `shutdown`. The main and the admin
/// listener both run through here, so they share every limit and timeout.
pub async fn serve(
    listener: TcpListener,
    app: Arc<dyn Api>,
    routes: Routes,
    mut shutdown: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let readiness = Arc::new(readiness::Readiness::new());
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&permits).acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = shutdown.changed() => break,
        };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Usually EMFILE: back off briefly instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let app = Arc::clone(&app);
        let readiness = Arc::clone(&readiness);
        // Shared with each request's task (`routes::handle`), which may
        // outlive the connection: a client that hangs up mid-request still
        // counts against `MAX_CONNECTIONS` until its request has ended.
        let permit = Arc::new(permit);
        let held = Arc::clone(&permit);
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .max_buf_size(MAX_HEAD_BUFFER)
            .max_header_size(MAX_HEAD_BUFFER)
            .serve_connection(
                TokioIo::new(write_deadline::WriteDeadline::new(
                    stream,
                    write_deadline::WRITE_STALL,
                )),
                service_fn(move |req| {
                    let app = Arc::clone(&app);
                    let readiness = Arc::clone(&readiness);
                    let held = Arc::clone(&held);
                    async move {
                        Ok::<_, std::convert::Infallible>(
                            routes::handle(app, routes, readiness, req, held).await,
                        )
                    }
                }),
            );
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("shutdown: some connections did not finish in time");
    }
}
