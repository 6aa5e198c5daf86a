//! Harper's ETag: a quoted 10-character encoding of the record version's float.

use std::sync::Arc;

use lyre_core::Expect;

/// The ETag of a record whose last write has version `version`: the little-endian
/// bytes of the f64, taken six bits at a time (Harper's layout), each plus 62.
pub fn etag(version: f64) -> String {
    let b = version.to_le_bytes();
    let sixes = [
        b[0] & 63,
        (b[0] >> 6) + ((b[1] << 2) & 63),
        (b[1] >> 4) + ((b[2] << 4) & 63),
        b[2] >> 2,
        b[3] & 63,
        (b[3] >> 6) + ((b[4] << 2) & 63),
        (b[4] >> 4) + ((b[5] << 4) & 63),
        b[5] >> 2,
        b[6] & 63,
        (b[6] >> 6) + ((b[7] << 2) & 63),
    ];
    let mut out = String::with_capacity(12);
    out.push('"');
    out.extend(sixes.iter().map(|s| char::from(s + 62)));
    out.push('"');
    out
}

/// Whether an `If-None-Match` header value names `tag` (or is `*`).
pub fn matches(if_none_match: &str, tag: &str) -> bool {
    if_none_match
        .split(',')
        .map(str::trim)
        .any(|candidate| candidate == "*" || candidate == tag || candidate.strip_prefix("W/") == Some(tag))
}

/// The write condition an `If-Match` header value states: `*` (the record exists) or
/// a list of tags, one of which must be the record's current ETag. The writer checks
/// it at commit, so a record changed after the client read it fails with 412.
pub fn if_match(header: &str) -> Expect {
    let tags: Vec<String> = header.split(',').map(|t| t.trim().trim_start_matches("W/").to_string()).collect();
    if tags.iter().any(|t| t == "*") {
        return Expect::Exists;
    }
    Expect::Version(Arc::new(move |version| tags.iter().any(|t| *t == etag(version.time))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_value_harper_4_7_sent() {
        // Recorded from Harper 4.7.29: updatedAt 1796020676530.407 had ETag "AXp\HIiFxG".
        assert_eq!(etag(1796020676530.407), "\"AXp\\HIiFxG\"");
    }

    #[test]
    fn if_none_match_lists_and_wildcards() {
        let tag = etag(1.5);
        assert!(matches(&tag, &tag));
        assert!(matches(&format!("\"x\", {tag}"), &tag));
        assert!(matches("*", &tag));
        assert!(!matches("\"other\"", &tag));
    }

    #[test]
    fn if_match_accepts_the_current_tag_only() {
        let at = |time| lyre_core::RecordVersion { time, unique: true };
        let Expect::Version(test) = if_match(&format!("\"nope\", W/{}", etag(2.5))) else {
            panic!("not a version test")
        };
        assert!(test(at(2.5)));
        assert!(!test(at(3.5)));
        assert!(matches!(if_match("*"), Expect::Exists));
    }
}
