//! The scalar functions SQL statements may call: string, math, null handling and
//! date functions, with Harper's names (the date functions' workings are in
//! `dates.rs`).

use chrono::{Datelike, Timelike};
use lyre_core::Value;

use crate::dates::{self, date_of, instant};
use crate::error::{Result, SqlError};
use crate::ops::{self, text};

/// A scalar function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    /// `LENGTH(s)` (also `LEN`, `CHAR_LENGTH`): characters in the text.
    Length,
    /// `UPPER(s)` (also `UCASE`).
    Upper,
    /// `LOWER(s)` (also `LCASE`).
    Lower,
    /// `CONCAT(a, b, …)`: `NULL`s count as empty.
    Concat,
    /// `SUBSTRING(s, start[, length])` (also `SUBSTR`, `MID`): 1-based.
    Substring,
    /// `TRIM(s)`.
    Trim,
    /// `LTRIM(s)`.
    LTrim,
    /// `RTRIM(s)`.
    RTrim,
    /// `REPLACE(s, from, to)`: every occurrence.
    Replace,
    /// `LEFT(s, n)`.
    Left,
    /// `RIGHT(s, n)`.
    Right,
    /// `ROUND(n[, digits])`.
    Round,
    /// `FLOOR(n)`.
    Floor,
    /// `CEIL(n)` (also `CEILING`).
    Ceil,
    /// `ABS(n)`.
    Abs,
    /// `SQRT(n)`.
    Sqrt,
    /// `POWER(n, p)` (also `POW`).
    Power,
    /// `EXP(n)`.
    Exp,
    /// `LOG(n)`: the natural logarithm.
    Ln,
    /// `LOG10(n)`.
    Log10,
    /// `SIGN(n)`.
    Sign,
    /// `COALESCE(a, b, …)` (also `IFNULL`): the first that is not `NULL`.
    Coalesce,
    /// `NULLIF(a, b)`: `NULL` when equal, else `a`.
    NullIf,
    /// `NOW()`, `GETDATE()`, `CURRENT_TIMESTAMP`, `GET_SERVER_TIME()`: the
    /// statement's time in ms since the epoch.
    Now,
    /// `CURRENT_DATE`: today (UTC) as `YYYY-MM-DD`.
    CurrentDate,
    /// `CURRENT_TIME`: the time of day (UTC) as `HH:MM:SS.mmm`.
    CurrentTime,
    /// `YEAR(d)`, `MONTH(d)`, `DAY(d)`, `HOUR(d)`, `MINUTE(d)`, `SECOND(d)`.
    DatePart(Part),
    /// `DAYOFWEEK(d)`: 1 (Sunday) to 7.
    DayOfWeek,
    /// `DATE_ADD(date, amount, unit)`: ms since the epoch.
    DateAdd,
    /// `DATE_SUB(date, amount, unit)`: ms since the epoch.
    DateSub,
    /// `DATE_DIFF(a, b[, unit])`: `a - b` in ms or in `unit`.
    DateDiff,
    /// `DATE_FORMAT(date, format)`: moment's format tokens.
    DateFormat,
    /// `DATE([date])`: `YYYY-MM-DDTHH:mm:ss.SSS+0000`.
    Date,
    /// `EXTRACT(date, part)`: the part as zero-padded text.
    Extract,
    /// `OFFSET_UTC(date, offset)`: the instant at a UTC offset, as text.
    OffsetUtc,
    /// `GET_SERVER_TIME()`: now as `YYYY-MM-DDTHH:mm:ss.SSS+0000`.
    ServerTime,
    /// `TRUNC(n)`: the whole part.
    Trunc,
    /// `GREATEST(a, b, …)` (and `MAX`/`MIN` with several arguments: scalar, as in
    /// Harper): the greatest.
    Greatest,
    /// `LEAST(a, b, …)`.
    Least,
    /// `INSTR(s, find)`: 1-based position, 0 when absent.
    Instr,
    /// `IIF(condition, then, else)`.
    Iif,
    /// `RANDOM()`: a number in [0, 1).
    Random,
    /// `SEARCH_JSON(expression, value)`: a JSONata expression evaluated over the
    /// value (`NULL` when it matches nothing).
    SearchJson,
    /// `geoDistance(p1, p2[, units])`.
    GeoDistance,
    /// `geoNear(p1, p2, distance[, units])`.
    GeoNear,
    /// `geoLength(line[, units])`.
    GeoLength,
    /// `geoArea(geometry)`: square metres.
    GeoArea,
    /// `geoContains(a, b)`, `geoEqual(a, b)`, `geoCrosses(a, b)`.
    GeoRelate(crate::geo::Predicate),
    /// `geoDifference(a, b)`.
    GeoDifference,
    /// `geoConvert(coordinates, type[, properties])`.
    GeoConvert,
}

