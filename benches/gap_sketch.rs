//! Costs of the "quieter than usual" threshold (issue #18): recording one
//! gap, and recomputing one adaptive stream's effective threshold from its
//! 28 per-day sketches (what a flush does for each stream it touched, and
//! for every adaptive stream once a day). Run with
//! `cargo bench --bench gap_sketch -- --warm-up-time 1 --measurement-time 3`.
//!
//! Each day holds 200 gaps spread log-uniformly from 1 s to 6 h, the spread
//! of a stream that is busy by day and quiet at night (hundreds of distinct
//! buckets per day, the worst realistic case for merging).
//!
//! Measured 2026-12-01 on the 2-core Xeon VM shared with other builds (load
//! average ~12): 1.38 ms per 10,000 gaps added (~0.14 µs each), 0.29 ms
//! per one-stream recompute (criterion point estimates).

use chrono::TimeDelta;
use criterion::{criterion_group, criterion_main, Criterion};
use hushwatch::domain::adaptive::{effective_threshold, AdaptivePolicy};
use hushwatch::domain::gap_sketch::GapSketch;
use std::hint::black_box;

/// Deterministic pseudo-random gaps (xorshift), log-uniform in 1 s..6 h.
fn gaps(n: usize, seed: u64) -> Vec<u64> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x % 1_000_000) as f64 / 1e6;
            (1_000.0 * (21_600.0f64).powf(u)) as u64
        })
        .collect()
}

fn days() -> Vec<GapSketch> {
    (0..28)
        .map(|d| {
            let mut s = GapSketch::new();
            for g in gaps(200, 0x9e37_79b9 + d) {
                s.add(g);
            }
            s
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let many = gaps(10_000, 7);
    c.bench_function("gap_sketch/add 10,000 gaps", |b| {
        b.iter(|| {
            let mut s = GapSketch::new();
            for g in &many {
                s.add(*g);
            }
            black_box(s)
        })
    });
    let window = days();
    let policy = AdaptivePolicy::default();
    c.bench_function(
        "gap_sketch/recompute one stream (28 days x 200 gaps)",
        |b| {
            b.iter(|| {
                let mut all = GapSketch::new();
                for d in &window {
                    all.merge(d);
                }
                let e = effective_threshold(TimeDelta::hours(6), Some(&policy), &all, 28);
                let points = [0.5, 0.9, 0.99, 0.999].map(|q| all.quantile(q));
                black_box((e, points))
            })
        },
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
