//! The sidecar's shared state and its operations: ingest, evaluation of
//! every stream's silence, status. HTTP handlers and the timer task call
//! into this; it calls the pure domain and the store.

use super::adaptive::{window_start, Learner};
use super::core::Core;
use super::crosscheck_heal::Ingest;
use super::delivery::Delivery;
use super::feed::Mirror;
use super::replicas::Lead;
use super::silences::Operator;
use super::svix::Svix;
use super::timer::Evaluate;
use super::timer::{Due, Schedule};
use super::watchdog::Watchdog;
use crate::clock::Clock;
use crate::config::{Config, StreamConfig};
use crate::domain::adaptive::{business_gap_ms, describe_learned_fire, Effective};
use crate::domain::alert::{next_transition, Transition as DomainTransition};
use crate::domain::duration::format_duration;
use crate::domain::silence::{evaluate, Evaluation, SilencePolicy};
use crate::http::api::Created;
use crate::store::gaps::GapCount;
use crate::store::subscriptions::SubscriptionUpdate;
use crate::store::{AlertState, EventOutcome, NewEvent, Store, StoreError, StreamRow, Transition};
use crate::store::{TemplatedOutcome, TransitionOutcome};
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The running sidecar: the shared `Core` (reached through `Deref`), the
/// stream read cache and the timer's schedule, and one type per concern
/// (`Svix`, `Operator`, `Delivery`). No field is public: routes reach it
/// through `http::Api`; the background tasks never hold it, only the
/// capabilities of it they use (`timer::Evaluate`, `feed::Mirror`,
/// `adaptive::Learner`, `crosscheck_heal::Ingest`, implemented below).
pub struct App {
    core: Arc<Core>,
    /// Read cache of the store's stream rows. The store is the truth and the
    /// only one that decides: rows come from it (at start, and as committed
    /// by each delivery, `Store::record_delivery_rows`), and a fire is
    /// recorded only if the store still agrees (`record_transition_if_silent`).
    /// The cache saves a database round trip on every evaluation and scrape.
    streams: Mutex<BTreeMap<String, Watched>>,
    /// Which streams the timer evaluates next, ordered by `fires_at`.
    schedule: Mutex<Schedule>,
    /// Serializes changes of the stream set (templated create/delete,
    /// reload), which each swap in a new config.
    stream_set: tokio::sync::Mutex<()>,
    /// This replica among the others on the database; set once by
    /// `service::start` (absent in an `App` built without it: one process).
    replicas: std::sync::OnceLock<Arc<super::replicas::Replicas>>,
    /// What was learned of adaptive streams' gaps ("quieter than usual").
    learning: super::adaptive::Learning,
    svix: Arc<Svix>,
    operator: Arc<Operator>,
    delivery: Delivery,
    watchdog: Arc<Watchdog>,
}

/// `app.store`, `app.config()`, `app.note_storage(…)`: the shared handles.
impl std::ops::Deref for App {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl App {
    /// Loads persisted state and starts watching every configured stream
    /// (a stream seen for the first time starts its clock now).
    pub async fn new(
        config: Config,
        store: Store,
        clock: Arc<dyn Clock>,
    ) -> Result<App, StoreError> {
        // Templated streams are added before the config is shared, so it is
        // never deep-copied (a copy at 10,000 streams is megabytes, made
        // while the parse's garbage is still scattered over the heap).
        let config = with_templated(&store, config).await?;
        let core = Arc::new(Core::new(config, store, clock));
        let app = App {
            streams: Mutex::new(BTreeMap::new()),
            schedule: Mutex::new(Schedule::default()),
            stream_set: tokio::sync::Mutex::new(()),
            replicas: std::sync::OnceLock::new(),
            learning: super::adaptive::Learning::default(),
            svix: Arc::new(Svix::new(Arc::clone(&core))),
            operator: Arc::new(Operator::new(Arc::clone(&core))),
            delivery: Delivery::new(Arc::clone(&core)),
            watchdog: Arc::new(Watchdog::new(Arc::clone(&core))),
            core,
        };
        app.watch_configured().await?;
        app.load_learned().await?;
        app.metrics.reload_successful.set(1);
        app.metrics
            .reload_timestamp
            .set(app.clock.now().timestamp() as f64);
        Ok(app)
    }

    /// The shared handles (also reached through `Deref`).
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// The shared handles, for a task's own handle.
    pub(super) fn core_handle(&self) -> Arc<Core> {
        Arc::clone(&self.core)
    }

    pub fn svix(&self) -> &Arc<Svix> {
        &self.svix
    }

    pub fn operator(&self) -> &Arc<Operator> {
        &self.operator
    }

