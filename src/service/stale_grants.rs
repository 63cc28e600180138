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
                        // Filled by `store::revocations::veil_subjects` under a key.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::revocations::veil_subjects;
    use crate::store::seal::{SealKey, Sealer};

    const K1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const K2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

    fn event(access: AccessNote) -> NewEvent {
        NewEvent {
            stream: "a".into(),
            delivery_id: Some("d1".into()),
            event_type: "organizationMembership.created".into(),
            event_time: None,
            received_at: DateTime::from_timestamp_millis(0).unwrap(),
            feeds_clock: true,
            body_sha256: None,
            channel: "webhook",
            signature_verified: true,
            subject_ids: vec![
                ("user_id".into(), "user_1".into()),
                ("organization_id".into(), "org_1".into()),
            ],
            audit: true,
            access: Some(access),
            forward: None,
        }
    }

    fn grant() -> AccessNote {
        AccessNote::Grant {
            subject: "user_1".into(),
            organization: Some("org_1".into()),
            page: StalePage {
                notifiers: Vec::new(),
                zone: chrono_tz::UTC,
            },
            earlier: Vec::new(),
        }
    }

    #[test]
    fn subjects_are_veiled_under_the_newest_key_and_a_grant_lists_every_earlier_form() {
        // Without a key nothing changes.
        let mut plain = vec![event(grant())];
        veil_subjects(Sealer::default().veil(), &mut plain);
        assert_eq!(plain[0], event(grant()));

        let old = Sealer::new(vec![SealKey::parse(K1).unwrap()]);
        let sealer = Sealer::new(vec![
            SealKey::parse(K2).unwrap(),
            SealKey::parse(K1).unwrap(),
        ]);
        let v = sealer.veil();
        let mut events = vec![
            event(grant()),
            event(AccessNote::Revoke {
                subject: "user_1".into(),
                organization: None,
            }),
        ];
        veil_subjects(v, &mut events);
        assert_eq!(events[0].subject_ids[0].1, v.hide("user_1"));
        assert_eq!(events[0].subject_ids[1].1, v.hide("org_1"));
        let Some(AccessNote::Grant {
            subject,
            organization,
            earlier,
            ..
        }) = &events[0].access
        else {
            panic!("{:?}", events[0].access)
        };
        assert_eq!(subject, &v.hide("user_1"));
        assert_eq!(organization.as_deref(), Some(v.hide("org_1").as_str()));
        assert_eq!(
            earlier,
            &vec![
                ("user_1".to_string(), Some("org_1".to_string())),
                (old.veil().hide("user_1"), Some(old.veil().hide("org_1"))),
            ]
        );
        assert_eq!(
            events[1].access,
            Some(AccessNote::Revoke {
                subject: v.hide("user_1"),
                organization: None,
            })
        );
    }
}
