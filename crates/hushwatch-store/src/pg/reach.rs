//! Whether the database of `[store] url` can be reached now, and if not,
//! whether waiting can help. `serve` keeps retrying while the server is
//! down, refusing, or still starting (an outage or a start order), but
//! stops at once on what only an edit of `store.url` (or of the
//! database) fixes: a rejected login, a database that does not exist, a
//! server certificate that does not verify.

use super::settings::{Settings, CONNECT_TIMEOUT};

#[derive(Debug)]
pub enum Unreachable {
    /// Waiting cannot help; the message names the cause, never the secret.
    Permanent(String),
    /// Down, refusing, starting up, timed out: worth another try.
    Transient(String),
}

/// One connection attempt (then closed).
pub async fn reach(settings: &Settings) -> Result<(), Unreachable> {
    let attempt = async {
        match &settings.tls {
            None => settings
                .config
                .connect(tokio_postgres::NoTls)
                .await
                .map(|(client, conn)| (client, tokio::spawn(conn))),
            Some(tls) => settings
                .config
                .connect(tokio_postgres_rustls::MakeRustlsConnect::new(
                    (**tls).clone(),
                ))
                .await
                .map(|(client, conn)| (client, tokio::spawn(conn))),
        }
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
        Err(_) => Err(Unreachable::Transient(format!(
            "no answer within {} s",
            CONNECT_TIMEOUT.as_secs()
        ))),
        Ok(Ok((client, conn))) => {
            drop(client);
            let _ = conn.await;
            Ok(())
        }
        Ok(Err(e)) => Err(classify(&e)),
    }
}

/// SQLSTATEs a retry cannot fix: 28000 (login rejected, e.g. by
/// pg_hba.conf), 28P01 (wrong password), 3D000 (no such database);
/// PostgreSQL's "Appendix A. Error Codes".
const PERMANENT: &[&str] = &["28000", "28P01", "3D000"];

fn classify(e: &tokio_postgres::Error) -> Unreachable {
    let msg = super::pg_err_text(e);
    if let Some(db) = e.as_db_error() {
        if PERMANENT.contains(&db.code().code()) {
            return Unreachable::Permanent(msg);
        }
    }
    if certificate_refused(e) {
        return Unreachable::Permanent(msg);
    }
    Unreachable::Transient(msg)
}

/// A TLS failure because the server's certificate did not verify (rustls
/// reports it inside the I/O error of the handshake).
fn certificate_refused(e: &tokio_postgres::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let tls = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .or_else(|| err.downcast_ref::<rustls::Error>());
        if matches!(
            tls,
            Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)
        ) {
            return true;
        }
        next = err.source();
    }
    false
}
