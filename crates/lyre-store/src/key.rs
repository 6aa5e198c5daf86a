//! Order-preserving key encoding: byte order of encoded keys equals value order.
//!
//! Order: null < false < true < numbers < strings < arrays (composite keys, element by
//! element, a prefix before what extends it). Numbers compare numerically across
//! integers and floats (`5` and `5.0` encode identically); integers beyond 2^53 keep
//! their exact value through a residual after the rounded float. Strings compare by
//! their UTF-8 bytes.
//!
//! Encodings are self-delimiting, so a composite key (an index value followed by a
//! primary key) orders by its first part, then its second.
//!
//! Layout per value:
//! * null `10`, false `20`, true `21`
//! * number `30`, 8 bytes of the f64 with its sign bit flipped (all bits flipped when
//!   negative), then `01` when the value is exactly that float, or `00`/`02` and a
//!   two-byte biased residual when an integer is below/above its rounded float
//! * string `40`, the bytes with `00` escaped as `00 FF`, then `00 00`; a string whose
//!   encoding exceeds [`MAX_KEY_STRING_BYTES`] is cut there and ends `00 01` instead,
//!   so every longer string sharing that prefix shares one key (callers re-check the
//!   full value)
//! * array (a composite key) `50`, each element's encoding, then `00` (below every
//!   tag, so `[a]` sorts before `[a, b]`)

use crate::error::{Error, Result};

/// Encoded string bytes kept in a key before it is truncated.
pub const MAX_KEY_STRING_BYTES: usize = 250;

const TAG_NULL: u8 = 0x10;
const TAG_FALSE: u8 = 0x20;
const TAG_TRUE: u8 = 0x21;
const TAG_NUMBER: u8 = 0x30;
const TAG_STRING: u8 = 0x40;
const TAG_ARRAY: u8 = 0x50;
const ARRAY_END: u8 = 0x00;

const RESIDUAL_BELOW: u8 = 0x00;
const EXACT: u8 = 0x01;
const RESIDUAL_ABOVE: u8 = 0x02;

const ESCAPE: u8 = 0x00;
const ESCAPED_ZERO: u8 = 0xFF;
const END: u8 = 0x00;
const TRUNCATED_END: u8 = 0x01;

/// A value to encode as a key, borrowed from the caller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyValue<'a> {
    /// JSON null.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float; NaN is not a valid key.
    Float(f64),
    /// A string.
    Str(&'a str),
}

/// A decoded key.
#[derive(Debug, Clone, PartialEq)]
pub enum OwnedKey {
    /// JSON null.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer (also what an integral float decodes to).
    Int(i64),
    /// A non-integral or out-of-range float.
    Float(f64),
    /// A string; when `truncated`, only its stored prefix.
    Str {
        /// The string (or its prefix, lossily decoded when cut inside a character).
        text: String,
        /// Whether the key holds only a prefix of the original string.
        truncated: bool,
    },
    /// A composite key's elements.
    Array(Vec<OwnedKey>),
}

/// How many bytes [`encode_key_into`] appends for `value`: exact, except for a
/// string holding zero bytes (each escaped into two), for which it is a guess.
/// Callers size a key's buffer with it, so building the key does not regrow it.
pub fn encoded_key_len(value: KeyValue<'_>) -> usize {
    match value {
        KeyValue::Null | KeyValue::Bool(_) => 1,
        KeyValue::Float(_) => 10,
        // An integer the float it rounds to does not hold takes a residual too.
        KeyValue::Int(i) if i128::from(i) != (i as f64) as i128 => 12,
        KeyValue::Int(_) => 10,
        KeyValue::Str(s) => 3 + s.len().min(MAX_KEY_STRING_BYTES),
    }
}

