//! Who is asking and what they may do: the user and role types, the request
//! [`Context`] every core operation takes, a role's typed [`Permissions`], and the
//! one place a permission is decided (`check.rs`).
//!
//! The store of users and roles (in the `system` database) is `users/`, above the
//! table layer it is built on.

mod check;
mod context;
mod permission;
mod user;
mod validate;

pub use crate::error::Denial;
pub use crate::error::PermissionErrors;
pub use check::{Action, TableAccess, check_table, require_structure, require_super_user, require_super_user_for};
pub use context::Context;
pub use permission::{AttributeGrant, Permissions, RESERVED_KEYS, Structure, TableGrant};
pub use user::{Role, User};
pub use validate::{CatalogView, validate_permission};
