//! "Quieter than usual" (issue #18): what this process learned of each
//! adaptive stream's gaps between arrivals, and the effective threshold
//! the timer uses.
//!
//! Only the process that accepted an event records its gap (new arrival
//! minus the previous one in the cache, in the stream's business time), so
//! the hot ingest path stays one store call. Gaps accumulate in memory and
//! are flushed every minute (and at shutdown) as an additive upsert of
//! per-day bucket counts: a crash loses at most a minute of gaps. The
//! effective thresholds are recomputed only when the sketch changes (load,
//! flush, a day leaving the 28-day window), never per scrape or per event.

use super::core::Core;
use super::replicas::Lead;
use crate::config::Config;
use crate::domain::adaptive::{
    days_known, effective_threshold, Effective, EXPORTED_QUANTILES, WINDOW_DAYS,
};
use crate::domain::gap_sketch::GapSketch;
use crate::store::gaps::GapCount;
use crate::store::StoreError;
use chrono::{NaiveDate, TimeDelta};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::watch;

/// How often learned gaps are written to the store.
pub const FLUSH_EVERY: TimeDelta = TimeDelta::minutes(1);

/// What one stream learned, for `/v1/status`, `explain` and `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamLearning {
    pub effective: Effective,
    /// The exported quantiles (`EXPORTED_QUANTILES`), in seconds; `None`
    /// while no gap is known.
    pub usual_seconds: [Option<f64>; 4],
}

