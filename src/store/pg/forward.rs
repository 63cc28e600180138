//! `store::forward` on PostgreSQL: the same statements (`forward::sql`),
//! the same decisions (`forward::plan_settle`, `domain::forward`). A claim
//! is the guarded `forward::sql::CLAIM` UPDATE, not `SKIP LOCKED`: of two
//! replicas reading the same head, the second's UPDATE waits for the row
//! lock (one short statement), then matches nothing, so each row is taken
//! once with a lease and a fencing token. A settle locks the audit head,
//! then the stream's run row, in that order (the ingest order: head →
//! rows).

use chrono::{DateTime, TimeDelta, Utc};

use super::ops::{advance_clock, append_audit, queue_keyed_pages, stream_row};
use super::sql::{exec, get, ms, one, opt, opt_time, rows, time, Tx};
use crate::domain::forward::{self as decide, Oldest};
use crate::domain::svix::Severity;
use crate::store::forward::{
    audit_entry, claim_of, clock_event, dead_letter_alert, dead_letter_change, failing_alert,
    failing_reason, first_subject, page, plan_claim, plan_settle, replay_entry, replay_outcome,
    replay_selection, run_of, sql, status_rows, ClaimColumns, FailingPage, ForwardClaim,
    ForwardSettle, ForwardSettled, ForwardStatus, Head, ReplayItem, ReplayOutcome, ReplayRequest,
    Run, RunColumns, StoredFate,
};
use crate::store::svix::Columns;
use crate::store::{NewEvent, StoreError};

pub(super) async fn insert(tx: &Tx<'_>, event: &NewEvent) -> Result<(), StoreError> {
    let Some(f) = &event.forward else {
        return Ok(());
    };
    exec(
        tx,
        sql::INSERT,
        &[
            &event.stream,
            &f.ordered.then_some(event.stream.as_str()),
            &event.delivery_id.as_deref().unwrap_or_default(),
            &event.event_type,
            &first_subject(event),
            &event.event_time.map(ms),
            &ms(event.received_at),
            &f.moves_clock,
            &f.sealed.key_id,
            &f.sealed.bytes,
        ],
    )
    .await?;
    if f.ordered {
        exec(tx, sql::QUEUE, &[&event.stream]).await?;
    }
    Ok(())
}

pub(super) async fn claim(
    tx: &Tx<'_>,
    replica: &str,
    now: DateTime<Utc>,
    lease: TimeDelta,
    limit: i64,
) -> Result<(Vec<ForwardClaim>, Option<DateTime<Utc>>), StoreError> {
    let queues: Vec<String> = rows(tx, sql::QUEUES, &[])
        .await?
        .iter()
        .map(|r| get(r, 0))
        .collect::<Result<_, _>>()?;
    let mut heads = Vec::with_capacity(queues.len());
    for q in &queues {
        if let Some(r) = opt(tx, sql::HEAD, &[q]).await? {
            heads.push(Head {
                id: get(&r, 0)?,
                next_attempt_at: get(&r, 1)?,
                lease_until: get(&r, 2)?,
            });
        }
    }
    let unordered: Vec<i64> = rows(tx, sql::UNORDERED_DUE, &[&ms(now), &limit])
        .await?
        .iter()
        .map(|r| get(r, 0))
        .collect::<Result<_, _>>()?;
    let unordered_next: Option<i64> = get(&one(tx, sql::UNORDERED_NEXT, &[&ms(now)]).await?, 0)?;
    let (ids, next) = plan_claim(
        &heads,
        &unordered,
        unordered_next,
        ms(now),
        usize::try_from(limit).unwrap_or(0),
    );
    let mut claims = Vec::with_capacity(ids.len());
    for id in ids {
        // Guarded (see `sql::CLAIM`): a row another replica claimed first
        // matches nothing here once its claim commits.
        let Some(r) = opt(tx, sql::CLAIM, &[&id, &replica, &ms(now + lease), &ms(now)]).await?
        else {
            continue;
        };
        claims.push(claim_of(id, ClaimColumns::pg(&r)?));
    }
    Ok((claims, opt_time(next)?))
}

