//! Grant/revoke bookkeeping on the ingest path. Before a delivery is
//! stored, each event classified revoke-class or grant-class (by
//! `[audit]`'s classifier, whether or not the audit log is on) is given its
//! `AccessNote`: a revocation is indexed per (stream, subject,
//! organization), and a grant is checked against that index, both inside
//! the ingest transaction (`store::revocations`). A grant-class event whose
//! event time is older than a recorded revocation of the same subject (and
//! the same organization, when the grant names one; a revocation naming
//! none covers every organization) — typically a retried
//! `organizationMembership.created` delivered after its
//! `organizationMembership.deleted` — is recorded as a stale grant with its
//! `warning` page queued in that same transaction, so a crash after the
//! commit cannot lose it. The event itself is accepted (2xx): refusing it
//! would make the sender retry and eventually disable the endpoint.

use super::app::App;
use crate::audit::classify::Access;
use crate::store::revocations::{AccessNote, StalePage};
use crate::store::{EventOutcome, NewEvent};
use chrono::{DateTime, Utc};

fn pair<'a>(ids: &'a [(String, String)], kind: &str) -> Option<&'a str> {
    ids.iter().find(|(k, _)| k == kind).map(|(_, v)| v.as_str())
}

/// A grant-class event the store checked: (stream, delivery id, received at).
pub(super) type CheckedGrant = Option<(String, String, DateTime<Utc>)>;

impl App {
    /// Gives each grant- or revoke-class event its note for the store;
    /// answers, per event, the grants among them (for `count_stale_grants`).
    pub(super) fn mark_access(&self, events: &mut [NewEvent]) -> Vec<CheckedGrant> {
        let config = self.config();
        let mut grants = Vec::with_capacity(events.len());
        for e in events.iter_mut() {
            let organization = pair(&e.subject_ids, "organization_id").map(str::to_owned);
            let user = pair(&e.subject_ids, "user_id").map(str::to_owned);
            e.access = match config.audit.classifier.classify(&e.event_type) {
                Access::Revoke => {
                    // A revocation is indexed under the user it names, else
                    // under the first subject it names (an organization,
                    // a directory), which then has no organization key.
                    match user {
                        Some(user) => Some(AccessNote::Revoke {
                            subject: user,
                            organization,
                        }),
                        None => e.subject_ids.first().map(|(_, v)| AccessNote::Revoke {
                            subject: v.clone(),
                            organization: None,
                        }),
                    }
                }
                Access::Grant if e.event_time.is_some() => match (user, &e.delivery_id) {
                    (Some(user), Some(_)) => Some(AccessNote::Grant {
                        subject: user,
                        organization,
                        page: StalePage {
                            notifiers: config
                                .streams
                                .get(&e.stream)
                                .map(|s| s.notify.clone())
                                .unwrap_or_default(),
                            zone: config.zone_of(&e.stream),
                        },
                        // Filled by `app::veil_subjects` under a key.
                        earlier: Vec::new(),
                    }),
                    _ => None,
                },
                _ => None,
            };
            let is_grant = matches!(e.access, Some(AccessNote::Grant { .. }));
            grants.push(
                e.delivery_id
                    .clone()
                    .filter(|_| is_grant)
                    .map(|id| (e.stream.clone(), id, e.received_at)),
            );
        }
        grants
    }

    /// Counts the stale grants this delivery recorded (already committed
    /// with their pages) and wakes the outbox; a failure to read is logged.
    pub(super) async fn count_stale_grants(
        &self,
        grants: Vec<CheckedGrant>,
        outcomes: &[EventOutcome],
    ) {
        let mut checked = false;
        for (g, o) in grants.into_iter().zip(outcomes) {
            let Some((stream, id, received_at)) = g.filter(|_| *o == EventOutcome::Accepted) else {
                continue;
            };
            checked = true;
            match self.store.stale_grant_recorded_at(stream.clone(), id).await {
                // Recorded by this delivery (a delivery id accepted again
                // after its dedup window finds the old record instead); the
                // store keeps milliseconds.
                Ok(Some(at)) if at.timestamp_millis() == received_at.timestamp_millis() => {
                    self.metrics.count_stale_grant(&stream);
                }
                Ok(_) => {}
                Err(e) => tracing::error!(stream = %stream, error = %e, "stale grant count failed"),
            }
        }
        // A stale grant's page is already in the outbox; wake it whether
        // or not the count above could be read.
        if checked {
            self.outbox_wake.notify_one();
        }
    }
}
