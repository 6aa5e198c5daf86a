//! The user and role operations (Harper's `add_user` … `list_roles`): super users
//! only, except `user_info`. Each change runs under the store's change lock and
//! empties the login cache, so a dropped user or a narrowed role takes effect on
//! the next request.

use std::collections::HashSet;
use std::ops::ControlFlow;

use crate::access::{CatalogView, Context, require_super_user, validate_permission};
use crate::error::{Error, Result};
use crate::query::{Comparator, Condition, Query, Select};
use crate::table::WriteSummary;
use crate::users::{ROLE_TABLE, USER_TABLE, Users, hash_password};
use crate::value::{Object, Value};

/// Properties of a stored user no answer shows.
const SECRET: [&str; 4] = ["password", "hash", "refresh_token", "hash_function"];

/// `add_user`'s request.
#[derive(Debug, Clone)]
pub struct NewUser {
    /// The login name.
    pub username: String,
    /// The password, stored as an argon2id hash.
    pub password: String,
    /// The role's name (its `role` property, as in Harper).
    pub role: String,
    /// Whether the user may log in.
    pub active: bool,
}

/// `alter_user`'s request: what to change.
#[derive(Debug, Clone, Default)]
pub struct UserChange {
    /// Whom.
    pub username: String,
    /// A new password.
    pub password: Option<String>,
    /// A new role, by name.
    pub role: Option<String>,
    /// Switch the account on or off.
    pub active: Option<bool>,
}

/// `add_role`'s request.
#[derive(Debug, Clone)]
pub struct NewRole {
    /// The role's name.
    pub role: String,
    /// Its id (the name when not given).
    pub id: Option<String>,
    /// The permission document.
    pub permission: Value,
}

/// `alter_role`'s request.
#[derive(Debug, Clone)]
pub struct RoleChange {
    /// Which role.
    pub id: String,
    /// A new name.
    pub role: Option<String>,
    /// The new permission document.
    pub permission: Value,
}

/// What a role name or id may be (Harper's `[\w\-_]+`).
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

impl Users {
    /// Creates a user. 409 when the name is taken, 404 when the role is unknown.
    pub async fn add_user(&self, ctx: &Context, user: NewUser) -> Result<()> {
        require_super_user(ctx)?;
        if user.username.is_empty() {
            return Err(Error::invalid("Username can't be blank"));
        }
        if user.username == crate::catalog::SYSTEM_DATABASE {
            return Err(Error::invalid("Username 'system' is reserved"));
        }
        if user.password.is_empty() {
            return Err(Error::invalid("Password can't be blank"));
        }
        let hash = hash_off_the_async_threads(user.password).await?;
        let _serial = self.changing.lock().await;
        let role =
            self.role_by_name(&user.role)?.ok_or_else(|| Error::Missing(format!("{} role not found", user.role)))?;
        let mut record = Object::default();
        record.insert("username".into(), user.username.clone().into());
        record.insert("password".into(), hash.into());
        record.insert("role".into(), role_id(&role).into());
        record.insert("active".into(), Value::Bool(user.active));
        let summary = self.system.table(USER_TABLE)?.insert(&Context::system(), vec![record]).await?;
        if summary.written.is_empty() {
            return Err(Error::Conflict(format!("User {} already exists", user.username)));
        }
        self.forget_logins();
        Ok(())
    }

