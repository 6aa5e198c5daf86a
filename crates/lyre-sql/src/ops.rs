//! What SQL's operators do to values: comparison with SQL's unknown (`NULL`),
//! arithmetic, truth, `LIKE` patterns, and the order `ORDER BY` sorts in.
//!
//! Comparisons follow the order of Lyre's indexes (`NULL` < booleans < numbers <
//! strings), so a condition answers the same whether an index or a scan serves it:
//! `'10' = 10` is false, as in Harper's indexed search. Arithmetic follows
//! JavaScript, as Harper's SQL does: `+` with a string concatenates, numeric strings
//! count as numbers, and division yields a fraction.

use std::cmp::Ordering;

use lyre_core::Value;

/// SQL's three-valued truth: `None` is unknown (a comparison with `NULL`).
pub type Truth = Option<bool>;

/// The truth of `value` in a condition: booleans as themselves, numbers as non-zero,
/// strings as non-empty, `NULL` unknown.
pub fn truth(value: &Value) -> Truth {
    match value {
        Value::Null => None,
        Value::Bool(b) => Some(*b),
        Value::Int(i) => Some(*i != 0),
        Value::Float(f) => Some(*f != 0.0 && !f.is_nan()),
        Value::String(s) => Some(!s.is_empty()),
        Value::Bytes(_) | Value::Blob(_) | Value::Array(_) | Value::Object(_) => Some(true),
    }
}

/// A truth as a value (`NULL` when unknown).
pub fn truth_value(truth: Truth) -> Value {
    truth.map_or(Value::Null, Value::Bool)
}

/// A number read from a value: numbers, booleans as 0 and 1, numeric strings.
pub fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        Value::String(s) => s.trim().parse::<f64>().ok().filter(|_| !s.trim().is_empty()),
        _ => None,
    }
}

/// Compares two values as SQL's comparison operators do; `None` when either is
/// `NULL` or they cannot be compared.
pub fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Null, _) | (_, Value::Null) => None,
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        (Value::Int(_) | Value::Float(_), Value::Int(_) | Value::Float(_)) => number(a)?.partial_cmp(&number(b)?),
        (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => {
            (a == b).then_some(Ordering::Equal)
        }
        _ => Some(rank(a).cmp(&rank(b))),
    }
}

/// A value's place in the order of types: `NULL`, booleans, numbers, strings, the rest.
fn rank(value: &Value) -> u8 {
    match value {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Int(_) | Value::Float(_) => 2,
        Value::String(_) => 3,
        Value::Bytes(_) | Value::Blob(_) => 4,
        Value::Array(_) => 5,
        Value::Object(_) => 6,
    }
}

/// Whether two values are equal under SQL's `=`: `None` when either is `NULL`.
pub fn equal(a: &Value, b: &Value) -> Truth {
    compare(a, b).map(|ordering| ordering == Ordering::Equal)
}

/// The order `ORDER BY` sorts in: `NULL` (and missing values) first, then booleans,
/// numbers, strings, and anything else, each in its natural order.
pub fn sort_order(a: &Value, b: &Value) -> Ordering {
    match rank(a).cmp(&rank(b)) {
        Ordering::Equal => compare(a, b).unwrap_or(Ordering::Equal),
        other => other,
    }
}

/// A value as text (for concatenation, `LIKE`, string functions): strings as
/// themselves, numbers as JavaScript prints them, `NULL` as empty.
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => float_text(*f),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Array(_) | Value::Object(_) | Value::Blob(_) => serde_json::to_string(value).unwrap_or_default(),
    }
}

/// The longest text an expression may make (16 MiB): `REPLACE`, `CONCAT` and
/// concatenation check it before they build, so nested ones cannot exhaust memory.
pub const MAX_TEXT: usize = 16 << 20;

/// Refuses text of `len` bytes past [`MAX_TEXT`].
pub fn check_text_size(len: usize) -> crate::error::Result<()> {
    if len > MAX_TEXT {
        return Err(crate::error::SqlError::invalid(format!(
            "an expression would make text of {len} bytes, more than the {MAX_TEXT} allowed"
        )));
    }
    Ok(())
}