/// A part of a date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The year.
    Year,
    /// The month, 1–12.
    Month,
    /// The day of the month.
    Day,
    /// The hour, 0–23.
    Hour,
    /// The minute.
    Minute,
    /// The second.
    Second,
}

impl Function {
    /// The function an (upper-case) name calls.
    pub fn named(name: &str) -> Option<Function> {
        use Function::*;
        Some(match name {
            "LENGTH" | "LEN" | "CHAR_LENGTH" | "CHARACTER_LENGTH" => Length,
            "UPPER" | "UCASE" => Upper,
            "LOWER" | "LCASE" => Lower,
            "CONCAT" => Concat,
            "SUBSTRING" | "SUBSTR" | "MID" => Substring,
            "TRIM" => Trim,
            "LTRIM" => LTrim,
            "RTRIM" => RTrim,
            "REPLACE" => Replace,
            "LEFT" => Left,
            "RIGHT" => Right,
            "ROUND" => Round,
            "FLOOR" => Floor,
            "CEIL" | "CEILING" => Ceil,
            "ABS" => Abs,
            "SQRT" => Sqrt,
            "POWER" | "POW" => Power,
            "EXP" => Exp,
            "LOG" | "LN" => Ln,
            "LOG10" => Log10,
            "SIGN" => Sign,
            "COALESCE" | "IFNULL" => Coalesce,
            "NULLIF" => NullIf,
            "NOW" | "GETDATE" | "CURRENT_TIMESTAMP" => Now,
            "GET_SERVER_TIME" => ServerTime,
            "DAYOFWEEK" => DayOfWeek,
            "DATE_ADD" => DateAdd,
            "DATE_SUB" => DateSub,
            "DATE_DIFF" => DateDiff,
            "DATE_FORMAT" => DateFormat,
            "DATE" => Date,
            "EXTRACT" => Extract,
            "OFFSET_UTC" => OffsetUtc,
            "TRUNC" | "TRUNCATE" => Trunc,
            "GREATEST" => Greatest,
            "LEAST" => Least,
            "INSTR" => Instr,
            "IIF" => Iif,
            "RANDOM" | "RAND" => Random,
            "SEARCH_JSON" => SearchJson,
            "GEODISTANCE" => GeoDistance,
            "GEONEAR" => GeoNear,
            "GEOLENGTH" => GeoLength,
            "GEOAREA" => GeoArea,
            "GEOCONTAINS" => GeoRelate(crate::geo::Predicate::Contains),
            "GEOEQUAL" => GeoRelate(crate::geo::Predicate::Equal),
            "GEOCROSSES" => GeoRelate(crate::geo::Predicate::Crosses),
            "GEODIFFERENCE" => GeoDifference,
            "GEOCONVERT" => GeoConvert,
            "CURRENT_DATE" => CurrentDate,
            "CURRENT_TIME" => CurrentTime,
            "YEAR" => DatePart(Part::Year),
            "MONTH" => DatePart(Part::Month),
            "DAY" => DatePart(Part::Day),
            "HOUR" => DatePart(Part::Hour),
            "MINUTE" => DatePart(Part::Minute),
            "SECOND" => DatePart(Part::Second),
            _ => return None,
        })
    }

