//! A compact, mergeable quantile sketch of gaps between arrivals, for the
//! "quieter than usual" threshold (issue #18): a log-bucketed histogram in
//! the manner of DDSketch (Masson, Rim, Lee: "DDSketch: a fast and fully
//! mergeable quantile sketch with relative-error guarantees", VLDB 2019).
//! A gap `x` (milliseconds, ≥ 1) falls in bucket `ceil(log_γ x)` with
//! `γ = (1 + α) / (1 − α)`; a bucket's estimate `2γ^i / (γ + 1)` is within
//! `α` (1%) of every value in it. Two sketches merge by adding counts.
//! Pure: no I/O, no clock. NOT wired yet: nothing records or persists it.

use std::collections::BTreeMap;

/// Relative accuracy of every quantile.
pub const ALPHA: f64 = 0.01;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GapSketch {
    /// Gaps of 0 ms (two arrivals in the same millisecond).
    zeros: u64,
    buckets: BTreeMap<i32, u64>,
}

fn gamma() -> f64 {
    (1.0 + ALPHA) / (1.0 - ALPHA)
}

impl GapSketch {
    pub fn new() -> GapSketch {
        GapSketch::default()
    }

    pub fn count(&self) -> u64 {
        self.zeros + self.buckets.values().sum::<u64>()
    }

    pub fn add(&mut self, gap_ms: u64) {
        if gap_ms == 0 {
            self.zeros += 1;
            return;
        }
        let index = ((gap_ms as f64).ln() / gamma().ln()).ceil() as i32;
        *self.buckets.entry(index).or_default() += 1;
    }

    pub fn merge(&mut self, other: &GapSketch) {
        self.zeros += other.zeros;
        for (i, n) in &other.buckets {
            *self.buckets.entry(*i).or_default() += n;
        }
    }

    /// The value at rank `floor(q × (count − 1))` (0-based, ascending),
    /// within `ALPHA` of the exact one; `None` while empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * (total - 1) as f64).floor() as u64;
        if rank < self.zeros {
            return Some(0.0);
        }
        let mut seen = self.zeros;
        for (i, n) in &self.buckets {
            seen += n;
            if rank < seen {
                let g = gamma();
                return Some(2.0 * g.powi(*i) / (g + 1.0));
            }
        }
        None
    }

    /// (bucket, count) pairs, bucket `i32::MIN` for zero gaps: the form a
    /// store would persist.
    pub fn to_pairs(&self) -> Vec<(i32, u64)> {
        let zeros = (self.zeros > 0).then_some((i32::MIN, self.zeros));
        zeros
            .into_iter()
            .chain(self.buckets.iter().map(|(i, n)| (*i, *n)))
            .collect()
    }

    pub fn from_pairs(pairs: &[(i32, u64)]) -> GapSketch {
        let mut s = GapSketch::new();
        for (i, n) in pairs {
            if *i == i32::MIN {
                s.zeros += n;
            } else {
                *s.buckets.entry(*i).or_default() += n;
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn exact(sorted: &[u64], q: f64) -> f64 {
        sorted[(q * (sorted.len() - 1) as f64).floor() as usize] as f64
    }

    proptest! {
        #[test]
        fn quantiles_stay_within_one_percent_of_exact(
            gaps in proptest::collection::vec(0u64..=40 * 86_400_000, 1..2_000),
            q in 0.0f64..=1.0,
        ) {
            let mut sketch = GapSketch::new();
            for g in &gaps {
                sketch.add(*g);
            }
            let mut sorted = gaps.clone();
            sorted.sort_unstable();
            for q in [q, 0.5, 0.9, 0.99, 0.999] {
                let want = exact(&sorted, q);
                let got = sketch.quantile(q).unwrap();
                prop_assert!((got - want).abs() <= ALPHA * want + 1e-9,
                    "q={} exact={} sketch={}", q, want, got);
            }
        }

        #[test]
        fn merging_equals_adding_everything_to_one(
            a in proptest::collection::vec(0u64..10_000_000, 0..300),
            b in proptest::collection::vec(0u64..10_000_000, 0..300),
        ) {
            let (mut left, mut right, mut both) = (GapSketch::new(), GapSketch::new(), GapSketch::new());
            a.iter().for_each(|g| { left.add(*g); both.add(*g); });
            b.iter().for_each(|g| { right.add(*g); both.add(*g); });
            left.merge(&right);
            prop_assert_eq!(&left, &both);
            prop_assert_eq!(GapSketch::from_pairs(&both.to_pairs()), both);
        }
    }

    #[test]
    fn an_empty_sketch_has_no_quantile() {
        assert_eq!(GapSketch::new().quantile(0.5), None);
    }
}
