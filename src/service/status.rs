//! `/v1/status`, assembled in one place (`App::status_document`): the
//! streams (evaluated from the stream cache), then the sections each
//! concern renders from the store (notifications, audit, operator, Svix);
//! and each stream's 7-day timeline for the status page.

use super::app::App;
use crate::config::forward::ForwardConfig;
use crate::status::relay;
use crate::status::timeline::{self, Timeline};
use crate::store::AlertState;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Newest arrivals read per stream for its timeline: ticks beyond a few
/// hundred a week merge into one band anyway, and the cap bounds the read.
pub const TIMELINE_ARRIVALS: i64 = 500;
/// Streams that get a timeline on one page (the rest are listed without):
/// bounds the page's size and the store work behind one request.
pub const TIMELINE_STREAMS: usize = 100;
/// Streams whose `crosscheck` block names its newest open findings (the
/// rest count them): bounds the store reads behind one request.
pub const CROSSCHECK_EXAMPLE_STREAMS: usize = 20;

/// The stream's `critical_after` (`[streams.X.forward] critical_after`):
/// how long a revocation may wait undelivered before the relay reads as
/// `overdue`; a stream that no longer forwards keeps the default, as its
/// rows do.
fn critical_after(forward: Option<&ForwardConfig>) -> TimeDelta {
    forward.map_or(crate::config::forward::DEFAULT_CRITICAL_AFTER, |f| {
        f.critical_after
    })
}

impl App {
    /// The whole `/v1/status` document, which the status page renders too.
    /// A section whose state cannot be read says so rather than hiding it.
    pub async fn status_document(&self) -> Value {
        let mut doc = self.status();
        doc["notifications"] = match self.delivery().notifications_status().await {
            Ok(n) => n,
            Err(e) => json!({ "error": e.to_string() }),
        };
        doc["audit"] = self.audit_status().await;
        self.add_reconciliation_status(&mut doc).await;
        self.add_forward_status(&mut doc).await;
        self.add_crosscheck_status(&mut doc).await;
        let reasons = self.watchdog().reasons();
        doc["degraded"] = json!(!reasons.is_empty());
        doc["degraded_reasons"] = json!(reasons);
        if let Some(operator) = self.operator().status().await {
            doc["operator"] = operator;
        }
        self.add_operator_facts(&mut doc).await;
        if let Some(replicas) = self.replicas() {
            doc["replicas"] = replicas.status();
        }
        if !self.config().svix.is_empty() {
            match self.svix().status().await {
                Ok(svix) => doc["svix"] = svix,
                Err(e) => {
                    tracing::error!(error = %e, "status: Svix state unreadable");
                    doc["svix"] = json!({ "error": "state unreadable" });
                }
            }
        }
        doc
    }