    pub fn delivery(&self) -> &Delivery {
        &self.delivery
    }

    pub fn watchdog(&self) -> &Arc<Watchdog> {
        &self.watchdog
    }

    pub fn learning(&self) -> &super::adaptive::Learning {
        &self.learning
    }

    /// The policy the timer applies to `stream`: the configured one with
    /// the effective (possibly learned) threshold.
    fn policy_of(&self, stream: &StreamConfig) -> (SilencePolicy, Effective) {
        let effective = self.effective_of(stream);
        let policy = SilencePolicy {
            threshold: effective.threshold,
            ..stream.policy
        };
        (policy, effective)
    }

    /// Streams whose effective threshold moved are evaluated again.
    pub(super) fn thresholds_changed(&self, streams: &[String]) {
        if streams.is_empty() {
            return;
        }
        let mut schedule = self.lock_schedule();
        for name in streams {
            schedule.mark_moved(name);
        }
        drop(schedule);
        self.replan.notify_one();
    }

    /// Swaps in a validated config. Clocks of streams that still exist are
    /// kept (they live in the store, keyed by name).
    pub async fn reload(&self, config: Config) -> Result<(), StoreError> {
        let _set = self.stream_set.lock().await;
        let config = with_templated(&self.store, config).await?;
        self.set_config(config);
        self.watch_configured().await?;
        self.load_learned().await?;
        self.lock_schedule().request_full();
        self.metrics.reload_successful.set(1);
        self.metrics
            .reload_timestamp
            .set(self.clock.now().timestamp() as f64);
        self.replan.notify_one();
        self.reconcile_changed.notify_one();
        // The relay worker looks again under the new config: a stream that
        // gained or lost `[forward]` changes how it waits.
        self.forward_wake.notify_one();
        Ok(())
    }

    /// Creates the templated stream `name` (persisted, so a restart keeps
    /// it) and starts its clock now. Idempotent.
    pub async fn create_stream(&self, name: &str) -> Result<Created, StoreError> {
        let _set = self.stream_set.lock().await;
        let config = self.config();
        if config.streams.contains_key(name) {
            return Ok(Created::Exists);
        }
        let Some(stream) = config.templates.stream(name) else {
            return Ok(Created::NoTemplate);
        };
        let result = self
            .store
            .add_templated_stream(
                name.to_string(),
                self.clock.now(),
                config.templates.max_streams,
            )
            .await;
        self.note_storage(&result);
        let (row, created) = match result? {
            TemplatedOutcome::Full => {
                self.metrics.templated_streams_refused.inc();
                return Ok(Created::Full);
            }
            TemplatedOutcome::Created(row) => (row, Created::New),
            TemplatedOutcome::Exists(row) => (row, Created::Exists),
        };
        // Copy-on-write: readers keep the config they hold. The copy costs
        // O(streams), paid once per new stream, never per event.
        let mut next = Arc::unwrap_or_clone(config);
        next.streams.insert(name.to_string(), stream);
        self.set_config(next);
        self.lock_streams()
            .insert(name.to_string(), Watched::new(row));
        self.metrics.declare_stream(name);
        self.lock_schedule().mark_moved(name);
        self.replan.notify_one();
        tracing::info!(stream = %name, "templated stream created");
        Ok(created)
    }

    /// Removes the templated stream `name` (`action.stream`) unless relay
    /// events of it are undelivered and `force` is not given, decided in
    /// the store's transaction (`store::forward_admin::remove_stream`). Its
    /// series leave `/metrics` and the timer forgets it.
    pub async fn delete_stream(
        &self,
        action: crate::store::forward_admin::OperatorAction,
        force: bool,
    ) -> Result<crate::store::forward_admin::StreamRemoval, StoreError> {
        use crate::store::forward_admin::StreamRemoval;
        let name = action.stream.clone();
        let name = name.as_str();
        let _set = self.stream_set.lock().await;
        let config = self.config();
        if config.templates.stream(name).is_none() {
            return Ok(StreamRemoval::NotFound);
        }
        let result = self
            .store
            .remove_templated_stream_settled(action, force)
            .await;
        self.note_storage(&result);
        let removal = result?;
        if !matches!(removal, StreamRemoval::Removed { .. }) {
            return Ok(removal);
        }
        let mut next = Arc::unwrap_or_clone(config);
        next.streams.remove(name);
        self.set_config(next);
        self.lock_streams().remove(name);
        self.lock_schedule().set(name, None);
        self.metrics.forget_stream(name);
        tracing::info!(stream = %name, "templated stream deleted");
        Ok(removal)
    }

