//! Durations in config values, written as Harper writes them (`logging.auditRetention: 3d`).

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A span of time: a bare number of seconds, or a number with a unit: `ms`, `s`,
/// `m` (minutes), `h`, `d`, `M` (30 days). Harper's `convertToMS` reads the same
/// forms, except that it takes `500ms` as 500 seconds; here it is milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigDuration(pub Duration);

/// Units from the largest, with their length in milliseconds.
const UNITS: [(&str, u64); 6] =
    [("M", 30 * 86_400_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

impl ConfigDuration {
    /// Parses `text` (see the type's documentation).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.starts_with('-') {
            return Err(format!("'{text}' is not a duration: it must be more than zero"));
        }
        let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let scale = match unit.trim() {
            "" => 1_000,
            "D" => 86_400_000,
            "H" => 3_600_000,
            unit => UNITS.iter().find(|(name, _)| *name == unit).map(|(_, ms)| *ms).ok_or_else(|| {
                format!("'{text}' is not a duration: the unit '{unit}' is not one of ms, s, m, h, d, M")
            })?,
        };
        let number: f64 = number.parse().map_err(|_| format!("'{text}' is not a duration: it needs a number"))?;
        Self::from_millis(number * scale as f64, text)
    }

    fn from_millis(ms: f64, text: &str) -> Result<Self, String> {
        if !ms.is_finite() || ms > u64::MAX as f64 {
            return Err(format!("'{text}' is not a duration: it is too large"));
        }
        match ms.round() {
            ms if ms >= 1.0 => Ok(ConfigDuration(Duration::from_millis(ms as u64))),
            _ => Err(format!("'{text}' is not a duration: it must be at least one millisecond")),
        }
    }
}

impl fmt::Display for ConfigDuration {
    /// The largest unit that states the duration exactly (`3d`, `90s`, `1500ms`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis() as u64;
        let (unit, size) = UNITS.iter().find(|(_, size)| ms.is_multiple_of(*size)).copied().unwrap_or(("ms", 1));
        write!(f, "{}{unit}", ms / size)
    }
}

impl Serialize for ConfigDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;
        impl Visitor<'_> for DurationVisitor {
            type Value = ConfigDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration: seconds, or a number with a unit (ms, s, m, h, d, M)")
            }

            fn visit_u64<E: de::Error>(self, seconds: u64) -> Result<ConfigDuration, E> {
                self.visit_f64(seconds as f64)
            }

            fn visit_i64<E: de::Error>(self, seconds: i64) -> Result<ConfigDuration, E> {
                self.visit_f64(seconds as f64)
            }

            fn visit_f64<E: de::Error>(self, seconds: f64) -> Result<ConfigDuration, E> {
                ConfigDuration::from_millis(seconds * 1_000.0, &seconds.to_string()).map_err(E::custom)
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<ConfigDuration, E> {
                ConfigDuration::parse(text).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(DurationVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harpers_forms_parse_and_print_back() {
        let parse = |text| ConfigDuration::parse(text).map(|d| d.0.as_millis());
        assert_eq!(parse("3d"), Ok(259_200_000));
        assert_eq!(parse("3D"), Ok(259_200_000));
        assert_eq!(parse("12h"), Ok(43_200_000));
        assert_eq!(parse("30m"), Ok(1_800_000));
        assert_eq!(parse("1M"), Ok(2_592_000_000));
        assert_eq!(parse("90"), Ok(90_000));
        assert_eq!(parse("1.5s"), Ok(1_500));
        assert_eq!(parse("250ms"), Ok(250));
        for bad in ["", "d", "3 weeks", "0", "-1d", "1e400", "0.1ms"] {
            assert!(ConfigDuration::parse(bad).is_err(), "{bad}");
        }
        let message = |text| ConfigDuration::parse(text).unwrap_err();
        assert!(message("-1d").contains("more than zero"), "{}", message("-1d"));
        assert!(message("99999999999999999999999M").contains("too large"), "{}", message("99999999999999999999999M"));
        for text in ["3d", "90s", "1500ms", "2h"] {
            assert_eq!(ConfigDuration::parse(text).unwrap().to_string(), text);
        }
        let from_number: ConfigDuration = serde_json::from_value(serde_json::json!(2)).unwrap();
        assert_eq!(from_number.0, Duration::from_secs(2));
        assert!(serde_json::from_value::<ConfigDuration>(serde_json::json!(true)).is_err());
    }
}
