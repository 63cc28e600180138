//! Reconciliation reports: storing them (with the critical page for
//! `revoke_missed` drift, worded from what the audit log says hushwatch was
//! told about each subject), and watching that they keep arriving: a
//! stream with `[streams.X.reconcile]` pages (warning) once no report came
//! within `every + grace` of the last one (or of the start of the watch),
//! and resolves on the next report. Wall-clock time throughout.

use super::app::App;
use super::core::Core;
use super::feed::Mirror;
use crate::audit::classify::Access;
use crate::config::{Config, StreamConfig};
use crate::domain::reconcile::newer_by;
use crate::ingest::reconcile::{DriftKind, Report};
use crate::status::format::local_stamp;
use crate::store::reconcile::{
    Drift, LatestReport, NewReconciliation, ReconcileRow, ReconcileTransition,
};
use crate::store::revocations::Revocation;
use crate::store::svix::SvixEndpointRow;
use crate::store::{AlertState, NewEvent, StoreError, Transition};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// After a storage error, look again this soon.
const RETRY: Duration = Duration::from_secs(5);
/// Subjects a `revoke_missed` page names (and looks up) at most; the rest
/// are counted. The report itself keeps every subject.
const NAMED_SUBJECTS: usize = 20;

impl App {
    /// Stores a report (deduplicated by id); true when it was new.
    pub(super) async fn record_reconciliation(
        &self,
        stream: &StreamConfig,
        report: Report,
        body_sha256: [u8; 32],
    ) -> Result<bool, StoreError> {
        let config = self.config();
        let now = self.clock.now();
        // `[store] encryption_key`: what is stored names each subject by
        // its veiled token (`store::veil`), the page text included (it is
        // revealed where a page is read); lookups try every stored form.
        let veil = config.store.sealer.veil();
        let missed: Vec<&str> = report
            .drift
            .iter()
            .filter(|d| d.kind == DriftKind::RevokeMissed)
            .map(|d| d.subject.as_str())
            .collect();
        let page = if missed.is_empty() {
            None
        } else {
            let zone = config.zone_of(&stream.name);
            let svix = self.svix_state_of(&config, &stream.name, zone).await?;
            let mut lines = Vec::new();
            // Relay mode: what became of each revocation on its way to the app.
            let failing_since = match &stream.forward {
                Some(_) => self
                    .store
                    .forward_status()
                    .await?
                    .into_iter()
                    .find(|r| r.stream == stream.name)
                    .and_then(|r| r.failing_since),
                None => None,
            };
            for subject in missed.iter().take(NAMED_SUBJECTS) {
                let forms = veil.forms(subject);
                let mut revocation = None;
                for form in &forms {
                    let found = self
                        .store
                        .latest_revocation(stream.name.clone(), form.clone())
                        .await?;
                    revocation = newer_by(revocation, found, |r| r.received_at);
                }
                if revocation.is_none() && config.audit.enabled {
                    for form in &forms {
                        let found = self
                            .revocation_in_audit(&config, &stream.name, form)
                            .await?;
                        revocation = newer_by(revocation, found, |r| r.received_at);
                    }
                }
                let fate = match (
                    &stream.forward,
                    revocation.as_ref().and_then(|r| r.delivery_id.clone()),
                ) {
                    (Some(_), Some(id)) => self
                        .store
                        .forward_fate(stream.name.clone(), id)
                        .await?
                        .map(|f| f.reading(failing_since)),
                    _ => None,
                };
                lines.push(told_about(
                    &veil.hide(subject),
                    revocation.as_ref(),
                    fate.as_ref(),
                    &svix,
                    zone,
                ));
            }
            if missed.len() > NAMED_SUBJECTS {
                lines.push(format!(
                    "and {} more subjects (see the report)",
                    missed.len() - NAMED_SUBJECTS
                ));
            }
            Some(Transition {
                stream: stream.name.clone(),
                to: AlertState::Firing,
                at: now,
                reason: format!(
                    "reconciliation {} of stream {} found {} revocation(s) that were missed: {}",
                    report.id,
                    stream.name,
                    missed.len(),
                    lines.join("; ")
                ),
                notifiers: stream.notify.clone(),
            })
        };
        let subject_ids = report
            .drift
            .iter()
            .enumerate()
            .map(|(i, d)| (format!("{}:{i}", d.kind.as_str()), veil.hide(&d.subject)))
            .collect();
        let entry = NewEvent {
            stream: stream.name.clone(),
            delivery_id: Some(report.id.clone()),
            event_type: "reconciliation".into(),
            event_time: Some(report.finished_at),
            received_at: now,
            feeds_clock: false,
            body_sha256: Some(body_sha256),
            channel: "reconciliation",
            signature_verified: false,
            subject_ids,
            audit: config.audit.enabled,
            access: None,
            forward: None,
        };
        let drift: Vec<Drift> = report
            .drift
            .iter()
            .map(|d| Drift {
                subject: veil.hide(&d.subject),
                kind: d.kind.as_str().into(),
                fixed: d.fixed,
                // The app's free text may name the subject (or an email):
                // veiled whole, which grows it by a third, not per match.
                detail: d.detail.as_deref().map(|t| veil.hide(t)),
            })
            .collect();
        let new = self
            .store
            .record_reconciliation(NewReconciliation {
                stream: stream.name.clone(),
                id: report.id.clone(),
                started_at: report.started_at,
                finished_at: report.finished_at,
                checked: i64::try_from(report.checked).unwrap_or(i64::MAX),
                drift,
                entry: entry.audit.then_some(entry.clone()),
                page,
            })
            .await?;
        if new {
            self.metrics
                .reconciliation_last
                .with_label_values(&[stream.name.as_str()])
                .set(now.timestamp_millis() as f64 / 1000.0);
            let mut counts: HashMap<&str, u64> = HashMap::new();
            for d in &report.drift {
                *counts.entry(d.kind.as_str()).or_default() += 1;
            }
            for (kind, n) in counts {
                self.metrics
                    .reconciliation_drift
                    .with_label_values(&[stream.name.as_str(), kind])
                    .inc_by(n);
            }
            self.outbox_wake.notify_one();
            self.reconcile_changed.notify_one();
        }
        Ok(new)
    }
}