    /// Refuses a call with the wrong number of arguments, naming the function.
    pub fn check_arity(self, count: usize) -> Result<()> {
        use Function::*;
        let (min, max) = match self {
            Length | Upper | Lower | Trim | LTrim | RTrim | Floor | Ceil | Abs | Sqrt | Exp | Ln | Log10 | Sign => {
                (1, 1)
            }
            DatePart(_) | DayOfWeek | Trunc => (1, 1),
            DateAdd | DateSub | Iif => (3, 3),
            DateDiff => (2, 3),
            DateFormat | Extract | OffsetUtc | Instr => (2, 2),
            Date => (0, 1),
            Greatest | Least => (1, usize::MAX),
            ServerTime | Random => (0, 0),
            GeoDistance | GeoConvert => (2, 3),
            GeoNear => (3, 4),
            GeoLength => (1, 2),
            GeoArea => (1, 1),
            SearchJson => (2, 2),
            GeoRelate(_) | GeoDifference => (2, 2),
            Concat | Coalesce => (1, usize::MAX),
            Substring => (2, 3),
            Replace => (3, 3),
            Left | Right | Power | NullIf => (2, 2),
            Round => (1, 2),
            Now | CurrentDate | CurrentTime => (0, 0),
        };
        if count < min || count > max {
            let wanted = match (min, max) {
                (a, b) if a == b => format!("{a}"),
                (a, usize::MAX) => format!("at least {a}"),
                (a, b) => format!("{a} to {b}"),
            };
            return Err(SqlError::invalid(format!("{self:?} takes {wanted} arguments, not {count}")));
        }
        Ok(())
    }
}

