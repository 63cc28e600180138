//! `[streams.X.reconcile]`: how often the app's reconciliation job reports
//! (`every`) and how late a report may be (`grace`, default half of
//! `every`) before hushwatch pages "reconciliation has not run". Wall-clock
//! time: reconciliation runs around the clock, not in business hours.

use super::reader::{join, Reader};
use chrono::TimeDelta;
use toml::Table;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileConfig {
    pub every: TimeDelta,
    pub grace: TimeDelta,
}

impl ReconcileConfig {
    /// How long after the last report (or the start of the watch) the
    /// missing-reconciliation alert fires.
    pub fn deadline(&self) -> TimeDelta {
        self.every + self.grace
    }
}

/// Reads the stream's `reconcile` table (absent: not watched).
pub(super) fn read(r: &mut Reader<'_>, path: &str, t: &Table) -> Option<ReconcileConfig> {
    let key_path = join(path, "reconcile");
    let value = t.get("reconcile")?;
    let table = r.table(&key_path, value)?;
    r.reject_unknown(&key_path, table, &["every", "grace"]);
    let every = if table.contains_key("every") {
        r.opt_duration(&key_path, table, "every")
    } else {
        r.error(&join(&key_path, "every"), "is required (e.g. \"1h\")");
        None
    };
    let grace = r.opt_duration(&key_path, table, "grace");
    if every.is_some_and(|d| d <= TimeDelta::zero()) {
        r.error(&join(&key_path, "every"), "must be longer than zero");
        return None;
    }
    if grace.is_some_and(|d| d < TimeDelta::zero()) {
        r.error(&join(&key_path, "grace"), "must not be negative");
        return None;
    }
    let every = every?;
    Some(ReconcileConfig {
        every,
        grace: grace.unwrap_or(every / 2),
    })
}
