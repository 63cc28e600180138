//! A fresh PostgreSQL database per test, on the server named by
//! `HUSHWATCH_TEST_PG_URL` (a role allowed to create databases; scripts/test
//! sets it up). Without it the test prints why and skips, unless
//! `HUSHWATCH_REQUIRE_PG=1`, which turns a missing server into a failure.
//! Dropped (`WITH (FORCE)`) when the value is dropped.

/// One replica cluster at a time in the whole test crate: three replicas
/// hold up to 15 connections, and the server allows 100 for every test on
/// the machine. (As separate binaries, replicas.rs and
/// watchdog_replicas.rs never overlapped; as modules of one crate they
/// would, so they share this lock.)
pub static CLUSTERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub struct PgDb {
    admin_url: String,
    pub name: String,
    /// `postgres://…/NAME?sslmode=disable`, for `[store] url`.
    pub url: String,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The URL without hushwatch-only parameters, for tokio-postgres itself.
fn plain(url: &str) -> String {
    let mut u = url::Url::parse(url).expect("HUSHWATCH_TEST_PG_URL is a URL");
    let kept: Vec<(String, String)> = u
        .query_pairs()
        .filter(|(k, _)| k != "sslmode" && k != "sslrootcert")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    u.set_query(None);
    if !kept.is_empty() {
        u.query_pairs_mut().extend_pairs(kept);
    }
    u.to_string()
}

/// Runs `sql` on a fresh connection to `url`; returns the first column of
/// each row as text.
pub fn query(url: &str, sql: &str) -> Result<Vec<String>, String> {
    runtime().block_on(async {
        let (client, conn) = tokio_postgres::connect(&plain(url), tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        let task = tokio::spawn(conn);
        let out = client
            .simple_query(sql)
            .await
            .map_err(|e| e.to_string())
            .map(|msgs| {
                msgs.into_iter()
                    .filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => {
                            Some(r.get(0).unwrap_or("").to_owned())
                        }
                        _ => None,
                    })
                    .collect()
            });
        drop(client);
        let _ = task.await;
        out
    })
}

impl PgDb {
    pub fn create(test: &str) -> Option<PgDb> {
        let required = std::env::var("HUSHWATCH_REQUIRE_PG").is_ok_and(|v| v == "1");
        let Ok(admin_url) = std::env::var("HUSHWATCH_TEST_PG_URL") else {
            assert!(
                !required,
                "HUSHWATCH_REQUIRE_PG=1 but HUSHWATCH_TEST_PG_URL is not set"
            );
            skip_notice(&format!(
                "{test}: SKIPPED, HUSHWATCH_TEST_PG_URL is not set (scripts/test sets it)"
            ));
            return None;
        };
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("hw_it_{}_{n}", std::process::id());
        if let Err(e) = query(&admin_url, &format!("CREATE DATABASE {name}")) {
            assert!(
                !required,
                "HUSHWATCH_REQUIRE_PG=1 but PostgreSQL is unavailable: {e}"
            );
            skip_notice(&format!("{test}: SKIPPED, PostgreSQL is unavailable: {e}"));
            return None;
        }
        let mut url = url::Url::parse(&admin_url).unwrap();
        url.set_path(&name);
        url.set_query(Some("sslmode=disable"));
        Some(PgDb {
            admin_url,
            name,
            url: url.to_string(),
        })
    }

    /// The test role's password, to check it never leaks (so it must not
    /// also be the user name, which may be printed).
    pub fn password(&self) -> String {
        let url = url::Url::parse(&self.url).unwrap();
        let password = url.password().unwrap_or_default().to_owned();
        assert!(
            password.len() >= 6 && password != url.username(),
            "the test role needs a password distinct from its name"
        );
        password
    }

    pub fn query(&self, sql: &str) -> Vec<String> {
        query(&self.url, sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Ends every connection to this database (a server-side fault).
    pub fn terminate_connections(&self) {
        query(
            &self.admin_url,
            &format!(
                // Only client backends of the test role: an autovacuum
                // worker on this database belongs to the superuser, and
                // terminating it would fail the query (and the test).
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = '{}' AND pid <> pg_backend_pid()
                   AND backend_type = 'client backend' AND usename = current_user",
                self.name
            ),
        )
        .unwrap();
    }
}

impl PgDb {
    /// With `false`, the server refuses new connections to this database
    /// (an outage of the database alone, as the sidecars see it); `true`
    /// ends it.
    pub fn allow_connections(&self, allow: bool) {
        query(
            &self.admin_url,
            &format!(
                "ALTER DATABASE {} WITH ALLOW_CONNECTIONS {allow}",
                self.name
            ),
        )
        .unwrap();
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(e) = query(&self.admin_url, &sql) {
            eprintln!("could not drop test database {}: {e}", self.name);
        }
    }
}

/// A skipped PostgreSQL test says so on the terminal even though cargo's
/// test harness captures `println!`: writing to the stderr handle directly
/// bypasses the capture, so a plain `cargo test` shows every skip among the
/// results instead of counting it silently as passed.
fn skip_notice(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}
