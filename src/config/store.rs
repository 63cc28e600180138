//! `[store]`: where the state lives. Without the section, the embedded
//! SQLite file in `data_dir`; with `url`, a PostgreSQL database that any
//! number of replicas share.
//!
//! The URL is parsed here by the parser the store connects with
//! (`store::pg::settings::parse`), so `check` rejects what `serve` would.
//! Errors never quote the URL (it carries a password).

use std::path::Path;
use std::time::Duration;

use toml::Table;

use super::reader::Reader;
use crate::store::pg;

/// Shortest `leader_lease`: a lease is renewed three times per period, and
/// faster than this would be a database round trip every few milliseconds.
const MIN_LEASE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `url`: `None` keeps SQLite in `data_dir`.
    pub postgres: Option<pg::Settings>,
    /// `pool_size`: connections per process to PostgreSQL.
    pub pool_size: usize,
    /// `leader_lease`: how long the housekeeping leader's lease lasts on
    /// the database clock; another replica takes over at most this long
    /// after the leader stops.
    pub leader_lease: Duration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            postgres: None,
            pool_size: pg::DEFAULT_POOL_SIZE,
            leader_lease: crate::service::replicas::DEFAULT_LEASE,
        }
    }
}

pub(super) fn read_store(r: &mut Reader<'_>, root: &Table, base_dir: &Path) -> StoreConfig {
    let mut store = StoreConfig::default();
    let Some(t) = r.sub_table("", root, "store") else {
        return store;
    };
    r.reject_unknown("store", t, &["url", "pool_size", "leader_lease"]);
    if let Some(url) = r.opt_string("store", t, "url") {
        match pg::settings::parse(&url, base_dir) {
            Ok(settings) => store.postgres = Some(settings),
            Err(reason) => r.error("store.url", reason),
        }
    }
    match t.get("pool_size") {
        None => {}
        Some(toml::Value::Integer(n)) if (1..=64).contains(n) => store.pool_size = *n as usize,
        Some(_) => r.error("store.pool_size", "must be an integer from 1 to 64"),
    }
    if let Some(lease) = r.opt_duration("store", t, "leader_lease") {
        match lease.to_std() {
            Ok(lease) if lease >= MIN_LEASE => store.leader_lease = lease,
            _ => r.error("store.leader_lease", "must be at least 1s"),
        }
    }
    if store.postgres.is_none() && t.contains_key("leader_lease") {
        r.warnings.push(
            "store.leader_lease has no effect without store.url (SQLite has one process, always the leader)"
                .to_owned(),
        );
    }
    store
}
