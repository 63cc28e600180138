//! `[store]`: where the state lives. Absent, it is the embedded SQLite file
//! in `data_dir`; with `url`, a shared PostgreSQL database, parsed by the
//! very parser the backend connects with (`store::pg::settings::parse`).

use std::path::Path;

use toml::{Table, Value};

use super::reader::Reader;
use crate::store::pg::DEFAULT_POOL_SIZE;
use crate::store::seal::{SealKey, Sealer};

/// Most connections one process may hold; keeps replicas × pool well under
/// PostgreSQL's default `max_connections` of 100.
pub const MAX_POOL_SIZE: usize = 64;

pub use crate::store::location::{PostgresConfig, StoreConfig};

/// `leader_lease` unless configured.
pub const DEFAULT_LEADER_LEASE: std::time::Duration = std::time::Duration::from_secs(15);

pub fn read(r: &mut Reader<'_>, root: &Table, base_dir: &Path) -> StoreConfig {
    let Some(t) = r.sub_table("", root, "store") else {
        return StoreConfig::default();
    };
    r.reject_unknown(
        "store",
        t,
        &["url", "pool_size", "leader_lease", "encryption_key"],
    );
    let sealer = read_encryption_key(r, t, base_dir);
    let leader_lease = read_leader_lease(r, t);
    let pool_size = match t.get("pool_size") {
        None => DEFAULT_POOL_SIZE,
        Some(Value::Integer(n)) if (1..=MAX_POOL_SIZE as i64).contains(n) => *n as usize,
        Some(_) => {
            r.error(
                "store.pool_size",
                format!("must be a whole number from 1 to {MAX_POOL_SIZE}"),
            );
            DEFAULT_POOL_SIZE
        }
    };
    // A `[store]` table with only `encryption_key` keeps the embedded
    // SQLite default; the PostgreSQL settings still need their `url`.
    let postgres_only = ["pool_size", "leader_lease"];
    if !t.contains_key("url") && !postgres_only.iter().any(|k| t.contains_key(*k)) {
        return StoreConfig {
            postgres: None,
            sealer,
        };
    }
    let Some(url) = r.req_string("store", t, "url") else {
        return StoreConfig::default();
    };
    match crate::store::pg::settings::parse(&url, base_dir) {
        Ok(settings) => StoreConfig {
            postgres: Some(PostgresConfig {
                settings,
                pool_size,
                leader_lease,
            }),
            sealer,
        },
        Err(reason) => {
            r.error("store.url", reason);
            StoreConfig::default()
        }
    }
}

/// `encryption_key`: one key or a list (the first seals, all open), each
/// 32 bytes of base64, written inline (usually `${VAR}`) or as
/// `file:PATH` (relative to the config file), parsed by the parser the
/// sealer uses. Without it relay bodies are stored in plaintext, which
/// `check` warns about when a stream forwards.
fn read_encryption_key(r: &mut Reader<'_>, t: &Table, base_dir: &Path) -> Sealer {
    let mut keys = Vec::new();
    for (i, text) in r
        .string_list("store", t, "encryption_key", true)
        .into_iter()
        .enumerate()
    {
        let path = format!("store.encryption_key[{i}]");
        let text = match text.strip_prefix("file:") {
            Some(file) => match std::fs::read_to_string(base_dir.join(file)) {
                Ok(contents) => contents,
                Err(e) => {
                    r.error(&path, format!("cannot read {file}: {}", e.kind()));
                    continue;
                }
            },
            None => text,
        };
        // Empty (`${HUSHWATCH_STORE_KEY:-}` unset): no key, so bodies are
        // stored in plaintext, which `check`'s plaintext warning says.
        if text.trim().is_empty() {
            continue;
        }
        match SealKey::parse(&text) {
            Ok(key) => {
                if keys.iter().any(|k: &SealKey| k.id() == key.id()) {
                    r.error(&path, "is the same key as an earlier entry");
                }
                keys.push(key);
            }
            Err(reason) => r.error(&path, reason),
        }
    }
    Sealer::new(keys)
}

/// At least 1 s: the lease is renewed three times per period, and a
/// shorter one would be a database round trip every few milliseconds.
fn read_leader_lease(r: &mut Reader<'_>, t: &Table) -> std::time::Duration {
    let Some(lease) = r.opt_duration("store", t, "leader_lease") else {
        return DEFAULT_LEADER_LEASE;
    };
    match lease.to_std() {
        Ok(lease) if lease >= std::time::Duration::from_secs(1) => lease,
        _ => {
            r.error("store.leader_lease", "must be at least 1s");
            DEFAULT_LEADER_LEASE
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    const SECRET: &str = "Pa55-w0rd-x";

    fn parse(text: &str) -> Result<crate::config::Config, String> {
        let env = |name: &str| (name == "PG_PASSWORD").then(|| SECRET.to_owned());
        crate::config::parse(text, Path::new("/srv/hw"), &env).map_err(|e| e.to_string())
    }

    #[test]
    fn no_store_table_means_sqlite() {
        let c = parse("").unwrap();
        assert!(c.store.postgres.is_none());
    }

    #[test]
    fn url_with_env_password_is_parsed_and_never_printed() {
        let c = parse(
            "[store]\nurl = \"postgres://hw:${PG_PASSWORD}@db:5432/hw?sslmode=require\"\npool_size = 3\n",
        )
        .unwrap();
        let pg = c.store.postgres.as_ref().unwrap();
        assert_eq!(pg.pool_size, 3);
        assert_eq!(pg.settings.config.get_password(), Some(SECRET.as_bytes()));
        assert_eq!(pg.settings.ssl_mode.as_str(), "require");
        assert!(
            !format!("{c:?}").contains(SECRET),
            "Debug of the whole config"
        );
    }

    #[test]
    fn bad_values_are_errors_naming_the_key_and_not_the_password() {
        for (text, key) in [
            (
                "[store]\nurl = \"postgres://hw:${PG_PASSWORD}@db/hw?sslmode=verify-ca\"\n",
                "store.url: sslmode must be",
            ),
            (
                "[store]\nurl = \"mysql://hw:${PG_PASSWORD}@db/hw\"\n",
                "store.url: must be a postgres:// URL",
            ),
            (
                "[store]\nurl = \"postgres://hw:${PG_PASSWORD}@db/hw\"\npool_size = 0\n",
                "store.pool_size: must be",
            ),
            ("[store]\npool_size = 2\n", "store.url: is required"),
            (
                "[store]\nurl = \"postgres://hw@db/hw\"\nleader_lease = \"500ms\"\n",
                "store.leader_lease: must be at least 1s",
            ),
            (
                "[store]\nurl = \"postgres://hw@db/hw\"\npool = 2\n",
                "store.pool: unknown key",
            ),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(key), "{err}");
            assert!(!err.contains(SECRET), "{err}");
        }
    }
}
