//! The storage interface: one trait whose methods are domain operations.
//! Almost every operation is one function written over `store::db::Db` in
//! its module and declared once in the [`operations`] list below, which
//! gives it its method and both engines' bodies; `Backend` itself keeps the
//! few that differ per engine (group-commit ingest, closing). Each backend
//! holds the clock the store was opened with, so an operation that stamps
//! its own instant takes none from its callers. `Store` is a facade holding
//! an `Arc<dyn Backend>`; callers never see which engine they talk to. The
//! shared conformance suite (`store::conformance`) runs every behaviour
//! against every backend, in the way River's `riverdriver` interface is
//! checked by `riverdrivertest`.
//!
//! Contract for every implementation:
//! - a method resolves `Ok` only after its work committed durably, so a 2xx
//!   may follow at once; on `Err` nothing of it was acknowledged;
//! - instants are stored at millisecond resolution;
//! - a stream's last arrival only moves forward;
//! - a transition and its outbox rows commit together, and a fire commits
//!   only if the stored silence still starts where the evaluation's did.

use async_trait::async_trait;
use tokio::sync::broadcast;

use prelude::*;

pub type StoreResult<T> = Result<T, StoreError>;

/// See the module documentation. Every method is one transaction.
#[async_trait]
pub trait Backend: Operations + Send + Sync + 'static {
    /// `sqlite` or `postgres`, for logs and `/v1/status`.
    fn engine(&self) -> &'static str;

    /// Transactions committed so far (group commit makes this grow slower
    /// than the number of calls on SQLite); for tests and benchmarks.
    fn commits(&self) -> u64;

    /// Work waiting for the database behind what is in progress
    /// (`hushwatch_store_queue_depth`).
    fn queue_depth(&self) -> usize;

    /// The store's clock (the database server's on PostgreSQL): the one the
    /// backend was opened with, which stamps the operations that take no
    /// instant (outbox `created_at`, the readiness probe, leases).
    fn now(&self) -> DateTime<Utc>;

    /// Stores one request's worth of events (dedup, audit append, clock
    /// advance; see `core::record_event` for the per-event rules) at the
    /// store clock's now. Either all of them are committed or the call fails.
    async fn record_events(&self, events: Vec<NewEvent>) -> StoreResult<Vec<EventOutcome>>;

    /// `record_events` at `now`, with what the delivery said about provider
    /// subscriptions, plus the committed row of every stream an accepted
    /// clock-feeding event moved (each once, in first-event order), read in
    /// the same transaction: the store decides how an arrival moves a
    /// clock, and the service's cache takes these rows.
    async fn record_delivery_rows(
        &self,
        events: Vec<NewEvent>,
        update: Option<SubscriptionUpdate>,
        now: DateTime<Utc>,
    ) -> StoreResult<(Vec<EventOutcome>, Vec<StreamRow>)>;

    /// The stream rows changed since `since` (a cursor an earlier call
    /// returned; `None`: every row) and the cursor for the next call. An
    /// engine without change tracking returns every row and no cursor.
    async fn streams_changed(
        &self,
        since: Option<i64>,
    ) -> StoreResult<(Vec<StreamRow>, Option<i64>)> {
        let _ = since;
        Ok((self.streams().await?, None))
    }

    /// Streams whose arrival a commit moved, on any replica.
    fn changes(&self) -> broadcast::Receiver<Change>;

    /// Finishes queued work and releases the connection(s). Other handles
    /// get `Closed` afterwards; closing twice is `Ok`.
    async fn close(&self) -> StoreResult<()>;

    /// For backend-specific tests only.
    #[cfg(any(test, feature = "test-support"))]
    fn as_any(&self) -> &dyn std::any::Any;
}

