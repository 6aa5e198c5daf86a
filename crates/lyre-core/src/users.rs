//! The user store: bootstrap of the first super user, and authentication.
//!
//! Users and roles live in the `system` database (`hdb_user`, `hdb_role`, as in
//! Harper). Passwords are stored as argon2id hashes; verified logins are cached
//! briefly (Harper's `authentication.cacheTTL`) because argon2 is deliberately slow.

use std::collections::HashMap;
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

const USER_TABLE: &str = "hdb_user";
const ROLE_TABLE: &str = "hdb_role";
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

/// Users and roles stored in the `system` database.
pub struct Users {
    system: Arc<Db>,
    cache: Mutex<HashMap<String, CachedLogin>>,
    /// Held while an argon2 hash is verified. Each verification takes ~19 MiB and
    /// tens of milliseconds; one at a time bounds that memory when many connections
    /// log in at once, and the re-check of the cache under it means a burst of
    /// requests with the same credentials costs one verification, not one each.
    verifying: Mutex<()>,
    ttl: Duration,
    /// Per-process salt for cached password digests.
    salt: [u8; 16],
}

impl Users {
    /// Opens the user store, creating its tables and the first super user if needed.
    /// Returns the generated password when one was made.
    pub(crate) async fn bootstrap(
        system: Arc<Db>,
        admin: &AdminBootstrap,
        ttl: Duration,
    ) -> Result<(Users, Option<String>)> {
        let ctx = Context::system();
        for (table, key) in [(ROLE_TABLE, "id"), (USER_TABLE, "username")] {
            if system.schema().table(table).is_none() {
                system.create_table(&ctx, TableSpec::dynamic(table, key)).await?;
            }
        }
        let users = Users {
            system,
            cache: Mutex::new(HashMap::new()),
            verifying: Mutex::new(()),
            ttl,
            salt: rand::rng().random(),
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
                    let p: String =
                        rand::rng().sample_iter(rand::distr::Alphanumeric).take(24).map(char::from).collect();
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
        let mut permission = Object::new();
        permission.insert("super_user".into(), Value::Bool(true));
        let mut role = Object::new();
        role.insert("id".into(), SUPER_USER_ROLE.into());
        role.insert("role".into(), SUPER_USER_ROLE.into());
        role.insert("permission".into(), Value::Object(permission));
        roles.upsert(ctx, vec![role]).await?;

        let hash = hash_password(password)?;
        let mut user = Object::new();
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

    /// Verifies credentials against the stored argon2id hash (deliberately slow: call
    /// off the async threads), caching a success.
    pub fn authenticate(&self, username: &str, password: &str) -> Result<Arc<User>> {
        if let Some(user) = self.cached(username, password) {
            return Ok(user);
        }
        let _one_at_a_time = self.verifying.lock();
        if let Some(user) = self.cached(username, password) {
            return Ok(user); // verified while this call waited
        }
        let ctx = Context::system();
        let users = self.system.table(USER_TABLE)?;
        let Some(record) = users.get_many(&ctx, &[Value::from(username)], &Select::Raw)?.pop() else {
            return Err(Error::LoginFailed);
        };
        let stored = record.get("password").and_then(Value::as_str).ok_or(Error::LoginFailed)?;
        if Argon2::default().verify_password(password.as_bytes(), stored).is_err() {
            return Err(Error::LoginFailed);
        }
        if record.get("active") == Some(&Value::Bool(false)) {
            return Err(Error::LoginFailed);
        }
        let role_name = record.get("role").and_then(Value::as_str).unwrap_or_default().to_string();
        let role = self.role(&role_name)?;
        let user = Arc::new(User { username: username.to_string(), role, active: true });
        let mut cache = self.cache.lock();
        cache.insert(
            username.to_string(),
            CachedLogin { digest: self.digest(password), user: user.clone(), expires: Instant::now() + self.ttl },
        );
        Ok(user)
    }

    fn role(&self, name: &str) -> Result<Role> {
        let roles = self.system.table(ROLE_TABLE)?;
        let record = roles.get_many(&Context::system(), &[Value::from(name)], &Select::Raw)?.pop();
        let permission = record.and_then(|mut r| r.shift_remove("permission")).unwrap_or(Value::Null);
        let super_user = matches!(&permission, Value::Object(p) if p.get("super_user") == Some(&Value::Bool(true)));
        Ok(Role { name: name.to_string(), super_user, permission })
    }

    fn digest(&self, password: &str) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(self.salt);
        hasher.update(password.as_bytes());
        hasher.finalize().into()
    }
}

/// An argon2id PHC string for `password`.
fn hash_password(password: &str) -> Result<String> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| Error::invalid(format!("cannot hash the password: {e}")))
}
