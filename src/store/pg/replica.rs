//! Replica coordination operations on PostgreSQL (see `store::replica` for
//! what each means): outbox claims with `FOR UPDATE SKIP LOCKED`, the leader
//! row under a row lock, heartbeats, and the LISTEN/NOTIFY change feed.

use std::sync::{Arc, Weak};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use deadpool_postgres::Pool;
use tokio::sync::broadcast;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Socket};

use super::ops::{outbox_from_row, OUTBOX_COLUMNS};
use super::sql::{exec, get, ms, one, rows, time, Tx};
use super::Settings;
use crate::store::replica::{decide, Change, Claim, Decision, Leadership, ReplicaRow};
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
    // Rows another replica is claiming right now are skipped, not waited
    // for; a younger row of the same queue is not claimable while an older
    // one is pending, so a queue is never split between replicas.
    let claimable = crate::store::replica::CLAIMABLE.replace("?1", "$1");
    let claimed = rows(
        tx,
        &format!(
            "UPDATE outbox SET claimed_by = $2, lease_until = $3, claim_token = claim_token + 1
             WHERE id IN (SELECT o.id FROM outbox o WHERE {claimable}
                          ORDER BY o.id LIMIT $4 FOR UPDATE SKIP LOCKED)
             RETURNING id, claim_token"
        ),
        &[&ms(now), &replica, &ms(until), &limit],
    )
    .await?;
    let mut out = Vec::with_capacity(claimed.len());
    for r in &claimed {
        let id: i64 = get(r, 0)?;
        let row = one(
            tx,
            &format!("SELECT {OUTBOX_COLUMNS} FROM outbox o WHERE o.id = $1"),
            &[&id],
        )
        .await?;
        out.push(Claim {
            row: outbox_from_row(&row)?,
            token: get(r, 1)?,
            lease_until: until,
        });
    }
    out.sort_by_key(|c| c.row.id);
    Ok(out)
}

pub(super) async fn settle_claim(
    tx: &Tx<'_>,
    id: i64,
    token: i64,
    attempt: &Attempt,
) -> Result<bool, StoreError> {
    let current = super::sql::opt(
        tx,
        "SELECT claim_token, status FROM outbox WHERE id = $1 FOR UPDATE",
        &[&id],
    )
    .await?;
    let Some(current) = current else {
        return Ok(false);
    };
    if get::<i64>(&current, 0)? != token || get::<String>(&current, 1)? != "pending" {
        return Ok(false);
    }
    super::ops::record_attempt(tx, id, attempt).await?;
    exec(
        tx,
        "UPDATE outbox SET claimed_by = NULL, lease_until = NULL WHERE id = $1",
        &[&id],
    )
    .await?;
    Ok(true)
}

pub(super) async fn elect(
    tx: &Tx<'_>,
    replica: &str,
    term: Option<i64>,
    now: DateTime<Utc>,
    ttl: TimeDelta,
) -> Result<Leadership, StoreError> {
    let row = one(
        tx,
        "SELECT holder, term, lease_until FROM leader WHERE id = 1 FOR UPDATE",
        &[],
    )
    .await?;
    let stored: (Option<String>, i64, i64) = (get(&row, 0)?, get(&row, 1)?, get(&row, 2)?);
    let until = ms(now + ttl);
    let decision = decide(Some(stored.clone()), replica, term, ms(now));
    Ok(match decision {
        Decision::Renew(t) | Decision::Take(t) => {
            exec(
                tx,
                "UPDATE leader SET holder = $1, term = $2, lease_until = $3 WHERE id = 1",
                &[&replica, &t, &until],
            )
            .await?;
            Leadership {
                leader: true,
                holder: Some(replica.to_owned()),
                term: t,
                lease_until: Some(time(until)?),
            }
        }
        Decision::Other => Leadership {
            leader: false,
            holder: stored.0,
            term: stored.1,
            lease_until: Some(time(stored.2)?),
        },
    })
}

pub(super) async fn resign(tx: &Tx<'_>, replica: &str, term: i64) -> Result<bool, StoreError> {
    let n = exec(
        tx,
        "UPDATE leader SET holder = NULL, lease_until = 0 WHERE id = 1 AND holder = $1 AND term = $2",
        &[&replica, &term],
    )
    .await?;
    Ok(n > 0)
}

pub(super) async fn heartbeat(
    tx: &Tx<'_>,
    replica: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    exec(
        tx,
        "INSERT INTO replicas (id, started_at, seen_at) VALUES ($1, $2, $2)
         ON CONFLICT (id) DO UPDATE SET seen_at = GREATEST(replicas.seen_at, excluded.seen_at)",
        &[&replica, &ms(now)],
    )
    .await?;
    Ok(())
}

pub(super) async fn replicas(
    tx: &Tx<'_>,
    seen_since: DateTime<Utc>,
) -> Result<Vec<ReplicaRow>, StoreError> {
    rows(
        tx,
        "SELECT id, started_at, seen_at FROM replicas WHERE seen_at >= $1 ORDER BY id",
        &[&ms(seen_since)],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(ReplicaRow {
            id: get(r, 0)?,
            started_at: time(get(r, 1)?)?,
            seen_at: time(get(r, 2)?)?,
        })
    })
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