pub(super) async fn release(tx: &Tx<'_>) -> Result<usize, StoreError> {
    let n = exec(tx, sql::RELEASE, &[]).await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

async fn run(tx: &Tx<'_>, stream: &str) -> Result<Run, StoreError> {
    let row = opt(tx, &format!("{} FOR UPDATE", sql::RUN), &[&stream]).await?;
    Ok(match row {
        Some(r) => run_of(RunColumns::pg(&r)?),
        None => Run::default(),
    })
}

async fn write_run(tx: &Tx<'_>, stream: &str, r: &Run) -> Result<(), StoreError> {
    exec(
        tx,
        sql::WRITE_RUN,
        &[
            &stream,
            &i64::from(r.failures),
            &i64::from(r.paged),
            &r.failing_since,
            &r.last_error,
            &r.last_attempt_at,
            &r.last_delivered_at,
            &r.last_status,
            &r.dead_paged,
        ],
    )
    .await?;
    Ok(())
}

async fn count_state(tx: &Tx<'_>, stream: &str, state: &str) -> Result<u64, StoreError> {
    let n: i64 = get(&one(tx, sql::COUNT_STATE, &[&stream, &state]).await?, 0)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

async fn oldest_state(
    tx: &Tx<'_>,
    stream: &str,
    state: &str,
) -> Result<Option<Oldest>, StoreError> {
    let Some(r) = opt(tx, sql::OLDEST_STATE, &[&stream, &state]).await? else {
        return Ok(None);
    };
    Ok(Some(Oldest {
        delivery_id: get(&r, 0)?,
        event_type: get(&r, 1)?,
        subject: get(&r, 2)?,
        received_at: time(get(&r, 3)?)?,
    }))
}

async fn dead_letter_check(
    tx: &Tx<'_>,
    stream: &str,
    at: DateTime<Utc>,
    notifiers: &[String],
) -> Result<(), StoreError> {
    let paged = run(tx, stream).await?.dead_paged;
    let dead = count_state(tx, stream, "dead").await?;
    let Some(firing) = dead_letter_change(dead, paged) else {
        return Ok(());
    };
    let reason = match oldest_state(tx, stream, "dead").await? {
        Some(oldest) if firing => decide::dead_letter_summary(stream, dead, &oldest),
        _ => format!("{stream}: no dead letters are left (replayed or expired)."),
    };
    queue_keyed_pages(
        tx,
        &page(stream, firing, at, reason, notifiers),
        at,
        &dead_letter_alert(stream),
    )
    .await?;
    exec(tx, sql::SET_DEAD_PAGED, &[&stream, &firing]).await?;
    Ok(())
}

async fn lock_head(tx: &Tx<'_>, audit: bool) -> Result<(), StoreError> {
    super::silences::lock_head(tx, audit).await
}

pub(super) async fn settle(tx: &Tx<'_>, s: &ForwardSettle) -> Result<ForwardSettled, StoreError> {
    let c = &s.claim;
    lock_head(tx, s.policy.audit).await?;
    let before = run(tx, &c.stream).await?;
    let plan = plan_settle(s, before);
    let (status, error) = match &s.attempt {
        crate::store::forward::ForwardAttempt::Delivered { status } => {
            (Some(i64::from(*status)), None)
        }
        crate::store::forward::ForwardAttempt::Failed { error, status } => {
            (status.map(i64::from), Some(error.as_str()))
        }
    };
    let changed = exec(
        tx,
        sql::SETTLE,
        &[
            &c.id,
            &c.token,
            &plan.state,
            &plan.next_attempt_at,
            &error,
            &status,
            &plan.settled_at,
            &plan.prune_at,
        ],
    )
    .await?;
    if changed == 0 {
        return Ok(ForwardSettled::default());
    }
    write_run(tx, &c.stream, &plan.run).await?;
    if let (Some(audit_type), true) = (&plan.audit_type, s.policy.audit) {
        append_audit(
            tx,
            &audit_entry(
                &c.stream,
                Some(&c.delivery_id),
                audit_type.clone(),
                c.event_time,
                c.subject.as_deref(),
                s.at,
            ),
        )
        .await?;
    }
    if let Some(fp) = plan.failing_page {
        let pending = count_state(tx, &c.stream, "pending").await?;
        let oldest = oldest_state(tx, &c.stream, "pending").await?;
        let reason = failing_reason(
            &c.stream,
            &plan,
            s.at,
            pending,
            oldest.as_ref(),
            s.policy.ordered,
        );
        let (firing, severity) = match fp {
            FailingPage::Fire(step) => (true, step.severity),
            FailingPage::Resolve { .. } => (false, Severity::Warning),
        };
        queue_keyed_pages(
            tx,
            &page(&c.stream, firing, s.at, reason, &s.policy.notifiers),
            s.at,
            &failing_alert(&c.stream, severity),
        )
        .await?;
    }
    let mut moved = None;
    if plan.state == "delivered" {
        let moves: bool = get(
            &one(
                tx,
                "SELECT moves_clock FROM forwards WHERE id = $1",
                &[&c.id],
            )
            .await?,
            0,
        )?;
        if moves {
            advance_clock(tx, &clock_event(c, s.at)).await?;
            moved = stream_row(tx, &c.stream).await?;
        }
    }
    if plan.state == "dead" || (plan.state == "delivered" && plan.run.dead_paged) {
        dead_letter_check(tx, &c.stream, s.at, &s.policy.notifiers).await?;
    }
    Ok(ForwardSettled {
        settled: true,
        moved,
        dead: plan.state == "dead",
    })
}

pub(super) async fn replay(tx: &Tx<'_>, r: &ReplayRequest) -> Result<ReplayOutcome, StoreError> {
    lock_head(tx, r.audit && !r.dry_run).await?;
    let window = rows(
        tx,
        &format!("{} FOR UPDATE", sql::WINDOW),
        &[&r.stream, &ms(r.from), &ms(r.to)],
    )
    .await?
    .iter()
    .map(|row| {
        Ok((
            get(row, 0)?,
            ReplayItem {
                delivery_id: get(row, 1)?,
                event_type: get(row, 2)?,
                received_at: time(get(row, 3)?)?,
                state: get(row, 4)?,
            },
        ))
    })
    .collect::<Result<Vec<_>, StoreError>>()?;
    let (chosen, pending) = replay_selection(window, &r.types);
    if !r.dry_run {
        for (id, _) in &chosen {
            exec(tx, sql::REQUEUE, &[id, &ms(r.now)]).await?;
        }
        if r.audit {
            append_audit(tx, &replay_entry(r, chosen.len() as u64)).await?;
        }
        dead_letter_check(tx, &r.stream, r.now, &r.notifiers).await?;
    }
    Ok(replay_outcome(chosen, pending))
}

pub(super) async fn status(tx: &Tx<'_>) -> Result<Vec<ForwardStatus>, StoreError> {
    let counts = rows(tx, sql::SUMMARY, &[])
        .await?
        .iter()
        .map(|r| Ok((get(r, 0)?, get(r, 1)?, get(r, 2)?, get(r, 3)?)))
        .collect::<Result<Vec<_>, StoreError>>()?;
    let runs = rows(tx, sql::RUNS, &[])
        .await?
        .iter()
        .map(|r| {
            Ok((
                get(r, 0)?,
                get(r, 1)?,
                get(r, 2)?,
                get(r, 3)?,
                get(r, 4)?,
                get(r, 5)?,
            ))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(status_rows(counts, runs))
}

pub(super) async fn prune(
    tx: &Tx<'_>,
    now: DateTime<Utc>,
    notifiers: &std::collections::BTreeMap<String, Vec<String>>,
) -> Result<usize, StoreError> {
    let n = exec(tx, sql::PRUNE, &[&ms(now)]).await?;
    let paged: Vec<String> = rows(tx, sql::DEAD_PAGED_STREAMS, &[])
        .await?
        .iter()
        .map(|r| get(r, 0))
        .collect::<Result<_, _>>()?;
    for stream in paged {
        let to = notifiers.get(&stream).cloned().unwrap_or_default();
        dead_letter_check(tx, &stream, now, &to).await?;
    }
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

pub(super) async fn fate(
    tx: &Tx<'_>,
    stream: &str,
    delivery_id: &str,
) -> Result<Option<StoredFate>, StoreError> {
    let Some(r) = opt(tx, sql::FATE, &[&stream, &delivery_id]).await? else {
        return Ok(None);
    };
    Ok(Some(StoredFate {
        state: get(&r, 0)?,
        received_at: time(get(&r, 1)?)?,
        settled_at: opt_time(get(&r, 2)?)?,
        status: get::<Option<i64>>(&r, 3)?.and_then(|s| u16::try_from(s).ok()),
    }))
}
