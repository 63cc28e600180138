//! One cross-check poll of a delta feed (issue #48, Entra ID): run each
//! collection's round from its stored link, keep the revocations it
//! reports as pending changes, decide them against the change
//! notifications the stream received (`domain::crosscheck_entra`), and
//! commit the new links with the findings in one `finish_poll`.
//!
//! - **Links.** The stream's `log_cursor` holds a small JSON object
//!   ([`Cursor`]): per collection the link to ask next (a delta link, or a
//!   next link when the last poll stopped mid-round), plus the note of a
//!   resync. A link carries Graph's state token and no credential (the
//!   token goes in a header), so it is stored as Graph gave it. The
//!   compare-and-set of `finish_poll` on the cursor keeps two replicas
//!   from both committing a round.
//! - **Baseline.** A collection without a link starts a fresh round: the
//!   whole directory, read page by page and dropped (nothing is held);
//!   only its final delta link is kept. It pages nothing.
//! - **Expired links.** Graph forgets a link after 7 days (`400
//!   syncStateNotFound`). The round restarts from a full listing as a new
//!   baseline, so nothing that happened meanwhile is read as a change (no
//!   flood of false findings), and the gap is said out loud: until the next
//!   ordinary poll, `crosscheck_failing` is a **warning** naming the
//!   unchecked interval ([`resync_warning`]). A warning of the existing
//!   alert, rather than a page of its own, because it is the same fact
//!   (the cross-check did not check for a while), resolves the same way
//!   (the next good poll), and needs no new page kind.
//! - **Bounded.** A round stops at the page that brings its changes to
//!   [`MAX_DELTA_CHANGES`] and keeps that page's next link: the next poll
//!   goes on from it, as the WorkOS poll goes on from its cursor.

use super::crosscheck_report::{revealed, PollFailure, PollReport};
use crate::config::crosscheck::CrosscheckConfig;
use crate::crosscheck::{DeltaAnswer, DeltaFeed, DeltaNext, PollError, MAX_PAGES};
use crate::domain::crosscheck::{Change, Entry, Finding, Pending, PollHealth, Verdict};
use crate::domain::crosscheck_entra::{decide, DeltaChange, Notified};
use crate::store::crosscheck::{CrosscheckRow, PollEnd};
use crate::store::veil::Veil;
use crate::store::{Store, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Changes one round collects before it stops and goes on next poll.
pub const MAX_DELTA_CHANGES: usize = 1_000;
/// Notifications read per subject when explaining a change.
const EXPLAIN_LOOKUP: i64 = 200;

/// What `log_cursor` holds for a delta stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cursor {
    /// Collection → the link to ask next.
    pub links: BTreeMap<String, String>,
    /// Set by a poll that had to restart from a full listing because a
    /// link had expired; cleared by the next ordinary poll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync: Option<Resync>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resync {
    /// When the new baseline was taken (ms).
    pub at: i64,
    /// The last successful poll before it (ms), if any: changes after it
    /// and before `at` were never compared.
    pub unchecked_since: Option<i64>,
}

impl Cursor {
    pub fn read(row: Option<&CrosscheckRow>) -> Cursor {
        row.and_then(|r| r.log_cursor.as_deref())
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default()
    }

    fn text(&self) -> Option<String> {
        serde_json::to_string(self).ok()
    }
}

