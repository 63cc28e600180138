//! Several `hushwatch serve` processes on one PostgreSQL database (issue
//! #13): events spread round-robin, replicas killed (`kill -9`), stopped
//! past their lease (`SIGSTOP`/`SIGCONT`), every database connection
//! terminated, the database made unreachable. Real processes, a real
//! PostgreSQL server and a real HTTP receiver that counts page keys.
//!
//! The database comes from `HUSHWATCH_TEST_PG_URL` (an admin URL of a role
//! that may create databases; `scripts/test` sets it). Without it these
//! tests print why and pass, unless `HUSHWATCH_REQUIRE_PG=1`.

use crate::common::pg;
use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::common::{get, metric, wait_until, Sidecar, Workdir, TOKEN};
use pg::PgDb as Db;
use support::{Answer, Receiver};

/// One cluster at a time, with the other cluster tests of the crate.
use pg::CLUSTERS as SERIAL;

// ----------------------------------------------------------------- cluster

struct Cluster {
    work: Workdir,
    replicas: Vec<Option<Sidecar>>,
    receiver: Receiver,
    db: Db,
}

fn config(db: &Db, receiver: &Receiver, threshold: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"

[store]
url = "{url}"
pool_size = 3
leader_lease = "2s"

[audit]
checkpoint_interval = "1s"

[streams.identity]
calendar = "always"
silence_threshold = "{threshold}"
notify = ["hook"]
[streams.identity.ingest]
token = "{TOKEN}"

[notifiers.hook]
kind = "webhook"
url = "{hook}"
timeout = "3s"
backoff_initial = "1s"
backoff_max = "2s"
"#,
        url = db.url,
        hook = receiver.url("/hook"),
    )
}

impl Cluster {
    fn start(test: &str, n: usize, threshold: &str, script: Vec<Answer>) -> Option<Cluster> {
        let db = Db::create(test)?;
        let receiver = Receiver::start(script);
        let work = Workdir::new(&config(&db, &receiver, threshold));
        let replicas = (0..n)
            .map(|_| Some(Sidecar::start(&work.config_path())))
            .collect();
        Some(Cluster {
            work,
            replicas,
            receiver,
            db,
        })
    }

