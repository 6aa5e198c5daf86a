//! Vector attributes: the declaration's options (from lyre-vector) and what a
//! value must be to be a vector.

pub use lyre_vector::{Distance, MAX_DIMENSIONS, VectorIndex};

use crate::value::Value;

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
            // The index keeps 32-bit floats: past their range a value would become
            // infinite there, and every distance to it NaN (ranked first).
            Some(x) if x.is_finite() && x.abs() <= f64::from(f32::MAX) => Ok(x),
            Some(x) if x.is_finite() => {
                Err(format!("holds {x:e} at position {i}, past the 32-bit range of the index's numbers"))
            }
            Some(_) => Err(format!("holds a value that is not finite at position {i}")),
            None => Err(format!("holds something other than a number at position {i}")),
        })
        .collect()
}