    /// Puts on each stream's entry who is on it (issue #27): `acknowledged`
    /// (the current firing episode's acknowledgement) and `silenced` (the
    /// active operator silence holding its pages, preferring one that holds
    /// its "silent too long" page, then the one that ends last); `null` for
    /// neither. The same store reads and the same matching as the
    /// `hushwatch_stream_silenced` gauge. When the store cannot be read the
    /// `operator` section says so, rather than every row reading as "nobody
    /// is on it".
    async fn add_operator_facts(&self, doc: &mut Value) {
        use crate::domain::alert_kind::AlertKind;
        use crate::domain::mute::{glob, PAGE_KINDS};
        let now = self.clock.now();
        let (silences, acks) = match (
            self.store.silences(now).await,
            self.store.current_acks().await,
        ) {
            (Ok(s), Ok(a)) => (s, a),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "status: silences or acknowledgements unreadable");
                doc["operator"] = json!({ "error": "silences and acknowledgements unreadable" });
                return;
            }
        };
        let rfc = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
        let quiet = AlertKind::Silence.as_str();
        // The kinds side of the match does not depend on the stream: decided
        // once per silence, so a status read costs one stream-pattern check
        // per (stream, active silence), not one per page kind as well
        // (10,000 streams x 1,000 silences stays ~10^7 short globs).
        let active: Vec<_> = silences
            .iter()
            .filter(|x| x.active_at(now))
            .filter(|x| {
                PAGE_KINDS
                    .iter()
                    .any(|k| x.kinds.iter().any(|p| glob(p, k)))
            })
            .map(|x| (x, x.kinds.iter().any(|p| glob(p, quiet))))
            .collect();
        let Some(streams) = doc["streams"].as_array_mut() else {
            return;
        };
        for s in streams {
            let name = s["name"].as_str().unwrap_or_default().to_owned();
            let ack = acks.iter().find(|a| a.stream == name);
            s["acknowledged"] = ack.map_or(Value::Null, |a| {
                json!({
                    "by": a.created_by,
                    "at": rfc(a.created_at),
                    "comment": a.comment,
                    "episode_started_at": rfc(a.started_at),
                })
            });
            let silence = active
                .iter()
                .filter(|(x, _)| x.streams.iter().any(|p| glob(p, &name)))
                .max_by_key(|(x, holds_quiet)| (*holds_quiet, x.ends_at));
            s["silenced"] = silence.map_or(Value::Null, |(x, holds_quiet)| {
                json!({
                    "id": x.id,
                    "until": rfc(x.ends_at),
                    "by": x.created_by,
                    "comment": x.comment,
                    "kinds": x.kinds,
                    // False: only other pages of the stream (Svix, …) are held.
                    "quiet_page": holds_quiet,
                })
            });
        }
    }

    /// Puts a `forward` block (relay mode) into the entry of each stream
    /// that forwards, and of each that no longer does but still has stored
    /// relay state (`configured: false`: rows stored before its `[forward]`
    /// was removed, failing on the default policy until it comes back);
    /// unreadable state says so in the blocks of the forwarding streams.
    async fn add_forward_status(&self, doc: &mut Value) {
        let config = self.config();
        let now = self.clock.now();
        let rows = self.store.forward_status().await;
        if let Err(e) = &rows {
            tracing::error!(error = %e, "status: relay state unreadable");
        }
        let rfc =
            |t: Option<DateTime<Utc>>| t.map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true));
        let Some(streams) = doc["streams"].as_array_mut() else {
            return;
        };
        for s in streams {
            let name = s["name"].as_str().unwrap_or_default().to_owned();
            let forward = config.streams.get(&name).and_then(|c| c.forward.as_deref());
            let stored = match &rows {
                Ok(rows) => rows.iter().find(|r| r.stream == name).cloned(),
                Err(_) => None,
            };
            let r = match (forward, &rows, stored) {
                (None, _, None) => continue,
                (Some(f), Err(_), _) => {
                    let app = crate::notify::redact_url(f.url.expose());
                    s["forward"] =
                        json!({ "app": app, "configured": true, "error": "state unreadable" });
                    s["relay"] = json!(relay::unreadable(critical_after(Some(f))));
                    continue;
                }
                (_, _, r) => r.unwrap_or_default(),
            };
            let mut health = relay::assess(&name, &r, critical_after(forward), now);
            // With `[store] encryption_key` the store names subjects by their
            // veiled tokens: the page reads as without (as pages do).
            if let Some(o) = health.oldest_pending.as_mut() {
                o.subject = o
                    .subject
                    .as_deref()
                    .map(|x| config.store.sealer.veil().reveal(x).into_owned());
            }
            s["relay"] = json!(health);
            let mut block = json!({
                "configured": forward.is_some(),
                "pending": r.pending,
                "oldest_pending_at": rfc(r.oldest_pending_at),
                "last_delivered_at": rfc(r.last_delivered_at),
                "last_attempt_at": rfc(r.last_attempt_at),
                "consecutive_failures": r.consecutive_failures,
                "failing_since": rfc(r.failing_since),
                "last_error": r.last_error,
                "dead_letters": r.dead_letters,
            });
            if let Some(f) = forward {
                block["app"] = json!(crate::notify::redact_url(f.url.expose()));
                block["ordered"] = json!(f.ordered);
                block["clock"] = json!(f.clock.as_str());
            }
            s["forward"] = block;
        }
    }

    /// Puts a `crosscheck` block (issue #45, `status::crosscheck`) into the
    /// entry of each stream with `[streams.X.crosscheck]`: whether its poll
    /// is failing (`domain::crosscheck::poll_health`, the rule the
    /// `crosscheck_failing` page uses) and its open findings, the newest
    /// named for the first [`CROSSCHECK_EXAMPLE_STREAMS`] streams that have
    /// some. Two reads for all streams, plus one per stream named; an
    /// unreadable store makes every such block `unreadable` (not OK).
    async fn add_crosscheck_status(&self, doc: &mut Value) {
        use crate::status::crosscheck::{self as view, Facts, Failing};
        let config = self.config();
        if !config.streams.values().any(|s| s.crosscheck.is_some()) {
            return;
        }
        let now = self.clock.now();
        let overview = self.store.crosscheck_overview().await;
        if let Err(e) = &overview {
            tracing::error!(error = %e, "status: cross-check state unreadable");
        }
        let veil = config.store.sealer.veil();
        let config_path = super::forward::config_path(&config);
        let watch_started: BTreeMap<String, DateTime<Utc>> = self
            .lock_streams()
            .values()
            .map(|w| (w.row.name.clone(), w.row.watch_started_at))
            .collect();
        let Some(streams) = doc["streams"].as_array_mut() else {
            return;
        };
        let mut named = 0usize;
        for s in streams {
            let name = s["name"].as_str().unwrap_or_default().to_owned();
            let Some(cc) = config
                .streams
                .get(&name)
                .and_then(|c| c.crosscheck.as_deref())
            else {
                continue;
            };
            let overview = match &overview {
                Ok(all) => all.iter().find(|o| o.stream == name).cloned(),
                Err(_) => {
                    s["crosscheck"] = json!(view::unreadable(cc.provider));
                    continue;
                }
            };
            let o = overview.unwrap_or_default();
            let watch_started_at = watch_started.get(&name).copied().unwrap_or(now);
            let health = crate::domain::crosscheck::poll_health(
                &o.row.facts(),
                cc.provider,
                cc.every,
                watch_started_at,
                now,
            );
            // The rule the page uses, Entra's resync warning included.
            let failing = match super::crosscheck_delta::with_resync_warning(cc, &o.row, health) {
                crate::domain::crosscheck::PollHealth::Ok => None,
                crate::domain::crosscheck::PollHealth::Failing { critical, reason } => {
                    Some(Failing { critical, reason })
                }
            };
            let mut examples = Vec::new();
            if o.open() > 0 && named < CROSSCHECK_EXAMPLE_STREAMS {
                named += 1;
                match self
                    .store
                    .crosscheck_findings(name.clone(), true, view::EXAMPLES as i64)
                    .await
                {
                    Ok(found) => {
                        for f in found {
                            // With `[store] encryption_key` the store may
                            // name subjects by veiled tokens: shown as ids.
                            let mut finding = f.finding.clone();
                            finding.subject = veil.reveal(&finding.subject).into_owned();
                            finding.organization = finding
                                .organization
                                .as_deref()
                                .map(|x| veil.reveal(x).into_owned());
                            examples.push(view::finding(&finding, f.found_at, &f.state));
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "status: cross-check findings unreadable");
                    }
                }
            }
            let facts = Facts {
                provider: cc.provider,
                last_poll_at: o.row.last_poll_at,
                last_success_at: o.row.last_success_at,
                last_error: o.row.last_error.clone(),
                failures: o.row.failures,
                healed: o.row.healed,
                open_revoke: o.open_revoke,
                open_grant: o.open_grant,
                open_other: o.open_other,
                failing,
                every: cc.every,
                watch_started_at,
                examples,
                config_path: &config_path,
            };
            s["crosscheck"] = json!(view::assess(&name, &facts, now));
        }
    }

    /// Puts each reconciled stream's `reconciliation` block into its entry
    /// of `streams`; unreadable state says so in the block.
    async fn add_reconciliation_status(&self, doc: &mut Value) {
        let blocks = match self.reconciliation_status().await {
            Ok(blocks) => blocks,
            Err(e) => {
                tracing::error!(error = %e, "status: reconciliation state unreadable");
                let config = self.config();
                config
                    .streams
                    .values()
                    .filter(|s| s.reconcile.is_some())
                    .map(|s| (s.name.clone(), json!({ "error": "state unreadable" })))
                    .collect()
            }
        };
        if let Some(streams) = doc["streams"].as_array_mut() {
            for s in streams {
                let name = s["name"].as_str().unwrap_or_default().to_owned();
                if let Some(block) = blocks.get(&name) {
                    s["reconciliation"] = block.clone();
                }
            }
        }
    }

    /// The `streams` part of `/v1/status` (with `now` and `storage_ok`).
    pub fn status(&self) -> Value {
        let config = self.config();
        let now = self.clock.now();
        let rfc =
            |t: Option<DateTime<Utc>>| t.map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true));
        let streams: Vec<Value> = self
            .lock_streams()
            .values()
            .filter_map(|w| {
                let row = &w.row;
                let stream = config.streams.get(&row.name)?;
                let eval = self.evaluate_row(&config, stream, row, now);
                let calendar = config.calendar_of(stream);
                let tz = calendar.timezone();
                let local = |t: Option<DateTime<Utc>>| t.map(|t| crate::status::format::local_rfc3339(t, tz));
                let in_hours = calendar.in_business_hours(now);
                let paused_until = if in_hours {
                    None
                } else {
                    calendar.next_window(now).map(|w| w.start)
                };
                let firing = row.alert_state == AlertState::Firing;
                let firing_since = row.firing_since.filter(|_| firing);
                let fires_in = eval
                    .fires_at
                    .filter(|_| !firing)
                    .map(|t| (t - now).num_seconds().max(0));
                let mut doc = json!({
                    "name": row.name,
                    "calendar": stream.calendar,
                    "last_event_at": rfc(row.last_arrival_at),
                    "last_event_type": row.last_event_type,
                    "last_event_id": row.last_event_id,
                    "newest_event_time": rfc(row.newest_event_at),
                    "watching_since": rfc(Some(row.watch_started_at)),
                    "business_silence_seconds": eval.business_silence.num_seconds(),
                    "threshold_seconds": self.effective_of(stream).threshold.num_seconds(),
                    "max_silence_seconds": stream.policy.max_silence.map(|d| d.num_seconds()),
                    "fires_at": rfc(eval.fires_at),
                    "reason": eval.reason.map(|r| r.as_str()),
                    "state": if row.alert_state == AlertState::Firing { "firing" } else { "ok" },
                    "firing_since": rfc(row.firing_since.filter(|_| row.alert_state == AlertState::Firing)),
                });
                // Human facts beside the machine ones (issue #16).
                let extra = json!({
                    "timezone": tz.name(),
                    "fires_in_seconds": fires_in,
                    "in_business_hours": in_hours,
                    "clock_paused_until": rfc(paused_until),
                    "clock_paused_until_local": local(paused_until),
                    "last_event_at_local": local(row.last_arrival_at),
                    "newest_event_time_local": local(row.newest_event_at),
                    "watching_since_local": local(Some(row.watch_started_at)),
                    "fires_at_local": local(eval.fires_at),
                    "firing_since_local": local(firing_since),
                });
                if let (Some(doc), Value::Object(extra)) = (doc.as_object_mut(), extra) {
                    doc.extend(extra);
                }
                // Issue #18: the effective threshold and where it came from.
                let threshold = super::adaptive::threshold_json(&self.effective_of(stream));
                if let (Some(doc), Value::Object(threshold)) = (doc.as_object_mut(), threshold) {
                    doc.extend(threshold);
                }
                Some(doc)
            })
            .collect();
        let (evaluated, attempted) = {
            let schedule = self.lock_schedule();
            (schedule.evaluated, schedule.attempted)
        };
        json!({
            "now": rfc(Some(now)),
            "storage_ok": self.storage_ok(),
            // The silence timer's last recorded pass, and when it looks
            // again: with `next_evaluation_at` after `now` (or null), every
            // alert due by `now` has been decided.
            "evaluated_at": rfc(evaluated.map(|e| e.0)),
            "next_evaluation_at": rfc(evaluated.and_then(|e| e.1)),
            // The timer's last finished pass, recorded or not: later than
            // `evaluated_at` when the store refused it (an outage), so
            // "nothing fired" can be told from "could not look".
            "evaluation_attempted_at": rfc(attempted),
            // The watchdog's last finished check (storage, emergency page,
            // heartbeat ping): everything due by it has been decided.
            "watchdog_checked_at": rfc(self.watchdog().checked_at()),
            "streams": streams,
        })
    }

    /// The `audit` section of `/v1/status`: chain head and last checkpoint.
    pub async fn audit_status(&self) -> Value {
        let enabled = self.config().audit.enabled;
        match self.store.audit_summary().await {
            Ok(a) => json!({
                "enabled": enabled,
                "head_seq": a.head_seq,
                "head_hash": a.head_hash,
                "last_checkpoint": a.last_checkpoint.map(|c| json!({
                    "seq": c.seq,
                    "at": c.at.to_rfc3339_opts(SecondsFormat::Millis, true),
                    "signed": c.signed,
                })),
            }),
            Err(e) => {
                tracing::error!(error = %e, "status: audit state unreadable");
                json!({ "enabled": enabled, "error": "audit state unreadable" })
            }
        }
    }

    /// Timelines of the first `TIMELINE_STREAMS` streams (by name), ending now.
    pub async fn status_timelines(&self) -> BTreeMap<String, Timeline> {
        let config = self.config();
        let now = self.clock.now();
        let rows: Vec<_> = self
            .stream_rows()
            .into_iter()
            .filter(|r| config.streams.contains_key(&r.name))
            .take(TIMELINE_STREAMS)
            .collect();
        let names = rows.iter().map(|r| r.name.clone()).collect();
        let since = now - TimeDelta::days(timeline::DAYS);
        let arrivals = match self
            .store
            .recent_arrivals(names, since, TIMELINE_ARRIVALS)
            .await
        {
            Ok(a) => a.into_iter().collect::<BTreeMap<_, _>>(),
            Err(e) => {
                tracing::error!(error = %e, "status page: arrivals unreadable");
                BTreeMap::new()
            }
        };
        rows.iter()
            .filter_map(|row| {
                let stream = config.streams.get(&row.name)?;
                let list = arrivals.get(&row.name).map(Vec::as_slice).unwrap_or(&[]);
                let times = list
                    .iter()
                    .filter(|a| stream.event_filter.feeds_clock(&a.event_type))
                    .map(|a| a.at)
                    .collect();
                let truncated = list.len() as i64 >= TIMELINE_ARRIVALS;
                let t = timeline::build(
                    &config.calendar_of(stream),
                    &stream.policy,
                    row.watch_started_at,
                    times,
                    truncated,
                    now,
                );
                Some((row.name.clone(), t))
            })
            .collect()
    }
}