    fn live(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|i| self.replicas[*i].is_some())
            .collect()
    }

    fn replica(&self, i: usize) -> &Sidecar {
        self.replicas[i].as_ref().expect("replica is running")
    }

    fn addr(&self, i: usize) -> SocketAddr {
        self.replica(i).addr
    }

    fn kill9(&mut self, i: usize) {
        self.replicas[i].take().expect("running").kill9();
    }

    fn status(&self, i: usize) -> serde_json::Value {
        let reply = get(self.addr(i), "/v1/status");
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()
    }

    /// The replica whose own status says it leads, once exactly one does.
    fn leader(&self, among: &[usize]) -> usize {
        wait_until("exactly one leader", || {
            let leading: Vec<usize> = among
                .iter()
                .copied()
                .filter(|i| self.status(*i)["replicas"]["is_leader"] == true)
                .collect();
            (leading.len() == 1).then(|| leading[0])
        })
    }

    /// The leader's term as replica `i` last saw it (its heartbeat).
    fn term_of(&self, i: usize) -> Option<i64> {
        self.status(i)["replicas"]["leader"]["term"].as_i64()
    }

    /// `hushwatch audit verify` on the shared database: one chain, intact,
    /// whatever the interleaving of the replicas' appends.
    fn assert_audit_verifies(&self) {
        let out = crate::common::cli(&["audit", "verify"])
            .config(self.work.config_path())
            .output();
        assert!(
            out.status.success(),
            "audit verify failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Pages the receiver accepted: (status, alert id, page key).
    fn pages(&self) -> Vec<(String, String, String)> {
        self.receiver
            .delivered()
            .iter()
            .map(|r| {
                let body = r.json();
                (
                    body["status"].as_str().unwrap_or_default().to_owned(),
                    body["alert"]["id"].as_str().unwrap_or_default().to_owned(),
                    r.header("Idempotency-Key").unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    fn wait_pages(&self, status: &str, count: usize) {
        wait_until(&format!("{count} distinct {status} page(s)"), || {
            let keys: BTreeSet<String> = self
                .pages()
                .into_iter()
                .filter(|(s, _, _)| s == status)
                .map(|(_, _, k)| k)
                .collect();
            (keys.len() >= count).then_some(())
        });
    }
}

/// A report with delivery id `id`, to replica `addr`; `None` when the
/// connection failed or the answer was incomplete (not acknowledged).
fn post(addr: SocketAddr, id: &str) -> Option<(u16, String)> {
    let body = format!(r#"{{"type":"user.deleted","id":"{id}"}}"#);
    let mut stream = TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let head = format!(
        "POST /v1/streams/identity/events HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body.as_bytes()).ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    let status = raw.split_whitespace().nth(1)?.parse().ok()?;
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    Some((status, body))
}

/// Sends `ids` round-robin over the live replicas; returns those answered
/// 2xx. `between` runs before each send with the send's index.
fn burst(
    cluster: &mut Cluster,
    ids: &[String],
    mut between: impl FnMut(&mut Cluster, usize),
) -> Vec<String> {
    let mut acked = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        between(cluster, n);
        let live = cluster.live();
        let to = live[n % live.len()];
        if let Some((status, _)) = post(cluster.addr(to), id) {
            if (200..300).contains(&status) {
                acked.push(id.clone());
            }
        }
    }
    acked
}

/// Every acknowledged id is stored: sent again, each is a duplicate.
fn assert_all_stored(cluster: &Cluster, acked: &[String]) {
    let live = cluster.live();
    for (n, id) in acked.iter().enumerate() {
        let to = live[n % live.len()];
        let (status, body) = wait_until("a replica to answer", || post(cluster.addr(to), id));
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains(r#""duplicate":1"#),
            "acknowledged event {id} was not stored: resending it gave {body}"
        );
    }
}

/// Per alert id (episode): exactly one distinct firing key and at most one
/// distinct resolved key. Returns (episodes, deliveries, distinct keys).
fn assert_one_key_per_page(cluster: &Cluster) -> (usize, usize, usize) {
    let pages = cluster.pages();
    let mut by_alert: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (status, alert, key) in &pages {
        by_alert
            .entry(alert.clone())
            .or_default()
            .entry(status.clone())
            .or_default()
            .insert(key.clone());
    }
    for (alert, statuses) in &by_alert {
        assert_eq!(
            statuses.get("firing").map(BTreeSet::len),
            Some(1),
            "episode {alert}: one firing page key expected, got {statuses:?}"
        );
        assert!(
            statuses.get("resolved").map_or(0, BTreeSet::len) <= 1,
            "episode {alert}: more than one resolved key: {statuses:?}"
        );
    }
    let keys: BTreeSet<&String> = pages.iter().map(|(_, _, k)| k).collect();
    (by_alert.len(), pages.len(), keys.len())
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

// ------------------------------------------------------------------- tests

#[test]
fn kill9_of_a_replica_mid_burst_loses_no_acknowledged_event_and_pages_once_per_episode() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut cluster) = Cluster::start("kill9", 3, "3s", Vec::new()) else {
        return;
    };
    // Nothing ever arrived: the first episode fires after 3 s, once,
    // though three replicas evaluate it.
    cluster.wait_pages("firing", 1);

    let events = ids("burst", 300);
    let mut killed = None;
    let acked = burst(&mut cluster, &events, |c, n| {
        if n == 1 {
            // The first event resolved the episode (wherever it landed).
            c.wait_pages("resolved", 1);
        }
        if n == 150 {
            let victim = c.live()[1];
            c.kill9(victim);
            killed = Some(victim);
        }
    });
    assert!(killed.is_some());
    assert!(
        acked.len() >= 290,
        "most sends go to live replicas: {} acknowledged",
        acked.len()
    );
    assert_all_stored(&cluster, &acked);

    // Quiet again: a second episode fires once, and one event resolves it.
    cluster.wait_pages("firing", 2);
    let last = burst(&mut cluster, &ids("after", 1), |_, _| {});
    assert_eq!(last.len(), 1);
    cluster.wait_pages("resolved", 2);

    let (episodes, deliveries, keys) = assert_one_key_per_page(&cluster);
    assert_eq!(episodes, 2);
    assert_eq!(keys, 4, "fire, resolve, fire, resolve");
    assert_eq!(
        deliveries, keys,
        "no page was sent twice (no sender died mid-send here)"
    );
    cluster.assert_audit_verifies();
}

#[test]
fn a_leader_stopped_past_its_lease_is_replaced_and_never_acts_on_its_old_term() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut cluster) = Cluster::start("sigstop", 3, "1h", Vec::new()) else {
        return;
    };
    let all = cluster.live();
    let old = cluster.leader(&all);
    let old_term = wait_until("the leader's term", || cluster.term_of(old));
    let others: Vec<usize> = all.iter().copied().filter(|i| *i != old).collect();

    cluster.replica(old).signal("STOP");
    let stopped_at = Instant::now();
    // Another replica takes over after the 2 s lease, in a new term.
    let new = cluster.leader(&others);
    let new_term = wait_until("the new leader's term", || {
        cluster.term_of(new).filter(|t| *t > old_term)
    });
    let takeover = stopped_at.elapsed();

    // Events for the new leader to checkpoint.
    let mut n = 0;
    let checkpoint = |c: &mut Cluster, n: &mut usize, who: usize, term: i64| {
        wait_until("a checkpoint by the new leader", || {
            *n += 1;
            post(c.addr(others[*n % others.len()]), &format!("sigstop-{n}"));
            c.replica(who)
                .stderr_text()
                .lines()
                .any(|l| l.contains("audit checkpoint") && l.contains(&format!("term={term}")))
                .then_some(())
        })
    };
    checkpoint(&mut cluster, &mut n, new, new_term);

    let seen_before = cluster.replica(old).stderr_text().lines().count();
    cluster.replica(old).signal("CONT");
    // The resumed replica learns it lost the lease and says so.
    wait_until("the old leader to step down", || {
        let s = cluster.status(old);
        (s["replicas"]["is_leader"] == false
            && metric(cluster.addr(old), "hushwatch_leader") == 0.0)
            .then_some(())
    });
    // More housekeeping happens (by the new leader) after the resume.
    let new_lines_before = cluster.replica(new).stderr_text().lines().count();
    wait_until("another checkpoint after the resume", || {
        n += 1;
        post(
            cluster.addr(others[n % others.len()]),
            &format!("sigstop-{n}"),
        );
        cluster
            .replica(new)
            .stderr_text()
            .lines()
            .skip(new_lines_before)
            .any(|l| l.contains("audit checkpoint"))
            .then_some(())
    });
    let after: Vec<String> = cluster
        .replica(old)
        .stderr_text()
        .lines()
        .skip(seen_before)
        .map(str::to_owned)
        .collect();
    assert!(
        !after.iter().any(|l| l.contains("audit checkpoint")),
        "the resumed old leader did housekeeping: {after:#?}"
    );
    let leaders: Vec<f64> = cluster
        .live()
        .iter()
        .map(|i| metric(cluster.addr(*i), "hushwatch_leader"))
        .collect();
    assert_eq!(leaders.iter().sum::<f64>(), 1.0, "{leaders:?}");
    assert_eq!(metric(cluster.addr(old), "hushwatch_replicas"), 3.0);
    println!("leader takeover after SIGSTOP: {takeover:?} (lease 2s)");
}

#[test]
fn terminating_every_database_connection_mid_burst_loses_no_acknowledged_event() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut cluster) = Cluster::start("terminate", 3, "1h", Vec::new()) else {
        return;
    };
    let events = ids("term", 300);
    let acked = burst(&mut cluster, &events, |c, n| {
        if n == 150 {
            c.db.terminate_connections();
        }
    });
    assert!(
        acked.len() >= 200,
        "only {} of 300 acknowledged",
        acked.len()
    );
    assert_all_stored(&cluster, &acked);
    for i in cluster.live() {
        wait_until("every replica ready again", || {
            (get(cluster.addr(i), "/readyz").status == 200).then_some(())
        });
    }
    let stored: i64 = cluster
        .db
        .query("SELECT count(*)::text FROM seen_deliveries")[0]
        .parse()
        .expect("count");
    assert!(stored as usize >= acked.len());
    cluster.assert_audit_verifies();
}

#[test]
fn while_the_database_is_unreachable_ingest_and_readyz_answer_503_and_a_passed_silence_fires_after()
{
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut cluster) = Cluster::start("outage", 2, "4s", Vec::new()) else {
        return;
    };
    // Start the clock with an event so the episode is the outage's.
    let first = burst(&mut cluster, &ids("before", 1), |_, _| {});
    assert_eq!(first.len(), 1);
    // The event was accepted by now (every replica reads this host's wall
    // clock), so its stream fires by `due` on every replica's view of it.
    let due = chrono::Utc::now() + chrono::TimeDelta::seconds(4);
    cluster.db.allow_connections(false);
    cluster.db.terminate_connections();
    let began = Instant::now();
    for i in cluster.live() {
        wait_until("ingest to answer 503", || {
            let answer = post(
                cluster.addr(i),
                &format!("outage-{i}-{:?}", began.elapsed()),
            );
            answer.filter(|(s, _)| *s == 503).map(|_| ())
        });
        wait_until("/readyz to answer 503", || {
            (get(cluster.addr(i), "/readyz").status == 503).then_some(())
        });
    }
    // The 4 s threshold passes during the outage: each replica's timer
    // decides to fire and cannot record it. Its "evaluated up to T" gauge
    // moves on every finished pass, recorded or not (`evaluated_at` in
    // `/v1/status` moves only on a recorded one, and `/metrics` answers
    // whatever the store does); only once it has passed `due` on each
    // replica does "nothing was paged" say something about the outage
    // rather than about timing.
    let due = due.timestamp_millis() as f64 / 1000.0;
    for i in cluster.live() {
        wait_until(
            "an evaluation past the threshold that cannot record",
            || {
                (metric(
                    cluster.addr(i),
                    "hushwatch_evaluation_attempted_timestamp_seconds",
                ) >= due)
                    .then_some(())
            },
        );
    }
    // `/v1/status` says the same (slowly: its store-backed sections wait
    // on the database and report errors): the last pass was attempted at
    // or after `due` and not recorded.
    let status = wait_until("/v1/status during the outage", || {
        let reply = get(cluster.addr(0), "/v1/status");
        (reply.status == 200).then(|| reply.json())
    });
    let at = |key: &str| {
        let text = status[key]
            .as_str()
            .unwrap_or_else(|| panic!("{key}: {status}"));
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis() as f64
            / 1000.0
    };
    assert!(at("evaluation_attempted_at") >= due, "{status}");
    assert!(
        at("evaluated_at") < due,
        "recorded during the outage: {status}"
    );
    let received = cluster.receiver.received();
    assert!(
        received.is_empty(),
        "paged during the outage: {received:#?}"
    );
    cluster.db.allow_connections(true);
    cluster.wait_pages("firing", 1);
    for i in cluster.live() {
        wait_until("ready again", || {
            (get(cluster.addr(i), "/readyz").status == 200).then_some(())
        });
    }
    let (episodes, deliveries, keys) = assert_one_key_per_page(&cluster);
    assert_eq!((episodes, keys), (1, 1));
    assert_eq!(deliveries, 1);
}

