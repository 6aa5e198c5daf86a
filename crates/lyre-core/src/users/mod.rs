//! The user store: bootstrap of the first super user, authentication, and (in
//! `ops.rs`) the user and role operations.
//!
//! Users and roles live in the `system` database (`hdb_user`, `hdb_role`, as in
//! Harper); only this module writes them. Passwords are stored as argon2id hashes;
//! verified logins are cached briefly (Harper's `authentication.cacheTTL`) because
//! argon2 is deliberately slow, and the cache is emptied by every change to a user
//! or role. A login for an unknown name costs the same verification as a wrong
//! password (against a hash made at start-up), and failed logins are bounded per
//! name and per address (`limiter.rs`).

mod limiter;
mod ops;
mod sessions;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use argon2::{Argon2, PasswordHasher, PasswordVerifier};
use parking_lot::Mutex;
use rand::Rng;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::access::{Context, Role, User};
use crate::catalog::TableSpec;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::query::Select;
use crate::value::{Object, Value};

pub use limiter::LoginLimit;
pub use ops::{NewRole, NewUser, RoleChange, UserChange};

const USER_TABLE: &str = "hdb_user";
const ROLE_TABLE: &str = "hdb_role";
const SESSION_TABLE: &str = "hdb_session";
const SUPER_USER_ROLE: &str = "super_user";

/// The first super user, created when the user table is empty.
#[derive(Debug, Clone)]
pub struct AdminBootstrap {
    /// Login name (Harper's `HDB_ADMIN_USERNAME`).
    pub username: String,
    /// Password (`HDB_ADMIN_PASSWORD`); generated and reported once when absent.
    pub password: Option<String>,
}

struct CachedLogin {
    digest: [u8; 32],
    user: Arc<User>,
    expires: Instant,
}

/// Most users [`Users::resolve`] keeps resolved at once; beyond it the cache starts
/// over (memory stays bounded however many names tokens carry).
const MAX_RESOLVED: usize = 10_000;

/// Users and roles stored in the `system` database.
pub struct Users {
    system: Arc<Db>,
    cache: Mutex<HashMap<String, CachedLogin, foldhash::fast::RandomState>>,
    /// Users resolved by name (for tokens and sessions) within the cache TTL.
    resolved: Mutex<HashMap<String, (Arc<User>, Instant)>>,
    /// Sessions seen lately: id to user name and expiry (ms), so a request with a
    /// session cookie reads no record; `logout` removes its entry.
    sessions: Mutex<HashMap<String, (String, f64)>>,
    /// Counts the changes to users and roles: a login or resolution that read the
    /// records before a change is not cached after it.
    generation: std::sync::atomic::AtomicU64,
    /// Held while an argon2 hash is verified. Each verification takes ~19 MiB and
    /// tens of milliseconds; one at a time bounds that memory when many connections
    /// log in at once, and the re-check of the cache under it means a burst of
    /// requests with the same credentials costs one verification, not one each.
    verifying: Mutex<()>,
    /// Held by every change to users and roles, so checks (a role in use, a name
    /// taken) and the writes they guard do not interleave.
    changing: tokio::sync::Mutex<()>,
    ttl: Duration,
    /// Per-process salt for cached password digests.
    salt: [u8; 16],
    /// A hash of a random password: what an unknown name is verified against, so
    /// that it costs what a known one does.
    decoy: String,
    limiter: limiter::Limiter,
}

