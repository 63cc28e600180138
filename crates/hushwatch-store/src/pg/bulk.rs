//! A whole group-commit batch of ingest in a few statements. Recording
//! event by event (`core::record_event`) costs about ten round trips per
//! event while the audit head's row lock is held, which serializes every
//! replica's ingest behind those round trips. Here one statement serves
//! each concern for the whole batch (arrays bound as parameters and
//! expanded with `UNNEST`), the statements that do not depend on each
//! other's results are pipelined on the one connection (tokio-postgres
//! sends them without waiting; the server runs them in order), and the
//! audit chain is hashed in the process from the head read under its lock,
//! with ONE head update per batch:
//!
//! 1. BEGIN, head lock, stream rows ensured, dedup inserts (one flight);
//! 2. events, audit entries, head, stream clocks, notifications, the
//!    revocation-index notes, the moved stream rows, COMMIT (one flight).
//!
//! So the head lock is held for two round trips and the COMMIT's flush,
//! whatever the batch size. Every statement is prepared before a flight
//! (cached per connection), so each flight goes out in the order written:
//! nothing can be sent after the COMMIT. The COMMIT's answer counts only
//! if every statement before it succeeded (after an error PostgreSQL turns
//! the COMMIT into a rollback), and only then is anything acknowledged.
//!
//! The rules are `core::record_event`'s, applied in delivery order: a
//! delivery id seen before (in the database, under its legacy hash, or
//! earlier in the batch) is a duplicate; each stream's clock takes the
//! latest arrival (a later delivery wins a tie), as applying the events one
//! by one would. Any error fails the whole batch; the caller then rolls
//! back and records job by job (`batch`), so one bad delivery still fails
//! alone.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use tokio_postgres::Statement;

use super::pg_err;
use super::sql::{get, opt_ms};
use crate::ops::millis;
use crate::ops::{delivery_hash, legacy_delivery_hash};
use crate::revocations::AccessNote;
use crate::{EventOutcome, NewEvent, StoreError, StreamRow};
use hushwatch_core::audit::chain::{from_hex, to_hex, Entry, GENESIS};

/// The batch's own connection; the transaction is BEGIN … COMMIT sent in
/// the flights (a `Transaction` handle could not share the COMMIT's flight).
type Tx = deadpool_postgres::Client;

/// Each job's outcomes and the rows of the streams it moved (when asked).
pub(super) type Recorded = (Vec<EventOutcome>, Vec<StreamRow>);

/// Why nothing was recorded.
pub(super) enum Failed {
    /// A statement failed: the transaction is aborted or was never
    /// committed; the caller sends ROLLBACK before reusing the connection.
    Before(StoreError),
    /// COMMIT itself failed: it may or may not have happened.
    Commit(StoreError),
}

const EVENTS: &str =
    "INSERT INTO events (stream, delivery_hash, event_type, event_time, received_at,
                         feeds_clock, body_sha256)
     SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::BIGINT[],
                          $6::BOOLEAN[], $7::BYTEA[])";

const AUDIT: &str =
    "INSERT INTO audit_log (seq, received_at, source, channel, delivery_id, event_type,
         event_time, subject_ids, body_sha256, signature_verified, prev_hash, hash)
     SELECT * FROM UNNEST($1::BIGINT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[],
         $5::TEXT[], $6::TEXT[], $7::BIGINT[], $8::TEXT[], $9::TEXT[], $10::BOOLEAN[],
         $11::TEXT[], $12::TEXT[])";

const HEAD_UPDATE: &str = "UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1";

const CLOCKS: &str = "UPDATE streams s SET
         last_event_type = CASE WHEN s.last_arrival_at IS NULL OR u.at >= s.last_arrival_at
                                THEN u.event_type ELSE s.last_event_type END,
         last_event_id   = CASE WHEN s.last_arrival_at IS NULL OR u.at >= s.last_arrival_at
                                THEN u.event_id ELSE s.last_event_id END,
         last_arrival_at = GREATEST(coalesce(s.last_arrival_at, u.at), u.at),
         newest_event_at = CASE WHEN u.newest IS NULL THEN s.newest_event_at
                                ELSE GREATEST(coalesce(s.newest_event_at, u.newest),
                                              u.newest) END
     FROM UNNEST($1::TEXT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::BIGINT[])
          AS u(name, at, event_type, event_id, newest)
     WHERE s.name = u.name";