    /// Changes a user's password, role or active flag; a name that does not exist is
    /// reported skipped, as Harper does.
    pub async fn alter_user(&self, ctx: &Context, change: UserChange) -> Result<WriteSummary> {
        require_super_user(ctx)?;
        if change.username.is_empty() {
            return Err(Error::invalid("username is required"));
        }
        if change.password.is_none() && change.role.is_none() && change.active.is_none() {
            return Err(Error::invalid("nothing to update, must supply active, role or password to update"));
        }
        if change.password.as_deref().is_some_and(|p| p.trim().is_empty()) {
            return Err(Error::invalid("password cannot be an empty string"));
        }
        if change.role.as_deref() == Some("") {
            return Err(Error::invalid("If role is specified, it cannot be empty."));
        }
        let hash = match change.password {
            Some(password) => Some(hash_off_the_async_threads(password).await?),
            None => None,
        };
        let _serial = self.changing.lock().await;
        let mut record = Object::default();
        record.insert("username".into(), change.username.clone().into());
        if let Some(name) = &change.role {
            let role = self
                .role_by_name(name)?
                .ok_or_else(|| Error::Missing(format!("Update failed.  Requested '{name}' role not found.")))?;
            record.insert("role".into(), role_id(&role).into());
        }
        if let Some(hash) = hash {
            record.insert("password".into(), hash.into());
        }
        if let Some(active) = change.active {
            record.insert("active".into(), Value::Bool(active));
        }
        if change.role.is_some() || change.active == Some(false) {
            let changed = |mut user: Object| {
                if user.get("username").and_then(Value::as_str) == Some(change.username.as_str()) {
                    user.extend(record.iter().filter(|(k, _)| *k != "password").map(|(k, v)| (k.clone(), v.clone())));
                }
                Some(user)
            };
            self.keep_a_super_user(changed, |_| {})?;
        }
        let summary = self.system.table(USER_TABLE)?.update(&Context::system(), vec![record]).await?;
        self.forget_logins();
        Ok(summary)
    }

    /// Removes a user; 404 when there is none. A user cannot drop themselves (the
    /// last super user could otherwise lock everyone out).
    pub async fn drop_user(&self, ctx: &Context, username: &str) -> Result<()> {
        require_super_user(ctx)?;
        if username.is_empty() {
            return Err(Error::invalid("Username can't be blank"));
        }
        if username == ctx.username() {
            return Err(Error::invalid(format!("User {username} cannot drop themselves")));
        }
        let _serial = self.changing.lock().await;
        let others = |user: Object| (user.get("username").and_then(Value::as_str) != Some(username)).then_some(user);
        self.keep_a_super_user(others, |_| {})?;
        let summary = self.system.table(USER_TABLE)?.delete(&Context::system(), vec![Value::from(username)]).await?;
        if summary.deleted.is_empty() {
            return Err(Error::Missing(format!("User {username} does not exist")));
        }
        self.end_sessions_of(username).await?;
        self.forget_logins();
        Ok(())
    }

    /// Every user, without secrets, each with its role record in place of the id.
    pub fn list_users(&self, ctx: &Context) -> Result<Vec<Object>> {
        require_super_user(ctx)?;
        let roles = self.all(ROLE_TABLE)?;
        let mut users = self.all(USER_TABLE)?;
        for user in &mut users {
            expand_role(user, &roles);
        }
        Ok(users)
    }

    /// The requesting user, without secrets, with its role record.
    pub fn user_info(&self, ctx: &Context) -> Result<Object> {
        let mut user = match self.user_record(ctx.username())? {
            Some(record) => record,
            // The server's own identity (a local request under authorizeLocal).
            None => {
                let mut own = Object::default();
                own.insert("username".into(), ctx.username().into());
                own.insert("active".into(), Value::Bool(true));
                own.insert("role".into(), ctx.user.role.name.clone().into());
                own
            }
        };
        let roles = self.all(ROLE_TABLE)?;
        expand_role(&mut user, &roles);
        Ok(user)
    }

    /// Creates a role after validating its permission document against `catalog`;
    /// returns it as stored. 409 when the name is taken.
    pub async fn add_role(&self, ctx: &Context, catalog: &dyn CatalogView, role: NewRole) -> Result<Object> {
        require_super_user(ctx)?;
        let id = role.id.clone().unwrap_or_else(|| role.role.clone());
        check_role_fields(Some(&role.role), &id, &role.permission, catalog)?;
        let _serial = self.changing.lock().await;
        if self.role_by_name(&role.role)?.is_some() {
            return Err(Error::Conflict(format!("A role with name '{}' already exists", role.role)));
        }
        let mut record = Object::default();
        record.insert("role".into(), role.role.clone().into());
        record.insert("permission".into(), role.permission);
        record.insert("id".into(), id.clone().into());
        let summary = self.system.table(ROLE_TABLE)?.insert(&Context::system(), vec![record.clone()]).await?;
        if summary.written.is_empty() {
            return Err(Error::Conflict(format!("A role with id '{id}' already exists")));
        }
        self.forget_logins();
        Ok(record)
    }

