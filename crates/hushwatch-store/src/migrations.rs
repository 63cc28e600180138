//! The schema as ONE list of named steps, shared by SQLite and PostgreSQL.
//!
//! Each [`Step`] has a stable name (`NNNN_what`) and its SQL for each
//! engine (the same text when the dialects agree, `None` where the engine
//! has nothing to do). A database records every step it has by NAME in
//! `schema_migrations(name, applied_at)`; opening it applies, in list
//! order, every step whose name is not recorded, each in its own
//! transaction together with its record: one runner for both engines,
//! `store::migrate`, with each engine's hooks in `store::schema` (SQLite)
//! and `store::pg::schema` (PostgreSQL, which also holds an advisory lock).
//!
//! Adding a step = appending one entry to [`STEPS`]. Never rename, edit or
//! reorder a step that has shipped: the name is what a database remembers.
//! The number in a name is only for reading; two branches that both add
//! `0018_…` with different suffixes merge without renumbering anything.
//!
//! Before names, versions were positions: SQLite kept `PRAGMA
//! user_version` (1..=17), PostgreSQL a `schema_version` row (1..=9). A
//! database from then is adopted on first open: the steps its version
//! stood for ([`SQLITE_POSITIONAL`], [`PG_POSITIONAL`], frozen) are
//! recorded as applied without running them. Both counters are still
//! written (the number of recorded steps that have SQL for that engine,
//! see [`positional_version`]), so a binary from before names refuses a
//! database that has steps it does not know instead of running on it.

use super::pg::schema as pg;
use super::schema as sqlite;

/// The two engines a step can have SQL for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Engine {
    Sqlite,
    Postgres,
}

/// One named schema step.
#[derive(Debug)]
pub(crate) struct Step {
    /// Stable forever; recorded in `schema_migrations`.
    pub name: &'static str,
    /// SQLite's SQL, `None` when SQLite has nothing to do.
    pub sqlite: Option<&'static str>,
    /// PostgreSQL's SQL, `None` when PostgreSQL has nothing to do.
    pub postgres: Option<&'static str>,
}

impl Step {
    /// The same SQL on both engines.
    const fn both(name: &'static str, sql: &'static str) -> Step {
        Step {
            name,
            sqlite: Some(sql),
            postgres: Some(sql),
        }
    }

    pub(crate) fn sql(&self, engine: Engine) -> Option<&'static str> {
        match engine {
            Engine::Sqlite => self.sqlite,
            Engine::Postgres => self.postgres,
        }
    }
}

/// PostgreSQL support started from SQLite's schema as it was after
/// `0010_subscriptions`, created in one step (`pg::BASELINE`, run as
/// `0001_events`), so steps 0002..=0010 have nothing to run there.
const IN_PG_BASELINE: Option<&str> = None;

