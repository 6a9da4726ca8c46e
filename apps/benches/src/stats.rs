//! Statistics of latency samples: nearest-rank percentiles over sorted nanosecond samples.
#![forbid(unsafe_code)]

/// Summary of a set of latency samples, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Median (nearest rank).
    pub p50: u64,
    /// 99th percentile (nearest rank).
    pub p99: u64,
    /// 99.9th percentile (nearest rank).
    pub p999: u64,
    /// Largest sample.
    pub max: u64,
    /// Arithmetic mean.
    pub mean: f64,
}

/// The `p`-th percentile (0 < p <= 100) of `sorted` (ascending) by the nearest-rank method:
/// the smallest sample such that at least `p`% of the samples are at or below it. `None`
/// for no samples or a `p` outside (0, 100].
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() || !(p > 0.0 && p <= 100.0) {
        return None;
    }
    let n = sorted.len();
    // rank = ceil(p/100 * n), 1-based; computed in integers where it matters (p = 50, 99)
    // so that float rounding cannot move it by one.
    let scaled = p * n as f64 / 100.0;
    let mut rank = scaled.ceil() as usize;
    if (scaled - scaled.round()).abs() < 1e-9 {
        rank = scaled.round() as usize;
    }
    let rank = rank.clamp(1, n);
    sorted.get(rank - 1).copied()
}

/// Sorts `samples` in place and summarises them; `None` for no samples.
pub fn summarize(samples: &mut [u64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let sum: u128 = samples.iter().map(|&s| u128::from(s)).sum();
    Some(Summary {
        count: samples.len(),
        p50: percentile(samples, 50.0)?,
        p99: percentile(samples, 99.0)?,
        p999: percentile(samples, 99.9)?,
        max: *samples.last()?,
        mean: sum as f64 / samples.len() as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 1.0), Some(1));
        assert_eq!(percentile(&v, 0.5), Some(1));
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&v, 99.0), Some(990));
        assert_eq!(percentile(&v, 99.9), Some(999));
    }

    #[test]
    fn small_and_odd_sets() {
        assert_eq!(percentile(&[7], 50.0), Some(7));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[1, 2, 3], 50.0), Some(2));
        assert_eq!(percentile(&[1, 2], 50.0), Some(1));
        assert_eq!(percentile(&[1, 2], 99.0), Some(2));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[1], 0.0), None);
        assert_eq!(percentile(&[1], 101.0), None);
        assert_eq!(percentile(&[1], f64::NAN), None);
    }

    #[test]
    fn summary_sorts_and_reports() {
        let mut v = vec![5, 1, 4, 2, 3, 100, 6, 7, 8, 9];
        let s = summarize(&mut v).unwrap();
        assert_eq!(s.count, 10);
        assert_eq!(s.p50, 5);
        assert_eq!(s.p99, 100);
        assert_eq!(s.p999, 100);
        assert_eq!(s.max, 100);
        assert!((s.mean - 14.5).abs() < 1e-9);
        assert_eq!(v[0], 1);
        assert!(summarize(&mut []).is_none());
    }
}
