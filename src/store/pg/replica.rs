//! Replica coordination operations on PostgreSQL (see `store::replica` for
//! what each means): the same decisions and statements
//! (`store::replica::sql`), with outbox claims under `FOR UPDATE SKIP
//! LOCKED` and the leader row under a row lock; and the LISTEN/NOTIFY
//! change feed.

use std::sync::{Arc, Weak};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use deadpool_postgres::Pool;
use tokio::sync::broadcast;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Socket};

use tokio_postgres::types::ToSql;

use super::ops::{outbox_from_row, OUTBOX_COLUMNS};
use super::sql::{exec, ms, one, opt, rows, Tx};
use super::Settings;
use crate::store::db::Columns;
use crate::store::replica::{
    claim, elect_outcome, holds, replica_row, sql, Change, Claim, LeaderRow, Leadership, ReplicaRow,
};
use crate::store::{Attempt, StoreError};

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

pub(super) async fn claim_outbox(
    tx: &Tx<'_>,
    replica: &str,
    now: DateTime<Utc>,
    lease: TimeDelta,
    limit: i64,
) -> Result<Vec<Claim>, StoreError> {
    let until = now + lease;
    let params: [&(dyn ToSql + Sync); 4] = [&ms(now), &replica, &ms(until), &limit];
    let mut claimed = rows(tx, &claim(" FOR UPDATE SKIP LOCKED"), &params)
        .await?
        .iter()
        .map(Columns::pg)
        .collect::<Result<Vec<(i64, i64)>, _>>()?;
    claimed.sort_unstable();
    let read = format!("SELECT {OUTBOX_COLUMNS} FROM outbox o WHERE o.id = $1");
    let mut out = Vec::with_capacity(claimed.len());
    for (id, token) in claimed {
        out.push(Claim {
            row: outbox_from_row(&one(tx, &read, &[&id]).await?)?,
            token,
            lease_until: until,
        });
    }
    Ok(out)
}

pub(super) async fn settle_claim(
    tx: &Tx<'_>,
    id: i64,
    token: i64,
    attempt: &Attempt,
) -> Result<bool, StoreError> {
    let locked = format!("{} FOR UPDATE", sql::CLAIM_STATE);
    let current = opt(tx, &locked, &[&id]).await?;
    if !holds(current.as_ref().map(Columns::pg).transpose()?, token) {
        return Ok(false);
    }
    super::ops::record_attempt(tx, id, attempt).await?;
    exec(tx, sql::UNCLAIM, &[&id]).await?;
    Ok(true)
}

pub(super) async fn elect(
    tx: &Tx<'_>,
    replica: &str,
    term: Option<i64>,
    now: DateTime<Utc>,
    ttl: TimeDelta,
) -> Result<Leadership, StoreError> {
    let locked = format!("{} FOR UPDATE", sql::LEADER);
    let row = opt(tx, &locked, &[]).await?;
    let row: Option<LeaderRow> = row.as_ref().map(Columns::pg).transpose()?;
    let (write, leadership) = elect_outcome(row, replica, term, ms(now), ms(now + ttl))?;
    if let Some(t) = write {
        exec(tx, sql::LEAD, &[&replica, &t, &ms(now + ttl)]).await?;
    }
    Ok(leadership)
}

pub(super) async fn resign(tx: &Tx<'_>, replica: &str, term: i64) -> Result<bool, StoreError> {
    Ok(exec(tx, sql::RESIGN, &[&replica, &term]).await? > 0)
}

pub(super) async fn heartbeat(
    tx: &Tx<'_>,
    replica: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    exec(tx, sql::HEARTBEAT, &[&replica, &ms(now)]).await?;
    Ok(())
}

pub(super) async fn replicas(
    tx: &Tx<'_>,
    seen_since: DateTime<Utc>,
) -> Result<Vec<ReplicaRow>, StoreError> {
    rows(tx, sql::REPLICAS, &[&ms(seen_since)])
        .await?
        .iter()
        .map(|r| replica_row(Columns::pg(r)?))
        .collect()
}

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
