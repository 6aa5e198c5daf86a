//! Topic names and topic filters: what the specifications allow in each, how a
//! filter matches a name (`+` one level, `#` the rest, `$`-topics hidden from
//! wildcards at the first level), and shared subscriptions (`$share/<group>/…`).

/// Why a topic name or filter is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TopicError {
    /// Zero length (MQTT-4.7.3-1).
    #[error("a topic must be at least one character long")]
    Empty,
    /// A NUL character (MQTT-4.7.3-2).
    #[error("a topic must not contain the null character")]
    Nul,
    /// A wildcard in a topic name (MQTT-3.3.2-2).
    #[error("the topic name '{0}' contains a wildcard; wildcards belong in subscriptions only")]
    WildcardInName(String),
    /// `#` not alone as the last level, or `+` not alone in its level (MQTT-4.7.1).
    #[error("the topic filter '{0}' puts a wildcard inside a level ('+' and '#' stand alone, '#' only last)")]
    BadWildcard(String),
    /// `$share/` without a group name or a filter (MQTT-4.8.2-1, -2).
    #[error("the shared subscription '{0}' needs '$share/<group>/<filter>' with a group name without wildcards")]
    BadShare(String),
}

/// Checks a topic name a PUBLISH carries.
pub(crate) fn check_name(name: &str) -> Result<(), TopicError> {
    if name.is_empty() {
        return Err(TopicError::Empty);
    }
    if name.contains('\0') {
        return Err(TopicError::Nul);
    }
    if name.contains(['+', '#']) {
        return Err(TopicError::WildcardInName(name.to_string()));
    }
    Ok(())
}

/// Checks a topic filter a SUBSCRIBE carries (without any `$share/` prefix).
pub(crate) fn check_filter(filter: &str) -> Result<(), TopicError> {
    if filter.is_empty() {
        return Err(TopicError::Empty);
    }
    if filter.contains('\0') {
        return Err(TopicError::Nul);
    }
    let mut levels = filter.split('/').peekable();
    while let Some(level) = levels.next() {
        let last = levels.peek().is_none();
        let bad = match level {
            "#" => !last,
            "+" => false,
            other => other.contains(['+', '#']),
        };
        if bad {
            return Err(TopicError::BadWildcard(filter.to_string()));
        }
    }
    Ok(())
}

/// Whether `filter` has a wildcard.
pub(crate) fn has_wildcard(filter: &str) -> bool {
    filter.contains(['+', '#'])
}

/// A subscription's filter, split into its share group (if any) and the filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Filter {
    /// The share group of a `$share/<group>/<filter>` subscription.
    pub(crate) group: Option<String>,
    /// The filter topics are matched against.
    pub(crate) filter: String,
}

impl Filter {
    /// Parses and checks the filter a SUBSCRIBE names.
    pub(crate) fn parse(text: &str) -> Result<Filter, TopicError> {
        match text.strip_prefix("$share/") {
            Some(rest) => {
                let (group, filter) = rest.split_once('/').ok_or_else(|| TopicError::BadShare(text.to_string()))?;
                if group.is_empty() || group.contains(['+', '#']) {
                    return Err(TopicError::BadShare(text.to_string()));
                }
                check_filter(filter)?;
                Ok(Filter { group: Some(group.to_string()), filter: filter.to_string() })
            }
            None => {
                check_filter(text)?;
                Ok(Filter { group: None, filter: text.to_string() })
            }
        }
    }
}

/// Whether topic `name` matches `filter` (both already checked).
pub(crate) fn matches(filter: &str, name: &str) -> bool {
    // A wildcard at the first level does not match a `$` topic (MQTT-4.7.2-1).
    if name.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')) {
        return false;
    }
    let mut names = name.split('/');
    let mut filters = filter.split('/');
    loop {
        match (filters.next(), names.next()) {
            (Some("#"), _) => return true,
            (Some("+"), Some(_)) => {}
            (Some(f), Some(n)) if f == n => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_the_specification_says() {
        // The examples of MQTT 5 §4.7.1.
        assert!(matches("sport/tennis/player1/#", "sport/tennis/player1"));
        assert!(matches("sport/tennis/player1/#", "sport/tennis/player1/ranking"));
        assert!(matches("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon"));
        assert!(matches("sport/#", "sport"));
        assert!(matches("#", "a/b/c"));
        assert!(matches("sport/tennis/+", "sport/tennis/player1"));
        assert!(!matches("sport/tennis/+", "sport/tennis/player1/ranking"));
        assert!(!matches("sport/+", "sport"));
        assert!(matches("sport/+", "sport/"));
        assert!(matches("+/+", "/finance"));
        assert!(matches("/+", "/finance"));
        assert!(!matches("+", "/finance"));
        assert!(matches("+/tennis/#", "sport/tennis"));
        // `$` topics are not matched by a first-level wildcard (MQTT-4.7.2-1).
        assert!(!matches("#", "$SYS/x"));
        assert!(!matches("+/monitor/Clients", "$SYS/monitor/Clients"));
        assert!(matches("$SYS/#", "$SYS/monitor/Clients"));
        assert!(matches("$SYS/monitor/+", "$SYS/monitor/Clients"));
        // Case matters; so do spaces.
        assert!(!matches("ACCOUNTS", "Accounts"));
        assert!(matches("Accounts payable", "Accounts payable"));
    }

    #[test]
    fn filters_and_names_are_checked() {
        for good in ["#", "+", "a/#", "+/b/+", "/", "a//b", "sport/+/player1"] {
            assert_eq!(check_filter(good), Ok(()), "{good}");
        }
        for bad in ["", "a#", "a/#/b", "sport+", "a/b+/c", "#/a", "a\0b"] {
            assert!(check_filter(bad).is_err(), "{bad}");
        }
        assert!(check_name("a/b").is_ok());
        assert!(matches!(check_name("a/+"), Err(TopicError::WildcardInName(_))));
        assert!(matches!(check_name("#"), Err(TopicError::WildcardInName(_))));
        assert_eq!(check_name(""), Err(TopicError::Empty));
    }

    #[test]
    fn shared_subscriptions_parse() {
        let shared = Filter::parse("$share/g1/a/+").unwrap();
        assert_eq!(shared, Filter { group: Some("g1".into()), filter: "a/+".into() });
        assert!(Filter::parse("$share/g1").is_err());
        assert!(Filter::parse("$share//a").is_err());
        assert!(Filter::parse("$share/g+/a").is_err());
        assert_eq!(Filter::parse("a/b").unwrap().group, None);
    }
}
