//! `Cache-Control` as a caching table reads it: the request's directives (what the
//! client allows: a forced fetch, only what is cached, stale answers) and the
//! origin's (how long what it sent stays fresh).

use std::time::Duration;

use axum::http::HeaderMap;
use axum::http::header::{CACHE_CONTROL, ETAG, EXPIRES};

/// The directives of one `Cache-Control` header (others are ignored, as HTTP
/// caches ignore what they do not know).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Directives {
    /// `no-cache`: fetch from the origin whatever is cached.
    pub no_cache: bool,
    /// `no-store`: what is fetched is answered but not kept.
    pub no_store: bool,
    /// `only-if-cached`: never fetch; a miss is 504.
    pub only_if_cached: bool,
    /// `must-revalidate`: a stale copy is never answered in place of a fetch.
    pub must_revalidate: bool,
    /// `max-age=N`: fresh for N seconds (from the origin: how long to keep it).
    pub max_age: Option<Duration>,
    /// `s-maxage=N`: the origin's freshness for shared caches, before `max-age`.
    pub shared_max_age: Option<Duration>,
    /// `stale-while-revalidate=N`: a copy stale for at most N seconds may be
    /// answered while a fetch refreshes it in the background.
    pub stale_while_revalidate: Option<Duration>,
    /// `stale-if-error[=N]`: a stale copy (stale for at most N seconds, when
    /// given) may be answered when the origin fails.
    pub stale_if_error: Option<Option<Duration>>,
    /// `private`: the origin's answer is for one client; not kept.
    pub private: bool,
}

impl Directives {
    /// The directives of the `Cache-Control` headers in `headers` (several
    /// headers, or several directives in one, add up).
    pub fn of(headers: &HeaderMap) -> Directives {
        let mut directives = Directives::default();
        for value in headers.get_all(CACHE_CONTROL) {
            if let Ok(text) = value.to_str() {
                directives.read(text);
            }
        }
        directives
    }

    /// Adds the directives of one header value.
    fn read(&mut self, text: &str) {
        for part in text.split(',') {
            let (name, value) = match part.split_once('=') {
                Some((name, value)) => (name.trim(), Some(value.trim().trim_matches('"'))),
                None => (part.trim(), None),
            };
            let seconds = value.and_then(|v| v.parse::<u64>().ok()).map(Duration::from_secs);
            match name.to_ascii_lowercase().as_str() {
                "no-cache" => self.no_cache = true,
                "no-store" => self.no_store = true,
                "only-if-cached" => self.only_if_cached = true,
                "must-revalidate" | "proxy-revalidate" => self.must_revalidate = true,
                "max-age" => self.max_age = seconds.or(Some(Duration::ZERO)),
                "s-maxage" => self.shared_max_age = seconds.or(Some(Duration::ZERO)),
                "stale-while-revalidate" => self.stale_while_revalidate = seconds,
                "stale-if-error" => self.stale_if_error = Some(seconds),
                "private" => self.private = true,
                _ => {}
            }
        }
    }
}

/// What an origin's answer says of its own caching.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OriginHeaders {
    /// Its `Cache-Control`.
    pub directives: Directives,
    /// Its `Expires`, as ms since the epoch.
    pub expires: Option<f64>,
    /// Its `ETag`, to revalidate with `If-None-Match`.
    pub etag: Option<String>,
}

impl OriginHeaders {
    /// Reads them from an origin's answer.
    pub fn of(headers: &HeaderMap) -> OriginHeaders {
        let expires =
            headers.get(EXPIRES).and_then(|v| v.to_str().ok()).map(|text| match httpdate::parse_http_date(text) {
                Ok(at) => at.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_millis() as f64),
                // An invalid date (`0`, say) means already expired.
                Err(_) => 0.0,
            });
        OriginHeaders {
            directives: Directives::of(headers),
            expires,
            etag: headers.get(ETAG).and_then(|v| v.to_str().ok()).map(str::to_string),
        }
    }

    /// Whether the answer may be kept at all.
    pub fn storable(&self) -> bool {
        !self.directives.no_store && !self.directives.private
    }

    /// Until when (ms since the epoch) an answer received at `now` is fresh, when
    /// the origin says: `s-maxage`, then `max-age`, then `Expires`; `no-cache`
    /// makes it stale at once (kept, but revalidated before each use).
    pub fn fresh_until(&self, now: f64) -> Option<f64> {
        if self.directives.no_cache {
            return Some(now);
        }
        match self.directives.shared_max_age.or(self.directives.max_age) {
            Some(age) => Some(now + age.as_millis() as f64),
            None => self.expires,
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn request_directives_are_read_across_headers() {
        let d = Directives::of(&headers(&[
            ("cache-control", "No-Cache, max-age=30"),
            ("cache-control", "stale-if-error, only-if-cached"),
        ]));
        assert!(d.no_cache && d.only_if_cached && !d.no_store);
        assert_eq!(d.max_age, Some(Duration::from_secs(30)));
        assert_eq!(d.stale_if_error, Some(None));
        let d = Directives::of(&headers(&[("cache-control", "stale-if-error=60, stale-while-revalidate=5, bogus")]));
        assert_eq!(d.stale_if_error, Some(Some(Duration::from_secs(60))));
        assert_eq!(d.stale_while_revalidate, Some(Duration::from_secs(5)));
        assert_eq!(Directives::of(&HeaderMap::new()), Directives::default());
    }

    #[test]
    fn origin_freshness_prefers_s_maxage_then_max_age_then_expires() {
        let now = 1_000_000.0;
        let both = OriginHeaders::of(&headers(&[
            ("cache-control", "max-age=10, s-maxage=20"),
            ("expires", "Thu, 01 Jan 2099 00:00:00 GMT"),
        ]));
        assert_eq!(both.fresh_until(now), Some(now + 20_000.0));
        let max_age = OriginHeaders::of(&headers(&[("cache-control", "max-age=10"), ("etag", "\"v1\"")]));
        assert_eq!(max_age.fresh_until(now), Some(now + 10_000.0));
        assert_eq!(max_age.etag.as_deref(), Some("\"v1\""));
        let expires = OriginHeaders::of(&headers(&[("expires", "Thu, 01 Jan 1970 00:00:10 GMT")]));
        assert_eq!(expires.fresh_until(now), Some(10_000.0));
        let invalid = OriginHeaders::of(&headers(&[("expires", "0")]));
        assert_eq!(invalid.fresh_until(now), Some(0.0), "an invalid Expires is already expired");
        assert_eq!(OriginHeaders::of(&HeaderMap::new()).fresh_until(now), None);
        let no_store = OriginHeaders::of(&headers(&[("cache-control", "no-store")]));
        assert!(!no_store.storable());
    }
}
