//! Seeded clustered vectors for tests: points around random centres, on which
//! recall means something (on uniform random vectors every neighbour is about as
//! far as every other).

/// `count` points around `clusters` centres in `[-1, 1]^dimensions` (each point its
/// centre, `i % clusters`, plus uniform noise of ±0.2 per coordinate); the same for
/// the same seed.
pub fn clustered(count: usize, dimensions: usize, clusters: usize, seed: u64) -> Vec<Vec<f64>> {
    let mut next = uniform(seed);
    let clusters = clusters.max(1);
    let centres: Vec<Vec<f64>> = (0..clusters).map(|_| (0..dimensions).map(|_| next() * 2.0 - 1.0).collect()).collect();
    (0..count).map(|i| centres[i % clusters].iter().map(|c| c + (next() - 0.5) * 0.4).collect()).collect()
}

/// Uniform draws in `[0, 1)` from a seed (xorshift64): the same sequence for the
/// same seed, everywhere (the benchmark's dataset is drawn from it too).
pub fn uniform(seed: u64) -> impl FnMut() -> f64 {
    let mut state = seed.max(1);
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    }
}
