//! The graph's vectors, one slot per node: kept as f32, or (with `quantization:
//! "int8"`) as int8 codes with one scale per vector, a quarter of the memory.
//!
//! An int8 vector is `scale · codes`, the scale mapping the vector's largest
//! magnitude to 127. A query (f32) is compared with codes directly; two stored
//! vectors with integer sums. The distances are approximate; queries re-rank
//! their results exactly from the records.

use crate::distance::{between, dot, squared_euclidean};
use crate::spec::Distance;

/// The vectors of every slot.
#[derive(Debug, Clone)]
pub(crate) struct Vectors {
    distance: Distance,
    quantized: bool,
    dimensions: usize,
    full: Vec<f32>,
    codes: Vec<i8>,
    scales: Vec<f32>,
    /// Each int8 vector's squared length (`scale² · Σ codes²`), for Euclidean pairs.
    norms: Vec<f32>,
}

impl Vectors {
    pub(crate) fn new(distance: Distance, quantized: bool) -> Self {
        Self {
            distance,
            quantized,
            dimensions: 0,
            full: Vec::new(),
            codes: Vec::new(),
            scales: Vec::new(),
            norms: Vec::new(),
        }
    }

    pub(crate) fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// Sets the dimensions (while empty) and makes room for `slots` slots.
    pub(crate) fn reset(&mut self, dimensions: usize, slots: usize) {
        self.dimensions = dimensions;
        self.full.clear();
        self.codes.clear();
        self.scales.clear();
        self.norms.clear();
        self.resize(slots);
    }

    /// Makes room for `slots` slots.
    pub(crate) fn resize(&mut self, slots: usize) {
        if self.quantized {
            self.codes.resize(slots * self.dimensions, 0);
            self.scales.resize(slots, 0.0);
            self.norms.resize(slots, 0.0);
        } else {
            self.full.resize(slots * self.dimensions, 0.0);
        }
    }

    /// Stores `vector` (prepared, of the set dimensions) in `slot`.
    pub(crate) fn set(&mut self, slot: usize, vector: &[f32]) {
        let range = slot * self.dimensions..(slot + 1) * self.dimensions;
        if !self.quantized {
            self.full[range].copy_from_slice(vector);
            return;
        }
        let largest = vector.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = if largest > 0.0 { largest / 127.0 } else { 1.0 };
        let mut sum = 0i64;
        for (code, x) in self.codes[range].iter_mut().zip(vector) {
            *code = (x / scale).round().clamp(-127.0, 127.0) as i8;
            sum += i64::from(*code) * i64::from(*code);
        }
        self.scales[slot] = scale;
        self.norms[slot] = scale * scale * sum as f32;
    }

    /// Slot `slot`'s vector as f32 (decoded from its codes when quantized).
    pub(crate) fn get(&self, slot: usize) -> Vec<f32> {
        let range = slot * self.dimensions..(slot + 1) * self.dimensions;
        if self.quantized {
            let scale = self.scales[slot];
            self.codes[range].iter().map(|&c| f32::from(c) * scale).collect()
        } else {
            self.full[range].to_vec()
        }
    }

    /// The distance from a prepared query to slot `slot`'s vector.
    pub(crate) fn to_query(&self, query: &[f32], slot: usize) -> f32 {
        let range = slot * self.dimensions..(slot + 1) * self.dimensions;
        if !self.quantized {
            return between(self.distance, query, &self.full[range]);
        }
        let (codes, scale) = (&self.codes[range], self.scales[slot]);
        match self.distance {
            Distance::Cosine => 1.0 - scale * dot_codes(query, codes),
            Distance::DotProduct => -scale * dot_codes(query, codes),
            Distance::Euclidean => {
                let mut sums = [0f32; 8];
                let (q_chunks, c_chunks) = (query.chunks_exact(8), codes.chunks_exact(8));
                let tail: f32 = q_chunks
                    .remainder()
                    .iter()
                    .zip(c_chunks.remainder())
                    .map(|(q, &c)| (q - f32::from(c) * scale).powi(2))
                    .sum();
                for (q, c) in q_chunks.zip(c_chunks) {
                    for i in 0..8 {
                        let d = q[i] - f32::from(c[i]) * scale;
                        sums[i] += d * d;
                    }
                }
                sums.iter().sum::<f32>() + tail
            }
        }
    }