#[test]
fn a_page_whose_sender_was_killed_mid_send_is_sent_by_another_replica_under_the_same_key() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // The first attempt hangs at the receiver: its sender is mid-send.
    let Some(mut cluster) = Cluster::start("claim", 3, "3s", vec![Answer::Hang]) else {
        return;
    };
    wait_until("the first attempt to reach the receiver", || {
        (!cluster.receiver.received().is_empty()).then_some(())
    });
    let holder = wait_until("the claim row", || {
        cluster
            .db
            .query("SELECT claimed_by FROM outbox WHERE claimed_by IS NOT NULL")
            .into_iter()
            .next()
    });
    let sender = cluster
        .live()
        .into_iter()
        .find(|i| cluster.status(*i)["replicas"]["self"] == holder.as_str())
        .expect("the claim holder is one of the replicas");
    let first_key = cluster.receiver.received()[0]
        .header("Idempotency-Key")
        .expect("key")
        .to_owned();
    cluster.kill9(sender);
    let killed_at = Instant::now();
    cluster.wait_pages("firing", 1);
    let redelivered = killed_at.elapsed();
    let received = cluster.receiver.received();
    assert_eq!(received.len(), 2, "one hung attempt, one delivery");
    assert_eq!(
        received[1].header("Idempotency-Key"),
        Some(first_key.as_str()),
        "the retry carries the same key"
    );
    println!("page delivered {redelivered:?} after kill -9 of its claim holder (claim lease 5s)");
}

#[test]
fn every_replica_learns_of_an_arrival_that_landed_on_another() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(cluster) = Cluster::start("feed", 2, "1h", Vec::new()) else {
        return;
    };
    let (a, b) = (cluster.addr(0), cluster.addr(1));
    let last_event = |addr| {
        let reply = get(addr, "/v1/status");
        reply.json()["streams"][0]["last_event_at"]
            .as_str()
            .map(str::to_owned)
    };
    assert_eq!(last_event(b), None);
    let (status, body) = post(a, "feed-1").expect("replica a answers");
    assert_eq!(status, 200, "{body}");
    let on_a = last_event(a).expect("a recorded the arrival");
    // b never saw the request; the change feed brings it the same arrival.
    let on_b = wait_until("b to learn of the arrival", || last_event(b));
    assert_eq!(on_a, on_b);
    assert!(
        metric(
            b,
            "hushwatch_last_event_timestamp_seconds{stream=\"identity\"}"
        ) > 0.0
    );
}
