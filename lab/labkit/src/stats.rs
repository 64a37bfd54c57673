//! The summary statistics of the lab's reports, under one rule.
//!
//! **Every percentile and median is a nearest-rank one**: the `p`-th percentile of `n`
//! samples is the `⌈p/100 · n⌉`-th smallest (the first for `p = 0`). It is always a value
//! that was measured, never an interpolation between two: the median of an even count is
//! the lower of the two middle samples, and with 30 samples the 99th percentile is the
//! slowest one. An empty sample set gives `T::default()` (0 for numbers); a caller for
//! whom "nothing measured" must read differently checks for emptiness first.
//!
//! Values that do not compare (NaN) sort as equal to their neighbours and do not panic.

use std::cmp::Ordering;

/// The nearest-rank `p`-th percentile (`p` in 0..=100) of unsorted samples;
/// `T::default()` when there are none.
pub fn percentile<T: Copy + PartialOrd + Default>(samples: &[T], p: f64) -> T {
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
    percentile_sorted(&v, p)
}

/// [`percentile`] of samples already sorted ascending.
pub fn percentile_sorted<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Several percentiles of the same samples, sorting them once.
pub fn percentiles<T: Copy + PartialOrd + Default, const N: usize>(
    samples: &[T],
    ps: [f64; N],
) -> [T; N] {
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
    ps.map(|p| percentile_sorted(&v, p))
}

/// The median: the nearest-rank 50th percentile (the lower middle sample of an even
/// count); `T::default()` when there are none.
pub fn median<T: Copy + PartialOrd + Default>(samples: &[T]) -> T {
    percentile(samples, 50.0)
}

/// The arithmetic mean; NaN when there are no samples.
pub fn mean(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        f64::NAN
    } else {
        samples.iter().sum::<f64>() / samples.len() as f64
    }
}

/// Mean and population standard deviation; `(0, 0)` when there are no samples.
pub fn mean_std(samples: &[f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    let m = mean(samples);
    let var = samples.iter().map(|x| (x - m).powi(2)).sum::<f64>() / samples.len() as f64;
    (m, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile::<u32>(&[], 50.0), 0);
        // 30 blocks: the 99th percentile is the slowest.
        let blocks: Vec<f64> = (1..=30).map(f64::from).collect();
        assert_eq!(percentile(&blocks, 99.0), 30.0);
    }

    #[test]
    fn tails_of_a_bootstrap() {
        let v: Vec<f64> = (0..=1000).map(f64::from).collect();
        assert_eq!(percentiles(&v, [2.5, 97.5]), [25.0, 975.0]);
        assert_eq!(percentiles(&[3.0], [2.5, 97.5]), [3.0, 3.0]);
    }

    #[test]
    fn medians_are_measured_values() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.0);
        assert_eq!(median(&[7u64]), 7);
        assert_eq!(median::<f64>(&[]), 0.0);
        // A NaN among the samples does not panic the sort.
        let _ = median(&[2.0, f64::NAN, 1.0]);
    }

    #[test]
    fn mean_and_spread() {
        assert!(mean(&[]).is_nan());
        assert_eq!(mean(&[1.0, 2.0, 6.0]), 3.0);
        assert_eq!(mean_std(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]), (5.0, 2.0));
        assert_eq!(mean_std(&[]), (0.0, 0.0));
    }
}