/// Every schema step, in the order a new database gets them. Append only.
pub(crate) const STEPS: &[Step] = &[
    Step {
        name: "0001_events",
        sqlite: Some(sqlite::EVENTS),
        postgres: Some(pg::BASELINE),
    },
    Step {
        name: "0002_alert_state_outbox",
        sqlite: Some(sqlite::ALERT_STATE_OUTBOX),
        postgres: IN_PG_BASELINE,
    },
    Step {
        name: "0003_audit_log",
        sqlite: Some(super::audit::MIGRATION),
        postgres: IN_PG_BASELINE,
    },
    Step {
        name: "0004_svix",
        sqlite: Some(super::svix::MIGRATION),
        postgres: IN_PG_BASELINE,
    },
    Step {
        name: "0005_delivery_bookkeeping",
        sqlite: Some(sqlite::DELIVERY_BOOKKEEPING),
        postgres: IN_PG_BASELINE,
    },
    Step {
        name: "0006_dedup_per_channel",
        sqlite: Some(sqlite::DEDUP_PER_CHANNEL),
        postgres: IN_PG_BASELINE,
    },
    Step {
        name: "0007_audit_by_stream",
        sqlite: Some(super::status::MIGRATION),
        postgres: IN_PG_BASELINE,
    },
    Step {
        name: "0008_templated_streams",
        sqlite: Some(sqlite::TEMPLATED_STREAMS),
        postgres: IN_PG_BASELINE,
    },
    Step {
        name: "0009_page_severity_labels",
        sqlite: Some(sqlite::PAGE_SEVERITY_LABELS),
        postgres: IN_PG_BASELINE,
    },
    Step {
        name: "0010_subscriptions",
        sqlite: Some(super::subscriptions::MIGRATION),
        postgres: IN_PG_BASELINE,
    },
    // Operator silences, held firing pages, acknowledgements (PostgreSQL's
    // text differs in types: BIGINT identity ids, BIGINT times).
    Step {
        name: "0011_silences",
        sqlite: Some(super::silences::MIGRATION),
        postgres: Some(pg::SILENCES),
    },
    // Outbox claims with leases, the leader lease, replica heartbeats.
    Step {
        name: "0012_replicas",
        sqlite: Some(super::replica::MIGRATION),
        postgres: Some(pg::REPLICAS),
    },
    Step::both("0013_reconciliations", super::reconcile::MIGRATION),
    Step::both(
        "0014_stale_grants",
        super::reconcile::STALE_GRANTS_MIGRATION,
    ),
    Step::both("0015_notifier_failures", super::ladder::MIGRATION),
    Step::both("0016_gap_counts", super::gaps::MIGRATION),
    Step::both("0017_revocation_index", super::revocations::MIGRATION),
    // Replicas re-read only the stream rows changed since their last read;
    // SQLite has one process, nothing to re-read.
    Step {
        name: "0018_stream_changes",
        sqlite: None,
        postgres: Some(pg::STREAM_CHANGES),
    },
    // Issue #30: Idempotency-Key records of the operator routes.
    Step::both("0019_idempotency_keys", super::idempotency::MIGRATION),
    // Issue #29: relay mode's stored deliveries and failure runs
    // (PostgreSQL's text differs in the id and BYTEA).
    Step {
        name: "0020_forwards",
        sqlite: Some(super::forward::MIGRATION_SQLITE),
        postgres: Some(super::forward::MIGRATION_PG),
    },
    // Issue #30: acknowledge-link codes (SHA-256 only).
    Step::both("0021_ack_codes", super::ack_codes::MIGRATION),
    // Issue #44: per-subject order, held rows, revocation ages, the seal's
    // row binding (SQLite rebuilds `forwards` to widen its state CHECK).
    Step {
        name: "0022_forward_subjects_held",
        sqlite: Some(super::forward::SUBJECTS_HELD_SQLITE),
        postgres: Some(super::forward::SUBJECTS_HELD_PG),
    },
    // Issue #45: the cross-check's cursor, snapshots, pending changes and findings.
    Step::both("0023_crosscheck", super::crosscheck::MIGRATION),
    // Issue #45: the cross-check's pages (refused key, paged findings).
    Step::both("0024_crosscheck_pages", super::crosscheck::PAGES_MIGRATION),
    // Issue #45 (heal): the origin of a relay row hushwatch built itself.
    Step::both("0025_forward_origin", super::forward::ORIGIN),
    // Issue #44: `forward skip|retry --id` finds its row by webhook-id.
    Step::both(
        "0026_forward_webhook_id_index",
        super::forward_admin::WEBHOOK_ID_INDEX,
    ),
    // Issue #45 (heal): an event-log finding keeps the logged body.
    Step {
        name: "0027_crosscheck_finding_body",
        sqlite: Some(super::crosscheck::BODY_MIGRATION_SQLITE),
        postgres: Some(super::crosscheck::BODY_MIGRATION_PG),
    },
];

/// Frozen: what SQLite's positional `user_version` N stood for (the first
/// N names). Never changes, whatever is added to [`STEPS`].
pub(crate) const SQLITE_POSITIONAL: [&str; 17] = [
    "0001_events",
    "0002_alert_state_outbox",
    "0003_audit_log",
    "0004_svix",
    "0005_delivery_bookkeeping",
    "0006_dedup_per_channel",
    "0007_audit_by_stream",
    "0008_templated_streams",
    "0009_page_severity_labels",
    "0010_subscriptions",
    "0011_silences",
    "0012_replicas",
    "0013_reconciliations",
    "0014_stale_grants",
    "0015_notifier_failures",
    "0016_gap_counts",
    "0017_revocation_index",
];

/// Frozen: what PostgreSQL's positional `schema_version` N stood for (the
/// names of its first N entries). Its v1 was SQLite's schema after 0010,
/// and it added replicas (v2) before silences (v3).
pub(crate) const PG_POSITIONAL: [&[&str]; 9] = [
    &[
        "0001_events",
        "0002_alert_state_outbox",
        "0003_audit_log",
        "0004_svix",
        "0005_delivery_bookkeeping",
        "0006_dedup_per_channel",
        "0007_audit_by_stream",
        "0008_templated_streams",
        "0009_page_severity_labels",
        "0010_subscriptions",
    ],
    &["0012_replicas"],
    &["0011_silences"],
    &["0013_reconciliations"],
    &["0014_stale_grants"],
    &["0015_notifier_failures"],
    &["0016_gap_counts"],
    &["0017_revocation_index"],
    &["0018_stream_changes"],
];

