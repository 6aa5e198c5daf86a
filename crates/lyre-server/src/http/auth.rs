//! HTTP credentials: the `Authorization` header read into [`Credentials`], resolved
//! to a user by the protocol-neutral step in `app.rs`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use base64::Engine as _;
use lyre_core::access::User;
use lyre_core::{Code, Error};

use crate::app::{AppState, AuthError, Credentials};
use crate::http::error::ApiError;
use crate::tls::ClientCertificate;

/// Resolves the request's user from its `Authorization` header (Basic), or the super
/// user for credential-less loopback requests when `authorizeLocal` is on.
/// A verified client certificate (mTLS) logs its connection in when the request
/// carries no other credentials.
pub async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    peer: SocketAddr,
    client: Option<&ClientCertificate>,
) -> Result<Arc<User>, ApiError> {
    if let Some(user) = cached_basic_login(state, headers) {
        return Ok(user);
    }
    let presented = match (credentials(headers), client) {
        (Credentials::None, Some(ClientCertificate(name))) => Credentials::Certificate(name.clone()),
        (presented, _) => presented,
    };
    state.user(presented, peer.ip()).await.map_err(|err| match err {
        AuthError::MustLogin => Error::MustLogin.into(),
        AuthError::LoginFailed => Error::LoginFailed.into(),
        AuthError::InvalidToken => ApiError::new(Code::LoginFailed, "invalid token"),
        AuthError::ExpiredToken => ApiError::new(Code::LoginFailed, "token expired"),
        AuthError::Core(err) => err.into(),
    })
}

/// The user a Basic `Authorization` header logs in when the login cache holds the
/// login: the common case of a client that sends its password with every request,
/// answered from the header decoded on the stack (no copy of the name or password).
/// `None` sends the request the general way ([`credentials`], then `AppState::user`),
/// which answers the same for a cached login and everything else besides.
fn cached_basic_login(state: &AppState, headers: &HeaderMap) -> Option<Arc<User>> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, encoded) = value.split_at_checked(b"basic ".len())?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    // Longer credentials are not refused: they take the general way.
    let mut decoded = [0u8; 256];
    let len = base64::engine::general_purpose::STANDARD.decode_slice(encoded.trim_ascii(), &mut decoded).ok()?;
    let (username, password) = std::str::from_utf8(decoded.get(..len)?).ok()?.split_once(':')?;
    state.engine.users().cached(username, password)
}

/// The suffix of the session cookie's name (Harper names it
/// `<origin>-hdb-session`).
const SESSION_COOKIE_SUFFIX: &str = "-hdb-session";

/// The name of the session cookie that counts for this request, as Harper names
/// it: the request's `Origin` (else its `Host`) without its scheme, as a cookie-name
/// token, then `-hdb-session`. (Harper turns only the first character that is not a
/// letter, digit or `_` into `_`; Lyre turns every one, so the name is a valid
/// cookie-name token: `app_example_8080` where Harper has `app_example:8080`.)
/// `login` sets the cookie under this name and only this name is read back, so a
/// session serves the origin that signed in: a page of another origin (another
/// site, another port, a sandboxed `null`) that makes the browser send the cookie
/// is not signed in by it (Harper's protection against cross-site request forgery
/// and WebSocket hijacking).
pub fn session_cookie_name(headers: &HeaderMap) -> String {
    let origin = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::HOST))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("lyre");
    let bare = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    let prefix: String = bare.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    format!("{prefix}{SESSION_COOKIE_SUFFIX}")
}

/// The session id of this request's origin's session cookie
/// ([`session_cookie_name`]), if the `Cookie` header carries one and a browser
/// could not have sent it for a page of another origin: an opaque `Origin`
/// (`null`: a sandboxed frame, a file) has no session, and a request without an
/// `Origin` whose `Sec-Fetch-Site` says another site or port made it (a link
/// followed, an image or script fetched: the browser sends the cookie but no
/// `Origin`) is not signed in by it.
pub fn session_cookie(headers: &HeaderMap) -> Option<String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    match (header("origin"), header("sec-fetch-site")) {
        (Some("null"), _) | (None, Some("cross-site" | "same-site")) => return None,
        _ => {}
    }
    let wanted = session_cookie_name(headers);
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, value)| *name == wanted && !value.is_empty())
        .map(|(_, value)| value.to_string())
}

/// The credentials an `Authorization` header carries, else a session cookie.
pub fn credentials(headers: &HeaderMap) -> Credentials {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return session_cookie(headers).map_or(Credentials::None, Credentials::Session);
    };
    let Ok(value) = value.to_str() else { return Credentials::Malformed };
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    if scheme.eq_ignore_ascii_case("bearer") {
        return Credentials::Token(rest.trim().to_string());
    }
    if !scheme.eq_ignore_ascii_case("basic") || rest.trim().is_empty() {
        return Credentials::Unsupported;
    }
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(rest.trim()) else {
        return Credentials::Malformed;
    };
    let Ok(mut username) = String::from_utf8(decoded) else { return Credentials::Malformed };
    let Some(colon) = username.find(':') else { return Credentials::Malformed };
    // The decoded text keeps the name; only the password is copied out of it.
    let password = username[colon + 1..].to_string();
    username.truncate(colon);
    Credentials::Password { username, password }
}
