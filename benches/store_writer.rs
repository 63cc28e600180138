//! What the SQLite writer thread costs per ingested event, apart from HTTP
//! (issue #33). Run with `cargo bench --bench store_writer`.
//!
//! Each iteration records a batch of N events through the real store (the
//! writer thread, `synchronous=FULL`, a file on disk under cargo's bench
//! tmpdir, the audit chain on), one job per event as HTTP ingest queues
//! them: N concurrent `record_delivery_rows` calls of one event each, which
//! the writer group-commits. Two event shapes, as `http::ingest` builds
//! them: a token report (no subjects) and a signed webhook for
//! `user.deleted` (one subject, so a revocation-index note, as
//! `service::stale_grants` attaches).
//!
//! Two measurements per case:
//! - `wall`: the batch's elapsed time (includes the fsync; noisy on a shared
//!   machine);
//! - `writer_cpu`: the CPU time of the `hushwatch-store` thread alone over
//!   the batch, read from `/proc/self/task/<tid>/schedstat` (nanoseconds
//!   on CPU, so other processes' load does not count). Divide by N, or read
//!   the throughput line, for the per-event cost (issue target ≤ 15 µs).
//!
//! Profiling mode, for `perf record` or `valgrind --tool=callgrind`: with
//! `STORE_WRITER_PROFILE=webhook:64:200` (shape:N:batches) it runs that many
//! batches once, prints the writer CPU per event and events per commit, and
//! exits, e.g.
//! `STORE_WRITER_PROFILE=webhook:64:200 valgrind --tool=callgrind --separate-threads=yes target/release/deps/store_writer-* --bench`.

use chrono::{TimeDelta, Utc};
use criterion::{BenchmarkId, Criterion, Throughput};
use hushwatch::store::revocations::AccessNote;
use hushwatch::store::{NewEvent, Store};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
enum Shape {
    Report,
    Webhook,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Report => "report",
            Shape::Webhook => "webhook",
        }
    }
}

/// Every event in the process gets a distinct delivery id, so none dedups.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn event(shape: Shape) -> NewEvent {
    let i = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let now = Utc::now();
    let id = format!("msg_2f1c0a9b3e_{i}");
    match shape {
        Shape::Report => NewEvent {
            stream: "identity".into(),
            delivery_id: Some(id),
            event_type: "user.deleted".into(),
            event_time: None,
            received_at: now,
            feeds_clock: true,
            body_sha256: Some([7; 32]),
            channel: "report",
            signature_verified: false,
            subject_ids: Vec::new(),
            audit: true,
            access: None,
            forward: None,
        },
        Shape::Webhook => NewEvent {
            stream: "identity".into(),
            delivery_id: Some(id),
            event_type: "user.deleted".into(),
            event_time: Some(now - TimeDelta::milliseconds(3)),
            received_at: now,
            feeds_clock: true,
            body_sha256: Some([9; 32]),
            channel: "webhook",
            signature_verified: true,
            subject_ids: vec![("user_id".into(), format!("user_{}", i % 60_000))],
            audit: true,
            access: Some(AccessNote::Revoke {
                subject: format!("user_{}", i % 60_000),
                organization: None,
            }),
            forward: None,
        },
    }
}