/// Encodes `value`, appending to `out`. Returns whether a string was truncated.
pub fn encode_key_into(value: KeyValue<'_>, out: &mut Vec<u8>) -> Result<bool> {
    match value {
        KeyValue::Null => out.push(TAG_NULL),
        KeyValue::Bool(false) => out.push(TAG_FALSE),
        KeyValue::Bool(true) => out.push(TAG_TRUE),
        KeyValue::Float(f) => {
            if f.is_nan() {
                return Err(Error::InvalidKey("NaN is not a valid key"));
            }
            out.push(TAG_NUMBER);
            out.extend_from_slice(&ordered_f64(f));
            out.push(EXACT);
        }
        KeyValue::Int(i) => {
            let rounded = i as f64;
            // `as i128` on a float that came from an i64 is exact (|rounded| <= 2^63).
            let residual = i128::from(i) - rounded as i128;
            out.push(TAG_NUMBER);
            out.extend_from_slice(&ordered_f64(rounded));
            match residual {
                0 => out.push(EXACT),
                r => {
                    out.push(if r < 0 { RESIDUAL_BELOW } else { RESIDUAL_ABOVE });
                    // |r| <= 1024: half the spacing of floats near 2^63.
                    let biased = (r as i16 as u16) ^ 0x8000;
                    out.extend_from_slice(&biased.to_be_bytes());
                }
            }
        }
        KeyValue::Str(s) => {
            out.push(TAG_STRING);
            // Most keys: short enough to keep whole and without a zero byte to
            // escape, so they are copied as they are (what the loop below writes
            // for them, a byte at a time).
            if s.len() <= MAX_KEY_STRING_BYTES && !s.as_bytes().contains(&0) {
                out.extend_from_slice(s.as_bytes());
                out.extend_from_slice(&[ESCAPE, END]);
                return Ok(false);
            }
            return Ok(escape_string_key(s.as_bytes(), out));
        }
    }
    Ok(false)
}

/// Appends a string key's bytes (after its tag) a byte at a time: zero bytes
/// escaped, cut at `MAX_KEY_STRING_BYTES` with the truncation mark (true then), else
/// ended. The general case of `encode_key_into`'s strings.
fn escape_string_key(bytes: &[u8], out: &mut Vec<u8>) -> bool {
    let truncated = escape_string_bytes(bytes, out);
    out.extend_from_slice(&[ESCAPE, if truncated { TRUNCATED_END } else { END }]);
    truncated
}

/// Appends `bytes` with zero bytes escaped, up to `MAX_KEY_STRING_BYTES` of key;
/// true when they did not all fit.
fn escape_string_bytes(bytes: &[u8], out: &mut Vec<u8>) -> bool {
    let mut written = 0usize;
    for &b in bytes {
        let width = if b == 0 { 2 } else { 1 };
        if written + width > MAX_KEY_STRING_BYTES {
            return true;
        }
        if b == 0 {
            out.extend_from_slice(&[ESCAPE, ESCAPED_ZERO]);
        } else {
            out.push(b);
        }
        written += width;
    }
    false
}

/// Appends the key prefix shared by every string starting with `prefix`: the string
/// tag and the escaped bytes without a terminator, cut where keys are truncated.
pub fn encode_string_prefix_into(prefix: &str, out: &mut Vec<u8>) {
    out.push(TAG_STRING);
    escape_string_bytes(prefix.as_bytes(), out);
}

/// The smallest byte string greater than every string that starts with `prefix`, or
/// `None` when no such bound exists (the prefix is all `FF`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut bound = prefix.to_vec();
    while let Some(last) = bound.pop() {
        if last < 0xFF {
            bound.push(last + 1);
            return Some(bound);
        }
    }
    None
}

