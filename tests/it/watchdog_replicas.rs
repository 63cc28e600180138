//! Who watches the watcher (issue #19) with several `hushwatch serve`
//! processes on one real PostgreSQL database: the "no leader" degraded
//! reason, and the direct emergency page, which each replica sends on its
//! own. Real processes, a real PostgreSQL server, real HTTP receivers on
//! 127.0.0.1 standing in for the dead-man's switch and the notifier.
//!
//! The database comes from `HUSHWATCH_TEST_PG_URL` (see tests/it/replicas.rs);
//! without it these tests print why and pass, unless `HUSHWATCH_REQUIRE_PG=1`.

use crate::common::pg;
use crate::support;

use std::collections::BTreeSet;

use crate::common::{get, metric, wait_until, Sidecar, Workdir, TOKEN};
use pg::PgDb as Db;
use support::{ClosedPort, Receiver};

/// One cluster at a time, with the other cluster tests of the crate.
use pg::CLUSTERS as SERIAL;

const NO_LEADER: &str = "no leader for longer than a lease (2s)";

struct Cluster {
    _work: Workdir,
    replicas: Vec<Sidecar>,
    /// The dead-man's switch (`/ping`, `/ping/fail`) and the `direct`
    /// notifier (`/direct`).
    receiver: Receiver,
    db: Db,
}

impl Cluster {
    fn start(test: &str, n: usize) -> Option<Cluster> {
        let quiet = format!(
            "[streams.identity]\ncalendar = \"always\"\nsilence_threshold = \"1h\"\nnotify = [\"direct\"]\n[streams.identity.ingest]\ntoken = \"{TOKEN}\"\n"
        );
        Cluster::start_with(test, n, &quiet)
    }

    /// `tail`: streams and further notifiers, appended to the config.
    fn start_with(test: &str, n: usize, tail: &str) -> Option<Cluster> {
        let db = Db::create(test)?;
        let receiver = Receiver::start(Vec::new());
        let work = Workdir::new(&format!(
            r#"[server]
listen = "127.0.0.1:0"
data_dir = "data"
store_alarm_after = "1s"
emergency_notify = ["direct"]

[store]
url = "{url}"
pool_size = 3
leader_lease = "2s"

[heartbeat]
url = "{ping}"
interval = "1s"

[notifiers.direct]
kind = "webhook"
url = "{direct}"
timeout = "3s"

{tail}"#,
            url = db.url,
            ping = receiver.url("/ping"),
            direct = receiver.url("/direct"),
        ));
        let replicas = (0..n)
            .map(|_| Sidecar::start(&work.config_path()))
            .collect();
        Some(Cluster {
            _work: work,
            replicas,
            receiver,
            db,
        })
    }

    fn status(&self, i: usize) -> serde_json::Value {
        let reply = get(self.replicas[i].addr, "/v1/status");
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()
    }