/// Calls `function` with `args` (already checked for arity); `now` is the statement's
/// time in ms.
pub fn call(function: Function, args: Vec<Value>, now: f64) -> Result<Value> {
    use Function::*;
    let arg = |i: usize| args.get(i).unwrap_or(&Value::Null);
    let null_in = args.iter().any(|a| matches!(a, Value::Null));
    let string = |f: &dyn Fn(&str) -> String| {
        if null_in { Value::Null } else { Value::String(f(&text(arg(0)))) }
    };
    let math = |f: &dyn Fn(f64) -> f64| ops::number(arg(0)).map_or(Value::Null, |n| ops::from_f64(f(n)));
    let int = |i: usize| ops::number(arg(i)).map(|n| n.trunc() as i64);
    Ok(match function {
        Length => match arg(0) {
            Value::Null => Value::Null,
            value => Value::Int(text(value).chars().count() as i64),
        },
        Upper => string(&|s| s.to_uppercase()),
        Lower => string(&|s| s.to_lowercase()),
        Concat => {
            let parts: Vec<String> = args.iter().map(text).collect();
            ops::check_text_size(parts.iter().map(String::len).sum())?;
            Value::String(parts.concat())
        }
        Substring => {
            if null_in {
                return Ok(Value::Null);
            }
            let chars: Vec<char> = text(arg(0)).chars().collect();
            let start = int(1).unwrap_or(1);
            // 1-based; 0 and negatives count from the start as SQL's do.
            let from = usize::try_from(start.saturating_sub(1).max(0)).unwrap_or(0).min(chars.len());
            let length = match args.len() {
                3 => usize::try_from(int(2).unwrap_or(0).max(0)).unwrap_or(0),
                _ => chars.len(),
            };
            Value::String(chars[from..].iter().take(length).collect())
        }
        Trim => string(&|s| s.trim().to_string()),
        LTrim => string(&|s| s.trim_start().to_string()),
        RTrim => string(&|s| s.trim_end().to_string()),
        Replace => {
            if null_in {
                return Ok(Value::Null);
            }
            let (subject, from, to) = (text(arg(0)), text(arg(1)), text(arg(2)));
            if from.is_empty() {
                arg(0).clone()
            } else {
                // Sized before it is built: nested REPLACEs multiply.
                let hits = subject.matches(&from).count();
                ops::check_text_size(
                    (subject.len() - hits * from.len()).saturating_add(hits.saturating_mul(to.len())),
                )?;
                Value::String(subject.replace(&from, &to))
            }
        }
        Left | Right => {
            if null_in {
                return Ok(Value::Null);
            }
            let chars: Vec<char> = text(arg(0)).chars().collect();
            let n = usize::try_from(int(1).unwrap_or(0).max(0)).unwrap_or(0).min(chars.len());
            let kept = if function == Left { &chars[..n] } else { &chars[chars.len() - n..] };
            Value::String(kept.iter().collect())
        }
        Round => {
            let digits = if args.len() == 2 { int(1).unwrap_or(0).clamp(-15, 15) } else { 0 };
            let scale = 10f64.powi(digits as i32);
            // JavaScript's Math.round: halves go up.
            math(&|n| (n * scale + 0.5).floor() / scale)
        }
        Floor => math(&f64::floor),
        Ceil => math(&f64::ceil),
        Abs => match arg(0) {
            Value::Int(i) => i.checked_abs().map_or(Value::Float((*i as f64).abs()), Value::Int),
            _ => math(&f64::abs),
        },
        Sqrt => math(&f64::sqrt),
        Power => match (ops::number(arg(0)), ops::number(arg(1))) {
            (Some(n), Some(p)) => ops::from_f64(n.powf(p)),
            _ => Value::Null,
        },
        Exp => math(&f64::exp),
        Ln => math(&f64::ln),
        Log10 => math(&f64::log10),
        Sign => math(&|n| {
            if n > 0.0 {
                1.0
            } else if n < 0.0 {
                -1.0
            } else {
                0.0
            }
        }),
        Coalesce => args.iter().find(|a| !matches!(a, Value::Null)).cloned().unwrap_or(Value::Null),
        NullIf => {
            if ops::equal(arg(0), arg(1)) == Some(true) {
                Value::Null
            } else {
                arg(0).clone()
            }
        }
        Now => ops::from_f64(now.floor()),
        CurrentDate => Value::String(instant(now).format("%Y-%m-%d").to_string()),
        CurrentTime => Value::String(instant(now).format("%H:%M:%S%.3f").to_string()),
        DayOfWeek => date_of(arg(0)).map_or(Value::Null, |d| Value::Int(i64::from(d.weekday().number_from_sunday()))),
        DateAdd => dates::add(arg(0), arg(1), arg(2), 1)?,
        DateSub => dates::add(arg(0), arg(1), arg(2), -1)?,
        DateDiff => dates::diff(arg(0), arg(1), args.get(2))?,
        DateFormat => dates::date_format(arg(0), arg(1)),
        Date => dates::date(arg(0), now),
        Extract => dates::extract(arg(0), arg(1))?,
        OffsetUtc => dates::offset_utc(arg(0), arg(1))?,
        ServerTime => dates::date(&Value::Null, now),
        Trunc => math(&f64::trunc),
        Greatest | Least => {
            let mut best: Option<&Value> = None;
            for value in args.iter().filter(|v| !matches!(v, Value::Null)) {
                let better = best.is_none_or(|b| {
                    let ordering = ops::compare(value, b);
                    ordering
                        == Some(if function == Greatest {
                            std::cmp::Ordering::Greater
                        } else {
                            std::cmp::Ordering::Less
                        })
                });
                if better {
                    best = Some(value);
                }
            }
            best.cloned().unwrap_or(Value::Null)
        }
        Instr => {
            if null_in {
                return Ok(Value::Null);
            }
            let (haystack, needle) = (text(arg(0)), text(arg(1)));
            Value::Int(haystack.find(&needle).map_or(0, |at| haystack[..at].chars().count() as i64 + 1))
        }
        Iif => {
            if ops::truth(arg(0)) == Some(true) {
                arg(1).clone()
            } else {
                arg(2).clone()
            }
        }
        Random => Value::Float(rand::random::<f64>()),
        SearchJson => search_json(arg(0), arg(1))?,
        GeoDistance => crate::geo::distance(&args)?,
        GeoNear => crate::geo::near(&args)?,
        GeoLength => crate::geo::length(&args)?,
        GeoArea => crate::geo::area(&args)?,
        GeoRelate(predicate) => crate::geo::relate(predicate, &args)?,
        GeoDifference => crate::geo::difference(&args)?,
        GeoConvert => crate::geo::convert(&args)?,
        DatePart(part) => match date_of(arg(0)) {
            None => Value::Null,
            Some(date) => Value::Int(i64::from(match part {
                Part::Year => date.year() as u32,
                Part::Month => date.month(),
                Part::Day => date.day(),
                Part::Hour => date.hour(),
                Part::Minute => date.minute(),
                Part::Second => date.second(),
            })),
        },
    })
}

/// Longest a `SEARCH_JSON` expression may run on one value, and how deep it may
/// recurse: a hostile expression fails instead of holding a thread.
const JSONATA_TIME_LIMIT_MS: usize = 1_000;
const JSONATA_MAX_DEPTH: usize = 100;

