//! Delivers pages from the durable outbox. Only the `log` notifier exists
//! so far: one JSON line per page on standard output.
//!
//! A page is marked delivered only after it was written, so a crash in
//! between prints it again on restart (at least once, never lost).

use super::app::App;
use crate::config::NotifierKind;
use crate::store::{AlertState, OutboxRow};
use chrono::SecondsFormat;
use serde_json::json;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const RETRY: Duration = Duration::from_secs(5);

pub async fn run(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let pause = match deliver_pending(&app).await {
            Ok(()) => None,
            Err(e) => {
                tracing::error!(error = %e, "outbox delivery failed; retrying");
                Some(RETRY)
            }
        };
        let sleep = async {
            match pause {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = app.outbox_wake.notified() => {}
            _ = sleep => {}
            _ = shutdown.changed() => return,
        }
    }
}

async fn deliver_pending(app: &App) -> Result<(), crate::store::StoreError> {
    let config = app.config();
    let pending = app.store.pending_outbox().await?;
    for n in config.notifiers.keys() {
        let count = pending.iter().filter(|p| &p.notifier == n).count();
        app.metrics
            .outbox_pending
            .with_label_values(&[n.as_str()])
            .set(count as i64);
    }
    for page in pending {
        match config.notifiers.get(&page.notifier).map(|n| &n.kind) {
            Some(NotifierKind::Log) => {
                write_log_line(&page);
                app.store.mark_outbox_done(page.id, app.clock.now()).await?;
                app.metrics
                    .outbox_pending
                    .with_label_values(&[page.notifier.as_str()])
                    .dec();
            }
            None => tracing::error!(
                notifier = %page.notifier,
                stream = %page.stream,
                "a page is waiting for a notifier that is no longer configured; it stays in the outbox"
            ),
        }
    }
    Ok(())
}

fn write_log_line(page: &OutboxRow) {
    let status = match page.state {
        AlertState::Firing => "firing",
        AlertState::Ok => "resolved",
    };
    let line = json!({
        "page": format!("outbox-{}", page.id),
        "status": status,
        "stream": page.stream,
        "notifier": page.notifier,
        "at": page.at.to_rfc3339_opts(SecondsFormat::Millis, true),
        "summary": page.reason,
    });
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