/// The names a database at positional `version` (from before names) has,
/// or `None` if that version is beyond the last positional one (a binary
/// from before names that this one does not know).
pub(crate) fn positional_names(engine: Engine, version: u32) -> Option<Vec<&'static str>> {
    let n = usize::try_from(version).ok()?;
    match engine {
        Engine::Sqlite => SQLITE_POSITIONAL.get(..n).map(<[_]>::to_vec),
        Engine::Postgres => PG_POSITIONAL
            .get(..n)
            .map(|v| v.iter().flat_map(|names| names.iter().copied()).collect()),
    }
}

/// The positional counter a database with `recorded` steps carries: how
/// many of them have SQL for `engine`. (Equals the old positional version
/// for every database from before names, and grows with each new step.)
pub(crate) fn positional_version<S: AsRef<str>>(engine: Engine, recorded: &[S]) -> u32 {
    let n = STEPS
        .iter()
        .filter(|s| s.sql(engine).is_some())
        .filter(|s| recorded.iter().any(|r| r.as_ref() == s.name))
        .count();
    // STEPS is a short literal list; the count always fits.
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The positional counter of a database with every step of this binary.
pub(crate) fn binary_version(engine: Engine) -> u32 {
    let all: Vec<&str> = STEPS.iter().map(|s| s.name).collect();
    positional_version(engine, &all)
}

/// Recorded names this binary has no step for: the database was written by
/// a newer (or a different branch's) hushwatch, so it must be refused
/// untouched rather than run against a schema this code does not know.
pub(crate) fn unknown<S: AsRef<str>>(recorded: &[S]) -> Vec<String> {
    recorded
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| !STEPS.iter().any(|s| s.name == *r))
        .map(str::to_owned)
        .collect()
}

/// The refusal for [`unknown`] names, one line.
pub(crate) fn unknown_error(unknown: &[String]) -> super::StoreError {
    super::StoreError::Migration(format!(
        "the database records schema steps this binary does not know ({}): \
         it was written by a newer or different hushwatch; refusing to touch it",
        unknown.join(", ")
    ))
}

/// The steps not yet in `recorded`, in list order.
pub(crate) fn pending<S: AsRef<str>>(recorded: &[S]) -> Vec<&'static Step> {
    STEPS
        .iter()
        .filter(|s| !recorded.iter().any(|r| r.as_ref() == s.name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_numbered_and_every_step_runs_somewhere() {
        for (i, step) in STEPS.iter().enumerate() {
            let (num, what) = step.name.split_at(4);
            assert!(num.bytes().all(|b| b.is_ascii_digit()), "{}", step.name);
            assert!(what.starts_with('_') && what.len() > 1, "{}", step.name);
            assert!(
                what[1..]
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{}",
                step.name
            );
            assert!(
                step.sqlite.is_some() || step.postgres.is_some(),
                "{} runs on no engine",
                step.name
            );
            assert!(
                STEPS[..i].iter().all(|s| s.name != step.name),
                "{} is listed twice",
                step.name
            );
        }
    }

    #[test]
    fn positional_versions_name_listed_steps_and_match_the_old_counters() {
        for engine in [Engine::Sqlite, Engine::Postgres] {
            let last = match engine {
                Engine::Sqlite => 17,
                Engine::Postgres => 9,
            };
            for v in 0..=last {
                let names = positional_names(engine, v).unwrap();
                assert!(unknown(&names).is_empty(), "{engine:?} v{v}: {names:?}");
                // Writing the counter back from the names gives the version
                // the database had, so adopting is a fixed point.
                assert_eq!(positional_version(engine, &names), v, "{engine:?} v{v}");
            }
            assert_eq!(positional_names(engine, last + 1), None);
            // Positional versions name every step the last positional
            // binary had; anything after is new and appended.
            let all = positional_names(engine, last).unwrap();
            assert!(binary_version(engine) >= last);
            assert_eq!(
                pending(&all).len(),
                STEPS.len() - all.len(),
                "{engine:?}: positional names are a subset of STEPS"
            );
        }
    }

    #[test]
    fn unknown_and_pending_follow_the_list() {
        let recorded = ["0001_events".to_owned(), "9999_from_the_future".to_owned()];
        assert_eq!(unknown(&recorded), ["9999_from_the_future"]);
        let pending: Vec<&str> = pending(&recorded).iter().map(|s| s.name).collect();
        assert_eq!(pending.len(), STEPS.len() - 1);
        assert_eq!(pending[0], "0002_alert_state_outbox");
        let err = unknown_error(&unknown(&recorded)).to_string();
        assert!(err.contains("9999_from_the_future"), "{err}");
    }
}
