//! The one place a permission is decided.

use crate::access::Context;
use crate::error::{Error, Result};
use crate::value::Value;

/// What a request wants to do to a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read records.
    Read,
    /// Create records.
    Insert,
    /// Change records.
    Update,
    /// Remove records.
    Delete,
}

impl Action {
    fn key(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Insert => "insert",
            Action::Update => "update",
            Action::Delete => "delete",
        }
    }
}

/// Fails unless the user is a super user (schema changes, system operations).
pub fn require_super_user(ctx: &Context) -> Result<()> {
    if ctx.user.is_super_user() { Ok(()) } else { Err(Error::Forbidden) }
}

/// Fails unless the user may do `action` on `database.table`, following Harper's role
/// document: `permission[database].tables[table][action] == true`.
pub fn check_table(ctx: &Context, database: &str, table: &str, action: Action) -> Result<()> {
    if ctx.user.is_super_user() {
        return Ok(());
    }
    let allowed = match &ctx.user.role.permission {
        Value::Object(perm) => perm
            .get(database)
            .and_then(|db| match db {
                Value::Object(db) => db.get("tables"),
                _ => None,
            })
            .and_then(|tables| match tables {
                Value::Object(tables) => tables.get(table),
                _ => None,
            })
            .and_then(|t| match t {
                Value::Object(t) => t.get(action.key()),
                _ => None,
            })
            .is_some_and(|v| *v == Value::Bool(true)),
        _ => false,
    };
    if allowed { Ok(()) } else { Err(Error::Forbidden) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{Role, User};
    use std::sync::Arc;

    fn ctx(permission: &str) -> Context {
        let permission: Value = serde_json::from_str(permission).unwrap();
        Context::new(Arc::new(User {
            username: "u".into(),
            role: Role { name: "r".into(), super_user: false, permission },
            active: true,
        }))
    }

    #[test]
    fn role_documents_grant_per_table_actions() {
        let c = ctx(r#"{"dev":{"tables":{"dog":{"read":true,"insert":false}}}}"#);
        assert!(check_table(&c, "dev", "dog", Action::Read).is_ok());
        assert!(check_table(&c, "dev", "dog", Action::Insert).is_err());
        assert!(check_table(&c, "dev", "cat", Action::Read).is_err());
        assert!(require_super_user(&c).is_err());
        assert!(require_super_user(&Context::system()).is_ok());
    }
}
