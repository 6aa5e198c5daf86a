//! Harper's date functions (its moment.js-based ones): adding and subtracting
//! intervals, differences, formatting with moment's tokens, parts, and UTC offsets.
//! Dates are read from ms since the epoch or ISO 8601 text; instants are UTC.

use chrono::{DateTime, Datelike, Duration, FixedOffset, Months, Timelike, Utc};
use lyre_core::Value;

use crate::error::{Result, SqlError};
use crate::ops;

/// A unit of time, named as moment names them (`days`, `day`, `d`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Years.
    Years,
    /// Quarters.
    Quarters,
    /// Months.
    Months,
    /// Weeks.
    Weeks,
    /// Days.
    Days,
    /// Hours.
    Hours,
    /// Minutes.
    Minutes,
    /// Seconds.
    Seconds,
    /// Milliseconds.
    Milliseconds,
}

impl Unit {
    /// The unit `name` names (moment's names, plurals and short forms).
    pub fn named(name: &str) -> Result<Unit> {
        Ok(match name {
            "y" | "year" | "years" => Unit::Years,
            "Q" | "quarter" | "quarters" => Unit::Quarters,
            "M" | "month" | "months" => Unit::Months,
            "w" | "week" | "weeks" => Unit::Weeks,
            "d" | "day" | "days" => Unit::Days,
            "h" | "hour" | "hours" => Unit::Hours,
            "m" | "minute" | "minutes" => Unit::Minutes,
            "s" | "second" | "seconds" => Unit::Seconds,
            "ms" | "millisecond" | "milliseconds" => Unit::Milliseconds,
            other => {
                let lower = other.to_ascii_lowercase();
                if lower != other {
                    return Unit::named(&lower);
                }
                return Err(SqlError::invalid(format!(
                    "'{other}' is not a unit of time (years, months, days, hours…)"
                )));
            }
        })
    }

    /// Milliseconds in one unit, for the units of fixed length.
    fn fixed_ms(self) -> Option<f64> {
        Some(match self {
            Unit::Weeks => 604_800_000.0,
            Unit::Days => 86_400_000.0,
            Unit::Hours => 3_600_000.0,
            Unit::Minutes => 60_000.0,
            Unit::Seconds => 1_000.0,
            Unit::Milliseconds => 1.0,
            Unit::Years | Unit::Quarters | Unit::Months => return None,
        })
    }
}

/// The UTC instant `ms` after the epoch (the epoch when out of range).
pub fn instant(ms: f64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms.floor() as i64).unwrap_or_default()
}

/// A date read from a value: ms since the epoch, or ISO 8601 text.
pub fn date_of(value: &Value) -> Option<DateTime<Utc>> {
    match value {
        Value::Int(_) | Value::Float(_) => ops::number(value).map(instant),
        Value::String(s) => lyre_core::parse_iso8601(s).map(instant),
        _ => None,
    }
}

fn ms_of(date: DateTime<Utc>) -> Value {
    Value::Int(date.timestamp_millis())
}

/// `DATE_ADD(date, amount, unit)` (and `DATE_SUB` with `sign` -1): ms since the epoch.
pub fn add(date: &Value, amount: &Value, unit: &Value, sign: i64) -> Result<Value> {
    let (Some(date), Some(amount)) = (date_of(date), ops::number(amount)) else { return Ok(Value::Null) };
    let unit = Unit::named(&ops::text(unit))?;
    let amount = amount * sign as f64;
    let moved = match unit {
        Unit::Years | Unit::Quarters | Unit::Months => {
            let per = match unit {
                Unit::Years => 12,
                Unit::Quarters => 3,
                _ => 1,
            };
            // moment rounds a fractional month count to whole months.
            let months = (amount.round() as i64).saturating_mul(per);
            let count = Months::new(u32::try_from(months.unsigned_abs()).unwrap_or(u32::MAX));
            if months >= 0 { date.checked_add_months(count) } else { date.checked_sub_months(count) }
        }
        fixed => {
            let ms = amount * fixed.fixed_ms().unwrap_or(1.0);
            Duration::try_milliseconds(ms.round() as i64).and_then(|delta| date.checked_add_signed(delta))
        }
    };
    Ok(moved.map_or(Value::Null, ms_of))
}