/// What hushwatch was told about `subject`: its newest indexed
/// revocation, or that none was ever received (with what is known of the
/// stream's Svix endpoints, where a lost revocation would show).
fn told_about(
    subject: &str,
    revocation: Option<&Revocation>,
    fate: Option<&crate::domain::forward::RevocationFate>,
    svix: &[String],
    zone: Tz,
) -> String {
    if let (Some(r), Some(fate)) = (revocation, fate) {
        // Relay mode tells the three cases apart: not yet delivered (the
        // app is failing), delivered but not acted on, or given up.
        return format!(
            "revocation of {subject} (delivery {}, {}) was {}",
            r.delivery_id.as_deref().unwrap_or("without id"),
            r.event_type,
            crate::domain::forward::fate_words(fate)
        );
    }
    match revocation {
        None if svix.is_empty() => format!(
            "no revocation for {subject} was ever received (the webhook path lost it: check the sender's delivery log for exhausted or disabled endpoints)"
        ),
        None => format!(
            "no revocation for {subject} was ever received (the webhook path lost it: {})",
            svix.join("; ")
        ),
        // Named like the never-received finding: a page lists up to 20
        // findings, and one that does not say whose access it is about
        // cannot be acted on.
        Some(r) => format!(
            "revocation of {subject} received {} (delivery {}, {}) but access was still active",
            local_stamp(r.received_at, zone),
            r.delivery_id.as_deref().unwrap_or("without id"),
            r.event_type
        ),
    }
}

/// Audit entries looked at per subject when the index has no revocation.
const ENTRIES_PER_SUBJECT: i64 = 50;

impl App {
    /// The newest revocation of `subject` on `stream` found in the audit
    /// log. The index only knows revocations received since it was
    /// created (schema upgrade): without this look-back, a revocation
    /// delivered before the upgrade would be reported as never received,
    /// which points the operator at the wrong broken part.
    async fn revocation_in_audit(
        &self,
        config: &Config,
        stream: &str,
        subject: &str,
    ) -> Result<Option<Revocation>, StoreError> {
        let entries = self
            .store
            .subject_entries(subject.to_owned(), None, ENTRIES_PER_SUBJECT)
            .await?;
        Ok(entries
            .into_iter()
            .find(|e| {
                e.stream == stream
                    && e.channel != "reconciliation"
                    && config.audit.classifier.classify(&e.event_type) == Access::Revoke
            })
            .map(|e| Revocation {
                organization: e
                    .subject_ids
                    .iter()
                    .find(|(k, _)| k == "organization_id")
                    .map(|(_, v)| v.clone()),
                event_time: e.event_time,
                received_at: e.received_at,
                delivery_id: e.delivery_id,
                event_type: e.event_type,
            }))
    }

