//! Where the state lives: the embedded SQLite file in `data_dir`, or a
//! PostgreSQL database. `config::store` reads `[store]` into this type
//! (with `pg::settings::parse`, the parser the backend connects with); the
//! store opens what it names. It lives here, not in `config`, so the store
//! does not depend on the config module that depends on it.

use super::pg::Settings;

#[derive(Debug, Clone, Default)]
pub struct StoreConfig {
    /// `None`: SQLite in `data_dir`.
    pub postgres: Option<PostgresConfig>,
    /// `encryption_key`: seals relay bodies at rest (none: plaintext).
    pub sealer: super::seal::Sealer,
}

#[derive(Debug, Clone)]
pub struct PostgresConfig {
    /// Parsed `url` (its `Debug` shows the URL with the password masked).
    pub settings: Settings,
    /// `pool_size`: connections this process keeps at most.
    pub pool_size: usize,
    /// `leader_lease`: how long the housekeeping leader's lease lasts on
    /// the database clock (`service::leader`); another replica takes over
    /// at most about this long after the leader stops.
    pub leader_lease: std::time::Duration,
}
