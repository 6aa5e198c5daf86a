//! The user and role types.

use std::sync::Arc;

use crate::access::permission::Permissions;
use crate::value::Value;

/// A role: a name, its permission document as stored (Harper's shape), and that
/// document read into [`Permissions`] once, for the checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Role {
    /// The role's id.
    pub name: String,
    /// The full permission document, as stored.
    pub permission: Value,
    /// The document, typed.
    pub permissions: Arc<Permissions>,
}

impl Role {
    /// A role named `name` with this permission document.
    pub fn new(name: impl Into<String>, permission: Value) -> Self {
        let permissions = Arc::new(Permissions::from_document(&permission));
        Self { name: name.into(), permission, permissions }
    }
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
    /// The server's own identity, used for bootstrap work, and the identity of a
    /// credential-less loopback request under `authorizeLocal`: a super user.
    pub fn system() -> Self {
        let mut permission = crate::value::Object::new();
        permission.insert("super_user".into(), Value::Bool(true));
        User { username: "lyre".to_string(), role: Role::new("super_user", Value::Object(permission)), active: true }
    }

    /// Whether the user is a super user.
    pub fn is_super_user(&self) -> bool {
        self.role.permissions.super_user
    }
}