/// `DATE_DIFF(a, b[, unit])`: `a - b` in ms, or as a fraction of `unit` (months and
/// years by calendar, as moment counts them).
pub fn diff(a: &Value, b: &Value, unit: Option<&Value>) -> Result<Value> {
    let (Some(a), Some(b)) = (date_of(a), date_of(b)) else { return Ok(Value::Null) };
    let ms = (a - b).num_milliseconds() as f64;
    let Some(unit) = unit else { return Ok(ops::from_f64(ms)) };
    let unit = Unit::named(&ops::text(unit))?;
    let value = match unit.fixed_ms() {
        Some(per) => ms / per,
        None => {
            let months = month_diff(a, b);
            match unit {
                Unit::Years => months / 12.0,
                Unit::Quarters => months / 3.0,
                _ => months,
            }
        }
    };
    Ok(ops::from_f64(value))
}

/// Months from `b` to `a`, with the fraction of the month between (moment's
/// `monthDiff`).
fn month_diff(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    let whole = (a.year() - b.year()) * 12 + (a.month() as i32 - b.month() as i32);
    let anchor = add_months(b, whole);
    let (from, to) = if a < anchor { (add_months(b, whole - 1), anchor) } else { (anchor, add_months(b, whole + 1)) };
    let span = (to - from).num_milliseconds() as f64;
    let fraction = if span == 0.0 { 0.0 } else { (a - anchor).num_milliseconds() as f64 / span };
    whole as f64 + fraction
}

fn add_months(date: DateTime<Utc>, months: i32) -> DateTime<Utc> {
    let count = Months::new(months.unsigned_abs());
    let moved = if months >= 0 { date.checked_add_months(count) } else { date.checked_sub_months(count) };
    moved.unwrap_or(date)
}

/// `DATE(x)`: the instant as Harper prints it, `YYYY-MM-DDTHH:mm:ss.SSS+0000`.
pub fn date(value: &Value, now: f64) -> Value {
    let date = if matches!(value, Value::Null) { Some(instant(now)) } else { date_of(value) };
    date.map_or(Value::Null, |d| Value::String(format(d.fixed_offset(), "YYYY-MM-DDTHH:mm:ss.SSSZZ")))
}

/// `EXTRACT(date, part)`: the part, zero-padded as moment formats it.
pub fn extract(value: &Value, part: &Value) -> Result<Value> {
    let Some(date) = date_of(value) else { return Ok(Value::Null) };
    let token = match ops::text(part).to_ascii_lowercase().as_str() {
        "year" | "years" | "y" => "YYYY",
        "month" | "months" => "MM",
        "day" | "days" | "d" => "DD",
        "hour" | "hours" | "h" => "HH",
        "minute" | "minutes" | "m" => "mm",
        "second" | "seconds" | "s" => "ss",
        "millisecond" | "milliseconds" | "ms" => "SSS",
        other => return Err(SqlError::invalid(format!("EXTRACT cannot take '{other}' from a date"))),
    };
    Ok(Value::String(format(date.fixed_offset(), token)))
}

/// `OFFSET_UTC(date, offset)`: the instant shown at a UTC offset (a number under 16
/// is hours, else minutes, as moment reads it; or text like `+05:30`).
pub fn offset_utc(value: &Value, offset: &Value) -> Result<Value> {
    let Some(date) = date_of(value) else { return Ok(Value::Null) };
    let minutes = match offset {
        Value::String(text) => {
            parse_offset(text).ok_or_else(|| SqlError::invalid(format!("'{text}' is not a UTC offset like +05:30")))?
        }
        other => match ops::number(other) {
            Some(n) if n.abs() < 16.0 => (n * 60.0).round() as i32,
            Some(n) => n.round() as i32,
            None => return Ok(Value::Null),
        },
    };
    let zone = FixedOffset::east_opt(minutes.saturating_mul(60))
        .ok_or_else(|| SqlError::invalid(format!("a UTC offset of {minutes} minutes is out of range")))?;
    Ok(Value::String(format(date.with_timezone(&zone), "YYYY-MM-DDTHH:mm:ss.SSSZZ")))
}