/// Encodes a composite key (Harper's array primary keys): the elements in order,
/// compared element by element. Returns the key and whether an element was truncated.
pub fn encode_composite_key(parts: &[KeyValue<'_>]) -> Result<(Vec<u8>, bool)> {
    let mut out = Vec::with_capacity(2 + 12 * parts.len());
    out.push(TAG_ARRAY);
    let mut truncated = false;
    for part in parts {
        truncated |= encode_key_into(*part, &mut out)?;
    }
    out.push(ARRAY_END);
    Ok((out, truncated))
}

/// Encodes `value` as a fresh key. Returns the key and whether it was truncated.
pub fn encode_key(value: KeyValue<'_>) -> Result<(Vec<u8>, bool)> {
    let mut out = Vec::with_capacity(encoded_key_len(value));
    let truncated = encode_key_into(value, &mut out)?;
    Ok((out, truncated))
}

/// Decodes the first key in `bytes`; returns it with the number of bytes it used.
pub fn decode_key(bytes: &[u8]) -> Result<(OwnedKey, usize)> {
    let corrupt = || Error::Corrupt("malformed key".to_string());
    let (&tag, rest) = bytes.split_first().ok_or_else(corrupt)?;
    match tag {
        TAG_NULL => Ok((OwnedKey::Null, 1)),
        TAG_FALSE => Ok((OwnedKey::Bool(false), 1)),
        TAG_TRUE => Ok((OwnedKey::Bool(true), 1)),
        TAG_NUMBER => {
            let float_bytes: [u8; 8] = rest.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(corrupt)?;
            let f = unordered_f64(float_bytes);
            match rest.get(8).copied() {
                Some(EXACT) => Ok((number_key(f), 10)),
                Some(marker @ (RESIDUAL_BELOW | RESIDUAL_ABOVE)) => {
                    let r: [u8; 2] = rest.get(9..11).and_then(|b| b.try_into().ok()).ok_or_else(corrupt)?;
                    let residual = i128::from((u16::from_be_bytes(r) ^ 0x8000) as i16);
                    let valid_sign = (marker == RESIDUAL_BELOW) == (residual < 0);
                    let value = f as i128 + residual;
                    match i64::try_from(value) {
                        Ok(i) if valid_sign => Ok((OwnedKey::Int(i), 12)),
                        _ => Err(corrupt()),
                    }
                }
                _ => Err(corrupt()),
            }
        }
        TAG_STRING => {
            let mut text = Vec::new();
            let mut i = 0;
            loop {
                match rest.get(i).copied() {
                    None => return Err(corrupt()),
                    Some(ESCAPE) => match rest.get(i + 1).copied() {
                        Some(ESCAPED_ZERO) => text.push(0),
                        Some(end @ (END | TRUNCATED_END)) => {
                            let truncated = end == TRUNCATED_END;
                            let text = match String::from_utf8(text) {
                                Ok(s) => s,
                                Err(e) if truncated => String::from_utf8_lossy(e.as_bytes()).into_owned(),
                                Err(_) => return Err(corrupt()),
                            };
                            return Ok((OwnedKey::Str { text, truncated }, 1 + i + 2));
                        }
                        _ => return Err(corrupt()),
                    },
                    Some(b) => {
                        text.push(b);
                        i += 1;
                        continue;
                    }
                }
                i += 2;
            }
        }
        TAG_ARRAY => {
            let mut parts = Vec::new();
            let mut i = 0;
            loop {
                match rest.get(i).copied() {
                    None => return Err(corrupt()),
                    Some(ARRAY_END) => return Ok((OwnedKey::Array(parts), 1 + i + 1)),
                    Some(_) => {
                        let (part, used) = decode_key(&rest[i..])?;
                        parts.push(part);
                        i += used;
                    }
                }
            }
        }
        _ => Err(corrupt()),
    }
}

/// Length of the first key in `bytes`, without decoding it.
pub fn skip_key(bytes: &[u8]) -> Result<usize> {
    let corrupt = || Error::Corrupt("malformed key".to_string());
    match bytes.first().copied() {
        Some(TAG_NULL | TAG_FALSE | TAG_TRUE) => Ok(1),
        Some(TAG_NUMBER) => match bytes.get(9).copied() {
            Some(EXACT) => Ok(10),
            Some(RESIDUAL_BELOW | RESIDUAL_ABOVE) => Ok(12),
            _ => Err(corrupt()),
        },
        Some(TAG_STRING) => {
            let mut i = 1;
            while i < bytes.len() {
                if bytes[i] == ESCAPE {
                    match bytes.get(i + 1).copied() {
                        Some(END | TRUNCATED_END) => return Ok(i + 2),
                        Some(ESCAPED_ZERO) => i += 2,
                        _ => return Err(corrupt()),
                    }
                } else {
                    i += 1;
                }
            }
            Err(corrupt())
        }
        Some(TAG_ARRAY) => {
            let mut i = 1;
            loop {
                match bytes.get(i).copied() {
                    None => return Err(corrupt()),
                    Some(ARRAY_END) => return Ok(i + 1),
                    Some(_) => i += skip_key(&bytes[i..])?,
                }
            }
        }
        _ => Err(corrupt()),
    }
}

/// The encoded primary key at the end of an index entry `value ++ primary key`.
pub fn index_entry_primary_key(entry: &[u8]) -> Result<&[u8]> {
    let value_len = skip_key(entry)?;
    Ok(&entry[value_len..])
}

fn number_key(f: f64) -> OwnedKey {
    // i64 spans [-2^63, 2^63); floats in that range that are integral convert exactly.
    if f.fract() == 0.0 && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f) {
        OwnedKey::Int(f as i64)
    } else {
        OwnedKey::Float(f)
    }
}

