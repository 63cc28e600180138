//! What the listener answers while `serve` waits for its store (PostgreSQL
//! unreachable at start): `/healthz` 200 (the process is alive; restarting
//! it would not bring the database back), everything else 503 (so
//! `/readyz` keeps traffic away and a sender retries its delivery later).
//! The same limits as the real server bound every connection; each answer
//! closes its connection, so clients reconnect to the real server.

use std::future::Future;
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::{reply, write_deadline, HEADER_TIMEOUT, MAX_CONNECTIONS, MAX_HEAD_BUFFER};

/// Answers on `listener` until `ready` completes, and returns its output;
/// the listener is then free for the real server.
pub async fn serve_until<T>(listener: &TcpListener, ready: impl Future<Output = T>) -> T {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(ready);
    loop {
        let permit = tokio::select! {
            out = &mut ready => return out,
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return ready.await,
            },
        };
        let stream = tokio::select! {
            out = &mut ready => return out,
            a = listener.accept() => match a {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Usually EMFILE: back off briefly instead of spinning.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .max_buf_size(MAX_HEAD_BUFFER)
            .max_header_size(MAX_HEAD_BUFFER)
            .keep_alive(false)
            .serve_connection(
                TokioIo::new(write_deadline::WriteDeadline::new(
                    stream,
                    write_deadline::WRITE_STALL,
                )),
                service_fn(|req| async move {
                    let alive = req.method() == Method::GET && req.uri().path() == "/healthz";
                    Ok::<_, std::convert::Infallible>(if alive {
                        reply::text(StatusCode::OK, "text/plain", "ok\n".into())
                    } else {
                        reply::text(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "text/plain",
                            "waiting for the state database\n".into(),
                        )
                    })
                }),
            );
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
}