    /// The troubles known of the Svix endpoints feeding `stream`: disabled,
    /// exhausted messages not yet acknowledged, failing attempts.
    async fn svix_state_of(
        &self,
        config: &Config,
        stream: &str,
        zone: Tz,
    ) -> Result<Vec<String>, StoreError> {
        if config.svix.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.store.svix_endpoints().await?;
        Ok(rows
            .iter()
            .filter(|r| {
                config.svix.get(&r.source).is_some_and(|c| {
                    c.stream_for(&r.endpoint_id, r.endpoint_uid.as_deref()).0 == stream
                })
            })
            .filter_map(|r| svix_trouble(r, zone))
            .collect())
    }
}

/// One endpoint's trouble in words, or None when it looks healthy.
fn svix_trouble(r: &SvixEndpointRow, zone: Tz) -> Option<String> {
    let mut parts = Vec::new();
    if r.disabled.is_some() {
        parts.push(match r.disabled_at {
            Some(t) => format!("was disabled at {}", local_stamp(t, zone)),
            None => "is disabled".to_owned(),
        });
    } else if r.failing > 0 {
        parts.push(format!("has {} message(s) failing", r.failing));
    }
    if !r.lost.is_empty() {
        parts.push(format!(
            "{} message(s) exhausted unacknowledged",
            r.lost.len()
        ));
    }
    if parts.is_empty() {
        return None;
    }
    Some(format!(
        "the Svix endpoint {} {}",
        r.endpoint_id,
        parts.join("; ")
    ))
}

pub async fn run(core: Arc<Core>, mirror: Arc<dyn Mirror>, shutdown: watch::Receiver<bool>) {
    super::wake::plan(
        &*core.clock,
        &core.reconcile_changed,
        RETRY,
        "reconciliation watch: storage error",
        shutdown,
        || check(&core, mirror.as_ref()),
    )
    .await;
}

/// Records every due transition; returns the next deadline.
async fn check(core: &Core, mirror: &dyn Mirror) -> Result<Option<DateTime<Utc>>, StoreError> {
    let config = core.config();
    if config.streams.values().all(|s| s.reconcile.is_none()) {
        return Ok(None);
    }
    // The time is read before the reports: a report stored between the two
    // reads then only moves its deadline later than `now`. Read after them,
    // `now` could pass a deadline that report had already moved, and page
    // "missing" for a reconciliation that had just run.
    let now = core.clock.now();
    let rows: HashMap<String, ReconcileRow> = core
        .store
        .reconcile_states()
        .await?
        .into_iter()
        .map(|r| (r.stream.clone(), r))
        .collect();
    let watched: HashMap<String, DateTime<Utc>> = mirror
        .stream_rows()
        .into_iter()
        .map(|r| (r.name, r.watch_started_at))
        .collect();
    let mut next: Option<DateTime<Utc>> = None;
    for stream in config.streams.values() {
        let Some(reconcile) = stream.reconcile else {
            continue;
        };
        let row = rows.get(&stream.name);
        let last = row.and_then(|r| r.last_report_at);
        if let Some(last) = last {
            core.metrics
                .reconciliation_last
                .with_label_values(&[stream.name.as_str()])
                .set(last.timestamp_millis() as f64 / 1000.0);
        }
        let Some(since) = last.or_else(|| watched.get(&stream.name).copied()) else {
            continue;
        };
        let due = since + reconcile.deadline();
        core.metrics
            .reconciliation_deadline
            .with_label_values(&[stream.name.as_str()])
            .set(due.timestamp_millis() as f64 / 1000.0);
        let zone = config.zone_of(&stream.name);
        let stamp = |t: DateTime<Utc>| local_stamp(t, zone);
        let firing = row.is_some_and(|r| r.state == AlertState::Firing);
        let (to, reason) = if now >= due {
            if firing {
                continue;
            }
            let reason = match last {
                Some(last) => format!(
                    "reconciliation has not run since {} on stream {} (expected every {}, grace {})",
                    stamp(last),
                    stream.name,
                    crate::domain::duration::format_duration(reconcile.every),
                    crate::domain::duration::format_duration(reconcile.grace)
                ),
                None => format!(
                    "reconciliation has not run since hushwatch started watching stream {} at {} (expected every {})",
                    stream.name,
                    stamp(since),
                    crate::domain::duration::format_duration(reconcile.every)
                ),
            };
            (AlertState::Firing, reason)
        } else {
            next = Some(next.map_or(due, |n| n.min(due)));
            if !firing {
                continue;
            }
            let reason = format!(
                "reconciliation ran again on stream {} (report at {})",
                stream.name,
                last.map(stamp).unwrap_or_default()
            );
            (AlertState::Ok, reason)
        };
        let result = core
            .store
            .reconcile_transition(ReconcileTransition {
                stream: stream.name.clone(),
                to,
                reason,
                notifiers: stream.notify.clone(),
                at: now,
            })
            .await;
        core.note_storage(&result);
        if result? {
            core.outbox_wake.notify_one();
        }
    }
    Ok(next)
}

