//! The fallback ladder (issue #19): when attempts to notifier X fail in a
//! row and the count reaches a step of `[notifiers.X] fallback_after`
//! (default 1, 5, 20), the notifiers in `fallback` are paged once per step
//! through the outbox (a keyed alert per X, so every page has its own key);
//! when X delivers again after a step was paged, one recovery page follows.
//!
//! The count is the `hushwatch_notifier_consecutive_failures` gauge of this
//! process. Pages *to* a fallback never climb a ladder themselves (a
//! fallback whose own target fails is logged, not chained further).

use super::app::App;
use crate::config::Config;
use crate::store::{AlertState, OutboxRow, StoreError, Transition};
use chrono::{DateTime, SecondsFormat, Utc};

/// The `alert_kind` of fallback pages (set by `store::ops::fallback_alert`).
pub const FALLBACK_KIND: &str = "hushwatch_fallback";

/// Called after each recorded attempt of `row` to its notifier: `before`
/// and `after` are the consecutive-failure counts around it, `error` the
/// failed attempt's reason.
pub(super) async fn after_attempt(
    app: &App,
    config: &Config,
    row: &OutboxRow,
    before: i64,
    after: i64,
    error: Option<&str>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    if row.alert_kind == FALLBACK_KIND {
        if let Some(e) = error {
            tracing::error!(notifier = %row.notifier, error = %e, "a fallback page could not be delivered; fallbacks are not chained further");
        }
        return Ok(());
    }
    let Some(ladder) = config.watchdog.fallbacks.get(&row.notifier) else {
        return Ok(());
    };
    let first = i64::from(ladder.after.first().copied().unwrap_or(1));
    let (to, reason) = match error {
        Some(e) if ladder.after.iter().any(|s| i64::from(*s) == after) && after > before => {
            let waiting = app
                .metrics
                .outbox_pending
                .with_label_values(&[row.notifier.as_str()])
                .get()
                .max(1);
            (
                AlertState::Firing,
                format!(
                    "hushwatch cannot deliver to {}: {e}, {waiting} pages waiting since {} ({after} failed attempts in a row)",
                    row.notifier,
                    row.created_at.to_rfc3339_opts(SecondsFormat::Secs, true)
                ),
            )
        }
        None if before >= first => (
            AlertState::Ok,
            format!(
                "hushwatch delivers to {} again (after {before} failed attempts in a row)",
                row.notifier
            ),
        ),
        _ => return Ok(()),
    };
    tracing::warn!(notifier = %row.notifier, fallback = ?ladder.notify, "{reason}");
    app.store
        .queue_fallback_pages(
            Transition {
                stream: row.stream.clone(),
                to,
                at: now,
                reason,
                notifiers: ladder.notify.clone(),
            },
            row.notifier.clone(),
        )
        .await?;
    app.outbox_wake.notify_one();
    Ok(())
}
