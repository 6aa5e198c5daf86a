//! Requests Lyre makes to other servers (`csv_url_load`'s downloads, caching
//! tables' origins): one way to build their HTTP client and to say why one
//! failed.

use std::time::Duration;

/// An HTTP client for outbound requests: connecting within `connect_timeout`,
/// following at most 5 redirects, saying it is Lyre.
pub fn client(connect_timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::limited(5))
        .user_agent(concat!("lyre/", env!("CARGO_PKG_VERSION")))
}

/// A transfer error with its causes (reqwest's own text stops at "error sending
/// request").
pub fn describe(err: &reqwest::Error) -> String {
    let mut text = if err.is_timeout() { "timed out".to_string() } else { err.to_string() };
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}