    /// Replaces a role's permission document (and name); 400 "Invalid role id" when
    /// there is no such role, 409 when another role has the new name (Harper lets
    /// two roles share one, after which a user's role by name is either). Returns
    /// the role as stored.
    pub async fn alter_role(&self, ctx: &Context, catalog: &dyn CatalogView, change: RoleChange) -> Result<Object> {
        require_super_user(ctx)?;
        check_role_fields(change.role.as_deref(), &change.id, &change.permission, catalog)?;
        let _serial = self.changing.lock().await;
        if let Some(name) = &change.role
            && let Some(other) = self.role_by_name(name)?
            && other.get("id").and_then(Value::as_str) != Some(change.id.as_str())
        {
            return Err(Error::Conflict(format!("A role with name '{name}' already exists")));
        }
        let mut record = Object::default();
        record.insert("id".into(), change.id.clone().into());
        if let Some(name) = &change.role {
            record.insert("role".into(), name.clone().into());
        }
        let changed = |role: &mut Object| {
            if role.get("id").and_then(Value::as_str) == Some(change.id.as_str()) {
                role.insert("permission".into(), change.permission.clone());
            }
        };
        self.keep_a_super_user(Some, changed)?;
        record.insert("permission".into(), change.permission);
        let table = self.system.table(ROLE_TABLE)?;
        let summary = table.update(&Context::system(), vec![record]).await?;
        if summary.written.is_empty() {
            return Err(Error::invalid("Invalid role id"));
        }
        self.forget_logins();
        let stored = table.get_many(&Context::system(), &[Value::from(change.id.as_str())], &Select::Raw)?.pop();
        stored.ok_or_else(|| Error::invalid("Invalid role id"))
    }

    /// Removes a role no active user has; returns its name. 404 when unknown, 409
    /// while an active user holds it.
    pub async fn drop_role(&self, ctx: &Context, id: &str) -> Result<String> {
        require_super_user(ctx)?;
        if id.is_empty() {
            return Err(Error::invalid("Id can't be blank"));
        }
        let _serial = self.changing.lock().await;
        let table = self.system.table(ROLE_TABLE)?;
        let Some(role) = table.get_many(&Context::system(), &[Value::from(id)], &Select::Raw)?.pop() else {
            return Err(Error::Missing("Role not found".into()));
        };
        let name = role.get("role").and_then(Value::as_str).unwrap_or(id).to_string();
        let holders = self.all(USER_TABLE)?;
        let held = holders
            .iter()
            .any(|u| u.get("role").and_then(Value::as_str) == Some(id) && u.get("active") != Some(&Value::Bool(false)));
        if held {
            return Err(Error::Conflict(format!("Cannot drop role {name} as it has active user(s) tied to this role")));
        }
        table.delete(&Context::system(), vec![Value::from(id)]).await?;
        self.forget_logins();
        Ok(name)
    }

    /// Refuses a change that would leave no active user with a super-user role
    /// where there was one: nobody could then manage users, roles or the server,
    /// and a restart does not make a new admin while any user exists. `user` and
    /// `role` apply the change to each user and role record as stored (a user
    /// made `None` is dropped). A store that has no such user already is not
    /// made worse by any change, so none is refused for it.
    fn keep_a_super_user(&self, user: impl Fn(Object) -> Option<Object>, role: impl Fn(&mut Object)) -> Result<()> {
        let (users, roles) = (self.all(USER_TABLE)?, self.all(ROLE_TABLE)?);
        let before = has_active_super_user(&users, &roles);
        let mut changed_roles = roles;
        changed_roles.iter_mut().for_each(role);
        let changed_users: Vec<Object> = users.into_iter().filter_map(user).collect();
        if before && !has_active_super_user(&changed_users, &changed_roles) {
            return Err(Error::invalid("This change would leave no active user with a super_user role"));
        }
        Ok(())
    }