/// Runs one delta poll. `commit` false is `--dry-run`: the same rounds and
/// decisions, nothing stored (a delta link may be asked again).
#[allow(clippy::too_many_arguments)]
pub(super) async fn poll_delta(
    store: &Store,
    stream: &str,
    config: &CrosscheckConfig,
    feed: &dyn DeltaFeed,
    veil: &Veil,
    now: DateTime<Utc>,
    started: Option<CrosscheckRow>,
    commit: bool,
) -> Result<PollReport, PollFailure> {
    let before = Cursor::read(started.as_ref());
    let since = started.as_ref().and_then(|r| r.last_poll_at).unwrap_or(now);
    let mut after = Cursor::default();
    let mut changes: BTreeSet<DeltaChange> = BTreeSet::new();
    let mut restored: Vec<DeltaChange> = Vec::new();
    let mut fresh_rounds = 0;
    let mut resynced = false;
    for &collection in feed.collections() {
        let round = run_round(feed, collection, before.links.get(collection).cloned()).await?;
        if round.fresh {
            fresh_rounds += 1;
        }
        resynced |= round.expired;
        changes.extend(round.changes);
        restored.extend(round.restored);
        after.links.insert(collection.to_owned(), round.link);
    }
    if resynced {
        after.resync = Some(Resync {
            at: now.timestamp_millis(),
            unchecked_since: started
                .as_ref()
                .and_then(|r| r.last_success_at)
                .map(|t| t.timestamp_millis()),
        });
    }
    let baseline = fresh_rounds == feed.collections().len();

    // Stored under `[store] encryption_key` like every subject id; decided
    // over the stored forms, reported in plaintext.
    let mut waiting: Vec<Pending> = store
        .crosscheck_pending(stream.to_owned())
        .await?
        .into_iter()
        .map(|p| rehidden(veil, p))
        .collect();
    // A change waiting from an earlier poll that this poll shows undone (the
    // user can sign in again, the member is back) is no revocation the app
    // missed: it settles, as a Clerk listing that shows an entry again does.
    let back: HashSet<Entry> = restored
        .iter()
        .map(|c| {
            hidden(veil, c)
                .to_pending(since, now)
                .change
                .entry()
                .clone()
        })
        .collect();
    waiting.retain(|p| !back.contains(p.change.entry()));
    // One pending change per user or membership: a user disabled and then
    // deleted waits (and is paged) once.
    let mut known: HashSet<Entry> = waiting.iter().map(|p| p.change.entry().clone()).collect();
    for change in changes {
        let p = hidden(veil, &change).to_pending(since, now);
        if known.insert(p.change.entry().clone()) {
            waiting.push(p);
        }
    }
    let mut findings: Vec<Finding> = Vec::new();
    let mut keep = Vec::new();
    for p in waiting {
        let Some(change) = DeltaChange::of_pending(&p) else {
            continue;
        };
        let notified = notifications(store, stream, &p, &change, config.grace, veil).await?;
        match decide(&p, now, config.grace, &notified) {
            Verdict::Settled => {}
            Verdict::Wait => keep.push(p),
            Verdict::Missed(f) => findings.push(f),
        }
    }
    let pending = keep.len();
    if !commit {
        let findings: Vec<Finding> = findings.iter().map(|f| revealed(veil, f)).collect();
        let keys: Vec<String> = findings.iter().map(|f| f.key.clone()).collect();
        let known = store
            .crosscheck_known_findings(stream.to_owned(), keys.clone())
            .await?;
        return Ok(PollReport {
            new_keys: keys
                .into_iter()
                .zip(known)
                .filter(|(_, k)| !k)
                .map(|(key, _)| key)
                .collect(),
            findings,
            baseline,
            pending,
            committed: false,
            bodies: BTreeMap::new(),
        });
    }
    let new_keys = store
        .crosscheck_record_findings(stream.to_owned(), findings.clone(), now)
        .await?;
    let generation = started.as_ref().map_or(0, |r| r.generation);
    let committed = store
        .crosscheck_finish_poll(
            stream.to_owned(),
            started,
            PollEnd::Success {
                at: now,
                log_cursor: after.text(),
                generation,
                pending: keep,
            },
        )
        .await?;
    Ok(PollReport {
        findings: findings.iter().map(|f| revealed(veil, f)).collect(),
        new_keys,
        baseline,
        pending,
        committed,
        bodies: BTreeMap::new(),
    })
}

/// What one collection's round read.
struct Round {
    /// The link to keep: the round's delta link, or the next link where it
    /// stopped at [`MAX_DELTA_CHANGES`].
    link: String,
    /// Changes reported (none for a fresh round: a full listing is the
    /// baseline, not a change).
    changes: Vec<DeltaChange>,
    /// Revocations shown undone (none for a fresh round either).
    restored: Vec<DeltaChange>,
    fresh: bool,
    /// The stored link had expired and the round restarted.
    expired: bool,
}

