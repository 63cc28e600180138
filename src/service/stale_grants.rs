//! Stale grant after revoke: an accepted grant-class event whose event time
//! is older than a revoke-class event already recorded for the same subject
//! (and the same organization, when the grant names one) — typically a
//! retried `organizationMembership.created` delivered after its
//! `organizationMembership.deleted`. It is recorded, counted and paged
//! (`warning`); the event itself was already accepted (2xx), since refusing
//! it would make the sender retry and eventually disable the endpoint.
//! Needs the audit log (the recorded revocations are its entries).

use super::app::App;
use crate::audit::classify::Access;
use crate::store::reconcile::{StaleGrant, SubjectEntry};
use crate::store::{AlertState, EventOutcome, NewEvent, StoreError, Transition};
use chrono::{DateTime, SecondsFormat, Utc};

/// Audit entries read per subject to find its newest revocation.
const ENTRIES_PER_SUBJECT: i64 = 50;
/// How far back a revocation is looked for: the stream's entries received
/// in this window (an index range on the ingest path, not a scan of the
/// whole log). A retried grant comes within the sender's retry schedule
/// (Svix retries for about a day and a half), well inside a week.
const LOOKBACK: chrono::TimeDelta = chrono::TimeDelta::days(7);

/// A grant-class event worth checking once it committed.
pub(super) struct Candidate {
    stream: String,
    delivery_id: String,
    event_time: DateTime<Utc>,
    user: String,
    organization: Option<String>,
}

fn pair<'a>(ids: &'a [(String, String)], kind: &str) -> Option<&'a str> {
    ids.iter().find(|(k, _)| k == kind).map(|(_, v)| v.as_str())
}

impl App {
    /// The events of a delivery that could be stale grants (before the
    /// store takes them): grant-class, with an event time, a delivery id and
    /// a user id, audited.
    pub(super) fn stale_grant_candidates(&self, events: &[NewEvent]) -> Vec<Option<Candidate>> {
        let config = self.config();
        events
            .iter()
            .map(|e| {
                if !e.audit || config.audit.classifier.classify(&e.event_type) != Access::Grant {
                    return None;
                }
                Some(Candidate {
                    stream: e.stream.clone(),
                    delivery_id: e.delivery_id.clone()?,
                    event_time: e.event_time?,
                    user: pair(&e.subject_ids, "user_id")?.to_owned(),
                    organization: pair(&e.subject_ids, "organization_id").map(str::to_owned),
                })
            })
            .collect()
    }

    /// Checks the accepted candidates; a failure is logged, never answered
    /// (the events are already committed).
    pub(super) async fn check_stale_grants(
        &self,
        candidates: Vec<Option<Candidate>>,
        outcomes: &[EventOutcome],
    ) {
        for (c, o) in candidates.into_iter().zip(outcomes) {
            let Some(c) = c.filter(|_| *o == EventOutcome::Accepted) else {
                continue;
            };
            if let Err(e) = self.check_stale_grant(&c).await {
                tracing::error!(stream = %c.stream, error = %e, "stale grant check failed");
            }
        }
    }

    async fn check_stale_grant(&self, c: &Candidate) -> Result<(), StoreError> {
        let entries = self
            .store
            .subject_entries(
                c.user.clone(),
                Some((c.stream.clone(), self.clock.now() - LOOKBACK)),
                ENTRIES_PER_SUBJECT,
            )
            .await?;
        let config = self.config();
        let revoked = entries.iter().find(|e| is_newer_revoke(&config, c, e));
        let Some(revoke) = revoked else {
            return Ok(());
        };
        let notify = config
            .streams
            .get(&c.stream)
            .map(|s| s.notify.clone())
            .unwrap_or_default();
        let now = self.clock.now();
        let reason = format!(
            "a grant for {} arrived after its revocation, with an older event time: if your app applied it, the user may have access again (grant delivery {} at event time {}; revocation {} at event time {})",
            c.user,
            c.delivery_id,
            c.event_time.to_rfc3339_opts(SecondsFormat::Millis, true),
            revoke.delivery_id.as_deref().unwrap_or("without id"),
            revoke
                .event_time
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
                .unwrap_or_default(),
        );
        let new = self
            .store
            .record_stale_grant(StaleGrant {
                stream: c.stream.clone(),
                delivery_id: c.delivery_id.clone(),
                subject: c.user.clone(),
                grant_event_time: c.event_time,
                revoke_seq: revoke.seq,
                page: Transition {
                    stream: c.stream.clone(),
                    to: AlertState::Firing,
                    at: now,
                    reason,
                    notifiers: notify,
                },
            })
            .await?;
        if new {
            self.metrics
                .stale_grants
                .with_label_values(&[c.stream.as_str()])
                .inc();
            self.outbox_wake.notify_one();
        }
        Ok(())
    }
}

/// A revoke-class entry on the same stream, about the same organization
/// when the grant names one, with a newer event time than the grant.
fn is_newer_revoke(config: &crate::config::Config, c: &Candidate, e: &SubjectEntry) -> bool {
    e.stream == c.stream
        && config.audit.classifier.classify(&e.event_type) == Access::Revoke
        && e.event_time.is_some_and(|t| t > c.event_time)
        && c.organization.as_deref().is_none_or(|org| {
            pair(&e.subject_ids, "organization_id").is_none_or(|theirs| theirs == org)
        })
}