    async fn watch_configured(&self) -> Result<(), StoreError> {
        let config = self.config();
        let names: Vec<String> = config.streams.keys().cloned().collect();
        let rows = self
            .store
            .watch_streams(names.clone(), self.clock.now())
            .await?;
        self.operator.sync_maintenance().await?;
        let mut cache = self.lock_streams();
        // Evaluations cached under the old config may not hold under the
        // new one (calendar, threshold); the full pass that follows refills.
        cache.clear();
        for row in rows {
            cache.insert(row.name.clone(), Watched::new(row));
        }
        drop(cache);
        let calendars: Vec<&str> = config.calendars.keys().map(String::as_str).collect();
        let notifiers: Vec<&str> = config.notifiers.keys().map(String::as_str).collect();
        self.metrics.declare(&calendars, &notifiers);
        self.metrics.declare_watchdog(&notifiers);
        let streams: Vec<&str> = names.iter().map(String::as_str).collect();
        self.metrics.declare_streams(&streams);
        self.declare_access_series(&config, &streams);
        let sources: Vec<&str> = config.svix.keys().map(String::as_str).collect();
        self.metrics.declare_svix(&sources);
        Ok(())
    }

    pub(super) fn lock_streams(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Watched>> {
        self.streams.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn lock_schedule(&self) -> std::sync::MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of every watched stream's row (for the status page).
    pub fn stream_rows(&self) -> Vec<StreamRow> {
        self.lock_streams()
            .values()
            .map(|w| w.row.clone())
            .collect()
    }

    /// The watched streams' names (a scrape needs only these, not the rows).
    pub fn stream_names(&self) -> Vec<String> {
        self.lock_streams().keys().cloned().collect()
    }

    /// Durably records events, then moves the in-memory clock and wakes the
    /// timer. Returns only after the commit.
    pub async fn ingest(&self, events: Vec<NewEvent>) -> Result<Vec<EventOutcome>, StoreError> {
        self.ingest_delivery(events, None).await
    }

    /// `ingest`, plus the provider subscription facts the same delivery carried, committed
    /// together.
    pub async fn ingest_delivery(
        &self,
        mut events: Vec<NewEvent>,
        update: Option<SubscriptionUpdate>,
    ) -> Result<Vec<EventOutcome>, StoreError> {
        let has_update = update.is_some();
        let forwards = events.iter().any(|e| e.forward.is_some());
        // Only what the lag gauge needs is kept of the events (per event:
        // stream and arrival minus event time, when it feeds the clock and
        // carries a time); how the clock moved is the store's answer, the
        // committed rows.
        let lags: Vec<Option<(String, i64)>> = events
            .iter()
            .map(|e| {
                let lag = (e.received_at - e.event_time?).num_milliseconds();
                e.feeds_clock.then(|| (e.stream.clone(), lag))
            })
            .collect();
        let grants = self.mark_access(&mut events);
        // `[store] encryption_key`: subject ids are stored veiled
        // (`store::veil`), so every row and page text the store derives
        // from them carries the token; readers reveal it.
        crate::store::revocations::veil_subjects(self.config().store.sealer.veil(), &mut events);
        let result = self
            .store
            .record_delivery_rows(events, update, self.clock.now())
            .await;
        if has_update && result.is_ok() {
            self.subscriptions_changed.notify_one();
        }
        if forwards && result.is_ok() {
            self.forward_wake.notify_one();
        }
        self.note_storage(&result);
        let (outcomes, rows) = result?;
        self.count_stale_grants(grants, &outcomes).await;
        let mut moved = Vec::new();
        let mut gaps = Vec::new();
        let mut cache = self.lock_streams();
        for stored in &rows {
            if let Some(watched) = cache.get_mut(&stored.name) {
                // The gap this process saw: from the arrival it knew to the
                // one it just committed (measured after the lock is released).
                if let (Some(prev), Some(next)) =
                    (watched.row.last_arrival_at, stored.last_arrival_at)
                {
                    gaps.push((stored.name.as_str(), prev, next));
                }
                catch_up(&mut watched.row, stored);
                let lag = lags
                    .iter()
                    .zip(&outcomes)
                    .rev()
                    .filter(|(_, o)| **o == EventOutcome::Accepted)
                    .find_map(|(l, _)| l.as_ref().filter(|(s, _)| *s == stored.name));
                if let Some((_, lag)) = lag {
                    watched.lag_ms = *lag;
                }
                moved.push(stored.name.as_str());
            }
        }
        drop(cache);
        self.learn_gaps(&gaps);
        if !moved.is_empty() {
            let mut schedule = self.lock_schedule();
            for stream in moved {
                schedule.mark_moved(stream);
            }
            drop(schedule);
            self.replan.notify_one();
        }
        Ok(outcomes)
    }

    /// Notes each adaptive stream's gap in its business time, under the UTC
    /// day of the newer arrival.
    fn learn_gaps(&self, gaps: &[(&str, DateTime<Utc>, DateTime<Utc>)]) {
        if gaps.is_empty() {
            return;
        }
        let config = self.config();
        for (name, prev, next) in gaps {
            let Some(stream) = config.streams.get(*name).filter(|s| s.adaptive.is_some()) else {
                continue;
            };
            let calendar = config.calendar_of(stream);
            if let Some(gap) = business_gap_ms(&calendar, *prev, *next) {
                self.learning.record(name, next.date_naive(), gap);
            }
        }
    }

    /// Where a stream's silence starts: its last arrival, or when watching
    /// began if nothing ever arrived (so a never-wired webhook still fires).
    fn silent_since(row: &StreamRow) -> DateTime<Utc> {
        row.last_arrival_at.unwrap_or(row.watch_started_at)
    }

    pub(super) fn evaluate_row(
        &self,
        config: &Config,
        stream: &StreamConfig,
        row: &StreamRow,
        now: DateTime<Utc>,
    ) -> Evaluation {
        let (policy, _) = self.policy_of(stream);
        evaluate(
            &config.calendar_of(stream),
            &policy,
            Self::silent_since(row),
            now,
        )
    }

    /// Evaluates every stream, persists any alert transition (with its
    /// pages, in one transaction), and returns the next instant at which a
    /// stream that is quiet now would fire.
    pub async fn evaluate_all(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        let plan = self.plan_transitions();
        self.record_planned(plan).await
    }

    /// What the timer runs on each wake-up: like [`App::evaluate_all`], but
    /// evaluates only the streams that are due or heard an event since their
    /// last evaluation (every stream after start, reload or a failed write).
    pub async fn evaluate_due(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        let now = self.clock.now();
        let due = self.lock_schedule().take_due(now);
        let plan = match due {
            Due::Every => self.plan(now, None),
            Due::Only(streams) => self.plan(now, Some(streams)),
        };
        self.record_planned(plan).await
    }

    /// The evaluation half of [`App::evaluate_all`]: decides every stream's
    /// transition from the in-memory rows at the clock's `now`, writing
    /// nothing. Events may commit before the plan is recorded; recording
    /// re-checks each fire against the store (see `record_planned`).
    pub fn plan_transitions(&self) -> Plan {
        self.plan(self.clock.now(), None)
    }

    /// Plans `only` these streams, or every stream.
    fn plan(&self, now: DateTime<Utc>, only: Option<Vec<String>>) -> Plan {
        let config = self.config();
        let mut plan = Plan {
            now,
            full: only.is_none(),
            transitions: Vec::new(),
            evaluated: Vec::new(),
            gone: Vec::new(),
        };
        // Evaluated on a copy, so ingest never waits on calendar maths.
        let rows: Vec<StreamRow> = {
            let cache = self.lock_streams();
            match &only {
                None => cache.values().map(|w| w.row.clone()).collect(),
                Some(names) => names
                    .iter()
                    .filter_map(|n| match cache.get(n) {
                        Some(w) => Some(w.row.clone()),
                        None => {
                            plan.gone.push(n.clone());
                            None
                        }
                    })
                    .collect(),
            }
        };
        for row in rows {
            let Some(stream) = config.streams.get(&row.name) else {
                plan.gone.push(row.name);
                continue;
            };
            let eval = self.evaluate_row(&config, stream, &row, now);
            let transition = next_transition(row.alert_state.status(), &eval, now);
            if let Some(transition) = transition {
                plan.transitions.push(Planned {
                    stream: row.name.clone(),
                    eval,
                    transition,
                });
            }
            plan.evaluated.push((row.name, eval));
        }
        plan
    }

    /// The recording half of [`App::evaluate_all`]. A fire whose stream
    /// heard an event after the plan was made is withdrawn by the store
    /// (nothing is written, nobody is paged); the stream's row is brought up
    /// to date from the store and the returned wake-up is "now", so the
    /// next pass evaluates it again from the newer arrival.
    pub async fn record_planned(&self, plan: Plan) -> Result<Option<DateTime<Utc>>, StoreError> {
        let config = self.config();
        let mut stale = Vec::new();
        for planned in &plan.transitions {
            // A reload between planning and recording may have dropped it.
            let Some(stream) = config.streams.get(&planned.stream) else {
                continue;
            };
            match self.record(stream, &planned.eval, planned.transition).await {
                Ok(true) => {}
                Ok(false) => stale.push(planned.stream.as_str()),
                Err(e) => {
                    // Which streams were recorded is unknown: start over.
                    let mut schedule = self.lock_schedule();
                    schedule.request_full();
                    drop(schedule);
                    self.attempted(plan.now);
                    return Err(e);
                }
            }
        }
        {
            let mut cache = self.lock_streams();
            for (name, eval) in &plan.evaluated {
                if let Some(w) = cache.get_mut(name) {
                    w.remember(eval, plan.now);
                }
            }
        }
        let mut schedule = self.lock_schedule();
        if plan.full {
            schedule.clear_queue();
        }
        let cache = self.lock_streams();
        for (name, eval) in &plan.evaluated {
            // A quiet stream is due when it would fire; a firing one only
            // changes on an event, which marks it moved. One deleted since
            // the plan was made is not queued again.
            let at = eval.fires_at.filter(|_| !eval.firing);
            schedule.set(name, at.filter(|_| cache.contains_key(name)));
        }
        drop(cache);
        for name in &plan.gone {
            schedule.set(name, None);
        }
        for name in &stale {
            schedule.mark_moved(name);
        }
        let mut next = schedule.next();
        if !stale.is_empty() {
            next = earliest(next, Some(plan.now));
        }
        schedule.evaluated = Some((plan.now, next));
        drop(schedule);
        self.attempted(plan.now);
        Ok(next)
    }

    /// Publishes that a pass at `now` finished, recorded or not (status
    /// `evaluation_attempted_at` and its gauge). Only forward: a pass
    /// planned earlier that finishes later must not move the signal back.
    fn attempted(&self, now: DateTime<Utc>) {
        let mut schedule = self.lock_schedule();
        if schedule.attempted.is_some_and(|t| t > now) {
            return;
        }
        schedule.attempted = Some(now);
        self.metrics
            .evaluation_attempted
            .set(now.timestamp_millis() as f64 / 1000.0);
    }

    /// Records one transition; false when the store withdrew a stale fire.
    async fn record(
        &self,
        stream: &StreamConfig,
        eval: &Evaluation,
        t: DomainTransition,
    ) -> Result<bool, StoreError> {
        let (to, at) = match t {
            DomainTransition::Fire { at } => (AlertState::Firing, at),
            DomainTransition::Resolve { at } => (AlertState::Ok, at),
        };
        let mut reason = summary(stream, &self.policy_of(stream).1, eval);
        if to == AlertState::Firing {
            reason = self.relay_summary(stream, reason).await;
        }
        let transition = Transition {
            stream: stream.name.clone(),
            to: to.clone(),
            at,
            reason,
            notifiers: stream.notify.clone(),
        };
        let result = self
            .store
            .record_transition_if_silent(transition, eval.silent_since)
            .await;
        self.note_storage(&result);
        if let TransitionOutcome::Stale(stored) = result? {
            if let Some(w) = self.lock_streams().get_mut(&stream.name) {
                catch_up(&mut w.row, &stored);
            }
            tracing::info!(stream = %stream.name, "silence alert not fired: an event arrived while it was being recorded");
            return Ok(false);
        }
        if let Some(w) = self.lock_streams().get_mut(&stream.name) {
            let row = &mut w.row;
            if to == AlertState::Firing {
                row.firing_since = Some(at);
                row.cleared_at = None;
            } else {
                row.cleared_at = Some(at);
            }
            row.alert_state = to.clone();
        }
        let firing = i64::from(to == AlertState::Firing);
        tracing::warn!(stream = %stream.name, state = if firing == 1 { "firing" } else { "resolved" }, at = %at, "silence alert transition");
        self.outbox_wake.notify_one();
        Ok(true)
    }

    /// Brings the per-calendar gauges up to `now` (called on every scrape).
    pub fn refresh_metrics(&self) {
        let config = self.config();
        let now = self.clock.now();
        self.metrics
            .store_queue_depth
            .set(i64::try_from(self.store.queue_depth()).unwrap_or(i64::MAX));
        for c in config.calendars.values() {
            self.metrics
                .in_business_hours
                .with_label_values(&[c.name.as_str()])
                .set(i64::from(c.calendar.in_business_hours(now)));
        }
    }

    /// The whole `/metrics` page: the registry's families, then the
    /// per-stream families rendered from the stream mirror. Per-stream
    /// series are not kept in the registry because each label set there
    /// costs about a kilobyte, and 10,000 streams have 130,000 of them.
    pub fn encode_metrics(&self) -> crate::metrics::Page {
        self.refresh_metrics();
        let config = self.config();
        let now = self.clock.now();
        let mut samples = Vec::new();
        {
            let mut cache = self.lock_streams();
            samples.reserve(cache.len());
            for (name, w) in cache.iter_mut() {
                let Some(stream) = config.streams.get(name) else {
                    continue;
                };
                let silence = w.business_silence(&config, stream, now);
                samples.push(crate::metrics::StreamSample {
                    name: name.clone(),
                    firing: w.row.alert_state == AlertState::Firing,
                    last_event: w.row.last_arrival_at,
                    business_silence: silence,
                    threshold: self.policy_of(stream).0.threshold,
                    fires_at: w.fires_at,
                    lag_ms: w.lag_ms,
                });
            }
        }
        // Only streams with `[adaptive]` learn, so these series are
        // bounded by configuration and go out with the registry's text.
        let usual: Vec<(String, [Option<f64>; 4])> = config
            .streams
            .values()
            .filter(|s| s.adaptive.is_some())
            .filter_map(|s| Some((s.name.clone(), self.learning.of(&s.name)?.usual_seconds)))
            .collect();
        self.metrics.page(samples, &usual)
    }

    pub(super) fn set_replicas(&self, replicas: Arc<super::replicas::Replicas>) {
        let _ = self.replicas.set(replicas);
    }

    /// What the housekeeping tasks ask of the replicas (always leader when
    /// this `App` was built without them).
    pub(super) fn lead(&self) -> Lead {
        Lead::of(self.replicas().cloned())
    }

    pub fn replicas(&self) -> Option<&Arc<super::replicas::Replicas>> {
        self.replicas.get()
    }

    /// Takes in stream rows re-read from the store, which other replicas
    /// may have moved (an arrival, a transition): the mirror follows the
    /// store, and each changed stream is evaluated again.
    pub(super) fn absorb_stored(&self, stored: Vec<StreamRow>) {
        let mut moved = Vec::new();
        {
            let mut cache = self.lock_streams();
            for row in stored {
                let Some(w) = cache.get_mut(&row.name) else {
                    continue;
                };
                let mine = &mut w.row;
                let arrived = row.last_arrival_at > mine.last_arrival_at;
                let flipped =
                    row.alert_state != mine.alert_state || row.firing_since != mine.firing_since;
                if arrived {
                    catch_up(mine, &row);
                }
                if flipped {
                    mine.alert_state = row.alert_state.clone();
                    mine.firing_since = row.firing_since;
                    mine.cleared_at = row.cleared_at;
                }
                if arrived || flipped {
                    moved.push(row.name);
                }
            }
        }
        if !moved.is_empty() {
            let mut schedule = self.lock_schedule();
            for name in &moved {
                schedule.mark_moved(name);
            }
            drop(schedule);
            self.replan.notify_one();
        }
    }
}

/// Transitions decided by [`App::plan_transitions`], not yet recorded.
pub struct Plan {
    /// The clock reading the plan was evaluated at.
    pub now: DateTime<Utc>,
    /// Every stream was evaluated (not only the due ones).
    full: bool,
    transitions: Vec<Planned>,
    /// Each evaluated stream's outcome, for the schedule and the scrape.
    evaluated: Vec<(String, Evaluation)>,
    /// Streams due but no longer watched (deleted, or dropped by a reload).
    gone: Vec<String>,
}

impl Plan {
    /// Streams with a planned transition, and whether each is a fire.
    pub fn transitions(&self) -> Vec<(&str, bool)> {
        self.transitions
            .iter()
            .map(|p| {
                let fire = matches!(p.transition, DomainTransition::Fire { .. });
                (p.stream.as_str(), fire)
            })
            .collect()
    }
}

struct Planned {
    stream: String,
    eval: Evaluation,
    transition: DomainTransition,
}

/// A watched stream: its persisted row plus what evaluation learned, so a
/// scrape does not redo calendar maths from the start of a long silence.
pub(super) struct Watched {
    pub(super) row: StreamRow,
    /// From the last evaluation (None: never, or not evaluated yet).
    fires_at: Option<DateTime<Utc>>,
    /// Business silence accrued from `since` up to `until`.
    accrued: Option<Accrued>,
    /// Arrival minus event time of the latest event that carried one.
    lag_ms: i64,
}

struct Accrued {
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    business: TimeDelta,
}

impl Watched {
    fn new(row: StreamRow) -> Watched {
        Watched {
            row,
            fires_at: None,
            accrued: None,
            lag_ms: 0,
        }
    }

    /// Keeps an evaluation made at `now`.
    fn remember(&mut self, eval: &Evaluation, now: DateTime<Utc>) {
        self.fires_at = eval.fires_at;
        self.accrued = Some(Accrued {
            since: eval.silent_since,
            until: now,
            business: eval.business_silence,
        });
    }

    /// Business silence at `now`: the cached part plus the business time
    /// since it was cached (business time is additive over adjacent spans),
    /// from scratch when the silence restarted or the clock went back.
    fn business_silence(
        &mut self,
        config: &Config,
        stream: &StreamConfig,
        now: DateTime<Utc>,
    ) -> TimeDelta {
        let since = App::silent_since(&self.row);
        let calendar = config.calendar_of(stream);
        let business = match &self.accrued {
            Some(a) if a.since == since && a.until <= now => {
                a.business + calendar.business_time(a.until, now)
            }
            _ => calendar.business_time(since, now),
        };
        self.accrued = Some(Accrued {
            since,
            until: now,
            business,
        });
        business
    }
}

fn earliest(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Brings a cached row's arrival up to a committed one. Forward only:
/// concurrent deliveries may hand their committed rows over out of order,
/// and an older row must not move the cache back. The alert fields are not
/// taken: they change only through `record`, which updates the cache after
/// its own commit.
fn catch_up(row: &mut StreamRow, stored: &StreamRow) {
    // At an equal arrival time the store let the later commit win; the
    // row handed over last is that commit in the usual sequential case.
    if stored.last_arrival_at >= row.last_arrival_at {
        row.last_arrival_at = stored.last_arrival_at;
        row.last_event_type = stored.last_event_type.clone();
        row.last_event_id = stored.last_event_id.clone();
    }
    row.newest_event_at = row.newest_event_at.max(stored.newest_event_at);
}

impl App {
    /// A fire's summary for a relay stream whose clock is the app's 2xx
    /// (`clock = "delivered"`): the silence is the app's, not the
    /// provider's, so it says what hushwatch holds for the app and the
    /// app's last answer (issue #44). Any other stream's summary as is.
    async fn relay_summary(&self, stream: &StreamConfig, summary: String) -> String {
        use crate::config::forward::ForwardClock;
        let delivered = stream
            .forward
            .as_ref()
            .is_some_and(|f| f.clock == ForwardClock::Delivered);
        if !delivered {
            return summary;
        }
        let row = match self.store.forward_status().await {
            Ok(rows) => Some(
                rows.into_iter()
                    .find(|r| r.stream == stream.name)
                    .unwrap_or_default(),
            ),
            Err(e) => {
                tracing::error!(stream = %stream.name, error = %e, "relay state unreadable for a silence page");
                None
            }
        };
        relay_silence_summary(&stream.name, &summary, row.as_ref())
    }
}

/// "the app has not accepted identity events for 6h of business time,
/// while hushwatch holds 8 received from the provider (3 pending, …); the
/// relay's last error: …" from the plain summary ("no identity events for
/// 6h of business time"); `None`: the relay's state could not be read.
fn relay_silence_summary(
    stream: &str,
    summary: &str,
    relay: Option<&crate::domain::forward::ForwardStatus>,
) -> String {
    let plain = format!("no {stream} events");
    let rest = summary.strip_prefix(&plain).unwrap_or(summary);
    let head = format!("the app has not accepted {stream} events{rest}");
    let Some(r) = relay else {
        return format!("{head}; what hushwatch holds for it is unknown (relay state unreadable)");
    };
    let held = r.pending + r.held + r.dead_letters;
    let mut out = if held == 0 {
        format!("{head}, and hushwatch holds none received from the provider for it (the provider is quiet too)")
    } else {
        let mut parts = vec![format!("{} pending", r.pending)];
        if r.held > 0 {
            parts.push(format!("{} held", r.held));
        }
        if r.dead_letters > 0 {
            parts.push(format!("{} dead letters", r.dead_letters));
        }
        format!(
            "{head}, while hushwatch holds {held} received from the provider ({})",
            parts.join(", ")
        )
    };
    if let Some(e) = &r.last_error {
        out.push_str(&format!("; the relay's last error: {e}"));
    }
    out
}

/// One line a person reads in a page: what is silent and for how long,
/// and which rule fired.
fn summary(stream: &StreamConfig, effective: &Effective, eval: &Evaluation) -> String {
    if eval.reason == Some(crate::domain::silence::FireReason::BusinessSilence) {
        // At the fire instant, not when it was noticed (a restart may
        // notice late): the silence the rule fired at.
        if let Some(text) = describe_learned_fire(effective, effective.threshold) {
            return format!("no {} events: {text}", stream.name);
        }
    }
    match eval.reason {
        Some(crate::domain::silence::FireReason::MaxSilence) => format!(
            "no {} events for {} (wall-clock backstop)",
            stream.name,
            format_duration(stream.policy.max_silence.unwrap_or_default())
        ),
        _ => format!(
            "no {} events for {} of business time",
            stream.name,
            format_duration(effective.threshold)
        ),
    }
}

/// `config` plus the persisted templated streams its patterns cover
/// (those no pattern covers any more stay stored but unwatched).
async fn with_templated(store: &Store, mut config: Config) -> Result<Config, StoreError> {
    if config.templates.is_empty() {
        return Ok(config);
    }
    for name in store.templated_streams().await? {
        if config.streams.contains_key(&name) {
            continue;
        }
        if let Some(stream) = config.templates.stream(&name) {
            config.streams.insert(name, stream);
        }
    }
    Ok(config)
}

/// "Quieter than usual" (`service::adaptive`): the learned thresholds
/// this `App` evaluates with.
impl App {
    /// The effective threshold of `stream` and where it came from.
    pub fn effective_of(&self, stream: &crate::config::StreamConfig) -> Effective {
        self.learning()
            .of(&stream.name)
            .map_or(Effective::configured(stream.policy.threshold), |l| {
                l.effective
            })
    }

    /// Loads the persisted 28-day window (start, reload).
    pub(super) async fn load_learned(&self) -> Result<(), StoreError> {
        let config = self.config();
        if !config.streams.values().any(|s| s.adaptive.is_some()) {
            self.learning()
                .load(&config, Vec::new(), self.clock.now().date_naive());
            return Ok(());
        }
        let today = self.clock.now().date_naive();
        let stored = self.store.gap_counts(window_start(today)).await?;
        self.learning().load(&config, stored, today);
        Ok(())
    }

    /// Writes the pending gaps (additive) and recomputes what they touch;
    /// the timer re-plans the streams whose threshold moved.
    pub async fn flush_learned(&self) -> Result<(), StoreError> {
        let _one = self.learning().flushing.lock().await;
        let pending = self.learning().take_pending();
        let deltas: Vec<GapCount> = pending
            .iter()
            .flat_map(|((stream, day), sketch)| {
                sketch.to_pairs().into_iter().map(|(bucket, n)| GapCount {
                    stream: stream.clone(),
                    day: *day,
                    bucket,
                    count: i64::try_from(n).unwrap_or(i64::MAX),
                })
            })
            .collect();
        if deltas.is_empty() {
            // Nothing learned: no transaction.
        } else if let Err(e) = self.store.add_gap_counts(deltas).await {
            self.learning().restore(pending);
            return Err(e);
        }
        let config = self.config();
        let changed = self
            .learning()
            .absorb(&config, pending, self.clock.now().date_naive());
        self.thresholds_changed(&changed);
        Ok(())
    }
}

/// The capabilities `App` lends the tasks (`service::start` hands each
/// task a handle with only what it needs; these parts are the stream
/// mirror's own).
#[async_trait::async_trait]
impl Evaluate for App {
    async fn evaluate_due(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        App::evaluate_due(self).await
    }
}

impl Mirror for App {
    fn absorb_stored(&self, rows: Vec<StreamRow>) {
        App::absorb_stored(self, rows)
    }

    fn stream_rows(&self) -> Vec<StreamRow> {
        App::stream_rows(self)
    }
}

#[async_trait::async_trait]
impl Learner for App {
    async fn flush_learned(&self) -> Result<(), StoreError> {
        App::flush_learned(self).await
    }
}

#[async_trait::async_trait]
impl Ingest for App {
    async fn ingest(&self, events: Vec<NewEvent>) -> Result<Vec<EventOutcome>, StoreError> {
        App::ingest(self, events).await
    }
}

#[cfg(test)]
mod relay_summary_tests {
    use super::relay_silence_summary;
    use crate::domain::forward::ForwardStatus;

    #[test]
    fn a_delivered_clock_silence_names_the_app_what_waits_and_its_last_error() {
        let r = ForwardStatus {
            pending: 7,
            dead_letters: 1,
            last_error: Some("http://app:3000 answered HTTP 400".into()),
            ..ForwardStatus::default()
        };
        let text = relay_silence_summary(
            "identity",
            "no identity events for 1m of business time",
            Some(&r),
        );
        assert_eq!(
            text,
            "the app has not accepted identity events for 1m of business time, while hushwatch \
             holds 8 received from the provider (7 pending, 1 dead letters); the relay's last \
             error: http://app:3000 answered HTTP 400"
        );
        assert!(!text.contains("identity provider"));
        let quiet = relay_silence_summary(
            "identity",
            "no identity events for 1m of business time",
            Some(&ForwardStatus::default()),
        );
        assert!(
            quiet.ends_with(
                "holds none received from the provider for it (the provider is quiet too)"
            ),
            "{quiet}"
        );
        let unknown = relay_silence_summary("identity", "no identity events for 1m", None);
        assert!(unknown.contains("relay state unreadable"), "{unknown}");
    }
}