async fn run_round(
    feed: &dyn DeltaFeed,
    collection: &str,
    stored: Option<String>,
) -> Result<Round, PollFailure> {
    let mut link = stored;
    let mut fresh = link.is_none();
    let mut expired = false;
    let (mut changes, mut restored) = (Vec::new(), Vec::new());
    for _ in 0..MAX_PAGES {
        let page = match feed
            .page(collection, link.as_deref())
            .await
            .map_err(PollFailure::Provider)?
        {
            DeltaAnswer::Page(page) => page,
            DeltaAnswer::Expired if !fresh => {
                link = None;
                fresh = true;
                expired = true;
                changes.clear();
                restored.clear();
                continue;
            }
            DeltaAnswer::Expired => {
                return Err(PollFailure::Provider(PollError::Failed(format!(
                    "GET /{collection}/delta: a fresh round answered syncStateNotFound"
                ))))
            }
        };
        if !fresh {
            changes.extend(page.changes);
            restored.extend(page.restored);
        }
        match page.next {
            DeltaNext::Done(delta) => {
                return Ok(Round {
                    link: delta,
                    changes,
                    restored,
                    fresh,
                    expired,
                })
            }
            DeltaNext::More(next)
                if !fresh && changes.len() + restored.len() >= MAX_DELTA_CHANGES =>
            {
                return Ok(Round {
                    link: next,
                    changes,
                    restored,
                    fresh,
                    expired,
                })
            }
            DeltaNext::More(next) => link = Some(next),
        }
    }
    Err(PollFailure::Provider(PollError::Failed(format!(
        "GET /{collection}/delta: more than {MAX_PAGES} pages in one poll (an endless next link?)"
    ))))
}

/// A change with its ids in their stored form.
fn hidden(veil: &Veil, c: &DeltaChange) -> DeltaChange {
    match c {
        DeltaChange::UserDeleted { user } => DeltaChange::UserDeleted {
            user: veil.hide(user),
        },
        DeltaChange::UserDisabled { user } => DeltaChange::UserDisabled {
            user: veil.hide(user),
        },
        DeltaChange::MemberRemoved { group, user } => DeltaChange::MemberRemoved {
            group: veil.hide(group),
            user: veil.hide(user),
        },
    }
}

/// A stored pending change with its ids under the newest key (a pending
/// row from before a key rotation compares like one from after).
fn rehidden(veil: &Veil, p: Pending) -> Pending {
    let again = |id: &str| veil.hide(&veil.reveal(id));
    let change = match &p.change {
        Change::Removed(Entry::User { user }) => Change::Removed(Entry::User { user: again(user) }),
        Change::Removed(Entry::Membership { organization, user }) => {
            Change::Removed(Entry::Membership {
                organization: again(organization),
                user: again(user),
            })
        }
        other => other.clone(),
    };
    Pending { change, ..p }
}

/// The notifications the stream received about the change's user or group
/// since the window opened, read from the audit log (`subject_entries`),
/// their ids in the stored form the change uses.
async fn notifications(
    store: &Store,
    stream: &str,
    p: &Pending,
    change: &DeltaChange,
    grace: TimeDelta,
    veil: &Veil,
) -> Result<Vec<Notified>, StoreError> {
    let (from, _) = p.window(grace);
    let mut subjects = veil.forms(&veil.reveal(change.user()));
    if let Some(group) = change.group() {
        subjects.extend(veil.forms(&veil.reveal(group)));
    }
    let mut out = Vec::new();
    for subject in subjects {
        let found = store
            .subject_entries(subject, Some((stream.to_owned(), from)), EXPLAIN_LOOKUP)
            .await?;
        for e in found {
            let id_of = |kind: &str| {
                e.subject_ids
                    .iter()
                    .find(|(k, _)| k == kind)
                    .map(|(_, v)| veil.hide(&veil.reveal(v)))
            };
            out.push(Notified {
                event_type: e.event_type.clone(),
                user: id_of("user_id"),
                group: id_of("group_id"),
                received_at: e.received_at,
            });
        }
    }
    Ok(out)
}

/// [`resync_warning`] for an Entra stream; any other's health as it is.
/// The `crosscheck_failing` page and `/v1/status` both ask this.
pub(super) fn with_resync_warning(
    cc: &CrosscheckConfig,
    row: &CrosscheckRow,
    health: PollHealth,
) -> PollHealth {
    match cc.provider {
        crate::domain::crosscheck::Provider::Entra => resync_warning(row, health),
        _ => health,
    }
}