/// The operations whose whole work is one function written over
/// `store::db::Db`, each declared once: this list gives each its
/// [`Operations`] method and both engines' bodies (`sqlite`, `pg`), so an
/// operation is written here and in its module, nowhere else.
///
/// `fn name(arg: Type, ..) -> Out = path(args..);` is one transaction
/// running `path(db, args..)` (`&arg` where the function borrows).
/// `= |clock_now| path(args..)` first reads the store's clock
/// ([`Backend::now`]) into `clock_now` for the arguments to name: an
/// operation that stamps the store's own instant takes none from its
/// callers. That name is the only one allowed there (`declare` checks), so
/// the reading never shadows a parameter (such as the `now` of an
/// operation whose callers pass their own instant).
///
/// An operation only tests call (to set up or read state: an unfenced
/// attempt, a transition without the silence check) is `#[cfg(test)]`, so
/// the service cannot reach it by mistake; the conformance suite still
/// covers it on both engines.
macro_rules! operations {
    ($then:ident) => {
        $then! {
            /// Inserts missing streams with `watch_started_at = now`; returns the
            /// rows for `names` in that order.
            fn watch_streams(names: Vec<String>, now: DateTime<Utc>) -> Vec<StreamRow>
                = crate::core::watch_streams(&names, now);
            /// Streams created from a template, by name.
            fn templated_streams() -> Vec<String> = crate::core::templated_streams();
            /// Creates a templated stream (at most `max` exist).
            fn add_templated_stream(name: String, now: DateTime<Utc>, max: usize) -> TemplatedOutcome
                = crate::core::add_templated_stream(&name, now, max);
            /// Forgets a templated stream; false if it did not exist.
            fn remove_templated_stream(name: String) -> bool
                = crate::core::remove_templated_stream(&name);
            /// Persists an alert transition plus one pending outbox row per
            /// notifier (created now), atomically. Returns `Ok(false)`, writing
            /// nothing, when the stream is already in `t.to`, so re-evaluating
            /// after a crash is idempotent.
            #[cfg(any(test, feature = "test-support"))]
            fn record_transition(t: Transition) -> bool
                = |clock_now| crate::core::record_transition(&t, clock_now);
            /// Records a silence alert transition only if the evaluation behind it
            /// still holds inside the transaction: a fire needs the stored silence to
            /// start where the evaluation's did (`silent_since`, its last arrival or
            /// watch start), so a fire computed before an event committed is
            /// withdrawn instead of paging and resolving at once. Resolves need no
            /// such check (arrivals only move forward, so a stream heard from stays
            /// heard from) and are never withdrawn.
            fn record_transition_if_silent(t: Transition, silent_since: DateTime<Utc>) -> TransitionOutcome
                = |clock_now| crate::core::record_transition_if_silent(&t, silent_since, clock_now);
            /// All stream rows, ordered by name.
            fn streams() -> Vec<StreamRow> = crate::core::streams();
            /// Outbox rows not yet marked done, oldest first, and those of them
            /// this binary cannot read.
            fn pending_outbox() -> Readable<OutboxRow> = crate::outbox::pending_outbox();
            /// Marks an outbox row delivered. Idempotent: a row already done keeps
            /// its first done time, and an unknown id is a no-op.
            #[cfg(any(test, feature = "test-support"))]
            fn mark_outbox_done(id: i64, at: DateTime<Utc>) -> ()
                = crate::outbox::mark_outbox_done(id, at);
            /// Records one delivery attempt's outcome on a pending outbox row.
            #[cfg(any(test, feature = "test-support"))]
            fn record_attempt(id: i64, attempt: Attempt) -> ()
                = crate::outbox::record_attempt(id, &attempt);
            /// Queues reminder or escalation pages for the stream's current firing
            /// episode, once per (kind, step, notifier); returns how many were new.
            fn enqueue_extra(
                stream: String,
                kind: PageKind,
                step: i64,
                notifiers: Vec<String>,
                at: DateTime<Utc>
            ) -> usize
                = crate::outbox::enqueue_extra(&stream, kind, step, &notifiers, at);
            /// Issue #19: queues a fallback-ladder page about notifier `about` to
            /// each of `t.notifiers` (a keyed alert: one alert id per failing
            /// notifier, shared by its steps and its recovery page).
            #[cfg(any(test, feature = "test-support"))]
            fn queue_fallback_pages(t: Transition, about: String) -> ()
                = crate::outbox::queue_fallback_pages(&t, &about);
            /// What /v1/status shows about notifications: counts per notifier
            /// and the 20 newest failed pages.
            fn outbox_summary() -> OutboxSummary = crate::outbox::outbox_summary(20);
            /// Delivered firing pages of alerts still firing (for re-posting).
            fn active_firing_pages() -> Readable<OutboxRow> = crate::outbox::active_firing_pages();
            /// Delete seen_deliveries older than `before` (callers pass now - 7
            /// days); returns rows deleted.
            fn prune_seen(before: DateTime<Utc>) -> usize = crate::core::prune_seen(before);
            /// Writes a checkpoint of the audit chain head (HMAC-signed with `key`).
            fn audit_checkpoint(now: DateTime<Utc>, key: Option<Vec<u8>>) -> Option<Checkpoint>
                = crate::audit::audit_checkpoint(now.timestamp_millis(), key.as_deref());
            /// Prunes audit entries received before `before`; returns how many.
            fn audit_prune(before: DateTime<Utc>) -> usize
                = crate::audit::audit_prune(before.timestamp_millis());
            /// Deletes up to `limit` event rows received before `before`.
            fn prune_events(before: DateTime<Utc>, limit: i64) -> usize
                = crate::core::prune_events(before, limit);
            /// A real write through the normal commit path, for /readyz: proves the
            /// database still accepts writes (and, on SQLite, the disk fsyncs).
            fn probe() -> () = |clock_now| crate::core::probe(clock_now);
            /// How many events a stream has stored (rows plus audit entries).
            #[cfg(any(test, feature = "test-support"))]
            fn event_count(stream: String) -> u64 = crate::core::event_count(&stream);
            /// Relay mode (`store::forward`): claims due forwards that head
            /// their queue, within `room` (in all and per stream), with a
            /// lease and a fencing token; also when the next one (of any
            /// replica) becomes due.
            fn claim_forwards(
                replica: String,
                now: DateTime<Utc>,
                lease: TimeDelta,
                room: crate::forward::ClaimRoom
            ) -> (Vec<ForwardClaim>, Option<DateTime<Utc>>)
                = crate::forward::claim(&replica, now, lease, &room);
            /// Ends every forward lease. Only for one process that owns its
            /// database (SQLite at start): the leases are its dead predecessor's.
            fn release_forward_leases() -> usize = crate::forward::release();
            /// Records an attempt's outcome for the current claim holder only,
            /// with the stream's failure run, its pages, its audit entry and (for
            /// `clock = "delivered"`) the clock move, in one transaction.
            fn settle_forward(settle: ForwardSettle) -> ForwardSettled
                = crate::forward::settle(&settle);
            /// One transaction of a replay (`store::forward_admin`): re-queues
            /// (or, dry run, counts) at most `chunk.rows` stored deliveries of
            /// its scope after its cursor; the last chunk audits the total.
            /// `Store::replay_forwards` runs a whole replay.
            fn replay_forwards_chunk(chunk: ReplayChunk) -> ReplayStep
                = crate::forward_admin::replay_chunk(&chunk);
            /// Issue #44, `forward list`: the oldest `limit` undelivered rows of
            /// a stream (of one state, if given) and how many there are.
            fn list_forwards(stream: String, state: Option<String>, limit: i64) -> ForwardList
                = crate::forward_admin::list(&stream, state.as_deref(), limit);
            /// `forward retry`: one pending event, or every one of the stream,
            /// due now (held ones stay held), audited.
            fn retry_forwards(action: OperatorAction, delivery_id: Option<String>) -> RetryOutcome
                = crate::forward_admin::retry(&action, delivery_id.as_deref());
            /// `forward skip`: a pending or held event becomes a dead letter now,
            /// audited and paged as any dead letter.
            fn skip_forward(action: OperatorAction, delivery_id: String) -> Verdict
                = crate::forward_admin::skip(&action, &delivery_id);
            /// Pending and held rows of a stream (what deleting it leaves unsent).
            fn undelivered_forwards(stream: String) -> u64
                = crate::forward_admin::undelivered(&stream);
            /// Up to `limit` pending or held rows of a stream deleted with force
            /// become dead letters, audited and paged; how many.
            fn give_up_forwards(action: OperatorAction, limit: i64) -> u64
                = crate::forward_admin::give_up(&action, limit);
            /// Removes a templated stream in one transaction with the count of
            /// its undelivered events (refused without `force`; with it they
            /// become dead letters in the same transaction).
            fn remove_templated_stream_settled(action: OperatorAction, force: bool) -> StreamRemoval
                = crate::forward_admin::remove_stream(&action, force);
            /// Each forwarding stream's pending, dead letters and failure run.
            fn forward_status() -> Vec<ForwardStatus> = crate::forward::status();
            /// Deletes bodies past their retention; `notifiers` per stream pages
            /// the resolve of a dead-letter alert whose last letter expired.
            fn prune_forwards(now: DateTime<Utc>, notifiers: BTreeMap<String, Vec<String>>) -> usize
                = crate::forward::prune(now, &notifiers);
            /// Applies a start's or reload's config to the stored forwards: each
            /// stream's order on its waiting rows, held rows released when their
            /// cause is gone, rows of streams without `[forward]` held, the
            /// plaintext mark, the held alerts.
            fn align_forwards(alignment: ForwardAlignment) -> Aligned
                = crate::forward::align(&alignment);
            /// A stream's `critical_after` page: fires once a revocation waited
            /// that long undelivered, resolves when none is left undelivered.
            fn escalate_forwards(escalation: ForwardEscalation) -> Option<bool>
                = crate::forward::escalate(&escalation);
            /// What became of the newest stored delivery naming `subject`.
            fn forward_fate(stream: String, delivery_id: String) -> Option<StoredFate>
                = crate::forward::fate(&stream, &delivery_id);
            /// Records a provider subscription's warning alert moving (see
            /// `subscriptions::transition`); false when it was already there.
            fn subscription_transition(t: SubscriptionTransition) -> bool
                = crate::subscriptions::transition(&t);
            /// Every tracked provider subscription.
            fn subscriptions() -> Vec<SubscriptionRow>
                = crate::subscriptions::all();
            /// Records an operational webhook and applies it to the endpoint's state,
            /// queueing any pages it causes, all in one transaction.
            fn record_svix(event: NewEvent, apply: SvixApply) -> (EventOutcome, Vec<SvixPage>)
                = crate::svix::record(&event, &apply);
            /// Acknowledges lost messages: (acknowledged now, still lost, pages).
            fn svix_acknowledge(apply: SvixApply, endpoint_id: String, msg_ids: Vec<String>) -> (usize, u64, Vec<SvixPage>)
                = crate::svix::acknowledge(&apply, &endpoint_id, &msg_ids);
            /// `svix_acknowledge`, and `entry` appended to the audit log in the same
            /// transaction when at least one message was acknowledged (an
            /// acknowledgement can resolve a critical alert).
            fn svix_acknowledge_audited(apply: SvixApply, endpoint_id: String, msg_ids: Vec<String>, entry: Option<NewEvent>) -> (usize, u64, Vec<SvixPage>)
                = crate::svix_ack::acknowledge_audited(&apply, &endpoint_id, &msg_ids, entry.as_ref());
            /// Endpoints (id, uid) of `source` whose lost count grew since their last page.
            #[cfg(any(test, feature = "test-support"))]
            fn svix_grown(source: String) -> Vec<(String, Option<String>)>
                = crate::svix::grown(&source);
            /// Queues one updated exhausted page for `endpoint_id`, if still grown.
            fn svix_regroup(apply: SvixApply, endpoint_id: String) -> Vec<SvixPage>
                = crate::svix::regroup(&apply, &endpoint_id);
            fn svix_endpoints() -> Vec<SvixEndpointRow>
                = crate::svix::endpoints(None);
            /// Up to `cap` newest events per stream received since `since`, newest
            /// first (for the status page's timeline).
            fn recent_arrivals(streams: Vec<String>, since: DateTime<Utc>, cap: i64) -> Vec<(String, Vec<Arrival>)>
                = crate::status::recent_arrivals(&streams, since, cap);
            /// The audit chain's head and its newest checkpoint.
            fn audit_summary() -> AuditSummary
                = crate::status::audit_summary();
            /// Operator silences and acknowledgements (see `store::silences`):
            /// stores a silence; `None` when `cap` silences have not ended yet.
            fn add_silence(silence: NewSilence, cap: usize, audit: bool) -> Option<i64>
                = |clock_now| crate::silences::add(&silence, clock_now, cap, audit);
            /// Ends a silence now; false when there is no such silence.
            fn expire_silence(id: i64, by: String, comment: Option<String>, audit: bool) -> bool
                = |clock_now| crate::silences::expire(id, &by, comment.as_deref(), clock_now, audit);
            /// Silences that end after `since`, oldest first.
            fn silences(since: DateTime<Utc>) -> Vec<SilenceRow>
                = crate::silences::silences_ending_after(since);
            /// Acknowledges the stream's current firing episode.
            fn acknowledge(stream: String, created_by: String, comment: String, audit: bool) -> AckOutcome
                = |clock_now| crate::silences::acknowledge(&stream, &created_by, &comment, clock_now, audit);
            /// Stores the configured maintenance windows as silences (see
            /// `silences::sync_maintenance`).
            fn sync_maintenance(windows: Vec<(String, DateTime<Utc>, DateTime<Utc>, String)>, audit: bool) -> ()
                = |clock_now| crate::silences::sync_maintenance(&windows, clock_now, audit);
            /// Acknowledgements of episodes still firing.
            fn current_acks() -> Vec<AckRow>
                = crate::silences::current_acks();
            /// Queues the firing pages that silences held and that may go out now;
            /// returns how many alerts (stream episodes or keyed alerts) were paged,
            /// and the held pages this binary cannot read (they stay held).
            fn release_held() -> Released
                = |clock_now| crate::silences::release_held(clock_now);
            /// Claims up to `limit` due outbox rows for `replica`, leased for
            /// `lease` from now on the store's clock (see `store::replica`).
            fn claim_outbox(replica: String, lease: TimeDelta, limit: i64) -> Vec<Claim>
                = |clock_now| crate::replica::claim_outbox(&replica, clock_now, lease, limit);
            /// Records an attempt on a claimed row if `token` is still its claim.
            #[cfg(any(test, feature = "test-support"))]
            fn settle_claim(id: i64, token: i64, attempt: Attempt) -> bool
                = crate::replica::settle_claim(id, token, &attempt);
            /// Issue #19: `settle_claim` (or `record_attempt` without a token) plus
            /// the fallback ladder's shared count and pages, in one transaction.
            fn settle_counted(id: i64, token: Option<i64>, attempt: Attempt, update: super::ladder::LadderUpdate) -> super::ladder::LadderOutcome
                = crate::ladder::settle_counted(id, token, &attempt, &update);
            /// Issue #19: consecutive failed attempts per notifier, shared.
            fn notifier_failures() -> Vec<(String, i64)>
                = crate::ladder::failures();
            /// Renews `replica`'s leader lease in `term`, takes a new term if the
            /// lease is free, or reports who holds it (see `store::replica`).
            fn elect(replica: String, term: Option<i64>, ttl: TimeDelta) -> Leadership
                = |clock_now| crate::replica::elect(&replica, term, clock_now, ttl);
            /// Gives the lease up early (at shutdown) if `replica` holds it in `term`.
            fn resign(replica: String, term: i64) -> bool
                = crate::replica::resign(&replica, term);
            /// Marks `replica` alive now.
            fn heartbeat(replica: String) -> ()
                = |clock_now| crate::replica::heartbeat(&replica, clock_now);
            /// Replicas whose last heartbeat is at or after `seen_since`.
            fn replicas(seen_since: DateTime<Utc>) -> Vec<ReplicaRow>
                = crate::replica::replicas(seen_since);
            /// Stores a reconciliation report once per (stream, id), with its audit
            /// entry and its `revoke_missed` page, and moves the stream's last
            /// reconciliation instant; `Ok(false)`, writing nothing, for a known id.
            fn record_reconciliation(report: NewReconciliation) -> bool
                = |clock_now| crate::reconcile::record(&report, clock_now);
            fn reconcile_states() -> Vec<ReconcileRow>
                = crate::reconcile::states();
            /// Compare-and-set on a stream's missing-reconciliation alert plus its
            /// pages; `Ok(false)` when it is already in `t.to`.
            fn reconcile_transition(t: ReconcileTransition) -> bool
                = crate::reconcile::transition(&t);
            /// Records a stale grant once per (stream, delivery id) with its page;
            /// `Ok(false)`, writing nothing, when it was recorded before.
            #[cfg(any(test, feature = "test-support"))]
            fn record_stale_grant(g: StaleGrant) -> bool
                = |clock_now| crate::reconcile::record_stale(&g, clock_now);
            /// `store::revocations`: the subject's newest indexed revocation.
            fn latest_revocation(stream: String, subject: String) -> Option<super::revocations::Revocation>
                = crate::revocations::latest(&stream, &subject);
            /// Forgets indexed revocations received before `before`; rows deleted.
            fn prune_revocations(before: DateTime<Utc>) -> usize
                = crate::revocations::prune(before);
            /// Each stream's latest reconciliation report (by arrival).
            fn latest_reconciliations() -> Vec<super::reconcile::LatestReport>
                = crate::reconcile::latest_reports();
            /// When the stale grant of a delivery was recorded, if it was.
            fn stale_grant_recorded_at(stream: String, delivery_id: String) -> Option<DateTime<Utc>>
                = crate::revocations::stale_recorded_at(&stream, &delivery_id);
            /// The newest `limit` audit entries naming `subject`, newest first; with
            /// a window, only those of that stream received since that instant
            /// (an index range, where the whole log would be a scan).
            fn subject_entries(subject: String, window: Option<(String, DateTime<Utc>)>, limit: i64) -> Vec<SubjectEntry>
                = crate::reconcile::subject_entries(&subject, window.as_ref(), limit);
            /// Adds each learned gap count to the stored one for its (stream,
            /// day, bucket): additive, so replicas never overwrite each other's
            /// gaps.
            fn add_gap_counts(deltas: Vec<super::gaps::GapCount>) -> ()
                = crate::gaps::add(&deltas);
            /// The stored gap counts of `since` and later days.
            fn gap_counts(since: chrono::NaiveDate) -> Vec<super::gaps::GapCount>
                = crate::gaps::load(since);
            /// Deletes the gap counts of days before `before`.
            fn prune_gap_counts(before: chrono::NaiveDate) -> usize
                = crate::gaps::prune(before);
            /// Issue #30: claims an `Idempotency-Key` record now, or says who
            /// has it (see `store::idempotency`); one statement, so of concurrent
            /// callers on any replica exactly one gets `Claimed`.
            fn idempotency_begin(key: super::idempotency::IdempotencyKey) -> super::idempotency::Begun
                = |clock_now| crate::idempotency::begin(&key, clock_now);
            /// Stores the 2xx answer of the claim made at `started`; false when
            /// that claim is no longer the record's.
            fn idempotency_finish(key: super::idempotency::IdempotencyKey, started: DateTime<Utc>, answer: super::idempotency::StoredAnswer) -> bool
                = crate::idempotency::finish(&key, started, &answer);
            /// Deletes the `running` record of the claim made at `started`.
            fn idempotency_release(key: super::idempotency::IdempotencyKey, started: DateTime<Utc>) -> bool
                = crate::idempotency::release(&key, started);
            /// Deletes the records that expired by now; how many went.
            fn prune_idempotency() -> usize
                = |clock_now| crate::idempotency::prune(clock_now);
            /// Issue #30: stores an acknowledge-link code (its SHA-256) for the
            /// episode of `stream` that started at `started_at`, valid for `ttl`,
            /// after deleting the expired codes; false (and nothing stored) when
            /// that episode is no longer the stream's firing one.
            fn mint_ack_code(code: [u8; 32], stream: String, started_at: DateTime<Utc>, ttl: TimeDelta) -> bool
                = |clock_now| crate::ack_codes::mint(
                    &code, &stream, started_at, clock_now, hushwatch_core::domain::ack_link::expiry(clock_now, ttl)
                );
            /// What an acknowledge-link code (by its hash) opens now; changes nothing.
            fn open_ack_code(code: [u8; 32]) -> super::ack_codes::LinkState
                = |clock_now| crate::ack_codes::open(&code, clock_now);
            /// Uses an acknowledge-link code: acknowledges its episode as
            /// `acknowledge` does (`created_by` "link") and, in the same
            /// transaction, deletes the code and retires the episode's others.
            fn confirm_ack_code(code: [u8; 32], audit: bool) -> super::ack_codes::LinkUse
                = |clock_now| crate::ack_codes::confirm(&code, clock_now, audit);
            /// Deletes the expired codes and those of ended episodes; how many went.
            fn prune_ack_codes() -> usize
                = |clock_now| crate::ack_codes::prune(clock_now);
            /// Issue #45 (`store::crosscheck`): a stream's cross-check bookkeeping.
            fn crosscheck_state(stream: String) -> Option<super::crosscheck::CrosscheckRow>
                = crate::crosscheck::state(&stream);
            /// Adds one page of a provider listing to snapshot `generation`.
            fn crosscheck_put_snapshot(stream: String, generation: i64, entries: Vec<(hushwatch_core::domain::crosscheck::Entry, Option<String>)>) -> ()
                = crate::crosscheck::put_snapshot(&stream, generation, &entries);
            /// The changes between two snapshot generations (at most `limit` each way).
            fn crosscheck_snapshot_changes(stream: String, previous: i64, current: i64, limit: i64) -> Vec<(hushwatch_core::domain::crosscheck::Change, Option<String>)>
                = crate::crosscheck::snapshot_changes(&stream, previous, current, limit);
            /// Whether snapshot `generation` lists `entry`.
            fn crosscheck_snapshot_has(stream: String, generation: i64, entry: hushwatch_core::domain::crosscheck::Entry) -> bool
                = crate::crosscheck::snapshot_has(&stream, generation, &entry);
            /// The unexplained changes waiting for a later poll.
            fn crosscheck_pending(stream: String) -> Vec<hushwatch_core::domain::crosscheck::Pending>
                = crate::crosscheck::pending(&stream);
            /// Which of `ids` the stream received (webhook or healed).
            fn crosscheck_received(stream: String, ids: Vec<String>) -> Vec<bool>
                = crate::crosscheck::received(&stream, &ids);
            /// Stores findings once per key; returns the keys that were new.
            fn crosscheck_record_findings(stream: String, findings: Vec<hushwatch_core::domain::crosscheck::Finding>, at: DateTime<Utc>) -> Vec<String>
                = crate::crosscheck::record_findings(&stream, &findings, at);
            /// Stores event-log findings with their sealed logged bodies.
            fn crosscheck_record_logged(stream: String, findings: Vec<(hushwatch_core::domain::crosscheck::Finding, crate::seal::Sealed)>, at: DateTime<Utc>) -> Vec<String>
                = crate::crosscheck::record_logged(&stream, &findings, at);
            /// Open findings that keep a logged body, oldest first.
            fn crosscheck_open_logged(stream: String, limit: i64) -> Vec<(hushwatch_core::domain::crosscheck::Finding, crate::seal::Sealed)>
                = crate::crosscheck::open_logged(&stream, limit);
            /// A stream's findings, newest first.
            fn crosscheck_findings(stream: String, open_only: bool, limit: i64) -> Vec<super::crosscheck::StoredFinding>
                = crate::crosscheck::findings(&stream, open_only, limit);
            /// Marks an open finding healed or acknowledged.
            fn crosscheck_settle_finding(stream: String, key: String, healed: bool) -> bool
                = |clock_now| crate::crosscheck::settle_finding(&stream, &key, healed, clock_now);
            /// Issue #45: one `provider_missed` page naming every finding of the
            /// stream no page named yet; the named findings and the total.
            fn crosscheck_page_missed(target: super::crosscheck::PageTarget, now: DateTime<Utc>) -> (Vec<hushwatch_core::domain::crosscheck::Finding>, usize)
                = crate::crosscheck::page_missed(&target, now);
            /// Issue #45: acknowledges the open findings of the stream's
            /// `provider_missed` pages and resolves them; how many findings.
            fn crosscheck_acknowledge(stream: String) -> usize
                = |clock_now| crate::crosscheck::acknowledge_paged(&stream, clock_now);
            /// Issue #45: resolves the `provider_missed` pages whose findings
            /// are all settled; how many.
            fn crosscheck_resolve_settled(stream: String, now: DateTime<Utc>) -> usize
                = crate::crosscheck::resolve_settled(&stream, now);
            /// Issue #45: moves the `crosscheck_failing` alert to `health`;
            /// whether a page was queued.
            fn crosscheck_set_failing(target: super::crosscheck::PageTarget, health: hushwatch_core::domain::crosscheck::PollHealth, now: DateTime<Utc>) -> bool
                = crate::crosscheck::set_failing(&target, &health, now);
            /// Commits a poll's end if no other poll committed since `started`.
            fn crosscheck_finish_poll(stream: String, started: Option<super::crosscheck::CrosscheckRow>, end: super::crosscheck::PollEnd) -> bool
                = crate::crosscheck::finish_poll(&stream, started.as_ref(), &end);
            /// Every stream's cross-check row with its open findings counted
            /// (`store::crosscheck_view`): `/v1/status`, the page, `hushwatch status`.
            fn crosscheck_overview() -> Vec<super::crosscheck_view::CrosscheckOverview>
                = crate::crosscheck_view::overview();
            /// The findings about one subject (any of its stored `forms`), oldest first.
            fn crosscheck_subject_findings(forms: Vec<String>, limit: usize) -> Vec<(String, super::crosscheck::StoredFinding)>
                = crate::crosscheck_view::subject_findings(&forms, limit);
            /// Which of `keys` the stream has stored as findings (a dry run's "new").
            fn crosscheck_known_findings(stream: String, keys: Vec<String>) -> Vec<bool>
                = crate::crosscheck_view::known_findings(&stream, &keys);
            /// Deletes a snapshot generation the stream's state does not point at.
            fn crosscheck_drop_generation(stream: String, generation: i64) -> u64
                = crate::crosscheck_view::drop_generation(&stream, generation);
        }
    };
}
pub(super) use operations;