    fn reasons(&self, i: usize) -> Vec<String> {
        self.status(i)["degraded_reasons"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|r| r.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn wait_all_healthy(&self) {
        for i in 0..self.replicas.len() {
            wait_until("replica healthy", || {
                (self.status(i)["degraded"] == false).then_some(())
            });
        }
    }

    fn leaders(&self) -> usize {
        (0..self.replicas.len())
            .filter(|i| self.status(*i)["replicas"]["is_leader"] == true)
            .count()
    }

    /// Summaries of the pages `direct` received, with their status.
    fn direct_pages(&self) -> Vec<(String, String)> {
        self.receiver
            .delivered()
            .iter()
            .filter(|r| r.path == "/direct")
            .map(|r| {
                let body = r.json();
                (
                    body["status"].as_str().unwrap_or_default().to_owned(),
                    body["alert"]["summary"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    }
}

/// Ends the replicas' connections to the test database (the role's own
/// backends: a non-superuser may not end others, e.g. autovacuum's).
fn terminate_own_connections(db: &Db) {
    let admin = std::env::var("HUSHWATCH_TEST_PG_URL").expect("set when a Db exists");
    pg::query(
        &admin,
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = '{}' AND usename = current_user AND pid <> pg_backend_pid()",
            db.name
        ),
    )
    .unwrap_or_else(|e| panic!("terminate: {e}"));
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for r in self.replicas.drain(..) {
            r.kill9();
        }
    }
}

/// The database refuses every write of the lease row (the test role loses
/// UPDATE on `leader`, which `SELECT … FOR UPDATE` needs too: no replica can
/// renew or take the lease, while every other table still works). After a
/// lease, every replica reports "no leader" in `/v1/status`, in
/// `hushwatch_degraded` and on the heartbeat's fail URL, and nobody leads;
/// when the privilege returns, one replica takes the lease and the reason
/// goes away everywhere.
#[test]
fn no_leader_for_longer_than_a_lease_degrades_every_replica_until_one_leads_again() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(cluster) = Cluster::start("no_leader", 2) else {
        return;
    };
    cluster.wait_all_healthy();
    wait_until("one leader", || (cluster.leaders() == 1).then_some(()));
    cluster
        .db
        .query("REVOKE UPDATE ON leader FROM CURRENT_USER");
    for i in 0..2 {
        wait_until("the no-leader reason", || {
            cluster
                .reasons(i)
                .iter()
                .any(|r| r.starts_with(NO_LEADER))
                .then_some(())
        });
        assert_eq!(metric(cluster.replicas[i].addr, "hushwatch_degraded"), 1.0);
        // Only this reason: storage itself still works.
        assert_eq!(cluster.reasons(i).len(), 1, "{:?}", cluster.reasons(i));
    }
    wait_until("nobody leads", || (cluster.leaders() == 0).then_some(()));
    let fail = wait_until("a fail ping naming the reason", || {
        cluster
            .receiver
            .received()
            .into_iter()
            .find(|r| r.path == "/ping/fail")
    });
    assert!(
        fail.json()["reason"]
            .as_str()
            .unwrap_or_default()
            .contains(NO_LEADER),
        "{}",
        fail.json()
    );
    cluster.db.query("GRANT UPDATE ON leader TO CURRENT_USER");
    cluster.wait_all_healthy();
    wait_until("one leader again", || {
        (cluster.leaders() == 1).then_some(())
    });
    for i in 0..2 {
        assert_eq!(metric(cluster.replicas[i].addr, "hushwatch_degraded"), 0.0);
    }
}

/// The whole database goes away: the emergency page is per replica, by
/// design (the shared store is what is broken, so nothing can be decided
/// through it). Each replica sends its own direct page, naming itself,
/// exactly once during the outage, and one recovery page after it.
#[test]
fn each_replica_sends_its_own_emergency_page_while_the_database_is_down() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(cluster) = Cluster::start("emergency", 2) else {
        return;
    };
    cluster.wait_all_healthy();
    let ids: BTreeSet<String> = (0..2)
        .map(|i| {
            cluster.status(i)["replicas"]["self"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 2);
    cluster.db.allow_connections(false);
    terminate_own_connections(&cluster.db);
    let firing = |pages: &[(String, String)]| -> Vec<String> {
        pages
            .iter()
            .filter(|(s, _)| s == "firing")
            .map(|(_, t)| t.clone())
            .collect()
    };
    wait_until("an emergency page from each replica", || {
        (firing(&cluster.direct_pages()).len() >= 2).then_some(())
    });
    // Health checks go on every second; none of them pages again.
    for i in 0..2 {
        wait_until("more failing checks", || {
            (metric(
                cluster.replicas[i].addr,
                "hushwatch_heartbeat_total{outcome=\"fail\"}",
            ) >= 3.0)
                .then_some(())
        });
    }
    // Counted when decided: a second page still on its way would show here.
    for i in 0..2 {
        assert_eq!(
            metric(cluster.replicas[i].addr, "hushwatch_emergency_pages_total"),
            1.0
        );
    }
    let pages = firing(&cluster.direct_pages());
    assert_eq!(pages.len(), 2, "{pages:#?}");
    for id in &ids {
        let from = format!("hushwatch (replica {id}) cannot write its state since ");
        assert_eq!(
            pages.iter().filter(|t| t.starts_with(&from)).count(),
            1,
            "one page from {id}: {pages:#?}"
        );
    }
    cluster.db.allow_connections(true);
    wait_until("a recovery page from each replica", || {
        let resolved: Vec<String> = cluster
            .direct_pages()
            .into_iter()
            .filter(|(s, _)| s == "resolved")
            .map(|(_, t)| t)
            .collect();
        (resolved.len() >= 2).then_some(resolved)
    });
    cluster.wait_all_healthy();
    let all = cluster.direct_pages();
    assert_eq!(all.len(), 4, "{all:#?}");
    for id in &ids {
        let from = format!("hushwatch (replica {id}) storage recovered");
        assert_eq!(
            all.iter().filter(|(_, t)| t.starts_with(&from)).count(),
            1,
            "{all:#?}"
        );
    }
}

/// Two replicas, four streams firing at once into `hook`, a dead port, with
/// `fallback = ["direct"]`: attempts from both replicas count on one shared
/// ladder, so `direct` gets exactly one page for each of steps 1, 5 and 20
/// (not one per replica), and when `hook` listens again exactly one
/// recovery page. Both replicas' gauges show the shared count.
#[test]
fn two_replicas_climb_one_shared_fallback_ladder_once_per_step() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let down = ClosedPort::new();
    let mut tail = format!(
        "[notifiers.hook]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:{}/hook\"\ntimeout = \"1s\"\nbackoff_initial = \"1s\"\nbackoff_max = \"1s\"\nfallback = [\"direct\"]\n",
        down.port()
    );
    for name in ["a", "b", "c", "d"] {
        tail += &format!(
            "[streams.{name}]\ncalendar = \"always\"\nsilence_threshold = \"2s\"\nnotify = [\"hook\"]\n[streams.{name}.ingest]\ntoken = \"{TOKEN}\"\n"
        );
    }
    let Some(cluster) = Cluster::start_with("ladder", 2, &tail) else {
        return;
    };
    let series = "hushwatch_notifier_consecutive_failures{notifier=\"hook\"}";
    wait_until("20 failed attempts and three fallback pages", || {
        (cluster.direct_pages().len() >= 3 && metric(cluster.replicas[0].addr, series) >= 20.0)
            .then_some(())
    });
    // The other replica's gauge follows the shared count too.
    wait_until("the shared count on both replicas", || {
        (metric(cluster.replicas[1].addr, series) >= 20.0).then_some(())
    });
    let hook = down.listen(Vec::new());
    wait_until("hook delivers", || {
        (!hook.delivered().is_empty()).then_some(())
    });
    let pages = wait_until("the recovery page", || {
        let pages = cluster.direct_pages();
        pages
            .iter()
            .position(|(s, _)| s == "resolved")
            .map(|end| pages[..=end].to_vec())
    });
    let summaries: Vec<&str> = pages.iter().map(|(_, t)| t.as_str()).collect();
    for step in [1, 5, 20] {
        let n = summaries
            .iter()
            .filter(|t| t.ends_with(&format!("({step} failed attempts in a row)")))
            .count();
        assert_eq!(
            n, 1,
            "step {step} paged once per deployment: {summaries:#?}"
        );
    }
    assert_eq!(summaries.len(), 4, "{summaries:#?}");
    assert!(summaries[0].starts_with("hushwatch cannot deliver to hook: "));
    assert!(summaries[3].starts_with("hushwatch delivers to hook again"));
    wait_until("the count reset on both replicas", || {
        (metric(cluster.replicas[0].addr, series) == 0.0
            && metric(cluster.replicas[1].addr, series) == 0.0)
            .then_some(())
    });
}