/// `crosscheck_failing` as a warning while the last poll was a resync
/// (see the module comment); any other health stands as it is.
pub(super) fn resync_warning(row: &CrosscheckRow, health: PollHealth) -> PollHealth {
    if health.is_failing() {
        return health;
    }
    let Some(resync) = Cursor::read(Some(row)).resync else {
        return health;
    };
    let at = |ms: i64| {
        DateTime::from_timestamp_millis(ms)
            .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
            .unwrap_or_else(|| "an unknown time".to_owned())
    };
    let gap = match resync.unchecked_since {
        Some(since) => format!("between {} and {}", at(since), at(resync.at)),
        None => format!("before {}", at(resync.at)),
    };
    PollHealth::Failing {
        critical: false,
        reason: format!(
            "Graph no longer knew the stored delta link (400 syncStateNotFound: a link expires 7 days after it was issued), so hushwatch listed the whole directory again at {} as a new baseline; changes made {gap} were never compared with the change notifications, and cannot be now. Review that interval's removals in the Entra audit log; this warning resolves on the next poll",
            at(resync.at)
        ),
    }
}

/// When an Entra stream must be polled now because Graph asked for its
/// subscription to be reauthorized (a `reauthorizationRequired` lifecycle
/// notice, recorded by ingest on the subscription's row): the newest such
/// notice of `stream`, when it is newer than `seen`.
pub(super) async fn reauthorization_after(
    store: &Store,
    stream: &str,
    seen: Option<DateTime<Utc>>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let newest = store
        .subscriptions()
        .await?
        .into_iter()
        .filter(|s| s.stream == stream)
        .filter_map(|s| s.reauth_at)
        .max();
    Ok(newest.filter(|at| seen.is_none_or(|s| *at > s)))
}

#[cfg(test)]
mod tests {
    //! Whole Entra polls against a local Microsoft Graph and token endpoint
    //! (`crosscheck::fake`, answering in the shapes `crosscheck::entra`
    //! cites) over a real SQLite store.
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::config::crosscheck::EntraCredentials;
    use crate::config::secret::SecretString;
    use crate::crosscheck::fake::{query, Answer, FakeApi};
    use crate::crosscheck::Source;
    use crate::domain::crosscheck::{Direction, PollHealth, Provider};
    use crate::store::testdb::{event, TestDb};
    use std::sync::{Arc, Mutex};

    const SECRET: &str = "entra~client~secret~never~shown";
    const TOKEN: &str = "eyJ0eXAiOiJKV1QiLCJub3RfYV9yZWFsX3Rva2VuIjp0cnVlfQ";

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    /// A directory and its change log: each change has a sequence number,
    /// and a delta link is the number it was issued at.
    #[derive(Default)]
    struct Graph {
        users: Vec<(String, bool)>,
        /// (group, members)
        groups: Vec<(String, Vec<String>)>,
        /// (seq, collection, object id, member id or "", what)
        log: Vec<(u64, &'static str, String, String, &'static str)>,
        seq: u64,
        /// Links issued before this seq answer `400 syncStateNotFound`.
        expired_before: u64,
        tokens: usize,
    }

    impl Graph {
        fn change(&mut self, collection: &'static str, id: &str, member: &str, what: &'static str) {
            self.seq += 1;
            self.log
                .push((self.seq, collection, id.into(), member.into(), what));
            match what {
                "disabled" => self
                    .users
                    .iter_mut()
                    .filter(|u| u.0 == id)
                    .for_each(|u| u.1 = false),
                "deleted" => self.users.retain(|u| u.0 != id),
                "member-removed" => self
                    .groups
                    .iter_mut()
                    .filter(|g| g.0 == id)
                    .for_each(|g| g.1.retain(|m| m != member)),
                _ => {}
            }
        }
    }