/// The types [`operations`] names, for the engines that expand it.
pub(super) mod prelude {
    pub(crate) use super::super::forward::{
        Aligned, ForwardAlignment, ForwardClaim, ForwardEscalation, ForwardSettle, ForwardSettled,
        ForwardStatus, StoredFate,
    };
    pub(crate) use super::super::forward_admin::{
        ForwardList, OperatorAction, ReplayChunk, ReplayStep, RetryOutcome, StreamRemoval,
    };
    #[cfg(any(test, feature = "test-support"))]
    pub(crate) use super::super::reconcile::StaleGrant;
    pub(crate) use super::super::reconcile::{
        NewReconciliation, ReconcileRow, ReconcileTransition, SubjectEntry,
    };
    pub(crate) use super::super::replica::{Change, Claim, Leadership, ReplicaRow};
    pub(crate) use super::super::silences::{AckOutcome, AckRow, NewSilence, SilenceRow};
    pub(crate) use super::super::status::{Arrival, AuditSummary};
    pub(crate) use super::super::subscriptions::{
        SubscriptionRow, SubscriptionTransition, SubscriptionUpdate,
    };
    pub(crate) use super::super::svix::{SvixApply, SvixEndpointRow, SvixPage};
    pub(crate) use super::super::{
        Attempt, EventOutcome, NewEvent, OutboxRow, OutboxSummary, PageKind, Readable, Released,
        StoreError, StreamRow, TemplatedOutcome, Transition, TransitionOutcome,
    };
    pub(crate) use chrono::{DateTime, TimeDelta, Utc};
    pub(crate) use hushwatch_core::audit::checkpoint::Checkpoint;
    pub(crate) use hushwatch_core::domain::forward_ops::Verdict;
    pub(crate) use std::collections::BTreeMap;
}

/// [`operations`]' methods, declared.
macro_rules! declare {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $out:ty
            = $(|$now:ident|)? $($f:ident)::+ ($($call:expr),* $(,)?);
    )*) => {
        /// The operations of [`operations`]: every `Backend` has them.
        #[async_trait]
        pub trait Operations: Send + Sync + 'static {
            $( $(#[$doc])* async fn $name(&self, $($arg: $ty),*) -> StoreResult<$out>; )*
        }
        $($( clock_now_only!($now); )?)*
    };
}

/// Matches only `clock_now`: any other name in [`operations`]' `|…|` fails
/// to compile.
macro_rules! clock_now_only {
    (clock_now) => {};
}
operations!(declare);
