//! The user and role types.

use crate::value::Value;

/// A role: a name and its permission document (Harper's shape).
#[derive(Debug, Clone, PartialEq)]
pub struct Role {
    /// The role's id and name.
    pub name: String,
    /// Whether the role may do everything.
    pub super_user: bool,
    /// The full permission document, as stored.
    pub permission: Value,
}

/// An authenticated user.
#[derive(Debug, Clone, PartialEq)]
pub struct User {
    /// The login name.
    pub username: String,
    /// The user's role.
    pub role: Role,
    /// Whether the user may log in.
    pub active: bool,
}

impl User {
    /// The server's own identity, used for bootstrap work.
    pub fn system() -> Self {
        User {
            username: "lyre".to_string(),
            role: Role { name: "super_user".to_string(), super_user: true, permission: Value::Null },
            active: true,
        }
    }

    /// Whether the user is a super user.
    pub fn is_super_user(&self) -> bool {
        self.role.super_user
    }
}
