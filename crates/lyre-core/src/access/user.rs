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
    /// A number that changes when the user's password changes or the user is made
    /// again under the same name (a fresh salted hash either way): tokens carry it,
    /// so such a change ends every token issued before it.
    pub login_epoch: u64,
}

impl User {
    /// The server's own identity, used for bootstrap work, and the identity of a
    /// credential-less loopback request under `authorizeLocal`: a super user.
    pub fn system() -> Self {
        let mut permission = crate::value::Object::default();
        permission.insert("super_user".into(), Value::Bool(true));
        User {
            username: "lyre".to_string(),
            role: Role::new("super_user", Value::Object(permission)),
            active: true,
            login_epoch: 0,
        }
    }

    /// The login epoch of a stored password hash (see [`User::login_epoch`]).
    pub fn login_epoch_of(password_hash: &str) -> u64 {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(password_hash.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        // Below 2^53, so it survives a JSON number in a token unchanged.
        u64::from_be_bytes(first) >> 11
    }

    /// Whether the user is a super user.
    pub fn is_super_user(&self) -> bool {
        self.role.permissions.super_user
    }
}
