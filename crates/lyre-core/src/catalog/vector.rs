//! Vector attributes: the declaration's options (from lyre-vector) and what a
//! value must be to be a vector.

pub use lyre_vector::{Distance, MAX_DIMENSIONS, VectorIndex};

use crate::value::Value;

/// The largest coordinate a vector may have. The index keeps and sums 32-bit
/// floats: past this, a sum of squares (or of squared differences) over the most
/// dimensions could overflow, and an infinite or NaN distance ranks a vector
/// before every real neighbour.
pub const LARGEST_COORDINATE: f64 = 7.2e16;

/// Reads `value` as a vector of finite numbers; the error says what is wrong
/// (the caller names the attribute).
pub fn read_vector(value: &Value) -> Result<Vec<f64>, String> {
    let Value::Array(items) = value else {
        return Err("must be an array of numbers".to_string());
    };
    if items.is_empty() {
        return Err("must not be an empty array".to_string());
    }
    if items.len() > MAX_DIMENSIONS {
        return Err(format!("has {} dimensions, more than the {MAX_DIMENSIONS} allowed", items.len()));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item.as_f64() {
            Some(x) if x.is_finite() && x.abs() <= LARGEST_COORDINATE => Ok(x),
            Some(x) if x.is_finite() => Err(format!(
                "holds {x:e} at position {i}, past ±{LARGEST_COORDINATE:.1e}, the largest value the index can compare"
            )),
            Some(_) => Err(format!("holds a value that is not finite at position {i}")),
            None => Err(format!("holds something other than a number at position {i}")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{LARGEST_COORDINATE, MAX_DIMENSIONS};

    #[test]
    fn the_largest_coordinate_keeps_every_distance_finite_in_f32() {
        // (2B)^2 summed over the most dimensions: the Euclidean worst case.
        let worst = (2.0 * LARGEST_COORDINATE).powi(2) * MAX_DIMENSIONS as f64;
        assert!(worst <= f64::from(f32::MAX), "{worst:e}");
    }
}