const NOTIFY: &str = "SELECT pg_notify($1, n) FROM UNNEST($2::TEXT[]) AS n";

/// `revocations::note` for the batch's revokes, as one statement, under
/// the same rule (`revocation_upsert_rule!`: a row is replaced by one at
/// least as new by event time, else by arrival). `note_revocations` first
/// folds the batch's revokes of one key by that rule, as one statement
/// may not update a row twice.
const REVOKES: &str = concat!(
    "INSERT INTO revocations
        (stream, subject, organization, event_time, received_at, delivery_id, event_type)
    SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::BIGINT[],
                         $6::TEXT[], $7::TEXT[]) ",
    crate::revocations::revocation_upsert_rule!()
);

/// Every statement of the two flights, prepared.
struct Stmts {
    head: Statement,
    ensure: Statement,
    dedup: Statement,
    events: Statement,
    audit: Statement,
    head_update: Statement,
    clocks: Statement,
    notify: Statement,
    revokes: Statement,
    rows: Statement,
}

async fn prepare(tx: &Tx) -> Result<Stmts, StoreError> {
    let rows_sql = super::ops::stream_rows_sql();
    let (head, ensure, dedup, events, audit, head_update, clocks, notify, revokes, rows) =
        tokio::try_join!(
            tx.prepare_cached(HEAD),
            tx.prepare_cached(ENSURE),
            tx.prepare_cached(DEDUP),
            tx.prepare_cached(EVENTS),
            tx.prepare_cached(AUDIT),
            tx.prepare_cached(HEAD_UPDATE),
            tx.prepare_cached(CLOCKS),
            tx.prepare_cached(NOTIFY),
            tx.prepare_cached(REVOKES),
            tx.prepare_cached(&rows_sql),
        )
        .map_err(pg_err)?;
    Ok(Stmts {
        head,
        ensure,
        dedup,
        events,
        audit,
        head_update,
        clocks,
        notify,
        revokes,
        rows,
    })
}

/// Every event of the batch, in delivery order, with its job.
struct Item<'a> {
    job: usize,
    event: &'a NewEvent,
    hash: Option<String>,
}

/// Records `jobs` (each a delivery's events, and whether it wants the rows
/// of the streams it moved) in one transaction on `tx`, and commits.
pub(super) async fn record(tx: &Tx, jobs: &[(&[NewEvent], bool)]) -> Result<Vec<Recorded>, Failed> {
    let stmts = prepare(tx).await.map_err(Failed::Before)?;
    let outcomes = flights(tx, &stmts, jobs).await?;
    Ok(outcomes)
}

async fn flights(
    tx: &Tx,
    st: &Stmts,
    jobs: &[(&[NewEvent], bool)],
) -> Result<Vec<Recorded>, Failed> {
    let before = Failed::Before;
    let items: Vec<Item> = jobs
        .iter()
        .enumerate()
        .flat_map(|(job, (events, _))| events.iter().map(move |event| (job, event)))
        .map(|(job, event)| Item {
            job,
            event,
            hash: event
                .delivery_id
                .as_deref()
                .map(|id| delivery_hash(event.channel, &event.stream, id)),
        })
        .collect();
    let audited = items.iter().any(|i| i.event.audit);

    // Flight 1. The head lock first keeps lock order head → stream rows,
    // as everywhere else (see `ops`); stream rows exist before the dedup
    // rows that reference them.
    let head = async {
        if !audited {
            return Ok(None);
        }
        let row = tx.query_one(&st.head, &[]).await.map_err(pg_err)?;
        Ok::<_, StoreError>(Some((
            get::<i64>(&row, 0)?,
            get::<Option<String>>(&row, 1)?,
        )))
    };
    let (_, head, (), fresh) = tokio::try_join!(
        async { tx.batch_execute("BEGIN").await.map_err(pg_err) },
        head,
        ensure_streams(tx, &st.ensure, &items),
        dedup(tx, &st.dedup, &items)
    )
    .map_err(before)?;

    let mut accepted_hashes: HashSet<String> = fresh;
    let mut outcomes: Vec<Vec<EventOutcome>> = jobs
        .iter()
        .map(|(e, _)| Vec::with_capacity(e.len()))
        .collect();
    let mut kept = Vec::new();
    for item in &items {
        let accepted = match &item.hash {
            // Taking the hash out means a second event with it in this
            // batch is a duplicate, as it would be one by one.
            Some(hash) => accepted_hashes.remove(hash),
            None => true,
        };
        outcomes[item.job].push(if accepted {
            kept.push(item);
            EventOutcome::Accepted
        } else {
            EventOutcome::Duplicate
        });
    }

    // The moved rows of every job that asked, read in one statement
    // after the whole batch was applied.
    let moved: Vec<Vec<&str>> = jobs
        .iter()
        .zip(&outcomes)
        .map(|((events, with_rows), outcomes)| match with_rows {
            true => crate::moved_streams(events, outcomes),
            false => Vec::new(),
        })
        .collect();
    let mut names: Vec<&str> = moved.iter().flatten().copied().collect();
    names.sort_unstable();
    names.dedup();

    // Flight 2, COMMIT last.
    let statements = async {
        tokio::try_join!(
            insert_events(tx, &st.events, &kept),
            append_audit(tx, st, &kept, head),
            move_clocks(tx, st, &kept),
            note_revocations(tx, &st.revokes, &kept),
            read_rows(tx, &st.rows, &names),
        )
    };
    let commit = async { tx.batch_execute("COMMIT").await.map_err(pg_err) };
    let (statements, committed) = tokio::join!(statements, commit);
    let ((), (), (), (), rows) = statements.map_err(before)?;
    committed.map_err(Failed::Commit)?;
    Ok(outcomes
        .into_iter()
        .zip(moved)
        .map(|(outcomes, moved)| {
            let rows = moved
                .iter()
                .filter_map(|name| rows.iter().find(|r| r.name == *name).cloned())
                .collect();
            (outcomes, rows)
        })
        .collect())
}