/// A float as JavaScript prints it: integral values without a fraction.
fn float_text(f: f64) -> String {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e21 { format!("{f:.0}") } else { f.to_string() }
}

/// A float result as a value: an integer when it is one exactly (JavaScript has one
/// number type, so `4 / 2` is `2`, not `2.0`).
pub fn from_f64(f: f64) -> Value {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 { Value::Int(f as i64) } else { Value::Float(f) }
}

/// An arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arith {
    /// `+` (concatenation when either side is a non-numeric string).
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/`.
    Div,
    /// `%`.
    Mod,
}

/// Applies `op`; `NULL` when either side is `NULL` or not a number.
pub fn arithmetic(op: Arith, a: &Value, b: &Value) -> Value {
    if matches!(a, Value::Null) || matches!(b, Value::Null) {
        return Value::Null;
    }
    if op == Arith::Add && (matches!(a, Value::String(_)) || matches!(b, Value::String(_))) {
        return Value::String(text(a) + &text(b));
    }
    if let (Value::Int(x), Value::Int(y)) = (a, b) {
        let exact = match op {
            Arith::Add => x.checked_add(*y),
            Arith::Sub => x.checked_sub(*y),
            Arith::Mul => x.checked_mul(*y),
            Arith::Div | Arith::Mod => None,
        };
        if let Some(exact) = exact {
            return Value::Int(exact);
        }
    }
    let (Some(x), Some(y)) = (number(a), number(b)) else { return Value::Null };
    let result = match op {
        Arith::Add => x + y,
        Arith::Sub => x - y,
        Arith::Mul => x * y,
        Arith::Div if y == 0.0 => return Value::Null,
        Arith::Div => x / y,
        Arith::Mod if y == 0.0 => return Value::Null,
        Arith::Mod => x % y,
    };
    from_f64(result)
}

/// A compiled `LIKE` pattern: `%` any run, `_` one character, an escape character
/// taking the next one literally.
#[derive(Debug, Clone)]
pub struct LikePattern {
    parts: Vec<LikePart>,
    case_insensitive: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum LikePart {
    Literal(char),
    One,
    Any,
}

impl LikePattern {
    /// Compiles `pattern`.
    pub fn new(pattern: &str, escape: Option<char>, case_insensitive: bool) -> LikePattern {
        let mut parts = Vec::new();
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            let part = match c {
                c if Some(c) == escape => LikePart::Literal(chars.next().unwrap_or(c)),
                '%' => LikePart::Any,
                '_' => LikePart::One,
                c => LikePart::Literal(c),
            };
            if !(part == LikePart::Any && parts.last() == Some(&LikePart::Any)) {
                parts.push(part);
            }
        }
        LikePattern { parts, case_insensitive }
    }

    /// Prefixes every match starts with one of (for index ranges): the pattern's
    /// leading literal text, and when case is ignored each spelling of it in upper
    /// and lower case (case is ASCII's). A prefix is cut after the sixth ASCII letter
    /// (at most 64 spellings); a shorter prefix still covers every match. `None` when
    /// the pattern starts with a wildcard.
    pub fn prefixes(&self) -> Option<Vec<String>> {
        const MAX_LETTERS: usize = 6;
        let mut spellings = vec![String::new()];
        let mut letters = 0;
        for part in &self.parts {
            let LikePart::Literal(c) = part else { break };
            if !self.case_insensitive || !c.is_ascii_alphabetic() {
                spellings.iter_mut().for_each(|s| s.push(*c));
                continue;
            }
            if letters == MAX_LETTERS {
                break;
            }
            letters += 1;
            spellings = spellings
                .into_iter()
                .flat_map(|s| [format!("{s}{}", c.to_ascii_lowercase()), format!("{s}{}", c.to_ascii_uppercase())])
                .collect();
        }
        (!spellings[0].is_empty()).then_some(spellings)
    }

    /// Whether `text` matches, the whole of it.
    pub fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text.chars().collect();
        // Case is ignored for ASCII letters only, so the index ranges of
        // `prefixes` cover every match.
        let same = |p: char, t: char| if self.case_insensitive { p.eq_ignore_ascii_case(&t) } else { p == t };
        // Greedy matching with backtracking to the last `%` (linear in practice,
        // never exponential).
        let (mut p, mut t) = (0, 0);
        let mut resume: Option<(usize, usize)> = None;
        while t < text.len() {
            match self.parts.get(p) {
                Some(LikePart::Any) => {
                    resume = Some((p, t));
                    p += 1;
                }
                Some(LikePart::One) => {
                    p += 1;
                    t += 1;
                }
                Some(LikePart::Literal(c)) if same(*c, text[t]) => {
                    p += 1;
                    t += 1;
                }
                _ => match resume {
                    Some((star, at)) => {
                        p = star + 1;
                        t = at + 1;
                        resume = Some((star, at + 1));
                    }
                    None => return false,
                },
            }
        }
        self.parts[p..].iter().all(|part| *part == LikePart::Any)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_matches_as_sql_does() {
        let cases = [
            ("a%", "abc", true),
            ("a%", "bac", false),
            ("%c", "abc", true),
            ("a_c", "abc", true),
            ("a_c", "abbc", false),
            ("%b%", "abc", true),
            ("%%b", "ab", true),
            ("a%b%c", "axxbyyc", true),
            ("a%b%c", "axxbyy", false),
            ("", "", true),
            ("%", "", true),
            ("_", "", false),
            ("50!%", "50%", true),
            ("50!%", "500", false),
        ];
        for (pattern, text, expected) in cases {
            let like = LikePattern::new(pattern, Some('!'), false);
            assert_eq!(like.matches(text), expected, "{pattern} LIKE {text}");
        }
        assert!(LikePattern::new("AB%", None, true).matches("abc"));
        // Only ASCII letters fold: the Kelvin sign is not `k`.
        assert!(!LikePattern::new("k%", None, true).matches("\u{212A}elvin"));
        assert!(LikePattern::new("é%", None, true).matches("école"));
        assert!(!LikePattern::new("AB%", None, false).matches("abc"));
        assert_eq!(LikePattern::new("ab%c", None, false).prefixes(), Some(vec!["ab".to_string()]));
        assert_eq!(LikePattern::new("%ab", None, false).prefixes(), None);
        assert_eq!(LikePattern::new("a1%", None, true).prefixes(), Some(vec!["a1".to_string(), "A1".to_string()]));
        assert_eq!(LikePattern::new("abcdefgh%", None, true).prefixes().map(|p| p.len()), Some(64));
    }

    #[test]
    fn comparisons_follow_index_order_and_know_null() {
        assert_eq!(compare(&Value::String("10".into()), &Value::Int(10)), Some(Ordering::Greater));
        assert_eq!(compare(&Value::Bool(true), &Value::Int(0)), Some(Ordering::Less));
        assert_eq!(compare(&Value::Int(1), &Value::Float(1.0)), Some(Ordering::Equal));
        assert_eq!(compare(&Value::Null, &Value::Int(1)), None);
        assert_eq!(equal(&Value::String("a".into()), &Value::String("a".into())), Some(true));
        assert_eq!(arithmetic(Arith::Div, &Value::Int(4), &Value::Int(2)), Value::Int(2));
        assert_eq!(arithmetic(Arith::Div, &Value::Int(1), &Value::Int(2)), Value::Float(0.5));
        assert_eq!(arithmetic(Arith::Add, &Value::String("a".into()), &Value::Int(1)), Value::String("a1".into()));
        assert_eq!(arithmetic(Arith::Add, &Value::Null, &Value::Int(1)), Value::Null);
        assert_eq!(sort_order(&Value::Null, &Value::Int(0)), Ordering::Less);
    }
}
