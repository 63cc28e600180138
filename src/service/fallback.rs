//! The fallback ladder (issue #19): when attempts to notifier X fail in a
//! row and the count reaches a step of `[notifiers.X] fallback_after`
//! (default 1, 5, 20), the notifiers in `fallback` are paged once per step
//! through the outbox (a keyed alert per X, so every page has its own key);
//! when X delivers again after a step was paged, one recovery page follows.
//!
//! The count lives in the store (`store::ladder`): the replica holding a
//! page's claim records its attempt and the count in one transaction, and
//! a step is queued by a compare-and-set there, so with N replicas each
//! step is paged once per deployment, and the count survives a restart.
//! `hushwatch_notifier_consecutive_failures` shows that shared count.
//! Pages *to* a fallback never climb a ladder themselves (a fallback whose
//! own target fails is logged, not chained further).

use super::core::Core;
use crate::config::Config;
use crate::store::ladder::{LadderRule, LadderUpdate};
use crate::store::{Attempt, OutboxRow, StoreError};
use chrono::{DateTime, Utc};

/// Records `attempt` of `row` (under claim `token` on a shared store),
/// counts it on the notifier's ladder, and wakes the outbox when that
/// queued a fallback page.
pub(super) async fn record(
    core: &Core,
    config: &Config,
    row: &OutboxRow,
    token: Option<i64>,
    attempt: Attempt,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let error = match &attempt {
        Attempt::Retry { error, .. } | Attempt::Failed { error, .. } => Some(error.clone()),
        Attempt::Delivered { .. } => None,
    };
    // Fallback pages are queued by `store::ops::fallback_alert`.
    let is_fallback = row.alert_kind == crate::domain::alert_kind::AlertKind::Fallback;
    if let (true, Some(e)) = (is_fallback, &error) {
        tracing::error!(notifier = %row.notifier, error = %e, "a fallback page could not be delivered; fallbacks are not chained further");
    }
    let rule = config
        .watchdog
        .fallbacks
        .get(&row.notifier)
        .filter(|_| !is_fallback)
        .map(|l| LadderRule {
            steps: l.after.iter().map(|s| i64::from(*s)).collect(),
            notify: l.notify.clone(),
        });
    let update = LadderUpdate {
        notifier: row.notifier.clone(),
        error,
        rule,
        stream: row.stream.clone(),
        page_created_at: row.created_at,
        at: now,
    };
    let outcome = core
        .store
        .settle_counted(row.id, token, attempt, update)
        .await?;
    if !outcome.settled {
        tracing::warn!(page = %row.page_key, "delivery claim lapsed before the attempt ended; another replica owns this page now and its attempt is recorded instead");
        return Ok(());
    }
    core.metrics
        .watchdog
        .consecutive_failures
        .with_label_values(&[row.notifier.as_str()])
        .set(outcome.failures);
    if let Some(reason) = outcome.queued {
        let notify = config
            .watchdog
            .fallbacks
            .get(&row.notifier)
            .map(|l| &l.notify);
        tracing::warn!(notifier = %row.notifier, fallback = ?notify, "{reason}");
        core.outbox_wake.notify_one();
    }
    Ok(())
}

/// Copies the shared counts into `hushwatch_notifier_consecutive_failures`,
/// so every replica shows what the others recorded too.
pub(super) async fn refresh_gauges(core: &Core, config: &Config) {
    let Ok(counts) = core.store.notifier_failures().await else {
        return;
    };
    for (notifier, failures) in counts {
        if config.notifiers.contains_key(&notifier) {
            core.metrics
                .watchdog
                .consecutive_failures
                .with_label_values(&[notifier.as_str()])
                .set(failures);
        }
    }
}
