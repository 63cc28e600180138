//! Watches provider subscriptions that must be renewed (Entra, Google): exports their
//! expiry, and raises a warning alert from `expires_at - expiry_warning` on, or when the
//! provider asks for reauthorization; the alert clears when a delivery shows the
//! subscription renewed. The decision is `domain::subscription`; this task only wakes at the
//! right instants and records transitions.

use super::core::Core;
use crate::config::Config;
use crate::domain::alert_kind::AlertKind;
use crate::domain::subscription::{Concern, SubscriptionFacts};
use crate::store::subscriptions::{SubscriptionRow, SubscriptionTransition};
use crate::store::{AlertState, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// After a storage error, look again this soon.
const RETRY: Duration = Duration::from_secs(5);

pub async fn run(core: Arc<Core>, shutdown: watch::Receiver<bool>) {
    super::wake::plan(
        &*core.clock,
        &core.subscriptions_changed,
        RETRY,
        "subscription watch: storage error",
        shutdown,
        || check(&core),
    )
    .await;
}

/// The warning window of a stream whose provider has subscriptions; `None` when the stream
/// is gone from the config or no longer uses such a provider (its rows are then ignored).
fn warning_of(config: &Config, stream: &str) -> Option<TimeDelta> {
    config.streams.get(stream)?.ingest.provider.expiry_warning()
}

fn facts(row: &SubscriptionRow, warning: TimeDelta) -> SubscriptionFacts {
    SubscriptionFacts {
        expires_at: row.expires_at,
        seen_at: row.seen_at,
        reauthorization_requested_at: row.reauth_at,
        warning,
    }
}

/// Records every due transition; returns when to look again (the earliest instant a quiet
/// subscription starts warning).
async fn check(core: &Core) -> Result<Option<DateTime<Utc>>, StoreError> {
    // The time is read before the rows, as in `reconcile::check`: a renewal
    // stored between the two reads then cannot look overdue.
    let now = core.clock.now();
    let rows = core.store.subscriptions().await?;
    let config = core.config();
    let mut next: Option<DateTime<Utc>> = None;
    // Rebuilt from the rows each time, so evicted or unconfigured subscriptions leave no
    // stale series behind (the label sets stay bounded by the rows).
    core.metrics.subscription_expires.reset();
    for row in &rows {
        let Some(warning) = warning_of(&config, &row.stream) else {
            continue;
        };
        core.metrics
            .subscription_expires
            .with_label_values(&[row.stream.as_str(), row.subscription.as_str()])
            .set(row.expires_at.timestamp() as f64);
        let facts = facts(row, warning);
        let concern = facts.concern(now);
        if concern.is_none() {
            let from = facts.warn_from();
            next = Some(next.map_or(from, |n| n.min(from)));
        }
        let moved = match (&row.state, concern) {
            (AlertState::Ok, Some(concern)) => {
                record(core, &config, row, AlertState::Firing, Some(concern), now).await?
            }
            (AlertState::Firing, None) => {
                record(core, &config, row, AlertState::Ok, None, now).await?
            }
            _ => false,
        };
        if moved {
            core.outbox_wake.notify_one();
        }
    }
    // Published last, after every transition of this pass is committed: "evaluated up to
    // `now`" then means exactly that.
    core.metrics
        .subscriptions_evaluated
        .set(now.timestamp_millis() as f64 / 1000.0);
    Ok(next)
}

fn kind_of(concern: Concern) -> AlertKind {
    match concern {
        Concern::Expiring => AlertKind::SubscriptionExpiring,
        Concern::ReauthorizationRequired => AlertKind::SubscriptionReauthorizationRequired,
    }
}

/// What the page says, in the subscription's own words.
fn reason(
    row: &SubscriptionRow,
    to: &AlertState,
    concern: Option<Concern>,
    now: DateTime<Utc>,
) -> String {
    let left =
        crate::domain::duration::format_duration((row.expires_at - now).max(TimeDelta::zero()));
    let expires = row
        .expires_at
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    match (to, concern) {
        (AlertState::Firing, Some(Concern::ReauthorizationRequired)) => format!(
            "the identity provider asked to reauthorize subscription {} of stream {} (it expires at {expires}); reauthorize or renew it, or deliveries stop",
            row.subscription, row.stream
        ),
        (AlertState::Firing, _) => format!(
            "subscription {} of stream {} expires at {expires} (in {left}); renew it, or deliveries stop silently",
            row.subscription, row.stream
        ),
        (AlertState::Ok, _) => format!(
            "subscription {} of stream {} was renewed: it now expires at {expires}",
            row.subscription, row.stream
        ),
    }
}

async fn record(
    core: &Core,
    config: &Config,
    row: &SubscriptionRow,
    to: AlertState,
    concern: Option<Concern>,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let notify = config
        .streams
        .get(&row.stream)
        .map(|s| s.notify.clone())
        .unwrap_or_default();
    let kind = concern.map(kind_of);
    let text = reason(row, &to, concern, now);
    let result = core
        .store
        .subscription_transition(SubscriptionTransition {
            stream: row.stream.clone(),
            subscription: row.subscription.clone(),
            to,
            kind,
            reason: text,
            notifiers: notify,
            at: now,
        })
        .await;
    core.note_storage(&result);
    result
}
