//! Provider text that PostgreSQL cannot store, made storable the same way
//! for every backend (issue #26). Kept in `store` (it is the store's
//! limit) but applied by the caller, `service::http_api`, before the
//! write, so the store's own calls never rewrite what they were given.
//!
//! U+FFFD rather than a backslash escape: it cannot be mistaken for
//! text the sender wrote on purpose, and it is what a reader shows for
//! undecodable input anyway. Two ids that differ only by NUL versus U+FFFD
//! would deduplicate as one; no provider issues such ids.

use super::subscriptions::SubscriptionUpdate;
use super::NewEvent;
use hushwatch_core::ingest::svix_ops::{AttemptRef, EndpointRef, OpEvent};

/// PostgreSQL `text` cannot hold U+0000; SQLite can. Text that the
/// provider signed (event types, delivery, subject, subscription and Svix
/// ids) cannot be refused, since the sender cannot change it (Svix would
/// retry a refused message, then disable the endpoint), so every
/// backend stores it with U+FFFD in place of NUL. Applied in
/// `service::http_api` (the `http::Api` implementation), the one place
/// every ingest route's data passes before the store, so both backends
/// store, deduplicate and audit the same text. Fields of ours (app
/// reports, silences, reconciliation reports) are refused 400 by their
/// routes before this.
pub fn nul_safe(s: String) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{FFFD}")
    } else {
        s
    }
}

fn nul_safe_in_place(s: &mut String) {
    if s.contains('\0') {
        *s = nul_safe(std::mem::take(s));
    }
}

pub fn nul_safe_event(e: &mut NewEvent) {
    nul_safe_in_place(&mut e.stream);
    nul_safe_in_place(&mut e.event_type);
    if let Some(id) = &mut e.delivery_id {
        nul_safe_in_place(id);
    }
    for (key, value) in &mut e.subject_ids {
        nul_safe_in_place(key);
        nul_safe_in_place(value);
    }
}

pub fn nul_safe_update(mut u: SubscriptionUpdate) -> SubscriptionUpdate {
    for e in &mut u.expiries {
        nul_safe_in_place(&mut e.subscription);
    }
    for n in &mut u.lifecycle {
        nul_safe_in_place(&mut n.subscription);
        nul_safe_in_place(&mut n.event);
    }
    u
}

fn nul_safe_endpoint(e: &mut EndpointRef) {
    if let Some(app) = &mut e.app_id {
        nul_safe_in_place(app);
    }
    nul_safe_in_place(&mut e.endpoint_id);
    if let Some(uid) = &mut e.endpoint_uid {
        nul_safe_in_place(uid);
    }
}

fn nul_safe_attempt(a: &mut AttemptRef) {
    nul_safe_in_place(&mut a.msg_id);
    if let Some(id) = &mut a.msg_event_id {
        nul_safe_in_place(id);
    }
}

pub fn nul_safe_op(mut event: OpEvent) -> OpEvent {
    match &mut event {
        OpEvent::EndpointCreated(e)
        | OpEvent::EndpointUpdated(e)
        | OpEvent::EndpointDeleted(e)
        | OpEvent::EndpointEnabled(e)
        | OpEvent::EndpointDisabled { endpoint: e, .. } => nul_safe_endpoint(e),
        OpEvent::AttemptFailing { endpoint, attempt }
        | OpEvent::AttemptExhausted { endpoint, attempt }
        | OpEvent::AttemptRecovered { endpoint, attempt } => {
            nul_safe_endpoint(endpoint);
            nul_safe_attempt(attempt);
        }
        OpEvent::BackgroundTaskFinished {
            task_id,
            task,
            status,
        } => {
            nul_safe_in_place(task_id);
            nul_safe_in_place(task);
            nul_safe_in_place(status);
        }
        OpEvent::Other => {}
    }
    event
}
