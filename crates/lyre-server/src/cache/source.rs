//! Where a caching table's records come from, as a component declares it in its
//! `config.yaml` (Lyre's key `sources`, by table name):
//!
//! ```yaml
//! sources:
//!   Product:
//!     url: https://origin.example/products/{id}
//!     headers:
//!       Authorization: Bearer ${ORIGIN_TOKEN}
//!     timeout: 10
//!     writeThrough: true
//!   ProductMirror:
//!     table: Product
//! ```
//!
//! An HTTP origin is a URL template (`{id}`: the record's primary key, escaped),
//! headers sent with each request (`${NAME}`: an environment variable, read when
//! the component loads, so a missing secret fails the load and names it), and a
//! timeout (seconds, default 30). With `writeThrough`, a REST `PUT`, `PATCH` or
//! `DELETE` of a record is sent to the origin's URL for it first, and written
//! here only when the origin took it. Another table of the same database may be
//! the source instead, or code: a script's class (`tables.T.sourcedFrom(Source)`,
//! see `script/`), asked through [`RecordSource`].

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;

/// How long an origin may take to answer, unless the source says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// One table's source as written in `config.yaml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SourceConfig {
    /// An HTTP(S) origin: the record's URL, `{id}` standing for its key.
    #[serde(default)]
    pub url: Option<String>,
    /// Another table of the same database, read by the same key.
    #[serde(default)]
    pub table: Option<String>,
    /// Headers sent to the origin (`${NAME}` reads an environment variable).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Seconds an origin request may take, connecting included.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// Send REST writes of a record to the origin before writing them here.
    #[serde(default)]
    pub write_through: bool,
}

/// A table's source, checked and ready to call.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// An HTTP origin.
    Http(HttpOrigin),
    /// Another table of the same database.
    Table(String),
    /// Code that answers for one record at a time.
    Code(CodeSource),
}

/// A source that is code (a script's class), asked for one record at a time.
pub trait RecordSource: Send + Sync {
    /// The record with key `id`: `Ok(None)` when the source has none.
    fn get(&self, id: &lyre_core::Value)
    -> futures_util::future::BoxFuture<'static, Result<CodeAnswer, SourceFailure>>;
    /// What the source is, for logs and errors (`ThingSource of data.Thing`).
    fn describe(&self) -> String;
}

/// What a code source answered for one record.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeAnswer {
    /// The record, or `None` when the source has none.
    pub record: Option<lyre_core::Object>,
    /// How long the record stays fresh (the source's `expiration`), when it says.
    pub fresh_for: Option<Duration>,
}

/// Why a code source gave no record.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SourceFailure {
    /// The code threw an error carrying an HTTP error status (Harper's `statusCode`,
    /// as `ClientError` and `ServerError` do) or answered a `Response` with one: the
    /// client is answered that status, as Harper answers it.
    #[error("{message}")]
    Stated {
        /// The status, 400 to 599.
        status: u16,
        /// The error's message.
        message: String,
    },
    /// The code ran past its time budget and was stopped.
    #[error("{0}")]
    TimedOut(String),
    /// Anything else (a plain throw, an answer that cannot be a record).
    #[error("{0}")]
    Failed(String),
}

/// A [`RecordSource`] as a [`Source`] holds it (compared by identity).
#[derive(Clone)]
pub struct CodeSource(pub std::sync::Arc<dyn RecordSource>);

impl std::fmt::Debug for CodeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.describe())
    }
}

impl PartialEq for CodeSource {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// An HTTP origin, its secrets read.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpOrigin {
    /// The URL template, holding `{id}`.
    pub url: String,
    /// Sent with each request.
    pub headers: HeaderMap,
    /// How long a request may take.
    pub timeout: Duration,
    /// Whether REST writes of a record go to the origin first.
    pub write_through: bool,
}