impl Users {
    /// Opens the user store, creating its tables and the first super user if needed.
    /// Returns the generated password when one was made.
    pub(crate) async fn bootstrap(
        system: Arc<Db>,
        admin: &AdminBootstrap,
        ttl: Duration,
        limit: LoginLimit,
    ) -> Result<(Users, Option<String>)> {
        let ctx = Context::system();
        for (table, key) in [(ROLE_TABLE, "id"), (USER_TABLE, "username"), (SESSION_TABLE, "id")] {
            if system.schema().table(table).is_none() {
                let mut spec = TableSpec::dynamic(table, key);
                if table == SESSION_TABLE {
                    // The expiry sweeper removes sessions nobody presents again.
                    spec.expires_at = Some(sessions::EXPIRES.to_string());
                }
                system.create_table(&ctx, spec).await?;
            }
        }
        let decoy = hash_password(&random_password())?;
        let users = Users {
            system,
            cache: Mutex::new(HashMap::default()),
            resolved: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            generation: std::sync::atomic::AtomicU64::new(0),
            verifying: Mutex::new(()),
            changing: tokio::sync::Mutex::new(()),
            ttl,
            salt: rand::rng().random(),
            decoy,
            limiter: limiter::Limiter::new(limit),
        };
        let mut generated = None;
        let user_table = users.system.table(USER_TABLE)?;
        let any_user = user_table.search(&ctx, crate::query::Query { limit: Some(1), ..Default::default() })?;
        let mut found = false;
        any_user.run(&mut |_| {
            found = true;
            std::ops::ControlFlow::Break(())
        })?;
        if !found {
            let password = match &admin.password {
                Some(p) => p.clone(),
                None => {
                    let p = random_password();
                    generated = Some(p.clone());
                    p
                }
            };
            users.create_super_user(&ctx, &admin.username, &password).await?;
        }
        Ok((users, generated))
    }

    async fn create_super_user(&self, ctx: &Context, username: &str, password: &str) -> Result<()> {
        let roles = self.system.table(ROLE_TABLE)?;
        let mut permission = Object::default();
        permission.insert("super_user".into(), Value::Bool(true));
        let mut role = Object::default();
        role.insert("id".into(), SUPER_USER_ROLE.into());
        role.insert("role".into(), SUPER_USER_ROLE.into());
        role.insert("permission".into(), Value::Object(permission));
        roles.upsert(ctx, vec![role]).await?;

        let hash = hash_password(password)?;
        let mut user = Object::default();
        user.insert("username".into(), username.into());
        user.insert("password".into(), hash.into());
        user.insert("role".into(), SUPER_USER_ROLE.into());
        user.insert("active".into(), Value::Bool(true));
        self.system.table(USER_TABLE)?.insert(ctx, vec![user]).await?;
        tracing::info!(username, "created the first super user");
        Ok(())
    }

    /// The user, if these credentials were verified within the cache TTL. Cheap.
    pub fn cached(&self, username: &str, password: &str) -> Option<Arc<User>> {
        let digest = self.digest(password);
        let cache = self.cache.lock();
        let entry = cache.get(username)?;
        let fresh = entry.expires > Instant::now();
        (fresh && bool::from(entry.digest.ct_eq(&digest))).then(|| entry.user.clone())
    }

    /// Verifies credentials from a client at `from` against the stored argon2id
    /// hash (deliberately slow: call off the async threads), caching a success.
    /// Refused without verifying while the name or address is over the failed-login
    /// limit; an inactive user is told so only after the right password.
    pub fn authenticate(&self, username: &str, password: &str, from: Option<IpAddr>) -> Result<Arc<User>> {
        if let Some(user) = self.cached(username, password) {
            return Ok(user);
        }
        self.limiter.check(username, from).map_err(Error::TooManyLogins)?;
        let _one_at_a_time = self.verifying.lock();
        if let Some(user) = self.cached(username, password) {
            return Ok(user); // verified while this call waited
        }
        // Again: failures recorded while this call waited count (a burst of guesses
        // all passed the first check together).
        self.limiter.check(username, from).map_err(Error::TooManyLogins)?;
        let generation = self.generation();
        let verified = self.verify(username, password);
        match &verified {
            Ok(_) => self.limiter.succeeded(username),
            Err(Error::LoginFailed) => self.limiter.failed(username, from),
            Err(_) => {}
        }
        let user = verified?;
        let mut cache = self.cache.lock();
        if generation != self.generation() {
            return Ok(user); // a user or role changed meanwhile: answer, but do not keep
        }
        cache.insert(
            username.to_string(),
            CachedLogin { digest: self.digest(password), user: user.clone(), expires: Instant::now() + self.ttl },
        );
        Ok(user)
    }