/// `SEARCH_JSON(expression, value)`.
fn search_json(expression: &Value, value: &Value) -> Result<Value> {
    let Value::String(expression) = expression else {
        return Err(SqlError::invalid("SEARCH_JSON's first argument must be a JSONata expression in quotes"));
    };
    if matches!(value, Value::Null) {
        return Ok(Value::Null);
    }
    let input = serde_json::to_string(value).map_err(|err| SqlError::invalid(format!("SEARCH_JSON: {err}")))?;
    let arena = bumpalo::Bump::new();
    let jsonata = jsonata_rs::JsonAta::new(expression, &arena)
        .map_err(|err| SqlError::invalid(format!("SEARCH_JSON: '{expression}' is not a JSONata expression: {err}")))?;
    let result = jsonata
        .evaluate_timeboxed(Some(&input), Some(JSONATA_MAX_DEPTH), Some(JSONATA_TIME_LIMIT_MS))
        .map_err(|err| SqlError::invalid(format!("SEARCH_JSON '{expression}': {err}")))?;
    if result.is_undefined() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&result.serialize(false)).map_err(|err| SqlError::invalid(format!("SEARCH_JSON: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::String(v.into())
    }

    #[test]
    fn string_functions() {
        assert_eq!(call(Function::Substring, vec![s("harper"), Value::Int(2), Value::Int(3)], 0.0).unwrap(), s("arp"));
        assert_eq!(call(Function::Substring, vec![s("harper"), Value::Int(4)], 0.0).unwrap(), s("per"));
        assert_eq!(call(Function::Concat, vec![s("a"), Value::Null, Value::Int(1)], 0.0).unwrap(), s("a1"));
        assert_eq!(call(Function::Replace, vec![s("aXbX"), s("X"), s("-")], 0.0).unwrap(), s("a-b-"));
        assert_eq!(call(Function::Length, vec![s("héllo")], 0.0).unwrap(), Value::Int(5));
        assert_eq!(call(Function::Upper, vec![Value::Null], 0.0).unwrap(), Value::Null);
        assert_eq!(call(Function::Right, vec![s("harper"), Value::Int(3)], 0.0).unwrap(), s("per"));
    }

    #[test]
    fn search_json_evaluates_jsonata() {
        let tags: Value = serde_json::from_str(r#"{"color":"brown","toys":["ball","rope"]}"#).unwrap();
        let list: Value = serde_json::from_str(r#"["fluffy","calm"]"#).unwrap();
        assert_eq!(search_json(&s("color"), &tags).unwrap(), s("brown"));
        assert_eq!(search_json(&s("toys[1]"), &tags).unwrap(), s("rope"));
        assert_eq!(search_json(&s("$count($)"), &list).unwrap(), Value::Int(2));
        assert_eq!(search_json(&s("$[0]"), &list).unwrap(), s("fluffy"));
        assert_eq!(search_json(&s("\"calm\" in $"), &list).unwrap(), Value::Bool(true));
        assert_eq!(search_json(&s("nothing"), &tags).unwrap(), Value::Null);
        assert!(search_json(&s("$count("), &tags).is_err());
    }

    #[test]
    fn math_and_dates() {
        assert_eq!(call(Function::Round, vec![Value::Float(2.5)], 0.0).unwrap(), Value::Int(3));
        assert_eq!(call(Function::Round, vec![Value::Float(1.2345), Value::Int(2)], 0.0).unwrap(), Value::Float(1.23));
        assert_eq!(call(Function::Abs, vec![Value::Int(-3)], 0.0).unwrap(), Value::Int(3));
        assert_eq!(call(Function::Coalesce, vec![Value::Null, Value::Int(2)], 0.0).unwrap(), Value::Int(2));
        let noon = 1_700_000_000_000.0; // 2023-11-14T22:13:20Z
        assert_eq!(call(Function::CurrentDate, vec![], noon).unwrap(), s("2023-11-14"));
        assert_eq!(call(Function::DatePart(Part::Hour), vec![Value::Float(noon)], 0.0).unwrap(), Value::Int(22));
        assert_eq!(
            call(Function::DatePart(Part::Year), vec![s("2020-02-03T04:05:06Z")], 0.0).unwrap(),
            Value::Int(2020)
        );
    }
}