/// Three locks so that the heavy part (merging 28 days per stream, about
/// 0.3 ms each: `benches/gap_sketch.rs`) never holds up ingest, which only
/// touches `pending`, nor evaluation and scrapes, which only read
/// `learned`.
#[derive(Default)]
pub struct Learning {
    /// Gaps recorded since the last flush, per (stream, UTC day).
    pending: Mutex<BTreeMap<(String, NaiveDate), GapSketch>>,
    /// Only the flush and the load take it.
    window: Mutex<Window>,
    /// Per adaptive stream, from the last recompute.
    learned: RwLock<HashMap<String, StreamLearning>>,
    /// One flush at a time: a flush that returns has every gap recorded
    /// before it started in the window (none still in another's hands).
    pub(super) flushing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Window {
    /// Per adaptive stream and UTC day: the stored counts (as loaded) plus
    /// what this process flushed since.
    days: HashMap<String, BTreeMap<NaiveDate, GapSketch>>,
    /// The day the window was last rolled to.
    today: Option<NaiveDate>,
}

/// The first day the window keeps on `today`.
pub fn window_start(today: NaiveDate) -> NaiveDate {
    today - TimeDelta::days(WINDOW_DAYS - 1)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Learning {
    /// Notes one gap (business milliseconds) of `stream`, arrived on `day`.
    pub fn record(&self, stream: &str, day: NaiveDate, gap_ms: u64) {
        lock(&self.pending)
            .entry((stream.to_string(), day))
            .or_default()
            .add(gap_ms);
    }

    /// This stream's learned state; `None` without `[adaptive]`.
    pub fn of(&self, stream: &str) -> Option<StreamLearning> {
        self.learned
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(stream)
            .copied()
    }

    /// Replaces the window with what the store holds (start, reload) and
    /// recomputes every stream; unflushed gaps are kept.
    pub fn load(&self, config: &Config, stored: Vec<GapCount>, today: NaiveDate) {
        let mut window = lock(&self.window);
        window.days.clear();
        for c in stored {
            let day = window
                .days
                .entry(c.stream)
                .or_default()
                .entry(c.day)
                .or_default();
            day.merge(&GapSketch::from_pairs(&[(
                c.bucket,
                u64::try_from(c.count).unwrap_or(0),
            )]));
        }
        window.today = None;
        let updates = window.recompute(config, today, None, &HashSet::new());
        self.apply(config, updates, true);
    }

    /// Takes the pending gaps as store deltas (put back with `restore` if
    /// the write fails).
    pub(super) fn take_pending(&self) -> BTreeMap<(String, NaiveDate), GapSketch> {
        std::mem::take(&mut *lock(&self.pending))
    }

    pub(super) fn restore(&self, taken: BTreeMap<(String, NaiveDate), GapSketch>) {
        let mut pending = lock(&self.pending);
        for (key, sketch) in taken {
            pending.entry(key).or_default().merge(&sketch);
        }
    }

    /// After a successful flush: the written gaps join the window, and the
    /// streams they touch (every stream on a new day) are recomputed.
    /// Returns the streams whose effective threshold changed.
    pub(super) fn absorb(
        &self,
        config: &Config,
        written: BTreeMap<(String, NaiveDate), GapSketch>,
        today: NaiveDate,
    ) -> Vec<String> {
        let mut window = lock(&self.window);
        let mut touched = BTreeSet::new();
        for ((stream, day), sketch) in written {
            window
                .days
                .entry(stream.clone())
                .or_default()
                .entry(day)
                .or_default()
                .merge(&sketch);
            touched.insert(stream);
        }
        let known: HashSet<String> = self
            .learned
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        let updates = window.recompute(config, today, Some(touched), &known);
        drop(window);
        self.apply(config, updates, false)
    }

    /// Swaps the recomputed streams in (a short write lock); streams that
    /// are gone or lost `[adaptive]` are dropped. Returns those whose
    /// effective threshold changed.
    fn apply(
        &self,
        config: &Config,
        updates: Vec<(String, StreamLearning)>,
        replace: bool,
    ) -> Vec<String> {
        let mut learned = self.learned.write().unwrap_or_else(|p| p.into_inner());
        if replace {
            learned.clear();
        }
        learned.retain(|name, _| {
            config
                .streams
                .get(name)
                .is_some_and(|s| s.adaptive.is_some())
        });
        let mut changed = Vec::new();
        for (name, next) in updates {
            let before = learned.insert(name.clone(), next).map(|l| l.effective);
            if before != Some(next.effective) {
                changed.push(name);
            }
        }
        changed
    }
}

impl Window {
    /// Rolls the window to `today` and recomputes `only` these streams plus
    /// those not `known` yet (every adaptive stream when `None` or when the
    /// day changed).
    fn recompute(
        &mut self,
        config: &Config,
        today: NaiveDate,
        only: Option<BTreeSet<String>>,
        known: &HashSet<String>,
    ) -> Vec<(String, StreamLearning)> {
        let start = window_start(today);
        let new_day = self.today != Some(today);
        self.today = Some(today);
        if new_day {
            for days in self.days.values_mut() {
                days.retain(|d, _| *d >= start);
            }
            self.days.retain(|_, days| !days.is_empty());
        }
        let only = only.filter(|_| !new_day);
        let mut updates = Vec::new();
        for (name, stream) in &config.streams {
            let Some(policy) = &stream.adaptive else {
                continue;
            };
            if only.as_ref().is_some_and(|o| !o.contains(name)) && known.contains(name) {
                continue;
            }
            let mut sketch = GapSketch::new();
            let mut first = None;
            if let Some(days) = self.days.get(name) {
                for (day, s) in days {
                    first = first.or(Some(*day));
                    sketch.merge(s);
                }
            }
            let effective = effective_threshold(
                stream.policy.threshold,
                Some(policy),
                &sketch,
                days_known(first, today),
            );
            let usual_seconds =
                EXPORTED_QUANTILES.map(|(_, q)| sketch.quantile(q).map(|ms| ms / 1e3));
            updates.push((
                name.clone(),
                StreamLearning {
                    effective,
                    usual_seconds,
                },
            ));
        }
        updates
    }
}

/// The `/v1/status` and `explain` facts about a threshold: the effective
/// one, the configured one, and where the effective one came from.
pub fn threshold_json(effective: &Effective) -> serde_json::Value {
    use crate::domain::adaptive::Source;
    let learned = match effective.source {
        Source::Configured => serde_json::Value::Null,
        Source::Learned { policy, learned } => serde_json::json!({
            "quantile": policy.quantile,
            "factor": policy.factor,
            "min_seconds": policy.min.num_seconds(),
            "usual_gap_seconds": learned.usual.num_milliseconds() as f64 / 1e3,
            "gaps": learned.gaps,
            "days": learned.days,
        }),
    };
    serde_json::json!({
        "effective_threshold_seconds": effective.threshold.num_seconds(),
        "configured_threshold_seconds": effective.configured.num_seconds(),
        "threshold_source": effective.source_name(),
        "learned": learned,
    })
}

/// What the learning task asks of the streams (`App`, which owns the
/// schedule the learned thresholds move): write what was learned and
/// re-plan the streams it changed.
#[async_trait::async_trait]
pub trait Learner: Send + Sync {
    async fn flush_learned(&self) -> Result<(), StoreError>;
}

/// Flushes every `FLUSH_EVERY` and once more at shutdown; the leader also
/// drops days that left the window.
pub async fn run(
    core: Arc<Core>,
    learner: Arc<dyn Learner>,
    lead: Lead,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut pruned_on = None;
    loop {
        let wake = core.clock.now() + FLUSH_EVERY;
        tokio::select! {
            _ = core.clock.sleep_until(wake) => {}
            _ = shutdown.changed() => break,
        }
        if let Err(e) = learner.flush_learned().await {
            tracing::error!(error = %e, "learned gaps could not be written; retrying in a minute");
        }
        // Days leave the window once a day: prune when the day changed.
        let today = core.clock.now().date_naive();
        if pruned_on != Some(today) && prune(&core, &lead).await {
            pruned_on = Some(today);
        }
    }
    if let Err(e) = learner.flush_learned().await {
        tracing::error!(error = %e, "learned gaps could not be written at shutdown");
    }
}

/// Leader-only housekeeping: days older than the window go. True when
/// done (a follower tries again later: it may be the leader by then).
async fn prune(core: &Core, lead: &Lead) -> bool {
    if lead.housekeeping_term().await.is_none() {
        return false;
    }
    let start = window_start(core.clock.now().date_naive());
    match core.store.prune_gap_counts(start).await {
        Ok(n) => {
            if n > 0 {
                tracing::debug!(removed = n, "pruned learned gaps older than 28 days");
            }
            true
        }
        Err(e) => {
            tracing::error!(error = %e, "pruning learned gaps failed");
            false
        }
    }
}
