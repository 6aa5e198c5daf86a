//! A small fixed histogram of durations for the analytics: 4 buckets per
//! doubling from 1 µs to about 72 minutes (128 counters, 512 bytes), so a
//! percentile is known within about 19% (reported at the bucket's geometric
//! middle, within 10%). Small enough to keep one per path, method and type.

/// Buckets per doubling.
const PER_DOUBLING: f64 = 4.0;
/// Buckets in all (32 doublings of microseconds).
const BUCKETS: usize = 128;

/// Counts of durations by logarithmic bucket.
#[derive(Debug, Clone)]
pub struct LogHistogram {
    counts: [u32; BUCKETS],
    total: u64,
    sum_micros: u128,
}

impl Default for LogHistogram {
    fn default() -> Self {
        LogHistogram { counts: [0; BUCKETS], total: 0, sum_micros: 0 }
    }
}

impl LogHistogram {
    /// Adds a duration of `micros` microseconds.
    pub fn record(&mut self, micros: u64) {
        let micros = micros.max(1);
        let bucket = ((micros as f64).log2() * PER_DOUBLING) as usize;
        let slot = &mut self.counts[bucket.min(BUCKETS - 1)];
        *slot = slot.saturating_add(1);
        self.total += 1;
        self.sum_micros += u128::from(micros);
    }

    /// Durations recorded.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// The mean, in microseconds.
    pub fn mean_micros(&self) -> f64 {
        if self.total == 0 { 0.0 } else { self.sum_micros as f64 / self.total as f64 }
    }

    /// The duration at `quantile` (0–1), in microseconds: the geometric middle of
    /// the bucket holding it.
    pub fn quantile_micros(&self, quantile: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((quantile.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += u64::from(*count);
            if seen >= rank {
                return 2f64.powf((bucket as f64 + 0.5) / PER_DOUBLING);
            }
        }
        2f64.powf(BUCKETS as f64 / PER_DOUBLING)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_land_within_a_bucket_of_the_truth() {
        let mut histogram = LogHistogram::default();
        for micros in 1..=10_000u64 {
            histogram.record(micros);
        }
        assert_eq!(histogram.len(), 10_000);
        assert!((histogram.mean_micros() - 5_000.5).abs() < 0.01);
        for (quantile, truth) in [(0.5, 5_000.0), (0.9, 9_000.0), (0.99, 9_900.0)] {
            let got = histogram.quantile_micros(quantile);
            assert!((got / truth - 1.0).abs() < 0.2, "{quantile}: {got} for {truth}");
        }
        assert_eq!(LogHistogram::default().quantile_micros(0.5), 0.0);
        let mut huge = LogHistogram::default();
        huge.record(u64::MAX);
        assert!(huge.quantile_micros(1.0) > 1e9);
    }
}
