//! create_authentication_tokens, refresh_operation_token, login and logout: the
//! operations that turn credentials into tokens or a session. `login`,
//! `create_authentication_tokens` with credentials in the body, and
//! `refresh_operation_token` with a refresh token run without a logged-in caller.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use lyre_core::access::User;
use lyre_core::{Code, Error, Object, Value};

use crate::app::AppState;
use crate::config::ConfigDuration;
use crate::http::auth::{session_cookie, session_cookie_name};
use crate::http::error::ApiError;
use crate::http::format::Format;
use crate::http::ops::{Params, message, reply};
use crate::tokens::{TokenError, TokenKind};

/// `create_authentication_tokens`: `{operation_token, refresh_token}` for the body's
/// `username` and `password`, or for the caller when the body has neither.
pub async fn create_authentication_tokens(
    state: &AppState,
    caller: Option<Arc<User>>,
    peer: SocketAddr,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let username = params.string(&["username"])?;
    let password = params.string(&["password"])?;
    let expires_in = match params.value(&["expires_in"]) {
        None => None,
        Some(Value::String(text)) => Some(ConfigDuration::parse(&text).map_err(ApiError::bad_request)?.0),
        Some(Value::Int(seconds)) if seconds > 0 => Some(Duration::from_secs(seconds.unsigned_abs())),
        Some(_) => {
            return Err(ApiError::bad_request("'expires_in' must be a duration (\"1h\") or a number of seconds"));
        }
    };
    let user = match (username, password, caller) {
        (Some(username), Some(password), _) => match state.verify_password(username, password, peer.ip()).await {
            Ok(user) => user,
            Err(Error::LoginFailed | Error::Inactive) => {
                return Err(ApiError::new(Code::LoginFailed, "invalid credentials"));
            }
            Err(err) => return Err(err.into()),
        },
        (Some(_), None, _) | (None, Some(_), _) => return Err(ApiError::new(Code::LoginFailed, "invalid credentials")),
        (None, None, Some(caller)) => caller,
        (None, None, None) => return Err(Error::MustLogin.into()),
    };
    let issue = |kind| match (kind, expires_in) {
        (TokenKind::Operation, Some(ttl)) => state.tokens.issue_for(&user, kind, ttl),
        _ => state.tokens.issue(&user, kind),
    };
    let operation = issue(TokenKind::Operation).map_err(|e| ApiError::new(Code::Internal, e.to_string()))?;
    let refresh = issue(TokenKind::Refresh).map_err(|e| ApiError::new(Code::Internal, e.to_string()))?;
    state.engine.users().keep_refresh_token(&user.username, &refresh).await?;
    let mut body = Object::default();
    body.insert("operation_token".into(), operation.into());
    body.insert("refresh_token".into(), refresh.into());
    reply(format, &Value::Object(body))
}

/// `refresh_operation_token`: a new operation token for a user's latest refresh
/// token (in the body's `refresh_token`, or as the `Bearer` token).
pub async fn refresh_operation_token(
    state: &AppState,
    bearer: Option<String>,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let token = match params.string(&["refresh_token"])? {
        Some(token) => token,
        None => bearer.ok_or_else(|| ApiError::bad_request("'refresh_token' is required"))?,
    };
    let invalid = || ApiError::new(Code::LoginFailed, "invalid token");
    let claims = state.tokens.verify(&token, TokenKind::Refresh).map_err(|err| match err {
        TokenError::Expired => ApiError::new(Code::LoginFailed, "token expired"),
        TokenError::Invalid => invalid(),
    })?;
    if !state.engine.users().is_refresh_token(&claims.username, &token)? {
        return Err(invalid());
    }
    let user = match state.token_user(&claims) {
        Ok(user) => user,
        Err(Error::LoginFailed | Error::Inactive) => return Err(invalid()),
        Err(err) => return Err(err.into()),
    };
    let operation =
        state.tokens.issue(&user, TokenKind::Operation).map_err(|e| ApiError::new(Code::Internal, e.to_string()))?;
    let mut body = Object::default();
    body.insert("operation_token".into(), operation.into());
    reply(format, &Value::Object(body))
}

/// `login`: checks the body's `username` and `password` and starts a session, its
/// id in an HttpOnly cookie named for the request's origin, which authenticates
/// later requests from that origin on both ports (and travels only over TLS when it
/// was set over TLS).
pub async fn login(
    state: &AppState,
    peer: SocketAddr,
    over_tls: bool,
    headers: &HeaderMap,
    mut params: Params,
    format: Format,
) -> Result<Response, ApiError> {
    let Some(ttl) = state.sessions else {
        return Err(ApiError::bad_request("sessions are not enabled (authentication.enableSessions)"));
    };
    let username = params.required_string(&["username"])?;
    let password = params.string(&["password"])?.unwrap_or_default();
    let user = state.verify_password(username, password, peer.ip()).await?;
    let id = state.engine.users().start_session(&user, ttl.as_millis() as f64).await?;
    let expires = std::time::SystemTime::now() + ttl;
    // Over TLS, as Harper: sent with cross-site requests too, so a page of another
    // site that signed in keeps its session (only its own origin's requests are
    // signed in by it: the name says whose it is). Over plain HTTP browsers refuse
    // `SameSite=None`, so same-site only.
    let cookie = format!(
        "{}={id}; Path=/; Expires={}; HttpOnly; {}",
        session_cookie_name(headers),
        httpdate::fmt_http_date(expires),
        if over_tls { "SameSite=None; Secure" } else { "SameSite=Lax" }
    );
    let mut response = message(format, "Login successful")?;
    set_cookie(&mut response, &cookie)?;
    Ok(response)
}

/// `logout`: ends the request's session and clears its cookie.
pub async fn logout(state: &AppState, headers: &HeaderMap, format: Format) -> Result<Response, ApiError> {
    if let Some(id) = session_cookie(headers) {
        state.engine.users().end_session(&id).await?;
    }
    let cookie = format!(
        "{}=; Path=/; Expires=Thu, 01 Jan 1970 00:00:00 GMT; HttpOnly; SameSite=Lax",
        session_cookie_name(headers)
    );
    let mut response = message(format, "Logout successful")?;
    set_cookie(&mut response, &cookie)?;
    Ok(response)
}

fn set_cookie(response: &mut Response, cookie: &str) -> Result<(), ApiError> {
    let value = HeaderValue::from_str(cookie).map_err(|e| ApiError::new(Code::Internal, e.to_string()))?;
    response.headers_mut().append(header::SET_COOKIE, value);
    Ok(())
}