impl App {
    /// Starts the drift counters of every reconciled stream at 0: the
    /// shipped rules use `increase()`, which cannot see a series' first
    /// sample. (`hushwatch_stale_grants_total` is rendered with the
    /// per-stream page, 0 for every stream without a stale grant.)
    pub(super) fn declare_access_series(&self, config: &Config, streams: &[&str]) {
        for stream in streams {
            if config
                .streams
                .get(*stream)
                .is_some_and(|s| s.reconcile.is_some())
            {
                for kind in [
                    DriftKind::RevokeMissed,
                    DriftKind::GrantMissed,
                    DriftKind::Other,
                ] {
                    let _ = self
                        .metrics
                        .reconciliation_drift
                        .with_label_values(&[stream, kind.as_str()]);
                }
            }
        }
    }

    /// The `reconciliation` block of each `[streams.X.reconcile]` stream in
    /// `/v1/status`: cadence, the latest report, when the next is due and
    /// since when it is missing, and the latest report's drift counts.
    pub(super) async fn reconciliation_status(
        &self,
    ) -> Result<BTreeMap<String, serde_json::Value>, StoreError> {
        let config = self.config();
        if config.streams.values().all(|s| s.reconcile.is_none()) {
            return Ok(BTreeMap::new());
        }
        let states: HashMap<String, ReconcileRow> = self
            .store
            .reconcile_states()
            .await?
            .into_iter()
            .map(|r| (r.stream.clone(), r))
            .collect();
        let latest: HashMap<String, LatestReport> = self
            .store
            .latest_reconciliations()
            .await?
            .into_iter()
            .map(|r| (r.stream.clone(), r))
            .collect();
        let watched: HashMap<String, DateTime<Utc>> = self
            .stream_rows()
            .into_iter()
            .map(|r| (r.name, r.watch_started_at))
            .collect();
        let now = self.clock.now();
        let rfc = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut out = BTreeMap::new();
        for stream in config.streams.values() {
            let Some(reconcile) = stream.reconcile else {
                continue;
            };
            let state = states.get(&stream.name);
            let report = latest.get(&stream.name);
            let since = state
                .and_then(|s| s.last_report_at)
                .or_else(|| watched.get(&stream.name).copied());
            let due = since.map(|s| s + reconcile.deadline());
            let missing_since = due.filter(|d| now >= *d);
            let firing = state.is_some_and(|s| s.state == AlertState::Firing);
            out.insert(
                stream.name.clone(),
                serde_json::json!({
                    "every_seconds": reconcile.every.num_seconds(),
                    "grace_seconds": reconcile.grace.num_seconds(),
                    "state": if firing { "missing" } else { "ok" },
                    "last_report_id": report.map(|r| r.id.clone()),
                    "last_finished_at": report.map(|r| rfc(r.finished_at)),
                    "last_received_at": state.and_then(|s| s.last_report_at).map(rfc),
                    "last_checked": report.map(|r| r.checked),
                    "last_drift": report.map(|r| r.drift.clone()),
                    "due_at": due.map(rfc),
                    "missing_since": missing_since.map(rfc),
                }),
            );
        }
        Ok(out)
    }
}