/// The accepted revokes (`AccessNote::Revoke`) in one upsert. Those of one
/// (stream, subject, organization) are folded first as applying them one
/// by one would: the last of the newest by event time, else arrival, then
/// compared with the stored row by [`REVOKES`]' `WHERE`. Key order keeps
/// the lock order of concurrent batches fixed. (A grant's stale check
/// reads the index first, so batches with grants go delivery by delivery,
/// `batch`.)
async fn note_revocations(tx: &Tx, stmt: &Statement, kept: &[&Item<'_>]) -> Result<(), StoreError> {
    let mut latest: BTreeMap<(&str, &str, &str), &NewEvent> = BTreeMap::new();
    let newness = |e: &NewEvent| millis(e.event_time.unwrap_or(e.received_at));
    for item in kept {
        let e = item.event;
        let Some(AccessNote::Revoke {
            subject,
            organization,
        }) = &e.access
        else {
            continue;
        };
        let key = (
            e.stream.as_str(),
            subject.as_str(),
            crate::revocations::org_key(organization),
        );
        match latest.get(&key) {
            Some(held) if newness(e) < newness(held) => {}
            _ => {
                latest.insert(key, e);
            }
        }
    }
    if latest.is_empty() {
        return Ok(());
    }
    let mut cols: (Vec<&str>, Vec<&str>, Vec<&str>) = Default::default();
    let mut times: (Vec<Option<i64>>, Vec<i64>) = Default::default();
    let mut ids: (Vec<Option<&str>>, Vec<&str>) = Default::default();
    for ((stream, subject, org), e) in &latest {
        cols.0.push(stream);
        cols.1.push(subject);
        cols.2.push(org);
        times.0.push(e.event_time.map(millis));
        times.1.push(millis(e.received_at));
        ids.0.push(e.delivery_id.as_deref());
        ids.1.push(&e.event_type);
    }
    exec(
        tx,
        stmt,
        &[
            &cols.0, &cols.1, &cols.2, &times.0, &times.1, &ids.0, &ids.1,
        ],
    )
    .await?;
    Ok(())
}

async fn read_rows(
    tx: &Tx,
    stmt: &Statement,
    names: &[&str],
) -> Result<Vec<StreamRow>, StoreError> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    tx.query(stmt, &[&names])
        .await
        .map_err(pg_err)?
        .iter()
        .map(super::ops::stream_from_row)
        .collect()
}

