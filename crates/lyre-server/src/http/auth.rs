//! Credentials to user, before anything reaches core.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use base64::Engine as _;
use lyre_core::access::User;
use lyre_core::{Code, Error};

use crate::http::AppState;
use crate::http::error::ApiError;

/// Resolves the request's user from its `Authorization` header (Basic), or the super
/// user for credential-less loopback requests when `authorizeLocal` is on.
pub async fn authenticate(state: &AppState, headers: &HeaderMap, peer: SocketAddr) -> Result<Arc<User>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        if state.authorize_local && peer.ip().is_loopback() {
            return Ok(Arc::new(User::system()));
        }
        return Err(Error::MustLogin.into());
    };
    let value = value.to_str().map_err(|_| ApiError::from(Error::LoginFailed))?;
    let (scheme, credentials) = value.split_once(' ').unwrap_or((value, ""));
    if scheme.eq_ignore_ascii_case("bearer") {
        return Err(ApiError::new(Code::LoginFailed, "invalid token"));
    }
    if !scheme.eq_ignore_ascii_case("basic") || credentials.trim().is_empty() {
        return Err(Error::MustLogin.into());
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(credentials.trim())
        .map_err(|_| ApiError::from(Error::LoginFailed))?;
    let decoded = String::from_utf8(decoded).map_err(|_| ApiError::from(Error::LoginFailed))?;
    let (username, password) = decoded.split_once(':').ok_or_else(|| ApiError::from(Error::LoginFailed))?;
    let users = state.engine.users();
    if let Some(user) = users.cached(username, password) {
        return Ok(user);
    }
    // A cache miss verifies an argon2 hash: tens of milliseconds of CPU.
    let engine = state.engine.clone();
    let (username, password) = (username.to_string(), password.to_string());
    let verified = tokio::task::spawn_blocking(move || engine.users().authenticate(&username, &password))
        .await
        .map_err(|e| ApiError::new(Code::Internal, format!("authentication failed: {e}")))?;
    Ok(verified?)
}
