//! Who is asking and what they may do: the user and role types, the request
//! [`Context`] every core operation takes, and the one place a permission is decided.
//!
//! The store of users and roles (in the `system` database) is `users.rs`, above the
//! table layer it is built on.

mod check;
mod context;
mod user;

pub use check::{Action, check_table, require_super_user};
pub use context::Context;
pub use user::{Role, User};