impl SourceConfig {
    /// The source of table `table`, checked: one kind, a URL that parses with
    /// `{id}` in it, headers that are valid with every `${NAME}` set in `env`.
    pub fn resolve(&self, table: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Source, String> {
        let at = |message: String| format!("sources.{table}: {message}");
        match (&self.url, &self.table) {
            (Some(url), None) => {
                if !url.contains("{id}") {
                    return Err(at(format!("the url '{url}' has no {{id}} for the record's key")));
                }
                let parsed = reqwest::Url::parse(&url.replace("{id}", "x")).map_err(|e| at(format!("url: {e}")))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(at(format!("the url must be http or https, not {}", parsed.scheme())));
                }
                let mut headers = HeaderMap::new();
                for (name, template) in &self.headers {
                    let value = expand(template, env).map_err(|variable| {
                        at(format!("header '{name}' names the environment variable {variable}, which is not set"))
                    })?;
                    let header =
                        HeaderName::from_bytes(name.as_bytes()).map_err(|_| at(format!("'{name}' is no header")))?;
                    let value = HeaderValue::from_str(&value)
                        .map_err(|_| at(format!("the value of header '{name}' is not a valid header value")))?;
                    headers.insert(header, value);
                }
                let timeout = match self.timeout {
                    None => DEFAULT_TIMEOUT,
                    Some(seconds) if seconds > 0.0 && seconds.is_finite() => Duration::from_secs_f64(seconds),
                    Some(seconds) => return Err(at(format!("timeout {seconds} is not a positive number of seconds"))),
                };
                Ok(Source::Http(HttpOrigin { url: url.clone(), headers, timeout, write_through: self.write_through }))
            }
            (None, Some(other)) if other == table => Err(at("a table cannot be its own source".into())),
            (None, Some(_)) if self.write_through => Err(at("writeThrough needs an HTTP origin (url)".into())),
            (None, Some(other)) => Ok(Source::Table(other.clone())),
            (Some(_), Some(_)) => Err(at("give a url or a table, not both".into())),
            (None, None) => Err(at("give the origin's url, or the table to read from".into())),
        }
    }
}

/// `template` with each `${NAME}` replaced by the environment variable's value;
/// `Err(NAME)` for one that is not set.
fn expand(template: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = &rest[start + 2..start + end];
        out.push_str(&env(name).ok_or_else(|| name.to_string())?);
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl Source {
    /// Whether REST writes of a record go to the origin first (`writeThrough`).
    pub fn writes_through(&self) -> bool {
        matches!(self, Source::Http(origin) if origin.write_through)
    }
}

impl HttpOrigin {
    /// The URL of the record with key `id` (its text escaped as one path segment
    /// or query value).
    pub fn url_of(&self, id: &str) -> String {
        let escaped: String = percent_encode(id);
        self.url.replace("{id}", &escaped)
    }
}

/// `text` with everything but unreserved characters percent-encoded.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cret".to_string())
    }

    fn config(yaml: &str) -> SourceConfig {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn an_http_source_is_checked_and_its_secrets_read() {
        let source =
            config("url: https://o.example/items/{id}?v=1\nheaders:\n  Authorization: Bearer ${TOKEN}\ntimeout: 2.5\n")
                .resolve("Item", &env)
                .unwrap();
        let Source::Http(origin) = source else { panic!("an HTTP origin") };
        assert_eq!(origin.headers["authorization"], "Bearer s3cret");
        assert_eq!(origin.timeout, Duration::from_millis(2_500));
        assert_eq!(origin.url_of("a b/c"), "https://o.example/items/a%20b%2Fc?v=1");
        let default = config("url: http://o/{id}").resolve("Item", &env).unwrap();
        assert!(matches!(default, Source::Http(HttpOrigin { timeout: DEFAULT_TIMEOUT, write_through: false, .. })));
    }

    #[test]
    fn bad_sources_are_refused_naming_the_problem() {
        let refused = |yaml: &str| config(yaml).resolve("Item", &env).unwrap_err();
        assert!(refused("url: https://o/items").contains("no {id}"));
        assert!(refused("url: ftp://o/{id}").contains("http or https"));
        assert!(refused("url: 'https://o/{id}'\nheaders: {X: '${MISSING}'}").contains("MISSING"));
        assert!(refused("url: 'https://o/{id}'\ntimeout: 0").contains("timeout"));
        assert!(refused("table: Item").contains("its own source"));
        assert!(refused("url: 'https://o/{id}'\ntable: Other").contains("not both"));
        assert!(refused("headers: {}").contains("url"));
        assert!(refused("table: Other\nwriteThrough: true").contains("writeThrough needs an HTTP origin"));
        assert_eq!(config("table: Other").resolve("Item", &env).unwrap(), Source::Table("Other".into()));
        assert!(serde_saphyr::from_str::<SourceConfig>("url: x\nbogus: 1").is_err(), "unknown keys are refused");
    }
}
