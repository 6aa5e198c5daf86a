//! Wall-clock time as Lyre counts it: milliseconds since the Unix epoch (as versions,
//! expiry times and job stamps are), and its ISO 8601 form.

use std::time::{SystemTime, UNIX_EPOCH};

/// The current time in ms since the epoch, as versions count it.
pub fn now_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1_000.0)
}

/// `time` (ms since the epoch) as ISO 8601 UTC with milliseconds.
pub(crate) fn iso8601(time: f64) -> String {
    let millis = time.floor() as i64;
    let secs = millis.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        millis.rem_euclid(1000)
    )
}

/// An ISO 8601 date or date-time as ms since the epoch, as Harper reads dates in
/// requests (`from_date`, `date`, ...): with an offset (`2024-05-01T10:00:00+02:00`,
/// `...Z`), without one (read as UTC, the server's zone), or a date alone (its UTC
/// midnight). `None` for anything else.
pub fn parse_iso8601(text: &str) -> Option<f64> {
    use chrono::{DateTime, NaiveDate, NaiveDateTime};
    let text = text.trim();
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Some(time.timestamp_millis() as f64);
    }
    for layout in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M"] {
        if let Ok(time) = NaiveDateTime::parse_from_str(text, layout) {
            return Some(time.and_utc().timestamp_millis() as f64);
        }
    }
    let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
    Some(date.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis() as f64)
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_is_utc_with_milliseconds() {
        assert_eq!(iso8601(1_700_000_000_123.0), "2023-11-14T22:13:20.123Z");
        assert_eq!(iso8601(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000.0), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn iso8601_dates_parse_with_offsets_without_them_and_alone() {
        assert_eq!(parse_iso8601("2023-11-14T22:13:20.123Z"), Some(1_700_000_000_123.0));
        assert_eq!(parse_iso8601("2023-11-15T00:13:20.123+02:00"), Some(1_700_000_000_123.0));
        assert_eq!(parse_iso8601("2023-11-14T22:13:20.123"), Some(1_700_000_000_123.0));
        assert_eq!(parse_iso8601("2023-11-14 22:13:20"), Some(1_700_000_000_000.0));
        assert_eq!(parse_iso8601("2000-02-29"), Some(951_782_400_000.0));
        for bad in ["", "yesterday", "2023-02-30", "2023-11-14T25:00:00Z", "1700000000000"] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
    }
}
