//! What replica coordination needs of PostgreSQL beyond rows (those are
//! `store::replica`, written once for both engines): its schema step and
//! the LISTEN/NOTIFY change feed, a connection of its own.

use std::sync::{Arc, Weak};
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::sync::broadcast;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Socket};

use super::Settings;
use crate::replica::Change;
use crate::StoreError;

/// The NOTIFY channel arrivals are announced on (payload: stream name).
pub(super) const CHANNEL: &str = "hushwatch_arrivals";

/// PostgreSQL schema step: the claim columns, leader row and heartbeats.
pub(super) const MIGRATION: &str = "
    ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
    ALTER TABLE outbox ADD COLUMN lease_until BIGINT;
    ALTER TABLE outbox ADD COLUMN claim_token BIGINT NOT NULL DEFAULT 0;
    CREATE TABLE leader (
        id          INTEGER PRIMARY KEY CHECK (id = 1),
        holder      TEXT,
        term        BIGINT NOT NULL,
        lease_until BIGINT NOT NULL
    );
    INSERT INTO leader (id, holder, term, lease_until) VALUES (1, NULL, 0, 0);
    CREATE TABLE replicas (
        id         TEXT PRIMARY KEY,
        started_at BIGINT NOT NULL,
        seen_at    BIGINT NOT NULL
    );";

/// How long the listener waits before connecting again after its
/// connection ended, and how often it checks that it is still wanted.
const RECONNECT: Duration = Duration::from_secs(1);

/// Keeps one dedicated connection LISTENing (not from the pool: a pooled
/// connection is handed to other calls) and forwards each notification as
/// `Change::Arrival`. Whenever the connection is (re)made, sends
/// `Change::Resync`, as notifications sent while it was down are lost.
/// Ends once the backend is closed or dropped.
pub(super) fn spawn_listener(
    settings: Arc<Settings>,
    feed: Weak<broadcast::Sender<Change>>,
    pool: Pool,
) {
    tokio::spawn(async move {
        let wanted = || feed.strong_count() > 0 && !pool.is_closed();
        while wanted() {
            let done = match &settings.tls {
                None => listen_once(&settings.config, tokio_postgres::NoTls, &feed, &wanted).await,
                Some(tls) => {
                    let tls = tokio_postgres_rustls::MakeRustlsConnect::new((**tls).clone());
                    listen_once(&settings.config, tls, &feed, &wanted).await
                }
            };
            if let Err(e) = done {
                if wanted() {
                    tracing::warn!(error = %e, "change feed: connection lost; reconnecting");
                }
            }
            tokio::time::sleep(RECONNECT).await;
        }
    });
}

fn send(feed: &Weak<broadcast::Sender<Change>>, change: Change) {
    if let Some(tx) = feed.upgrade() {
        // No receiver yet is fine: nobody is waiting for news.
        let _ = tx.send(change);
    }
}

async fn listen_once<T>(
    config: &tokio_postgres::Config,
    tls: T,
    feed: &Weak<broadcast::Sender<Change>>,
    wanted: &impl Fn() -> bool,
) -> Result<(), StoreError>
where
    T: MakeTlsConnect<Socket> + Send,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let (client, mut connection) = config.connect(tls).await.map_err(super::pg_err)?;
    let (notes, mut incoming) = tokio::sync::mpsc::unbounded_channel();
    let pump = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if notes.send(n.payload().to_owned()).is_err() {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            }
        }
    });
    let listening = client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .await
        .map_err(super::pg_err);
    if listening.is_ok() {
        send(feed, Change::Resync);
    }
    let mut check = tokio::time::interval(RECONNECT);
    let ended = loop {
        if let Err(e) = &listening {
            break Err(e.clone());
        }
        tokio::select! {
            note = incoming.recv() => match note {
                Some(stream) => send(feed, Change::Arrival(stream)),
                None => break Err(StoreError::Sql("the LISTEN connection ended".to_owned())),
            },
            _ = check.tick() => if !wanted() { break Ok(()) },
        }
    };
    pump.abort();
    ended
}