fn ordered_f64(f: f64) -> [u8; 8] {
    let f = if f == 0.0 { 0.0 } else { f }; // -0.0 and 0.0 are one key
    let bits = f.to_bits();
    let ordered = if bits >> 63 == 1 { !bits } else { bits | (1 << 63) };
    ordered.to_be_bytes()
}

fn unordered_f64(bytes: [u8; 8]) -> f64 {
    let ordered = u64::from_be_bytes(bytes);
    let bits = if ordered >> 63 == 1 { ordered & !(1 << 63) } else { !ordered };
    f64::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    #[derive(Debug, Clone)]
    enum Sample {
        Null,
        Bool(bool),
        Int(i64),
        Float(f64),
        Str(String),
    }

    impl Sample {
        fn key(&self) -> KeyValue<'_> {
            match self {
                Sample::Null => KeyValue::Null,
                Sample::Bool(b) => KeyValue::Bool(*b),
                Sample::Int(i) => KeyValue::Int(*i),
                Sample::Float(f) => KeyValue::Float(*f),
                Sample::Str(s) => KeyValue::Str(s),
            }
        }

        fn rank(&self) -> u8 {
            match self {
                Sample::Null => 0,
                Sample::Bool(false) => 1,
                Sample::Bool(true) => 2,
                Sample::Int(_) | Sample::Float(_) => 3,
                Sample::Str(_) => 4,
            }
        }

        /// The reference order: type rank, then numeric value exactly, then bytes.
        fn cmp_value(&self, other: &Sample) -> Ordering {
            match (self, other) {
                (Sample::Str(a), Sample::Str(b)) => a.as_bytes().cmp(b.as_bytes()),
                (a, b) if a.rank() == 3 && b.rank() == 3 => cmp_numbers(a, b),
                (a, b) => a.rank().cmp(&b.rank()),
            }
        }
    }

    fn cmp_numbers(a: &Sample, b: &Sample) -> Ordering {
        match (a, b) {
            (Sample::Int(x), Sample::Int(y)) => x.cmp(y),
            (Sample::Float(x), Sample::Float(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
            (Sample::Int(x), Sample::Float(y)) => cmp_int_float(*x, *y),
            (Sample::Float(x), Sample::Int(y)) => cmp_int_float(*y, *x).reverse(),
            _ => Ordering::Equal,
        }
    }

    fn cmp_int_float(i: i64, f: f64) -> Ordering {
        if f >= 9.3e18 {
            return Ordering::Less;
        }
        if f <= -9.3e18 {
            return Ordering::Greater;
        }
        let whole = f.floor();
        match i128::from(i).cmp(&(whole as i128)) {
            Ordering::Equal if f > whole => Ordering::Less,
            other => other,
        }
    }

    fn sample() -> impl Strategy<Value = Sample> {
        prop_oneof![
            Just(Sample::Null),
            any::<bool>().prop_map(Sample::Bool),
            any::<i64>().prop_map(Sample::Int),
            (-1000i64..1000).prop_map(Sample::Int),
            ((1i64 << 53) - 5..(1i64 << 53) + 5000).prop_map(Sample::Int),
            any::<f64>().prop_filter("not NaN", |f| !f.is_nan()).prop_map(Sample::Float),
            (-1000.0f64..1000.0).prop_map(Sample::Float),
            "[a-c\\x00]{0,6}".prop_map(Sample::Str),
            any::<String>().prop_map(Sample::Str),
        ]
    }

    proptest! {
        #[test]
        fn encoded_order_equals_value_order(a in sample(), b in sample()) {
            let (ka, ta) = encode_key(a.key()).unwrap();
            let (kb, tb) = encode_key(b.key()).unwrap();
            prop_assume!(!ta && !tb);
            prop_assert_eq!(ka.cmp(&kb), a.cmp_value(&b), "{:?} vs {:?}", a, b);
        }

        #[test]
        fn array_keys_order_element_by_element(a in proptest::collection::vec(sample(), 0..4), b in proptest::collection::vec(sample(), 0..4)) {
            let (parts_a, parts_b): (Vec<KeyValue<'_>>, Vec<KeyValue<'_>>) =
                (a.iter().map(Sample::key).collect(), b.iter().map(Sample::key).collect());
            let (ka, ta) = encode_composite_key(&parts_a).unwrap();
            let (kb, tb) = encode_composite_key(&parts_b).unwrap();
            prop_assume!(!ta && !tb);
            let by_values = a.iter().zip(&b).map(|(x, y)| x.cmp_value(y)).find(|o| o.is_ne()).unwrap_or(a.len().cmp(&b.len()));
            prop_assert_eq!(ka.cmp(&kb), by_values, "{:?} vs {:?}", a, b);
            // Self-delimiting: decoded and skipped to its end, and above every scalar.
            let (decoded, used) = decode_key(&ka).unwrap();
            prop_assert_eq!(used, ka.len());
            prop_assert_eq!(skip_key(&ka).unwrap(), ka.len());
            let OwnedKey::Array(parts) = decoded else { panic!("not an array") };
            prop_assert_eq!(parts.len(), a.len());
            if let Some(first) = a.first() {
                prop_assert!(encode_key(first.key()).unwrap().0 < ka);
            }
        }

        #[test]
        fn composite_keys_order_by_first_then_second(a in sample(), b in sample(), pa in any::<i64>(), pb in any::<i64>()) {
            let mut ka = encode_key(a.key()).unwrap().0;
            encode_key_into(KeyValue::Int(pa), &mut ka).unwrap();
            let mut kb = encode_key(b.key()).unwrap().0;
            encode_key_into(KeyValue::Int(pb), &mut kb).unwrap();
            let expected = a.cmp_value(&b).then(pa.cmp(&pb));
            prop_assert_eq!(ka.cmp(&kb), expected);
            prop_assert_eq!(decode_key(index_entry_primary_key(&ka).unwrap()).unwrap().0, OwnedKey::Int(pa));
        }

        #[test]
        fn keys_round_trip(a in sample()) {
            let (k, truncated) = encode_key(a.key()).unwrap();
            let (decoded, used) = decode_key(&k).unwrap();
            prop_assert_eq!(used, k.len());
            prop_assert_eq!(skip_key(&k).unwrap(), k.len());
            match (&a, decoded) {
                (Sample::Null, OwnedKey::Null) => {}
                (Sample::Bool(x), OwnedKey::Bool(y)) => prop_assert_eq!(*x, y),
                (Sample::Int(x), OwnedKey::Int(y)) => prop_assert_eq!(*x, y),
                (Sample::Float(x), OwnedKey::Float(y)) => prop_assert_eq!(*x, y),
                (Sample::Float(x), OwnedKey::Int(y)) => prop_assert_eq!(*x, y as f64),
                (Sample::Str(x), OwnedKey::Str { text, truncated: t }) => {
                    prop_assert_eq!(t, truncated);
                    let kept = text.trim_end_matches(char::REPLACEMENT_CHARACTER);
                    if !t { prop_assert_eq!(x, &text) } else { prop_assert!(x.starts_with(kept)) }
                }
                (a, d) => prop_assert!(false, "{:?} decoded as {:?}", a, d),
            }
        }

        #[test]
        fn truncated_strings_keep_prefix_order(a in "[ab]{240,260}", b in "[ab]{240,260}") {
            let (ka, _) = encode_key(KeyValue::Str(&a)).unwrap();
            let (kb, _) = encode_key(KeyValue::Str(&b)).unwrap();
            // Truncation may tie distinct strings but never inverts their order.
            if ka != kb {
                prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = decode_key(&bytes);
            let _ = skip_key(&bytes);
        }
    }

    proptest! {
        #[test]
        fn the_encoded_length_is_known_before_encoding(a in sample()) {
            let zero_bytes = matches!(&a, Sample::Str(s) if s.contains('\0'));
            prop_assume!(!zero_bytes);
            prop_assert_eq!(encoded_key_len(a.key()), encode_key(a.key()).unwrap().0.len(), "{:?}", a);
        }
    }

    #[test]
    fn integers_and_integral_floats_share_a_key() {
        assert_eq!(encode_key(KeyValue::Int(5)).unwrap(), encode_key(KeyValue::Float(5.0)).unwrap());
        assert_eq!(encode_key(KeyValue::Float(-0.0)).unwrap(), encode_key(KeyValue::Float(0.0)).unwrap());
    }

    proptest! {
        #[test]
        fn string_prefixes_bound_exactly_the_strings_that_start_with_them(p in "[ab\\x00]{0,4}", s in "[ab\\x00]{0,6}") {
            let mut prefix = Vec::new();
            encode_string_prefix_into(&p, &mut prefix);
            let upper = prefix_successor(&prefix).unwrap();
            let key = encode_key(KeyValue::Str(&s)).unwrap().0;
            let inside = key.as_slice() >= prefix.as_slice() && key < upper;
            prop_assert_eq!(inside, s.starts_with(&p), "{:?} {:?}", p, s);
        }
    }

    proptest! {
        #[test]
        fn a_plain_string_key_is_what_the_escaping_loop_writes(s in "[^\\x00]{0,80}|[a-z]{240,260}|[a-z\\x00]{0,260}") {
            let mut looped = vec![TAG_STRING];
            let truncated = escape_string_key(s.as_bytes(), &mut looped);
            prop_assert_eq!(encode_key(KeyValue::Str(&s)).unwrap(), (looped, truncated));
        }
    }

    #[test]
    fn a_string_key_at_the_length_limit_is_kept_whole_and_one_past_it_is_cut() {
        let a = |n: usize| "a".repeat(n);
        for (text, cut) in
            [(a(249), false), (a(250), false), (a(251), true), ("é".repeat(125), false), (a(249) + "é", true)]
        {
            let mut looped = vec![TAG_STRING];
            let looped_cut = escape_string_key(text.as_bytes(), &mut looped);
            assert_eq!(encode_key(KeyValue::Str(&text)).unwrap(), (looped, looped_cut), "{} bytes", text.len());
            assert_eq!(looped_cut, cut, "{} bytes", text.len());
        }
    }

    #[test]
    fn successor_skips_trailing_ff() {
        assert_eq!(prefix_successor(&[1, 0xFF, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xFF]), None);
    }

    #[test]
    fn nan_is_rejected() {
        assert!(matches!(encode_key(KeyValue::Float(f64::NAN)), Err(Error::InvalidKey(_))));
    }

    #[test]
    fn long_strings_are_truncated_and_flagged() {
        let long = "x".repeat(1000);
        let (k, truncated) = encode_key(KeyValue::Str(&long)).unwrap();
        assert!(truncated);
        assert_eq!(k.len(), 1 + MAX_KEY_STRING_BYTES + 2);
    }
}