fn parse_offset(text: &str) -> Option<i32> {
    let text = text.trim();
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => (1, text),
    };
    let (hours, minutes) = rest.split_once(':').unwrap_or((rest, "0"));
    Some(sign * (hours.parse::<i32>().ok()? * 60 + minutes.parse::<i32>().ok()?))
}

/// `DATE_FORMAT(date, format)`: moment's tokens (`YYYY`, `MM`, `DD`, `HH`, `mm`,
/// `ss`, `SSS`, `MMM`, `dddd`, `A`, `x`, `[literal]`, …).
pub fn date_format(value: &Value, pattern: &Value) -> Value {
    match date_of(value) {
        Some(date) => Value::String(format(date.fixed_offset(), &ops::text(pattern))),
        None => Value::Null,
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/// Formats `date` with moment's tokens; text in `[brackets]` is kept as written.
pub fn format(date: DateTime<FixedOffset>, pattern: &str) -> String {
    // Longest tokens first, so `YYYY` wins over `YY` and `MMMM` over `MM`.
    const TOKENS: [&str; 31] = [
        "YYYY", "MMMM", "dddd", "SSS", "MMM", "ddd", "Do", "YY", "MM", "DD", "HH", "hh", "mm", "ss", "SS", "ZZ", "M",
        "D", "H", "h", "m", "s", "S", "A", "a", "Z", "x", "X", "d", "E", "Q",
    ];
    let offset = date.offset().local_minus_utc() / 60;
    let zone = |colon: bool| {
        let sign = if offset < 0 { '-' } else { '+' };
        let (h, m) = (offset.abs() / 60, offset.abs() % 60);
        if colon { format!("{sign}{h:02}:{m:02}") } else { format!("{sign}{h:02}{m:02}") }
    };
    let hour12 = match date.hour() % 12 {
        0 => 12,
        h => h,
    };
    let mut out = String::new();
    let mut rest = pattern;
    while !rest.is_empty() {
        if let Some(inner) = rest.strip_prefix('[') {
            let (literal, after) = inner.split_once(']').unwrap_or((inner, ""));
            out.push_str(literal);
            rest = after;
            continue;
        }
        let Some(token) = TOKENS.iter().find(|t| rest.starts_with(**t)) else {
            let mut chars = rest.chars();
            out.extend(chars.next());
            rest = chars.as_str();
            continue;
        };
        let ms = date.timestamp_subsec_millis();
        let text = match *token {
            "YYYY" => format!("{:04}", date.year()),
            "YY" => format!("{:02}", date.year().rem_euclid(100)),
            "MMMM" => MONTHS[date.month0() as usize].to_string(),
            "MMM" => MONTHS[date.month0() as usize][..3].to_string(),
            "MM" => format!("{:02}", date.month()),
            "M" => date.month().to_string(),
            "Q" => (date.month0() / 3 + 1).to_string(),
            "DD" => format!("{:02}", date.day()),
            "D" => date.day().to_string(),
            "Do" => ordinal(date.day()),
            "dddd" => DAYS[date.weekday().num_days_from_sunday() as usize].to_string(),
            "ddd" => DAYS[date.weekday().num_days_from_sunday() as usize][..3].to_string(),
            "d" => date.weekday().num_days_from_sunday().to_string(),
            "E" => date.weekday().number_from_monday().to_string(),
            "HH" => format!("{:02}", date.hour()),
            "H" => date.hour().to_string(),
            "hh" => format!("{hour12:02}"),
            "h" => hour12.to_string(),
            "mm" => format!("{:02}", date.minute()),
            "m" => date.minute().to_string(),
            "ss" => format!("{:02}", date.second()),
            "s" => date.second().to_string(),
            "SSS" => format!("{ms:03}"),
            "SS" => format!("{:02}", ms / 10),
            "S" => (ms / 100).to_string(),
            "A" => (if date.hour() < 12 { "AM" } else { "PM" }).to_string(),
            "a" => (if date.hour() < 12 { "am" } else { "pm" }).to_string(),
            "ZZ" => zone(false),
            "Z" => zone(true),
            "x" => date.timestamp_millis().to_string(),
            "X" => date.timestamp().to_string(),
            _ => String::new(),
        };
        out.push_str(&text);
        rest = &rest[token.len()..];
    }
    out
}

fn ordinal(day: u32) -> String {
    let suffix = match (day % 10, day % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{day}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Value {
        Value::String(text.into())
    }

    /// 2024-03-05T10:20:30.456Z.
    const T: f64 = 1_709_634_030_456.0;

    #[test]
    fn adding_and_differences_count_as_moment_does() {
        assert_eq!(add(&Value::Float(T), &Value::Int(2), &s("days"), 1).unwrap(), Value::Int(1_709_806_830_456));
        assert_eq!(
            add(&s("2024-01-31T00:00:00Z"), &Value::Int(1), &s("month"), 1).unwrap(),
            Value::Int(1_709_164_800_000)
        );
        assert_eq!(add(&Value::Float(T), &Value::Int(1), &s("hours"), -1).unwrap(), Value::Int(1_709_630_430_456));
        assert!(add(&Value::Float(T), &Value::Int(1), &s("fortnights"), 1).is_err());
        // Out of range is NULL, not a panic.
        assert_eq!(add(&Value::Int(0), &Value::Float(-1e300), &s("ms"), 1).unwrap(), Value::Null);
        assert_eq!(add(&Value::Int(0), &Value::Float(1e300), &s("years"), 1).unwrap(), Value::Null);
        let later = s("2024-03-07T22:20:30.456Z");
        assert_eq!(diff(&later, &Value::Float(T), Some(&s("days"))).unwrap(), Value::Float(2.5));
        assert_eq!(diff(&Value::Float(T), &later, Some(&s("hours"))).unwrap(), Value::Int(-60));
        assert_eq!(diff(&later, &Value::Float(T), None).unwrap(), Value::Int(216_000_000));
        assert_eq!(diff(&s("2024-05-05T10:20:30.456Z"), &Value::Float(T), Some(&s("months"))).unwrap(), Value::Int(2));
    }

    #[test]
    fn formats_parts_and_offsets() {
        let at = instant(T).fixed_offset();
        assert_eq!(format(at, "YYYY-MM-DD HH:mm:ss.SSS"), "2024-03-05 10:20:30.456");
        assert_eq!(format(at, "dddd, MMMM Do YYYY, h:mm a [at] Z"), "Tuesday, March 5th 2024, 10:20 am at +00:00");
        assert_eq!(date_format(&Value::Float(T), &s("x")), s("1709634030456"));
        assert_eq!(extract(&Value::Float(T), &s("month")).unwrap(), s("03"));
        assert_eq!(date(&Value::Float(T), 0.0), s("2024-03-05T10:20:30.456+0000"));
        assert_eq!(offset_utc(&Value::Float(T), &Value::Int(2)).unwrap(), s("2024-03-05T12:20:30.456+0200"));
        assert_eq!(offset_utc(&Value::Float(T), &s("-05:30")).unwrap(), s("2024-03-05T04:50:30.456-0530"));
        assert_eq!(offset_utc(&Value::Float(T), &Value::Int(120)).unwrap(), s("2024-03-05T12:20:30.456+0200"));
    }
}
