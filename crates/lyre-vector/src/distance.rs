//! Distances between vectors, written so the compiler vectorises them (eight
//! independent sums, no branch inside the loop).

use crate::spec::Distance;

/// `Σ aᵢ·bᵢ`.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for i in 0..8 {
            sums[i] += x[i] * y[i];
        }
    }
    sums.iter().sum::<f32>() + tail
}

/// `Σ (aᵢ − bᵢ)²`.
pub fn squared_euclidean(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| (x - y) * (x - y)).sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for i in 0..8 {
            let d = x[i] - y[i];
            sums[i] += d * d;
        }
    }
    sums.iter().sum::<f32>() + tail
}

/// The vector as the index keeps it: cosine compares directions only, so its
/// vectors are kept at unit length (a zero vector stays zero).
pub fn prepare(distance: Distance, vector: &[f64]) -> Vec<f32> {
    let mut out: Vec<f32> = vector.iter().map(|&x| x as f32).collect();
    if distance == Distance::Cosine {
        let norm = dot(&out, &out).sqrt();
        if norm > 0.0 {
            out.iter_mut().for_each(|x| *x /= norm);
        }
    }
    out
}

/// The distance between two vectors as [`prepare`] keeps them.
pub fn between(distance: Distance, a: &[f32], b: &[f32]) -> f32 {
    match distance {
        Distance::Cosine => 1.0 - dot(a, b),
        Distance::Euclidean => squared_euclidean(a, b),
        Distance::DotProduct => -dot(a, b),
    }
}

/// The distance between two vectors as given (not prepared), in f64: what a query
/// reports as `$distance` and what exact search ranks by.
pub fn exact(distance: Distance, a: &[f64], b: &[f64]) -> f64 {
    let dot = || a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    match distance {
        Distance::Cosine => {
            let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
            let denominator = norm(a) * norm(b);
            1.0 - if denominator > 0.0 { dot() / denominator } else { 0.0 }
        }
        Distance::Euclidean => a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum(),
        Distance::DotProduct => -dot(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectorised sums agree with the plain ones, remainders included.
    #[test]
    fn sums_match_the_plain_loops() {
        let a: Vec<f32> = (0..19).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..19).map(|i| (i as f32).sin()).collect();
        let plain_dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let plain_l2: f32 = a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).sum();
        assert!((dot(&a, &b) - plain_dot).abs() < 1e-4);
        assert!((squared_euclidean(&a, &b) - plain_l2).abs() < 1e-3);
    }

    /// Prepared cosine distance equals the exact one; the zero vector is at distance 1.
    #[test]
    fn cosine_on_prepared_vectors_is_exact_cosine() {
        let (a, b) = (vec![3.0, 4.0, 0.0], vec![1.0, 0.0, 1.0]);
        let prepared = between(Distance::Cosine, &prepare(Distance::Cosine, &a), &prepare(Distance::Cosine, &b));
        assert!((f64::from(prepared) - exact(Distance::Cosine, &a, &b)).abs() < 1e-6);
        assert_eq!(exact(Distance::Cosine, &[0.0, 0.0], &[1.0, 0.0]), 1.0);
        assert_eq!(exact(Distance::Euclidean, &[0.0, 0.0], &[3.0, 4.0]), 25.0);
        assert_eq!(exact(Distance::DotProduct, &[1.0, 2.0], &[3.0, 4.0]), -11.0);
    }
}
