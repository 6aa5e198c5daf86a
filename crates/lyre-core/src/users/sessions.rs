//! Login sessions (`login`/`logout`, the session cookie) and the refresh-token
//! digests `create_authentication_tokens` keeps on each user, both in the `system`
//! database so they survive a restart.
//!
//! A session is `{id, user, expires}` in `hdb_session`, its id 122 random bits; an
//! expired one is refused and removed when next presented. A user's latest refresh
//! token is kept as its SHA-256 digest (`hdb_user.refresh_token`), so only that one
//! buys operation tokens.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::access::{Context, User};
use crate::error::{Error, Result};
use crate::query::Select;
use crate::time::now_ms;
use crate::users::{SESSION_TABLE, USER_TABLE, Users};
use crate::value::{Object, Value};

/// The attribute of a session holding when it expires (ms since the epoch): the
/// table's `@expiresAt`, so the expiry sweeper removes sessions nobody presents.
pub(super) const EXPIRES: &str = "expires";

/// Most sessions kept in memory at once; beyond it the cache starts over.
const MAX_SESSIONS_CACHED: usize = 10_000;

fn digest(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

impl Users {
    /// Starts a session for `user` lasting `ttl_ms`; returns its id.
    pub async fn start_session(&self, user: &User, ttl_ms: f64) -> Result<String> {
        let id = uuid::Uuid::new_v4().to_string();
        let mut record = Object::default();
        record.insert("id".into(), id.clone().into());
        record.insert("user".into(), user.username.clone().into());
        record.insert(EXPIRES.into(), Value::Float(now_ms() + ttl_ms));
        self.system.table(SESSION_TABLE)?.insert(&Context::system(), vec![record]).await?;
        Ok(id)
    }

    /// The user of session `id`, if it exists, has not expired and its user may
    /// still log in. An expired session is removed.
    pub async fn session_user(&self, id: &str) -> Result<Option<Arc<User>>> {
        let found = {
            // Read and cached under the lock, so a logout (which removes the record
            // before the entry) cannot be undone by a read that raced it.
            let mut sessions = self.sessions.lock();
            match sessions.get(id).cloned() {
                Some(found) => Some(found),
                None => {
                    let table = self.system.table(SESSION_TABLE)?;
                    let stored = table.get_many(&Context::system(), &[Value::from(id)], &Select::Raw)?.pop();
                    let found = stored.and_then(|session| {
                        let username = session.get("user").and_then(Value::as_str)?.to_string();
                        Some((username, session.get(EXPIRES).and_then(Value::as_f64).unwrap_or(0.0)))
                    });
                    if let Some(found) = &found {
                        if sessions.len() >= MAX_SESSIONS_CACHED {
                            sessions.clear();
                        }
                        sessions.insert(id.to_string(), found.clone());
                    }
                    found
                }
            }
        };
        let Some((username, expires)) = found else { return Ok(None) };
        if expires <= now_ms() {
            self.end_session(id).await?;
            return Ok(None);
        }
        match self.resolve(&username) {
            Ok(user) => Ok(Some(user)),
            Err(Error::LoginFailed) => Ok(None), // the user was dropped
            Err(err) => Err(err),
        }
    }

    /// Ends session `id` (nothing happens when there is none).
    pub async fn end_session(&self, id: &str) -> Result<()> {
        // The record first: a lookup that misses the cache then finds nothing.
        self.system.table(SESSION_TABLE)?.delete(&Context::system(), vec![Value::from(id)]).await?;
        self.sessions.lock().remove(id);
        Ok(())
    }

    /// Ends every session of `username` (the user was dropped: a user created
    /// later under the name must not inherit them).
    pub(crate) async fn end_sessions_of(&self, username: &str) -> Result<()> {
        let table = self.system.table(SESSION_TABLE)?;
        if table.schema().attribute("user").is_none() {
            return Ok(()); // no session was ever started
        }
        let query = crate::query::Query {
            conditions: vec![crate::query::Condition::Compare {
                attribute: "user".into(),
                comparator: crate::query::Comparator::Equals,
                value: Value::from(username),
            }],
            ..Default::default()
        };
        let mut ids = Vec::new();
        table.search(&Context::system(), query)?.run(&mut |value| {
            if let Value::Object(session) = value
                && let Some(id) = session.get("id")
            {
                ids.push(id.clone());
            }
            std::ops::ControlFlow::Continue(())
        })?;
        if ids.is_empty() {
            return Ok(());
        }
        table.delete(&Context::system(), ids.clone()).await?;
        let mut sessions = self.sessions.lock();
        for id in ids.iter().filter_map(Value::as_str) {
            sessions.remove(id);
        }
        Ok(())
    }

    /// Keeps `token` as `username`'s one valid refresh token.
    pub async fn keep_refresh_token(&self, username: &str, token: &str) -> Result<()> {
        let mut record = Object::default();
        record.insert("username".into(), username.into());
        record.insert("refresh_token".into(), digest(token).into());
        let summary = self.system.table(USER_TABLE)?.update(&Context::system(), vec![record]).await?;
        if summary.written.is_empty() { Err(Error::LoginFailed) } else { Ok(()) }
    }

    /// Whether `token` is `username`'s latest refresh token.
    pub fn is_refresh_token(&self, username: &str, token: &str) -> Result<bool> {
        let Some(record) = self.user_record(username)? else { return Ok(false) };
        let Some(kept) = record.get("refresh_token").and_then(Value::as_str) else { return Ok(false) };
        Ok(bool::from(kept.as_bytes().ct_eq(digest(token).as_bytes())))
    }
}