    /// One argon2 verification, whether or not the user exists.
    fn verify(&self, username: &str, password: &str) -> Result<Arc<User>> {
        let record = self.user_record(username)?;
        let stored = record.as_ref().and_then(|r| r.get("password")).and_then(Value::as_str);
        let known = stored.is_some();
        let matches = password_matches(password, stored.unwrap_or(&self.decoy)) && known;
        let Some(record) = record.filter(|_| matches) else {
            return Err(Error::LoginFailed);
        };
        if record.get("active") == Some(&Value::Bool(false)) {
            return Err(Error::Inactive);
        }
        self.user_from(username, &record)
    }

    /// The user named `username` as a client would be authenticated by a token or a
    /// session: the stored user with its role now; refused when gone or inactive.
    /// Kept for the cache TTL; any change to users or roles empties the cache.
    pub fn resolve(&self, username: &str) -> Result<Arc<User>> {
        if let Some((user, expires)) = self.resolved.lock().get(username)
            && *expires > Instant::now()
        {
            return Ok(user.clone());
        }
        let generation = self.generation();
        let Some(record) = self.user_record(username)? else { return Err(Error::LoginFailed) };
        if record.get("active") == Some(&Value::Bool(false)) {
            return Err(Error::Inactive);
        }
        let user = self.user_from(username, &record)?;
        let mut resolved = self.resolved.lock();
        if generation != self.generation() {
            return Ok(user);
        }
        if resolved.len() >= MAX_RESOLVED {
            resolved.clear();
        }
        resolved.insert(username.to_string(), (user.clone(), Instant::now() + self.ttl));
        Ok(user)
    }

    /// The active user a stored record describes, with its role now.
    fn user_from(&self, username: &str, record: &Object) -> Result<Arc<User>> {
        let role_id = record.get("role").and_then(Value::as_str).unwrap_or_default();
        let password = record.get("password").and_then(Value::as_str).unwrap_or_default();
        Ok(Arc::new(User {
            username: username.to_string(),
            role: self.role(role_id)?,
            active: true,
            login_epoch: User::login_epoch_of(password),
        }))
    }

    fn user_record(&self, username: &str) -> Result<Option<Object>> {
        let users = self.system.table(USER_TABLE)?;
        Ok(users.get_many(&Context::system(), &[Value::from(username)], &Select::Raw)?.pop())
    }

    fn role(&self, id: &str) -> Result<Role> {
        let roles = self.system.table(ROLE_TABLE)?;
        let record = roles.get_many(&Context::system(), &[Value::from(id)], &Select::Raw)?.pop();
        let permission = record.and_then(|mut r| r.shift_remove("permission")).unwrap_or(Value::Null);
        Ok(Role::new(id, permission))
    }

    /// Forgets every cached login: a user or role changed.
    fn forget_logins(&self) {
        // Under the caches' locks, so no insert can slip between the count and the clear.
        let (mut cache, mut resolved) = (self.cache.lock(), self.resolved.lock());
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        cache.clear();
        resolved.clear();
    }

    /// Counts the changes to users and roles: a long-lived connection that saw
    /// another count looks its user up again ([`Users::current`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `user` as stored now, with its role as it is now: for a connection that
    /// authenticated before users or roles changed. Refused (`LoginFailed`) when
    /// the user was dropped, deactivated, or given a new password or made again
    /// under the name since (as tokens issued before are); the server's own
    /// identity (`authorizeLocal`) is kept as it is.
    pub fn current(&self, user: &Arc<User>) -> Result<Arc<User>> {
        if **user == User::system() {
            return Ok(user.clone());
        }
        let now = self.resolve(&user.username)?;
        if now.login_epoch != user.login_epoch {
            return Err(Error::LoginFailed);
        }
        Ok(now)
    }

    fn digest(&self, password: &str) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(self.salt);
        hasher.update(password.as_bytes());
        hasher.finalize().into()
    }
}

fn random_password() -> String {
    rand::rng().sample_iter(rand::distr::Alphanumeric).take(24).map(char::from).collect()
}

/// Whether `password` matches the argon2 PHC string `stored` (false when `stored`
/// does not parse, which only a corrupted record can cause).
fn password_matches(password: &str, stored: &str) -> bool {
    Argon2::default().verify_password(password.as_bytes(), stored).is_ok()
}

/// An argon2id PHC string for `password`.
fn hash_password(password: &str) -> Result<String> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| Error::invalid(format!("cannot hash the password: {e}")))
}
