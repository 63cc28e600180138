//! Periodic housekeeping: audit checkpoints (and one at shutdown), pruning
//! the delivery-id dedup set, expired idempotency keys and acknowledge
//! links, and audit retention.

use super::core::Core;
use super::replicas::Lead;
use chrono::TimeDelta;
use std::sync::Arc;
use tokio::sync::watch;

/// Delivery ids are remembered this long: well past Svix's ~27.6 h retry
/// schedule and manual resends within a week.
pub const DEDUP_WINDOW: TimeDelta = TimeDelta::days(7);
const PRUNE_EVERY: TimeDelta = TimeDelta::hours(1);

pub async fn run(core: Arc<Core>, lead: Lead, mut shutdown: watch::Receiver<bool>) {
    let mut next_prune = core.clock.now();
    loop {
        let interval = core.config().audit.checkpoint_interval;
        let now = core.clock.now();
        if now >= next_prune {
            prune(&core, &lead).await;
            next_prune = now + PRUNE_EVERY;
        }
        let wake = (now + interval).min(next_prune);
        tokio::select! {
            _ = core.clock.sleep_until(wake) => {}
            _ = shutdown.changed() => break,
        }
        if core.clock.now() >= now + interval {
            checkpoint(&core, &lead).await;
        }
    }
    // The last word before the store closes: pin the head we acknowledged.
    checkpoint(&core, &lead).await;
}

/// Writes a checkpoint and mirrors it to the log, so a copy of the chain
/// head lives outside this machine wherever logs are shipped.
pub async fn checkpoint(core: &Core, lead: &Lead) {
    let config = core.config();
    if !config.audit.enabled {
        return;
    }
    // Only the leader writes checkpoints (one chain, one writer of them).
    let Some(term) = lead.housekeeping_term().await else {
        return;
    };
    let key = config
        .audit
        .checkpoint_key
        .as_ref()
        .map(|k| k.expose().as_bytes().to_vec());
    match core.store.audit_checkpoint(core.clock.now(), key).await {
        Ok(Some(c)) => tracing::info!(
            seq = c.seq,
            hash = %crate::audit::chain::to_hex(&c.hash),
            signed = c.mac.is_some(),
            term,
            "audit checkpoint"
        ),
        Ok(None) => {}
        Err(e) => tracing::error!(error = %e, "audit checkpoint could not be written"),
    }
}

async fn prune(core: &Core, lead: &Lead) {
    let Some(term) = lead.housekeeping_term().await else {
        return;
    };
    tracing::debug!(term, "housekeeping: pruning");
    let now = core.clock.now();
    match core.store.prune_seen(now - DEDUP_WINDOW).await {
        Ok(n) if n > 0 => tracing::info!(
            removed = n,
            "pruned remembered delivery ids older than 7 days"
        ),
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "pruning delivery ids failed"),
    }
    // In chunks, so ingest never waits behind one huge delete.
    let mut events_removed = 0;
    loop {
        match core.store.prune_events(now - DEDUP_WINDOW, 10_000).await {
            Ok(n) => {
                events_removed += n;
                if n < 10_000 {
                    break;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "pruning old event rows failed");
                break;
            }
        }
    }
    if events_removed > 0 {
        tracing::info!(
            removed = events_removed,
            "pruned event rows older than 7 days (the audit log keeps the record)"
        );
    }
    let horizon = chrono::TimeDelta::days(crate::store::revocations::HORIZON_DAYS);
    match core.store.prune_revocations(now - horizon).await {
        Ok(n) if n > 0 => tracing::info!(
            removed = n,
            "pruned indexed revocations older than the index horizon"
        ),
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "pruning the revocation index failed"),
    }
    // Issue #30: Idempotency-Key records live 24 h (`store::idempotency::TTL`).
    let config = core.config();
    let notifiers = config
        .streams
        .values()
        .map(|s| (s.name.clone(), s.notify.clone()))
        .collect();
    match core.store.prune_forwards(core.store.now(), notifiers).await {
        Ok(n) if n > 0 => tracing::info!(
            removed = n,
            "pruned relay bodies past their retention (delivered: retain, dead letters: dead_letter_retain)"
        ),
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "pruning relay bodies failed; retrying next cycle"),
    }
    match core.store.prune_idempotency().await {
        Ok(n) if n > 0 => tracing::info!(removed = n, "pruned expired idempotency keys"),
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "pruning idempotency keys failed"),
    }
    // Issue #30: acknowledge-link codes that expired or whose episode ended.
    match core.store.prune_ack_codes().await {
        Ok(n) if n > 0 => tracing::info!(removed = n, "pruned expired acknowledge links"),
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "pruning acknowledge links failed"),
    }
    if let Some(retain) = core.config().audit.retain {
        match core.store.audit_prune(now - retain).await {
            Ok(n) if n > 0 => tracing::info!(
                removed = n,
                "pruned audit entries past retention (chain anchored)"
            ),
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "pruning the audit log failed"),
        }
    }
}