    /// The distance between the vectors of slots `a` and `b`.
    pub(crate) fn between_slots(&self, a: usize, b: usize) -> f32 {
        let (ra, rb) = (a * self.dimensions..(a + 1) * self.dimensions, b * self.dimensions..(b + 1) * self.dimensions);
        if !self.quantized {
            let (va, vb) = (&self.full[ra], &self.full[rb]);
            return match self.distance {
                Distance::Cosine => 1.0 - dot(va, vb),
                Distance::Euclidean => squared_euclidean(va, vb),
                Distance::DotProduct => -dot(va, vb),
            };
        }
        let product = self.scales[a] * self.scales[b] * dot_int(&self.codes[ra], &self.codes[rb]) as f32;
        match self.distance {
            Distance::Cosine => 1.0 - product,
            Distance::DotProduct => -product,
            Distance::Euclidean => (self.norms[a] + self.norms[b] - 2.0 * product).max(0.0),
        }
    }

    /// Bytes held.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.full.capacity() * 4 + self.codes.capacity() + self.scales.capacity() * 4 + self.norms.capacity() * 4
    }
}

/// `Σ qᵢ·cᵢ` of an f32 query and int8 codes.
fn dot_codes(query: &[f32], codes: &[i8]) -> f32 {
    let mut sums = [0f32; 8];
    let (q_chunks, c_chunks) = (query.chunks_exact(8), codes.chunks_exact(8));
    let tail: f32 = q_chunks.remainder().iter().zip(c_chunks.remainder()).map(|(q, &c)| q * f32::from(c)).sum();
    for (q, c) in q_chunks.zip(c_chunks) {
        for i in 0..8 {
            sums[i] += q[i] * f32::from(c[i]);
        }
    }
    sums.iter().sum::<f32>() + tail
}

/// `Σ aᵢ·bᵢ` of two int8 code vectors, in integers.
fn dot_int(a: &[i8], b: &[i8]) -> i32 {
    let mut sums = [0i32; 16];
    let (a_chunks, b_chunks) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: i32 =
        a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(&x, &y)| i32::from(x) * i32::from(y)).sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for i in 0..16 {
            sums[i] += i32::from(x[i]) * i32::from(y[i]);
        }
    }
    sums.iter().sum::<i32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quantised distances stay within a small error of the full ones, for a
    /// query and for pairs, in every distance.
    #[test]
    fn quantised_distances_approximate_the_full_ones() {
        let a: Vec<f32> = (0..37).map(|i| ((i * 7 % 11) as f32 - 5.0) / 7.0).collect();
        let b: Vec<f32> = (0..37).map(|i| ((i * 5 % 13) as f32 - 6.0) / 9.0).collect();
        for distance in [Distance::Cosine, Distance::Euclidean, Distance::DotProduct] {
            let (mut full, mut int8) = (Vectors::new(distance, false), Vectors::new(distance, true));
            full.reset(37, 2);
            int8.reset(37, 2);
            for vectors in [&mut full, &mut int8] {
                vectors.set(0, &a);
                vectors.set(1, &b);
            }
            let exact = full.to_query(&a, 1);
            assert!((int8.to_query(&a, 1) - exact).abs() < 0.05, "{distance:?}");
            assert!((int8.between_slots(0, 1) - full.between_slots(0, 1)).abs() < 0.05, "{distance:?}");
            assert!(int8.get(0).iter().zip(&a).all(|(x, y)| (x - y).abs() < 0.01));
        }
    }
}