/// The writer thread's id: the `hushwatch-store` task that appeared when
/// the store opened (earlier stores' writers may still be winding down).
/// The new thread names itself once it runs, so this waits for that.
fn writer_tid(before: &[u64]) -> u64 {
    for _ in 0..1000 {
        let found = tasks()
            .into_iter()
            .filter(|t| !before.contains(t))
            .find(|t| {
                std::fs::read_to_string(format!("/proc/self/task/{t}/comm"))
                    .is_ok_and(|c| c.trim() == "hushwatch-store")
            });
        if let Some(tid) = found {
            return tid;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the store's writer thread is not running");
}

fn tasks() -> Vec<u64> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Nanoseconds the thread has spent on a CPU (first field of schedstat).
fn cpu_ns(tid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("schedstat of the writer thread")
}

struct Bench {
    rt: tokio::runtime::Runtime,
    store: Store,
    tid: u64,
    _dir: tempfile::TempDir,
}

impl Bench {
    fn open() -> Bench {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        // On the real disk (not a tmpfs), so the commit's fsync is real.
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let before = tasks();
        let store = Store::open(&dir.path().join("bench.sqlite3")).unwrap();
        let tid = writer_tid(&before);
        let bench = Bench {
            rt,
            store,
            tid,
            _dir: dir,
        };
        bench.prefill();
        bench
    }

    /// A store that has been ingesting for a while (20,000 events of each
    /// shape, or `STORE_WRITER_PREFILL`), so index seeks and the page cache
    /// meet realistic depths.
    fn prefill(&self) {
        let thousands: usize = std::env::var("STORE_WRITER_PREFILL")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(20, |events: usize| events / 1000);
        for shape in [Shape::Report, Shape::Webhook] {
            for _ in 0..thousands {
                let events = (0..1000).map(|_| event(shape)).collect();
                self.rt.block_on(self.store.record_events(events)).unwrap();
            }
        }
    }

    /// Records `n` events as `n` concurrent one-event deliveries.
    fn batch(&self, shape: Shape, n: usize) {
        let events: Vec<NewEvent> = (0..n).map(|_| event(shape)).collect();
        self.rt.block_on(async {
            let calls: Vec<_> = events
                .into_iter()
                .map(|e| {
                    let store = self.store.clone();
                    tokio::spawn(async move {
                        store.record_delivery_rows(vec![e], None, Utc::now()).await
                    })
                })
                .collect();
            for call in calls {
                call.await.unwrap().unwrap();
            }
        });
    }

    /// Runs `batches` batches; returns (wall, writer CPU).
    fn run(&self, shape: Shape, n: usize, batches: u64) -> (Duration, Duration) {
        let cpu0 = cpu_ns(self.tid);
        let t0 = Instant::now();
        for _ in 0..batches {
            self.batch(shape, n);
        }
        let wall = t0.elapsed();
        (wall, Duration::from_nanos(cpu_ns(self.tid) - cpu0))
    }
}

const SIZES: [usize; 3] = [1, 16, 256];

fn benches(c: &mut Criterion) {
    let bench = Bench::open();
    for shape in [Shape::Report, Shape::Webhook] {
        let mut group = c.benchmark_group(format!("store_writer/{}", shape.name()));
        for n in SIZES {
            group.throughput(Throughput::Elements(n as u64));
            group.bench_function(BenchmarkId::new("wall", n), |b| {
                b.iter_custom(|iters| bench.run(shape, n, iters).0)
            });
            group.bench_function(BenchmarkId::new("writer_cpu", n), |b| {
                b.iter_custom(|iters| bench.run(shape, n, iters).1)
            });
        }
        group.finish();
    }
    // One plain line per case, per event, for the docs and for before/after
    // comparisons (criterion's lines are per batch).
    for shape in [Shape::Report, Shape::Webhook] {
        for n in SIZES {
            summary(&bench, shape, n, (20_000 / n as u64).max(20));
        }
    }
}

fn summary(bench: &Bench, shape: Shape, n: usize, batches: u64) {
    let commits = bench.store.commits();
    let (wall, cpu) = bench.run(shape, n, batches);
    let events = n as u64 * batches;
    let commits = (bench.store.commits() - commits).max(1);
    println!(
        "summary {:<7} N={n:<3} {events} events: writer CPU {:.1} µs/event, wall {:.1} µs/event, {:.1} events/commit",
        shape.name(),
        cpu.as_nanos() as f64 / events as f64 / 1000.0,
        wall.as_nanos() as f64 / events as f64 / 1000.0,
        events as f64 / commits as f64,
    );
}

fn profile(spec: &str) {
    let mut parts = spec.split(':');
    let shape = match parts.next() {
        Some("report") => Shape::Report,
        Some("webhook") => Shape::Webhook,
        other => panic!("STORE_WRITER_PROFILE shape {other:?}: report or webhook"),
    };
    let n: usize = parts.next().and_then(|v| v.parse().ok()).unwrap_or(64);
    let batches: u64 = parts.next().and_then(|v| v.parse().ok()).unwrap_or(200);
    let bench = Bench::open();
    summary(&bench, shape, n, batches);
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("store_writer: run with `cargo bench --bench store_writer`");
        return;
    }
    if let Ok(spec) = std::env::var("STORE_WRITER_PROFILE") {
        profile(&spec);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