async fn exec(
    tx: &Tx,
    stmt: &Statement,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64, StoreError> {
    tx.execute(stmt, params).await.map_err(pg_err)
}

/// Creates the rows of streams first heard now (watch starts at the first
/// arrival), in name order so concurrent batches lock in one order.
const HEAD: &str = "SELECT seq, hash FROM audit_head WHERE id = 1 FOR UPDATE";

const ENSURE: &str = "INSERT INTO streams (name, watch_started_at)
     SELECT * FROM UNNEST($1::TEXT[], $2::BIGINT[])
     ON CONFLICT (name) DO NOTHING";

async fn ensure_streams(tx: &Tx, stmt: &Statement, items: &[Item<'_>]) -> Result<(), StoreError> {
    let mut first: BTreeMap<&str, i64> = BTreeMap::new();
    for i in items {
        first
            .entry(&i.event.stream)
            .or_insert(millis(i.event.received_at));
    }
    let names: Vec<&str> = first.keys().copied().collect();
    let at: Vec<i64> = first.values().copied().collect();
    tx.execute(stmt, &[&names, &at]).await.map_err(pg_err)?;
    Ok(())
}

/// Inserts every delivery hash not seen before (nor under its legacy
/// hash); returns the hashes this batch inserted. Another transaction
/// inserting the same hash makes this one wait for its outcome, then
/// insert nothing: dedup is global. Hash order keeps lock order fixed.
const DEDUP: &str = "INSERT INTO seen_deliveries (hash, stream, seen_at, channel)
     SELECT u.hash, u.stream, u.seen_at, u.channel
     FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::TEXT[])
          AS u(hash, legacy, stream, seen_at, channel)
     WHERE NOT EXISTS (SELECT 1 FROM seen_deliveries s
                       WHERE s.hash = u.legacy AND s.channel = 'legacy')
     ORDER BY u.hash
     ON CONFLICT (hash) DO NOTHING
     RETURNING hash";

async fn dedup(
    tx: &Tx,
    stmt: &Statement,
    items: &[Item<'_>],
) -> Result<HashSet<String>, StoreError> {
    let (mut hashes, mut legacy, mut streams, mut at, mut channels) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in items {
        if let (Some(hash), Some(id)) = (&i.hash, &i.event.delivery_id) {
            hashes.push(hash.as_str());
            legacy.push(legacy_delivery_hash(&i.event.stream, id));
            streams.push(i.event.stream.as_str());
            at.push(millis(i.event.received_at));
            channels.push(i.event.channel);
        }
    }
    if hashes.is_empty() {
        return Ok(HashSet::new());
    }
    tx.query(stmt, &[&hashes, &legacy, &streams, &at, &channels])
        .await
        .map_err(pg_err)?
        .iter()
        .map(|r| get(r, 0))
        .collect()
}

async fn insert_events(tx: &Tx, stmt: &Statement, kept: &[&Item<'_>]) -> Result<(), StoreError> {
    let plain: Vec<&&Item> = kept.iter().filter(|i| !i.event.audit).collect();
    if plain.is_empty() {
        return Ok(());
    }
    let streams: Vec<&str> = plain.iter().map(|i| i.event.stream.as_str()).collect();
    let hashes: Vec<Option<&str>> = plain.iter().map(|i| i.hash.as_deref()).collect();
    let types: Vec<&str> = plain.iter().map(|i| i.event.event_type.as_str()).collect();
    let times: Vec<Option<i64>> = plain.iter().map(|i| opt_ms(i.event.event_time)).collect();
    let received: Vec<i64> = plain.iter().map(|i| millis(i.event.received_at)).collect();
    let feeds: Vec<bool> = plain.iter().map(|i| i.event.feeds_clock).collect();
    let bodies: Vec<Option<&[u8]>> = plain
        .iter()
        .map(|i| i.event.body_sha256.as_ref().map(|d| d.as_slice()))
        .collect();
    exec(
        tx,
        stmt,
        &[
            &streams, &hashes, &types, &times, &received, &feeds, &bodies,
        ],
    )
    .await?;
    Ok(())
}

/// Chains the audited events onto the head read under its lock, inserts
/// them in one statement and moves the head once.
async fn append_audit(
    tx: &Tx,
    st: &Stmts,
    kept: &[&Item<'_>],
    head: Option<(i64, Option<String>)>,
) -> Result<(), StoreError> {
    let Some((mut seq, head_hash)) = head else {
        return Ok(());
    };
    let mut prev = head_hash.as_deref().and_then(from_hex).unwrap_or(GENESIS);
    let mut entries = Vec::new();
    for i in kept.iter().filter(|i| i.event.audit) {
        let event = i.event;
        seq += 1;
        let entry = Entry {
            seq,
            received_at_ms: millis(event.received_at),
            source: event.stream.clone(),
            channel: event.channel.to_string(),
            delivery_id: event.delivery_id.clone(),
            event_type: event.event_type.clone(),
            event_time_ms: opt_ms(event.event_time),
            subject_ids: crate::audit::subject_json(&event.subject_ids),
            body_sha256: event.body_sha256.map(|d| to_hex(&d)),
            signature_verified: event.signature_verified,
            prev_hash: prev,
        };
        prev = entry.hash();
        entries.push(entry);
    }
    if entries.is_empty() {
        return Ok(());
    }
    let col = |f: fn(&Entry) -> i64| entries.iter().map(f).collect::<Vec<_>>();
    let seqs = col(|e| e.seq);
    let received = col(|e| e.received_at_ms);
    let sources: Vec<&str> = entries.iter().map(|e| e.source.as_str()).collect();
    let channels: Vec<&str> = entries.iter().map(|e| e.channel.as_str()).collect();
    let ids: Vec<Option<&str>> = entries.iter().map(|e| e.delivery_id.as_deref()).collect();
    let types: Vec<&str> = entries.iter().map(|e| e.event_type.as_str()).collect();
    let times: Vec<Option<i64>> = entries.iter().map(|e| e.event_time_ms).collect();
    let subjects: Vec<&str> = entries.iter().map(|e| e.subject_ids.as_str()).collect();
    let bodies: Vec<Option<&str>> = entries.iter().map(|e| e.body_sha256.as_deref()).collect();
    let verified: Vec<bool> = entries.iter().map(|e| e.signature_verified).collect();
    let prevs: Vec<String> = entries.iter().map(|e| to_hex(&e.prev_hash)).collect();
    let hashes: Vec<String> = entries.iter().map(|e| to_hex(&e.hash())).collect();
    let last_hash = hashes.last().cloned();
    let entry_params: [&(dyn tokio_postgres::types::ToSql + Sync); 12] = [
        &seqs, &received, &sources, &channels, &ids, &types, &times, &subjects, &bodies, &verified,
        &prevs, &hashes,
    ];
    let head_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&seq, &last_hash];
    tokio::try_join!(
        exec(tx, &st.audit, &entry_params),
        exec(tx, &st.head_update, &head_params),
    )?;
    Ok(())
}

/// The latest arrival per stream, as applying the events in order would
/// leave it (`core::advance_clock`'s UPDATE: a later event wins a tie).
struct Clock<'a> {
    at: DateTime<Utc>,
    event_type: &'a str,
    event_id: Option<&'a str>,
    newest: Option<DateTime<Utc>>,
}

/// One UPDATE moves every stream clock the batch fed, then one statement
/// notifies the other replicas (delivered at COMMIT, dropped on rollback).
async fn move_clocks(tx: &Tx, st: &Stmts, kept: &[&Item<'_>]) -> Result<(), StoreError> {
    let mut clocks: BTreeMap<&str, Clock> = BTreeMap::new();
    for i in kept.iter().filter(|i| i.event.feeds_clock) {
        let e = i.event;
        let c = clocks.entry(&e.stream).or_insert(Clock {
            at: e.received_at,
            event_type: &e.event_type,
            event_id: e.delivery_id.as_deref(),
            newest: None,
        });
        if millis(e.received_at) >= millis(c.at) {
            c.at = e.received_at;
            c.event_type = &e.event_type;
            c.event_id = e.delivery_id.as_deref();
        }
        c.newest = c.newest.max(e.event_time);
    }
    if clocks.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = clocks.keys().copied().collect();
    let at: Vec<i64> = clocks.values().map(|c| millis(c.at)).collect();
    let types: Vec<&str> = clocks.values().map(|c| c.event_type).collect();
    let ids: Vec<Option<&str>> = clocks.values().map(|c| c.event_id).collect();
    let newest: Vec<Option<i64>> = clocks.values().map(|c| opt_ms(c.newest)).collect();
    let clock_params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&names, &at, &types, &ids, &newest];
    let notify_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
        [&super::replica::CHANNEL, &names];
    tokio::try_join!(
        exec(tx, &st.clocks, &clock_params,),
        exec(tx, &st.notify, &notify_params,),
    )?;
    Ok(())
}