    /// Two objects per page, so every round has a `@odata.nextLink`.
    fn graph_api(graph: Arc<Mutex<Graph>>) -> Answer {
        Arc::new(move |target: &str| {
            let mut g = graph.lock().unwrap();
            if target == "/token" {
                g.tokens += 1;
                return (
                    200,
                    serde_json::json!({"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": TOKEN}).to_string(),
                );
            }
            let collection = if target.starts_with("/v1.0/users/delta") {
                "users"
            } else if target.starts_with("/v1.0/groups/delta") {
                "groups"
            } else {
                return (404, "{}".into());
            };
            // A next link carries only the skip token,
            // "<offset>-<the round's delta token, empty for a full listing>".
            let round = query(target, "$deltatoken").first().cloned().or_else(|| {
                query(target, "$skiptoken")
                    .first()
                    .and_then(|s| s.split_once('-').map(|(_, n)| n.to_owned()))
                    .filter(|n| !n.is_empty())
            });
            let objects: Vec<serde_json::Value> = match round.as_ref() {
                Some(n) => {
                    let n: u64 = n.parse().unwrap();
                    if n < g.expired_before {
                        return (400, r#"{"error":{"code":"syncStateNotFound","message":"The sync state generation is not found. The delta token is expired and data must be synchronized again."}}"#.into());
                    }
                    g.log
                        .iter()
                        .filter(|c| c.0 > n && c.1 == collection)
                        .map(|(_, _, id, member, what)| match *what {
                            "disabled" => serde_json::json!({"id": id, "displayName": "U", "userPrincipalName": "u@contoso.com", "accountEnabled": false}),
                            "deleted" => serde_json::json!({"id": id, "@removed": {"reason": "changed"}}),
                            "enabled" => serde_json::json!({"id": id, "displayName": "U", "userPrincipalName": "u@contoso.com", "accountEnabled": true}),
                            "member-added" => serde_json::json!({"id": id, "displayName": "G", "members@delta": [{"@odata.type": "#microsoft.graph.user", "id": member}]}),
                            _ => serde_json::json!({"id": id, "displayName": "G", "members@delta": [{"@odata.type": "#microsoft.graph.user", "id": member, "@removed": {"reason": "deleted"}}]}),
                        })
                        .collect()
                }
                None if collection == "users" => g
                    .users
                    .iter()
                    .map(|(id, on)| serde_json::json!({"id": id, "displayName": "U", "userPrincipalName": "u@contoso.com", "accountEnabled": on}))
                    .collect(),
                None => g
                    .groups
                    .iter()
                    .map(|(id, members)| serde_json::json!({"id": id, "displayName": "G", "members@delta": members.iter().map(|m| serde_json::json!({"@odata.type": "#microsoft.graph.user", "id": m})).collect::<Vec<_>>()}))
                    .collect(),
            };
            let skip: usize = query(target, "$skiptoken")
                .first()
                .map_or(0, |s| s.split('-').next().unwrap().parse().unwrap());
            let page: Vec<_> = objects.iter().skip(skip).take(2).cloned().collect();
            let mut body = serde_json::json!({"@odata.context": format!("https://graph.microsoft.com/v1.0/$metadata#{collection}"), "value": page});
            // The links are absolute, on the server that answered.
            let host = "HOST";
            if skip + 2 < objects.len() {
                body["@odata.nextLink"] = format!(
                    "{host}/v1.0/{collection}/delta?$skiptoken={}-{}",
                    skip + 2,
                    round.clone().unwrap_or_default()
                )
                .into();
            } else {
                body["@odata.deltaLink"] =
                    format!("{host}/v1.0/{collection}/delta?$deltatoken={}", g.seq).into();
            }
            (200, body.to_string())
        })
    }

    struct Rig {
        store: Store,
        clock: Arc<ManualClock>,
        source: Source,
        config: CrosscheckConfig,
        graph: Arc<Mutex<Graph>>,
        _api: FakeApi,
        _db: TestDb,
    }

    impl Rig {
        async fn poll(&self) -> Result<PollReport, PollFailure> {
            super::super::crosscheck::poll_once(
                &self.store,
                "identity",
                &self.config,
                &self.source,
                &crate::audit::classify::Classifier::default(),
                &crate::store::seal::Sealer::default(),
                t0() - TimeDelta::days(60),
                self.clock.as_ref(),
            )
            .await
        }

        async fn notification(&self, ty: &str, kind: &str, id: &str) {
            let mut e = event("identity", None, ty, self.clock.now().timestamp_millis());
            e.channel = "webhook";
            e.subject_ids = vec![(kind.into(), id.into())];
            self.store.record_events(vec![e]).await.unwrap();
        }

        async fn row(&self) -> CrosscheckRow {
            self.store
                .crosscheck_state("identity".into())
                .await
                .unwrap()
                .unwrap()
        }
    }

    async fn rig(graph: Graph) -> Rig {
        let db = TestDb::sqlite();
        let clock = Arc::new(ManualClock::new(t0()));
        let store = db.open_with_clock(clock.clone()).await;
        let graph = Arc::new(Mutex::new(graph));
        // The fake answers links on "HOST"; put its own address there.
        let inner = graph_api(graph.clone());
        let host = Arc::new(Mutex::new(String::new()));
        let seen_host = host.clone();
        let answer: Answer = Arc::new(move |target: &str| {
            let (status, body) = inner(target);
            (status, body.replace("HOST", &seen_host.lock().unwrap()))
        });
        let api = FakeApi::start(answer).await;
        *host.lock().unwrap() = api.base.clone();
        let config = CrosscheckConfig {
            provider: Provider::Entra,
            api_url: format!("{}/v1.0", api.base),
            api_key: SecretString::new(String::new()),
            every: TimeDelta::minutes(15),
            grace: TimeDelta::minutes(10),
            heal: false,
            types: Vec::new(),
            entra: Some(EntraCredentials {
                tenant_id: "contoso.onmicrosoft.com".into(),
                client_id: "6731de76-14a6-49ae-97bc-6eba6914391e".into(),
                client_secret: SecretString::new(SECRET.into()),
                token_url: format!("{}/token", api.base),
            }),
            client_id: None,
            client_secret: None,
        };
        let source = crate::crosscheck::source(&config);
        Rig {
            store,
            clock,
            source,
            config,
            graph,
            _api: api,
            _db: db,
        }
    }

    fn directory() -> Graph {
        Graph {
            users: ["u1", "u2", "u3", "u4", "u5"]
                .iter()
                .map(|u| ((*u).to_owned(), *u != "u5"))
                .collect(),
            groups: vec![
                ("g1".into(), vec!["u1".into(), "u2".into(), "u3".into()]),
                ("g2".into(), vec!["u4".into()]),
                ("g3".into(), vec![]),
            ],
            ..Graph::default()
        }
    }

    #[tokio::test]
    async fn the_baseline_pages_nothing_and_each_unexplained_revocation_is_found_once_after_grace()
    {
        let r = rig(directory()).await;
        let first = r.poll().await.unwrap();
        assert!(first.baseline && first.findings.is_empty(), "{first:?}");
        let cursor = Cursor::read(Some(&r.row().await));
        assert!(
            cursor.links["users"].contains("$deltatoken=0"),
            "{cursor:?}"
        );
        assert!(cursor.resync.is_none());

        // u1 removed from g1 and u2 disabled, each with its notification;
        // u3 removed from g1 and u4 deleted without one.
        {
            let mut g = r.graph.lock().unwrap();
            g.change("groups", "g1", "u1", "member-removed");
            g.change("users", "u2", "", "disabled");
            g.change("groups", "g1", "u3", "member-removed");
            g.change("users", "u4", "", "deleted");
        }
        r.clock.advance(TimeDelta::minutes(5));
        r.notification("group.updated", "group_id", "g1").await;
        r.clock.advance(TimeDelta::minutes(10));
        r.notification("user.updated", "user_id", "u2").await;
        let second = r.poll().await.unwrap();
        assert!(second.findings.is_empty() && !second.baseline, "{second:?}");
        assert_eq!(
            second.pending, 1,
            "u4's deletion waits its grace: {second:?}"
        );

        r.clock.advance(TimeDelta::minutes(15));
        let third = r.poll().await.unwrap();
        let found: Vec<(String, Option<String>, String)> = third
            .findings
            .iter()
            .map(|f| {
                (
                    f.subject.clone(),
                    f.organization.clone(),
                    f.event_type.clone(),
                )
            })
            .collect();
        assert_eq!(found, [("u4".to_owned(), None, "user.deleted".to_owned())]);
        assert_eq!(third.findings[0].direction, Direction::Revoke);
        assert_eq!(third.new_keys.len(), 1);
        // g1's notification explained u3's removal from g1 too: Graph's
        // notification names the group, not the member.

        r.graph
            .lock()
            .unwrap()
            .change("groups", "g2", "u4", "member-removed");
        r.clock.advance(TimeDelta::minutes(15));
        assert_eq!(r.poll().await.unwrap().pending, 1);
        r.clock.advance(TimeDelta::minutes(15));
        let fifth = r.poll().await.unwrap();
        assert_eq!(fifth.findings.len(), 1, "{fifth:?}");
        let f = &fifth.findings[0];
        assert_eq!(
            (f.subject.as_str(), f.organization.as_deref()),
            ("u4", Some("g2"))
        );
        let text = crate::domain::crosscheck::describe(Provider::Entra, f);
        assert!(text.contains("removed member u4 from group g2"), "{text}");
        r.clock.advance(TimeDelta::minutes(15));
        let sixth = r.poll().await.unwrap();
        assert!(sixth.findings.is_empty() && sixth.new_keys.is_empty());
        assert_eq!(
            r.store
                .crosscheck_findings("identity".into(), true, 10)
                .await
                .unwrap()
                .len(),
            2
        );
        // One token for every poll: it is cached until shortly before it
        // expires.
        assert_eq!(r.graph.lock().unwrap().tokens, 1);
    }

    #[tokio::test]
    async fn a_revocation_undone_before_its_grace_is_not_paged() {
        let r = rig(directory()).await;
        r.poll().await.unwrap();
        r.graph
            .lock()
            .unwrap()
            .change("users", "u2", "", "disabled");
        r.graph
            .lock()
            .unwrap()
            .change("groups", "g1", "u3", "member-removed");
        r.clock.advance(TimeDelta::minutes(5));
        assert_eq!(r.poll().await.unwrap().pending, 2);
        // Both undone, without a notification, before their grace ran out.
        r.graph.lock().unwrap().change("users", "u2", "", "enabled");
        r.graph
            .lock()
            .unwrap()
            .change("groups", "g1", "u3", "member-added");
        r.clock.advance(TimeDelta::minutes(5));
        let undone = r.poll().await.unwrap();
        assert_eq!(
            (undone.pending, undone.findings.len()),
            (0, 0),
            "{undone:?}"
        );
        r.clock.advance(TimeDelta::minutes(15));
        assert!(r.poll().await.unwrap().findings.is_empty());
    }

    #[tokio::test]
    async fn an_expired_delta_link_restarts_from_a_full_listing_with_a_warning_and_no_findings() {
        let r = rig(directory()).await;
        r.poll().await.unwrap();
        {
            let mut g = r.graph.lock().unwrap();
            g.change("users", "u1", "", "deleted");
            g.change("groups", "g1", "u2", "member-removed");
            // Every link issued so far is forgotten; new ones are not.
            g.seq += 1;
            g.expired_before = g.seq;
        }
        r.clock.advance(TimeDelta::days(8));
        let resync = r.poll().await.unwrap();
        assert!(resync.baseline && resync.findings.is_empty(), "{resync:?}");
        assert_eq!(resync.pending, 0);
        let row = r.row().await;
        let health = resync_warning(&row, PollHealth::Ok);
        let PollHealth::Failing { critical, reason } = health else {
            panic!("a resync warns");
        };
        assert!(!critical);
        assert!(reason.contains("syncStateNotFound"), "{reason}");
        assert!(
            reason.contains(&t0().format("%Y-%m-%d %H:%M UTC").to_string()),
            "{reason}"
        );
        // The next ordinary poll clears it.
        r.clock.advance(TimeDelta::minutes(15));
        r.poll().await.unwrap();
        assert_eq!(
            resync_warning(&r.row().await, PollHealth::Ok),
            PollHealth::Ok
        );
    }

    #[tokio::test]
    async fn a_refused_secret_fails_the_poll_as_refused_without_the_secret() {
        let r = rig(directory()).await;
        let answer: Answer = Arc::new(|target: &str| {
            assert_eq!(target, "/token");
            (401, r#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided."}"#.into())
        });
        let api = FakeApi::start(answer).await;
        let mut config = r.config.clone();
        config.entra.as_mut().unwrap().token_url = format!("{}/token", api.base);
        let source = crate::crosscheck::source(&config);
        let polled = super::super::crosscheck::poll_once(
            &r.store,
            "identity",
            &config,
            &source,
            &crate::audit::classify::Classifier::default(),
            &crate::store::seal::Sealer::default(),
            t0(),
            r.clock.as_ref(),
        )
        .await;
        let Err(PollFailure::Provider(e)) = polled else {
            panic!("refused");
        };
        assert_eq!(e.outcome(), "refused");
        let row = r.row().await;
        assert!(row.last_refused);
        assert!(!row.last_error.unwrap().contains(SECRET));
    }
}