    /// Every role record.
    pub fn list_roles(&self, ctx: &Context) -> Result<Vec<Object>> {
        require_super_user(ctx)?;
        self.all(ROLE_TABLE)
    }

    /// The role whose `role` (name) is `name`, or whose id is (roles made before
    /// names and ids could differ).
    fn role_by_name(&self, name: &str) -> Result<Option<Object>> {
        let table = self.system.table(ROLE_TABLE)?;
        let query = Query {
            conditions: vec![Condition::Compare {
                attribute: "role".into(),
                comparator: Comparator::Equals,
                value: Value::from(name),
            }],
            limit: Some(1),
            ..Default::default()
        };
        let mut found = None;
        table.search(&Context::system(), query)?.run(&mut |value| {
            if let Value::Object(record) = value {
                found = Some(record);
            }
            ControlFlow::Break(())
        })?;
        match found {
            Some(role) => Ok(Some(role)),
            None => Ok(table.get_many(&Context::system(), &[Value::from(name)], &Select::Raw)?.pop()),
        }
    }

    /// Every record of a system table, secrets removed.
    fn all(&self, table: &str) -> Result<Vec<Object>> {
        let mut out = Vec::new();
        self.system.table(table)?.search(&Context::system(), Query::default())?.run(&mut |value| {
            if let Value::Object(mut record) = value {
                record.retain(|k, _| !SECRET.contains(&k.as_str()));
                out.push(record);
            }
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }
}

/// Whether any of `users` is active with a role of `roles` that is a super user's.
fn has_active_super_user(users: &[Object], roles: &[Object]) -> bool {
    let super_roles: HashSet<String> = roles
        .iter()
        .filter(|r| matches!(r.get("permission"), Some(Value::Object(p)) if p.get("super_user") == Some(&Value::Bool(true))))
        .map(role_id)
        .collect();
    users.iter().any(|u| {
        u.get("active") != Some(&Value::Bool(false))
            && u.get("role").and_then(Value::as_str).is_some_and(|r| super_roles.contains(r))
    })
}

fn role_id(role: &Object) -> String {
    role.get("id").and_then(Value::as_str).unwrap_or_default().to_string()
}

/// Replaces a user's role id by the role record, and removes its secrets.
fn expand_role(user: &mut Object, roles: &[Object]) {
    user.retain(|k, _| !SECRET.contains(&k.as_str()));
    let Some(id) = user.get("role").and_then(Value::as_str).map(str::to_string) else { return };
    if let Some(role) = roles.iter().find(|r| r.get("id").and_then(Value::as_str) == Some(id.as_str())) {
        user.insert("role".into(), Value::Object(role.clone()));
    }
}

/// The name, id and permission checks `add_role` and `alter_role` share.
fn check_role_fields(name: Option<&str>, id: &str, permission: &Value, catalog: &dyn CatalogView) -> Result<()> {
    let mut errors = validate_permission(permission, catalog);
    if name.is_some_and(|n| !valid_name(n)) {
        errors.main.insert(0, "Role is invalid".into());
    }
    if !valid_name(id) {
        errors.main.insert(0, "Id is invalid".into());
    }
    if errors.is_empty() { Ok(()) } else { Err(Error::InvalidPermissions(Box::new(errors))) }
}

/// An argon2id hash of `password` (tens of milliseconds), made on the blocking pool
/// before any lock is taken.
async fn hash_off_the_async_threads(password: String) -> Result<String> {
    crate::task::blocking(move || hash_password(&password)).await
}
