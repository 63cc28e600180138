//! Plain connections to the test server's admin database, for
//! `store::testdb` (creating, dropping and faulting test databases), which
//! reaches PostgreSQL only through here.

/// The admin URL without hushwatch-only parameters, for tokio-postgres.
fn plain(url: &str) -> String {
    let mut u = url::Url::parse(url).expect("admin URL");
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

/// Runs `sql` on its own connection to `admin_url`.
pub(crate) async fn exec(admin_url: &str, sql: &str) -> Result<(), String> {
    let (client, conn) = tokio_postgres::connect(&plain(admin_url), tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    let task = tokio::spawn(conn);
    let done = client.batch_execute(sql).await.map_err(|e| e.to_string());
    drop(client);
    let _ = task.await;
    done
}

/// Ends every connection to database `name` but this one (a server-side
/// fault); how many it ended.
pub(crate) async fn terminate_connections(admin_url: &str, name: &str) -> u64 {
    let (client, conn) = tokio_postgres::connect(&plain(admin_url), tokio_postgres::NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(conn);
    let rows = client
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&name],
        )
        .await
        .expect("terminate");
    rows.len() as u64
}
